"""A second look at the verdicts of :mod:`.verdict`: Holm's adjustment within a paper's table, the alpha
spent by a declared sequential design, seeds needed for a pre-stated effect, and a rank-based check where
the per-seed results are bimodal (docs/reproduction.md states the rules).

- Holm (1979): with the m p values of one family sorted, p_(1) <= ... <= p_(m), the adjusted
  p̃_(i) = max_{j <= i} min(1, (m - j + 1)·p_(j)); rejecting where p̃ < α controls the family-wise error
  at α for any dependence between the tests.
- Sequential design: a comparison whose seeds are added after a first look is a declared design of
  ``looks`` analyses; the one-sided level of each look is ``level / looks`` (Bonferroni spending, the
  simplest alpha-spending rule: conservative, valid for any correlation between the looks).
- Seeds needed: the fewest seeds per arm whose minimal detectable difference (:mod:`.significance`) at
  the observed spread is at most the pre-stated effect (the paper's gap for an ordering, the margin for a
  tie), never the observed difference (that is post-hoc power).
- Bimodal per-seed values (Sarle's bimodality coefficient b = (g² + 1) / (κ + 3(n - 1)² / ((n - 2)(n - 3)))
  above 5/9, g the sample skewness and κ the sample excess kurtosis, both bias-corrected) get a rank test
  beside the t test: Wilcoxon's signed-rank test on per-seed differences (paired) or Mann–Whitney's U
  (unpaired), one-sided in the claimed direction, from :mod:`scipy.stats`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats

from fedsample.reproduction.significance import Estimate, seeds_needed

__all__ = [
    "BIMODAL", "bimodal", "bimodality_coefficient", "holm", "holm_verdict", "look_level", "rank_p", "rank_verdict",
    "second_look", "seeds_for_effect",
]

BIMODAL = 5 / 9  #: Sarle's threshold: the coefficient of a uniform distribution; above it, bimodal


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p values, in the input order; a None (no test) is not in the family and
    stays None."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(tested)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def holm_verdict(verdict: str, p_holm: float | None, level: float) -> str:
    """The verdict read from the Holm-adjusted p: a decisive call ("holds", "reversed", "differs ...") stands
    where ``p_holm`` is below the one-sided ``level``, else it is "inconclusive (Holm-adjusted p = ... >= level;
    unadjusted: VERDICT)"; an inconclusive verdict, or one without a test (``p_holm`` None), is kept."""
    if p_holm is None or p_holm < level or verdict.startswith("inconclusive"):
        return verdict
    return f"inconclusive (Holm-adjusted p = {p_holm:.3g} ≥ {level:g}; unadjusted: {verdict})"


def look_level(level: float, looks: int) -> float:
    """The level of each of ``looks`` declared analyses of one comparison: ``level / looks``."""
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    return level / looks


def seeds_for_effect(estimate: Estimate, effect: float | None, alpha: float, power: float) -> int | None:
    """Seeds per arm that detect the pre-stated ``effect`` (the paper's gap, or the tie's margin) with
    probability ``power`` at one-sided level ``alpha`` and the observed spread; None without an effect."""
    return None if effect is None else seeds_needed(estimate, abs(effect), alpha, power)


def bimodality_coefficient(values: Sequence[float]) -> float | None:
    """Sarle's b (bias-corrected skewness and excess kurtosis); None below 4 values or with no spread."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 4 or np.ptp(x) == 0:
        return None
    g = float(stats.skew(x, bias=False))
    kappa = float(stats.kurtosis(x, bias=False))
    return (g**2 + 1) / (kappa + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def bimodal(values: Sequence[float]) -> bool:
    """Whether Sarle's coefficient of ``values`` exceeds :data:`BIMODAL`."""
    b = bimodality_coefficient(values)
    return b is not None and b > BIMODAL


def rank_p(better: Sequence[float], worse: Sequence[float], paired: bool, shift: float = 0.0) -> float:
    """One-sided rank-test p of "better - shift beats worse": Wilcoxon's signed-rank test on the per-seed
    differences minus ``shift`` (paired), else Mann–Whitney's U on ``better - shift`` against ``worse``."""
    a = np.asarray(better, dtype=float) - shift
    b = np.asarray(worse, dtype=float)
    if paired:
        diffs = a - b
        if not np.any(diffs):
            return 1.0
        return float(stats.wilcoxon(diffs, alternative="greater").pvalue)
    return float(stats.mannwhitneyu(a, b, alternative="greater").pvalue)


def rank_verdict(
    better: Sequence[float], worse: Sequence[float], paired: bool, level: float, margin: float | None = None
) -> str:
    """The rank tests' verdict at one-sided ``level``: for an ordering, "holds" (better ahead), "reversed"
    or "inconclusive"; for a tie (``margin``), "holds" when both shifted tests reject (the two one-sided
    hypotheses |δ| >= margin, as in TOST), else "inconclusive"."""
    if margin is None:
        if rank_p(better, worse, paired) < level:
            return "holds"
        return "reversed" if rank_p(worse, better, paired) < level else "inconclusive"
    above = rank_p(better, worse, paired, shift=-margin) < level  # rejects δ <= -margin
    below = rank_p(worse, better, paired, shift=-margin) < level  # rejects δ >= margin
    return "holds" if above and below else "inconclusive"


def second_look(t_verdict: str, rank: str | None) -> str:
    """The t test's verdict where there is no rank check or the rank check agrees with it (same first word:
    "holds" / "reversed" / "inconclusive"; "differs" counts as a disagreement with a rank "inconclusive"),
    else "inconclusive (t: ...; rank test: ...)"."""
    if rank is None or t_verdict.split(" ")[0] == rank:
        return t_verdict
    return f"inconclusive (t: {t_verdict}; rank test: {rank})"
