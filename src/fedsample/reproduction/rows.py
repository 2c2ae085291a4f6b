"""The rows of a paper's tables: each Figure with our mean ± sd beside the paper's number, each Comparison
with the difference ± its standard error, and the verdict (:mod:`.verdict`); plain dicts, for the markdown
table and reproduction.json alike."""

from __future__ import annotations

from dataclasses import asdict
from typing import Mapping

from fedsample.reproduction.collect import Values, lookup
from fedsample.reproduction.registry import profile_presets
from fedsample.reproduction.spec import Comparison, Figure, Paper
from fedsample.reproduction.verdict import Stats, comparison_verdict, display_scale, figure_verdict, stats_of


def measured(values: Mapping[str, Values], source: str, label: str, which: str, metric: str, scale: float) -> Stats | None:
    """Our per-seed values of one cell as Stats in display units (None when not measured)."""
    found = lookup(values, source, label, which, metric)
    stats = stats_of(found) if found is not None else None
    return None if stats is None else stats.scaled(scale)


def stand_in(paper: Paper, figure: Figure) -> bool:
    """Whether the figure's setting is a stand-in for the paper's: its source is a CPU-profile preset only
    (small stand-ins by definition), or its note says "stand-in"."""
    cpu_only = figure.source in profile_presets(paper, "cpu") and figure.source not in profile_presets(paper, "cuda")
    return cpu_only or "stand-in" in figure.note.lower()


def stats_dict(stats: Stats | None) -> dict | None:
    return None if stats is None else {**asdict(stats), "per_seed": list(stats.per_seed)}


def figure_row(paper: Paper, figure: Figure, values: Mapping[str, Values]) -> dict:
    """One Figure: the paper's number, ours (in the figure's unit; '%' shows our fraction x100) and the verdict."""
    ours = measured(values, figure.source, figure.label, figure.which, figure.metric, 100.0 if figure.unit == "%" else 1.0)
    return {
        **asdict(figure), "ours": stats_dict(ours),
        "verdict": figure_verdict(figure.paper, ours, figure.unit, comparable=not stand_in(paper, figure)),
    }


def comparison_row(comparison: Comparison, values: Mapping[str, Values]) -> dict:
    """One Comparison: both sides' stats, the difference in the claimed direction ± its standard error, the verdict."""
    scale = display_scale(comparison.metric)
    better = measured(values, comparison.source, comparison.better, comparison.which, comparison.metric, scale)
    worse = measured(values, comparison.source, comparison.worse, comparison.which, comparison.metric, scale)
    row = {**asdict(comparison), "better_stats": stats_dict(better), "worse_stats": stats_dict(worse), "d": None, "se": None}
    if better is None or worse is None:
        return {**row, "verdict": "not measured"}
    names = (comparison.better, comparison.worse)
    diff, verdict = comparison_verdict(better, worse, comparison.metric, comparison.higher_is_better, comparison.tie, names)
    return {**row, "d": diff.d, "se": diff.se, "verdict": verdict}


def paper_rows(paper: Paper, values: Mapping[str, Values]) -> dict[str, list[dict]]:
    """Every Figure and Comparison row of ``paper`` from ``{source: values}``."""
    return {
        "figures": [figure_row(paper, f, values) for f in paper.figures],
        "comparisons": [comparison_row(c, values) for c in paper.comparisons],
    }
