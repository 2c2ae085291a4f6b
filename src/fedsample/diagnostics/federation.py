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
streams); probes of all of a client's data at the fixed model do not depend on the round and are computed once per
client and request. Each client's reported loss is its schedule's loss at the fixed model (the weighted per-sample
losses of each step, averaged over its steps) and, where the payload asks for them, its reply statistics over
what it drew: the samplers that rank clients by the losses of their training replies (rpow-d, Oort) see them.
``train_held`` (a sampler that chooses among trained clients) linearises every client's update and keeps it on the
client's side; ``send_held`` returns the chosen ones, and only those count as updates, bytes and drawn rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Mapping

import numpy as np
import torch
from torch import nn

from fedsample.client import update_norm
from fedsample.messages import (
    ClientContext, HeldReport, HeldRequest, PerClient, ProbeReport, ProbeRequest, Shared, SizeQuery, TrainHeld, TrainPayload, TrainReport, payloads_for,
    reply_statistics, requests_of, summed_statistics,
)
from fedsample.data.types import FederatedData
from fedsample.diagnostics.gradients import ClientUpdates, GradientBasis
from fedsample.federation.vectorized import VectorizedSimulator, _group_key
from fedsample.parts import ScheduledSolver
from fedsample.parts import summed_of
from fedsample.rounds import Failed, FusedReplies, ReplyObjects, Replies, ReplyList, summed_over
from fedsample.training.functional import Params, same_params
from fedsample.training.local import SGDStep
from fedsample.training.rules import Rule

__all__ = ["LinearCohort", "LinearisedFederation", "RoundCost", "step_weights"]

SIZE_REPORT_BYTES = 8
NORM_BYTES = 8
CACHED_COHORT = 1024  #: cohorts up to this size are summed client by client from kept updates (ClientUpdates)

Terms = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray,
              dict[str, np.ndarray]]
"""A group's :meth:`LinearisedFederation._terms`: rows, member, coefficient, steps, a_k, loss, reply statistics,
positions, summed statistics."""


@dataclass
class RoundCost:
    """What one round asked of the clients: clients contacted, updates received, the rows drawn (one entry
    per drawn sample and client whose update reached the server), the bytes sent up, the local trainings (more
    than the updates where a sampler chooses among trained clients) and the probes answered."""

    contacted: set[int] = field(default_factory=set)
    rows: list[np.ndarray] = field(default_factory=list)
    updates: int = 0
    bytes_up: int = 0
    trainings: int = 0
    probes: int = 0


class LinearCohort(ReplyObjects):
    """The backing (:class:`~fedsample.rounds.ReplyBacking`) of one cohort's train reports, each client's update a
    combination of per-sample gradients; a linear aggregator's ``sum_k w_k Delta_k`` is one sum (a fused sum, like
    the vectorized engine's): of the clients' kept updates (:class:`~fedsample.diagnostics.gradients.ClientUpdates`)
    for a cohort of up to ``CACHED_COHORT`` clients, one product over all their rows for a larger one."""

    def __init__(self, updates: ClientUpdates, clients: int, rows: np.ndarray, member: np.ndarray, coef: np.ndarray,
                 steps: np.ndarray, norm_steps: np.ndarray, losses: np.ndarray, statistics: dict[str, np.ndarray] | None = None,
                 sums: dict[str, np.ndarray] | None = None) -> None:
        self.replies: list[_LinearReport | None] = [None] * clients
        self.updates, self.basis, self.rows, self.member, self.coef = updates, updates.basis, rows, member, coef
        self.sums = sums or {}  # each summed statistic every member's plan declares, one int per member, by name
        self._received = np.flatnonzero(np.bincount(member, minlength=clients))
        cuts = np.searchsorted(member, np.arange(clients + 1))
        self._cuts = cuts
        for c in self._received.tolist():
            report = self.replies[c] = _LinearReport(self, c, int(steps[c]), float(norm_steps[c]), float(losses[c]))
            report.statistics = {name: float(v[c]) for name, v in (statistics or {}).items()}
            if self.sums:
                report.sums = {name: int(v[c]) for name, v in self.sums.items()}

    def received(self) -> np.ndarray:
        return self._received

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray, failed: Mapping[int, Failed]) -> Params:
        a = np.zeros(len(self))
        a[np.asarray(positions, dtype=np.int64)] = weights
        a[np.fromiter(failed, dtype=np.int64, count=len(failed))] = 0.0  # a rejected reply adds nothing
        summed = np.flatnonzero(a)
        if len(summed) > CACHED_COHORT:
            return {"g": self.basis.combination(self.rows, a[self.member] * self.coef)}
        total = torch.zeros(self.basis.dim, dtype=torch.float64)
        for position in summed.tolist():
            total += a[position] * self._update(position)
        return {"g": total.to(self.basis.matrix.dtype)}

    def summed(self, name: str, received: np.ndarray) -> int:
        """The answering clients' values of the summed statistic ``name`` (e.g. the samples they drew, the
        self-normalized FedSampling update's S), where every plan declares it."""
        if name not in self.sums:
            return summed_over(self.reply, received, name)
        return int(self.sums[name][received].sum())

    def update_of(self, position: int) -> Params:
        return {"g": self._update(position).to(self.basis.matrix.dtype)}

    def _update(self, position: int) -> torch.Tensor:
        a, b = self._cuts[position], self._cuts[position + 1]
        return self.updates.of(self.rows[a:b], self.coef[a:b])

    def terms_of(self, position: int) -> tuple[np.ndarray, np.ndarray, int, float | None, float]:
        """Client ``position``'s dataset rows and coefficients (one entry per use), steps, a_k and loss."""
        a, b = self._cuts[position], self._cuts[position + 1]
        report = self.replies[position]
        steps, norm, loss = (0, 0.0, 0.0) if report is None else (report.steps, report.norm_steps, report.loss)
        return self.rows[a:b], self.coef[a:b], steps, norm, loss


