"""The verdict rules of `fedsample reproduce` on hand-made numbers (docs/reproduction.md states them): ordering
claims as one-sided t-tests (Welch, or paired by seed) at alpha/2 each way, tie claims as equivalence tests
(TOST) against a margin, figures within max(2 sd, 1 point); and results.json read in both shapes (before and
after the study runner)."""

import math

import pytest

from fedsample.experiments.stats import best_round
from fedsample.reproduction.collect import experiment_values
from scipy import stats

from fedsample.reproduction.significance import confidence_interval, minimal_detectable_difference, seeds_needed, tost_p
from fedsample.reproduction.verdict import ALPHA, ONE_SIDED, ORACLE, STATED_EFFECT, Stats, comparison_test, difference, figure_verdict, stats_of


def test_stats_use_the_sample_standard_deviation_and_skip_stopped_seeds():
    stats = stats_of([1.0, 2.0, None, 3.0])
    assert stats.n == 3 and stats.mean == 2.0 and stats.sd == pytest.approx(1.0)  # ddof = 1: sqrt(2/2)
    assert stats_of([5.0]).sd is None and stats_of([None]) is None


def test_difference_and_its_standard_error_by_hand():
    better, worse = stats_of([80.0, 82.0, 84.0]), stats_of([70.0, 71.0, 72.0])  # sd 2 and 1, n 3
    diff = difference(better, worse, higher_is_better=True)
    assert diff.d == pytest.approx(11.0) and diff.se == pytest.approx(math.sqrt(4 / 3 + 1 / 3))
    assert difference(better, worse, higher_is_better=False).d == pytest.approx(-11.0)


@pytest.mark.parametrize("better, worse, expected", [
    ([80.0, 82.0, 84.0], [70.0, 71.0, 72.0], "holds"),          # d = 11, t = 8.5, df 2.9: p = 0.0017
    ([70.0, 71.0, 72.0], [80.0, 82.0, 84.0], "reversed"),
    ([80.0, 82.0, 84.0], [79.0, 80.0, 81.0], "inconclusive"),   # d = 2, t = 1.55: p = 0.11
    ([80.0, 82.0, 84.0], [78.0, 79.0, 80.0], "inconclusive"),   # d = 3, t = 2.32: p = 0.052 > 0.025 (was "holds" at d > 2 se)
])
def test_comparison_verdicts(better, worse, expected):
    assert comparison_test(stats_of(better), stats_of(worse), True).verdict == expected


def test_holds_and_reversed_read_off_the_95_percent_interval():
    """p < ALPHA/2 one-sided in the claimed direction exactly when the 95% interval lies above 0."""
    tested = comparison_test(stats_of([80.0, 82.0, 84.0]), stats_of([70.0, 71.0, 72.0]), True)
    assert tested.p < ONE_SIDED == ALPHA / 2 == 0.025 and tested.ci[0] > 0 and tested.estimate.test == "Welch"
    assert tested.p == pytest.approx(stats.ttest_ind([80, 82, 84], [70, 71, 72], equal_var=False, alternative="greater").pvalue)
    assert tested.ci == pytest.approx(confidence_interval(tested.estimate, 0.95))
    close = comparison_test(stats_of([80.0, 82.0, 84.0]), stats_of([78.0, 79.0, 80.0]), True)
    assert close.p > ONE_SIDED and close.ci[0] < 0 < close.ci[1]
    assert close.mdd == pytest.approx(minimal_detectable_difference(close.estimate, 0.025, 0.8))
    assert close.mdd > close.d  # the difference is below what 3 seeds resolve
    # seeds for the pre-stated effect (1 point where the paper states no gap), not the observed d = 3
    assert close.effect == STATED_EFFECT == 1.0 and close.seeds_needed == seeds_needed(close.estimate, 1.0, 0.025, 0.8)
    assert close.seeds_needed > seeds_needed(close.estimate, 3.0, 0.025, 0.8)
    gap = comparison_test(stats_of([80.0, 82.0, 84.0]), stats_of([78.0, 79.0, 80.0]), True, effect=-2.5)
    assert gap.effect == 2.5 and gap.seeds_needed == seeds_needed(close.estimate, 2.5, 0.025, 0.8)


