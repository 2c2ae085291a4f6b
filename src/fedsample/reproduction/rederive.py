"""Re-derive the Comparison verdicts of the tables stored in a document (docs/reproduction.md) from the
numbers they print, with the current rules (:mod:`.verdict`), without running anything.

The stored tables keep each side's mean ± sd (n seeds) and no per-seed values, so every row is tested with
Welch's test from summary statistics (a paired comparison cannot be paired here); a tie claim's margin comes
from the registered paper module. The better and worse cells stay as stored; the claim cell is rewritten
from the paper module (with its margin, and the oracle label where the stored numbers are the best round on
the test set), the test's cells, the header and the rules above the table are rewritten.

    python -m fedsample.reproduction.rederive docs/reproduction.md
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Mapping

from fedsample.experiments.report import markdown_text
from fedsample.reproduction.registry import papers
from fedsample.reproduction.rows import tested_row
from fedsample.reproduction.spec import Comparison, Paper
from fedsample.reproduction.table import COMPARISON_HEADER, ORACLE, claim_text, comparison_rules, result_cells
from fedsample.reproduction.verdict import Stats

__all__ = ["main", "rederive"]

SECTION = re.compile(r"<!-- reproduction:(?P<paper>[\w-]+):(?P<profile>\w+) -->\n(?P<body>.*?)<!-- /reproduction:(?P=paper):(?P=profile) -->", re.S)
SIDE = re.compile(r"^(?P<label>.*): (?P<mean>[-+]?\d+(?:\.\d+)?)(?: ± (?P<sd>\d+(?:\.\d+)?))? \((?P<n>\d+) seeds?\)$")
WHERE = re.compile(r"<br><sub>(?P<source>[^<:]+): (?P<which>.+?)(?: \(tie claim[^<]*\))?</sub>")
OLD_HEADER = "| claim | better | worse | difference ± se | verdict |"
REDERIVED = (
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


def rederived_row(paper: Paper, line: str) -> str:
    """One stored Comparison row with its claim and test cells re-derived."""
    claim_cell, better_cell, worse_cell = cells(line)[:3]
    source, which = stored_which(claim_cell)
    (better, better_stats), (worse, worse_stats) = side(better_cell), side(worse_cell)
    comparison = find_comparison(paper, source, better, worse, "(tie claim" in claim_cell)
    row = tested_row(comparison, better_stats, worse_stats)
    claim = claim_text({**asdict(comparison), "which": which})
    return "| " + " | ".join([claim, better_cell, worse_cell, *result_cells(row)]) + " |"


def rederive_section(paper: Paper, body: str) -> str:
    """A stored section with its Comparisons table re-derived (rules paragraph, header and rows)."""
    lines = body.split("\n")
    header = next((i for i, line in enumerate(lines) if line in (OLD_HEADER, COMPARISON_HEADER[0])), None)
    if header is None:
        return body
    heading = max(i for i in range(header) if lines[i].startswith("#"))
    end = next((i for i in range(header + 2, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = [rederived_row(paper, line) for line in lines[header + 2:end]]
    rules = [f"{comparison_rules()} {REDERIVED}"]
    return "\n".join(lines[: heading + 1] + [""] + rules + [""] + COMPARISON_HEADER + rows + lines[end:])


def oracle_labels(body: str) -> str:
    """Figure where-lines that name the best round ('..., best accuracy') labelled as the oracle."""
    return re.sub(r"(<sub>[^<]*?, )best (\w+(?:\\_\w+)?)</sub>", lambda m: f"{m[1]}{markdown_text(ORACLE)}, {m[2]}</sub>", body)


def rederive(text: str, registered: Mapping[str, Paper] | None = None) -> str:
    """Every stored section of ``text`` with its Comparison verdicts re-derived."""
    known = papers() if registered is None else registered

    def section(match: re.Match) -> str:
        paper = known.get(match["paper"])
        if paper is None:
            return match[0]
        body = rederive_section(paper, oracle_labels(match["body"]))
        return match[0].replace(match["body"], body)

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
