"""A count or probability that a round cannot realize, moved to the nearest value it can, and said so.

A sampler's target is derived each round from what the clients reported: FedSampling's keep probability K/N~
from a noisy estimate N~ (Qi et al. 2023, §3.2), FedSTaS's eta/n~ (Slessor et al. 2025, Eq. 8), a cohort of
K / mean(n_k) clients for ``samples_per_round``. What the data bounds outright (K above the training samples, m
above the clients) is refused before the first round (:meth:`fedsample.strategy.Strategy.check_data`); what only a
round's reports push out of range (N~ below K, a lost size report changing the mean) is clamped here, and the
round's record keeps the value asked under ``clamped`` (``{"ratio": 1.37}``: K/N~ was 1.37, 1 was used), so the
run log states every clamp (docs/parameters.md).
"""

from __future__ import annotations

from fedsample.runtime.records import Record, table_in

__all__ = ["clamped"]


def clamped(log: Record, name: str, asked: float, low: float, high: float) -> float:
    """``asked`` moved into [``low``, ``high``]; when it had to move, ``log["clamped"][name] = asked``."""
    used = min(max(float(asked), low), high)
    if used != asked:
        table_in(log, "clamped")[name] = float(asked)
    return used
