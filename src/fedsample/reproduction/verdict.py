"""Verdicts: our measurement beside a paper's number or ordering, by rules stated in docs/reproduction.md.

- A :class:`~fedsample.reproduction.spec.Comparison` ("better beats worse"): ``d`` is the difference of the
  means in the claimed direction, ``se = sqrt(sd_b^2/n_b + sd_w^2/n_w)`` (sample standard deviations,
  ddof = 1). "holds" if ``d > 2 se``, "reversed" if ``d < -2 se``, "within noise" otherwise. With one seed on
  either side there is no standard error: "one seed: no verdict" unless ``|d|`` is large
  (:func:`large_gap`). A tie claim holds when ``|d| <= 2 se``; the verdict states that resolution.
- A :class:`~fedsample.reproduction.spec.Figure`: "matches" when our mean is within ``max(2 sd, 1 point)``
  of the paper's figure, else "differs (+x.x)"; "not comparable" where our setting is a stand-in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from fedsample.experiments.stats import over_seeds

# Metrics stored as fractions and shown (and compared) in percentage points, as the papers report them.
PERCENT_METRICS = frozenset({"accuracy", "macro_f1"})
# One seed: a difference counts as large from 5 percentage points (percent metrics) or 10% of the larger mean.
LARGE_POINTS = 5.0
LARGE_RELATIVE = 0.10


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
    summary = over_seeds(kept)  # the runner's own mean and sample sd (ddof = 1)
    return Stats(summary["mean"], summary["sd"], summary["n"], tuple(kept))


def display_scale(metric: str) -> float:
    """100 for metrics stored as fractions and reported in percent, else 1."""
    return 100.0 if metric in PERCENT_METRICS else 1.0


@dataclass(frozen=True)
class Difference:
    """``d`` in the claimed direction (positive: the claim's better side is ahead) and its standard error."""

    d: float
    se: float | None


def difference(better: Stats, worse: Stats, higher_is_better: bool) -> Difference:
    """Signed difference of means in the claimed direction and ``sqrt(sd_b^2/n_b + sd_w^2/n_w)`` (None with one seed)."""
    d = better.mean - worse.mean if higher_is_better else worse.mean - better.mean
    if better.sd is None or worse.sd is None:
        return Difference(d, None)
    return Difference(d, math.sqrt(better.sd**2 / better.n + worse.sd**2 / worse.n))


def large_gap(d: float, better: Stats, worse: Stats, metric: str) -> bool:
    """Whether a one-seed difference is large enough to call: 5 points for percent metrics (values already in
    points), else 10% of the larger of the two means' magnitudes."""
    if metric in PERCENT_METRICS:
        return abs(d) >= LARGE_POINTS
    return abs(d) >= LARGE_RELATIVE * max(abs(better.mean), abs(worse.mean))


def comparison_verdict(
    better: Stats, worse: Stats, metric: str, higher_is_better: bool, tie: bool = False, names: tuple[str, str] = ("first", "second")
) -> tuple[Difference, str]:
    """The difference and the verdict for "better beats worse" (``tie``: "the two are equal", and ``names``
    say which is ahead when they are not); values in display units."""
    diff = difference(better, worse, higher_is_better)
    if diff.se is None:
        if not large_gap(diff.d, better, worse, metric):
            return diff, "one seed: no verdict"
        if tie:
            return diff, "does not hold (one seed, large gap)"
        return diff, "holds (one seed, large gap)" if diff.d > 0 else "reversed (one seed, large gap)"
    bound = 2 * diff.se
    if tie:
        if abs(diff.d) <= bound:
            return diff, f"holds (equal within ±{bound:.2g}, the resolution of {min(better.n, worse.n)} seeds)"
        return diff, f"does not hold ({names[0] if diff.d > 0 else names[1]} ahead)"
    if diff.d > bound:
        return diff, "holds"
    if diff.d < -bound:
        return diff, "reversed"
    return diff, "within noise"


def figure_tolerance(ours: Stats, unit: str, paper: float) -> float:
    """``max(2 sd, 1 point)``: a point is 1 in the figure's unit for % and dB, else 1% of the paper's figure."""
    point = 1.0 if unit in ("%", "dB") else 0.01 * abs(paper)
    return max(2 * ours.sd if ours.sd is not None else 0.0, point)


def figure_verdict(paper: float | None, ours: Stats | None, unit: str, comparable: bool = True) -> str:
    """Our number (in the figure's unit) beside the paper's: "matches", "differs (+x.x)" or "not comparable"."""
    if ours is None:
        return "not measured"
    if paper is None:
        return "paper gives no number"
    gap = ours.mean - paper
    if not comparable:
        return f"not comparable (stand-in; {gap:+.1f})"
    if abs(gap) <= figure_tolerance(ours, unit, paper):
        return "matches"
    return f"differs ({gap:+.1f})"
