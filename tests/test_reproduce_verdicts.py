"""The verdict rules of `fedsample reproduce` on hand-made numbers (docs/reproduction.md states them), and
results.json read in both shapes (before and after the study runner)."""

import math

import pytest

from fedsample.experiments.stats import best_round
from fedsample.reproduction.collect import experiment_values
from fedsample.reproduction.verdict import comparison_verdict, difference, figure_verdict, stats_of


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
    ([80.0, 82.0, 84.0], [70.0, 71.0, 72.0], "holds"),          # d = 11, 2 se = 2.58
    ([70.0, 71.0, 72.0], [80.0, 82.0, 84.0], "reversed"),
    ([80.0, 82.0, 84.0], [79.0, 80.0, 81.0], "within noise"),   # d = 2 < 2 se = 2.58
    ([80.0, 82.0, 84.0], [78.0, 79.0, 80.0], "holds"),          # d = 3 > 2.58
])
def test_comparison_verdicts(better, worse, expected):
    assert comparison_verdict(stats_of(better), stats_of(worse), "accuracy", True)[1] == expected


def test_lower_is_better_flips_the_direction():
    low, high = stats_of([0.10, 0.11, 0.12]), stats_of([0.50, 0.52, 0.54])
    assert comparison_verdict(low, high, "loss", higher_is_better=False)[1] == "holds"
    assert comparison_verdict(high, low, "loss", higher_is_better=False)[1] == "reversed"


def test_one_seed_gives_no_verdict_unless_the_gap_is_large():
    assert comparison_verdict(stats_of([81.0]), stats_of([79.0]), "accuracy", True)[1] == "one seed: no verdict"
    assert comparison_verdict(stats_of([86.0]), stats_of([80.0]), "accuracy", True)[1] == "holds (one seed, large gap)"
    assert comparison_verdict(stats_of([74.0]), stats_of([80.0]), "accuracy", True)[1] == "reversed (one seed, large gap)"
    assert comparison_verdict(stats_of([1.05]), stats_of([1.0]), "loss", False)[1] == "one seed: no verdict"  # 5% < 10%
    assert comparison_verdict(stats_of([1.2]), stats_of([1.0]), "loss", False)[1] == "reversed (one seed, large gap)"


def test_tie_claims_hold_within_two_standard_errors_and_state_the_resolution():
    a, b = stats_of([80.0, 82.0, 84.0]), stats_of([79.0, 80.0, 81.0])  # d = 2, 2 se = 2.58
    verdict = comparison_verdict(a, b, "accuracy", True, tie=True)[1]
    assert verdict.startswith("holds (equal within ±2.6") and "3 seeds" in verdict
    far = stats_of([70.0, 71.0, 72.0])
    assert comparison_verdict(a, far, "accuracy", True, tie=True)[1] == "does not hold (first ahead)"
    assert comparison_verdict(far, a, "accuracy", True, tie=True)[1] == "does not hold (second ahead)"
    assert comparison_verdict(far, a, "accuracy", True, tie=True, names=("FedAvg", "Centralized"))[1] == "does not hold (Centralized ahead)"


def test_figure_matches_within_two_sd_or_one_point():
    ours = stats_of([88.0, 89.0, 90.0])  # sd 1: tolerance max(2, 1) = 2
    assert figure_verdict(90.5, ours, "%") == "matches"
    assert figure_verdict(91.5, ours, "%") == "differs (-2.5)"
    tight = stats_of([89.0, 89.0, 89.0])  # sd 0: tolerance one point
    assert figure_verdict(89.9, tight, "%") == "matches" and figure_verdict(90.2, tight, "%") == "differs (-1.2)"
    assert figure_verdict(85.0, ours, "%", comparable=False) == "not comparable (stand-in; +4.0)"
    assert figure_verdict(None, ours, "%") == "paper gives no number"
    assert figure_verdict(85.0, None, "%") == "not measured"


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
