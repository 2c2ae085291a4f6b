"""Optimal client sampling (Chen, Horvath & Richtarik, "Optimal client sampling for federated learning",
TMLR 2022; arXiv 2010.13723).

Every client i computes its update U_i; only some send it. Client i sends independently with probability p_i
(Poisson sampling, :func:`optimal_sample`) and the master forms the Horvitz-Thompson estimate
sum_{i in S} w_i U_i / p_i of the full update sum_i w_i U_i (:func:`horvitz_thompson_estimate`; w_i = n_i / n
in FedAvg), unbiased for any p with p_i > 0 where U_i != 0. Minimizing its variance
sum_i (1/p_i - 1) ||w_i U_i||^2 under sum_i p_i = m and p_i <= 1 gives the paper's optimal probabilities
(:func:`optimal_probabilities`): with u_i = ||w_i U_i|| sorted ascending, u_(1) <= ... <= u_(n), let l be the
largest integer with 0 < m + l - n <= sum_{i<=l} u_(i) / u_(l); then p_(i) = (m + l - n) u_(i) / sum_{j<=l} u_(j)
for i <= l and p_(i) = 1 for the n - l largest.

:func:`aocs_probabilities` is the paper's AOCS (approximate optimal client sampling, its Algorithm 2 as we
recall), which reaches the same probabilities with only secure-aggregation sums: start from
min(m u_i / sum u, 1) and, at most j_max times, rescale the clients still below 1 so that the total returns
to m, capping at 1 again. We do not have the paper's text at hand; the iteration is written as we remember it
(aggregate I = #{i : p_i < 1} and P = sum_{p_i < 1} p_i, C = (m - n + I) / P, stop when C <= 1, else
p_i <- min(C p_i, 1) for p_i < 1).

The exact rule's totals are exact: sum p = m (up to rounding) and p <= 1 always (AOCS: p <= 1 and
sum p <= m, = m once converged). (FedLab's implementation of this
sampler was reported to return p_i = 1.17 and sum p = 8.17 for 32 log-normal norms and m = 8; the tests
check that case.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from fedsample import checks
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, Learns, SizeNeed
from fedsample.messages import HeldReport
from fedsample.rounds import Cohort, reply_as
from fedsample.sampling import design
from fedsample.sampling.clients import census
from fedsample.sampling.design import Sample
from fedsample.training.aggregate import OBJECTIVE

if TYPE_CHECKING:
    from fedsample.rounds import ReplyList, RoundContext

__all__ = [
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "update_norms",
    "optimal_probabilities",
    "aocs_probabilities",
    "optimal_sample",
    "horvitz_thompson_weights",
    "horvitz_thompson_estimate",
    "OptimalClients",
    "objective_weights",
]

#: Kind of inclusion probabilities of each design of this module.
PROBABILITY_KIND = {"optimal": "exact", "aocs": "exact"}
#: What the server must learn: every client's weighted update norm (the exact rule), or only sums over the
#: clients through secure aggregation (AOCS: sum of norms, then per iteration the count and total of the
#: probabilities still below 1).
SERVER_LEARNS = {"optimal": ("update_norms",), "aocs": ("update_norm_sums",)}


def update_norms(updates: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """u_i = ||w_i U_i||: the norm of each client's weighted update (one row of ``updates`` per client)."""
    where = "update_norms"
    U = design.finite_matrix(updates, "updates", where)
    w = design.nonnegative_vector(weights, "weights", where)
    if w.size != U.shape[0]:
        raise ValueError(f"{where}: weights has {w.size} entries but updates has {U.shape[0]} rows")
    norms: np.ndarray = w * np.linalg.norm(U, axis=1)
    return norms


