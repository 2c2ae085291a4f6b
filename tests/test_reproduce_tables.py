"""A paper's rows and tables under the test-based verdicts: paired rows from per-seed values, the oracle
label, the spec's checks, the Comparisons table's columns, the re-derivation of stored tables, and the
experiment summary's oracle column."""

from dataclasses import replace

import pytest
from scipy import stats

from fedsample.experiments.report import summary_table
from fedsample.reproduction.rederive import cells, rederive
from fedsample.reproduction.significance import Estimate, seeds_needed
from fedsample.reproduction.rows import comparison_row, figure_row, seed_pairs
from fedsample.reproduction.spec import Comparison, Figure, Paper, with_seeds_needed
from fedsample.reproduction.table import COMPARISON_HEADER, comparison_lines, comparison_rules, markdown

PAPER = Paper("p", "c", presets={"cpu": ("x",), "cuda": ("x",)})


def values(**labels):
    """{"x": {label: {"final": {"accuracy": per seed}, "best": {"accuracy": per seed + 0.05}}}}"""
    return {"x": {label: {"final": {"accuracy": v}, "best": {"accuracy": [None if a is None else a + 0.05 for a in v]}}
                  for label, v in labels.items()}}


def test_a_paired_row_pairs_the_seeds_both_sides_finished():
    measured = values(A=[0.62, 0.721, None, 0.819], B=[0.60, 0.70, 0.75, 0.80])
    row = comparison_row(Comparison("A beats B", "x", "A", "B", paired=True), measured)
    assert row["test"] == "paired" and row["n"] == [3, 3] and row["df"] == 2
    a, b = [62.0, 72.1, 81.9], [60.0, 70.0, 80.0]
    assert row["p"] == pytest.approx(stats.ttest_rel(a, b, alternative="greater").pvalue)
    assert row["verdict"] == "holds" and row["d"] == pytest.approx(2.0)
    assert row["better_stats"]["n"] == 3 and row["worse_stats"]["n"] == 4  # each side's own seeds, as shown
    welch_row = comparison_row(Comparison("A beats B", "x", "A", "B"), measured)
    assert welch_row["test"] == "Welch" and welch_row["n"] == [3, 4] and welch_row["verdict"] == "inconclusive"
    with pytest.raises(ValueError, match="ran 2 and 3 seeds"):
        seed_pairs([1.0, 2.0], [1.0, 2.0, 3.0], 1.0)


def test_rows_carry_the_test_and_the_planned_seeds():
    measured = values(A=[0.80, 0.82, 0.84], B=[0.78, 0.79, 0.80])
    row = comparison_row(Comparison("A beats B", "x", "A", "B", seeds_needed=9), measured)
    assert row["alpha"] == 0.05 and row["ci_level"] == 0.95 and row["power"] == 0.8
    assert row["verdict"] == "inconclusive" and row["seeds_needed"] == 9 and row["seeds_needed_measured"] >= 4
    assert row["ci"][0] < row["d"] < row["ci"][1] and row["mdd"] > row["d"]
    missing = comparison_row(Comparison("A beats C", "x", "A", "C"), measured)
    assert missing["verdict"] == "not measured" and missing["p"] is None


def test_figures_of_the_best_round_are_the_oracle():
    measured = values(A=[0.80, 0.82, 0.84])
    oracle = figure_row(PAPER, Figure("f", "x", "A", 80.0, which="best"), measured)
    assert oracle["ours"]["mean"] == pytest.approx(87.0) and oracle["verdict"] == "not comparable (oracle: best round on the test set; +7.0)"
    assert figure_row(PAPER, Figure("f", "x", "A", 82.0), measured)["verdict"] == "matches"


def test_the_spec_refuses_a_verdict_on_the_oracle_and_a_margin_without_a_tie():
    with pytest.raises(ValueError, match="which: a comparison uses the final round"):
        Comparison("c", "x", "A", "B", which="best")
    with pytest.raises(ValueError, match="margin: a positive equivalence margin"):
        Comparison("c", "x", "A", "B", margin=1.0)
    with pytest.raises(ValueError, match="margin: a positive equivalence margin"):
        Comparison("c", "x", "A", "B", tie=True, margin=0.0)
    rows = with_seeds_needed((Comparison("c", "x", "A", "B"), Comparison("d", "y", "A", "B")), {("x", "A", "B"): 5})
    assert [c.seeds_needed for c in rows] == [5, None]


