"""REPRODUCTION.md: a reproduction document (reproduction.json) as markdown — the runs with their wall
time, the Figures (claim | paper | ours | verdict), the Comparisons (claim | better | worse | difference ±
se | verdict), the paper's notes, and the hardware and exact command."""

from __future__ import annotations

from typing import Mapping

from fedsample.experiments.report import markdown_text
from fedsample.reproduction.verdict import PERCENT_METRICS


def number_format(unit: str, metric: str) -> str:
    """A format: one decimal for percent (as the papers print them), two for dB, four significant fmt else."""
    if unit == "%" or metric in PERCENT_METRICS:
        return ".1f"
    return ".2f" if unit == "dB" or metric.endswith("_db") else ".4g"


def mean_sd(stats: Mapping | None, fmt: str) -> str:
    """'mean ± sd (n seeds)', or 'mean (1 seed)', or '—'."""
    if not stats:
        return "—"
    seeds = f"{stats['n']} seed{'s' if stats['n'] != 1 else ''}"
    if stats["sd"] is None:
        return f"{stats['mean']:{fmt}} ({seeds})"
    return f"{stats['mean']:{fmt}} ± {stats['sd']:{fmt}} ({seeds})"


def cell(text: str) -> str:
    return markdown_text(str(text))


def figure_lines(rows: list[Mapping]) -> list[str]:
    lines = ["| claim | paper | ours (mean ± sd) | verdict |", "|---|---|---|---|"]
    for row in rows:
        fmt = number_format(row["unit"], row["metric"])
        unit = row["unit"] if row["unit"] in ("", "%") else f" {row['unit']}"
        paper = "—" if row["paper"] is None else f"{row['paper']:g}{unit}"  # as the paper prints it
        where = f"{row['source']}: {row['label']}, {row['which']} {row['metric']}"
        claim = cell(row["claim"]) + f"<br><sub>{cell(where)}</sub>"
        if row["note"]:
            claim += f"<br><sub>note: {cell(row['note'])}</sub>"
        lines.append(f"| {claim} | {paper} | {mean_sd(row['ours'], fmt)} | {cell(row['verdict'])} |")
    return lines


def comparison_lines(rows: list[Mapping]) -> list[str]:
    lines = ["| claim | better | worse | difference ± se | verdict |", "|---|---|---|---|---|"]
    for row in rows:
        fmt = number_format("", row["metric"])
        where = f"{row['source']}: {row['which']} {row['metric']}" + (" (tie claim)" if row["tie"] else "")
        claim = cell(row["claim"]) + f"<br><sub>{cell(where)}</sub>"
        if row["note"]:
            claim += f"<br><sub>note: {cell(row['note'])}</sub>"
        better = f"{cell(row['better'])}: {mean_sd(row['better_stats'], fmt)}"
        worse = f"{cell(row['worse'])}: {mean_sd(row['worse_stats'], fmt)}"
        gap = "—" if row["d"] is None else f"{row['d']:+{fmt}}" + ("" if row["se"] is None else f" ± {row['se']:{fmt}}")
        lines.append(f"| {claim} | {better} | {worse} | {gap} | {cell(row['verdict'])} |")
    return lines


def run_lines(runs: list[Mapping]) -> list[str]:
    lines = ["| run | what it stands for, and its stated cost | wall time | status |", "|---|---|---|---|"]
    for run in runs:
        wall = "—" if run["wall_s"] is None else f"{run['wall_s']:.0f} s"
        lines.append(f"| {cell(run['name'])} ({run['kind']}) | {cell(run['description'])} | {wall} | {cell(run['status'])} |")
    return lines


def total_wall(document: dict) -> str:
    """This invocation's wall time, and the runs' own where some were reused from an earlier invocation."""
    line = f"Total wall time: {document['wall_s']:.0f} s"
    reused = [r for r in document["runs"] if r["status"].startswith("reused") and r["wall_s"] is not None]
    if reused:
        runs = sum(r["wall_s"] for r in document["runs"] if r["wall_s"] is not None)
        line += f" ({len(reused)} run(s) reused from an earlier invocation; the runs' own wall times add up to {runs:.0f} s)"
    return line


def markdown(document: Mapping, level: int = 1) -> str:
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
        "Percent figures show our fraction x100; a stand-in setting (CPU profile, or a note saying so) is not comparable.", "",
        *figure_lines(document["figures"]), "", f"{sub} Comparisons: the orderings the paper claims", "",
        "d = difference of means in the claimed direction (positive: the claim's better side is ahead), "
        "se = sqrt(sd_b²/n_b + sd_w²/n_w); holds if d > 2 se, reversed if d < −2 se (docs/reproduction.md).", "",
        *comparison_lines(document["comparisons"]),
    ]
    if document["notes"]:
        lines += ["", f"{sub} Notes", ""] + [f"- {cell(note)}" for note in document["notes"]]
    return "\n".join(lines) + "\n"