def optimal_probabilities(norms: np.ndarray, m: int) -> np.ndarray:
    """The optimal sending probabilities (the sorted rule of the module notes): p_i proportional to
    u_i = ||w_i U_i||, the largest capped at 1 and the rest sharing m - (number capped) in proportion.

    This is the classical capped probability-proportional-to-size rule, whose sorted closed form is the
    paper's; it is computed by :func:`design.inclusion_probabilities` (the tests check it against the sorted
    rule written out). When at most m clients have a nonzero update, each of them sends with probability 1
    and the others with 0 (the estimate is then exact and sum p < m). Raises ``ValueError`` for a bad
    ``norms`` or ``m``.
    """
    where = "optimal_probabilities"
    u = design.nonnegative_vector(norms, "norms", where)
    m = design.check_count(m, "m", where, minimum=1)
    if np.count_nonzero(u) <= m:
        return (u > 0).astype(np.float64)
    return design.inclusion_probabilities(u, m)


def aocs_probabilities(norms: np.ndarray, m: int, j_max: int) -> np.ndarray:
    """AOCS: p_i = min(m u_i / sum_j u_j, 1), then at most ``j_max`` rounds of
    C = (m - n + I) / P over the clients below 1 (I of them, probabilities summing to P) and
    p_i <- min(C p_i, 1) for those, stopping when C <= 1. Every p_i stays in [0, 1] and sum p <= m; once
    converged (after at most as many rounds as there are capping steps) p equals
    :func:`optimal_probabilities`. With at most m nonzero norms every nonzero one gets 1."""
    where = "aocs_probabilities"
    u = design.nonnegative_vector(norms, "norms", where)
    m = design.check_count(m, "m", where, minimum=1)
    j_max = design.check_count(j_max, "j_max", where)
    if np.count_nonzero(u) <= m:
        return (u > 0).astype(np.float64)
    p: np.ndarray = np.minimum(m * u / u.sum(), 1.0)
    for _ in range(j_max):
        below = p < 1.0
        P = float(p[below].sum())
        C = (m - (u.size - int(below.sum()))) / P
        if C <= 1.0:
            break
        p[below] = np.minimum(C * p[below], 1.0)
    return p


def optimal_sample(norms: np.ndarray, m: int, rng: np.random.Generator) -> Sample:
    """Independent sending: client i sends with probability p_i = :func:`optimal_probabilities`
    (Poisson sampling, :func:`design.poisson`); the expected number of senders is m."""
    return design.poisson(optimal_probabilities(norms, m), rng)


def horvitz_thompson_weights(sample: Sample, weights: np.ndarray) -> np.ndarray:
    """The chosen clients' Horvitz-Thompson weights w_i / pi_i (in the order of ``sample.ids``; each distinct
    client once, whatever its multiplicity), so that sum_{i in S} (w_i / pi_i) U_i is unbiased for
    sum_i w_i U_i under any design with first-order inclusion probabilities pi_i > 0."""
    w = design.nonnegative_vector(weights, "weights", "horvitz_thompson_weights")
    if np.any(sample.ids >= w.size):
        raise ValueError(f"horvitz_thompson_weights: sample ids exceed the {w.size} weights")
    if np.any(~(sample.inclusion > 0)):
        raise ValueError("horvitz_thompson_weights: every chosen client needs an inclusion probability > 0")
    ht_weights: np.ndarray = w[sample.ids] / sample.inclusion
    return ht_weights


