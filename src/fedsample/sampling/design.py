"""Sampling designs and their inclusion probabilities.

Every design here returns, with the chosen unit ids, the *first-order inclusion probability*
``pi_k = P(unit k is in the sample)`` of each chosen unit, so that callers can form Horvitz-Thompson
weights ``1 / pi_k`` (Horvitz & Thompson 1952) and keep their estimates unbiased.

Designs (references are to the standard survey-sampling literature, e.g. Sarndal, Swensson & Wretman,
*Model Assisted Survey Sampling*, 1992, and Tille, *Sampling Algorithms*, 2006):

- :func:`simple_random`: simple random sampling without replacement (SRSWOR), ``pi_k = m / N``.
- :func:`bernoulli`: each unit independently with probability ``q``.
- :func:`poisson`: unit ``k`` independently with probability ``probs[k]``.
- :func:`systematic`: Madow's (1949) systematic sampling on given inclusion probabilities, the scheme
  ISFedAvg (Rizk, Vlaski & Sayed 2022, section IV-C) uses to pick agents without replacement.
- :func:`systematic_sample`: :func:`inclusion_probabilities` (pi proportional to size, capped at 1)
  followed by :func:`systematic`.
- :func:`pps_with_replacement`: ``m`` independent draws with probabilities ``p`` (Li et al. 2019's
  size-weighted client sampling).
- :func:`stratified`: independent designs inside strata, with :func:`allocate_proportional` and
  :func:`allocate_neyman` (Neyman 1934) to split the sample size among strata.
- :func:`successive_sampling_inclusion`: the exact inclusion probabilities of successive sampling (n draws
  without replacement, each proportional to ``p`` among the units not yet drawn: numpy's
  ``Generator.choice(replace=False, p=p)``), by enumerating subsets (small populations only).
- :func:`replay_inclusion`: Monte Carlo inclusion frequencies of any selection procedure, for the designs
  whose probabilities have no closed form (the published samplers of ``sampling/power_of_choice.py``,
  ``fedcbs.py``, ``oort.py``).

All randomness comes from the ``numpy.random.Generator`` passed in; nothing draws from global state.
All work is vectorized numpy over units (the only Python loop is over strata in :func:`stratified`).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real
from typing import Callable

import numpy as np

from fedsample.rng import ClientRandom

__all__ = [
    "Sample",
    "inclusion_probabilities",
    "simple_random",
    "bernoulli",
    "poisson",
    "systematic",
    "systematic_sample",
    "pps_with_replacement",
    "allocate_proportional",
    "allocate_neyman",
    "stratified",
    "successive_sampling_sets",
    "successive_sampling_inclusion",
    "replay_inclusion",
    "check_rng",
    "check_count",
    "nonnegative_vector",
    "probability_vector",
    "finite_matrix",
]

#: How far the inclusion probabilities given to :func:`systematic` may sum from an integer.
SUM_TOLERANCE = 1e-6
#: How far outside [0, 1] a probability may lie from rounding before it is an error (it is then clipped).
PROB_TOLERANCE = 1e-9
#: The largest population :func:`successive_sampling_sets` enumerates (2^20 subsets, 8 MiB per array).
SUCCESSIVE_EXACT_LIMIT = 20


@dataclass(frozen=True)
class Sample:
    """The outcome of one draw of a sampling design.

    ``ids`` are the chosen unit ids (int64, sorted ascending, each id once), ``inclusion`` the
    first-order inclusion probability ``pi_k`` of each chosen unit (float64, same order as ``ids``), and
    ``multiplicity`` how many times each id was drawn (int64; all 1 for designs without replacement).
    """

    ids: np.ndarray
    inclusion: np.ndarray
    multiplicity: np.ndarray

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids, dtype=np.int64)
        inclusion = np.asarray(self.inclusion, dtype=np.float64)
        multiplicity = np.asarray(self.multiplicity, dtype=np.int64)
        if ids.ndim != 1 or inclusion.shape != ids.shape or multiplicity.shape != ids.shape:
            raise ValueError(
                "Sample: ids, inclusion and multiplicity must be 1-D of the same length, got shapes "
                f"{ids.shape}, {inclusion.shape}, {multiplicity.shape}"
            )
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "inclusion", inclusion)
        object.__setattr__(self, "multiplicity", multiplicity)

    def __len__(self) -> int:
        return int(self.ids.shape[0])


# ----------------------------------------------------------------------------------------------------
# validation helpers


def _check_rng(rng: object, where: str) -> np.random.Generator:
    """A numpy Generator, or the Generator behind a client's stream (``fedsample.rng.ClientRandom.generator``)."""
    if isinstance(rng, ClientRandom):
        return rng.generator
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{where}: rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def _check_int(value: object, name: str, where: str, minimum: int = 0) -> int:
    """``value`` as an int when it is an integer >= ``minimum``; else one ``ValueError`` naming ``where`` and ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral):
        raise ValueError(f"{where}: {name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{where}: {name} must be >= {minimum}, got {value}")
    return value


def _finite_array(values: object, name: str, where: str, ndim: int, shape_note: str = "") -> np.ndarray:
    """A float64 array of ``ndim`` dimensions with finite entries (``shape_note``: what the dimensions mean)."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {name} must be numeric, got {values!r}") from exc
    if arr.ndim != ndim:
        raise ValueError(f"{where}: {name} must be {ndim}-D{shape_note}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))
        raise ValueError(f"{where}: {name} contains NaN or infinite values (first at index {bad[0]} of the flattened array)")
    return arr


def _float_vector(values: object, name: str, where: str) -> np.ndarray:
    """1-D float64 array with finite, non-negative entries."""
    arr = _finite_array(values, name, where, 1)
    if np.any(arr < 0):
        bad = np.flatnonzero(arr < 0)
        raise ValueError(f"{where}: {name} contains negative values (first at index {bad[0]}: {arr[bad[0]]})")
    return arr


def _prob_vector(values: object, name: str, where: str) -> np.ndarray:
    """1-D float64 array of probabilities in [0, 1] (values within PROB_TOLERANCE of 1 are clipped)."""
    arr = _float_vector(values, name, where)
    if np.any(arr > 1 + PROB_TOLERANCE):
        bad = np.flatnonzero(arr > 1 + PROB_TOLERANCE)
        raise ValueError(f"{where}: {name} must be <= 1, got {arr[bad[0]]} at index {bad[0]}")
    probs: np.ndarray = np.minimum(arr, 1.0)
    return probs


def _int_vector(values: object, name: str, where: str) -> np.ndarray:
    """1-D int64 array with non-negative integer entries (integer-valued floats are accepted)."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{where}: {name} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise ValueError(f"{where}: {name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{where}: {name} contains NaN or infinite values")
        if np.any(arr != np.round(arr)):
            raise ValueError(f"{where}: {name} must hold integers, got non-integer values")
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        bad = np.flatnonzero(arr < 0)
        raise ValueError(f"{where}: {name} contains negative values (first at index {bad[0]}: {arr[bad[0]]})")
    return arr


def _float_matrix(values: object, name: str, where: str) -> np.ndarray:
    """2-D float64 array (one row per unit) with finite entries."""
    return _finite_array(values, name, where, 2, " (one row per unit)")


#: Public names of the validation helpers, for the published designs built on this module
#: (``sampling/clustered.py``, ``power_of_choice.py``, ...): each raises one ``ValueError`` naming the parameter
#: (``check_rng``: ``TypeError`` for a non-Generator).
check_rng = _check_rng
check_count = _check_int
nonnegative_vector = _float_vector
probability_vector = _prob_vector
finite_matrix = _float_matrix


# ----------------------------------------------------------------------------------------------------
# inclusion probabilities


def inclusion_probabilities(weights: np.ndarray, n: float) -> np.ndarray:
    """Inclusion probabilities proportional to size for an expected sample size ``n``.

    Computes ``pi_k = n * w_k / sum(w)``; units whose ``pi_k`` would exceed 1 are taken with certainty
    (``pi_k = 1``) and the others are rescaled so that ``sum(pi) == n``, repeated until no probability
    exceeds 1 (the classical iterative rule, e.g. Tille 2006, algorithm 2.1). Zero weights get
    ``pi_k = 0``.

    The fixed point of the iteration is computed directly: the certain units are the ``c`` largest
    weights for the smallest ``c`` with ``(n - c) * w_(c+1) <= sum_{j > c} w_(j)`` (weights sorted
    descending). Only the ``ceil(n)`` largest weights are ever sorted, so the cost is
    ``O(N + n log n)``.

    Raises ``ValueError`` if ``weights`` is not 1-D, has NaN/inf or negative entries, if ``n`` is negative
    or not finite, or if ``n`` exceeds the number of positive weights (in particular when all weights are
    zero and ``n > 0``).
    """
    where = "inclusion_probabilities"
    w = _float_vector(weights, "weights", where)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, Real) or not np.isfinite(n):
        raise ValueError(f"{where}: n must be a finite number, got {n!r}")
    n = float(n)
    if n < 0:
        raise ValueError(f"{where}: n must be >= 0, got {n}")
    positive = w > 0
    num_positive = int(np.count_nonzero(positive))
    if n == 0:
        return np.zeros_like(w)
    if num_positive == 0:
        raise ValueError(f"{where}: all weights are zero, but n = {n} > 0 needs positive mass")
    if n > num_positive + PROB_TOLERANCE:
        raise ValueError(
            f"{where}: n = {n} exceeds the number of positive weights ({num_positive}); "
            "no design can include more units than have positive weight"
        )
    if n >= num_positive:  # every positive unit is certain
        return positive.astype(np.float64)

    scaled = w / w.max()  # scale-free: subnormal or huge weights neither overflow nor underflow n / sum(w)
    pi = scaled * (n / float(scaled.sum()))
    if not np.any(pi > 1):
        return pi
    # the certainty step works on the unscaled weights: scaling could underflow a subnormal weight to 0

    # Candidates for certainty: the K = ceil(n) largest weights (at most floor(n) < K units can be certain).
    K = min(int(np.ceil(n)), num_positive)
    part = np.partition(w, w.size - K)
    v = np.sort(part[w.size - K:])[::-1]  # the K largest weights, descending
    rest_sum = float(part[: w.size - K].sum())
    # tail[c] = sum of all weights except the c largest (summed from the small end: no cancellation)
    tail = rest_sum + np.concatenate([np.cumsum(v[::-1])[::-1], [0.0]])
    c_values = np.arange(K)
    ok = (n - c_values) * v <= tail[:K]  # the (c+1)-th largest would get pi <= 1 with c units certain
    c = int(np.argmax(ok))  # ok[K-1] always holds when n < num_positive
    # With the c largest certain, the rest share n - c in proportion to w. The certain units themselves get
    # (n - c) * w / tail[c] > 1 (minimality of c), so clipping at 1 marks exactly them, ties included.
    with np.errstate(over="ignore"):  # w / tail[c] of a certain unit may overflow to inf: clipped to 1 below
        pi = (n - c) * (w / tail[c])
    return np.minimum(pi, 1.0, out=pi)


# ----------------------------------------------------------------------------------------------------
# equal-probability and independent designs


def simple_random(N: int, m: int, rng: np.random.Generator) -> Sample:
    """Simple random sampling without replacement (SRSWOR): ``m`` distinct units out of ``N``, every
    subset of size ``m`` equally likely, so ``pi_k = m / N`` for every unit.

    Raises ``ValueError`` if ``N`` or ``m`` is not a non-negative integer or if ``m > N``.
    """
    where = "simple_random"
    rng = _check_rng(rng, where)
    N = _check_int(N, "N", where)
    m = _check_int(m, "m", where)
    if m > N:
        raise ValueError(f"{where}: m = {m} exceeds the population size N = {N} (sampling without replacement)")
    ids = np.sort(rng.choice(N, size=m, replace=False, shuffle=False).astype(np.int64)) if m else np.zeros(0, np.int64)
    pi = m / N if N else 0.0
    return Sample(ids, np.full(m, pi), np.ones(m, dtype=np.int64))


def bernoulli(N: int, q: float, rng: np.random.Generator) -> Sample:
    """Bernoulli sampling: each of ``N`` units is included independently with probability ``q``, so
    ``pi_k = q`` and the sample size is Binomial(N, q).

    Raises ``ValueError`` if ``N`` is not a non-negative integer or ``q`` is not in [0, 1].
    """
    where = "bernoulli"
    rng = _check_rng(rng, where)
    N = _check_int(N, "N", where)
    if isinstance(q, (bool, np.bool_)) or not isinstance(q, Real) or not (0.0 <= float(q) <= 1.0):
        raise ValueError(f"{where}: q must be a probability in [0, 1], got {q!r}")
    q = float(q)
    ids = np.flatnonzero(rng.random(N) < q).astype(np.int64)
    return Sample(ids, np.full(ids.size, q), np.ones(ids.size, dtype=np.int64))


def poisson(probs: np.ndarray, rng: np.random.Generator) -> Sample:
    """Poisson sampling: unit ``k`` is included independently with probability ``probs[k]``, so
    ``pi_k = probs[k]`` and the sample size is random with mean ``sum(probs)``.

    Raises ``ValueError`` if ``probs`` is not 1-D or has NaN/inf, negative or > 1 entries.
    """
    where = "poisson"
    rng = _check_rng(rng, where)
    p = _prob_vector(probs, "probs", where)
    ids = np.flatnonzero(rng.random(p.size) < p).astype(np.int64)
    return Sample(ids, p[ids], np.ones(ids.size, dtype=np.int64))


# ----------------------------------------------------------------------------------------------------
# systematic sampling (Madow 1949)


def systematic(inclusion_probs: np.ndarray, rng: np.random.Generator | ClientRandom) -> np.ndarray:
    """Madow's (1949) systematic sampling with unequal probabilities; returns the sorted chosen ids.

    With progressive totals ``T_k = pi_1 + ... + pi_k`` (``T_0 = 0``) and one uniform start
    ``u ~ U[0, 1)``, unit ``k`` is chosen when ``T_{k-1} <= u + l < T_k`` for some ``l = 0, ..., L - 1``
    (ISFedAvg, Rizk et al. 2022, section IV-C). Exactly ``L = sum(pi)`` distinct units are returned and
    unit ``k`` is included with probability ``pi_k``; units with ``pi_k = 1`` are always chosen and units
    with ``pi_k = 0`` never.

    The units are taken in the order given (no shuffling). First-order inclusion probabilities do not
    depend on that order, but the *joint* inclusion probabilities do: two units whose progressive totals
    lie exactly an integer apart are always chosen together, and two units within the same unit interval
    with ``pi_k + pi_l <= 1`` are never chosen together (joint probability 0, so the Sen-Yates-Grundy
    variance estimator is not available). Permute the units first for a random-order systematic design.

    ``inclusion_probs`` must be 1-D with entries in [0, 1] and sum to an integer ``L`` within
    ``SUM_TOLERANCE`` (1e-6). A discrepancy within the tolerance is absorbed by the units with
    ``0 < pi < 1`` (never by certain or zero units), so the realized probabilities differ from the given
    ones by at most 1e-6 in total. Raises ``ValueError`` otherwise.
    """
    where = "systematic"
    rng = _check_rng(rng, where)
    p = _prob_vector(inclusion_probs, "inclusion_probs", where)
    total = float(p.sum())
    L = int(np.round(total))
    if abs(total - L) > SUM_TOLERANCE:
        raise ValueError(
            f"{where}: inclusion_probs must sum to an integer sample size (tolerance {SUM_TOLERANCE}), "
            f"got sum {total!r}"
        )
    if L == 0:
        return np.zeros(0, dtype=np.int64)
    deficit = L - total
    if deficit != 0.0:  # absorb the (tiny) rounding gap in the fractional units only
        frac = (p > 0) & (p < 1)
        if np.any(frac):
            share = (1.0 - p[frac]) if deficit > 0 else p[frac]
            p = p.copy()
            p[frac] = np.clip(p[frac] + deficit * share / share.sum(), 0.0, 1.0)
    # Unit k holds the points u + l in [T_{k-1}, T_k): their number is ceil(T_k - u) - ceil(T_{k-1} - u)
    # (0 or 1 since pi_k <= 1; exactly 0 when pi_k = 0).
    u = rng.random()
    C = np.cumsum(p)
    C -= u
    np.ceil(C, out=C)  # ceil(T_k - u); ceil(T_0 - u) = ceil(-u) = 0
    first = np.array([0], dtype=np.int64) if C[0] > 0 else np.zeros(0, dtype=np.int64)
    ids = np.concatenate([first, np.flatnonzero(C[1:] > C[:-1]) + 1])
    if ids.size != L:
        # Only reachable through floating-point rounding of the progressive totals (a point landing a few
        # ulps on the wrong side of a boundary): drop the least probable chosen units or top up with the
        # most probable unchosen ones, so that exactly L distinct units with positive pi come back.
        if ids.size > L:
            ids = np.sort(ids[np.argsort(-p[ids], kind="stable")[:L]])
        else:
            positive = np.flatnonzero(p > 0)
            pool = positive[~np.isin(positive, ids)]
            extra = pool[np.argsort(-p[pool], kind="stable")[: L - ids.size]]
            ids = np.sort(np.concatenate([ids, extra]))
    return ids


def systematic_sample(weights: np.ndarray, n: int, rng: np.random.Generator | ClientRandom) -> Sample:
    """Probability-proportional-to-size sampling without replacement of exactly ``n`` units:
    ``pi = inclusion_probabilities(weights, n)`` (capped at 1) and :func:`systematic` on ``pi`` in the
    given unit order. Returns the chosen ids with their ``pi_k``.

    Raises ``ValueError`` for invalid weights, for ``n`` not a non-negative integer, and when ``n``
    exceeds the number of positive weights.
    """
    where = "systematic_sample"
    n = _check_int(n, "n", where)
    pi = inclusion_probabilities(weights, n)
    ids = systematic(pi, rng)
    return Sample(ids, pi[ids], np.ones(ids.size, dtype=np.int64))


# ----------------------------------------------------------------------------------------------------
# with replacement


def pps_with_replacement(p: np.ndarray, m: int, rng: np.random.Generator) -> Sample:
    """``m`` independent draws, each choosing unit ``k`` with probability ``p_k`` (multinomial design,
    as in Li et al. 2019's size-weighted client sampling).

    ``p`` may be any non-negative vector with positive sum; it is normalized to sum to 1. The returned
    ``ids`` are the distinct drawn units (sorted), ``multiplicity`` how often each was drawn (expected
    ``m * p_k``), and ``inclusion`` the probability of being drawn at least once,
    ``pi_k = 1 - (1 - p_k)^m``. ``m`` may exceed the number of units.

    Raises ``ValueError`` if ``p`` is not 1-D, has NaN/inf or negative entries, or sums to zero, or if
    ``m`` is not a non-negative integer.
    """
    where = "pps_with_replacement"
    rng = _check_rng(rng, where)
    q = _float_vector(p, "p", where)
    m = _check_int(m, "m", where)
    s = float(q.sum())
    if s <= 0:
        raise ValueError(f"{where}: p is all zero; drawing needs positive probability mass")
    q = q / s
    if m == 0:
        return Sample(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))
    cdf = np.cumsum(q)
    cdf /= cdf[-1]
    draws = np.searchsorted(cdf, rng.random(m), side="right")
    # guard against the (rounding-only) case of landing past the last positive unit
    draws = np.minimum(draws, int(np.flatnonzero(q > 0)[-1]))
    ids, counts = np.unique(draws, return_counts=True)
    inclusion = -np.expm1(m * np.log1p(-np.minimum(q[ids], 1.0)))
    return Sample(ids.astype(np.int64), inclusion, counts.astype(np.int64))


# ----------------------------------------------------------------------------------------------------
# allocation


def _check_allocation_inputs(N_h: object, m: object, where: str) -> tuple[np.ndarray, int]:
    sizes = _int_vector(N_h, "N_h", where)
    m = _check_int(m, "m", where)
    population = int(sizes.sum())
    if m > population:
        raise ValueError(f"{where}: m = {m} exceeds the population size sum(N_h) = {population}")
    nonempty = int(np.count_nonzero(sizes))
    if m < nonempty:
        raise ValueError(
            f"{where}: m = {m} is smaller than the number of non-empty strata ({nonempty}); "
            "every non-empty stratum needs at least one unit"
        )
    return sizes, m


def _water_fill(shares: np.ndarray, lo: np.ndarray, hi: np.ndarray, m: float) -> np.ndarray:
    """Continuous allocation ``x_h = clip(lam * shares_h, lo_h, hi_h)`` with ``sum(x) == m``.

    ``lam`` is found exactly from the piecewise-linear, non-decreasing ``f(lam) = sum(x_h)`` evaluated at
    its breakpoints. Requires ``sum(lo) <= m <= f(inf)``.
    """
    pos = shares > 0
    base = float(lo[~pos].sum())
    s, a_lo, a_hi = shares[pos], lo[pos], hi[pos]
    x: np.ndarray = lo.astype(np.float64).copy()
    if s.size == 0:
        return x
    a = a_lo / s  # below a: stuck at lo
    b = a_hi / s  # above b: stuck at hi
    breaks = np.unique(np.concatenate([[0.0], a, b]))
    order_a, order_b = np.argsort(a), np.argsort(b)
    a_sorted, b_sorted = a[order_a], b[order_b]
    cum_lo_a = np.concatenate([[0.0], np.cumsum(a_lo[order_a])])
    cum_s_a = np.concatenate([[0.0], np.cumsum(s[order_a])])
    cum_hi_b = np.concatenate([[0.0], np.cumsum(a_hi[order_b])])
    cum_s_b = np.concatenate([[0.0], np.cumsum(s[order_b])])
    # strata with a <= lam are at or above their lower bound; those with b <= lam are capped
    ia = np.searchsorted(a_sorted, breaks, side="right")
    ib = np.searchsorted(b_sorted, breaks, side="right")
    f = (
        base
        + (cum_lo_a[-1] - cum_lo_a[ia])
        + breaks * (cum_s_a[ia] - cum_s_b[ib])
        + cum_hi_b[ib]
    )
    i = int(np.searchsorted(f, m, side="left"))
    if i >= breaks.size:
        lam = breaks[-1]
    elif i == 0 or f[i] == f[i - 1]:
        lam = breaks[i]
    else:
        lam = breaks[i - 1] + (m - f[i - 1]) * (breaks[i] - breaks[i - 1]) / (f[i] - f[i - 1])
    x[pos] = np.clip(lam * s, a_lo, a_hi)
    return x


def _round_allocation(shares: np.ndarray, sizes: np.ndarray, m: int) -> np.ndarray:
    """Integer allocation shared by the allocators.

    1. Continuous target ``x_h`` proportional to ``shares_h``, but at least 1 for every non-empty stratum,
       at most ``N_h``, 0 for empty strata, summing to ``m``: the surplus cut from capped strata (and the
       units given to strata raised to 1) is redistributed over the strata with room in proportion to
       their shares (water-filling). If the strata with positive share cannot absorb ``m`` even at their
       caps, the remainder goes to the zero-share strata in proportion to ``N_h``.
    2. Largest-remainder rounding: ``floor(x_h)`` plus one unit to the strata with the largest fractional
       parts (ties to the lower stratum index) until the total is exactly ``m``.
    """
    lo = (sizes > 0).astype(np.float64)
    hi = sizes.astype(np.float64)
    shares = np.where(sizes > 0, shares, 0.0)
    pos = shares > 0
    capacity = float(hi[pos].sum() + lo[~pos].sum())
    if m <= capacity:
        x = _water_fill(shares, lo, hi, float(m))
    else:  # positive-share strata all full; spread the rest over zero-share strata by size
        x = np.where(pos, hi, 0.0)
        rest = ~pos & (sizes > 0)
        x[rest] = _water_fill(hi[rest], lo[rest], hi[rest], float(m) - float(hi[pos].sum()))
    x = np.clip(x, lo, hi)
    alloc: np.ndarray = np.floor(x).astype(np.int64)
    remainder = int(m - alloc.sum())
    if remainder > 0:
        frac = np.where(alloc < sizes, x - alloc, -np.inf)
        top = np.argsort(-frac, kind="stable")[:remainder]
        alloc[top] += 1
    if int(alloc.sum()) != m or np.any(alloc > sizes):  # pragma: no cover - guards the arithmetic above
        raise RuntimeError(f"allocation rounding failed: {alloc} for m = {m}, N_h = {sizes}")
    return alloc


def allocate_proportional(N_h: np.ndarray, m: int) -> np.ndarray:
    """Proportional allocation: ``m_h`` proportional to the stratum size ``N_h``, rounded to integers that
    sum exactly to ``m`` (largest-remainder method), with ``1 <= m_h <= N_h`` for non-empty strata and
    ``m_h = 0`` for empty ones (see ``_round_allocation`` for the redistribution rule).

    Raises ``ValueError`` if ``N_h`` is not a 1-D vector of non-negative integers, if ``m > sum(N_h)``, or
    if ``m`` is smaller than the number of non-empty strata.
    """
    sizes, m = _check_allocation_inputs(N_h, m, "allocate_proportional")
    return _round_allocation(sizes.astype(np.float64), sizes, m)


def allocate_neyman(N_h: np.ndarray, S_h: np.ndarray, m: int) -> np.ndarray:
    """Neyman (1934) optimal allocation: ``m_h`` proportional to ``N_h * S_h`` (``S_h`` the within-stratum
    standard deviation), which minimizes the variance of the stratified estimator of a total for a fixed
    ``m``. Rounded like :func:`allocate_proportional` (sum exactly ``m``, ``1 <= m_h <= N_h`` for
    non-empty strata, 0 for empty ones, surplus of capped strata redistributed in proportion to
    ``N_h * S_h``). Non-empty strata with ``S_h = 0`` get one unit unless the others are full.

    When every non-empty stratum has ``S_h = 0`` there is no information to allocate on, and the result
    is the proportional allocation.

    Raises ``ValueError`` for the inputs :func:`allocate_proportional` rejects, and if ``S_h`` is not 1-D,
    has NaN/inf or negative entries, or has a different length from ``N_h``.
    """
    where = "allocate_neyman"
    sizes, m = _check_allocation_inputs(N_h, m, where)
    sd = _float_vector(S_h, "S_h", where)
    if sd.shape != sizes.shape:
        raise ValueError(f"{where}: S_h has length {sd.size} but N_h has length {sizes.size}")
    shares = sizes * sd
    if not np.any(shares > 0):
        return _round_allocation(sizes.astype(np.float64), sizes, m)
    return _round_allocation(shares, sizes, m)


# ----------------------------------------------------------------------------------------------------
# stratified sampling


def stratified(
    strata: np.ndarray,
    allocation: np.ndarray,
    rng: np.random.Generator,
    weights: np.ndarray | None = None,
) -> Sample:
    """Stratified sampling: independently in each stratum ``h``, ``allocation[h]`` units without
    replacement.

    ``strata[k]`` is the stratum label (0 .. H-1, ``H = len(allocation)``) of unit ``k``. Without
    ``weights`` each stratum is sampled by SRSWOR (``pi_k = m_h / N_h``); with ``weights`` each stratum is
    sampled by :func:`systematic_sample` on the stratum's weights (``pi_k`` proportional to ``w_k`` inside
    the stratum, capped at 1), with the stratum's units in ascending id order (so, as for
    :func:`systematic`, joint inclusion probabilities depend on the id order; relabel units at random
    for a random-order design). ``inclusion`` holds the within-stratum ``pi_k``, which is the overall
    inclusion probability since strata are sampled independently. ``ids`` are sorted ascending.

    Runs one vectorized draw per stratum (a Python loop over strata, not over units).

    Raises ``ValueError`` if labels are not integers in ``[0, H)``, if ``allocation`` is not a vector of
    non-negative integers, if ``allocation[h] > N_h``, if ``weights`` has the wrong length or invalid
    entries, or if a stratum has fewer positive weights than its allocation.
    """
    where = "stratified"
    rng = _check_rng(rng, where)
    labels = _int_vector(strata, "strata", where)
    alloc = _int_vector(allocation, "allocation", where)
    H = alloc.size
    if labels.size and int(labels.max()) >= H:
        raise ValueError(
            f"{where}: strata labels must lie in [0, {H}) for an allocation of length {H}, "
            f"got label {int(labels.max())}"
        )
    sizes = np.bincount(labels, minlength=H)
    over = np.flatnonzero(alloc > sizes)
    if over.size:
        h = int(over[0])
        raise ValueError(f"{where}: allocation[{h}] = {alloc[h]} exceeds the stratum size N_h = {sizes[h]}")
    w = None
    if weights is not None:
        w = _float_vector(weights, "weights", where)
        if w.shape != labels.shape:
            raise ValueError(f"{where}: weights has length {w.size} but strata has length {labels.size}")
    # group units by stratum, ascending id inside each stratum (radix sort on a small dtype)
    key_dtype = np.uint16 if H <= np.iinfo(np.uint16).max else np.int64
    order = np.argsort(labels.astype(key_dtype), kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)])
    id_parts: list[np.ndarray] = []
    pi_parts: list[np.ndarray] = []
    for h in np.flatnonzero(alloc > 0).tolist():
        units = order[starts[h] : starts[h + 1]]
        m_h = int(alloc[h])
        if w is None:
            pick = rng.choice(units.size, size=m_h, replace=False, shuffle=False)
            id_parts.append(units[pick])
            pi_parts.append(np.full(m_h, m_h / units.size))
        else:
            w_h = w[units]
            positive = int(np.count_nonzero(w_h))
            if positive < m_h:
                raise ValueError(
                    f"{where}: stratum {h} has {positive} units with positive weight but allocation {m_h}"
                )
            pi_h = inclusion_probabilities(w_h, m_h)
            pick = systematic(pi_h, rng)
            id_parts.append(units[pick])
            pi_parts.append(pi_h[pick])
    if not id_parts:
        return Sample(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))
    ids = np.concatenate(id_parts).astype(np.int64)
    pis = np.concatenate(pi_parts)
    sort = np.argsort(ids, kind="stable")
    return Sample(ids[sort], pis[sort], np.ones(ids.size, dtype=np.int64))


# ----------------------------------------------------------------------------------------------------
# successive sampling (draws without replacement proportional to p) and replayed designs


def successive_sampling_sets(p: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every set of ``n`` units that successive sampling can draw, with its probability.

    Successive sampling (Hajek 1964; what ``numpy.random.Generator.choice(N, n, replace=False, p=p)`` does):
    draw a unit with probability ``p_k``, remove it, renormalize ``p`` over the rest, repeat ``n`` times. The
    probability that the first ``k + 1`` draws are the set ``A + {j}`` satisfies
    ``f(A + {j}) = sum_j f(A) * p_j / (1 - p(A))``, computed here over all subsets by their size (dynamic
    programming over bit masks, ``O(2^N N)``). ``p`` is normalized to sum to 1.

    Returns ``(members, probs)``: ``members[s]`` a boolean row marking the units of set ``s``, ``probs[s]``
    its probability (summing to 1). Raises ``ValueError`` for an invalid ``p``, for ``n`` above the number
    of units with positive ``p``, or for more than ``SUCCESSIVE_EXACT_LIMIT`` (20) units.
    """
    where = "successive_sampling_sets"
    q = _float_vector(p, "p", where)
    n = _check_int(n, "n", where)
    N = q.size
    if N > SUCCESSIVE_EXACT_LIMIT:
        raise ValueError(
            f"{where}: p has {N} units; exact enumeration is limited to {SUCCESSIVE_EXACT_LIMIT} "
            "(use replay_inclusion for larger populations)"
        )
    if q.sum() <= 0:
        raise ValueError(f"{where}: p is all zero; drawing needs positive probability mass")
    if n > np.count_nonzero(q):
        raise ValueError(f"{where}: n = {n} exceeds the number of units with positive p ({np.count_nonzero(q)})")
    q = q / q.sum()
    masks = np.arange(1 << N, dtype=np.int64)
    size = np.zeros(masks.size, dtype=np.int8)
    drawn = np.zeros(masks.size)
    for j in range(N):  # one pass per unit: no (2^N x N) array
        bit = (masks >> j) & 1
        size += bit.astype(np.int8)
        drawn += q[j] * bit
    left = np.maximum(1.0 - drawn, 0.0)  # probability mass not yet drawn
    del drawn
    f = np.zeros(masks.size)
    f[0] = 1.0
    for k in range(n):
        layer = masks[(size == k) & (f > 0)]
        for j in np.flatnonzero(q > 0).tolist():
            src = layer[((layer >> j) & 1) == 0]
            src = src[left[src] > 0]
            f[src | (1 << j)] += f[src] * q[j] / left[src]
    final = masks[size == n]
    return ((final[:, None] >> np.arange(N)) & 1).astype(bool), f[final]


