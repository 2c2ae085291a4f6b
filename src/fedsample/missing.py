"""Estimation under missing replies (docs/reliability.md, "What dropout does to the estimates").

When each asked client answers independently with the same probability (missing completely at random),
the clients that answered are a random subsample of those asked. The standard remedies:

- Horvitz-Thompson weights 1/(N pi_k) become 1/(N pi_k r), r = answered/asked the observed response
  rate: conditional on the number that answered, each asked client answers with probability r, so its
  overall inclusion probability is pi_k * r (the response-rate, or weighting-class, adjustment).
- FedSampling's N~ (Qi et al. 2023, Eq. 2) computed from the a reports received estimates the total
  over those a clients; scaled by n/a (n asked) it is unbiased for the total over the n asked clients,
  with the variance of :func:`scaled_total_variance`.
"""

from __future__ import annotations

import numpy as np

from fedsample import privacy


def response_rate(asked: int, answered: int) -> float:
    """r = answered / asked (1 when nobody was asked)."""
    if answered < 0 or answered > asked:
        raise ValueError(f"answered must be in [0, asked], got answered={answered}, asked={asked}")
    return answered / asked if asked else 1.0


def scaled_total(total_over_answered: float, asked: int, answered: int) -> float:
    """N~_adj = (n / a) * N~_a: the estimate over the a answering clients scaled to the n asked."""
    if answered <= 0:
        raise ValueError("no size report arrived: the total cannot be estimated")
    return total_over_answered * asked / answered


def scaled_total_variance(sizes: np.ndarray, epsilon: float, M: int, answered: int) -> float:
    """Var(N~_adj) when ``answered`` = a of the n = len(sizes) asked clients answer, a uniform random subset:

        Var = (n/a)^2 * (a/n) * sum_c Var(r_c) / alpha^2   +   n^2 (1 - a/n) S^2 / a,

    the randomized-response noise of the a reports (privacy.estimator_variance, averaged over which
    clients answered) plus the sampling variance of expanding a simple random sample's total, S^2 the
    variance (ddof=1) of the clipped sizes over the asked clients."""
    sizes = np.asarray(sizes)
    if sizes.ndim != 1:
        raise ValueError(f"sizes must be a 1-D array of client sizes, got shape {sizes.shape}")
    n, a = len(sizes), int(answered)
    if not 1 <= a <= n:
        raise ValueError(f"answered must be in [1, {n}], got {answered}")
    noise = (n / a) ** 2 * (a / n) * privacy.estimator_variance(sizes, epsilon, M)
    clipped = privacy.clip_size(sizes, M).astype(np.float64)
    spread = float(np.var(clipped, ddof=1)) if n > 1 else 0.0
    return noise + n**2 * (1 - a / n) * spread / a
