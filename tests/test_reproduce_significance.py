"""The tests behind the verdicts (fedsample.reproduction.significance) against hand computations and scipy:
Welch's t, df and p, the paired test, TOST, confidence intervals, the minimal detectable difference and the
seeds needed.

Hand computations use the t distribution with 2 degrees of freedom, whose CDF has a closed form:
F(t) = 1/2 + t / (2 sqrt(2 + t²)), and whose quantile is t_p = a sqrt(2 / (1 - a²)) with a = 2p - 1.
"""

import math

import pytest
from scipy import stats

from fedsample.reproduction.significance import (
    Estimate, at_seeds, confidence_interval, minimal_detectable_difference, p_greater, p_less, paired, seeds_needed,
    tost_p, welch, welch_df, welch_se,
)


def cdf2(t: float) -> float:
    """The t distribution's CDF at 2 degrees of freedom."""
    return 0.5 + t / (2 * math.sqrt(2 + t * t))


def quantile2(p: float) -> float:
    """The t distribution's p-quantile at 2 degrees of freedom."""
    a = 2 * p - 1
    return a * math.sqrt(2 / (1 - a * a))


def test_the_closed_forms_are_the_t_distribution():
    for t in (-3.0, -0.4, 0.0, 1.1, 5.5):
        assert cdf2(t) == pytest.approx(stats.t.cdf(t, 2), abs=1e-12)
    for p in (0.6, 0.8, 0.975):
        assert quantile2(p) == pytest.approx(stats.t.ppf(p, 2), abs=1e-10)


def test_welch_t_df_and_p_by_hand_and_against_scipy():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0]  # means 2.5 and 4, variances 5/3 and 4
    est = welch(2.5, math.sqrt(5 / 3), 4, 4.0, 2.0, 3)
    assert est.test == "Welch" and est.d == pytest.approx(-1.5)
    assert est.se == pytest.approx(math.sqrt(5 / 12 + 4 / 3))  # v_a = (5/3)/4, v_b = 4/3
    assert est.df == pytest.approx(1323 / 409)  # (7/4)² / ((5/12)²/3 + (4/3)²/2) = 3.0625 · 432/409
    greater = stats.ttest_ind(a, b, equal_var=False, alternative="greater")
    assert p_greater(est) == pytest.approx(greater.pvalue, rel=1e-10)
    assert greater.df == pytest.approx(est.df) and greater.statistic == pytest.approx(-1.5 / est.se)
    assert p_less(est) == pytest.approx(stats.ttest_ind(a, b, equal_var=False, alternative="less").pvalue, rel=1e-10)


def test_welch_p_in_closed_form_at_two_degrees_of_freedom():
    """a = [3, 5], b = [0, 2]: equal sds sqrt(2) and n = 2 give df = (2v)²/(v² + v²) = 2; d = 3, se = sqrt(2),
    t = 3/sqrt(2), so p = 1/2 - t/(2 sqrt(2 + t²)) = 1/2 - 3/(2 sqrt(13))."""
    est = welch(4.0, math.sqrt(2), 2, 1.0, math.sqrt(2), 2)
    assert est.df == pytest.approx(2.0) and est.se == pytest.approx(math.sqrt(2))
    assert p_greater(est) == pytest.approx(0.5 - 3 / (2 * math.sqrt(13)))
    assert p_greater(est) == pytest.approx(stats.ttest_ind([3.0, 5.0], [0.0, 2.0], equal_var=False, alternative="greater").pvalue)


def test_welch_from_summary_statistics_is_scipys():
    est = welch(54.6, 11.5, 3, 76.7, 6.2, 3)
    two_sided = stats.ttest_ind_from_stats(54.6, 11.5, 3, 76.7, 6.2, 3, equal_var=False).pvalue
    assert 2 * min(p_greater(est), p_less(est)) == pytest.approx(two_sided, rel=1e-10)


def test_welch_pieces_and_degenerate_spreads():
    assert welch_se(2.0, 3, 1.0, 3) == pytest.approx(math.sqrt(4 / 3 + 1 / 3))
    assert welch_df(2.0, 3, 0.0, 5) == pytest.approx(2.0)  # one side without spread: n_a - 1
    assert welch_df(0.0, 3, 0.0, 5) == 6.0  # no spread at all: the pooled df
    constant = welch(80.0, 0.0, 3, 70.0, 0.0, 3)
    assert p_greater(constant) == 0.0 and p_less(constant) == 1.0
    assert p_greater(welch(70.0, 0.0, 3, 70.0, 0.0, 3)) == 0.5
    with pytest.raises(ValueError, match="n: Welch's test needs at least 2"):
        welch(1.0, 0.0, 1, 2.0, 1.0, 3)