def successive_sampling_inclusion(p: np.ndarray, n: int) -> np.ndarray:
    """Exact first-order inclusion probabilities of successive sampling of ``n`` units with draw
    probabilities ``p`` (``numpy.random.Generator.choice(N, n, replace=False, p=p)``), by enumeration
    (:func:`successive_sampling_sets`; at most 20 units). They differ from ``n * p`` in general: the design
    under-includes the large-``p`` units relative to ``n * p`` (a unit cannot be drawn twice)."""
    members, probs = successive_sampling_sets(p, n)
    inclusion: np.ndarray = probs @ members
    return inclusion


def replay_inclusion(draw: Callable[[np.random.Generator], Sample | np.ndarray], population: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Monte Carlo inclusion frequencies of a selection procedure: run ``draw(rng)`` (returning a
    :class:`Sample` or an array of ids) ``draws`` times from frozen inputs and count, for each of the
    ``population`` units, the fraction of runs that include it. Each frequency has standard error
    ``sqrt(pi (1 - pi) / draws)``; the frequencies sum to the mean number of distinct units selected.

    Raises ``ValueError`` for ``population`` or ``draws`` not positive integers, and ``TypeError`` for a
    non-Generator ``rng``.
    """
    where = "replay_inclusion"
    rng = _check_rng(rng, where)
    population = _check_int(population, "population", where, minimum=1)
    draws = _check_int(draws, "draws", where, minimum=1)
    counts = np.zeros(population)
    for _ in range(draws):
        chosen = draw(rng)
        ids = np.asarray(chosen.ids if isinstance(chosen, Sample) else chosen, dtype=np.int64)
        counts[np.unique(ids)] += 1
    return counts / draws
