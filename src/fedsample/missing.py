"""Estimation under missing replies (docs/reliability.md, "What dropout does to the estimates").

When each asked client answers independently with the same probability (missing completely at random),
the clients that answered are a random subsample of those asked. The standard remedies:

- Horvitz-Thompson weights 1/(N pi_k) become 1/(N pi_k r), r = answered/asked the observed response
  rate: conditional on the number that answered, each asked client answers with probability r, so its
  overall inclusion probability is pi_k * r (the response-rate, or weighting-class, adjustment).
- FedSampling's N~ (Qi et al. 2023, Eq. 2) computed from the a reports received estimates the total
  over those a clients; scaled by n/a (n asked) it is unbiased for the total over the n asked clients
  (:func:`fedsample.privacy.size_estimate.scaled_total` and its variance, ``scaled_total_variance``).
"""

from __future__ import annotations

__all__ = ["response_rate"]


def response_rate(asked: int, answered: int) -> float:
    """r = answered / asked (1 when nobody was asked)."""
    if answered < 0 or answered > asked:
        raise ValueError(f"answered must be in [0, asked], got answered={answered}, asked={asked}")
    return answered / asked if asked else 1.0
