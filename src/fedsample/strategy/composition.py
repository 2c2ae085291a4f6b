"""What a strategy is made of: its parts and switches, as a frozen record (:class:`Composition`).

:class:`~fedsample.strategy.Strategy` is this record checked by the compatibility rules at construction
(:mod:`fedsample.strategy.rules`); the rules, the round (:mod:`fedsample.strategy.round`) and its record
(:mod:`fedsample.strategy.record`) read a strategy through this type, so none of them imports the class above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedsample.parts import Aggregator, ClientSampler, DataSampler, LocalSolver, ServerOptimizer, SizeReporting, UpdatePrivacy
from fedsample.sampling.clients import AllClients
from fedsample.sampling.data import FullData
from fedsample.training.aggregate import WeightedMean
from fedsample.training.local import LocalSGD
from fedsample.training.schedule import Schedule
from fedsample.training.server import ServerSGD

__all__ = ["Composition"]


@dataclass(frozen=True)
class Composition:
    """The parts of a strategy and its switches (each documented on :class:`~fedsample.strategy.Strategy`), unchecked."""

    clients: ClientSampler = field(default_factory=AllClients)
    data: DataSampler = field(default_factory=FullData)
    local: LocalSolver = field(default_factory=LocalSGD)
    aggregate: Aggregator = field(default_factory=lambda: WeightedMean("uniform"))
    server: ServerOptimizer = field(default_factory=ServerSGD)
    sizes: SizeReporting | None = None
    name: str = "strategy"
    pooled: bool = False
    noise: UpdatePrivacy | None = None
    secure_sum: bool = False
    schedule: Schedule | None = None
