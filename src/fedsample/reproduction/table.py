"""REPRODUCTION.md: a reproduction document (reproduction.json) as markdown — the runs with their wall
time, the Figures (claim | paper | ours | verdict), the Comparisons (claim | better | worse | d with its
confidence interval | p | Holm-adjusted p | test and n | minimal detectable difference | seeds for the stated
effect | verdict), the paper's notes, and the hardware and exact command."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from fedsample.experiments.report import markdown_text
from fedsample.budget import EQUAL_BUDGET_TOLERANCE
from fedsample.reproduction.multiplicity import BIMODAL
from fedsample.reproduction.significance import MAX_SEEDS
from fedsample.reproduction.verdict import ALPHA, CONFIDENCE, ONE_SIDED, ORACLE, PERCENT_METRICS, POWER, STATED_EFFECT

__all__ = [
    "COMPARISON_HEADER", "PREVIOUS_HEADER", "claim_text", "comparison_lines", "comparison_rules", "family_text", "markdown",
    "result_cells",
]


def number_format(unit: str, metric: str) -> str:
    """A format: one decimal for percent (as the papers print them), two for dB, four significant fmt else."""
    if unit == "%" or metric in PERCENT_METRICS:
        return ".1f"
    return ".2f" if unit == "dB" or metric.endswith("_db") else ".4g"


def mean_sd(stats: Mapping[str, Any] | None, fmt: str) -> str:
    """'mean ± sd (n seeds)', or 'mean (1 seed)', or '—'."""
    if not stats:
        return "—"
    seeds = f"{stats['n']} seed{'s' if stats['n'] != 1 else ''}"
    if stats["sd"] is None:
        return f"{stats['mean']:{fmt}} ({seeds})"
    return f"{stats['mean']:{fmt}} ± {stats['sd']:{fmt}} ({seeds})"


def cell(text: str) -> str:
    return markdown_text(str(text))


def which_text(which: str, metric: str) -> str:
    """'final accuracy', or 'oracle: best round on the test set, accuracy' for the best round."""
    return f"{ORACLE}, {metric}" if which == "best" else f"{which} {metric}"


def figure_lines(rows: list[Mapping[str, Any]]) -> list[str]:
    lines = ["| claim | paper | ours (mean ± sd) | verdict |", "|---|---|---|---|"]
    for row in rows:
        fmt = number_format(row["unit"], row["metric"])
        unit = row["unit"] if row["unit"] in ("", "%") else f" {row['unit']}"
        paper = "—" if row["paper"] is None else f"{row['paper']:g}{unit}"  # as the paper prints it
        where = f"{row['source']}: {row['label']}, {which_text(row['which'], row['metric'])}"
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


def family_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """The caption line naming the Holm family of a table: how many tests, comparisons and premise tests."""
    comparisons = sum(row.get("p") is not None for row in rows)
    premises = sum((row.get("premise_test") or {}).get("p") is not None for row in rows)
    return (f"Holm family: this paper's table, {comparisons + premises} tests ({comparisons} comparisons and {premises} "
            "premise tests).")


def p_text(p: float | None) -> str:
    if p is None:
        return "—"
    if p < 0.001:
        return "<0.001"
    return ">0.999" if p > 0.999 else f"{p:.3f}"


def difference_text(row: Mapping[str, Any], fmt: str) -> str:
    """'+d [low, high]', or '+d' without a test, or '—'."""
    if row["d"] is None:
        return "—"
    if row.get("ci") is None:
        return f"{row['d']:+{fmt}}"
    low, high = row["ci"]
    return f"{row['d']:+{fmt}} [{low:+{fmt}}, {high:+{fmt}}]"


def method_text(row: Mapping[str, Any]) -> str:
    """'Welch (3.1), 3 + 3', 'paired (2), 3 pairs', or '—, 1 + 3' without a test."""
    n, test = row.get("n"), row.get("test")
    if n is None:
        return "—"
    if test is None:
        return f"—, {n[0]} + {n[1]}"
    if test == "paired":
        return f"paired ({row['df']:.0f}), {n[0]} pairs"
    return f"Welch ({row['df']:.1f}), {n[0]} + {n[1]}"


def seeds_text(row: Mapping[str, Any]) -> str:
    """'34 for 1': the seeds per arm that detect the pre-stated effect (tie: 'for ±margin') at this run's
    spread; '—' without a test or a stated effect."""
    measured, effect = row.get("seeds_needed_measured"), row.get("effect")
    if row.get("test") is None or row.get("p") is None or effect is None:
        return "—"
    count = f"> {MAX_SEEDS:,}" if measured is None else str(measured)
    return f"{count} for {'±' if row.get('tie') else ''}{effect:g}"


def claim_text(row: Mapping[str, Any]) -> str:
    """The claim, where it is measured, the margin of a tie claim and why, and the note."""
    where = f"{row['source']}: {which_text(row['which'], row['metric'])}"
    if row["tie"]:
        where += " (tie claim" + (f", margin ±{row['margin']:g})" if row.get("margin") is not None else ", no margin stated)")
    text = cell(row["claim"]) + f"<br><sub>{cell(where)}</sub>"
    if row.get("budget"):
        text += f"<br><sub>budget: {cell(row['budget'])}</sub>"
    if "realised" in row:
        text += f"<br><sub>{cell(realised_text(row))}</sub>"
    if row.get("premise_test"):
        text += f"<br><sub>{cell(premise_text(row))}</sub>"
    if row.get("margin_reason"):
        text += f"<br><sub>margin: {cell(row['margin_reason'])}</sub>"
    if row["note"]:
        text += f"<br><sub>note: {cell(row['note'])}</sub>"
    return text


def realised_text(row: Mapping[str, Any]) -> str:
    """'realised: A 2048, B 60000 samples per round: unequal budgets' (or 'equal samples (within 10%)'); a sealed
    side's figure, which its server was never told, reads 'B not released (sealed; measured in simulation: 2050)'
    and the rule is said to use it, or 'not released (sealed; not measured)'; 'realised budgets: not recorded (a run
    older than the record)' where a side's runs have no record of it."""
    realised = row["realised"]
    if realised is None:
        return "realised budgets: not recorded (a run older than the record)"
    how = realised.get("how", {})
    sides = ", ".join(f"{row[side]} {side_figure(realised[side], how.get(side, 'released'))}" for side in ("better", "worse"))
    if realised["better"] is None or realised["worse"] is None:
        return f"realised: {sides}: budgets not compared"
    measured = ", on the figure measured in simulation" if "measured" in how.values() else ""
    verdict = f"equal samples (within {realised['tolerance']:.0%}{measured})" if realised["equal"] else f"unequal budgets{measured.replace(',', '')}"
    return f"realised: {sides} samples per round: {verdict}"


def side_figure(mean: float | None, how: str) -> str:
    """One side's realised mean as the table prints it, with how it is known (:func:`~.rows.side_budget`)."""
    if how == "measured":
        return f"not released (sealed; measured in simulation: {mean:.0f})"
    return "not released (sealed; not measured)" if mean is None else f"{mean:.0f}"


