"""A federation that answers ``train`` with the first-order (linearised) local update, as a combination of
per-sample gradients at the global model, and counts what each round costs.

For a local solver of SGD type (``LocalSGD`` and its subclasses) with every gradient taken at the global
model w, the update is w - w_local = lr * sum_t a_t * sum_{b in batch_t} v_b g_b, with v_b the batch weight
(1/B times the plan's per-sample scale) and a_t the weight the solver's dynamics give step t's gradient
(1 for plain SGD; momentum and the proximal term, see :func:`fedsample.training.local.effective_steps`).
This federation returns ``update / lr``: exact for one local step, the first-order term in lr for more (client
drift, the curvature between local steps, is not part of it; a weight-decay term does not depend on the
sample and is left out). For ``OneGradient`` (FedSampling) the update is already linear: G_c = sum v_s g_s.

Size reports and probes are the real procedures (the vectorized engine's, with the same counter-based
streams); probes at the fixed model do not depend on the round and are computed once per client and request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsample.messages import LocalSample, PerClient, ProbeRequest, Shared, TrainPayload, TrainReport, payloads_for
from fedsample.data.types import FederatedData
from fedsample.diagnostics.gradients import GradientBasis
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.rng import client_rng
from fedsample.rounds import Replies, ReplyList
from fedsample.sampling.data import AllSamples, BernoulliSamples
from fedsample.training.functional import Params
from fedsample.training.local import LocalSGD, OneGradient, effective_steps

SIZE_REPORT_BYTES = 8
PROBE_SCALARS_BYTES = 16


def step_weights(steps: int, momentum: float, lr_mu: float) -> np.ndarray:
    """a_t for t = 0..steps-1: the total weight of step t's gradient in the linearised update, the impulse
    response S(steps - t) - S(steps - t - 1) of the solver's linear dynamics, S = ``effective_steps``."""
    S = np.array([effective_steps(k, momentum, lr_mu) for k in range(steps + 1)])
    return S[steps - np.arange(steps)] - S[steps - np.arange(steps) - 1]


@dataclass
class RoundCost:
    """What one round asked of the clients: clients contacted, updates received, the rows drawn (one entry
    per drawn sample and client) and the bytes sent up."""

    contacted: set = field(default_factory=set)
    rows: list = field(default_factory=list)
    updates: int = 0
    bytes_up: int = 0


class LinearReports(Replies):
    """The train reports of one cohort, each client's update a combination of per-sample gradients; a linear
    aggregator's ``sum_k w_k Delta_k`` is one product (a fused sum, like the vectorized engine's)."""

    fused = True

    def __init__(self, basis: GradientBasis, clients: int, rows: np.ndarray, member: np.ndarray, coef: np.ndarray,
                 steps: np.ndarray, norm_steps: np.ndarray) -> None:
        super().__init__([None] * clients, failed={})
        self.basis, self.rows, self.member, self.coef = basis, rows, member, coef
        self._received = np.flatnonzero(np.bincount(member, minlength=clients))
        cuts = np.searchsorted(member, np.arange(clients + 1))
        self._cuts = cuts
        for c in self._received.tolist():
            self[c] = _LinearReport(self, c, int(steps[c]), float(norm_steps[c]))

    def received_positions(self) -> np.ndarray:
        return self.without_failed(self._received)

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray) -> Params:
        a = np.zeros(len(self))
        a[np.asarray(positions, dtype=np.int64)] = weights
        a[np.fromiter(self.failed, dtype=np.int64, count=len(self.failed))] = 0.0  # a rejected reply adds nothing
        return {"g": self.basis.combination(self.rows, a[self.member] * self.coef)}

    def update_of(self, position: int) -> Params:
        a, b = self._cuts[position], self._cuts[position + 1]
        return {"g": self.basis.combination(self.rows[a:b], self.coef[a:b])}


class _LinearReport(TrainReport):
    """One client's linearised update, computed when read."""

    def __init__(self, owner: LinearReports, position: int, steps: int, norm_steps: float) -> None:
        self._owner, self._position = owner, position
        self.steps, self.loss, self.norm_steps = steps, 0.0, norm_steps  # no loss is computed here (0.0: a finite reply)

    @property
    def update(self) -> Params:  # type: ignore[override]
        return self._owner.update_of(self._position)


