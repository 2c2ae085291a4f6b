"""The error of FedSampling's size estimate N~ (Qi et al. 2023, Eq. 2) and the threshold M that minimizes it.

N~ is unbiased for the total *clipped* size sum_c min(n_c, M - 1), so against the true total N it has

    bias(M)     = -sum_c (n_c - (M - 1))^+                      (clipping at M - 1)
    Var(M)      = sum_c Var(r_c) / alpha^2                      (randomized response; grows ~ M^2 |C| / alpha)
    RMSE(M)^2   = bias(M)^2 + Var(M)

(the raw estimator; the clamped N~ = max(N~, |C|) that the library uses has a smaller error). ``M="rmse"``
picks the M minimizing this RMSE. The server must not look at the true sizes to do so, so it uses only
public knowledge: the number of clients |C| (it addresses them) and a size distribution the *user* assumes
(``size_prior``: a mean client size and a log-normal shape sigma, the paper's §4.1 population). The choice
is then a function of public inputs and costs no privacy. Choosing M from the private reports themselves
would be a second use of the data and is not offered.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from fedsample.privacy.reports import alpha_for, clip_size, estimator_variance

__all__ = [
    "best_M", "estimator_bias", "estimator_rmse", "first_round_budget", "rmse_M", "rmse_curve", "scaled_total",
    "scaled_total_variance", "simulated_totals", "summed_first_round_budget",
]

PRIOR_DRAWS = 8  # synthetic populations averaged when M is chosen from a prior
PRIOR_SEED = 0  # public: the choice must be reproducible by anyone holding the same inputs


def estimator_bias(sizes: np.ndarray, M: int) -> float:
    """E[N~] - N = -sum_c (n_c - (M - 1))^+: what clipping at M - 1 removes from the total."""
    n = np.asarray(sizes, dtype=np.float64)
    return -float(np.sum(n - clip_size(sizes, M)))


def estimator_rmse(sizes: np.ndarray, epsilon: float, M: int) -> float:
    """sqrt(bias^2 + Var) of the raw (unclamped) N~ against the true total, for true sizes ``sizes``."""
    return math.sqrt(estimator_bias(sizes, M) ** 2 + estimator_variance(sizes, epsilon, M))


def rmse_curve(sizes: np.ndarray, epsilon: float, Ms: np.ndarray) -> np.ndarray:
    """RMSE(M) for every M in ``Ms`` in one pass (sorted sizes and prefix sums: O(log |C|) per M).

    With k_M clients below M - 1 (kept) and the rest clipped to M - 1:
    sum n_clip = S_k + (|C| - k)(M - 1), sum n_clip^2 = Q_k + (|C| - k)(M - 1)^2, and
    Var = sum [alpha n^2 + (1-alpha) M(2M-1)/6 - (alpha n + (1-alpha) M/2)^2] / alpha^2 (:func:`~fedsample.privacy.reports.estimator_variance`)."""
    n = np.sort(np.asarray(sizes, dtype=np.float64))
    C = len(n)
    prefix, prefix_sq = np.concatenate([[0.0], np.cumsum(n)]), np.concatenate([[0.0], np.cumsum(n**2)])
    Ms = np.asarray(Ms, dtype=np.int64)
    top = (Ms - 1).astype(np.float64)
    kept = np.searchsorted(n, top, side="right")
    s1 = prefix[kept] + (C - kept) * top
    s2 = prefix_sq[kept] + (C - kept) * top**2
    alpha = np.array([alpha_for(epsilon, int(M)) for M in Ms])
    Mf = Ms.astype(np.float64)
    a, b = (1 - alpha) * Mf * (2 * Mf - 1) / 6, (1 - alpha) * Mf / 2
    variance = (alpha * s2 + C * a - (alpha**2 * s2 + 2 * alpha * b * s1 + C * b**2)) / alpha**2
    bias = s1 - prefix[-1]
    error: np.ndarray = np.sqrt(bias**2 + np.maximum(variance, 0.0))  # 0 where every client sits at M - 1, up to rounding
    return error


def candidate_Ms(sizes: np.ndarray) -> np.ndarray:
    """2 .. max size + 1: beyond max + 1 nothing is clipped and the variance only grows."""
    return np.arange(2, int(np.max(sizes)) + 2)


def best_M(sizes: np.ndarray, epsilon: float) -> int:
    """The M minimizing RMSE(M) for the population ``sizes`` (the oracle: it reads the true sizes)."""
    Ms = candidate_Ms(sizes)
    return int(Ms[np.argmin(rmse_curve(sizes, epsilon, Ms))])


def prior_populations(num_clients: int, mean: float, sigma: float, draws: int = PRIOR_DRAWS) -> list[np.ndarray]:
    """``draws`` synthetic populations of ``num_clients`` clients from the assumed distribution: the
    library's log-normal partition (:class:`fedsample.data.partition.LogNormalSizes`) of num_clients * mean
    samples, from a public seed."""
    from fedsample.data.partition import LogNormalSizes

    scheme = LogNormalSizes(mean=mean, sigma=sigma)
    rng = np.random.default_rng(PRIOR_SEED)
    return [scheme.sizes(int(round(num_clients * mean)), rng) for _ in range(draws)]


@lru_cache(maxsize=64)
def rmse_M(num_clients: int, epsilon: float, mean: float, sigma: float) -> int:
    """``M="rmse"``: the M minimizing the mean squared error of N~ over synthetic populations from the
    assumed prior (public inputs only, so no privacy cost)."""
    populations = prior_populations(num_clients, mean, sigma)
    Ms = np.arange(2, max(int(p.max()) for p in populations) + 2)
    mse = np.mean([rmse_curve(p, epsilon, Ms) ** 2 for p in populations], axis=0)
    return int(Ms[np.argmin(mse)])


def simulated_totals(sizes: np.ndarray, epsilon: float, M: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` raw (unclamped) N~ for the population ``sizes``, from randomized responses (Eq. 1-2): each
    client tells the truth with probability alpha, otherwise sends a uniform fake size on {1, ..., M-1}."""
    alpha = alpha_for(epsilon, M)
    clipped = clip_size(sizes, M)
    C = len(clipped)
    totals = np.empty(draws)
    for i in range(draws):
        truthful = rng.random(C) < alpha
        liars = int(C - truthful.sum())
        report_sum = float(clipped[truthful].sum()) + float(rng.integers(1, M, size=liars).sum())
        totals[i] = (report_sum - (1 - alpha) * M * C / 2) / alpha
    return totals



