"""fedsample: sampling for federated learning, with honest probabilities and private size reports.

Every submodule loads on first use (``fs.privacy``, ``fs.privacy.accounting``, ``fs.rounds``, ...), so
``import fedsample`` stays cheap, a run pays only for what it uses, and the public face does not depend on what
was imported before.
"""

from __future__ import annotations

from fedsample.runtime import lazy

__version__ = "0.1.0"

_NAMES = {"simulate": "simulation", "diagnose": "diagnostics", "SimulationResult": "simulation", "Strategy": "strategy"}

__all__ = [
    "SimulationResult", "Strategy", "callbacks", "client", "data", "diagnose", "diagnostics", "evaluation",
    "experiments", "federation", "messages", "models", "parts", "privacy", "recipes", "reproduction", "rng", "rounds", "runtime", "sampling",
    "simulate", "simulation", "strategy", "tracking", "training",
]

__getattr__, __dir__ = lazy.submodules(__name__, __path__, _NAMES)
