"""Client procedures: the only code that reads a client's data.

Each procedure is a plain function ``(ctx, request, rng) -> report``, chosen by the request's type
(:data:`PROCEDURES`, :func:`procedure_for`). ``ctx`` holds one client's data and the model; ``request`` is what the
server sent; ``rng`` is derived from (seed, round, client, purpose), the purpose the request declares
(:class:`fedsample.messages.Procedure`'s ``stream``): a :class:`fedsample.rng.ClientRandom`, which offers the numpy ``Generator`` methods.
A client's true data size leaves the client only through :func:`report_size`, and exactly only when the
strategy asked for exact sizes, or through :func:`sum_sizes`, into a secure sum that adds Gaussian noise. Every asked client answers ``train`` with a report of the same shape (a zero
update when its plan drew nothing), so whether a reply arrives says nothing about its data.
"""

from __future__ import annotations

from typing import Callable, cast

import numpy as np
import torch

from fedsample.messages import (
    ClientContext, HeldReport, HeldRequest, LocalResult, LocalSample, NoSamples, Params, ProbeReport, ProbeRequest, ReplyStatistic,
    SizeQuery, SizeSumRequest, TrainHeld, TrainPayload, TrainReport, reply_statistics, summed_statistics,
)
from fedsample.parts import CohortPlanCapabilities, LocalSolver, RunsSolver, declared_plan, describe, privacy_capabilities
from fedsample.privacy.reports import PERMANENT_REPORT, PERMANENT_ROUND, randomized_response
from fedsample.rng import ClientRandom, client_rng
from fedsample.sampling.compression import compress
from fedsample.training.dtypes import float_dtype
from fedsample.training.functional import flatten, per_sample_gradients, per_sample_losses, weighted_gradient, zeros_like

__all__ = [
    "HELD", "PROCEDURES", "ClientReply", "ClientRequest", "empty_report", "gradient_noise_variance", "hold", "permanent_response",
    "probe", "probe_rows", "procedure_for", "report_size", "sample_statistics", "send_held", "sum_sizes", "train",
    "train_held", "update_norm", "weighted_second_moment",
]


# --- size reports -------------------------------------------------------------------------------


def report_size(ctx: ClientContext, query: SizeQuery, rng: np.random.Generator) -> int:
    """The client's answer to a size query: its true size, or a randomized response (Qi et al. Eq. 1),
    permanent (drawn from the client's round-independent stream, the same answer every round) or fresh."""
    if query.mode == "exact":
        return ctx.size
    if query.permanent:
        return permanent_response(ctx, query, rng)
    return int(randomized_response(ctx.size, *query.randomization, rng))


def permanent_response(ctx: ClientContext, query: SizeQuery, rng: np.random.Generator) -> int:
    """The client's one randomized answer for (epsilon, M): from its stream of the fixed cell
    (seed, PERMANENT_ROUND, client, PERMANENT_REPORT), which any backend computes alike; with any other
    ``rng`` the first answer is memoized in the client-held ``ctx.state``."""
    if isinstance(rng, ClientRandom):
        stream = client_rng(rng.seed, PERMANENT_ROUND, rng.client, PERMANENT_REPORT)
        return int(randomized_response(ctx.size, *query.randomization, stream))
    memo = ctx.state.setdefault("permanent_reports", {})
    if not isinstance(memo, dict):
        raise TypeError(f"client {ctx.client_id}'s state keeps a {type(memo).__name__} as its permanent reports, not a dict")
    epsilon, M = query.randomization
    key = (float(epsilon), int(M))
    if key not in memo:
        memo[key] = int(randomized_response(ctx.size, epsilon, M, rng))
    answer: int = memo[key]
    return answer


def sum_sizes(ctx: ClientContext, request: SizeSumRequest, rng: np.random.Generator) -> int:
    """The client's true size, for the secure sum of :class:`~fedsample.messages.SizeSumRequest` only: the federation's
    secure sum adds it to the others' with the client's noise share (:mod:`fedsample.federation.secure_sum`), and on
    Flower it is sealed in the client's SecAgg+ vector with that share (:mod:`fedsample.flower.secagg`); a federation
    without a secure sum never asks it (:class:`fedsample.sampling.data.FedSamplingData` refuses readable replies)."""
    return ctx.size


