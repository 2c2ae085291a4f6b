"""Client procedures: the only code that reads a client's data.

Each procedure is a plain function ``(ctx, payload, rng) -> report``. ``ctx`` holds one client's data and
the model; ``payload`` is what the server sent; ``rng`` is derived from (seed, round, client, procedure):
a :class:`fedsample.rng.ClientRandom`, which offers the numpy ``Generator`` methods (annotated as such).
A client's true data size leaves the client only through :func:`report_size`, and exactly only when the
strategy asked for exact sizes. Every asked client answers ``train`` with a report of the same shape (a zero
update when its plan drew nothing), so whether a reply arrives says nothing about its data.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsample.messages import ClientContext, Params, ProbeReport, ProbeRequest, SizeQuery, TrainPayload, TrainReport
from fedsample.privacy.reports import PERMANENT_REPORT, PERMANENT_ROUND, randomized_response
from fedsample.rng import ClientRandom, client_rng
from fedsample.sampling.compression import compress
from fedsample.training.dtypes import float_dtype
from fedsample.training.functional import flatten, per_sample_gradients, weighted_gradient, zeros_like

__all__ = [
    "PROCEDURES", "empty_report", "gradient_noise_variance", "permanent_response", "probe", "report_size", "train",
    "weighted_second_moment",
]


# --- size reports -------------------------------------------------------------------------------


def report_size(ctx: ClientContext, query: SizeQuery, rng: np.random.Generator) -> int:
    """The client's answer to a size query: its true size, or a randomized response (Qi et al. Eq. 1),
    permanent (drawn from the client's round-independent stream, the same answer every round) or fresh."""
    if query.mode == "exact":
        return ctx.size
    if query.permanent:
        return permanent_response(ctx, query, rng)
    return int(randomized_response(ctx.size, query.epsilon, query.M, rng))


def permanent_response(ctx: ClientContext, query: SizeQuery, rng: np.random.Generator) -> int:
    """The client's one randomized answer for (epsilon, M): from its stream of the fixed cell
    (seed, PERMANENT_ROUND, client, PERMANENT_REPORT), which any backend computes alike; with any other
    ``rng`` the first answer is memoized in the client-held ``ctx.state``."""
    if isinstance(rng, ClientRandom):
        stream = client_rng(rng.seed, PERMANENT_ROUND, rng.client, PERMANENT_REPORT)
        return int(randomized_response(ctx.size, query.epsilon, query.M, stream))
    memo = ctx.state.setdefault("permanent_reports", {})
    key = (float(query.epsilon), int(query.M))
    if key not in memo:
        memo[key] = int(randomized_response(ctx.size, query.epsilon, query.M, rng))
    return memo[key]


# --- probes ------------------------------------------------------------------------------------------


def probe(ctx: ClientContext, request: ProbeRequest, rng: np.random.Generator) -> ProbeReport:
    """Full-batch loss and gradient of the client's local objective (mean over its samples)."""
    weights = torch.full((ctx.size,), 1.0 / ctx.size, dtype=float_dtype(ctx.x), device=ctx.x.device)
    g, loss = weighted_gradient(ctx.module, ctx.task)(request.params, ctx.x, ctx.y, weights)
    flat = flatten(g)
    report = ProbeReport(
        loss=float(loss), grad_norm=float(torch.linalg.vector_norm(flat)), gradient=flat.cpu().numpy() if request.gradient else None
    )
    if request.compression is not None:
        report.compressed = compress(g, request.compression, request.dim, request.projection_seed)
    if request.per_sample:
        per_sample = per_sample_gradients(ctx.module, ctx.task, request.params, ctx.x, ctx.y)
        report.extra["sigma2"] = gradient_noise_variance(per_sample, flat)
        if request.data_weights is not None:
            norms = torch.linalg.vector_norm(per_sample, dim=1).cpu().numpy().astype(np.float64)
            report.extra["weighted_second_moment"] = weighted_second_moment(norms, request.data_weights.probabilities(ctx, norms))
    return report


def gradient_noise_variance(per_sample: torch.Tensor, mean_gradient: torch.Tensor) -> float:
    """sigma^2_k = (1/N_k) sum_n ||grad Q_k(w; x_n) - grad P_k(w)||^2 from the per-sample gradients (rows)."""
    return float(torch.mean(torch.sum((per_sample - mean_gradient) ** 2, dim=1)))


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
    zero update, no step and zero loss (aggregators leave it out; a secure sum adds zero)."""
    return TrainReport(update=zeros_like(params), steps=0, loss=0.0, norm_steps=None)


def train(ctx: ClientContext, payload: TrainPayload, rng: np.random.Generator) -> TrainReport:
    """Draw the local sample, run the local solver, and (with ``payload.noise``) clip the update and add
    Gaussian noise, replying with a private reply (:mod:`fedsample.privacy.noise`). Every client replies; one
    that drew no sample sends :func:`empty_report` (noised too)."""
    sample = payload.plan.draw(ctx, rng)
    solve = getattr(payload.noise, "run_solver", None)  # per-example clipping computes the gradient itself
    if len(sample) == 0:
        report = empty_report(payload.params)
    else:
        result = (solve(payload.solver, ctx, sample, payload.params, payload.round, rng) if solve is not None
                  else payload.solver.run(ctx, sample, payload.params, payload.round, rng))
        report = TrainReport(
            update=result.update, steps=result.steps, loss=result.loss, norm_steps=getattr(result, "norm_steps", None),
            samples=len(sample) if getattr(payload.plan, "report_count", False) else None,
        )
    if payload.noise is not None:  # noised update; no loss, step or drawn count (fedsample.privacy.noise)
        report = payload.noise.private_reply(report, payload, rng)
    return report


#: The client procedures a federation runs, by the name the server asks for.
PROCEDURES = {"report_size": report_size, "probe": probe, "train": train}
