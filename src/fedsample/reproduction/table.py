"""REPRODUCTION.md: a reproduction document (reproduction.json) as markdown — the runs with their wall
time, the Figures (claim | paper | ours | verdict), the Comparisons (claim | better | worse | d with its
confidence interval | p | Holm-adjusted p | test and n | minimal detectable difference | seeds for the stated
effect | verdict), the paper's notes, and the hardware and exact command."""

from __future__ import annotations

from typing import Sequence

from fedsample.experiments.report import markdown_text
from fedsample.budget import EQUAL_BUDGET_TOLERANCE
from fedsample.reproduction.multiplicity import BIMODAL
from fedsample.reproduction.significance import MAX_SEEDS
from fedsample.reproduction.verdict import ALPHA, CONFIDENCE, ONE_SIDED, ORACLE, PERCENT_METRICS, POWER, STATED_EFFECT
from fedsample.runtime.records import JSON, JSONObject, as_int, as_list, as_number, as_object, as_optional_number, as_text

__all__ = [
    "COMPARISON_HEADER", "PREVIOUS_HEADER", "claim_text", "comparison_lines", "comparison_rules", "family_text", "markdown",
    "result_cells",
]


def number_format(unit: str, metric: str) -> str:
    """A format: one decimal for percent (as the papers print them), two for dB, four significant fmt else."""
    if unit == "%" or metric in PERCENT_METRICS:
        return ".1f"
    return ".2f" if unit == "dB" or metric.endswith("_db") else ".4g"


def mean_sd(stats: JSON, fmt: str) -> str:
    """'mean ± sd (n seeds)', or 'mean (1 seed)', or '—' (``stats``: a row's ``better_stats``, ``ours``, ...)."""
    if not stats:
        return "—"
    stats = as_object(stats, "stats")
    n, mean, sd = as_int(stats["n"], "n"), as_number(stats["mean"], "mean"), as_optional_number(stats["sd"], "sd")
    seeds = f"{n} seed{'s' if n != 1 else ''}"
    if sd is None:
        return f"{mean:{fmt}} ({seeds})"
    return f"{mean:{fmt}} ± {sd:{fmt}} ({seeds})"


def cell(value: JSON) -> str:
    return markdown_text(str(value))


def which_text(which: str, metric: str) -> str:
    """'final accuracy', or 'oracle: best round on the test set, accuracy' for the best round."""
    return f"{ORACLE}, {metric}" if which == "best" else f"{which} {metric}"


def figure_lines(rows: list[JSON]) -> list[str]:
    lines = ["| claim | paper | ours (mean ± sd) | verdict |", "|---|---|---|---|"]
    for row in (as_object(row, "figure") for row in rows):
        unit_name, metric = as_text(row["unit"], "unit"), as_text(row["metric"], "metric")
        fmt = number_format(unit_name, metric)
        unit = unit_name if unit_name in ("", "%") else f" {unit_name}"
        paper = "—" if row["paper"] is None else f"{as_number(row['paper'], 'paper'):g}{unit}"  # as the paper prints it
        where = f"{row['source']}: {row['label']}, {which_text(as_text(row['which'], 'which'), metric)}"
        claim = cell(row["claim"]) + f"<br><sub>{cell(where)}</sub>"
        if row["note"]:
            claim += f"<br><sub>note: {cell(row['note'])}</sub>"
        lines.append(f"| {claim} | {paper} | {mean_sd(row['ours'], fmt)} | {cell(row['verdict'])} |")
    return lines


#: The header lines of a Comparisons table (Markdown).
COMPARISON_HEADER = [
    f"| claim | better | worse | d [{CONFIDENCE:.0%} CI] | p | p (Holm) | test (df), n | MDD | n for stated effect | verdict |",
    "|---|---|---|---|---|---|---|---|---|---|",
]
#: The header of the tables written before the Holm column (docs/reproduction.md's stored tables until re-derived).
PREVIOUS_HEADER = f"| claim | better | worse | d [{CONFIDENCE:.0%} CI] | p | test (df), n | MDD | n needed | verdict |"