# --- probes ------------------------------------------------------------------------------------------


def probe(ctx: ClientContext, request: ProbeRequest, rng: np.random.Generator) -> ProbeReport:
    """The statistics the request asks for (:class:`~fedsample.messages.ProbeRequest`): the label histogram, the
    loss, or (the default) loss and gradient of the client's local objective (mean over its samples, or over the
    minibatch :func:`probe_rows` draws); a client without samples raises a ValueError saying so."""
    if request.statistics == "labels":
        return ProbeReport(loss=None, grad_norm=None, label_counts=ctx.label_counts())
    if ctx.size == 0:
        raise NoSamples("the client holds no samples, so it has no loss or gradient to probe")
    rows = probe_rows(ctx.size, request.minibatch, rng)
    x, y = (ctx.x, ctx.y) if rows is None else (ctx.x[rows], ctx.y[rows])
    if request.statistics == "loss":
        with torch.no_grad():
            losses = per_sample_losses(ctx.module, request.params, x, y, ctx.task)
        return ProbeReport(loss=float(losses.double().mean()), grad_norm=None)
    weights = torch.full((len(y),), 1.0 / len(y), dtype=float_dtype(x), device=x.device)
    g, loss = weighted_gradient(ctx.module, ctx.task)(request.params, x, y, weights)
    flat = flatten(g)
    report = ProbeReport(
        loss=float(loss), grad_norm=float(torch.linalg.vector_norm(flat)), gradient=flat.cpu().numpy() if request.gradient else None
    )
    if request.compression is not None:
        report.compressed = compress(g, request.compression, request.dim, request.projection_seed)
    if request.per_sample:
        per_sample = per_sample_gradients(ctx.module, ctx.task, request.params, x, y)
        if request.data_weights is not None:
            norms = torch.linalg.vector_norm(per_sample, dim=1).cpu().numpy().astype(np.float64)
            report.extra["weighted_second_moment"] = weighted_second_moment(norms, request.data_weights.probabilities(ctx, norms))
        report.extra["sigma2"] = gradient_noise_variance(per_sample, flat, overwrite=True)  # per_sample is not read again
    return report


def probe_rows(size: int, minibatch: int | None, rng: np.random.Generator) -> np.ndarray | None:
    """The positions a probe reads: None (all of the client's data) without ``minibatch`` or when the client holds
    at most that many samples, else ``minibatch`` positions drawn uniformly without replacement (the first of a
    permutation of the client's stream: ``rng.permutation``, which a vectorized engine computes for a whole cohort
    from the same counter-based streams), sorted."""
    if minibatch is None or size <= minibatch:
        return None
    return np.sort(rng.permutation(size)[:minibatch])


def gradient_noise_variance(per_sample: torch.Tensor, mean_gradient: torch.Tensor, overwrite: bool = False) -> float:
    """sigma^2_k = (1/N_k) sum_n ||grad Q_k(w; x_n) - grad P_k(w)||^2 from the per-sample gradients (rows).
    ``overwrite``: the differences and their squares are computed in ``per_sample``'s memory (the same numbers,
    no temporary of its size: several times faster for a large client)."""
    differences = per_sample.sub_(mean_gradient) if overwrite else per_sample - mean_gradient
    return float(torch.mean(torch.sum(differences.pow_(2), dim=1)))


def weighted_second_moment(grad_norms: np.ndarray, p: np.ndarray) -> float:
    """(1/N^2) sum_n ||grad Q(w; x_n)||^2 / p_n (ISFedAvg Eq. 23's sum); a point with a zero gradient adds 0
    whatever its p_n. Uniform p_n = 1/N gives the mean squared gradient norm; Lemma 6's p_n ∝ ||grad Q|| gives
    its minimum, (mean_n ||grad Q(w; x_n)||)^2."""
    g2, p = np.asarray(grad_norms, dtype=np.float64) ** 2, np.asarray(p, dtype=np.float64)
    used = g2 > 0
    if np.any(p[used] <= 0):
        raise ValueError("ISFedAvg: a point with a nonzero gradient has data probability 0")
    return float(np.sum(g2[used] / p[used]) / g2.size**2)