class _LinearReport(TrainReport):
    """One client's linearised update, computed when read."""

    def __init__(self, owner: LinearCohort, position: int, steps: int, norm_steps: float, loss: float) -> None:
        self._owner, self._position = owner, position
        self.steps, self.loss, self.norm_steps = steps, loss, norm_steps  # the loss at the fixed model
        self.statistics: Mapping[str, float] = {}

    @property
    def update(self) -> Params:  # type: ignore[override]  # the report's field, computed when read
        return self._owner.update_of(self._position)


class LinearisedFederation(VectorizedSimulator):
    """The vectorized engine's size reports and data draws, with ``train`` answered by linearised updates in
    ``basis`` (see the module docstring); :attr:`cost` holds the current round's :class:`RoundCost`."""

    def __init__(self, data: FederatedData, module: nn.Module, seed: int, basis: GradientBasis) -> None:
        super().__init__(data, module, seed)
        self.basis, self.updates = basis, ClientUpdates(basis)
        self.update_bytes = 4 * basis.parameters
        self.cost = RoundCost()
        self._probes: dict[tuple[int, Hashable], object] = {}
        self._held: dict[int, tuple[int, np.ndarray, np.ndarray, int, float | None, float]] = {}  # each client's held update (round, rows, coefficients, steps, a_k), until sent
        self._losses: tuple[Params, np.ndarray] | None = None  # every row's loss at the last parameters asked about
        self._kept: dict[int, dict[str, object]] = {}  # per client, what it computes from its data and the fixed model (ClientContext.kept)

    def context(self, k: int) -> ClientContext:
        """Client k's data, with a place to keep what it computes from its data and the fixed model
        (:attr:`fedsample.messages.ClientContext.kept`: ISFedAvg's per-sample gradient norms, once per client)."""
        ctx = super().context(k)
        ctx.kept = self._kept.setdefault(k, {})
        return ctx

    def sample_losses(self, params: Params, rows: np.ndarray) -> np.ndarray:
        """The loss of each of the training ``rows`` at ``params``: every row's loss, computed once per model (the
        diagnosis holds it still), read at ``rows``."""
        if self._losses is None or not same_params(self._losses[0], params):
            self._losses = (params, super().sample_losses(params, np.arange(len(self.data.order))))
        return self._losses[1][np.asarray(rows, dtype=np.int64)]

    def new_round(self) -> RoundCost:
        """Start counting a new round; returns the finished round's cost."""
        done, self.cost = self.cost, RoundCost()
        return done

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        ids = np.asarray(client_ids, dtype=np.int64)
        self.cost.contacted.update(ids.tolist())
        sent = payloads_for(request, len(ids))
        asked, held = sent.at(0), requests_of(sent, TrainHeld)
        replies: ReplyList
        if isinstance(sent.shared, ProbeRequest) and sent.shared.minibatch is None:
            replies = self._cached_probes(ids, sent.shared, round)
        elif held is not None:  # every client trains; its update and rows stay on its side until sent
            cohort = self.linear_cohort(ids, held, round, sent_up=False)
            self._held = {k: (round, *cohort.terms_of(c)) for c, k in enumerate(ids.tolist())}
            replies = Replies([HeldReport(update_norm(cohort.replies[c])) for c in range(len(ids))], failed={})
        elif isinstance(asked, HeldRequest):
            replies = self._send_held(ids, asked)
        else:
            replies = super().run(ids, request, round)
        self.cost.bytes_up += self._reply_bytes(asked, replies)
        return replies

    def _send_held(self, ids: np.ndarray, request: HeldRequest) -> FusedReplies:
        """The chosen clients' kept linearised updates, backed by one :class:`LinearCohort` (a fused sum): only these count
        as updates, bytes and drawn rows."""
        found = [self._held.pop(k, None) for k in ids.tolist()]
        kept = [h for h in found if h is not None and h[0] == request.round]
        if len(kept) < len(found):
            raise ValueError(f"a client keeps no update of round {request.round} (train_held first)")
        rows = np.concatenate([h[1] for h in kept] + [np.zeros(0, np.int64)])
        member = np.repeat(np.arange(len(kept)), [len(h[1]) for h in kept]).astype(np.int64)
        coef = np.concatenate([h[2] for h in kept] + [np.zeros(0)])
        steps, norm = np.array([h[3] for h in kept], dtype=np.int64), np.array([h[4] for h in kept], dtype=np.float64)
        reports = FusedReplies(LinearCohort(self.updates, len(ids), rows, member, coef, steps, norm, np.array([h[5] for h in kept], dtype=np.float64)))
        self.cost.rows.append(rows)
        self.cost.updates += len(reports.received_positions())
        self.cost.bytes_up += self.update_bytes * len(reports.received_positions())
        return reports

    def _reply_bytes(self, asked: object, replies: ReplyList) -> int:
        """The bytes the replies to ``asked`` send up (updates are counted where they are sent)."""
        if isinstance(asked, SizeQuery):
            return SIZE_REPORT_BYTES * len(replies)
        if isinstance(asked, TrainHeld):
            return NORM_BYTES * len(replies)
        if isinstance(asked, ProbeRequest):
            self.cost.probes += len(replies)
            return sum(r.nbytes for r in replies if isinstance(r, ProbeReport))  # checked by its reader (adaptive.probe); ProbeReport.nbytes: 8 per scalar, 4 per coordinate; a lost probe sent nothing
        return 0

    def _cached_probes(self, ids: np.ndarray, request: ProbeRequest, round: int) -> Replies:
        """Probe replies at the fixed model, computed once per (client, request options). A minibatch probe is not
        cached: its draw depends on the round (the client's probe stream)."""
        key = (request.gradient, request.compression, request.dim, request.projection_seed, request.per_sample, request.data_weights,
               request.statistics)
        missing = np.array([k for k in ids.tolist() if (k, key) not in self._probes], dtype=np.int64)
        if len(missing):
            for k, reply in zip(missing.tolist(), super().run(missing, request, round)):
                self._probes[(k, key)] = reply
        return Replies([self._probes[(k, key)] for k in ids.tolist()], failed={})

    def train(self, ids: np.ndarray, sent: PerClient[TrainPayload] | Shared[TrainPayload], round: int) -> FusedReplies:
        """Every cohort member's linearised update (see the module docstring), backed by one :class:`LinearCohort`."""
        return FusedReplies(self.linear_cohort(ids, sent, round))

    def linear_cohort(self, ids: np.ndarray, sent: PerClient[TrainPayload] | Shared[TrainPayload], round: int, sent_up: bool = True) -> LinearCohort:
        """Every cohort member's linearised update as one :class:`LinearCohort`: clients that share a plan and a
        solver are drawn and scheduled together. ``sent_up=False``: the updates are kept on the clients' side
        (``train_held``): trainings are counted, not uploads."""
        groups: dict[tuple[Hashable, Hashable], list[int]] = {}
        if sent.shared is None:
            for position in range(len(ids)):
                payload = sent.at(position)
                groups.setdefault((_group_key(payload.solver), _group_key(payload.plan)), []).append(position)
            parts = [self._terms(ids, np.asarray(positions), sent.at(positions[0]), round) for positions in groups.values()]
        else:
            parts = [self._terms(ids, np.arange(len(ids)), sent.shared, round)]
        rows, member, coef, steps, norm, loss = (np.concatenate([p[j] for p in parts]) for j in range(6))
        order = np.argsort(member, kind="stable")
        taken, effective, losses = np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids)), np.zeros(len(ids))
        everyone = np.concatenate([p[7] for p in parts])
        taken[everyone], effective[everyone], losses[everyone] = steps, norm, loss
        statistics: dict[str, np.ndarray] = {}
        for p in parts:  # each group's reply statistics, where its payload asks for them (0 for a member asked none)
            for name, values in p[6].items():
                statistics.setdefault(name, np.zeros(len(ids)))[p[7]] = values
        sums: dict[str, np.ndarray] = {}
        for name in sorted(set.intersection(*(set(p[8]) for p in parts))):  # the summed statistics every group's plan declares
            sums[name] = np.zeros(len(ids), dtype=np.int64)
            sums[name][everyone] = np.concatenate([p[8][name] for p in parts])
        reports = LinearCohort(self.updates, len(ids), rows[order], member[order], coef[order], taken, effective, losses,
                               statistics, sums)
        self.cost.trainings += len(reports.received())
        if sent_up:
            self.cost.rows.append(rows)
            self.cost.updates += len(reports.received())
            self.cost.bytes_up += self.update_bytes * len(reports.received())
        return reports

    def _terms(self, ids: np.ndarray, positions: np.ndarray, payload: TrainPayload, round: int) -> Terms:
        """(dataset rows, cohort member, coefficient) of every schedule entry of the clients at ``positions``, and
        their steps tau_k, a_k and losses, the reply statistics the payload asks for (by name), then ``positions``
        and the summed statistics the plan declares (by name): the coefficient of a row used in step t is a_t * weight (the solver's declared schedule and step rule,
        :meth:`~fedsample.training.local.SGDStep.step_weights`); a client's loss is the mean over its steps of
        sum_b weight_b * loss_b at the fixed model, times the schedule's ``loss_scale``."""
        solver = payload.solver
        if not isinstance(solver, ScheduledSolver):
            raise ValueError(f"diagnose measures solvers that declare their schedule and step rule (fedsample.parts."
                             f"ScheduledSolver), not {type(solver).__name__}")
        rule = solver.step_rule(round)
        if isinstance(rule, Rule) and not rule.linear:  # a user's own StepRule has SGD's fields: linear
            raise ValueError(f"diagnose measures updates linear in the per-sample gradients (local SGD's rule), not "
                             f"{type(rule).__name__}: a chain such as a local Adam is diagnosed by training it")
        drawn, streams = self.draw_cohort(ids[positions], payload.plan, round)
        schedule = solver.schedule(drawn, streams, round)
        steps = schedule.steps()
        a = rule.step_weights(steps[schedule.client], schedule.step)
        norm = solver.norm_steps(steps, round)
        engine_rows = self._rows(ids[positions], drawn, schedule)
        rows = self.data.order[engine_rows]  # the engine's rows -> dataset rows
        weighted = np.bincount(schedule.client, weights=schedule.weight * self.sample_losses(payload.params, engine_rows), minlength=len(positions))
        loss = weighted / np.maximum(steps, 1) * (1.0 if schedule.loss_scale is None else schedule.loss_scale)
        statistics: dict[str, np.ndarray] = {}
        if payload.statistics:
            drawn_rows = self.data.offsets[ids[positions][drawn.member]] + drawn.position
            statistics = reply_statistics(payload.statistics, self.sample_losses(payload.params, drawn_rows), drawn.member, len(positions))
        sums = summed_statistics(summed_of(payload.plan), drawn.counts)
        return (rows, positions[schedule.client], a * schedule.weight, steps,
                steps.astype(np.float64) if norm is None else norm, loss, statistics, positions, sums)


def step_weights(steps: int, momentum: float, lr_mu: float) -> np.ndarray:
    """a_t for t = 0..steps-1 of plain local SGD with ``momentum`` and lr * prox_mu = ``lr_mu``
    (:meth:`fedsample.training.local.SGDStep.step_weights`)."""
    rule = SGDStep(lr=1.0, momentum=momentum, prox_mu=lr_mu)
    return rule.step_weights(np.full(steps, steps), np.arange(steps))
