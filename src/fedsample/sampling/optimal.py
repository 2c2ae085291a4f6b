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

import numpy as np

from fedsample.sampling import design
from fedsample.sampling.design import Sample

__all__ = [
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "update_norms",
    "optimal_probabilities",
    "aocs_probabilities",
    "optimal_sample",
    "horvitz_thompson_weights",
    "horvitz_thompson_estimate",
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
    return w * np.linalg.norm(U, axis=1)


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
    p = np.minimum(m * u / u.sum(), 1.0)
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
    return w[sample.ids] / sample.inclusion


def horvitz_thompson_estimate(sample: Sample, weights: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """sum_{i in S} w_i U_i / p_i: the master's unbiased estimate of the full update sum_i w_i U_i
    (``updates``: one row per client, only the chosen rows are read)."""
    U = np.asarray(updates, dtype=np.float64)
    if U.ndim != 2:
        raise ValueError(f"horvitz_thompson_estimate: updates must be 2-D, got shape {U.shape}")
    return horvitz_thompson_weights(sample, weights) @ U[sample.ids]