# --- training ----------------------------------------------------------------------------------------


def empty_report(params: Params) -> TrainReport:
    """The reply of a client whose plan drew no sample: the same fields and shapes as any other reply, with a
    zero update, no step and zero loss (aggregators leave it out; a secure sum adds zero), and no row count: a reply
    that took no step trained no row (:meth:`fedsample.rounds.ReplyList.rows_trained` counts it 0), and a count of 0
    would tell a plan's private drawn count."""
    return TrainReport(update=zeros_like(params), steps=0, loss=0.0, norm_steps=None)


def train(ctx: ClientContext, payload: TrainPayload, rng: ClientRandom) -> TrainReport:
    """Draw the local sample, run the local solver, and (with ``payload.noise``) clip the update and add
    Gaussian noise, replying with a private reply (:mod:`fedsample.privacy.noise`). Every client replies; one
    that drew no sample sends :func:`empty_report` (noised too). The plan's declaration is read once per call."""
    declared = declared_plan(payload.plan)
    sample = payload.plan.draw(ctx, rng)
    rows: int | None = 0  # the rows its local steps read: none where it drew no sample
    if len(sample) == 0:
        report = empty_report(payload.params)
    else:
        result = local_result(payload.noise, payload.solver, ctx, sample, payload.params, payload.round, rng)
        rows = result.rows_trained
        report = TrainReport(
            update=result.update, steps=result.steps, loss=result.loss, norm_steps=result.norm_steps,
            rows_trained=rows if declared.reports_rows else None, sums=sample_sums(declared, len(sample)),
        )
        if payload.statistics:
            report.statistics = sample_statistics(ctx, sample, payload.params, payload.statistics)
    if ctx.measure is not None:  # the simulation's own count, whatever the reply may carry (fedsample.runtime.measured)
        ctx.measure(measured_rows(declared, len(sample), rows))
    if payload.noise is not None:  # noised update; no loss, step or drawn count (fedsample.privacy.noise)
        report = payload.noise.private_reply(report, payload, rng)
    return report


def local_result(noise: object, solver: LocalSolver, ctx: ClientContext, sample: LocalSample, params: Params, round: int,
                 rng: ClientRandom) -> LocalResult:
    """What a client's local training returns: the update privacy's ``run_solver`` where it declares ``runs_solver``
    (:class:`RunsSolver`), else the solver's ``run``; anything but a :class:`~fedsample.messages.LocalResult` is
    refused in one line naming the part."""
    runs = noise is not None and privacy_capabilities(noise).runs_solver
    result = cast(RunsSolver, noise).run_solver(solver, ctx, sample, params, round, rng) if runs else solver.run(ctx, sample, params, round, rng)
    if not isinstance(result, LocalResult):
        part = describe(noise) + ".run_solver" if runs else describe(solver) + ".run"
        raise TypeError(f"{part} returned a {type(result).__name__}: a local solver returns a fedsample.messages.LocalResult")
    return result


def measured_rows(declared: CohortPlanCapabilities, drawn: int, rows_trained: int | None) -> int | None:
    """What an in-process engine measures of one client's train call (:mod:`fedsample.runtime.measured`): the ``drawn``
    rows where its plan's declaration (:func:`~fedsample.parts.declared_plan`) says its draw is private
    (``private_draw``, FedSampling's: the figure the round's ``realised_samples`` reads from a released count), else
    the rows its local steps read (``rows_trained``, with repeats; None where the solver does not count them)."""
    return drawn if declared.private_draw else rows_trained


