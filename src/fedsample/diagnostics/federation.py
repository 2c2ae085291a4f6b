"""A federation that answers ``train`` with the first-order (linearised) local update, as a combination of
per-sample gradients at the global model, and counts what each round costs.

For a solver that declares its arithmetic (:class:`fedsample.parts.ScheduledSolver`: every solver of
:mod:`fedsample.training.local`) with every gradient taken at the global model w, the update is
w - w_local = lr * sum_t a_t * sum_{b in batch_t} v_b g_b, with v_b the row weights of its schedule (1/B times
the plan's per-sample scale; scale/K for FedSampling's G_c) and a_t the weight its step rule's dynamics give step
t's gradient (:meth:`fedsample.training.local.SGDStep.step_weights`: 1 for plain SGD; momentum and the proximal
term, see :func:`fedsample.training.local.effective_steps`). This federation returns ``update / lr``: exact for
one local step (FedSampling's G_c, whose step has lr = 1), the first-order term in lr for more (client drift,
the curvature between local steps, is not part of it; a weight-decay term does not depend on the sample and is
left out).

Size reports and probes are the real procedures (the vectorized engine's, with the same counter-based
streams); probes at the fixed model do not depend on the round and are computed once per client and request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsample.messages import PerClient, ProbeRequest, Shared, TrainPayload, TrainReport, payloads_for
from fedsample.data.types import FederatedData
from fedsample.diagnostics.gradients import GradientBasis
from fedsample.federation.vectorized import VectorizedSimulator, _group_key
from fedsample.parts import ScheduledSolver
from fedsample.parts import declared as parts_declared
from fedsample.rounds import Replies, ReplyList
from fedsample.training.functional import Params
from fedsample.training.local import SGDStep

SIZE_REPORT_BYTES = 8
PROBE_SCALARS_BYTES = 16


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
                 steps: np.ndarray, norm_steps: np.ndarray, counts: np.ndarray | None = None) -> None:
        super().__init__([None] * clients, failed={})
        self.basis, self.rows, self.member, self.coef = basis, rows, member, coef
        self.counts = counts  # each member's drawn count, where the plan asks the clients for it
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

    def drawn_total(self) -> int:
        """The samples the answering clients drew (the self-normalized FedSampling update's S), where the plan asks
        for the counts."""
        if self.counts is None:
            return super().drawn_total()
        return int(self.counts[self.received_positions()].sum())

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
        """Every cohort member's linearised update (see the module docstring) as one :class:`LinearReports`:
        clients that share a plan and a solver are drawn and scheduled together."""
        groups: dict[tuple, list[int]] = {}
        if sent.shared is None:
            for position in range(len(ids)):
                p = sent.at(position)
                groups.setdefault((_group_key(p.solver), _group_key(p.plan)), []).append(position)
            parts = [self._terms(ids, np.asarray(positions), sent.at(positions[0]), round) for positions in groups.values()]
        else:
            parts = [self._terms(ids, np.arange(len(ids)), sent.shared, round)]
        rows, member, coef, steps, norm = (np.concatenate([p[j] for p in parts]) for j in range(5))
        order = np.argsort(member, kind="stable")
        taken, effective = np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids))
        everyone = np.concatenate([p[5] for p in parts])
        taken[everyone], effective[everyone] = steps, norm
        counts = None
        if all(p[6] is not None for p in parts):  # every plan asks for the drawn counts
            counts = np.zeros(len(ids), dtype=np.int64)
            counts[everyone] = np.concatenate([p[6] for p in parts])
        reports = LinearReports(self.basis, len(ids), rows[order], member[order], coef[order], taken, effective, counts)
        self.cost.rows.append(rows)
        self.cost.updates += len(reports.received_positions())
        self.cost.bytes_up += self.update_bytes * len(reports.received_positions())
        return reports

    def _terms(self, ids: np.ndarray, positions: np.ndarray, payload: TrainPayload, round: int) -> tuple:
        """(dataset rows, cohort member, coefficient) of every schedule entry of the clients at ``positions``, and
        their steps tau_k and a_k: the coefficient of a row used in step t is a_t * weight (the solver's declared
        schedule and step rule, :meth:`~fedsample.training.local.SGDStep.step_weights`)."""
        solver = payload.solver
        if not isinstance(solver, ScheduledSolver):
            raise ValueError(f"diagnose measures solvers that declare their schedule and step rule (fedsample.parts."
                             f"ScheduledSolver), not {type(solver).__name__}")
        drawn, streams = self.draw_cohort(ids[positions], payload.plan, round)
        schedule = solver.schedule(drawn, streams, round)
        steps = schedule.steps()
        a = solver.step_rule(round).step_weights(steps[schedule.client], schedule.step)
        norm = solver.norm_steps(steps, round)
        rows = self.data.order[self._rows(ids[positions], drawn, schedule)]  # the engine's rows -> dataset rows
        counts = np.asarray(drawn.counts, dtype=np.int64) if parts_declared(payload.plan, "report_count") else None
        return (rows, positions[schedule.client], a * schedule.weight, steps,
                steps.astype(np.float64) if norm is None else norm, positions, counts)


def step_weights(steps: int, momentum: float, lr_mu: float) -> np.ndarray:
    """a_t for t = 0..steps-1 of plain local SGD with ``momentum`` and lr * prox_mu = ``lr_mu``
    (:meth:`fedsample.training.local.SGDStep.step_weights`)."""
    rule = SGDStep(lr=1.0, momentum=momentum, prox_mu=lr_mu)
    return rule.step_weights(np.full(steps, steps), np.arange(steps))