def test_the_audits_fedsampling_table1_case_is_inconclusive():
    """54.6 ± 11.5 vs 76.7 ± 6.2, n = 3 each (the lr-selected Table 1 stand-in): Welch's two-sided p is 0.059,
    the one-sided p against the claim 0.030 > 0.025, so neither "holds" nor "reversed" at alpha = 0.05."""
    tested = comparison_test(Stats(54.6, 11.5, 3, ()), Stats(76.7, 6.2, 3, ()), True)
    two_sided = stats.ttest_ind_from_stats(54.6, 11.5, 3, 76.7, 6.2, 3, equal_var=False).pvalue
    assert two_sided == pytest.approx(0.0593, abs=1e-4) and 1 - tested.p == pytest.approx(two_sided / 2)
    assert tested.verdict == "inconclusive" and tested.ci[0] < 0 < tested.ci[1]
    assert tested.estimate.df == pytest.approx(3.07, abs=0.01) and tested.mdd == pytest.approx(31.0, abs=0.1)


def test_lower_is_better_flips_the_direction():
    low, high = stats_of([0.10, 0.11, 0.12]), stats_of([0.50, 0.52, 0.54])
    assert comparison_test(low, high, higher_is_better=False).verdict == "holds"
    assert comparison_test(high, low, higher_is_better=False).verdict == "reversed"


def test_one_seed_gives_no_test():
    """With one seed on a side there is no spread to test against (the old large-gap rule is gone)."""
    tested = comparison_test(stats_of([86.0]), stats_of([80.0]), True)
    assert tested.verdict == "one seed: no test" and tested.d == 6.0 and tested.estimate is None and tested.p is None
    assert comparison_test(stats_of([1.2]), stats_of([1.0, 1.1]), False).d == pytest.approx(-0.15)


def test_paired_test_uses_per_seed_differences():
    """Seeds that share a partition move together: the paired test sees a steady +2, Welch's the seed spread."""
    worse = [60.0, 70.0, 80.0]
    better = [62.0, 72.1, 81.9]
    pairs = list(zip(better, worse))
    welch_test = comparison_test(stats_of(better), stats_of(worse), True)
    paired_test = comparison_test(stats_of(better), stats_of(worse), True, pairs=pairs)
    assert welch_test.verdict == "inconclusive" and paired_test.verdict == "holds"
    assert paired_test.estimate.test == "paired" and paired_test.estimate.df == 2
    assert paired_test.p == pytest.approx(stats.ttest_rel(better, worse, alternative="greater").pvalue)
    loss = comparison_test(stats_of(worse), stats_of(better), False, pairs=list(zip(worse, better)))
    assert loss.verdict == "holds" and loss.d == pytest.approx(2.0)  # lower is better: worse - better
    assert comparison_test(stats_of(better), stats_of(worse), True, pairs=pairs[:1]).verdict == "one seed: no test"


@pytest.mark.parametrize("a, b, margin, expected", [
    ([80.0, 80.5, 81.0], [80.2, 80.6, 80.8], 2.0, "holds"),        # d = -0.03, 95% CI ± 1.0 inside ± 2
    ([80.0, 82.0, 84.0], [79.0, 80.0, 81.0], 2.0, "inconclusive"),  # d = 2, CI [-1.8, 5.8] (was "holds" at |d| <= 2 se)
    ([90.0, 90.5, 91.0], [80.0, 80.4, 80.8], 2.0, "differs (first ahead)"),
    ([80.0, 80.4, 80.8], [90.0, 90.5, 91.0], 2.0, "differs (second ahead)"),
])
def test_tie_claims_are_equivalence_tests(a, b, margin, expected):
    tested = comparison_test(stats_of(a), stats_of(b), True, tie=True, margin=margin)
    assert tested.verdict == expected
    assert tested.p == pytest.approx(tost_p(tested.estimate, margin))
    low, high = tested.ci
    assert (expected == "holds") == (-margin < low and high < margin)
    assert expected.startswith("differs") == (low > margin or high < -margin)


def test_tie_verdicts_name_the_side_ahead_and_need_a_margin():
    near, far = stats_of([80.0, 80.4, 80.8]), stats_of([90.0, 90.5, 91.0])
    names = ("FedAvg", "Centralized")
    assert comparison_test(near, far, True, tie=True, margin=1.0, names=names).verdict == "differs (Centralized ahead)"
    unstated = comparison_test(near, far, True, tie=True)
    assert unstated.verdict == "inconclusive (no equivalence margin stated)" and unstated.p is None
    at_margin = comparison_test(stats_of([80.0, 82.0, 84.0]), stats_of([79.0, 80.0, 81.0]), True, tie=True, margin=2.0)
    # a tie's seeds are planned for its margin, whatever d came out
    assert at_margin.d == 2.0 and at_margin.effect == 2.0
    assert at_margin.seeds_needed == seeds_needed(at_margin.estimate, 2.0, 0.025, 0.8)
    inside = comparison_test(stats_of([80.0, 82.0, 84.0]), stats_of([79.0, 80.0, 81.0]), True, tie=True, margin=3.0)
    assert inside.seeds_needed == seeds_needed(inside.estimate, 3.0, 0.025, 0.8)


