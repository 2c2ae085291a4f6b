"""Private data-size reports: randomized response over {1, ..., M-1} (Qi et al. 2023, §3.3 and Lemma 3.2).

A client clips its size to ``n = min(|D|, M - 1)``, draws a fake size uniformly on ``{1, ..., M-1}`` and
sends the true clipped value with probability ``alpha`` (Eq. 1). The server estimates the total clipped
size by ``N~ = (R - (1 - alpha) * M * |C| / 2) / alpha`` (Eq. 2), which is unbiased (Eq. 5-7).

Note: the estimator is unbiased for the total *clipped* size ``sum_c min(|D_c|, M - 1)``; it equals the
true total N only when no client holds M or more samples (the paper's Eq. 7 glosses over this).
"""

from __future__ import annotations

import math
from typing import Sequence, TypedDict

import numpy as np

from fedsample import checks
from fedsample.messages import SizeQuery
from fedsample.rng import ClientRandom, CohortRandom, uniform_integers

__all__ = [
    "Audit", "PERMANENT_REPORT", "PERMANENT_ROUND", "alpha_for", "clip_size", "estimate_total", "estimator_variance", "privacy_audit",
    "randomized_response", "report_cell", "response_distribution", "validate_reports",
]

PERMANENT_REPORT = "report_size/permanent"  # purpose of the round-independent stream of permanent reports
"""Purpose of the round-independent stream of permanent reports."""
PERMANENT_ROUND = 0  #: the one (fixed) round index of that stream


#: The randomized response's parameters: epsilon > 0 and the size threshold M, an integer >= 2.
EPSILON = checks.POSITIVE
THRESHOLD = checks.integers(2)


def _check(epsilon: float, M: int) -> None:
    checks.validate(None, {"epsilon": epsilon, "M": M}, {"epsilon": EPSILON, "M": THRESHOLD})


def alpha_for(epsilon: float, M: int) -> float:
    """Probability of reporting the true size that gives epsilon-LDP: alpha = (e^eps - 1)/(e^eps + M - 2) (Eq. 21),
    computed as (1 - e^-eps)/(1 + (M - 2) e^-eps) so that a huge epsilon gives alpha -> 1 without overflow."""
    _check(epsilon, M)
    tail = math.exp(-epsilon)
    return -math.expm1(-epsilon) / (1 + (M - 2) * tail)


def noise_for(epsilon: float, M: int) -> float:
    """dp-accounting's noise parameter of Eq. 1, 1 - alpha = (M - 1) e^-eps / (1 + (M - 2) e^-eps): the chance of a
    uniform answer over the M - 1 sizes. ``1 - alpha_for`` while that is at least 1e-6 (exact to about 1e-10 relative
    there, and the value every run has used), else the tail formula, which 1 - alpha rounds to 0 from eps ~ 37 on;
    0.0 only where e^-eps underflows (eps > ~745): the true size is then always reported."""
    rounded = 1.0 - alpha_for(epsilon, M)
    if rounded >= 1e-6:
        return rounded
    tail = math.exp(-epsilon)
    return (M - 1) * tail / (1 + (M - 2) * tail)


def clip_size(n: np.ndarray | int, M: int) -> np.ndarray:
    """The true response n_c = min(|D_c|, M - 1) (§3.3)."""
    return np.minimum(np.asarray(n, dtype=np.int64), M - 1)


def randomized_response(n: np.ndarray | int, epsilon: float, M: int, rng: "np.random.Generator | ClientRandom | CohortRandom") -> np.ndarray:
    """Eq. 1: r_c = x_c * n_c + (1 - x_c) * n^_c, x_c ~ B(alpha), n^_c ~ U{1, ..., M-1}. Vectorized over clients.

    With a :class:`~fedsample.rng.CohortRandom` (one entry of ``n`` per client of the cohort) each client's
    answer equals the one it computes alone with its :class:`~fedsample.rng.ClientRandom`."""
    alpha = alpha_for(epsilon, M)
    n = np.asarray(n, dtype=np.int64)
    if np.any(n < 1):
        raise ValueError("a client reporting its size must hold at least one sample")
    if isinstance(rng, CohortRandom):  # one client each: draw 0 decides, draw 1 is the fake size
        u = rng.columns(2)
        return np.where(u[:, 0] < alpha, clip_size(n, M), uniform_integers(u[:, 1], 1, M))
    truthful = rng.random(n.shape) < alpha
    fake = rng.integers(1, M, size=n.shape)
    return np.where(truthful, clip_size(n, M), fake)


def response_distribution(n: int, epsilon: float, M: int) -> np.ndarray:
    """P(report = y | size n) for y = 1..M-1 (Eq. 17-18); index y-1."""
    alpha = alpha_for(epsilon, M)
    probs = np.full(M - 1, (1 - alpha) / (M - 1))
    probs[int(clip_size(n, M)) - 1] += alpha
    return probs


