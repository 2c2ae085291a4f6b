"""Client procedures: the only code that reads a client's data.

Each procedure is a plain function ``(ctx, payload, rng) -> report``. ``ctx`` holds one client's data and
the model; ``payload`` is what the server sent; ``rng`` is derived from (seed, round, client, procedure):
a :class:`fedsample.rng.ClientRandom`, which offers the numpy ``Generator`` methods (annotated as such).
A client's true data size leaves the client only through :func:`report_size`, and exactly only when the
strategy asked for exact sizes. Every asked client answers ``train`` with a report of the same shape (a zero
update when its plan drew nothing), so whether a reply arrives says nothing about its data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import nn

from fedsample import privacy
from fedsample.rng import ClientRandom, client_rng
from fedsample.training.dtypes import float_dtype
from fedsample.training.functional import Params, flatten, weighted_gradient, zeros_like


@dataclass
class ClientContext:
    """One client's data (as tensors) and the shared model architecture, plus ``state``: a dict the client
    procedures may read and write that stays with the client across rounds and never goes to the server
    (the federation keeps it, and exports it only into checkpoints, e.g. ISFedAvg's Eq. 53 data weights)."""

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    module: nn.Module
    task: str
    num_classes: int
    state: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.y)

    def label_counts(self) -> np.ndarray:
        return np.bincount(self.y.cpu().numpy(), minlength=self.num_classes)


@dataclass
class LocalSample:
    """What a data plan drew on a client: positions into its data, optionally a distribution over them for
    minibatches drawn with replacement (``probs``) and a per-sample gradient scale (``scale``)."""

    indices: np.ndarray
    probs: np.ndarray | None = None
    scale: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.indices)


class DataPlan(Protocol):
    """A server-sent instruction that the client executes on its own data to draw its local sample."""

    def draw(self, ctx: ClientContext, rng: np.random.Generator) -> LocalSample: ...


class DataWeights(Protocol):
    """A server-sent rule the client applies to its own data: its normalized data inclusion probabilities
    p_n (sum 1) given the per-sample gradient norms at the probed model (ISFedAvg's Lemma 6 / Eq. 49 / Eq. 53)."""

    def probabilities(self, ctx: ClientContext, grad_norms: np.ndarray) -> np.ndarray: ...


# --- size reports -------------------------------------------------------------------------------


PERMANENT_REPORT = "report_size/permanent"  # purpose of the round-independent stream of permanent reports
PERMANENT_ROUND = 0  # the one (fixed) round index of that stream


@dataclass(frozen=True)
class SizeQuery:
    """The server's question about data size: ``exact`` (only when the strategy declares it) or
    ``randomized`` response with budget ``epsilon`` and threshold ``M``. With ``permanent`` (the default)
    each client randomizes once and repeats that answer every round (RAPPOR's memoization), so a run
    reveals what one report reveals; ``permanent=False`` re-draws the answer every round."""

    mode: Literal["exact", "randomized"]
    epsilon: float | None = None
    M: int | None = None
    permanent: bool = True


def report_size(ctx: ClientContext, query: SizeQuery, rng: np.random.Generator) -> int:
    """The client's answer to a size query: its true size, or a randomized response (Qi et al. Eq. 1),
    permanent (drawn from the client's round-independent stream, the same answer every round) or fresh."""
    if query.mode == "exact":
        return ctx.size
    if query.permanent:
        return permanent_response(ctx, query, rng)
    return int(privacy.randomized_response(ctx.size, query.epsilon, query.M, rng))


def report_cell(query: SizeQuery, round: int) -> tuple[int, str]:
    """The (round, purpose) cell whose client streams draw randomized size reports: the round's own cell,
    or one fixed cell for every round when the reports are permanent."""
    return (PERMANENT_ROUND, PERMANENT_REPORT) if query.permanent else (int(round), "report_size")


def permanent_response(ctx: ClientContext, query: SizeQuery, rng: np.random.Generator) -> int:
    """The client's one randomized answer for (epsilon, M): from its stream of the fixed cell
    (seed, PERMANENT_ROUND, client, PERMANENT_REPORT), which any backend computes alike; with any other
    ``rng`` the first answer is memoized in the client-held ``ctx.state``."""
    if isinstance(rng, ClientRandom):
        stream = client_rng(rng.seed, PERMANENT_ROUND, rng.client, PERMANENT_REPORT)
        return int(privacy.randomized_response(ctx.size, query.epsilon, query.M, stream))
    memo = ctx.state.setdefault("permanent_reports", {})
    key = (float(query.epsilon), int(query.M))
    if key not in memo:
        memo[key] = int(privacy.randomized_response(ctx.size, query.epsilon, query.M, rng))
    return memo[key]


