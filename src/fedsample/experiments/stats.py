"""Summaries over seeds: mean, sample standard deviation (ddof = 1) and n; final rounds, and the oracle best
round on the test set."""

from __future__ import annotations

import math
from typing import Sequence

from fedsample.runtime.records import JSONObject, RecordView, as_optional_number, numbers_in

__all__ = ["LOWER_IS_BETTER", "best_round", "mean_sd_n", "metric_table", "over_seeds"]

# Metrics where smaller is better (experiments: loss, mse; studies: rmse, MSD in dB); every other is larger-is-better.
LOWER_IS_BETTER = frozenset({"loss", "mse", "rmse", "msd_db"})
"""Metrics where smaller is better (experiments: loss, mse; studies: rmse, MSD in dB); every other is larger-is-better."""


def over_seeds(per_seed: Sequence[float | None]) -> JSONObject:
    """``{"mean", "sd", "n", "per_seed"}`` over the seeds with a value (None marks a seed that stopped):
    :func:`mean_sd_n`."""
    mean, sd, n = mean_sd_n(per_seed)
    return {"mean": mean, "sd": sd, "n": n, "per_seed": list(per_seed)}


def mean_sd_n(per_seed: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """The mean, the sample standard deviation sqrt(sum (x - mean)^2 / (n - 1)) and n of the seeds with a value
    (None marks a seed that stopped): sd is None for n = 1; mean and sd are None for n = 0 (every seed stopped)."""
    values = [float(v) for v in per_seed if v is not None]
    n = len(values)
    mean = sum(values) / n if n else None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 and mean is not None else None
    return mean, sd, n


def best_round(history: Sequence[RecordView], metric: str) -> float | None:
    """The oracle: the best value of ``metric`` over the evaluated rounds on the test set (max, or min for a
    loss), picked by looking at the test metric itself, so an optimistic bound and not a result; None if
    never measured."""
    values = numbers_in(history, metric)
    if not values:
        return None
    return min(values) if metric in LOWER_IS_BETTER else max(values)


def metric_table(per_seed_metrics: Sequence[RecordView | None], metrics: tuple[str, ...]) -> JSONObject:
    """Per metric measured in every finished seed, its :func:`over_seeds` summary (None: a seed that stopped);
    when every seed stopped, each of ``metrics`` with n = 0 and null mean and sd (the keys stay the same)."""
    done = [m for m in per_seed_metrics if m is not None]
    table: JSONObject = {}
    for metric in metrics:
        if done and any(m.get(metric) is None for m in done):
            continue
        table[metric] = over_seeds([None if m is None else as_optional_number(m[metric], metric) for m in per_seed_metrics])
    return table