def premise_text(row: Mapping[str, Any]) -> str:
    """'premise: Centralized ≥ FedAvg: +d [low, high], p, verdict' (the claim is not comparable where it is reversed)."""
    premise, fmt = row["premise_test"], number_format("", row["metric"])
    if premise["d"] is None:
        return f"premise: {premise['label']} ≥ {row['worse']}: not measured"
    holm = "" if premise.get("p_holm") is None else f", p (Holm) = {p_text(premise['p_holm'])}"
    return (f"premise: {premise['label']} ≥ {row['worse']}: {difference_text(premise, fmt)}, p = {p_text(premise['p'])}{holm}, "
            f"{premise['verdict']}")


def result_cells(row: Mapping[str, Any]) -> list[str]:
    """The cells of a Comparison row after the two sides: d [CI], p, Holm-adjusted p, test (df) and n, MDD, n for
    the stated effect, verdict (rows of an older reproduction.json, without the test's fields, show "—" there)."""
    fmt = number_format("", row["metric"])
    mdd = "—" if row.get("mdd") is None else f"{row['mdd']:{fmt}}"
    return [difference_text(row, fmt), p_text(row.get("p")), p_text(row.get("p_holm")), method_text(row), mdd,
            seeds_text(row), cell(row["verdict"])]


def comparison_lines(rows: list[Mapping[str, Any]]) -> list[str]:
    """The Comparisons table of ``rows`` (one claim each), header included, as Markdown lines."""
    lines = list(COMPARISON_HEADER)
    for row in rows:
        fmt = number_format("", row["metric"])
        better = f"{cell(row['better'])}: {mean_sd(row['better_stats'], fmt)}"
        worse = f"{cell(row['worse'])}: {mean_sd(row['worse_stats'], fmt)}"
        lines.append("| " + " | ".join([claim_text(row), better, worse, *result_cells(row)]) + " |")
    return lines