def test_the_comparisons_table_shows_every_part_of_the_test():
    measured = values(A=[0.80, 0.82, 0.84], B=[0.70, 0.71, 0.72], C=[0.80, 0.805, 0.81])
    rows = [
        comparison_row(Comparison("A beats B", "x", "A", "B", paired=True), measured),
        comparison_row(Comparison("A ties C", "x", "A", "C", tie=True, margin=2.0, margin_reason="why two"), measured),
    ]
    lines = comparison_lines(rows)
    assert lines[:2] == COMPARISON_HEADER and "d [95% CI]" in lines[0] and "MDD" in lines[0] and "n for stated effect" in lines[0] and "p (Holm)" in lines[0]
    ordering, tie = lines[2], lines[3]  # differences 10, 11, 12: d = 11 ± t_{0.975,2}·(1/sqrt 3) = 11 ± 2.48
    assert "| +11.0 [+8.5, +13.5] |" in ordering and "paired (2), 3 pairs" in ordering and ordering.endswith("| holds |")
    assert "(tie claim, margin ±2)" in tie and "margin: why two" in tie and "Welch (" in tie and "3 + 3" in tie
    rules = comparison_rules()
    assert "α = 0.05 two-sided" in rules and "0.025" in rules and "95% confidence interval" in rules
    assert "(t_{0.975,df} + t_{0.8,df})·se" in rules


STORED = """# Doc
<!-- reproduction:p:cpu -->
#### Figures

| claim | paper | ours (mean ± sd) | verdict |
|---|---|---|---|
| f<br><sub>x: A, best accuracy</sub> | 80% | 87.0 ± 2.0 (3 seeds) | not comparable (stand-in; +7.0) |

#### Comparisons: the orderings the paper claims

d = difference of means in the claimed direction; holds if d > 2 se, reversed if d < −2 se (docs/reproduction.md).

| claim | better | worse | difference ± se | verdict |
|---|---|---|---|---|
| Table 1: A beats B<br><sub>x: final accuracy</sub> | A: 54.6 ± 11.5 (3 seeds) | B: 76.7 ± 6.2 (3 seeds) | -22.1 ± 7.5 | reversed |
| A ties C<br><sub>x: best accuracy (tie claim)</sub> | A: 80.0 ± 0.5 (3 seeds) | C: 80.1 ± 0.3 (3 seeds) | -0.1 ± 0.3 | holds (equal within ±0.7, the resolution of 3 seeds) |

#### Notes
<!-- /reproduction:p:cpu -->
"""


def test_stored_tables_are_rederived_from_their_printed_numbers():
    paper = Paper("p", "c", presets={"cpu": ("x",), "cuda": ("x",)}, comparisons=(
        Comparison("Table 1: A beats B", "x", "A", "B", paired=True),
        Comparison("A ties C", "x", "A", "C", tie=True, margin=2.0, margin_reason="why two"),
    ))
    text = rederive(STORED, {"p": paper})
    assert "d > 2 se" not in text and "Verdicts re-derived from the stored numbers" in text
    lines = text.split("\n")
    table = lines[lines.index(COMPARISON_HEADER[0]):]
    audit, tie = table[2], table[3]
    assert audit.startswith("| Table 1: A beats B<br><sub>x: final accuracy</sub> | A: 54.6 ± 11.5 (3 seeds) |")
    assert "Welch (3.1), 3 + 3" in audit and audit.endswith("| inconclusive |")  # summary statistics: never paired
    assert "x: oracle: best round on the test set, accuracy (tie claim, margin ±2)" in tie and tie.endswith("| holds |")
    assert "<sub>x: A, oracle: best round on the test set, accuracy</sub>" in text  # the figure's where-line
    assert "#### Notes" in text and text.endswith("<!-- /reproduction:p:cpu -->\n")
    assert rederive(text, {"p": paper}) == text  # idempotent
    with pytest.raises(ValueError, match="no comparison of 'A' and 'B'"):
        rederive(STORED, {"p": Paper("p", "c", presets={"cpu": ("x",), "cuda": ("x",)})})


