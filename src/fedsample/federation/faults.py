"""The failure model: a wrapper that makes any federation lose clients (docs/reliability.md).

``Faulty(inner, dropout={"report_size": p, "probe": p, "train": p}, straggler=Straggler(...), seed=s)``
answers ``run`` like ``inner`` but, in each phase, each asked client independently

- drops out with the phase's probability (it never receives the request), or
- is a straggler: its response time, exponential with mean ``Straggler.mean``, exceeds the deadline,

and then its slot holds :class:`fedsample.rounds.Failed`. Every decision derives from (seed, round,
client, "fault:" + phase) through :mod:`fedsample.rng`, so the same seed loses the same clients on every
backend and in every order. A client procedure that raises is a failed client too: when ``inner.run``
raises, the clients are asked again one by one and those that raise get ``Failed`` with the error.
Because it wraps the federation's one verb, it applies to every federation without changes to them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fedsample import checks
from fedsample.federation.base import Federation, client_states_of, load_client_states_into
from fedsample.messages import ClientState, NoSamples, PerClient, Shared, payloads_for, unplanned
from fedsample.rng import CohortRandom
from fedsample.rounds import Failed, FederationLost, Replies, ReplyList, is_failed, replies_of

__all__ = ["DROPPED", "FaultModel", "Faulty", "STRAGGLED", "Straggler", "lost_to_faults", "miss_probability", "with_faults"]

PHASES = ("report_size", "probe", "train")
"""The phases a dropout probability may name: the phase each request declares (:class:`fedsample.messages.Procedure`;
a :class:`~fedsample.messages.TrainHeld` and a :class:`~fedsample.messages.HeldRequest` are both a training phase, so
one client's decision is the same in both: a client that trained and keeps its update sends it when asked)."""
DROPPED = "dropped out"
"""The reason a :class:`~fedsample.rounds.Failed` reply gives when the client dropped out in its phase."""
STRAGGLED = "straggler: "
"""How the reason of a straggler's :class:`~fedsample.rounds.Failed` reply begins (its response time and the
deadline follow)."""


@dataclass(frozen=True)
@checks.constrained(
    deadline=checks.Param(checks.POSITIVE, label="straggler deadline"),
    mean=checks.Param(checks.POSITIVE, label="straggler mean response time"),
)
class Straggler:
    """Response times ~ Exponential(mean); a client slower than ``deadline`` misses the round's phase.
    The miss probability is exp(-deadline / mean)."""

    deadline: float
    mean: float = 1.0

    def times(self, uniforms: np.ndarray) -> np.ndarray:
        """Inverse-CDF response times from uniforms in [0, 1)."""
        times: np.ndarray = -self.mean * np.log1p(-uniforms)
        return times


@dataclass(frozen=True)
@checks.constrained(
    dropout=checks.InstanceOf(dict, "a table of dropout probabilities by phase"),
    straggler=[checks.InstanceOf(Straggler, "a Straggler"), None],
)
class FaultModel:
    """Per-phase dropout probabilities, an optional straggler deadline, and the seed of the decisions."""

    dropout: dict[str, float] = field(default_factory=dict)
    straggler: Straggler | None = None

    def __post_init__(self) -> None:
        for phase, p in self.dropout.items():
            checks.check("dropout", phase, checks.Options(*PHASES), owner="FaultModel", label="dropout phase")
            checks.check("dropout", p, checks.reals(0, 1, "[)"), owner="FaultModel", label=f"dropout probability of {phase}")

    def active(self, phase: str) -> bool:
        """Whether clients can fail in ``phase`` (otherwise no decision is drawn)."""
        return float(self.dropout.get(phase, 0.0)) > 0 or self.straggler is not None

    def decide(self, phase: str, ids: np.ndarray, seed: int, round: int) -> dict[int, str]:
        """Position -> the reason that asked client fails in this phase (the others answer)."""
        if not self.active(phase) or len(ids) == 0:
            return {}
        u = CohortRandom(seed, round, ids, f"fault:{phase}").columns(2)
        dropped = u[:, 0] < float(self.dropout.get(phase, 0.0))
        reasons = {int(i): DROPPED for i in np.flatnonzero(dropped)}
        if self.straggler is not None:
            times = self.straggler.times(u[:, 1])
            deadline = self.straggler.deadline
            for i in np.flatnonzero(~dropped & (times > deadline)).tolist():
                reasons[i] = f"{STRAGGLED}answered after {times[i]:.3g} > deadline {deadline:g}"
        return reasons


class Faulty(Federation):
    """A federation that fails clients as ``model`` says and turns a raising client into ``Failed``. It keeps
    whatever client states the inner federation keeps (declared delegation)."""

    def __init__(self, inner: Federation, model: FaultModel | None = None, seed: int = 0) -> None:
        self.inner = inner
        self.model = model or FaultModel()
        self.seed = int(seed)

    @property
    def num_clients(self) -> int:
        return self.inner.num_clients

    def client_states(self) -> dict[int, ClientState]:
        return client_states_of(self.inner)

    def load_client_states(self, states: dict[int, ClientState]) -> None:
        load_client_states_into(self.inner, states)

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        ids = np.asarray(client_ids, dtype=np.int64)
        sent = payloads_for(request, len(ids))
        procedure = sent.procedure.name
        reasons = self.model.decide(sent.procedure.phase, ids, self.seed, round)
        if not reasons:  # nobody fails by the model: the inner answer as it is (its fused paths intact)
            try:
                return replies_of(self.inner.run(ids, request, round))
            except FederationLost:
                raise
            except Exception:  # noqa: BLE001 - a client raised: find which, one at a time
                return self._one_by_one(procedure, ids, np.arange(len(ids)), sent, round, {})
        failed = {i: Failed(int(ids[i]), procedure, r) for i, r in reasons.items()}
        answering = np.ones(len(ids), dtype=bool)
        answering[np.fromiter(failed, dtype=np.int64, count=len(failed))] = False
        live = np.flatnonzero(answering)
        if len(live) == 0:
            return Replies([failed[i] for i in range(len(ids))], failed=failed)
        try:
            got = replies_of(self.inner.run(ids[live], unplanned(sent.take(live)), round))  # a sub-cohort: no plan
        except FederationLost:
            raise
        except Exception:  # noqa: BLE001
            return self._one_by_one(procedure, ids, live, sent, round, failed)
        if len(got) != len(live):
            raise RuntimeError(f"the federation answered {len(got)} replies to {procedure!r} for {len(live)} clients")
        return got.widened(live, len(ids), failed)

    def _one_by_one(self, procedure: str, ids: np.ndarray, live: np.ndarray, sent: PerClient[object] | Shared[object], round: int,
                    failed: dict[int, Failed]) -> Replies:
        """Ask each live client alone; a client whose procedure raises gets ``Failed`` with the error. If every
        client raises, the error is not a client's fault (a bug, a bad payload): it is raised."""
        replies: list[object] = [failed.get(i) for i in range(len(ids))]
        errors = []
        for i in live.tolist():
            one = unplanned(sent.take([i]))  # one client: no planned sum of the cohort
            try:
                replies[i] = self.inner.run(ids[i : i + 1], one, round)[0]
            except FederationLost:
                raise
            except Exception as error:  # noqa: BLE001
                errors.append(error)
                replies[i] = Failed(int(ids[i]), procedure, f"raised {type(error).__name__}: {error}"[:200], isinstance(error, NoSamples))
        if len(errors) == len(live):
            raise errors[0]
        return Replies(replies)


def with_faults(federation: Federation, model: FaultModel | None, seed: int) -> Faulty:
    """``federation`` guarded: failing clients (``model``) and raising clients become ``Failed`` replies."""
    return federation if isinstance(federation, Faulty) else Faulty(federation, model, seed)


def miss_probability(model: FaultModel, phase: str) -> float:
    """P(a client fails in ``phase``) under ``model``: 1 - (1 - p)(1 - exp(-deadline/mean))."""
    p = float(model.dropout.get(phase, 0.0))
    late = math.exp(-model.straggler.deadline / model.straggler.mean) if model.straggler else 0.0
    return 1 - (1 - p) * (1 - late)


def lost_to_faults(reply: object) -> bool:
    """Whether ``reply`` is a client the failure model lost (dropped out, or a straggler), not one that raised or
    answered something unusable."""
    return is_failed(reply) and (reply.reason == DROPPED or reply.reason.startswith(STRAGGLED))
