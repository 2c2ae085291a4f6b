"""Verdicts: our measurement beside a paper's number or ordering, by the rules stated in docs/reproduction.md.

- A :class:`~fedsample.reproduction.spec.Comparison` is a test (:mod:`.significance`) of the difference d of
  the two means in the claimed direction (positive: the claim's better side is ahead): Welch's t-test, or
  the paired t-test on per-seed differences where the comparison declares ``paired``. Every verdict is at
  the two-sided level :data:`ALPHA`, each one-sided test at ``ALPHA / 2``, so each verdict reads off the
  ``1 - ALPHA`` (95%) confidence interval of d:

  - ordering claim ("better beats worse"): "holds" when the one-sided test in the claimed direction rejects
    (p < ALPHA/2: the interval lies above 0), "reversed" when the one-sided test in the opposite direction
    rejects (the interval lies below 0), "inconclusive" otherwise. Together: a two-sided test at ALPHA.
  - tie claim ("the two are equal", within the claim's ``margin``): TOST; "holds" when both one-sided tests
    reject at ALPHA/2 (the interval lies inside ±margin), "differs (X ahead)" when the interval lies
    entirely outside ±margin, "inconclusive" otherwise.
  - one seed on either side (fewer than two pairs when paired): "one seed: no test".

  Each row also carries the minimal detectable difference at this n, ALPHA/2 one-sided and :data:`POWER`,
  and the seeds per arm that detect a pre-stated effect (:func:`stated_effect`: the tie's margin, the paper's
  gap, else :data:`STATED_EFFECT`) at the observed spread, never the observed d (post-hoc power).
- A :class:`~fedsample.reproduction.spec.Figure`: "matches" when our mean is within ``max(2 sd, 1 point)``
  of the paper's figure, else "differs (+x.x)"; "not comparable" where our setting is a stand-in or our
  number is the oracle (the best round on the test set).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from fedsample.experiments.stats import mean_sd_n
from fedsample.reproduction.multiplicity import seeds_for_effect
from fedsample.reproduction.significance import (
    Estimate, confidence_interval, minimal_detectable_difference, p_greater, p_less, paired, tost_p, welch,
)

__all__ = [
    "ALPHA", "CONFIDENCE", "ONE_SIDED", "ORACLE", "PERCENT_METRICS", "POWER", "STATED_EFFECT", "Stats", "Tested",
    "comparison_test", "difference", "differs_p", "display_scale", "figure_verdict", "stated_effect", "stats_of",
]

# Metrics stored as fractions and shown (and compared) in percentage points, as the papers report them.
PERCENT_METRICS = frozenset({"accuracy", "macro_f1"})
"""The metrics stored as fractions and shown in percent."""
ALPHA = 0.05  #: the two-sided level of every verdict; each one-sided test is at ALPHA / 2
#: The level of each one-sided test.
ONE_SIDED = ALPHA / 2
CONFIDENCE = 1 - ALPHA  #: the confidence interval the verdicts read (95%)
POWER = 0.80  #: the power of the minimal detectable difference and of the seeds needed
#: The effect an ordering's seeds are planned for where its paper module states no gap: one display unit (an accuracy
#: point, a dB), the size of the tie claims' margins.
STATED_EFFECT = 1.0
#: How the tables name the best round picked on the test set (an optimistic bound, not a result).
ORACLE = "oracle: best round on the test set"


@dataclass(frozen=True)
class Stats:
    """Mean, sample standard deviation (ddof = 1; None for fewer than two values) and count of per-seed values."""

    mean: float
    sd: float | None
    n: int
    per_seed: tuple[float, ...]

    def scaled(self, factor: float) -> "Stats":
        return Stats(self.mean * factor, None if self.sd is None else self.sd * factor, self.n, tuple(v * factor for v in self.per_seed))


def stats_of(values: Sequence[float | None]) -> Stats | None:
    """Stats of the values that exist (a seed that stopped is None and left out); None when none exist."""
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not kept:
        return None
    mean, sd, n = mean_sd_n(kept)  # the runner's own mean and sample sd (ddof = 1)
    assert mean is not None, "kept holds a value"
    return Stats(mean, sd, n, tuple(kept))


def display_scale(metric: str) -> float:
    """100 for metrics stored as fractions and reported in percent, else 1."""
    return 100.0 if metric in PERCENT_METRICS else 1.0


def difference(better: Stats, worse: Stats, higher_is_better: bool) -> Estimate | None:
    """Welch's estimate of the difference in the claimed direction (d = better - worse, or worse - better for
    a loss), se = sqrt(sd_b²/n_b + sd_w²/n_w); None with one seed on either side."""
    a, b = (better, worse) if higher_is_better else (worse, better)
    if a.sd is None or b.sd is None:
        return None
    return welch(a.mean, a.sd, a.n, b.mean, b.sd, b.n)


def paired_difference(pairs: Sequence[tuple[float, float]], higher_is_better: bool) -> Estimate | None:
    """The paired estimate in the claimed direction from ``(better, worse)`` values of the same seed; None
    with fewer than two pairs."""
    if len(pairs) < 2:
        return None
    better, worse = [p[0] for p in pairs], [p[1] for p in pairs]
    return paired(better, worse) if higher_is_better else paired(worse, better)


def ordering_verdict(estimate: Estimate) -> tuple[float, str]:
    """The one-sided p in the claimed direction and "holds" / "reversed" / "inconclusive" (each one-sided
    test at ALPHA/2)."""
    p = p_greater(estimate)
    if p < ONE_SIDED:
        return p, "holds"
    if p_less(estimate) < ONE_SIDED:
        return p, "reversed"
    return p, "inconclusive"


def differs_p(estimate: Estimate, margin: float) -> float:
    """The p of "the difference lies beyond ±margin": the smaller of P(T >= (d - Δ)/se) (δ > Δ) and
    P(T <= (d + Δ)/se) (δ < -Δ); "differs" when it is below ONE_SIDED."""
    return min(p_greater(estimate, margin), p_less(estimate, -margin))


def equivalence_verdict(estimate: Estimate, margin: float, names: tuple[str, str]) -> tuple[float, str]:
    """The TOST p against ±margin and "holds" (equivalent), "differs (X ahead)" (the difference lies beyond
    the margin: :func:`differs_p` rejects) or "inconclusive"."""
    p = tost_p(estimate, margin)
    if p < ONE_SIDED:
        return p, "holds"
    if differs_p(estimate, margin) < ONE_SIDED:
        return p, f"differs ({names[0] if estimate.d > 0 else names[1]} ahead)"
    return p, "inconclusive"


@dataclass(frozen=True)
class Tested:
    """One Comparison's test: d in the claimed direction, the estimate (None: one seed, no test), the p value
    (one-sided in the claimed direction, or TOST's), the CONFIDENCE interval of d, the minimal detectable
    difference, the seeds per arm that detect the pre-stated ``effect`` (:func:`stated_effect`), the verdict,
    and for a tie the p of "differs" (:func:`differs_p`)."""

    d: float
    estimate: Estimate | None
    p: float | None
    ci: tuple[float, float] | None
    mdd: float | None
    seeds_needed: int | None
    verdict: str
    effect: float | None = None
    p_differs: float | None = None


def stated_effect(tie: bool, margin: float | None, effect: float | None = None) -> float | None:
    """The effect a comparison's seeds are planned for, stated before it runs: a tie's margin, else the paper's
    gap (``effect``), else :data:`STATED_EFFECT`; None for a tie without a margin."""
    if tie:
        return margin
    return STATED_EFFECT if effect is None else abs(effect)


def comparison_test(
    better: Stats, worse: Stats, higher_is_better: bool, tie: bool = False, margin: float | None = None,
    names: tuple[str, str] = ("first", "second"), pairs: Sequence[tuple[float, float]] | None = None,
    effect: float | None = None,
) -> Tested:
    """The test of "better beats worse" (``tie``: "the two are equal within ±margin", ``names`` say which is
    ahead when they differ); ``pairs``: per-seed ``(better, worse)`` values of the same seed for the paired
    test (None: Welch's test); ``effect``: the paper's gap, for the seeds needed (:func:`stated_effect`).
    Values in display units."""
    estimate = difference(better, worse, higher_is_better) if pairs is None else paired_difference(pairs, higher_is_better)
    planned = stated_effect(tie, margin, effect)
    if estimate is None:
        d = better.mean - worse.mean if higher_is_better else worse.mean - better.mean
        return Tested(d, None, None, None, None, None, "one seed: no test", planned)
    ci = confidence_interval(estimate, CONFIDENCE)
    mdd = minimal_detectable_difference(estimate, ONE_SIDED, POWER)
    if tie and margin is None:
        return Tested(estimate.d, estimate, None, ci, mdd, None, "inconclusive (no equivalence margin stated)")
    needed = seeds_for_effect(estimate, planned, ONE_SIDED, POWER)
    if tie and margin is not None:
        p, verdict = equivalence_verdict(estimate, margin, names)
        return Tested(estimate.d, estimate, p, ci, mdd, needed, verdict, planned, differs_p(estimate, margin))
    p, verdict = ordering_verdict(estimate)
    return Tested(estimate.d, estimate, p, ci, mdd, needed, verdict, planned)


def figure_tolerance(ours: Stats, unit: str, paper: float) -> float:
    """``max(2 sd, 1 point)``: a point is 1 in the figure's unit for % and dB, else 1% of the paper's figure."""
    point = 1.0 if unit in ("%", "dB") else 0.01 * abs(paper)
    return max(2 * ours.sd if ours.sd is not None else 0.0, point)


def figure_verdict(paper: float | None, ours: Stats | None, unit: str, comparable: bool = True, reason: str = "stand-in") -> str:
    """Our number (in the figure's unit) beside the paper's: "matches", "differs (+x.x)" or "not comparable
    (``reason``; +x.x)" (a stand-in setting, or the oracle)."""
    if ours is None:
        return "not measured"
    if paper is None:
        return "paper gives no number"
    gap = ours.mean - paper
    if not comparable:
        return f"not comparable ({reason}; {gap:+.1f})"
    if abs(gap) <= figure_tolerance(ours, unit, paper):
        return "matches"
    return f"differs ({gap:+.1f})"
