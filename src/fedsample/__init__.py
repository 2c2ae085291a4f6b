"""fedsample: sampling for federated learning, with honest probabilities and private size reports.

Submodules load on first use, so ``import fedsample`` stays cheap and a run pays only for what it uses.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = {
    "client", "data", "diagnostics", "evaluation", "experiments", "federation", "models", "privacy", "recipes", "rng",
    "sampling", "simulation", "sizes", "strategy", "training",
}
_NAMES = {"simulate": "fedsample.simulation", "diagnose": "fedsample.diagnostics", "SimulationResult": "fedsample.simulation", "Strategy": "fedsample.strategy"}

__all__ = sorted(_SUBMODULES | set(_NAMES) | {"__version__"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"fedsample.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'fedsample' has no attribute {name!r}")