def comparison_rules() -> str:
    """The paragraph above a Comparisons table: what each column is and the verdict rules, with the constants."""
    return (
        f"Each claim is a t-test at α = {ALPHA:g} two-sided (each one-sided test at {ONE_SIDED:g}), read off the "
        f"{CONFIDENCE:.0%} confidence interval of d, the difference of means in the claimed direction (positive: the "
        "claim's better side is ahead). Ordering claims: holds if the interval lies above 0, reversed if below 0, "
        "else inconclusive; p is one-sided in the claimed direction. Tie claims: equivalence (TOST) within ±margin: "
        "holds if the interval lies inside ±margin, differs if entirely outside, else inconclusive; p = the larger "
        "of the two one-sided p. p (Holm): the decisive p (an ordering's smaller one-sided p; a tie's TOST p or, "
        "if smaller, the p of differing) adjusted by Holm's step-down rule within this paper's table; the verdict is "
        f"read from it: a call whose adjusted p is not below {ONE_SIDED:g} is inconclusive. Where the per-seed values "
        f"are bimodal (Sarle's coefficient above {BIMODAL:.3f}), a rank test (Wilcoxon signed-rank, paired; "
        "Mann–Whitney, unpaired) looks again, and the row is inconclusive where it disagrees. Test: Welch (df by "
        "Welch–Satterthwaite; n per arm) or paired (per-seed differences, df = pairs − 1). MDD = "
        f"(t_{{{1 - ONE_SIDED:g},df}} + t_{{{POWER:g},df}})·se, the difference this n detects with {POWER:.0%} power; "
        f"n for stated effect: seeds per arm whose MDD at the observed spread reaches the effect stated before the run "
        f"(a tie's margin; an ordering's gap in the paper, else {STATED_EFFECT:g} point), never the observed d. "
        f"Realised budgets: both arms' mean samples per round, \"unequal budgets\" where they differ by more than "
        f"{EQUAL_BUDGET_TOLERANCE:.0%}. See docs/reproduction.md."
    )


def family_text(rows: Sequence[JSONObject]) -> str:
    """The caption line naming the Holm family of a table: how many tests, comparisons and premise tests."""
    comparisons = sum(row.get("p") is not None for row in rows)
    premises = sum(as_object(row.get("premise_test") or {}, "premise_test").get("p") is not None for row in rows)
    return (f"Holm family: this paper's table, {comparisons + premises} tests ({comparisons} comparisons and {premises} "
            "premise tests).")


def p_text(p: float | None) -> str:
    if p is None:
        return "—"
    if p < 0.001:
        return "<0.001"
    return ">0.999" if p > 0.999 else f"{p:.3f}"


def difference_text(row: JSONObject, fmt: str) -> str:
    """'+d [low, high]', or '+d' without a test, or '—'."""
    d = as_optional_number(row["d"], "d")
    if d is None:
        return "—"
    ci = row.get("ci")
    if ci is None:
        return f"{d:+{fmt}}"
    low, high = (as_number(bound, "ci") for bound in as_list(ci, "ci"))
    return f"{d:+{fmt}} [{low:+{fmt}}, {high:+{fmt}}]"


def method_text(row: JSONObject) -> str:
    """'Welch (3.1), 3 + 3', 'paired (2), 3 pairs', or '—, 1 + 3' without a test."""
    if row.get("n") is None:
        return "—"
    n, test = as_list(row["n"], "n"), row.get("test")
    if test is None:
        return f"—, {n[0]} + {n[1]}"
    df = as_number(row["df"], "df")
    if test == "paired":
        return f"paired ({df:.0f}), {n[0]} pairs"
    return f"Welch ({df:.1f}), {n[0]} + {n[1]}"


def seeds_text(row: JSONObject) -> str:
    """'34 for 1': the seeds per arm that detect the pre-stated effect (tie: 'for ±margin') at this run's
    spread; '—' without a test or a stated effect."""
    measured, effect = row.get("seeds_needed_measured"), row.get("effect")
    if row.get("test") is None or row.get("p") is None or effect is None:
        return "—"
    count = f"> {MAX_SEEDS:,}" if measured is None else str(measured)
    return f"{count} for {'±' if row.get('tie') else ''}{as_number(effect, 'effect'):g}"


