"""Round types shared by every layer: the cohort, the round context, and the replies and their status.

A leaf module: it imports only :mod:`fedsample.rng` (itself a leaf), so that sampling/, training/ and
the federations use these types without importing :mod:`fedsample.strategy`.

A federation answers ``run(procedure, ids, payload, round)`` with one reply per asked client, in order.
A reply is the procedure's report, or :class:`Failed` when the client did not answer in time, raised,
or sent something the server rejected; a failed client is left out of that round and named in the
round's record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fedsample.rng import SERVER, generator


@dataclass(frozen=True)
class Failed:
    """A client's reply that is missing or rejected in ``phase`` (a procedure name), with the reason."""

    client: int
    phase: str
    reason: str

    def record(self) -> dict:
        """The entry in a round's ``failed`` list."""
        return {"client": self.client, "phase": self.phase, "reason": self.reason}


class FederationLost(RuntimeError):
    """The federation itself failed (e.g. a worker process holding clients died): not one client's failure,
    so it is never turned into :class:`Failed`; the run stops and ``resume`` continues from the last checkpoint."""


def is_failed(reply: Any) -> bool:
    """True for a :class:`Failed` reply (Failed is final: not meant to be subclassed)."""
    return reply.__class__ is Failed


def answered(replies: Sequence[Any]) -> np.ndarray:
    """Positions of the replies that carry an update: neither :class:`Failed`, None, nor empty (a reply that
    took no step: its plan drew nothing and its update is zero)."""
    return np.array([i for i, r in enumerate(replies) if carries_update(r)], dtype=np.int64)


def carries_update(reply: Any) -> bool:
    """A reply from at least one local step (not :class:`Failed`, not None, not an empty reply)."""
    return reply is not None and reply.__class__ is not Failed and getattr(reply, "steps", 1) != 0  # < 0: screened, rejected


def failed_positions(replies: Sequence[Any], received: np.ndarray | None = None) -> dict[int, Failed]:
    """Position -> reply for the :class:`Failed` replies. With ``received`` (the positions a federation says
    hold updates) and every other slot None, only those positions are looked at; otherwise a C-level scan of
    the reply types comes first, so a large cohort without failures costs no Python loop."""
    if received is not None and isinstance(replies, list) and len(replies) - replies.count(None) == len(received):
        return {i: replies[i] for i in np.asarray(received).tolist() if replies[i].__class__ is Failed}
    if Failed not in set(map(type, replies)):
        return {}
    return {i: r for i, r in enumerate(replies) if r.__class__ is Failed}


@dataclass(frozen=True)
class Cohort:
    """Chosen client ids (unique, ascending), their inclusion probabilities pi_k, how many times each was
    drawn (with-replacement designs), the population size N, and optional stratum labels."""

    ids: np.ndarray
    inclusion: np.ndarray
    population: int
    multiplicity: np.ndarray | None = None
    strata: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.multiplicity is None:
            object.__setattr__(self, "multiplicity", np.ones(len(self.ids), dtype=np.int64))

    @classmethod
    def from_sample(cls, sample: Any, population: int, **extra) -> "Cohort":
        """From a :class:`fedsample.sampling.design.Sample` (ids, inclusion, multiplicity)."""
        return cls(sample.ids, sample.inclusion, population, sample.multiplicity, **extra)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class RoundContext:
    """What the parts of a strategy may use in one round: the federation, the global parameters, the
    server's randomness for this round, persistent strategy state, size information and a log.

    ``response_rate`` is the fraction of the asked clients whose training reply was valid in this round
    (1 when nobody failed); aggregators that weight by inclusion probabilities divide by it (the
    response-rate adjustment of docs/reliability.md)."""

    federation: Any
    params: Any
    round: int
    seed: int
    state: dict
    log: dict = field(default_factory=dict)
    sizes: Any = None
    response_rate: float = 1.0

    @property
    def num_clients(self) -> int:
        return self.federation.num_clients

    def rng(self, purpose: str) -> np.random.Generator:
        """The server's generator for ``purpose`` in this round (derived from seed and round)."""
        return generator(self.seed, self.round, SERVER, purpose)

    def require_sizes(self, exact: bool = False) -> Any:
        if self.sizes is None or (exact and not self.sizes.exact):
            raise RuntimeError("this part needs size reports the strategy did not collect")
        return self.sizes


class Replies(list):
    """One reply per asked client, in order, that keeps an engine's fused weighted sum of updates.

    ``source`` is a reply list of a sub-cohort (e.g. only the clients that were reachable) that may offer
    ``weighted_update_sum(positions, weights)`` (the vectorized engine's one-gradient cohorts) and
    ``received_positions()``; ``source_position[i]`` is the position in ``source`` of this list's entry i
    (-1: not in ``source``). Slots holding :class:`Failed` or None never enter a sum. ``failed`` maps the
    positions that hold :class:`Failed` to it (found by a scan when not given); :meth:`reject` keeps it."""

    def __init__(
        self, items: Sequence[Any], source: Any = None, source_position: np.ndarray | None = None,
        failed: dict[int, Failed] | None = None,
    ) -> None:
        super().__init__(items)
        self.source = source
        self.source_position = source_position
        self.failed = failed if failed is not None else failed_positions(self)

    def reject(self, position: int, failure: Failed) -> None:
        """Replace the reply at ``position`` by ``failure``."""
        self[position] = failure
        self.failed[position] = failure

    def failures(self) -> list[Failed]:
        """The Failed replies, in cohort order."""
        return [self.failed[i] for i in sorted(self.failed)]

    def candidates(self) -> np.ndarray:
        """Positions that may hold an update: from the source's ``received_positions`` where it knows them
        (the vectorized engine: only the clients that drew samples), else every position."""
        known = getattr(self.source, "received_positions", None)
        if known is None or self.source_position is None:
            return np.arange(len(self))
        inverse = np.full(len(self.source), -1, dtype=np.int64)
        present = np.flatnonzero(self.source_position >= 0)
        inverse[self.source_position[present]] = present
        mapped = inverse[np.asarray(known(), dtype=np.int64)]
        return np.sort(mapped[mapped >= 0])

    def received_positions(self) -> np.ndarray:
        """Positions of the clients that sent an update (neither Failed nor None)."""
        return np.array([i for i in self.candidates().tolist() if i not in self.failed and carries_update(self[i])], dtype=np.int64)

    @property
    def weighted_update_sum(self) -> Any:
        """``sum_i w_i * update_{positions_i}`` computed by the source's fused path, or None without one."""
        fused = getattr(self.source, "weighted_update_sum", None)
        if fused is None:
            return None
        return lambda positions, weights: fused(self.source_position[np.asarray(positions, dtype=np.int64)], weights)