def test_paired_test_by_hand_and_against_scipy():
    """Differences 1, 2, 4: mean 7/3, sd sqrt(7/3), se sqrt(7)/3, t = sqrt(7), df 2: p = 1/2 - sqrt(7)/6."""
    a, b = [10.0, 12.0, 15.0], [9.0, 10.0, 11.0]
    est = paired(a, b)
    assert est.test == "paired" and est.n == (3, 3) and est.df == 2.0
    assert est.d == pytest.approx(7 / 3) and est.se == pytest.approx(math.sqrt(7) / 3)
    assert p_greater(est) == pytest.approx(0.5 - math.sqrt(7) / 6)
    assert p_greater(est) == pytest.approx(stats.ttest_rel(a, b, alternative="greater").pvalue, rel=1e-10)
    with pytest.raises(ValueError, match="paired values"):
        paired([1.0], [2.0])


def test_confidence_interval_by_hand():
    est = Estimate(0.5, (math.sqrt(3),), (3, 3))  # paired, se = 1, df = 2
    low, high = confidence_interval(est, 0.95)
    assert (low, high) == pytest.approx((0.5 - quantile2(0.975), 0.5 + quantile2(0.975)))  # ± 4.3027
    assert high - 0.5 == pytest.approx(4.302653, abs=1e-6)


@pytest.mark.parametrize("d, margin, expected", [
    (0.5, 5.0, max(1 - cdf2(5.5), cdf2(-4.5))),   # holds: 0.0230 < 0.025
    (1.0, 2.0, max(1 - cdf2(3.0), cdf2(-1.0))),   # inconclusive: 0.211
    (10.0, 2.0, max(1 - cdf2(12.0), cdf2(8.0))),  # far outside: p near 1
])
def test_tost_p_by_hand(d, margin, expected):
    est = Estimate(d, (math.sqrt(3),), (3, 3))  # se = 1, df = 2
    assert tost_p(est, margin) == pytest.approx(expected)


def test_tost_agrees_with_the_interval():
    """Both one-sided tests reject at level a exactly when the (1 - 2a) interval lies inside ±margin."""
    for d in (-3.0, -0.5, 0.0, 0.7, 2.5):
        for sd in (0.5, 1.0, 3.0):
            est = welch(d, sd, 4, 0.0, sd, 5)
            low, high = confidence_interval(est, 0.95)
            assert (tost_p(est, 2.0) < 0.025) == (-2.0 < low and high < 2.0)
    with pytest.raises(ValueError, match="margin must be > 0"):
        tost_p(Estimate(0.0, (1.0,), (3, 3)), 0.0)


def test_minimal_detectable_difference_by_hand():
    """MDD = (t_{1-a,df} + t_{power,df}) se; at df 2: (4.30265 + 1.06066) se for a = 0.025 and 80% power."""
    est = Estimate(1.0, (math.sqrt(3) * 2.0,), (3, 3))  # se = 2
    assert minimal_detectable_difference(est, 0.025, 0.8) == pytest.approx((quantile2(0.975) + quantile2(0.8)) * 2.0)
    assert minimal_detectable_difference(est, 0.025, 0.8) == pytest.approx(10.72663, abs=1e-5)


def test_seeds_needed_is_the_first_n_whose_mdd_fits():
    est = Estimate(1.0, (1.0,), (3, 3))  # paired, s_d = 1
    mdd3 = minimal_detectable_difference(at_seeds(est, 3), 0.025, 0.8)  # 5.36331 / sqrt(3) = 3.09651
    assert mdd3 == pytest.approx((quantile2(0.975) + quantile2(0.8)) / math.sqrt(3))
    assert seeds_needed(est, 3.1, 0.025, 0.8) == 3 and seeds_needed(est, 3.09, 0.025, 0.8) == 4
    assert seeds_needed(est, 20.0, 0.025, 0.8) == 2
    assert seeds_needed(est, 0.0, 0.025, 0.8) is None and seeds_needed(est, 1e-9, 0.025, 0.8) is None  # beyond 10^6
    welch_est = welch(5.0, 3.0, 3, 0.0, 6.0, 3)
    for target in (0.7, 2.0, 5.0, 12.0):
        scan = next(n for n in range(2, 10_000) if minimal_detectable_difference(at_seeds(welch_est, n), 0.025, 0.8) <= target)
        assert seeds_needed(welch_est, target, 0.025, 0.8) == scan