def run_lines(runs: list[Mapping[str, Any]]) -> list[str]:
    lines = ["| run | what it stands for, and its stated cost | wall time | status |", "|---|---|---|---|"]
    for run in runs:
        wall = "—" if run["wall_s"] is None else f"{run['wall_s']:.0f} s"
        lines.append(f"| {cell(run['name'])} ({run['kind']}) | {cell(run['description'])} | {wall} | {cell(run['status'])} |")
    return lines


def total_wall(document: Mapping[str, Any]) -> str:
    """This invocation's wall time, and where some runs were reused from an earlier invocation, the runs' own wall
    times added up (a reused run's is the time it took when it ran; one whose time was not recorded is named apart)."""
    line = f"Total wall time: {document['wall_s']:.0f} s"
    reused = [r for r in document["runs"] if r["status"].startswith("reused")]
    if reused:
        runs = sum(r["wall_s"] for r in document["runs"] if r["wall_s"] is not None)
        unknown = sum(r["wall_s"] is None for r in reused)
        line += f" ({len(reused)} run(s) reused from an earlier invocation; the runs' own wall times add up to {runs:.0f} s"
        line += f", without the {unknown} reused run(s) whose wall time was not recorded)" if unknown else ")"
    return line


def markdown(document: Mapping[str, Any], level: int = 1) -> str:
    """The whole REPRODUCTION.md for one paper's reproduction document (its title a heading of ``level``)."""
    hw = document["hardware"]
    top, sub = "#" * level, "#" * (level + 1)
    lines = [
        f"{top} Reproduction: {cell(document['paper'])} ({document['profile']} profile)", "", cell(document["citation"]), "",
        f"Command: `{document['command']}`  ", f"Profile: {document['profile']} (device {document['device']}); "
        f"seeds {document['seeds']}; {document['date']}  ",
        f"Hardware: {cell(hw['cpu'])}; GPU: {cell(hw['gpu'] or 'none')}; torch {hw['torch']}; Python {hw['python']}  ",
        total_wall(document), "", f"{sub} Runs", "", *run_lines(document["runs"]), "",
        f"{sub} Figures: the paper's numbers beside ours", "",
        "Percent figures show our fraction x100; a stand-in setting (CPU profile, or a note saying so) is not comparable, "
        f"nor is the {ORACLE} (shown for information only).", "",
        *figure_lines(document["figures"]), "", f"{sub} Comparisons: the orderings the paper claims", "",
        f"{comparison_rules()} {family_text(document['comparisons'])}", "", *comparison_lines(document["comparisons"]),
    ]
    if document["notes"]:
        lines += ["", f"{sub} Notes", ""] + [f"- {cell(note)}" for note in document["notes"]]
    return "\n".join(lines) + "\n"