def first_round_budget(sizes: np.ndarray, epsilon: float, M: int, K: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` expected first-round budgets E[S]/K = N min(1, K/N~)/K, N~ the clamped estimate max(N~, |C|) from
    randomized reports at threshold M: what a FedSampling round draws, in units of K, before any drawn count has
    been seen (from the second round on the steered ratio replaces N~, :class:`fedsample.sampling.data.FedSamplingData`)."""
    n = np.asarray(sizes)
    N = float(n.sum())
    totals = np.maximum(simulated_totals(n, epsilon, int(M), draws, rng), float(len(n)))
    budgets: np.ndarray = N * np.minimum(1.0, K / totals) / K
    return budgets


def summed_first_round_budget(sizes: np.ndarray, sigma: float, K: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` expected first-round budgets E[S]/K = N min(1, K/N^)/K of the library's default, N^ = N + N(0, sigma^2)
    the clients' sizes summed inside the secure sum with every client's noise share (all answer), floored at |C|
    (:meth:`fedsample.sampling.data.FedSamplingData.summed_total`): no randomized report, no threshold M."""
    n = np.asarray(sizes)
    N = float(n.sum())
    totals = np.maximum(N + rng.normal(0.0, float(sigma), draws), float(len(n)))
    return N * np.minimum(1.0, K / totals) / K


# --- the estimate from the clients that answered (docs/reliability.md, missing replies) ------------------


def scaled_total(total_over_answered: float, asked: int, answered: int) -> float:
    """N~_adj = (n / a) * N~_a: the estimate over the a answering clients scaled to the n asked."""
    if answered <= 0:
        raise ValueError("no size report arrived: the total cannot be estimated")
    return total_over_answered * asked / answered


def scaled_total_variance(sizes: np.ndarray, epsilon: float, M: int, answered: int) -> float:
    """Var(N~_adj) when ``answered`` = a of the n = len(sizes) asked clients answer, a uniform random subset:

        Var = (n/a)^2 * (a/n) * sum_c Var(r_c) / alpha^2   +   n^2 (1 - a/n) S^2 / a,

    the randomized-response noise of the a reports (:func:`~fedsample.privacy.reports.estimator_variance`, averaged over which
    clients answered) plus the sampling variance of expanding a simple random sample's total, S^2 the
    variance (ddof=1) of the clipped sizes over the asked clients."""
    sizes = np.asarray(sizes)
    if sizes.ndim != 1:
        raise ValueError(f"sizes must be a 1-D array of client sizes, got shape {sizes.shape}")
    n, a = len(sizes), int(answered)
    if not 1 <= a <= n:
        raise ValueError(f"answered must be in [1, {n}], got {answered}")
    noise = (n / a) ** 2 * (a / n) * estimator_variance(sizes, epsilon, M)
    clipped = clip_size(sizes, M).astype(np.float64)
    spread = float(np.var(clipped, ddof=1)) if n > 1 else 0.0
    return noise + n**2 * (1 - a / n) * spread / a