def test_figure_matches_within_two_sd_or_one_point():
    ours = stats_of([88.0, 89.0, 90.0])  # sd 1: tolerance max(2, 1) = 2
    assert figure_verdict(90.5, ours, "%") == "matches"
    assert figure_verdict(91.5, ours, "%") == "differs (-2.5)"
    tight = stats_of([89.0, 89.0, 89.0])  # sd 0: tolerance one point
    assert figure_verdict(89.9, tight, "%") == "matches" and figure_verdict(90.2, tight, "%") == "differs (-1.2)"
    assert figure_verdict(85.0, ours, "%", comparable=False) == "not comparable (stand-in; +4.0)"
    assert figure_verdict(None, ours, "%") == "paper gives no number"
    assert figure_verdict(85.0, None, "%") == "not measured"


def test_the_oracle_is_never_compared():
    ours = stats_of([88.0, 89.0, 90.0])
    assert figure_verdict(89.0, ours, "%", comparable=False, reason=ORACLE) == "not comparable (oracle: best round on the test set; +0.0)"


def history(*accuracies):
    return [{"round": i + 1, "accuracy": a, "loss": 1 - a} if a is not None else {"round": i + 1} for i, a in enumerate(accuracies)]


def test_results_json_before_the_study_runner_best_from_history():
    document = {"strategies": {"A": {
        "final": {"accuracy": {"mean": 0.7, "std": 0.1, "per_seed": [0.6, 0.8]}},
        "history": [history(0.5, None, 0.9, 0.6), history(0.8, None, 0.7, 0.8)],
    }}}
    values = experiment_values(document)["A"]
    assert values["final"]["accuracy"] == [0.6, 0.8]
    assert values["best"]["accuracy"] == [0.9, 0.8]
    assert best_round(history(0.5, 0.9, 0.6), "loss") == pytest.approx(0.1)  # loss: the smallest


def test_results_json_after_the_study_runner_reads_best_as_given():
    document = {"strategies": {"A": {
        "final": {"accuracy": {"mean": 0.7, "sd": 0.14, "n": 2, "per_seed": [0.6, 0.8]}},
        "best": {"accuracy": {"mean": 0.85, "sd": 0.07, "n": 2, "per_seed": [0.8, 0.9]}},
        "history": [history(0.1), history(0.1)],
    }}}
    assert experiment_values(document)["A"]["best"]["accuracy"] == [0.8, 0.9]


def test_a_failed_premise_makes_the_claim_not_comparable():
    """"FedSampling beats FedAvg" with the premise "Centralized beats FedAvg", paired by seed: where centralized
    trails FedAvg significantly (here by 10 points every seed, +-1) the claim is "not comparable" with the premise's
    numbers; where centralized leads, the claim's own verdict stands (here: holds)."""
    from fedsample.reproduction.rows import comparison_row
    from fedsample.reproduction.spec import Comparison
    from fedsample.reproduction.table import premise_text

    claim = Comparison("FedSampling beats FedAvg", "p", "FedSampling", "FedAvg", paired=True, premise="Centralized",
                       budget="2048 samples per round; one step each")
    fs_acc, fedavg = [0.70, 0.72, 0.71, 0.69], [0.60, 0.61, 0.62, 0.60]

    def values(centralized):
        return {"p": {label: {"final": {"accuracy": v}} for label, v in
                      (("FedSampling", fs_acc), ("FedAvg", fedavg), ("Centralized", centralized))}}

    failed = comparison_row(claim, values([0.50, 0.52, 0.51, 0.49]))
    assert failed["verdict"].startswith("not comparable (premise fails: Centralized trails FedAvg by 10.2, 95% CI [")
    assert failed["premise_test"]["verdict"] == "reversed" and failed["premise_test"]["d"] == pytest.approx(-10.25)
    assert failed["d"] == pytest.approx(9.75) and failed["test"] == "paired"  # the claim's own test is kept
    assert premise_text(failed).startswith("premise: Centralized ≥ FedAvg: -10.2 [")
    held = comparison_row(claim, values([0.80, 0.81, 0.79, 0.80]))
    assert held["verdict"] == "holds" and held["premise_test"]["verdict"] == "holds"
    with pytest.raises(ValueError, match="premise"):
        Comparison("x", "p", "A", "B", premise="B")