def validate_reports(reports: np.ndarray, M: int, client_ids: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """Reject any report outside {1, ..., M-1}, naming the client that sent it; the reports as int64 (the array
    itself where it already is)."""
    reports = np.asarray(reports)
    if reports.ndim != 1 or not (np.issubdtype(reports.dtype, np.integer) or np.issubdtype(reports.dtype, np.floating)):
        raise ValueError(f"size reports must be a 1-D array of numbers (one per client), got shape {reports.shape} of {reports.dtype}")
    if np.issubdtype(reports.dtype, np.integer) and (len(reports) == 0 or (reports.min() >= 1 and reports.max() <= M - 1)):
        # integers in range: two reductions instead of a pass per condition; int64 ones as they are (no copy)
        return reports.astype(np.int64, copy=False)
    bad = np.flatnonzero((reports < 1) | (reports > M - 1) | (reports != np.round(reports)))
    if len(bad):
        who = client_ids[bad[0]] if client_ids is not None else int(bad[0])
        raise ValueError(f"size report {reports[bad[0]]!r} from client {who} is outside {{1, ..., {M - 1}}}")
    return reports.astype(np.int64)


def estimate_total(
    reports: np.ndarray, epsilon: float, M: int, client_ids: Sequence[int] | np.ndarray | None = None, clamp: bool = True
) -> float:
    """Unbiased estimate of the total (clipped) size over the clients that answered (Eq. 2).

    ``N~ = (R - (1 - alpha) * M * |C| / 2) / alpha``; with ``clamp`` the estimate is raised to at least the
    number of answers (every answering client holds at least one sample); the raw estimate is unbiased.
    """
    alpha = alpha_for(epsilon, M)
    reports = validate_reports(reports, M, client_ids)
    answered = len(reports)
    estimate = (reports.sum(dtype=np.float64) - (1 - alpha) * M * answered / 2) / alpha
    return max(estimate, float(answered)) if clamp else float(estimate)


def estimator_variance(sizes: np.ndarray, epsilon: float, M: int) -> float:
    """Var(N~) = sum_c Var(r_c) / alpha^2 for true sizes ``sizes`` (unclamped estimator).

    With n_c clipped, u ~ U{1..M-1}: E[u] = M/2, E[u^2] = M(2M-1)/6, and
    Var(r_c) = alpha*n_c^2 + (1-alpha)*M(2M-1)/6 - (alpha*n_c + (1-alpha)*M/2)^2.
    """
    alpha = alpha_for(epsilon, M)
    n = clip_size(sizes, M).astype(np.float64)
    second = alpha * n**2 + (1 - alpha) * M * (2 * M - 1) / 6
    first = alpha * n + (1 - alpha) * M / 2
    return float(np.sum(second - first**2) / alpha**2)


class Audit(TypedDict):
    """:func:`privacy_audit`'s answer: epsilon, its bound e^epsilon, the largest observed ratio, the pair of true sizes
    and the report where it was observed (None: no pair)."""

    epsilon: float
    bound: float
    max_ratio: float
    pair: tuple[int, int] | None
    y: int | None


def privacy_audit(epsilon: float, M: int, draws: int, rng: np.random.Generator, sizes: Sequence[int] = (1,)) -> Audit:
    """Monte Carlo privacy audit: for each pair of true sizes, the largest empirical ratio
    P^(report = y | n) / P^(report = y | n') over outputs y, to compare with e^epsilon (Definition 3.2).

    Returns ``{"epsilon": eps, "bound": e^eps, "max_ratio": observed, "pair": (n, n'), "y": y}``.
    """
    sizes = list(sizes) if len(sizes) > 1 else [1, M - 1]
    counts: dict[int, np.ndarray] = {}
    for n in sizes:
        reports = randomized_response(np.full(draws, n), epsilon, M, rng)
        counts[n] = np.bincount(reports, minlength=M)[1:] / draws
    best: tuple[float, tuple[int, int] | None, int | None] = (0.0, None, None)
    for n in sizes:
        for other in sizes:
            if n == other:
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(counts[other] > 0, counts[n] / counts[other], np.inf)
            y = int(np.argmax(ratio))
            if ratio[y] > best[0]:
                best = (float(ratio[y]), (n, other), y + 1)
    return {"epsilon": epsilon, "bound": math.exp(epsilon) if epsilon < 700 else math.inf, "max_ratio": best[0], "pair": best[1], "y": best[2]}


def report_cell(query: SizeQuery, round: int) -> tuple[int, str]:
    """The (round, purpose) cell whose client streams draw randomized size reports: the round's own cell,
    or one fixed cell for every round when the reports are permanent."""
    return (PERMANENT_ROUND, PERMANENT_REPORT) if query.permanent else (int(round), SizeQuery.procedure.stream)