def claim_text(row: JSONObject) -> str:
    """The claim, where it is measured, the margin of a tie claim and why, and the note."""
    where = f"{row['source']}: {which_text(as_text(row['which'], 'which'), as_text(row['metric'], 'metric'))}"
    if row["tie"]:
        margin = as_optional_number(row.get("margin"), "margin")
        where += " (tie claim" + (f", margin ±{margin:g})" if margin is not None else ", no margin stated)")
    claim = cell(row["claim"]) + f"<br><sub>{cell(where)}</sub>"
    if row.get("budget"):
        claim += f"<br><sub>budget: {cell(row['budget'])}</sub>"
    if "realised" in row:
        claim += f"<br><sub>{cell(realised_text(row))}</sub>"
    if row.get("premise_test"):
        claim += f"<br><sub>{cell(premise_text(row))}</sub>"
    if row.get("margin_reason"):
        claim += f"<br><sub>margin: {cell(row['margin_reason'])}</sub>"
    if row["note"]:
        claim += f"<br><sub>note: {cell(row['note'])}</sub>"
    return claim


def realised_text(row: JSONObject) -> str:
    """'realised: A 2048, B 60000 samples per round: unequal budgets' (or 'equal samples (within 10%)'); a sealed
    side's figure, which its server was never told, reads 'B not released (sealed; measured in simulation: 2050)'
    and the rule is said to use it, or 'not released (sealed; not measured)'; 'realised budgets: not recorded (a run
    older than the record)' where a side's runs have no record of it."""
    if row["realised"] is None:
        return "realised budgets: not recorded (a run older than the record)"
    realised = as_object(row["realised"], "realised")
    how = as_object(realised.get("how", {}), "realised how")
    sides = ", ".join(f"{row[side]} {side_figure(as_optional_number(realised[side], side), as_text(how.get(side, 'released'), 'how'))}"
                      for side in ("better", "worse"))
    if realised["better"] is None or realised["worse"] is None:
        return f"realised: {sides}: budgets not compared"
    measured = ", on the figure measured in simulation" if "measured" in how.values() else ""
    tolerance = as_number(realised["tolerance"], "tolerance")
    verdict = f"equal samples (within {tolerance:.0%}{measured})" if realised["equal"] else f"unequal budgets{measured.replace(',', '')}"
    return f"realised: {sides} samples per round: {verdict}"


def side_figure(mean: float | None, how: str) -> str:
    """One side's realised mean as the table prints it, with how it is known (:func:`~.rows.side_budget`)."""
    if how == "measured":
        return f"not released (sealed; measured in simulation: {mean:.0f})"
    return "not released (sealed; not measured)" if mean is None else f"{mean:.0f}"


def premise_text(row: JSONObject) -> str:
    """'premise: Centralized ≥ FedAvg: +d [low, high], p, verdict' (the claim is not comparable where it is reversed)."""
    premise, fmt = as_object(row["premise_test"], "premise_test"), number_format("", as_text(row["metric"], "metric"))
    if premise["d"] is None:
        return f"premise: {premise['label']} ≥ {row['worse']}: not measured"
    p_holm = as_optional_number(premise.get("p_holm"), "p_holm")
    holm = "" if p_holm is None else f", p (Holm) = {p_text(p_holm)}"
    return (f"premise: {premise['label']} ≥ {row['worse']}: {difference_text(premise, fmt)}, "
            f"p = {p_text(as_optional_number(premise['p'], 'p'))}{holm}, "
            f"{premise['verdict']}")


def result_cells(row: JSONObject) -> list[str]:
    """The cells of a Comparison row after the two sides: d [CI], p, Holm-adjusted p, test (df) and n, MDD, n for
    the stated effect, verdict (rows of an older reproduction.json, without the test's fields, show "—" there)."""
    fmt = number_format("", as_text(row["metric"], "metric"))
    mdd = as_optional_number(row.get("mdd"), "mdd")
    return [difference_text(row, fmt), p_text(as_optional_number(row.get("p"), "p")), p_text(as_optional_number(row.get("p_holm"), "p_holm")),
            method_text(row), "—" if mdd is None else f"{mdd:{fmt}}",
            seeds_text(row), cell(row["verdict"])]