# --- probes ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeRequest:
    """Ask for statistics of the local objective at ``params``: loss and full-gradient norm; with
    ``gradient=True`` also the flattened gradient (compression hooks refine this). With ``per_sample=True``
    the report's ``extra["sigma2"]`` is the gradient-noise variance mean_n ||grad Q(w; x_n) - grad P_k(w)||^2
    (ISFedAvg, Rizk et al. 2022, Lemma 7), from per-sample gradients; with ``data_weights`` (a rule the client
    applies to its own data) also ``extra["weighted_second_moment"]`` = (1/N_k^2) sum_n ||grad Q(w; x_n)||^2 / p_n,
    the sum in ISFedAvg's data-variability term sigma^2_{s,k} (Eq. 23), with the client's p_n; no per-sample
    value leaves the client."""

    params: Params
    gradient: bool = False
    compression: str | None = None  # "squeeze" or "projection" (fedsample.compression), FedSTS/FedSTaS
    dim: int = 9  # compressed dimension d'
    projection_seed: int = 0  # seed of the shared Gaussian projection matrix
    per_sample: bool = False
    data_weights: DataWeights | None = None


@dataclass
class ProbeReport:
    loss: float
    grad_norm: float
    gradient: np.ndarray | None = None
    extra: dict = field(default_factory=dict)
    compressed: np.ndarray | None = None


def probe(ctx: ClientContext, request: ProbeRequest, rng: np.random.Generator) -> ProbeReport:
    """Full-batch loss and gradient of the client's local objective (mean over its samples)."""
    weights = torch.full((ctx.size,), 1.0 / ctx.size, dtype=float_dtype(ctx.x), device=ctx.x.device)
    g, loss = weighted_gradient(ctx.module, ctx.task)(request.params, ctx.x, ctx.y, weights)
    flat = flatten(g)
    report = ProbeReport(
        loss=float(loss), grad_norm=float(torch.linalg.vector_norm(flat)), gradient=flat.cpu().numpy() if request.gradient else None
    )
    if request.compression is not None:
        from fedsample.compression import compress

        report.compressed = compress(g, request.compression, request.dim, request.projection_seed)
    if request.per_sample:
        from fedsample.training.functional import per_sample_gradients

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


@dataclass(frozen=True)
class TrainPayload:
    """Global parameters, the data plan, the local solver, the round number and, optionally, the update's
    privacy (clipping and Gaussian noise, :class:`fedsample.privacy.UpdateNoise`) the client applies."""

    params: Params
    plan: Any
    solver: Any
    round: int
    noise: Any = None


@dataclass
class TrainReport:
    """A client's update (a descent direction), the number of local steps taken (tau_k), its mean loss,
    where the solver reports it, FedNova's effective number of steps ||a_k||_1 (None: a_k = tau_k), and the
    number of local samples it drew (``samples``: only when the plan asks for it, ``report_count``, which the
    self-normalized FedSampling update does under a secure sum, where the server learns only its sum;
    :class:`fedsample.training.aggregate.DrawnNormalizedSum`; None otherwise)."""

    update: Params
    steps: int
    loss: float
    norm_steps: float | None = None
    samples: int | None = None


def empty_report(params: Params) -> TrainReport:
    """The reply of a client whose plan drew no sample: the same fields and shapes as any other reply, with a
    zero update, no step and zero loss (aggregators leave it out; a secure sum adds zero)."""
    return TrainReport(update=zeros_like(params), steps=0, loss=0.0, norm_steps=None)


def train(ctx: ClientContext, payload: TrainPayload, rng: np.random.Generator) -> TrainReport:
    """Draw the local sample, run the local solver, and (with ``payload.noise``) clip the update and add
    Gaussian noise. Every client replies; one that drew no sample sends :func:`empty_report` (noised too)."""
    sample = payload.plan.draw(ctx, rng)
    if len(sample) == 0:
        report = empty_report(payload.params)
    else:
        result = payload.solver.run(ctx, sample, payload.params, payload.round, rng)
        report = TrainReport(
            update=result.update, steps=result.steps, loss=result.loss, norm_steps=getattr(result, "norm_steps", None),
            samples=len(sample) if getattr(payload.plan, "report_count", False) else None,
        )
    if payload.noise is not None:
        report.update = payload.noise.privatize(report.update, rng)
    return report


PROCEDURES = {"report_size": report_size, "probe": probe, "train": train}