def test_the_experiment_summary_labels_the_best_round_as_the_oracle():
    stats = {"mean": 0.8, "sd": 0.01, "n": 2, "per_seed": [0.79, 0.81]}
    document = {"config": {"name": "e", "rounds": 3, "seeds": [0, 1]},
                "strategies": {"A": {"final": {"accuracy": stats}, "best": {"accuracy": {**stats, "mean": 0.9}}}}}
    text = summary_table(document)
    assert "| strategy | Accuracy | Best round (oracle) |" in text
    assert "oracle: best round on the test set" in text and "not a result" in text


def test_markdown_states_the_oracle_and_the_rules():
    document = {
        "paper": "p", "citation": "c", "profile": "cpu", "device": "cpu", "seeds": [0], "command": "fedsample reproduce p",
        "date": "today", "hardware": {"cpu": "x", "gpu": None, "torch": "t", "python": "3"}, "wall_s": 1.0, "runs": [],
        "figures": [], "comparisons": [], "notes": [],
    }
    text = markdown(document)
    assert "oracle: best round on the test set" in text and comparison_rules() in text


def test_a_tie_claim_without_a_margin_is_a_problem_of_the_paper():
    from fedsample.reproduction.consistency import check_paper

    base = Paper("p", "c", presets={"cpu": ("quickstart",), "cuda": ("quickstart",)})
    tie = Comparison("equal", "quickstart", "Centralized", "Naive fixed ratio", tie=True)
    assert any("a tie claim needs a margin" in line for line in check_paper(replace(base, comparisons=(tie,))))
    stated = replace(tie, margin=1.0, margin_reason="why")
    assert check_paper(replace(base, comparisons=(stated,))) == []


def test_a_row_of_an_older_reproduction_json_still_renders():
    old = {"claim": "A beats B", "source": "x", "better": "A", "worse": "B", "metric": "accuracy", "which": "final",
           "tie": False, "note": "", "better_stats": None, "worse_stats": None, "d": 2.0, "se": 1.3, "verdict": "within noise"}
    (line,) = comparison_lines([old])[2:]
    assert line.endswith("| +2.0 | — | — | — | — | — | within noise |")


PRINTED = """<!-- reproduction:p:cpu -->
#### Comparisons: the orderings the paper claims

the old rules paragraph

| claim | better | worse | d [95% CI] | p | test (df), n | MDD | n needed | verdict |
|---|---|---|---|---|---|---|---|---|
| A beats B<br><sub>x: final accuracy</sub> | A: 60.0 ± 1.0 (3 seeds) | B: 58.0 ± 1.0 (3 seeds) | +2.0 [+0.8, +3.2] | 0.010 | paired (2), 3 pairs | 2.9 | 5 | holds |
| A beats C<br><sub>x: final accuracy</sub> | A: 60.0 ± 1.0 (3 seeds) | C: 58.0 ± 1.0 (3 seeds) | +2.0 [+0.5, +3.5] | 0.014 | paired (2), 3 pairs | 3.6 | 6 | holds |
| A beats D<br><sub>x: final accuracy</sub><br><sub>premise: E ≥ D: +5.0 \\[+4.5, +5.5\\], p = \\<0.001, holds</sub> | A: 60.0 ± 1.0 (3 seeds) | D: 60.0 ± 1.0 (3 seeds) | +0.0 [-2.5, +2.5] | 0.500 | paired (2), 3 pairs | 6.0 | none at this d | inconclusive |
<!-- /reproduction:p:cpu -->
"""


