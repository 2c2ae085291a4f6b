"""Tests on a difference of two means over seeds: Welch's t-test, the paired t-test, the equivalence test
(TOST) against a margin, confidence intervals and the minimal detectable difference; the verdicts of
:mod:`.verdict` are read from them (docs/reproduction.md states the rules).

Everything derives from one :class:`Estimate` of the difference d = mean_a - mean_b, its standard error se
and degrees of freedom df, with the t distribution of :mod:`scipy.stats`:

- Welch (Welch 1947): se = sqrt(s_a²/n_a + s_b²/n_b), df by Welch–Satterthwaite
  df = (v_a + v_b)² / (v_a²/(n_a - 1) + v_b²/(n_b - 1)) with v = s²/n; the p value equals
  ``scipy.stats.ttest_ind(a, b, equal_var=False)`` on per-seed values and ``ttest_ind_from_stats`` on
  mean, sd and n (tests/test_reproduce_significance.py checks both).
- paired (runs that share a seed share the partition, the validation split and the initial weights): the
  per-seed differences d_i = a_i - b_i, se = s_d / sqrt(n), df = n - 1; equals ``scipy.stats.ttest_rel``.
- TOST (Schuirmann 1987) against a margin Δ: t_low = (d + Δ)/se tests δ <= -Δ, t_high = (d - Δ)/se tests
  δ >= Δ; p = max(P(T >= t_low), P(T <= t_high)). Both reject at level α exactly when the (1 - 2α)
  confidence interval of d lies inside (-Δ, Δ).
- minimal detectable difference at one-sided level α and power 1 - β: MDD = (t_{1-α,df} + t_{1-β,df})·se
  (the usual normal-approximation power formula with t quantiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from scipy import stats

__all__ = [
    "Estimate", "MAX_SEEDS", "at_seeds", "confidence_interval", "minimal_detectable_difference", "p_greater", "p_less",
    "paired", "seeds_needed", "tost_p", "welch", "welch_df", "welch_se",
]

PAIRED = "paired"
WELCH = "Welch"
MAX_SEEDS = 10**6  #: seeds_needed gives up beyond this many seeds per arm


@dataclass(frozen=True)
class Estimate:
    """A difference of means ``d`` (a minus b), the spread it is tested against and the seeds per arm.

    ``sds``: ``(s_a, s_b)`` for Welch's test (sample standard deviations, ddof = 1), or ``(s_d,)``, the
    sample standard deviation of the per-seed differences, for the paired test (then ``n`` is the number of
    pairs on both sides).
    """

    d: float
    sds: tuple[float, ...]
    n: tuple[int, int]

    @property
    def test(self) -> str:
        return PAIRED if len(self.sds) == 1 else WELCH

    @property
    def se(self) -> float:
        """The standard error of d: sqrt(s_a²/n_a + s_b²/n_b) (Welch) or s_d / sqrt(n) (paired)."""
        if self.test == PAIRED:
            return self.sds[0] / math.sqrt(self.n[0])
        return welch_se(self.sds[0], self.n[0], self.sds[1], self.n[1])

    @property
    def df(self) -> float:
        """Degrees of freedom: Welch–Satterthwaite (Welch) or n - 1 (paired)."""
        if self.test == PAIRED:
            return float(self.n[0] - 1)
        return welch_df(self.sds[0], self.n[0], self.sds[1], self.n[1])


def welch_se(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """sqrt(s_a²/n_a + s_b²/n_b)."""
    return math.sqrt(sd_a**2 / n_a + sd_b**2 / n_b)


def welch_df(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """Welch–Satterthwaite: (v_a + v_b)² / (v_a²/(n_a - 1) + v_b²/(n_b - 1)), v = s²/n; n_a + n_b - 2 when
    both standard deviations are 0 (the formula is 0/0 there; the pooled test's df)."""
    v_a, v_b = sd_a**2 / n_a, sd_b**2 / n_b
    if v_a + v_b == 0:
        return float(n_a + n_b - 2)
    return (v_a + v_b) ** 2 / (v_a**2 / (n_a - 1) + v_b**2 / (n_b - 1))


def welch(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int) -> Estimate:
    """Welch's estimate of mean_a - mean_b from each side's mean, sample sd and n (n >= 2 each)."""
    if n_a < 2 or n_b < 2:
        raise ValueError(f"n: Welch's test needs at least 2 values per side, got {n_a} and {n_b}")
    return Estimate(mean_a - mean_b, (sd_a, sd_b), (n_a, n_b))


def paired(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """The paired estimate from per-seed values (a[i] and b[i] share seed i; at least 2 pairs)."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired values: need two sequences of equal length >= 2, got {len(a)} and {len(b)}")
    diffs = [x - y for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (n - 1))
    return Estimate(mean, (sd,), (n, n))


def t_ratio(x: float, se: float) -> float:
    """x / se, with x / 0 read as the limit: +inf, -inf, or 0 when x is 0 too (no spread at all)."""
    if se > 0:
        return x / se
    return 0.0 if x == 0 else math.copysign(math.inf, x)


def p_greater(estimate: Estimate, shift: float = 0.0) -> float:
    """One-sided p of H0: δ <= shift against δ > shift: P(T_df >= (d - shift)/se)."""
    return float(stats.t.sf(t_ratio(estimate.d - shift, estimate.se), estimate.df))


def p_less(estimate: Estimate, shift: float = 0.0) -> float:
    """One-sided p of H0: δ >= shift against δ < shift: P(T_df <= (d - shift)/se)."""
    return float(stats.t.cdf(t_ratio(estimate.d - shift, estimate.se), estimate.df))


def tost_p(estimate: Estimate, margin: float) -> float:
    """The TOST p value against ±margin: max(P(T >= (d + Δ)/se), P(T <= (d - Δ)/se))."""
    if not margin > 0:
        raise ValueError(f"margin must be > 0, got {margin}")
    return max(p_greater(estimate, -margin), p_less(estimate, margin))


def confidence_interval(estimate: Estimate, level: float) -> tuple[float, float]:
    """The two-sided ``level`` t interval d ± t_{(1+level)/2, df}·se."""
    half = float(stats.t.ppf((1 + level) / 2, estimate.df)) * estimate.se
    return estimate.d - half, estimate.d + half


def minimal_detectable_difference(estimate: Estimate, alpha: float, power: float) -> float:
    """MDD = (t_{1-α,df} + t_{power,df})·se: the true difference a one-sided test at level ``alpha`` detects
    with probability ``power`` at this se and df."""
    return float(stats.t.ppf(1 - alpha, estimate.df) + stats.t.ppf(power, estimate.df)) * estimate.se


def at_seeds(estimate: Estimate, n: int) -> Estimate:
    """The same difference and spread with ``n`` seeds per arm (``n`` pairs for the paired test)."""
    return replace(estimate, n=(n, n))


def seeds_needed(estimate: Estimate, target: float, alpha: float, power: float) -> int | None:
    """The fewest seeds per arm (>= 2) whose MDD at the observed spread is at most ``target``; None when
    ``target`` is not positive or more than :data:`MAX_SEEDS` would be needed (the MDD falls with n)."""
    if not target > 0:
        return None

    def fits(n: int) -> bool:
        return minimal_detectable_difference(at_seeds(estimate, n), alpha, power) <= target

    if fits(2):
        return 2
    if not fits(MAX_SEEDS):
        return None
    low, high = 2, MAX_SEEDS  # fits(low) is false, fits(high) true
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high