def sample_sums(declared: CohortPlanCapabilities, drawn: int) -> dict[str, int]:
    """The value of each summed statistic a plan declares (its declaration's ``summed``) for a client that drew
    ``drawn`` samples (the client as a cohort of one), by name; empty where it declares none."""
    if not declared.summed:
        return {}
    return {name: int(v[0]) for name, v in summed_statistics(declared.summed, np.array([drawn], dtype=np.int64)).items()}


def sample_statistics(ctx: ClientContext, sample: LocalSample, params: Params, statistics: tuple[ReplyStatistic, ...]) -> dict[str, float]:
    """The value of each of ``statistics`` (:class:`~fedsample.messages.ReplyStatistic`) for the client's drawn
    sample, from its per-sample losses at the received parameters (the client as a cohort of one)."""
    rows = torch.as_tensor(np.asarray(sample.indices, dtype=np.int64), device=ctx.x.device)
    with torch.no_grad():
        losses = per_sample_losses(ctx.module, params, ctx.x[rows], ctx.y[rows], ctx.task)
    values = reply_statistics(statistics, losses.double().cpu().numpy(), np.zeros(len(sample), dtype=np.int64), 1)
    return {name: float(v[0]) for name, v in values.items()}


# --- training that waits for the server's choice (optimal client sampling) -----------------------------------

HELD = "held_update"
"""The key of ``ctx.state`` under which a client keeps the update of this round's ``train_held`` (a round is never
checkpointed midway, so federations leave it out of the client states they export)."""


def update_norm(report: TrainReport | None) -> float:
    """||U_k||: the Euclidean norm of the whole update (every parameter), summed in float64; 0 for a client that
    took no step (or sent no report)."""
    if report is None or report.steps == 0:
        return 0.0
    return float(np.sqrt(sum(float(torch.sum(v.detach().double() ** 2)) for v in report.update.values())))


def hold(ctx: ClientContext, report: TrainReport | None, round: int) -> HeldReport:
    """Keep ``report`` on the client (its ``ctx.state``) and answer only its update's norm."""
    ctx.state[HELD] = {"round": int(round), "report": report}
    return HeldReport(update_norm(report))


def train_held(ctx: ClientContext, payload: TrainHeld, rng: ClientRandom) -> HeldReport:
    """:func:`train`, but the report stays with the client (:func:`hold`): the server receives the update's norm
    and, if it chooses this client, the update itself (:func:`send_held`)."""
    return hold(ctx, train(ctx, payload, rng), payload.round)


def send_held(ctx: ClientContext, request: HeldRequest, rng: np.random.Generator) -> TrainReport:
    """The training report kept by this round's :func:`train_held` (once: it is no longer kept afterwards)."""
    held = ctx.state.pop(HELD, None)
    if not isinstance(held, dict) or held["round"] != request.round:
        raise ValueError(f"client {ctx.client_id} keeps no update of round {request.round} (train_held first)")
    report: TrainReport = held["report"]  # as train_held kept it (hold)
    return report


ClientRequest = SizeQuery | SizeSumRequest | ProbeRequest | TrainPayload | HeldRequest
"""The requests a client answers (:class:`~fedsample.messages.TrainHeld` is a :class:`~fedsample.messages.TrainPayload`)."""

ClientReply = int | ProbeReport | TrainReport | HeldReport
"""What a client procedure answers: a size, a probe report, a training report or a held update's norm."""

#: The client procedure that answers each request type (a subclass of a request answers as its base does).
PROCEDURES: dict[type[ClientRequest], Callable[..., ClientReply]] = {
    SizeQuery: report_size, SizeSumRequest: sum_sizes, ProbeRequest: probe, TrainPayload: train, TrainHeld: train_held, HeldRequest: send_held,
}


def procedure_for(request: object) -> Callable[..., ClientReply]:
    """The client procedure that answers ``request``: its class's in :data:`PROCEDURES`, or its nearest base's."""
    for cls in type(request).__mro__:
        if cls in PROCEDURES:
            return PROCEDURES[cls]
    raise TypeError(f"no client procedure answers a {type(request).__name__}")
