"""The vectorized in-process federation: a cohort's ``train`` calls run as one batched computation.

Same verb and same numbers as the reference loop (:class:`~fedsample.federation.simulator.Simulator`),
within float tolerance, because every client still draws its sample and minibatches from its own
(seed, round, client, "train") stream; only the arithmetic is batched. The engine knows no solver class: it
runs what a solver declares (:class:`fedsample.parts.ScheduledSolver`: its batch schedule for the whole cohort's
draws, its step rule, FedNova's normalizer), the same declaration the loop runs client by client
(:func:`fedsample.training.local.run_schedule`), and draws in one pass the plans that declare a cohort draw
(:class:`fedsample.parts.CohortPlan`):

- Multi-step schedules (local SGD): the clients' parameters are stacked along a leading axis and
  each local step is one ``torch.func.vmap`` of :func:`~fedsample.training.functional.weighted_loss_fn`
  over (stacked parameters, padded minibatches, weights), followed by one reverse pass. Padding rows carry
  weight 0; the clients are stacked by decreasing number of steps and step s runs only those that still step,
  so a client ends bit-for-bit where its own last step left it. The cohort is cut into chunks whose
  stacked parameters, gradients, momentum and activations fit ``memory_budget`` bytes.
- Schedules where every client takes one step (FedSampling's :class:`~fedsample.training.local.OneGradient`,
  local SGD with one step): every update is lr * (g_c + weight_decay * w0), g_c a weighted gradient at the
  *same* global parameters, linear in the per-sample gradients. One weighted forward over the union of the
  drawn rows gives every client's loss; a linear aggregator (``Sum``, ``WeightedMean``) then asks the
  returned reply list (backed by :class:`BatchedCohort`) for ``sum_k a_k * Delta_k``, which is one backward pass of the union loss
  ``sum_s a_{c(s)} w_s l_s``: the cost of one centralized step on those samples, computed by the federation
  (the drawn rows stay on this side of the door, in :class:`_Union`; the strategy gets the sum, as a secure
  sum would give it). Each client's own update still exists: reading ``report.update`` computes all of them
  (batched) on first access.
- Size reports: randomized responses for the whole cohort in one numpy pass (:class:`~fedsample.rng.CohortRandom`
  gives each client the draws its own :class:`~fedsample.rng.ClientRandom` would give).
- A solver that is not ``batched`` (one that declares no schedule, or a subclass whose ``run`` adds to it, such
  as ``EpochSGD``), clipped and noised updates and any other procedure run through the per-client loop, and so
  does training of a model the engine cannot batch (:meth:`VectorizedSimulator.needs_loop`).
- Dropout: each client's masks are drawn from its own generator exactly as its loop run draws them
  (:mod:`fedsample.training.random_layers`), then padded and stacked into the ``vmap`` (or concatenated for
  the union forward), so the numbers equal the loop's and do not depend on chunking.

``torch.func.vmap`` is used for the forward only, with ``torch.autograd.grad`` for the backward: the
gradient of ``sum_c loss_c`` with respect to stacked parameters is each client's gradient in its own slice,
and this avoids ``torch.func.grad``, whose first call imports ``torch._dynamo`` (about 1 s to 2 s).
"""

from __future__ import annotations

from functools import cached_property
from typing import Callable, Hashable, Mapping, Sequence, cast

import numpy as np
import torch
from torch import nn

from fedsample import parts
from fedsample.privacy.reports import randomized_response, report_cell
from fedsample.messages import (
    PerClient, ProbeReport, ProbeRequest, ReplyStatistic, Shared, SizeQuery, TrainHeld, TrainPayload, TrainReport, payloads_for, reply_statistics, requests_of, summed_statistics,
)
from fedsample import client as procedures
from fedsample.client import empty_report
from fedsample.data.types import FederatedData
from fedsample.runtime.device import free_memory
from fedsample.runtime.memo import frozen
from fedsample.federation.simulator import Simulator
from fedsample.parts import BatchSchedule, DrawnCohort
from fedsample.rng import Blocks, ClientRandom, CohortRandom, CohortStreams, client_rng
from fedsample.rounds import Failed, FusedReplies, ReplyObjects, NumberReplies, Replies, ReplyList, summed_over, train_report, update_sum_of
from fedsample.training import random_layers
from fedsample.training.functional import Params, per_sample_losses, weighted_loss_fn
from fedsample.training.local import SGDStep
from fedsample.training.rules import Rule
from fedsample.training.lowrank import LinearChain, LowRankStack, linear_chain, train_low_rank

__all__ = ["BatchedCohort", "DEFAULT_MEMORY_BUDGET", "SteppedCohort", "VectorizedSimulator"]

DEFAULT_MEMORY_BUDGET = 512 * 2**20  # bytes for one chunk's stacked parameters, gradients and activations
"""Bytes for one chunk's stacked parameters, gradients and activations."""
TRAIN_STREAM = TrainPayload.procedure.stream
"""The loop's training stream's purpose, (seed, round, client, purpose), from which the engine draws each client's sample."""


