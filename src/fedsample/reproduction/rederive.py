"""Re-derive the Comparison verdicts of the tables stored in a document (docs/reproduction.md) from the
numbers they print, with the current rules (:mod:`.verdict`, :mod:`.multiplicity`), without running anything.

A stored table keeps no per-seed values. A table with the test's cells (d [95% CI], p, test (df), n) but no
Holm column keeps its tests as printed: its decisive p values (:func:`~.rows.decisive_p`; where p is printed
as <0.001 or >0.999, and for a tie's p of differing, from d and its interval: se = width / (2 t_{0.975,df}))
are adjusted by Holm within the table, premise tests included (a premise test's df is its claim's), and each
verdict and the seeds for the stated effect are read again (no rank check: it needs per-seed values). A table
of the oldest form (difference ± se) is tested with Welch's test from each side's printed mean ± sd (n seeds).
A tie claim's margin comes from the registered paper module. The better and worse cells stay as stored; the
claim cell is rewritten from the paper module (with its margin, the premise test, "realised budgets: not
recorded", and the oracle label where the stored numbers are the best round on the test set), the test's
cells, the header and the rules above the table are rewritten. A table already in the current form is left
as it is, so the re-derivation is idempotent.

    python -m fedsample.reproduction.rederive docs/reproduction.md
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Mapping

from scipy import stats

from fedsample.experiments.report import markdown_text
from fedsample.reproduction.multiplicity import seeds_for_effect
from fedsample.reproduction.registry import papers
from fedsample.reproduction.rows import read_verdict, stats_dict, tested_row, with_holm
from fedsample.reproduction.significance import Estimate, welch
from fedsample.reproduction.spec import Comparison, Paper
from fedsample.reproduction.table import (
    COMPARISON_HEADER, PREVIOUS_HEADER, claim_text, comparison_rules, family_text, result_cells,
)
from fedsample.reproduction.verdict import ALPHA, CONFIDENCE, ONE_SIDED, ORACLE, POWER, Stats, stated_effect
from fedsample.runtime.records import JSONObject

__all__ = ["main", "rederive"]

SECTION = re.compile(r"<!-- reproduction:(?P<paper>[\w-]+):(?P<profile>\w+) -->\n(?P<body>.*?)<!-- /reproduction:(?P=paper):(?P=profile) -->", re.S)
SIDE = re.compile(r"^(?P<label>.*): (?P<mean>[-+]?\d+(?:\.\d+)?)(?: ± (?P<sd>\d+(?:\.\d+)?))? \((?P<n>\d+) seeds?\)$")
WHERE = re.compile(r"<br><sub>(?P<source>[^<:]+): (?P<which>.+?)(?: \(tie claim[^<]*\))?</sub>")
NUMBER = r"[-+]?\d+(?:\.\d+)?"
INTERVAL = re.compile(rf"^(?P<d>{NUMBER}) \\?\[(?P<low>{NUMBER}), (?P<high>{NUMBER})\\?\]$")
TEST = re.compile(r"^(?P<test>paired|Welch) \((?P<df>[\d.]+)\), (?P<n>\d+)(?: pairs| \+ (?P<m>\d+))$")
PREMISE = re.compile(
    rf"<br><sub>premise: (?P<label>.+?) ≥ .+?: (?P<ci>{NUMBER} \\\[{NUMBER}, {NUMBER}\\\]), p = (?P<p>[^,]+), (?P<verdict>[^<]+)</sub>"
)
OLD_HEADER = "| claim | better | worse | difference ± se | verdict |"
REDERIVED = (
    "Re-derived from the numbers this table printed, not re-run (`python -m fedsample.reproduction.rederive`): "
    "the tests as printed; the Holm-adjusted p, the verdicts and the seeds for the stated effect read again from "
    "them (where p was printed as <0.001 or >0.999, and for a tie's p of differing, from d and its interval; a "
    "premise test's df is its claim's). The stored table keeps no per-seed values, so no rank check is possible "
    "here, and these runs did not record their realised budgets."
)
OLDEST = (
    "Verdicts re-derived from the stored numbers, not re-run: each side's mean, sd and n as printed in this table "
    "(rounded as printed), Welch's test from summary statistics (the stored table keeps no per-seed values), "
    "by `python -m fedsample.reproduction.rederive`."
)


def cells(line: str) -> list[str]:
    """The cells of a markdown table row (a '\\|' inside a cell is text, not a separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def side(text: str) -> tuple[str, Stats]:
    """'Label: mean ± sd (n seeds)' as the escaped label and its Stats (sd None for one seed)."""
    found = SIDE.match(text)
    if not found:
        raise ValueError(f"not a 'label: mean ± sd (n seeds)' cell: {text!r}")
    sd = None if found["sd"] is None else float(found["sd"])
    return found["label"], Stats(float(found["mean"]), sd, int(found["n"]), ())


def stored_which(claim_cell: str) -> tuple[str, str]:
    """The source and "final" or "best" (the oracle) of a stored claim cell's where-line."""
    where = WHERE.search(claim_cell)
    if not where:
        raise ValueError(f"no 'source: which metric' line in {claim_cell!r}")
    oracle = where["which"].startswith(("best ", markdown_text(ORACLE)))
    return where["source"], "best" if oracle else "final"


def find_comparison(paper: Paper, source: str, better: str, worse: str, tie: bool) -> Comparison:
    """The paper's comparison of ``better`` and ``worse`` in ``source`` (all as escaped in the table)."""
    for comparison in paper.comparisons:
        names = tuple(markdown_text(x) for x in (comparison.source, comparison.better, comparison.worse))
        if names == (source, better, worse) and comparison.tie == tie:
            return comparison
    raise ValueError(f"{paper.name}: no comparison of {better!r} and {worse!r} in {source!r}")


def printed_p(text: str, d: float, se: float, df: float) -> float:
    """A printed one-sided p: the number, or for "<0.001" / ">0.999" the t test's p, P(T_df >= d/se), kept on
    the printed side of the bound."""
    text = text.replace("\\", "")
    p = float(stats.t.sf(d / se, df))
    if text == "<0.001":
        return min(p, 0.000999)
    if text == ">0.999":
        return max(p, 0.999001)
    return float(text)


def interval(text: str, df: float) -> tuple[float, float, float, float]:
    """'d [low, high]' as d, low, high and se = (high - low) / (2 t_{(1 + CONFIDENCE)/2, df})."""
    found = INTERVAL.match(text)
    if not found:
        raise ValueError(f"not a 'd [low, high]' cell: {text!r}")
    d, low, high = float(found["d"]), float(found["low"]), float(found["high"])
    return d, low, high, (high - low) / (2 * float(stats.t.ppf((1 + CONFIDENCE) / 2, df)))


def printed_estimate(d: float, se: float, df: float, test: str, n: tuple[int, int], sides: tuple[Stats, Stats]) -> Estimate:
    """The estimate behind a printed test: paired, s_d = se·sqrt(n); Welch, each side's printed sd and n."""
    if test == "paired":
        return Estimate(d, (se * n[0] ** 0.5,), n)
    better, worse = sides
    estimate = welch(better.mean, better.sd or 0.0, better.n, worse.mean, worse.sd or 0.0, worse.n)
    return Estimate(d, estimate.sds, estimate.n)


def printed_verdict(printed: str, p: float) -> str:
    """The t test's verdict: as printed (it was read from the unrounded numbers), or where the printed one is
    "not comparable" (a failed premise), the ordering's verdict from its printed p, as :mod:`.verdict` reads it."""
    printed = printed.replace("\\", "")
    if not printed.startswith("not comparable"):
        return printed
    if p < ONE_SIDED:
        return "holds"
    return "reversed" if 1.0 - p < ONE_SIDED else "inconclusive"


def premise_of(claim_cell: str, df: float) -> JSONObject | None:
    """The premise test printed under a claim: ``{"label", "d", "ci", "p", "p_reversed", "verdict"}``."""
    found = PREMISE.search(claim_cell)
    if not found:
        return None
    d, low, high, se = interval(found["ci"], df)
    p = printed_p(found["p"], d, se, df)
    return {"label": found["label"], "d": d, "ci": [low, high], "p": p, "p_reversed": 1.0 - p, "verdict": found["verdict"]}


def printed_row(comparison: Comparison, which: str, claim_cell: str, sides: tuple[Stats, Stats], result: list[str]) -> JSONObject:
    """A Comparison row (the shape of :func:`~.rows.tested_row`) from a table's printed cells after the two sides:
    d [CI], p, test (df) and n, MDD, n needed, verdict."""
    test = TEST.match(result[2])
    if not test:
        raise ValueError(f"not a 'test (df), n' cell: {result[2]!r}")
    df = float(test["df"])
    n = (int(test["n"]), int(test["m"] or test["n"]))
    d, low, high, se = interval(result[0], df)
    estimate = printed_estimate(d, se, df, test["test"], n, sides)
    p = printed_p(result[1], d, se, df)
    t_verdict = printed_verdict(result[5], p)
    p_differs = None
    if comparison.tie and comparison.margin is not None:
        p_differs = min(float(stats.t.sf((d - comparison.margin) / se, df)), float(stats.t.cdf((d + comparison.margin) / se, df)))
        if not t_verdict.startswith("differs"):  # the printed verdict, from the unrounded numbers, bounds it
            p_differs = max(p_differs, ONE_SIDED)
    effect = stated_effect(comparison.tie, comparison.margin, comparison.effect)
    return {
        **asdict(comparison), "which": which, "better_stats": stats_dict(sides[0]), "worse_stats": stats_dict(sides[1]),
        "alpha": ALPHA, "ci_level": CONFIDENCE, "power": POWER, "d": d, "se": se, "df": df, "ci": [low, high], "p": p,
        "p_differs": p_differs, "test": test["test"], "n": list(n), "mdd": float(result[3]), "effect": effect,
        "seeds_needed_measured": seeds_for_effect(estimate, effect, ONE_SIDED, POWER), "bimodal": None,
        "rank_verdict": None, "t_verdict": t_verdict, "realised": None, "premise_test": premise_of(claim_cell, df),
    }


def stored_row(paper: Paper, line: str, printed: bool) -> tuple[JSONObject, str, str]:
    """One stored Comparison row as a row dict and its better and worse cells as stored; ``printed``: the row
    has the test's cells, else it is tested with Welch's test from the printed summary statistics."""
    row_cells = cells(line)
    claim_cell, better_cell, worse_cell = row_cells[:3]
    source, which = stored_which(claim_cell)
    (better, better_stats), (worse, worse_stats) = side(better_cell), side(worse_cell)
    comparison = find_comparison(paper, source, better, worse, "(tie claim" in claim_cell)
    if printed:
        row = printed_row(comparison, which, claim_cell, (better_stats, worse_stats), row_cells[3:])
        row["verdict"] = read_verdict(row)
    else:
        row = {**tested_row(comparison, better_stats, worse_stats), "which": which}
    return row, better_cell, worse_cell


def rederive_section(paper: Paper, body: str) -> str:
    """A stored section with its Comparisons table re-derived (rules paragraph, header and rows); a table already
    in the current form (:data:`~.table.COMPARISON_HEADER`) is left as it is."""
    lines = body.split("\n")
    header = next((i for i, line in enumerate(lines) if line in (OLD_HEADER, PREVIOUS_HEADER)), None)
    if header is None:
        return body
    printed = lines[header] == PREVIOUS_HEADER
    heading = max(i for i in range(header) if lines[i].startswith("#"))
    end = next((i for i in range(header + 2, len(lines)) if not lines[i].startswith("|")), len(lines))
    stored = [stored_row(paper, line, printed) for line in lines[header + 2:end]]
    rows = [row for row, _, _ in stored]
    if printed:
        with_holm(rows)
    rendered = ["| " + " | ".join([claim_text(row), better, worse, *result_cells(row)]) + " |" for row, better, worse in stored]
    rules = f"{comparison_rules()} {family_text(rows)} {REDERIVED}" if printed else f"{comparison_rules()} {OLDEST}"
    return "\n".join(lines[: heading + 1] + ["", rules, ""] + COMPARISON_HEADER + rendered + lines[end:])


def oracle_labels(body: str) -> str:
    """Figure where-lines that name the best round ('..., best accuracy') labelled as the oracle."""
    return re.sub(r"(<sub>[^<]*?, )best (\w+(?:\\_\w+)?)</sub>", lambda m: f"{m[1]}{markdown_text(ORACLE)}, {m[2]}</sub>", body)


def rederive(text: str, registered: Mapping[str, Paper] | None = None) -> str:
    """Every stored section of ``text`` with its Comparison verdicts re-derived."""
    known = papers() if registered is None else registered

    def section(match: re.Match[str]) -> str:
        whole: str = match[0]
        paper = known.get(match["paper"])
        if paper is None:
            return whole
        body = rederive_section(paper, oracle_labels(match["body"]))
        return whole.replace(match["body"], body)

    return SECTION.sub(section, text)


def main(argv: list[str] | None = None) -> int:
    """``python -m fedsample.reproduction.rederive DOC.md``: rewrite the document's verdicts; the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fedsample.reproduction.rederive DOC.md", file=sys.stderr)
        return 2
    doc = Path(args[0])
    try:
        text = rederive(doc.read_text())
    except (OSError, ValueError) as error:
        print(f"fedsample: error: {error}", file=sys.stderr)
        return 2
    doc.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
