"""Holm's adjustment, the sequential design's alpha spending, seeds needed for a pre-stated effect and the
rank check on bimodal per-seed values (fedsample.reproduction.multiplicity)."""

import numpy as np
import pytest
from scipy import stats

from fedsample.reproduction.multiplicity import (
    bimodal, bimodality_coefficient, holm, look_level, rank_verdict, second_look, seeds_for_effect,
)
from fedsample.reproduction.significance import Estimate, at_seeds, minimal_detectable_difference, paired, seeds_needed, tost_p
from fedsample.reproduction.verdict import ONE_SIDED, POWER, ordering_verdict


def test_holm_against_a_hand_computed_case():
    # sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])  # 0.3 x 2 = 0.6; 0.6 x 1 = 0.6
    assert holm([0.8, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([None, 0.5, None]) == [None, 0.5, None]  # untested rows are not in the family (m = 1)
    assert holm([]) == []


def tost_many(x: np.ndarray, margin: float) -> np.ndarray:
    """TOST p of each row's paired differences against ±margin (vectorized Schuirmann)."""
    n = x.shape[1]
    d, se = x.mean(axis=1), x.std(axis=1, ddof=1) / np.sqrt(n)
    return np.maximum(stats.t.sf((d + margin) / se, n - 1), stats.t.cdf((d - margin) / se, n - 1))


def test_declared_two_look_design_keeps_the_false_equivalence_rate():
    """True difference on the margin (not equivalent): equivalence declared at either of two looks (10, then
    24 seeds, as the 10 + 14-seed FedSampling case) is a false equivalence. Tolerance: 3 Monte Carlo
    standard errors of a rate of ONE_SIDED over 20,000 replicates (0.0033)."""
    reps, margin = 20_000, 1.0
    x = np.random.default_rng(38).normal(margin, 1.0, (reps, 24))
    first, second = tost_many(x[:, :10], margin), tost_many(x, margin)
    for row in range(20):  # the vectorized TOST is the library's
        assert first[row] == pytest.approx(tost_p(paired(list(x[row, :10]), [0.0] * 10), margin))
    tolerance = 3 * np.sqrt(ONE_SIDED * (1 - ONE_SIDED) / reps)
    level = look_level(ONE_SIDED, looks=2)
    assert level == ONE_SIDED / 2
    spent = np.mean((first < level) | (second < level))
    naive = np.mean((first < ONE_SIDED) | (second < ONE_SIDED))
    assert spent <= ONE_SIDED + tolerance
    assert naive > ONE_SIDED + tolerance  # adding seeds after a first look without spending alpha inflates it
    with pytest.raises(ValueError):
        look_level(ONE_SIDED, looks=0)


def test_seeds_for_a_stated_effect_against_a_hand_computation():
    """Paired sd 2, effect 1, one-sided 0.025, power 0.8: MDD(n) = (t_{0.975,n-1} + t_{0.8,n-1})·2/sqrt(n);
    at n = 34, (2.0345 + 0.8526)·2/sqrt(34) = 0.990 <= 1; at n = 33, (2.0369 + 0.8530)·2/sqrt(33) = 1.006 > 1."""
    estimate = Estimate(0.1, (2.0,), (10, 10))
    assert seeds_for_effect(estimate, 1.0, ONE_SIDED, POWER) == 34
    assert (2.0345 + 0.8526) * 2 / np.sqrt(34) == pytest.approx(0.990, abs=1e-3)
    assert minimal_detectable_difference(at_seeds(estimate, 34), ONE_SIDED, POWER) == pytest.approx(0.990, abs=1e-3)
    assert minimal_detectable_difference(at_seeds(estimate, 33), ONE_SIDED, POWER) == pytest.approx(1.006, abs=1e-3)
    assert seeds_for_effect(estimate, -1.0, ONE_SIDED, POWER) == 34  # the effect's size, either direction
    assert seeds_for_effect(estimate, None, ONE_SIDED, POWER) is None
    # the post-hoc figure at the observed d = 0.1 is far larger: the stated effect, not the observed one
    assert seeds_needed(estimate, 0.1, ONE_SIDED, POWER) > 34 * 50


BIMODAL_DIFFS = [3.0, 3.05, 2.95, 3.0, 3.0, -0.1, -0.15, -0.05, -0.1, -0.1]


def test_bimodal_case_flips_to_inconclusive():
    """Five seeds 3 points ahead, five 0.1 behind: the paired t test holds (p = 0.010), Wilcoxon's signed-rank
    test does not (rank sum 40 of 55, p = 0.115), so the second look reads "inconclusive"."""
    zeros = [0.0] * len(BIMODAL_DIFFS)
    assert bimodality_coefficient(BIMODAL_DIFFS) == pytest.approx(0.5647, abs=1e-4)
    assert bimodal(BIMODAL_DIFFS)
    p, t_verdict = ordering_verdict(paired(BIMODAL_DIFFS, zeros))
    assert t_verdict == "holds" and p == pytest.approx(0.0103, abs=1e-4)
    assert stats.wilcoxon(BIMODAL_DIFFS, alternative="greater").pvalue == pytest.approx(0.1152, abs=1e-4)
    rank = rank_verdict(BIMODAL_DIFFS, zeros, paired=True, level=ONE_SIDED)
    assert rank == "inconclusive"
    assert second_look(t_verdict, rank) == "inconclusive (t: holds; rank test: inconclusive)"


def test_unimodal_and_agreeing_cases_keep_the_t_verdict():
    rng = np.random.default_rng(5)
    normal = list(rng.normal(2.0, 1.0, 10))
    assert not bimodal(normal)
    assert bimodality_coefficient([1.0, 2.0, 3.0]) is None  # fewer than 4 values
    zeros = [0.0] * 10
    assert rank_verdict(normal, zeros, paired=True, level=ONE_SIDED) == "holds"
    assert rank_verdict(zeros, normal, paired=True, level=ONE_SIDED) == "reversed"
    assert second_look("holds", "holds") == "holds"
    assert second_look("holds", None) == "holds"
    assert second_look("differs (A ahead)", "inconclusive") == "inconclusive (t: differs (A ahead); rank test: inconclusive)"


def test_rank_tie_check():
    rng = np.random.default_rng(6)
    a = list(rng.normal(0.0, 0.1, 12))
    b = list(rng.normal(0.0, 0.1, 12))
    assert rank_verdict(a, b, paired=False, level=ONE_SIDED, margin=1.0) == "holds"  # far inside ±1
    assert rank_verdict(a, b, paired=False, level=ONE_SIDED, margin=0.001) == "inconclusive"
    assert rank_verdict(a, b, paired=True, level=ONE_SIDED, margin=1.0) == "holds"


def test_paper_rows_carry_holm_adjusted_p_over_the_table_and_its_premises():
    from fedsample.reproduction.rows import decisive_p, with_holm

    rows = [
        {"p": 0.004, "tie": False},  # holds: decisive 0.004
        {"p": 0.99, "tie": False, "premise_test": {"p": 0.02}},  # reversed: decisive 0.01; premise 0.02
        {"p": 0.03, "tie": True},  # TOST
        {"p": None, "tie": False},  # no test: not in the family
    ]
    assert [decisive_p(r) for r in rows] == pytest.approx([0.004, 0.01, 0.03, None])
    out = with_holm(rows)
    # family of 4: 0.004 x 4 = 0.016; 0.01 x 3 = 0.03; 0.02 x 2 = 0.04; 0.03 x 1 -> 0.04
    assert [r["p_holm"] for r in out] == pytest.approx([0.016, 0.03, 0.04, None])
    assert out[1]["premise_test"]["p_holm"] == pytest.approx(0.04)


def paired_values(base: list[float], **diffs: list[float]) -> dict:
    """{"x": {"B": base, label: base + diffs/100 for each label}} as accuracy fractions (display: points)."""
    labels = {"B": base, **{label: [b + d / 100 for b, d in zip(base, ds)] for label, ds in diffs.items()}}
    return {"x": {label: {"final": {"accuracy": v}} for label, v in labels.items()}}


def test_the_holm_column_against_a_hand_computed_table_and_the_verdict_read_from_it():
    """Four paired comparisons of one table: per-seed differences (points) [1.5, 2, 2.5] (t = 6.93, p = 0.0101),
    [1.4, 2, 2.6] (p = 0.0144), [1.9, 2, 2.1] (p = 0.0004) and [-1, 0, 1] (p = 0.5, decisive 0.5). Holm by hand,
    m = 4: 0.0004 x 4 = 0.0017; 0.0101 x 3 = 0.0303; 0.0144 x 2 = 0.0288 -> 0.0303; 0.5 x 1 -> 0.5. The first two
    hold at the raw p (< 0.025) and are inconclusive at the adjusted one."""
    from fedsample.reproduction.rows import comparison_row, with_holm
    from fedsample.reproduction.spec import Comparison
    from fedsample.reproduction.table import comparison_lines

    diffs = {"A1": [1.5, 2.0, 2.5], "A2": [1.4, 2.0, 2.6], "A3": [1.9, 2.0, 2.1], "A4": [-1.0, 0.0, 1.0]}
    values = paired_values([0.5, 0.6, 0.7], **diffs)
    raw = [stats.ttest_1samp(d, 0.0, alternative="greater").pvalue for d in diffs.values()]
    assert raw == pytest.approx([0.0101, 0.0144, 0.0004, 0.5], abs=1e-4)
    rows = [comparison_row(Comparison(f"{a} beats B", "x", a, "B", paired=True), values) for a in diffs]
    assert [r["p"] for r in rows] == pytest.approx(raw, rel=1e-6)
    assert [r["verdict"] for r in rows] == ["holds", "holds", "holds", "inconclusive"]  # a family of one each
    adjusted = with_holm(rows)
    hand = [3 * raw[0], 3 * raw[0], 4 * raw[2], 0.5]
    assert [r["p_holm"] for r in adjusted] == pytest.approx(hand, rel=1e-6)
    assert hand[0] == pytest.approx(0.0303, abs=1e-4) and hand[0] > ONE_SIDED > raw[0]
    assert adjusted[0]["verdict"] == f"inconclusive (Holm-adjusted p = {hand[0]:.3g} ≥ 0.025; unadjusted: holds)"
    assert adjusted[1]["verdict"].startswith("inconclusive (Holm-adjusted p = 0.0303")
    assert adjusted[2]["verdict"] == "holds" and adjusted[3]["verdict"] == "inconclusive"
    lines = comparison_lines(adjusted)
    assert "| 0.010 | 0.030 | paired (2), 3 pairs |" in lines[2] and "| <0.001 | 0.002 | paired (2), 3 pairs |" in lines[4]


def test_a_bimodal_row_flips_to_inconclusive_where_the_rank_test_disagrees():
    from fedsample.reproduction.rows import comparison_row
    from fedsample.reproduction.spec import Comparison

    values = paired_values([0.5] * 10, A=BIMODAL_DIFFS)
    row = comparison_row(Comparison("A beats B", "x", "A", "B", paired=True), values)
    assert row["t_verdict"] == "holds" and row["p"] == pytest.approx(0.0103, abs=1e-4)
    assert row["bimodal"] is True and row["rank_verdict"] == "inconclusive"
    assert row["verdict"] == "inconclusive (t: holds; rank test: inconclusive)"
    unimodal = comparison_row(Comparison("A beats B", "x", "A", "B", paired=True),
                              paired_values([0.5] * 10, A=list(np.random.default_rng(5).normal(2.0, 1.0, 10))))
    assert unimodal["bimodal"] is False and unimodal["rank_verdict"] is None and unimodal["verdict"] == "holds"


def test_a_row_plans_its_seeds_for_the_stated_effect():
    """Per-seed differences sd 2 (paired, 10 pairs), no gap stated: seeds for 1 point = 34 (the hand computation
    above), whatever the observed d; a tie plans for its margin; the table says which effect."""
    from fedsample.reproduction.rows import comparison_row
    from fedsample.reproduction.spec import Comparison
    from fedsample.reproduction.table import seeds_text

    diffs = [2.0 * x for x in (-1.5, -1.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.5)]
    diffs = [d / np.std(diffs, ddof=1) * 2.0 + 0.1 for d in diffs]  # sd exactly 2, d = 0.1
    values = paired_values([0.5] * 10, A=diffs)
    row = comparison_row(Comparison("A beats B", "x", "A", "B", paired=True), values)
    assert row["effect"] == 1.0 and row["seeds_needed_measured"] == 34 and seeds_text(row) == "34 for 1"
    tie = comparison_row(Comparison("A ties B", "x", "A", "B", paired=True, tie=True, margin=2.0), values)
    assert tie["effect"] == 2.0 and seeds_text(tie) == f"{seeds_for_effect(Estimate(0.1, (2.0,), (10, 10)), 2.0, ONE_SIDED, POWER)} for ±2"
