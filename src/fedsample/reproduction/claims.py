"""Which claims hold: the Comparison rows of a document's stored reproduction tables (docs/reproduction.md)
grouped by their verdict, read from the Holm-adjusted p (:mod:`.rows`), and by their realised budgets, for the
generated lists of README.md and docs/reproduction.md (docs/regenerate.py).

A row is quoted as holding only at equal realised budgets (the table's "realised: ... equal samples" line,
:func:`fedsample.budget.equal_budgets`); a row that holds where the budgets are unequal, or were not recorded by
its run, is listed apart and not quoted as a finding.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from fedsample.reproduction.rederive import SECTION, cells
from fedsample.reproduction.table import COMPARISON_HEADER

__all__ = ["Claim", "claims_list", "claims_summary", "stored_claims"]

EQUAL, UNEQUAL, UNRECORDED = "equal", "unequal", "not recorded"
#: The groups of the lists, in order: (key, heading).
GROUPS = (
    ("holds", "Holds at equal realised budgets"),
    ("holds:" + UNEQUAL, "Holds, but at unequal realised budgets (not quoted as a finding)"),
    ("holds:" + UNRECORDED, "Holds, but its run did not record the realised budgets (not quoted as a finding until re-run)"),
    ("reversed", "Reversed (an ordering), or differs (a tie)"),
    ("not comparable", "Not comparable (the premise fails)"),
    ("inconclusive", "Inconclusive"),
)


@dataclass(frozen=True)
class Claim:
    """One stored Comparison row: its paper and profile, the claim as the table writes it, d [CI] as printed,
    the verdict's first words ("holds", "reversed", "differs", "inconclusive", "not comparable", ...), and the
    realised budgets ("equal", "unequal" or "not recorded")."""

    paper: str
    profile: str
    claim: str
    difference: str
    verdict: str
    budget: str

    @property
    def group(self) -> str:
        """The list it belongs to (a key of :data:`GROUPS`, or "other": not measured, one seed)."""
        if self.verdict == "holds":
            return "holds" if self.budget == EQUAL else f"holds:{self.budget}"
        if self.verdict in ("reversed", "differs"):
            return "reversed"
        return self.verdict if self.verdict in ("inconclusive", "not comparable") else "other"


def budget_of(claim_cell: str) -> str:
    """"equal", "unequal" or "not recorded", from the claim cell's realised-budget line."""
    if "unequal budgets" in claim_cell:
        return UNEQUAL
    return EQUAL if re.search(r"<sub>realised: [^<]*: equal samples", claim_cell) else UNRECORDED


def stored_claims(text: str) -> list[Claim]:
    """Every Comparison row of the tables in ``text`` that are in the current form (with the Holm column)."""
    found = []
    for section in SECTION.finditer(text):
        lines = section["body"].split("\n")
        if COMPARISON_HEADER[0] not in lines:
            continue
        for line in lines[lines.index(COMPARISON_HEADER[0]) + 2:]:
            if not line.startswith("|"):
                break
            row = cells(line)
            found.append(Claim(section["paper"], section["profile"], row[0].split("<br>")[0], row[3],
                               row[-1].split(" (")[0], budget_of(row[0])))
    return found


def per_paper(claims: list[Claim]) -> str:
    """'fedsampling 9, iwds 10' (in order of first appearance)."""
    counts = Counter(c.paper for c in claims)
    return ", ".join(f"{paper} {count}" for paper, count in counts.items())


def differences(claims: list[Claim]) -> str:
    """'+5.0 to +23.7': the range of the printed differences (their first number)."""
    values = sorted((float(c.difference.split(" ")[0]), c.difference.split(" ")[0]) for c in claims if c.difference[:1] in "+-")
    if not values:
        return ""
    return values[0][1] if len(values) == 1 else f"{values[0][1]} to {values[-1][1]}"


def grouped(claims: list[Claim]) -> list[tuple[str, list[Claim]]]:
    return [(heading, [c for c in claims if c.group == key]) for key, heading in GROUPS]


def intro(claims: list[Claim]) -> str:
    papers = len({c.paper for c in claims})
    profiles = ", ".join(sorted({c.profile for c in claims}))
    return (f"Read from the verdicts of the {len(claims)} comparisons of {papers} papers in docs/reproduction.md ({profiles} "
            "profile), each read from its Holm-adjusted p within its paper's table; a claim is quoted as holding only "
            "at equal realised budgets.\n\n")


def per_paper_differences(claims: list[Claim]) -> str:
    """'fedsampling 9, d +6.7 to +29.8; iwds 10, d +5.0 to +23.7' (each paper in its own unit)."""
    papers = dict.fromkeys(c.paper for c in claims)
    return "; ".join(f"{paper} {len(rows)}, d {differences(rows)}" for paper in papers
                     for rows in [[c for c in claims if c.paper == paper]])


def claims_summary(claims: list[Claim]) -> str:
    """The short list (README.md): per group, how many rows of which paper, and for those that hold the range of
    their d (accuracy points, or dB for an MSD)."""
    lines = []
    for heading, rows in grouped(claims):
        if not rows:
            lines.append(f"- **{heading}:** none.")
        elif heading.startswith("Holds"):
            lines.append(f"- **{heading}:** {len(rows)} ({per_paper_differences(rows)}).")
        else:
            lines.append(f"- **{heading}:** {len(rows)} ({per_paper(rows)}).")
    return intro(claims) + "\n".join(lines) + "\n"


def claims_list(claims: list[Claim]) -> str:
    """The full list (docs/reproduction.md): every claim that holds or is reversed by name with its d; the other
    groups by count."""
    lines = []
    for heading, rows in grouped(claims):
        if not rows:
            lines.append(f"- **{heading}:** none.")
        elif heading.startswith(("Holds", "Reversed")):
            lines.append(f"- **{heading}** ({len(rows)}):")
            lines += [f"  - {c.paper}: {c.claim}: {c.difference}" for c in rows]
        else:
            lines.append(f"- **{heading}:** {len(rows)} ({per_paper(rows)}).")
    return intro(claims) + "\n".join(lines) + "\n"