class LinearisedFederation(VectorizedSimulator):
    """The vectorized engine's size reports and data draws, with ``train`` answered by linearised updates in
    ``basis`` (see the module docstring); :attr:`cost` holds the current round's :class:`RoundCost`."""

    def __init__(self, data: FederatedData, module: Any, seed: int, basis: GradientBasis) -> None:
        super().__init__(data, module, seed)
        self.basis = basis
        self.update_bytes = 4 * basis.parameters
        self.cost = RoundCost()
        self._probes: dict[tuple, Any] = {}

    def new_round(self) -> RoundCost:
        """Start counting a new round; returns the finished round's cost."""
        done, self.cost = self.cost, RoundCost()
        return done

    def run(self, procedure: str, client_ids: np.ndarray, payload: Any, round: int) -> ReplyList:
        ids = np.asarray(client_ids, dtype=np.int64)
        self.cost.contacted.update(ids.tolist())
        sent = payloads_for(payload, len(ids))
        if procedure == "probe" and sent.shared is not None:
            replies = self._cached_probes(ids, sent.shared, round)
        else:
            replies = super().run(procedure, ids, payload, round)
        self.cost.bytes_up += self._reply_bytes(procedure, payload, replies)
        return replies

    def _reply_bytes(self, procedure: str, payload: Any, replies: list) -> int:
        if procedure == "report_size":
            return SIZE_REPORT_BYTES * len(replies)
        if procedure == "probe":
            per = PROBE_SCALARS_BYTES + (self.update_bytes if payload.gradient else 0)
            return per * len(replies) + sum(4 * np.size(r.compressed) for r in replies if r.compressed is not None)
        return 0

    def _cached_probes(self, ids: np.ndarray, request: ProbeRequest, round: int) -> Replies:
        """Probe replies at the fixed model, computed once per (client, request options)."""
        key = (request.gradient, request.compression, request.dim, request.projection_seed, request.per_sample, request.data_weights)
        missing = np.array([k for k in ids.tolist() if (k, key) not in self._probes], dtype=np.int64)
        if len(missing):
            for k, reply in zip(missing.tolist(), super().run("probe", missing, request, round)):
                self._probes[(k, key)] = reply
        return Replies([self._probes[(k, key)] for k in ids.tolist()], failed={})

    def train(self, ids: np.ndarray, sent: PerClient | Shared, round: int) -> LinearReports:
        """Every cohort member's linearised update (see the module docstring) as one :class:`LinearReports`."""
        if sent.shared is not None and self._flat_full_batch(sent.shared):
            parts = [self._flat_terms(ids, sent.shared, round)]
        else:
            parts = [self._client_terms(i, int(k), sent.at(i), round) for i, k in enumerate(ids)]
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))  # an empty cohort (Poisson sampling)
        rows, member, coef = (np.concatenate([p[j] for p in parts] + [empty[j]]) for j in range(3))
        steps, norm = np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids))
        for *_, (positions, taken, effective) in parts:
            steps[positions], norm[positions] = taken, effective
        order = np.argsort(member, kind="stable")
        reports = LinearReports(self.basis, len(ids), rows[order], member[order], coef[order], steps, norm)
        self.cost.rows.append(rows)
        self.cost.updates += len(reports.received_positions())
        self.cost.bytes_up += self.update_bytes * len(reports.received_positions())
        return reports

    # --- one client at a time (any plan, any SGD-type solver) ------------------------------------------

    def _client_terms(self, position: int, k: int, payload: TrainPayload, round: int) -> tuple:
        rng = client_rng(self.seed, round, k, "train")
        sample = payload.plan.draw(self.context(k), rng)
        if len(sample) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), (np.array([position]), 0, 0.0)
        solver = payload.solver
        if isinstance(solver, OneGradient):
            norm = solver.K if solver.K is not None else len(sample)
            scale = np.ones(len(sample)) if sample.scale is None else np.asarray(sample.scale, dtype=np.float64)
            rows = self.data.order[self._rows(k, sample.indices)]  # dataset rows, as the gradient basis is indexed
            return rows, np.full(len(rows), position), scale / norm, (np.array([position]), 1, 1.0)
        batches, weights = self._schedule(k, sample, _sgd(solver), rng)
        lr_mu = solver.learning_rate(round) * solver.prox_mu
        a = step_weights(len(batches), solver.momentum, lr_mu)
        rows = self.data.order[np.concatenate(batches)]  # the engine's positions in client order -> dataset rows
        coef = np.concatenate([a_t * w for a_t, w in zip(a, weights)])
        return rows, np.full(len(rows), position), coef, (np.array([position]), len(batches), float(a.sum()))

    # --- a whole cohort in one numpy pass (flat plans, one full batch per step) ----------------------

    def _flat_full_batch(self, payload: TrainPayload) -> bool:
        """True where every client's local update is a fixed multiple of its drawn sample's mean or sum: a
        Bernoulli or all-samples plan with OneGradient, or with an SGD-type solver whose every step takes the
        whole drawn sample (no per-client randomness beyond the draw)."""
        if type(payload.plan) not in (AllSamples, BernoulliSamples):
            return False
        solver = payload.solver
        if isinstance(solver, OneGradient):
            return True
        return type(solver) is LocalSGD and (solver.batch_size is None or solver.batch_size >= int(self.sizes.max()))

    def _flat_terms(self, ids: np.ndarray, payload: TrainPayload, round: int) -> tuple:
        member, local, _ = self._draw_flat(ids, payload.plan, round)
        counts = np.bincount(member, minlength=len(ids)).astype(np.float64)
        rows = self.data.order[self.data.offsets[ids[member]] + local]
        solver = payload.solver
        if isinstance(solver, OneGradient):
            norm = np.full(len(ids), float(solver.K)) if solver.K is not None else np.maximum(counts, 1)
            steps, a = 1, 1.0
        else:
            steps = solver.steps if solver.steps is not None else solver.epochs
            a = effective_steps(steps, solver.momentum, solver.learning_rate(round) * solver.prox_mu)
            norm = np.maximum(counts, 1) / a
        return rows, member, 1.0 / norm[member], (np.arange(len(ids)), steps, a)


def _sgd(solver: Any) -> LocalSGD:
    if not isinstance(solver, LocalSGD):
        raise ValueError(f"diagnose measures OneGradient and LocalSGD-type solvers, not {type(solver).__name__}")
    return solver