def horvitz_thompson_estimate(sample: Sample, weights: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """sum_{i in S} w_i U_i / p_i: the master's unbiased estimate of the full update sum_i w_i U_i
    (``updates``: one row per client, only the chosen rows are read)."""
    U = np.asarray(updates, dtype=np.float64)
    if U.ndim != 2:
        raise ValueError(f"horvitz_thompson_estimate: updates must be 2-D, got shape {U.shape}")
    estimate: np.ndarray = horvitz_thompson_weights(sample, weights) @ U[sample.ids]
    return estimate


# --- the client sampler ------------------------------------------------------------------------------------------

Objective = Literal["size", "uniform"]
Rule = Literal["exact", "aocs"]
#: AOCS's default number of iterations (not from the paper's text, which we do not have at hand).
DEFAULT_J_MAX = 4


def objective_weights(ctx: "RoundContext", objective: Objective) -> np.ndarray:
    """w_k of the target sum_k w_k U_k for every client: n_k / n from every client's exact size report (``"size"``,
    FedAvg's objective; a client without a report gets 0) or 1/N (``"uniform"``)."""
    N = ctx.num_clients
    if objective == "uniform":
        return np.full(N, 1.0 / N)
    sizes = ctx.require_sizes(exact=True)
    w = np.zeros(N)
    w[np.asarray(sizes.ids, dtype=np.int64)] = sizes.reports
    return w / w.sum() if w.sum() > 0 else np.full(N, 1.0 / N)


@dataclass(frozen=True)
@checks.constrained(m=checks.Param(checks.COUNT, label="m (expected uploads per round)"), j_max=checks.COUNT)
class OptimalClients:
    """Optimal client sampling (Chen, Horvath & Richtarik, TMLR 2022) as a client sampler that chooses among trained
    clients (:class:`fedsample.parts.TrainsFirst`). Every client trains and keeps its update U_k, sending only
    ||U_k|| (``train_held``); the server sets p_k proportional to u_k = w_k ||U_k|| capped at 1 with sum p = m
    (``rule="exact"``: :func:`optimal_probabilities`; ``"aocs"``: :func:`aocs_probabilities` with ``j_max``
    iterations) and client k sends its update with probability p_k, independently (``send_held``); the aggregate
    sum_{k in S} w_k U_k / p_k (``WeightedMean("size_inverse_inclusion")`` for ``objective="size"``, w_k = n_k/n;
    ``WeightedMean("inverse_inclusion")`` for ``"uniform"``, w_k = 1/N) is unbiased for sum_k w_k U_k. The cohort's
    pi_k are the p_k (exact, given the norms). A round costs every client's local training for about m uploads
    (the round record's ``local_trainings`` and ``cohort``). AOCS's secure-aggregation protocol is not simulated:
    the server computes its iteration from the norms (the same probabilities; the server learns the norms)."""

    m: int = 10
    rule: Rule = "exact"
    j_max: int = DEFAULT_J_MAX
    objective: Objective = "size"

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Exact pi from the update norms, and every client's exact size for ``objective="size"`` (w_k = n_k / n);
        the w_k of the norms, which the Horvitz-Thompson aggregator must target."""
        sized = self.objective == "size"
        return ClientSamplerCapabilities(
            inclusion_kind=InclusionKind.EXACT, server_learns=(Learns.UPDATE_NORMS,) + ((Learns.SIZES,) if sized else ()),
            needs_sizes=SizeNeed.EXACT_ALL if sized else SizeNeed.NONE, shared_settings={OBJECTIVE: self.objective},
            counts_trainings=True)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """m uploads (sum p = m; fewer when at most m clients have a nonzero update)."""
        return float(min(self.m, num_clients))

    def expected_trainings(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """Every client trains."""
        return float(num_clients)

    def select(self, ctx: "RoundContext") -> Cohort:
        """Who trains: every client (pi = 1)."""
        return census(ctx.num_clients)

    def probabilities(self, norms: np.ndarray) -> np.ndarray:
        """p_k from the weighted norms u_k = w_k ||U_k||, by ``rule``."""
        if self.rule == "aocs":
            return aocs_probabilities(norms, self.m, self.j_max)
        return optimal_probabilities(norms, self.m)

    def select_trained(self, ctx: "RoundContext", trained: Cohort, held: "ReplyList") -> Cohort:
        """The clients that send: independently with p_k (Poisson sampling); a client whose training failed, or
        whose update is zero, has p_k = 0."""
        N = ctx.num_clients
        norms = np.zeros(N)
        got = np.array([i for i in range(len(held)) if i not in held.failed], dtype=np.int64)
        if len(got):
            norms[trained.ids[got]] = [reply_as(held[int(i)], HeldReport, "train_held").norm for i in got]
        u = objective_weights(ctx, self.objective) * norms
        if not np.any(u > 0):
            ctx.log["sending_probability_sum"] = 0.0
            return Cohort(np.zeros(0, np.int64), np.zeros(0), N)
        p = self.probabilities(u)
        ctx.log["sending_probability_sum"] = float(p.sum())
        ctx.log["sending_probability_max"] = float(p.max())
        return Cohort.from_sample(design.poisson(p, ctx.rng("clients")), N)
