"""How many clients a round needs for a target number of training samples (``samples_per_round``).

The FedSampling paper (Qi et al. 2023, §4) asks for K = 2048 samples per round; a client-level
baseline matched to it must choose its cohort so that the chosen clients hold K samples in expectation.
The count follows from the clients' reported sizes, so it changes as the population does and is never
computed by hand. What the server needs: the mean size (uniform sampling), the size-weighted mean
size sum n_k^2 / sum n_k (size-proportional sampling) or the total (Poisson sampling); all three are
taken from exact size reports of every client, which reveals each client's size to the server.
"""

from __future__ import annotations

import math
from typing import TypeVar

import numpy as np

from fedsample import checks

__all__ = [
    "one_of", "randomly_rounded", "size_weighted_count", "sizes_given", "uniform_count", "with_replacement_inclusion",
]

N = TypeVar("N", int, float)


def one_of(name: str, fixed: N | None, samples_per_round: int | None, default: N, owner: str | None = None) -> N | None:
    """The fixed cohort parameter ``name`` (m or q), or None when ``samples_per_round`` replaces it;
    ``default`` when neither is given. Giving both is one :class:`~fedsample.checks.ParameterError` line (the
    values themselves are checked by their owner's constraints)."""
    if fixed is not None and samples_per_round is not None:
        checks.fail(name, fixed, "None when samples_per_round is given (give one of them, not both)", owner)
    if samples_per_round is not None:
        return None
    return default if fixed is None else fixed


def sizes_given(sizes: np.ndarray | None, sampler: object) -> np.ndarray:
    """The clients' sizes that a sampler's expected cohort follows from (``samples_per_round``, size-proportional
    draws); None is an error naming the sampler (its cohort cannot be known without them)."""
    if sizes is None:
        raise ValueError(f"{type(sampler).__name__}'s expected cohort follows from the clients' sizes: pass sizes=")
    return np.asarray(sizes, dtype=np.float64)


def _positive_sizes(sizes: np.ndarray) -> np.ndarray:
    sizes = np.asarray(sizes, dtype=np.float64)
    if sizes.size == 0 or not np.all(np.isfinite(sizes)) or sizes.sum() <= 0:
        raise ValueError("samples_per_round needs at least one client with a positive reported size")
    return sizes


def mean_size(sizes: np.ndarray) -> float:
    """mean(n_k) of the reported sizes: a uniform cohort of m clients holds m * mean(n_k) samples in expectation."""
    return float(np.mean(_positive_sizes(sizes)))


def uniform_count(sizes: np.ndarray, samples_per_round: int) -> float:
    """E[m] for uniform sampling without replacement: the cohort holds m * mean(n_k) samples in
    expectation, so m = K / mean(n_k) (at least 1; a round records the floor, :mod:`fedsample.sampling.clamp`)."""
    return max(1.0, samples_per_round / mean_size(sizes))


def size_weighted_draws(sizes: np.ndarray, samples_per_round: int) -> float:
    """m for m draws with replacement, p_k = n_k / n: one draw carries sum_k p_k n_k = sum n_k^2 / n samples in
    expectation (a client drawn twice counts twice), so m = K n / sum n_k^2."""
    sizes = _positive_sizes(sizes)
    return samples_per_round * float(sizes.sum()) / float(np.sum(sizes**2))


def size_weighted_count(sizes: np.ndarray, samples_per_round: int) -> float:
    """E[m] for size-proportional draws: :func:`size_weighted_draws`, at least 1."""
    return max(1.0, size_weighted_draws(sizes, samples_per_round))


def randomly_rounded(expected: float, rng: np.random.Generator) -> int:
    """floor(expected) or floor(expected) + 1, the latter with probability frac(expected): an integer
    whose mean is ``expected`` exactly."""
    low = math.floor(expected)
    return low + int(rng.random() < expected - low)


def with_replacement_inclusion(p: np.ndarray, expected: float) -> np.ndarray:
    """pi_k = 1 - E[(1 - p_k)^m] for m randomly rounded from ``expected`` (a mixture of the two counts)."""
    low = math.floor(expected)
    frac = expected - low
    miss = (1 - frac) * (1 - p) ** low + frac * (1 - p) ** (low + 1)
    return 1 - miss