class VectorizedSimulator(Simulator):
    """In-process federation that batches a cohort's training (see the module docstring).

    ``memory_budget`` (bytes) bounds one chunk of stacked clients (on a GPU also the free device memory);
    results do not depend on it. On a CUDA ``device`` the cohort's counter-based draws are computed there
    (:class:`~fedsample.rng.CohortRandom` with a device: the same bits as numpy).
    """

    def __init__(
        self, data: FederatedData, module: nn.Module, seed: int, memory_budget: int = DEFAULT_MEMORY_BUDGET, device: torch.device | str = "cpu"
    ) -> None:
        super().__init__(data, module, seed, device=device)
        self._draw_device = self.device if self.device.type == "cuda" else None
        if memory_budget <= 0:
            raise ValueError(f"memory_budget must be > 0 bytes, got {memory_budget}")
        self.memory_budget = int(memory_budget)
        self.sizes = data.sizes()
        self._loss_fn = weighted_loss_fn(self.train_module, self.task)
        self._batched_loss: Callable[..., torch.Tensor] | None = None
        self._activation_bytes: int | None = None
        self._unions: dict[int, _Union] = {}  # the last train call's drawn rows, kept on the clients' side
        self._permanent: tuple[tuple[int, int, str, tuple[float, int]], np.ndarray, np.ndarray] | None = None  # (query cell, ids, answers): the last permanent reports
        self._blocks: Blocks | None = None  # the last cohort draw's layout (the population's, for FedSampling)

    # --- the verb ----------------------------------------------------------------------------------

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        ids = np.asarray(client_ids, dtype=np.int64)
        sent = payloads_for(request, len(ids))
        if isinstance(sent.shared, SizeQuery):
            return self.report_sizes(ids, sent.shared, round)
        if isinstance(sent.shared, ProbeRequest) and sent.shared.statistics in ("loss", "labels"):
            return self.probe_cohort(ids, sent.shared, round)
        held, trains = requests_of(sent, TrainHeld), requests_of(sent, TrainPayload)
        if held is not None:  # trained as ``train`` trains, the reports kept on the clients' side
            return self.hold(ids, self.train(ids, _training(held), round), round)
        if trains is not None:
            return self.train(ids, trains, round)
        return super().run(ids, request, round)

    def hold(self, ids: np.ndarray, reports: ReplyList, round: int) -> Replies:
        """The cohort's batched training reports kept on the clients' side (each client's ``ctx.state``, as the
        loop's :func:`~fedsample.client.train_held` keeps them), answered by their norms."""
        held = []
        for position, k in enumerate(ids.tolist()):
            reply = reports[position]
            report = None if reply is None else train_report(reply)
            kept = None if report is None else TrainReport(  # a plain report: no tie to this call's batch
                update=report.update, steps=report.steps, loss=report.loss, norm_steps=report.norm_steps,
                rows_trained=report.rows_trained, statistics=report.statistics, sums=report.sums)
            held.append(procedures.hold(self.context(k), kept, round))
        return Replies(held, failed={})

    def report_sizes(self, ids: np.ndarray, query: SizeQuery, round: int) -> NumberReplies:
        """Every client's :func:`~fedsample.client.report_size` answer in one numpy pass (one array). Permanent
        answers are drawn from one fixed cell, the same every round: the last cohort's are kept (as each client
        keeps its one answer) and given again when the same clients are asked the same query."""
        if query.mode == "exact":
            return NumberReplies(self.sizes[ids])  # a new array (fancy indexing copies)
        cell_round, purpose = report_cell(query, round)
        key = (self.seed, cell_round, purpose, query.randomization)
        kept = self._permanent if query.permanent else None
        if kept is not None and kept[0] == key and (kept[1] is ids or np.array_equal(kept[1], ids)):
            return NumberReplies(kept[2])  # the same read-only answers: the sizes are not read again
        streams = CohortRandom(self.seed, cell_round, ids, purpose, self._draw_device)
        answers = randomized_response(self.sizes[ids], *query.randomization, streams)
        if query.permanent:
            self._permanent = (key, frozen(ids), frozen(answers))
        return NumberReplies(answers)

    def probe_cohort(self, ids: np.ndarray, request: ProbeRequest, round: int) -> Replies:
        """Loss or label probes of a cohort in one pass (:func:`~fedsample.client.probe`'s answers): the label
        histograms by one count over the cohort's rows; the losses by one forward over the rows each client reads
        (all of its data, or the minibatch its own probe stream draws: :meth:`probe_draw`), averaged per client."""
        sizes = self.sizes[ids]
        if request.statistics == "labels":
            member = np.repeat(np.arange(len(ids)), sizes)
            rows = self.data.offsets[ids][member] + (np.arange(len(member)) - np.repeat(np.cumsum(sizes) - sizes, sizes))
            y = self.y[torch.as_tensor(rows, device=self.device)].cpu().numpy()
            counts = np.bincount(member * self.num_classes + y, minlength=len(ids) * self.num_classes).reshape(len(ids), -1)
            return Replies([ProbeReport(loss=None, grad_norm=None, label_counts=counts[c]) for c in range(len(ids))], failed={})
        member, position = self.probe_draw(ids, request.minibatch, round)
        losses = self.sample_losses(request.params, self.data.offsets[ids][member] + position)
        means = np.bincount(member, weights=losses, minlength=len(ids)) / np.bincount(member, minlength=len(ids))
        return Replies([ProbeReport(loss=float(v), grad_norm=None) for v in means.tolist()], failed={})

    def probe_draw(self, ids: np.ndarray, minibatch: int | None, round: int) -> tuple[np.ndarray, np.ndarray]:
        """(member, position) of every row the cohort's probes read, by member then position: all of a client's
        data, or with ``minibatch=b`` the first b of the permutation its (seed, round, client, "probe") stream gives
        (:func:`fedsample.client.probe_rows`: the argsort of its first n uniforms), for clients holding more than b."""
        sizes = self.sizes[ids]
        member = np.repeat(np.arange(len(ids)), sizes)
        position = np.arange(len(member)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        if minibatch is None or not np.any(sizes > minibatch):
            return member, position
        big = sizes > minibatch
        u = CohortRandom(self.seed, round, ids[big], ProbeRequest.procedure.stream, self._draw_device).ragged(sizes[big])
        keep = ~big[member]  # small clients keep every row
        order = np.flatnonzero(big[member])[np.lexsort((u, member[big[member]]))]  # by member, then by uniform
        firsts = np.cumsum(sizes[big]) - sizes[big]
        rank = np.arange(len(order)) - np.repeat(firsts, sizes[big])
        keep[order[rank < minibatch]] = True
        return member[keep], position[keep]

    def sample_losses(self, params: Params, rows: np.ndarray) -> np.ndarray:
        """The loss of each of the training ``rows`` at ``params`` (dropout off), one forward in chunks that fit
        ``memory_budget`` (float64)."""
        if self._activation_bytes is None:
            self._activation_bytes = _activation_bytes_per_sample(self.module, self.x[:1], params) + random_layers.mask_bytes_per_sample(self.random)
        chunk = max(1, self.chunk_budget() // max(self._activation_bytes, 1))
        out = []
        with torch.no_grad():
            for start in range(0, len(rows), chunk):
                r = torch.as_tensor(rows[start : start + chunk], device=self.device)
                out.append(per_sample_losses(self.train_module, params, self.x[r], self.y[r], self.task).double().cpu().numpy())
        return np.concatenate(out + [np.zeros(0)])

    def add_statistics(
        self, reports: ReplyList, ids: np.ndarray, drawn: DrawnCohort, params: Params, statistics: tuple[ReplyStatistic, ...]
    ) -> None:
        """The reply ``statistics`` of each member that took a step (:func:`fedsample.messages.reply_statistics` of
        the cohort's drawn rows at the received ``params``), added to its report as the client adds them."""
        losses = self.sample_losses(params, self.data.offsets[ids[drawn.member]] + drawn.position)
        values = reply_statistics(statistics, losses, drawn.member, len(ids))
        for c in reports.received_positions().tolist():
            reports[c].statistics = {name: float(v[c]) for name, v in values.items()}

    def train(self, ids: np.ndarray, sent: PerClient[TrainPayload] | Shared[TrainPayload], round: int) -> ReplyList:
        """Group the cohort by (parameters, solver, plan) and train each group batched where the solver allows.
        Updates with clipping and noise (``payload.noise``) are per-client and nonlinear: the reference loop."""
        self._unions.clear()
        payloads = list(sent) if isinstance(sent, PerClient) else [sent.shared]
        if any(p.noise is not None for p in payloads) or self.needs_loop() is not None:
            return super().run(ids, _as_sent(sent), round)
        if sent.shared is not None:  # one payload for all: one group
            return self._train_group(ids, sent.shared, sent.shared, round)
        reports: list[object] = [None] * len(ids)
        groups: dict[tuple[int, Hashable, Hashable, int], list[int]] = {}
        for position, p in enumerate(payloads):
            groups.setdefault((id(p.params), _group_key(p.solver), _group_key(p.plan), p.round), []).append(position)
        for positions in groups.values():
            members = np.asarray(positions)
            theirs = PerClient(tuple(payloads[i] for i in positions))
            got = self._train_group(ids[members], payloads[positions[0]], theirs, round)
            if len(groups) == 1:
                return got
            for position, report in zip(positions, got):
                reports[position] = report
        return Replies(reports, failed={})

    def _train_group(self, ids: np.ndarray, payload: TrainPayload, payloads: object, round: int) -> ReplyList:
        """Train clients that share ``payload``'s parameters, solver and plan (``payloads``: theirs, for the loop):
        batched from the solver's declared schedule where it allows (:func:`fedsample.parts.batched`), else the loop."""
        if not parts.batched(payload.solver):
            return super().run(ids, payloads, round)  # a solver the engine cannot batch: the reference loop
        return self._train_scheduled(ids, payload, payload.solver, round)

    def needs_loop(self) -> str | None:
        """Why this model's training cannot be batched (None: it can): :meth:`RandomLayers.unbatchable`."""
        return self.random.unbatchable(self.x[:1])

    def _mask_generators(self, ids: np.ndarray, round: int) -> list[torch.Generator] | None:
        """Each client's dropout-mask generator (None for a model without dropout)."""
        if not self.random.layers:
            return None
        return [random_layers.client_generator(self.seed, round, int(k)) for k in ids]

    # --- drawing the local samples (per client, from the same streams as the loop) -----------------------

    def draw_cohort(self, ids: np.ndarray, plan: parts.DataPlan, round: int) -> tuple[DrawnCohort, Sequence[ClientRandom]]:
        """What each client's ``plan`` draws, and each client's stream positioned after its draw, as the loop's
        ``train`` sees them: in one pass where the plan declares a cohort draw (:class:`fedsample.parts.CohortPlan`),
        else client by client."""
        sizes = self.sizes[ids]
        if isinstance(plan, parts.CohortPlan):
            member, position = self._cohort_draw(plan, sizes, CohortRandom(self.seed, round, ids, TRAIN_STREAM, self._draw_device))
            return DrawnCohort.flat(member, position, len(ids)), CohortStreams(self.seed, round, ids, TRAIN_STREAM, plan.stream_reads(sizes))
        rngs = [client_rng(self.seed, round, int(k), TRAIN_STREAM) for k in ids]
        return DrawnCohort.of([plan.draw(self.context(int(k)), rng) for k, rng in zip(ids, rngs)]), rngs

    def blocks(self, sizes: np.ndarray) -> Blocks:
        """The layout of the cohort's blocks of draws (:class:`~fedsample.rng.Blocks`, ``sizes`` = the clients'
        sizes), kept for the next call: the same clients (FedSampling's every round) reuse it, so what depends
        only on the sizes is computed once, not every round."""
        if self._blocks is None or not self._blocks.same_counts(sizes):
            self._blocks = Blocks(sizes)
        return self._blocks

    def _cohort_draw(self, plan: parts.CohortPlan, sizes: np.ndarray, rng: CohortRandom) -> tuple[np.ndarray, np.ndarray]:
        """``(member, position)`` of the cohort's draw: where the streams are on a device and the plan draws there
        (``draw_cohort_on_device``, :class:`~fedsample.sampling.data.BernoulliSamples`), on the device from the sizes
        kept there (:meth:`Blocks.on`), only the kept rows coming back to the host; else on the host, over the kept
        layout where the plan offers that (``draw_blocks``), or from the sizes. The same numbers every way (the
        streams' bits are the same on every device). The plan's declaration is read as it is: the round that made the
        plan checked it against its methods (:func:`fedsample.parts.check_plan`, once a round, whatever the engine)."""
        on_device, over_blocks = parts.offered_draws(plan, parts.declared_plan(plan))
        if rng.device is not None and on_device is not None:
            member, position = on_device(self.blocks(sizes).on(rng.device), rng)
            return member.cpu().numpy(), position.cpu().numpy()
        return plan.draw_cohort(sizes, rng) if over_blocks is None else over_blocks(self.blocks(sizes), rng)

    def _rows(self, ids: np.ndarray, drawn: DrawnCohort, schedule: BatchSchedule) -> np.ndarray:
        """Rows of the simulator's training tensors (kept in client order) of every schedule entry."""
        rows: np.ndarray = self.data.offsets[ids[schedule.client]] + drawn.position[schedule.row]
        return rows

    # --- a scheduled solver -------------------------------------------------------------------------------

    def _train_scheduled(self, ids: np.ndarray, payload: TrainPayload, solver: parts.ScheduledSolver, round: int) -> ReplyList:
        """The cohort's local training from the solver's declaration: its schedule for what the cohort drew, its
        step rule and its FedNova normalizer. A cohort whose clients all take one step is one union forward
        (:meth:`_union_step`); otherwise the clients' parameters are stacked (:meth:`_stacked_chunk`). ``solver``: the
        payload's, which declares its schedule."""
        drawn, streams = self.draw_cohort(ids, payload.plan, round)
        if len(drawn.member) == 0:
            self._meter.add(0)
            return Replies([empty_report(payload.params)] * len(ids), failed={})  # one shared empty reply (never mutated)
        schedule, rule = solver.schedule(drawn, streams, round), solver.step_rule(round)
        declared = parts.declared_plan(payload.plan)  # read once for the three questions below
        self._meter.add(procedures.measured_rows(declared, len(drawn.member), int(schedule.entries.sum())))  # never sent
        steps = schedule.steps()
        norm = solver.norm_steps(steps, round)
        counted = summed_statistics(declared.summed, drawn.counts)  # those the plan declares: {} for none
        sends_rows = declared.reports_rows  # False: the plan's drawn count is private, no row count leaves a client
        reports: ReplyList
        if schedule.single_step and rule.linear:  # local SGD's rule: one step's update is linear in the gradient
            reports = self._union_step(ids, drawn, schedule, cast(SGDStep, rule), payload.params, round, norm, counted, sends_rows)
        elif isinstance(rule, Rule):  # stepped with the rule's chain and state (fedsample.training.rules)
            reports = self._train_stepped(ids, drawn, schedule, steps, rule, payload.params, round, norm, counted, sends_rows)
        else:
            raise TypeError(f"the vectorized engine steps a fedsample.training.rules.Rule, not a {type(rule).__name__}")
        if payload.statistics:  # the reply statistics a sampler reads, as each client adds them to its report
            self.add_statistics(reports, ids, drawn, payload.params, payload.statistics)
        return reports

    def _train_stepped(
        self, ids: np.ndarray, drawn: DrawnCohort, schedule: BatchSchedule, steps: np.ndarray, rule: Rule, params: Params,
        round: int, norm: np.ndarray | None, counted: dict[str, np.ndarray], sends_rows: bool,
    ) -> ReplyList:
        """Multi-step schedules (``counted``: the summed statistics the replies carry, by name; ``sends_rows``:
        whether they carry the rows trained): the clients that step, in groups of similar batch width and step count
        (:func:`padding_groups`: padding stays under 2x), each group in chunks under the memory budget, each chunk
        stacked by decreasing steps so that step s runs only the clients still stepping. A chunk runs in low-rank
        form (:mod:`fedsample.training.lowrank`: no model per client) where the model is a chain of linear
        layers and the clients are small enough for it to pay, else with stacked parameters (:meth:`_stacked_chunk`)."""
        reports = SteppedCohort([empty_report(params)] * len(ids), steps > 0)
        widths = batch_widths(schedule, len(ids))
        chain = self._linear_chain(params)
        for members in padding_groups(steps, widths):
            B = int(widths[members].max())
            rows_held = int(steps[members].max()) * B
            low_rank = chain if chain is not None and rule.linear and chain.low_rank_pays(rows_held) else None
            per_client = (low_rank.client_bytes(rows_held, B, rule.slots > 0, self._activations(params)) if low_rank is not None
                          else self._client_bytes(params, B, rule.slots))
            chunk = max(1, self.chunk_budget() // per_client)
            for start in range(0, len(members), chunk):
                part = members[start : start + chunk]
                stacked = part[np.argsort(-steps[part], kind="stable")]  # stack row -> cohort position
                rows, weights, widths_ = self._padded(ids, stacked, drawn, schedule)
                generators = self._mask_generators(ids[stacked], round)
                rows_t = torch.as_tensor(rows, device=self.device)
                weights_t = torch.as_tensor(weights, device=self.device).to(self.dtype)
                masks = None if generators is None else (lambda s, n, g=generators, w=widths_, b=rows.shape[2]: self._step_masks(g[:n], w[:n, s], b))
                updates: Params | None
                if low_rank is not None:
                    held, losses = train_low_rank(low_rank, self.task, params, self.x, self.y, rows_t, weights_t, steps[stacked], rule, masks)
                    reports.hold(stacked, held)
                    updates = None  # read through the held factors (SteppedCohort.update_of)
                else:
                    updates, losses = self._stacked_chunk(steps[stacked], rows_t, weights_t, rule, params, masks)
                mean = losses.sum(1).cpu().numpy() / steps[stacked]
                for j, c in enumerate(stacked.tolist()):
                    loss = float(mean[j]) * (1.0 if schedule.loss_scale is None else float(schedule.loss_scale[c]))
                    report = _DeferredReport(reports, c, loss, int(steps[c])) if updates is None else TrainReport(
                        update={k: v[j] for k, v in updates.items()}, steps=int(steps[c]), loss=loss)
                    report.norm_steps = None if norm is None else float(norm[c])
                    if counted:
                        report.sums = {name: int(v[c]) for name, v in counted.items()}
                    report.rows_trained = int(schedule.entries[c]) if sends_rows else None
                    reports.replies[c] = report
        return FusedReplies(reports) if reports.held else Replies(reports.replies, failed={})

    def _linear_chain(self, params: Params) -> LinearChain | None:
        """The model as a chain of linear layers and row-wise maps (:func:`~fedsample.training.lowrank.linear_chain`),
        or None; found once."""
        if not hasattr(self, "_chain"):
            self._chain = linear_chain(self.train_module, self.x[:1], params)
        return self._chain

    def _union_step(
        self, ids: np.ndarray, drawn: DrawnCohort, schedule: BatchSchedule, rule: SGDStep, params: Params, round: int,
        norm: np.ndarray | None, counted: dict[str, np.ndarray], sends_rows: bool,
    ) -> FusedReplies:
        """Every client takes (at most) one step from the global parameters w0, so its update is linear in its
        weighted gradient: Delta_c = lr * (g_c + weight_decay * w0) (:meth:`SGDStep.first_step_`; FedSampling's
        G_c is the case lr = 1). One forward over the union of the minibatches, one backward for a linear
        aggregate, per-client updates on demand (:class:`BatchedCohort`)."""
        member = schedule.client
        counts = schedule.entries  # each member's rows (the cohort's len(ids) members: schedule.clients)
        masks = None
        if self.random.layers:  # dropout: each client that drew rows draws its masks from its own generator
            drew = np.flatnonzero(counts)
            generators = self._mask_generators(ids[drew], round)
            masks = self.random.draw_many(generators, counts[drew].tolist(), self.dtype) if generators else None
        return BatchedCohort.one_gradient(
            self, params, self._rows(ids, drawn, schedule), member, schedule.weight, counts, schedule.loss_scale,
            step=rule.lr, decay=rule.weight_decay, masks=masks, norm_steps=norm, sums=counted,
            rows_trained=counts if sends_rows else None,
        )

    def _stacked_chunk(
        self, steps: np.ndarray, rows_t: torch.Tensor, weights_t: torch.Tensor, rule: Rule, anchor: Params,
        masks_of_step: Callable[[int, int], random_layers.Masks] | None = None,
    ) -> tuple[Params, torch.Tensor]:
        """Run the local steps of a chunk of clients with stacked parameters, in place: ``rows_t``/``weights_t``
        (C, S, B) their padded minibatches, ``steps`` (C,) their step counts in decreasing order, so step s runs
        only the first n_s of them (those that still step: views of the stack, updated in place) and a client past
        its last step is left where its own last step put it; ``masks_of_step(s, n)`` the dropout masks. Returns
        the stacked updates w0 - w and the (C, S) step losses, by stack row."""
        C, S, _ = rows_t.shape
        names, base = list(anchor), [v.detach() for v in anchor.values()]
        w = [v.unsqueeze(0).repeat(C, *([1] * v.dim())) for v in base]
        state = rule.init(w)
        losses = torch.zeros(C, S, dtype=torch.float64, device=self.device)
        for s in range(S):
            n = int(np.count_nonzero(steps > s))  # the clients still stepping: the first n (sorted by steps)
            live = [v[:n] for v in w]
            masks = masks_of_step(s, n) if masks_of_step is not None else {}
            g, loss = self._stacked_gradient(dict(zip(names, live)), self.x[rows_t[:n, s]], self.y[rows_t[:n, s]], weights_t[:n, s], masks)
            rule.apply_(live, list(g.values()), [v[:n] for v in state], base, s + 1)
            losses[:n, s] = loss.double()
        return {k: v.neg_().add_(a.unsqueeze(0)) for k, a, v in zip(names, base, w)}, losses  # w0 - w, in place

    def _padded(self, ids: np.ndarray, stacked: np.ndarray, drawn: DrawnCohort, schedule: BatchSchedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The schedule of the cohort positions ``stacked`` (in stack order) as (stack row, step, slot) arrays of
        training rows and weights, zero-padded (weight 0) where a client takes fewer steps or a smaller batch,
        and each minibatch's width (0: no step)."""
        per = np.bincount(schedule.client, minlength=len(ids))
        first = np.cumsum(per) - per
        counts = per[stacked]
        entries = np.repeat(first[stacked], counts) + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        client, step = schedule.client[entries], schedule.step[entries]
        stack_row = np.empty(len(ids), dtype=np.int64)
        stack_row[stacked] = np.arange(len(stacked))
        row = stack_row[client]
        starts = np.flatnonzero(np.concatenate([[True], (np.diff(client) != 0) | (np.diff(step) != 0)]))
        sizes = np.diff(np.concatenate([starts, [len(client)]]))
        slot = np.arange(len(client)) - np.repeat(starts, sizes)
        S, B = int(step.max()) + 1, int(sizes.max())
        rows = np.zeros((len(stacked), S, B), dtype=np.int64)
        weights = np.zeros((len(stacked), S, B), dtype=np.float32)
        widths = np.zeros((len(stacked), S), dtype=np.int64)
        rows[row, step, slot] = self.data.offsets[ids[client]] + drawn.position[schedule.row[entries]]
        weights[row, step, slot] = schedule.weight[entries]
        widths[row[starts], step[starts]] = sizes
        return rows, weights, widths

    def _step_masks(self, generators: list[torch.Generator], widths: np.ndarray, width: int) -> random_layers.Masks:
        """One step's dropout masks of every stepping client, drawn as the client's own step draws them (its
        minibatch's ``widths`` rows), padded to ``width`` rows and stacked."""
        sizes = widths.tolist()
        drawn = [self.random.draw(g, n, self.dtype) if n else {} for g, n in zip(generators, sizes)]
        return random_layers.padded(drawn, sizes, width, self.random)

    def _stacked_gradient(
        self, w: Params, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, masks: random_layers.Masks
    ) -> tuple[Params, torch.Tensor]:
        """Per-client gradients of the weighted losses at stacked parameters (with stacked dropout masks):
        vmap forward, one backward."""
        if self._batched_loss is None:
            from torch.func import vmap

            self._batched_loss = vmap(self._loss_fn)
        leaves = {k: v.detach().requires_grad_(True) for k, v in w.items()}
        masks = {k: m.to(x.device) for k, m in masks.items()}  # drawn on the host from the clients' generators
        with torch.enable_grad():
            loss = self._batched_loss(leaves, x, y, weights, masks)
            grads = torch.autograd.grad(loss.sum(), list(leaves.values()))
        return dict(zip(leaves, grads)), loss.detach()

    def chunk_budget(self) -> int:
        """Bytes one chunk of stacked clients may use: ``memory_budget``, and on a GPU at most its free memory."""
        free = free_memory(self.device)
        return self.memory_budget if free is None else max(1, min(self.memory_budget, free))

    def _client_bytes(self, params: Params, batch: int, slots: int) -> int:
        """Memory one stacked client needs: parameter copies (weights, gradient, step, update, and the rule's
        ``slots`` state tensors: momentum's buffer, Adam's two moments) plus the activations of one minibatch kept
        for the backward pass."""
        param_bytes = sum(v.numel() * v.element_size() for v in params.values())
        return param_bytes * (5 + slots) + batch * self._activations(params)

    def _activations(self, params: Params) -> int:
        """Bytes of one sample's activations kept for the backward pass (with its dropout masks), measured once."""
        if self._activation_bytes is None:
            self._activation_bytes = _activation_bytes_per_sample(self.module, self.x[:1], params) + random_layers.mask_bytes_per_sample(self.random)
        return self._activation_bytes

class _Rows:
    """A stack of per-client tensors read by cohort position: ``rows[j]`` is the row ``where[j]`` of ``stack``
    (a view, no copy of the stack into cohort order)."""

    __slots__ = ("stack", "where")

    def __init__(self, stack: torch.Tensor, where: np.ndarray) -> None:
        self.stack, self.where = stack, where

    def __getitem__(self, j: int) -> torch.Tensor:
        return self.stack[int(self.where[j])]


class _Union:
    """The federation's side of a batched cohort: the drawn rows, their cohort members and weights, and the
    per-sample weighted losses at w0 (with their graph). Never handed to the strategy. It keeps no reference to
    the federation that holds it (which would be a reference cycle: a finished run's federation, with its copy of
    the training rows, would then stay in memory until the garbage collector's next full pass)."""

    def __init__(
        self, leaves: Params, terms: torch.Tensor, member: np.ndarray, rows: np.ndarray, weights: np.ndarray,
        masks: "random_layers.Masks",
    ) -> None:
        self.leaves, self.terms, self.member, self.rows, self.weights = leaves, terms, member, rows, weights
        self.masks = masks  # dropout masks of the union's rows, in the order of ``rows``

    def weighted_gradient_sum(self, a: np.ndarray) -> Params:
        """Gradient of ``sum_s a_{c(s)} w_s l_s`` at w0 (``a`` one coefficient per cohort member)."""
        scaled = torch.as_tensor(a[self.member], dtype=self.terms.dtype, device=self.terms.device) * self.terms
        grads = torch.autograd.grad(scaled.sum(), list(self.leaves.values()), retain_graph=True)
        return dict(zip(self.leaves, grads))

    def client_gradients(self, sim: "VectorizedSimulator", C: int) -> Params:
        """Every client's G_c at once (on ``sim``'s data): padded per-client batches, parameters broadcast along the
        client axis."""
        member = self.member
        counts = np.bincount(member, minlength=C)
        B = int(counts.max())  # clients without rows get zero weights (their G_c is zero)
        slot = np.arange(len(member)) - (np.cumsum(counts) - counts)[member]
        padded_rows = np.zeros((C, B), dtype=np.int64)
        padded_w = np.zeros((C, B), dtype=np.float32)
        padded_rows[member, slot], padded_w[member, slot] = self.rows, self.weights
        padded_masks = {}
        for key, m in self.masks.items():
            padded_masks[key] = torch.zeros((C, B, *m.shape[1:]), dtype=m.dtype)
            padded_masks[key][torch.from_numpy(member), torch.from_numpy(slot)] = m
        chunk = max(1, sim.chunk_budget() // sim._client_bytes(self.leaves, B, 0))
        parts = []
        for start in range(0, C, chunk):
            r = torch.as_tensor(padded_rows[start : start + chunk], device=sim.device)
            stacked = {k: v.detach().unsqueeze(0).expand(len(r), *v.shape) for k, v in self.leaves.items()}
            masks = {k: m[start : start + chunk] for k, m in padded_masks.items()}
            w = torch.as_tensor(padded_w[start : start + chunk], device=sim.device).to(sim.dtype)
            g, _ = sim._stacked_gradient(stacked, sim.x[r], sim.y[r], w, masks)
            parts.append(g)
        return {k: torch.cat([p[k] for p in parts]) for k in self.leaves}


class BatchedCohort:
    """The backing (:class:`~fedsample.rounds.ReplyBacking`) of a one-gradient (or single-step) cohort's reports: one
    fixed-shape report per client, like any federation's answer, whose weighted sum the federation computes as one
    backward pass of the union loss (linear aggregators: a fused sum). It holds message content only, as arrays over
    the cohort (each client's loss, FedNova's a_k and drawn count where sent; the updates, computed when read): a
    client's report object is built when it is read (and then kept, so it is the same object each time), so a cohort
    of 30,000 clients costs no Python object per client unless someone reads each one; the received positions, the
    summed loss, the drawn total and the screen's suspects come from the arrays with the numbers the reports would
    give. The drawn rows stay in the federation."""

    sealed = False
    _source: "_CohortUpdates"  # the updates, computed when read (the federation's union)
    _took_step: np.ndarray  # the replies' steps > 0
    _stepped: np.ndarray  # the positions where _took_step holds, ascending
    _losses: np.ndarray  # each client's reported loss (read where it took a step)
    _norm_steps: np.ndarray | None  # FedNova's a_k where the solver reports it
    _sums: dict[str, np.ndarray]  # each summed statistic the plan declares, one int per client, by name
    _rows_trained: np.ndarray | None  # each client's rows in its one step (the schedule's entries)
    _empty: "_EmptyReply"  # the one shared empty reply (never mutated), made on first read
    _made: dict[int, TrainReport]  # the reports read so far, by position

    @classmethod
    def one_gradient(
        cls, sim: VectorizedSimulator, params: Params, rows: np.ndarray, member: np.ndarray, weights: np.ndarray,
        counts: np.ndarray, loss_scale: np.ndarray | None, step: float = 1.0, decay: float = 0.0,
        masks: random_layers.Masks | None = None, norm_steps: np.ndarray | None = None, sums: dict[str, np.ndarray] | None = None,
        rows_trained: np.ndarray | None = None,
    ) -> FusedReplies:
        """Reports whose updates are ``step * (G_c + decay * w0)`` with G_c = sum over client c's rows of
        ``weights * gradient of the sample loss`` at ``params`` = w0; a client's reported loss is its weighted
        loss times ``norm_c / max(counts_c, 1)`` with ``norm_c = loss_scale_c * max(counts_c, 1)`` (one-gradient: the
        schedule's ``loss_scale``) or, where ``loss_scale`` is None, the weighted loss itself (a local SGD step's
        minibatch loss). ``masks``: the union's dropout masks, rows in the order of ``rows``;
        ``norm_steps``, ``sums``, ``rows_trained``: each client's FedNova a_k, summed statistics (by name) and rows trained
        where its report carries them.
        A client without rows gets :func:`~fedsample.client.empty_report`."""
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        rows_t = torch.as_tensor(rows, device=sim.device)
        with torch.enable_grad():
            x, y = sim.x.index_select(0, rows_t), sim.y.index_select(0, rows_t)
            masks = {k: m.to(sim.device) for k, m in (masks or {}).items()}
            terms = torch.as_tensor(weights, dtype=sim.dtype, device=sim.device) * per_sample_losses(sim.train_module, leaves, x, y, sim.task, masks)
        per_client = np.bincount(member, weights=terms.detach().double().cpu().numpy(), minlength=len(counts))
        cohort = cls.__new__(cls)
        cohort._made, cohort._empty = {}, _EmptyReply(params)
        cohort._norm_steps, cohort._sums, cohort._rows_trained = norm_steps, sums or {}, rows_trained
        cohort._source = _CohortUpdates(sim, len(sim._unions), len(counts), step, decay)
        cohort._took_step = counts > 0  # the replies' steps > 0, kept as one mask
        cohort._stepped = np.flatnonzero(cohort._took_step)  # their positions (a scan of the mask; asked several times a round, handed out
        cohort._stepped.flags.writeable = False  # as they are, so read-only)
        cohort._losses = per_client if loss_scale is None else _scaled_where_stepped(per_client, loss_scale, counts, cohort._stepped)
        sim._unions[cohort._source.token] = _Union(leaves, terms, member, rows, weights, masks or {})
        return FusedReplies(cohort)

    def __len__(self) -> int:
        return len(self._took_step)

    def report(self, position: int) -> TrainReport:
        """The report at ``position`` (every one is a TrainReport: no check)."""
        return self.reply(position)

    def reply(self, position: int) -> TrainReport:
        if not self._took_step[position]:
            return self._empty.report
        report = self._made.get(position)
        if report is None:
            report = self._made[position] = self._report(position)
        return report

    def _report(self, position: int) -> TrainReport:
        """The report of a client that took its step: its loss, rows trained, a_k and summed statistics from the arrays."""
        report = _DeferredReport(self._source, position, float(self._losses[position]))
        report.rows_trained = None if self._rows_trained is None else int(self._rows_trained[position])
        if self._norm_steps is not None:
            report.norm_steps = float(self._norm_steps[position])
        if self._sums:
            report.sums = {name: int(v[position]) for name, v in self._sums.items()}
        return report

    def received(self) -> np.ndarray:
        """Positions of the replies that carry an update (the clients that drew samples): known without a Python
        pass over the cohort."""
        return self._stepped

    def summed_loss(self, received: np.ndarray) -> tuple[float, int]:
        """(sum of the received clients' losses, how many), summed one after another in cohort order as the plain
        reply list sums the reports (a running sum: the same float)."""
        losses = self._losses[received]
        return (float(np.cumsum(losses)[-1]) if len(losses) else 0.0), len(losses)

    def summed(self, name: str, received: np.ndarray) -> int:
        """The received clients' values of the summed statistic ``name``, summed from its array (a ValueError where the
        plan does not declare it and a client is received, :func:`~fedsample.rounds.summed_over`)."""
        if name not in self._sums:
            return summed_over(self.reply, received, name)
        return int(np.sum(np.asarray(self._sums[name], dtype=np.int64)[received]))

    def summed_names(self, received: np.ndarray) -> tuple[str, ...]:
        """The summed statistics the first received report carries (every received report carries the same ones, the
        engine's counts, ``_report``): one report object read as the server reads a reply, its update not computed;
        () where none is received."""
        return tuple(self.reply(int(received[0])).sums) if len(received) else ()

    def rows_trained(self, received: np.ndarray) -> int | None:
        """The received clients' rows trained, summed from the array (no report object built); None where withheld."""
        if self._rows_trained is None:
            return None
        return int(np.sum(np.asarray(self._rows_trained, dtype=np.int64)[received]))

    def suspects(self, received: np.ndarray) -> np.ndarray:
        """The received positions whose loss is not finite: the engine builds every report itself (one step, a
        float loss, one object per client), so only these can fail a shallow screen."""
        suspect: np.ndarray = received[~np.isfinite(self._losses[received])]
        return suspect

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray, failed: Mapping[int, Failed]) -> Params:
        """``sum_i weights_i * G_{positions_i}`` as the gradient of ``sum_s a_{c(s)} w_s l_s`` at the global
        parameters (every G_c is linear in the sample gradients at one point; empty clients add zero)."""
        positions, weights = np.asarray(positions, dtype=np.int64), np.asarray(weights, dtype=np.float64)
        if failed:  # a rejected reply adds nothing
            weights = np.where(np.isin(positions, list(failed)), 0.0, weights)
        a = np.zeros(len(self))
        a[positions] = weights
        total = float(np.sum(weights[self._took_step[positions]])) if self._source.decay else 0.0  # decay * w0 only in trained updates
        return self._source.weighted_sum(a, total)


class _CohortUpdates:
    """The updates of a :class:`BatchedCohort` cohort, formed when read from the federation's union of call
    ``token``: ``step * (G_c + decay * w0)``. Its client reports read their updates here, not through the reply
    list that caches them: a reference back to that list would be a cycle (list -> report -> list), freed only by
    the garbage collector's full pass, that kept the federation, with its copy of the training rows, in memory
    after the run (one copy per finished run in an experiment's worker process)."""

    def __init__(self, sim: VectorizedSimulator, token: int, clients: int, step: float, decay: float) -> None:
        self.sim, self.token, self.clients, self.step, self.decay = sim, token, clients, step, decay
        self.updates: Params | None = None  # every client's G_c, once one is read

    def union(self) -> _Union:
        union = self.sim._unions.get(self.token)
        if union is None:
            raise RuntimeError("these reports belong to an earlier train call; the federation kept only the last one's")
        return union

    def weighted_sum(self, a: np.ndarray, total: float) -> Params:
        """``step * (sum_c a_c G_c + decay * total * w0)`` (``a`` one coefficient per cohort member; ``total``: the
        coefficients' sum over the clients that trained)."""
        union = self.union()
        grads = union.weighted_gradient_sum(a)
        return {k: self.as_update(g, union.leaves[k].detach(), total) for k, g in grads.items()}

    def as_update(self, gradient: torch.Tensor, w0: torch.Tensor, weight: float | torch.Tensor) -> torch.Tensor:
        """step * (gradient + decay * weight * w0): the update(s) from gradient(s) at w0."""
        if self.step == 1.0 and self.decay == 0.0:
            return gradient
        return self.step * (gradient + self.decay * weight * w0) if self.decay else self.step * gradient

    def update_of(self, position: int) -> Params:
        """Client ``position``'s own G_c (all clients' are computed together, batched, on first access)."""
        union = self.union()
        if self.updates is None:
            self.updates = union.client_gradients(self.sim, self.clients)
        return {k: self.as_update(v[position], union.leaves[k].detach(), 1.0) for k, v in self.updates.items()}


class _EmptyReply:
    """The one :func:`~fedsample.client.empty_report` of a cohort's reports (shared with the lists from ``rejecting``),
    made when first read: a round whose replies are summed, not read (a secure sum), never builds its zero
    update (zeros shaped as the parameters: about 0.05 ms a round for the benchmark's MLP, measured)."""

    def __init__(self, params: Params) -> None:
        self._params = params

    @cached_property
    def report(self) -> TrainReport:
        return empty_report(self._params)


def _scaled_where_stepped(per_client: np.ndarray, loss_scale: np.ndarray, counts: np.ndarray, stepped: np.ndarray) -> np.ndarray:
    """``per_client * norm / max(counts, 1)`` with ``norm = loss_scale * max(counts, 1)``, both computed at the
    ``stepped`` positions only, zero elsewhere (where ``per_client`` is a sum over no rows, 0, so the array holds the
    same numbers): one-gradient losses with one pass over the clients that drew rows, not two over the whole
    cohort (30,000 clients: about 0.07 ms)."""
    out = np.zeros(len(per_client))
    drew = np.maximum(counts[stepped], 1)
    out[stepped] = per_client[stepped] * (loss_scale[stepped] * drew) / drew
    return out


class SteppedCohort(ReplyObjects):
    """The backing (:class:`~fedsample.rounds.ReplyBacking`) of a multi-step cohort's reports: a list of one
    fixed-shape report per client, some of whose updates are held in low-rank form
    (:class:`~fedsample.training.lowrank.LowRankStack`, one per chunk) and formed only when read. Its weighted sum is
    one matmul of each chunk's factors (a fused sum), plus the plain sum of the clients trained with stacked
    parameters. Holds message content only."""

    replies: list[TrainReport]  # one per cohort position (the ReplyObjects list, of train reports only)

    def __init__(self, reports: list[TrainReport], took_step: np.ndarray) -> None:
        self.replies = reports
        self._took_step = took_step  # one flag per cohort position: the client took a step
        self._held: list[LowRankStack] = []  # the chunks' factors, in the order they were kept
        self._where = np.full((len(reports), 2), -1, dtype=np.int64)  # cohort position -> (stack, row); -1: not held

    def hold(self, positions: np.ndarray, stack: LowRankStack) -> None:
        """Keep ``stack``, whose row j is the client at cohort position ``positions[j]``; returns None (its
        clients' updates are read through :meth:`update_of`)."""
        self._where[positions] = np.stack([np.full(len(positions), len(self._held)), np.arange(len(positions))], 1)
        self._held.append(stack)

    @property
    def held(self) -> bool:
        return bool(self._held)

    def received(self) -> np.ndarray:
        return np.flatnonzero(self._took_step)

    def report(self, position: int) -> TrainReport:
        """The report at ``position`` (every one is a TrainReport: no check)."""
        return self.replies[position]

    def update_of(self, position: int) -> Params:
        """The update of the client at ``position`` (formed from its chunk's factors)."""
        h, j = self._where[position]
        return self._held[int(h)].update(int(j))

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray, failed: Mapping[int, Failed]) -> Params | None:
        """``sum_i weights_i * Delta_{positions_i}``: each chunk's share as one matmul of its factors
        (:meth:`LowRankStack.weighted_sum`), the clients trained with stacked parameters one by one; failed and
        empty replies add nothing."""
        positions, weights = np.asarray(positions, dtype=np.int64), np.asarray(weights, dtype=np.float64)
        keep = self._took_step[positions]
        if failed:
            keep &= ~np.isin(positions, np.fromiter(failed, dtype=np.int64, count=len(failed)))
        positions, weights = positions[keep], weights[keep]
        where = self._where[positions]
        total = None
        for h, stack in enumerate(self._held):
            mine = where[:, 0] == h
            if mine.any():
                a = np.zeros(len(stack))
                np.add.at(a, where[mine, 1], weights[mine])
                total = _added(total, stack.weighted_sum(a))
        dense = where[:, 0] < 0
        if dense.any():
            total = _added(total, update_sum_of(self.reply, failed, positions[dense], weights[dense]))
        return total


def _added(total: Params | None, part: Params | None) -> Params | None:
    """``total + part`` key-wise (None is nothing)."""
    if total is None or part is None:
        return part if total is None else total
    return {k: v.add_(part[k]) for k, v in total.items()}


def batch_widths(schedule: BatchSchedule, clients: int) -> np.ndarray:
    """Each member's widest minibatch (0: it takes no step)."""
    bounds = schedule.batch_starts()
    widths = np.zeros(clients, dtype=np.int64)
    if len(bounds) > 1:
        np.maximum.at(widths, schedule.client[bounds[:-1]], np.diff(bounds))
    return widths


def padding_groups(steps: np.ndarray, widths: np.ndarray) -> list[np.ndarray]:
    """The members that step, grouped by the power of two just above their widest minibatch and their number of
    steps (cohort order kept within a group). In a group every width and step count exceeds half the group's
    largest, so padding a minibatch to the group's widest costs under 2x its client's widest minibatch, and a
    low-rank chunk's factors (sized for the group's most steps) under 2x (4x with both) what its clients use;
    steps are never padded (step s runs only the clients still stepping)."""
    active = np.flatnonzero(steps)
    if len(active) == 0:
        return []
    key = _ceil_log2(widths[active]) * 64 + _ceil_log2(steps[active])
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    return [active[part] for part in np.split(order, cuts)]


def _ceil_log2(values: np.ndarray) -> np.ndarray:
    """ceil(log2(v)) of positive integers (0 for 1)."""
    return np.ceil(np.log2(np.asarray(values, dtype=np.float64))).astype(np.int64)


class _DeferredReport(TrainReport):
    """A client's report whose update is computed when read: batched with its cohort (one-gradient or
    single-step SGD), or formed from its chunk's low-rank factors (multi-step)."""

    def __init__(self, owner: "_CohortUpdates | SteppedCohort", position: int, loss: float, steps: int = 1) -> None:
        self._owner, self._position = owner, position
        self.steps, self.loss, self.norm_steps, self.rows_trained = steps, loss, None, None
        self.statistics: Mapping[str, float] = {}

    @property
    def update(self) -> Params:  # type: ignore[override]  # the report's field, computed when read
        return self._owner.update_of(self._position)

    def __repr__(self) -> str:
        return f"TrainReport(client position {self._position}, steps={self.steps}, loss={self.loss:.4g}, update deferred)"


def _activation_bytes_per_sample(module: nn.Module, x: torch.Tensor, params: Params) -> int:
    """Bytes of every layer's output for one sample (kept for the backward pass), measured once by hooks."""
    from torch.func import functional_call

    total = [x.numel() * x.element_size()]

    def hook(_module: nn.Module, _inputs: tuple[object, ...], output: object) -> None:
        if isinstance(output, torch.Tensor):
            total.append(output.numel() * output.element_size())

    handles = [m.register_forward_hook(hook) for m in module.modules()]
    try:
        with torch.no_grad():
            functional_call(module, params, (x,))
    finally:
        for h in handles:
            h.remove()
    return 2 * sum(total)


def _as_sent(sent: PerClient[object] | Shared[object]) -> object:
    """The payload as ``run`` takes it: the shared one, or the :class:`PerClient` itself."""
    return sent.shared if sent.shared is not None else sent


def _training(sent: PerClient[TrainHeld] | Shared[TrainHeld]) -> PerClient[TrainPayload] | Shared[TrainPayload]:
    """The held requests of ``sent`` as the plain training requests they train by (:meth:`TrainHeld.training`)."""
    if isinstance(sent, PerClient):
        return PerClient(tuple(p.training() for p in sent))
    return Shared(sent.shared.training())


def _group_key(part: object) -> Hashable:
    """A part itself where it is hashable (equal plans train together), else its identity."""
    try:
        hash(part)
    except TypeError:
        return ("id", id(part))
    return part