def comparison_lines(rows: Sequence[JSONObject]) -> list[str]:
    """The Comparisons table of ``rows`` (one claim each), header included, as Markdown lines."""
    lines = list(COMPARISON_HEADER)
    for row in rows:
        fmt = number_format("", as_text(row["metric"], "metric"))
        better = f"{cell(row['better'])}: {mean_sd(row['better_stats'], fmt)}"
        worse = f"{cell(row['worse'])}: {mean_sd(row['worse_stats'], fmt)}"
        lines.append("| " + " | ".join([claim_text(row), better, worse, *result_cells(row)]) + " |")
    return lines


def run_lines(runs: list[JSONObject]) -> list[str]:
    lines = ["| run | what it stands for, and its stated cost | wall time | status |", "|---|---|---|---|"]
    for run in runs:
        wall_s = as_optional_number(run["wall_s"], "wall_s")
        wall = "—" if wall_s is None else f"{wall_s:.0f} s"
        lines.append(f"| {cell(run['name'])} ({run['kind']}) | {cell(run['description'])} | {wall} | {cell(run['status'])} |")
    return lines


def total_wall(document: JSONObject) -> str:
    """This invocation's wall time, and where some runs were reused from an earlier invocation, the runs' own wall
    times added up (a reused run's is the time it took when it ran; one whose time was not recorded is named apart)."""
    line = f"Total wall time: {as_number(document['wall_s'], 'wall_s'):.0f} s"
    runs = run_rows(document)
    reused = [r for r in runs if as_text(r["status"], "status").startswith("reused")]
    if reused:
        walls = sum(as_number(r["wall_s"], "wall_s") for r in runs if r["wall_s"] is not None)
        unknown = sum(r["wall_s"] is None for r in reused)
        line += f" ({len(reused)} run(s) reused from an earlier invocation; the runs' own wall times add up to {walls:.0f} s"
        line += f", without the {unknown} reused run(s) whose wall time was not recorded)" if unknown else ")"
    return line


def run_rows(document: JSONObject) -> list[JSONObject]:
    return [as_object(run, "run") for run in as_list(document["runs"], "runs")]


def markdown(document: JSONObject, level: int = 1) -> str:
    """The whole REPRODUCTION.md for one paper's reproduction document (its title a heading of ``level``)."""
    hw = as_object(document["hardware"], "hardware")
    comparisons = [as_object(row, "comparison") for row in as_list(document["comparisons"], "comparisons")]
    top, sub = "#" * level, "#" * (level + 1)
    lines = [
        f"{top} Reproduction: {cell(document['paper'])} ({document['profile']} profile)", "", cell(document["citation"]), "",
        f"Command: `{document['command']}`  ", f"Profile: {document['profile']} (device {document['device']}); "
        f"seeds {document['seeds']}; {document['date']}  ",
        f"Hardware: {cell(hw['cpu'])}; GPU: {cell(hw['gpu'] or 'none')}; torch {hw['torch']}; Python {hw['python']}  ",
        total_wall(document), "", f"{sub} Runs", "", *run_lines(run_rows(document)), "",
        f"{sub} Figures: the paper's numbers beside ours", "",
        "Percent figures show our fraction x100; a stand-in setting (CPU profile, or a note saying so) is not comparable, "
        f"nor is the {ORACLE} (shown for information only).", "",
        *figure_lines(as_list(document["figures"], "figures")), "", f"{sub} Comparisons: the orderings the paper claims", "",
        f"{comparison_rules()} {family_text(comparisons)}", "", *comparison_lines(comparisons),
    ]
    if document["notes"]:
        lines += ["", f"{sub} Notes", ""] + [f"- {cell(note)}" for note in as_list(document["notes"], "notes")]
    return "\n".join(lines) + "\n"