def test_a_stored_table_gets_holm_adjusted_p_from_its_printed_numbers():
    """Printed one-sided p 0.010, 0.014 and 0.5 (decisive 0.5), and the premise's <0.001, from its interval: se =
    1.0 / (2 t_{0.975,2}), p = P(T_2 >= 5/se) = 2.7e-4. Holm by hand, m = 4: 2.7e-4 x 4 = 0.0011; 0.010 x 3 = 0.030;
    0.014 x 2 = 0.028 -> 0.030; 0.5. The two orderings that held at the raw p are inconclusive at the adjusted one."""
    paper = Paper("p", "c", presets={"cpu": ("x",), "cuda": ("x",)}, comparisons=tuple(
        Comparison(f"A beats {w}", "x", "A", w, paired=True, premise="E" if w == "D" else "") for w in "BCD"))
    text = rederive(PRINTED, {"p": paper})
    lines = text.split("\n")
    header = lines.index(COMPARISON_HEADER[0])
    assert "Holm family: this paper's table, 4 tests (3 comparisons and 1 premise tests)." in lines[header - 2]
    assert "no rank check is possible" in lines[header - 2]
    first, second, third = (cells(line) for line in lines[header + 2:header + 5])
    assert first[3:6] == ["+2.0 [+0.8, +3.2]", "0.010", "0.030"]
    assert first[-1] == "inconclusive (Holm-adjusted p = 0.03 ≥ 0.025; unadjusted: holds)"
    assert second[5] == "0.030" and second[-1].startswith("inconclusive (Holm-adjusted p = 0.03 ")
    assert third[5] == "0.500" and third[-1] == "inconclusive"
    se = 1.0 / (2 * stats.t.ppf(0.975, 2))
    premise_p = 4 * stats.t.sf(5.0 / se, 2)
    assert premise_p == pytest.approx(0.0011, abs=1e-4)
    assert f"p = \\<0.001, p (Holm) = {premise_p:.3f}, holds" in third[0] and "realised budgets: not recorded" in third[0]
    assert first[-2] == f"{seeds_needed(Estimate(2.0, ((3.2 - 0.8) / (2 * stats.t.ppf(0.975, 2)) * 3 ** 0.5,), (3, 3)), 1.0, 0.025, 0.8)} for 1"
    assert rederive(text, {"p": paper}) == text  # idempotent: a table in the current form is left as it is


def claim_row(claim: str, realised: str, d: str, verdict: str) -> str:
    cell = f"{claim}<br><sub>x: final accuracy</sub><br><sub>{realised}</sub>"
    return f"| {cell} | A: 1.0 ± 0.1 (3 seeds) | B: 1.0 ± 0.1 (3 seeds) | {d} | 0.010 | 0.020 | paired (2), 3 pairs | 1.0 | 5 for 1 | {verdict} |"


def test_the_claims_lists_quote_as_holding_only_rows_at_equal_realised_budgets():
    from fedsample.reproduction.claims import claims_list, claims_summary, stored_claims

    equal = "realised: A 2040, B 2050 samples per round: equal samples (within 10%)"
    text = "\n".join([
        "<!-- reproduction:p:cpu -->", COMPARISON_HEADER[0], COMPARISON_HEADER[1],
        claim_row("A beats B", equal, "+2.0 [+0.5, +3.5]", "holds"),
        claim_row("A beats C", "realised: A 60000, C 2048 samples per round: unequal budgets", "+9.0 [+5.0, +13.0]", "holds"),
        claim_row("A beats D", "realised budgets: not recorded", "+4.0 [+2.0, +6.0]", "holds"),
        claim_row("A beats E", equal, "-3.0 [-5.0, -1.0]", "reversed"),
        claim_row("A beats F", equal, "+1.0 [-1.0, +3.0]", "inconclusive (Holm-adjusted p = 0.03 ≥ 0.025; unadjusted: holds)"),
        "<!-- /reproduction:p:cpu -->", "",
    ])
    claims = stored_claims(text)
    assert [(c.claim, c.verdict, c.budget) for c in claims] == [
        ("A beats B", "holds", "equal"), ("A beats C", "holds", "unequal"), ("A beats D", "holds", "not recorded"),
        ("A beats E", "reversed", "equal"), ("A beats F", "inconclusive", "equal")]
    listed = claims_list(claims)
    assert "- **Holds at equal realised budgets** (1):\n  - p: A beats B: +2.0 [+0.5, +3.5]\n" in listed
    assert "- **Holds, but at unequal realised budgets (not quoted as a finding)** (1):\n  - p: A beats C: +9.0" in listed
    assert "(not quoted as a finding until re-run)** (1):\n  - p: A beats D: +4.0" in listed
    assert "- **Reversed (an ordering), or differs (a tie)** (1):\n  - p: A beats E: -3.0" in listed
    assert "- **Inconclusive:** 1 (p 1)." in listed and "- **Not comparable (the premise fails):** none." in listed
    summary = claims_summary(claims)
    assert "- **Holds at equal realised budgets:** 1 (p 1, d +2.0)." in summary and "A beats" not in summary
    assert summary.startswith("Read from the verdicts of the 5 comparisons of 1 papers in docs/reproduction.md (cpu profile)")
