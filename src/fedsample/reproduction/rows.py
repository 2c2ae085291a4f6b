"""The rows of a paper's tables: each Figure with our mean ± sd beside the paper's number, each Comparison
with its test (the difference, its confidence interval, p, the test and n, the minimal detectable
difference, the seeds for the pre-stated effect), the second look (:mod:`.multiplicity`: Holm's adjusted p
within the paper's table, the rank test where the per-seed values are bimodal) and the verdict read from it
(:mod:`.verdict`); plain dicts, for the markdown table and reproduction.json alike."""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Mapping, Sequence, TypeGuard

import numpy as np

from fedsample.budget import EQUAL_BUDGET_TOLERANCE, equal_budgets
from fedsample.reproduction.collect import Values, lookup
from fedsample.reproduction.multiplicity import bimodal, holm, holm_verdict, rank_verdict, second_look
from fedsample.reproduction.registry import profile_presets
from fedsample.reproduction.spec import Comparison, Figure, Paper
from fedsample.reproduction.verdict import (
    ALPHA, CONFIDENCE, ONE_SIDED, ORACLE, POWER, Stats, comparison_test, display_scale, figure_verdict, stats_of,
)
from fedsample.runtime.records import JSONObject, as_list, as_number, as_object, as_optional_number, as_text

__all__ = [
    "comparison_row", "decisive_p", "figure_row", "paper_rows", "rank_check", "read_verdict", "seed_pairs", "tested_row",
    "with_holm",
]


def measured(values: Mapping[str, Values], source: str, label: str, which: str, metric: str, scale: float) -> Stats | None:
    """Our per-seed values of one cell as Stats in display units (None when not measured)."""
    found = lookup(values, source, label, which, metric)
    stats = stats_of(found) if found is not None else None
    return None if stats is None else stats.scaled(scale)


def seed_pairs(better: Sequence[float | None], worse: Sequence[float | None], scale: float) -> list[tuple[float, float]]:
    """``(better, worse)`` of every seed both sides finished, in display units; the lists of one source hold
    one value per seed of the same seed list (None: a seed that stopped)."""
    if len(better) != len(worse):
        raise ValueError(f"paired values: the two sides ran {len(better)} and {len(worse)} seeds")
    return [(float(b) * scale, float(w) * scale) for b, w in zip(better, worse) if finished(b) and finished(w)]


def finished(value: float | None) -> TypeGuard[float]:
    """Whether a seed's value exists (a seed that stopped is None; a diverged value is not finite)."""
    return value is not None and math.isfinite(float(value))


def stand_in(paper: Paper, figure: Figure) -> bool:
    """Whether the figure's setting is a stand-in for the paper's: its source is a CPU-profile preset only
    (small stand-ins by definition), or its note says "stand-in"."""
    cpu_only = figure.source in profile_presets(paper, "cpu") and figure.source not in profile_presets(paper, "cuda")
    return cpu_only or "stand-in" in figure.note.lower()


def stats_dict(stats: Stats | None) -> JSONObject | None:
    return None if stats is None else {**asdict(stats), "per_seed": list(stats.per_seed)}


def figure_row(paper: Paper, figure: Figure, values: Mapping[str, Values]) -> JSONObject:
    """One Figure: the paper's number, ours (in the figure's unit; '%' shows our fraction x100) and the
    verdict; the oracle (best round on the test set) is never compared."""
    ours = measured(values, figure.source, figure.label, figure.which, figure.metric, 100.0 if figure.unit == "%" else 1.0)
    oracle = figure.which == "best"
    comparable = not (oracle or stand_in(paper, figure))
    reason = ORACLE if oracle else "stand-in"
    return {**asdict(figure), "ours": stats_dict(ours), "verdict": figure_verdict(figure.paper, ours, figure.unit, comparable, reason)}


def tested_row(
    comparison: Comparison, better: Stats | None, worse: Stats | None, pairs: Sequence[tuple[float, float]] | None = None
) -> JSONObject:
    """A Comparison's row from both sides' Stats (display units) and, for a paired comparison, the per-seed
    pairs: the claim's fields, both sides, the test's numbers (see :class:`~.verdict.Tested`), the rank check
    (:func:`rank_check`), the t test's verdict (``t_verdict``) and the verdict read from them (:func:`read_verdict`,
    here with the row as a family of one: :func:`with_holm` re-reads it within the paper's table)."""
    row = {
        **asdict(comparison), "better_stats": stats_dict(better), "worse_stats": stats_dict(worse),
        "alpha": ALPHA, "ci_level": CONFIDENCE, "power": POWER, "d": None, "se": None, "df": None, "ci": None,
        "p": None, "p_differs": None, "test": None, "n": None, "mdd": None, "seeds_needed_measured": None,
        "bimodal": None, "rank_verdict": None,
    }
    if better is None or worse is None:
        return {**row, "t_verdict": "not measured", "verdict": "not measured"}
    names = (comparison.better, comparison.worse)
    tested = comparison_test(better, worse, comparison.higher_is_better, comparison.tie, comparison.margin, names, pairs,
                             comparison.effect)
    row.update(d=tested.d, p=tested.p, p_differs=tested.p_differs, mdd=tested.mdd, effect=tested.effect,
               seeds_needed_measured=tested.seeds_needed, t_verdict=tested.verdict)
    if tested.estimate is None:
        return {**row, "n": [better.n, worse.n], "verdict": tested.verdict}
    est = tested.estimate
    row.update(se=est.se, df=est.df, ci=None if tested.ci is None else list(tested.ci), test=est.test, n=list(est.n))
    if tested.p is not None:
        row["bimodal"], row["rank_verdict"] = rank_check(comparison, better, worse, pairs)
    return {**row, "verdict": read_verdict(row)}


def rank_check(
    comparison: Comparison, better: Stats, worse: Stats, pairs: Sequence[tuple[float, float]] | None
) -> tuple[bool | None, str | None]:
    """Whether the per-seed values are bimodal (Sarle: the per-seed differences of a paired comparison, either
    side's values of an unpaired one) and, where they are, the rank test's verdict at the one-sided level
    (:func:`~.multiplicity.rank_verdict`, in the claimed direction); ``(None, None)`` without per-seed values."""
    if pairs is not None:
        first, second = [b for b, _ in pairs], [w for _, w in pairs]
        spread: list[Sequence[float]] = [[b - w for b, w in pairs]]
    else:
        first, second = list(better.per_seed), list(worse.per_seed)
        spread = [first, second]
    if len(first) < 2 or len(second) < 2:
        return None, None
    if not any(bimodal(values) for values in spread):
        return False, None
    ahead, behind = (first, second) if comparison.higher_is_better else (second, first)
    return True, rank_verdict(ahead, behind, pairs is not None, ONE_SIDED, comparison.margin if comparison.tie else None)


def read_verdict(row: JSONObject) -> str:
    """The row's verdict: the t test's, read from the Holm-adjusted p where the row has one
    (:func:`~.multiplicity.holm_verdict`), then "inconclusive (t: ...; rank test: ...)" where the rank check
    disagrees (:func:`~.multiplicity.second_look`), and "not comparable" where the premise's test is reversed
    (read from its own adjusted p)."""
    t_verdict = as_text(row["t_verdict"], "t_verdict")
    if row.get("p") is None:
        return t_verdict
    rank = row.get("rank_verdict")
    verdict = second_look(holm_verdict(t_verdict, p_holm(row), ONE_SIDED), None if rank is None else as_text(rank, "rank_verdict"))
    premise = as_object(row.get("premise_test") or {}, "premise_test")
    if premise and holm_verdict(as_text(premise["verdict"], "verdict"), p_holm(premise), ONE_SIDED) == "reversed":
        low, high = (as_number(bound, "ci") for bound in as_list(premise["ci"], "ci"))
        adjusted = "" if premise.get("p_holm") is None else f", Holm-adjusted p = {p_holm(premise):.3g}"
        return (f"not comparable (premise fails: {row['premise']} trails {row['worse']} by {-as_number(premise['d'], 'd'):.1f}, "
                f"{CONFIDENCE:.0%} CI [{-high:.1f}, {-low:.1f}], p = {as_number(premise['p_reversed'], 'p_reversed'):.3g}{adjusted})")
    return verdict


def p_holm(row: JSONObject) -> float | None:
    """A row's (or a premise test's) Holm-adjusted p; None before :func:`with_holm`."""
    return as_optional_number(row.get("p_holm"), "p_holm")


def comparison_row(comparison: Comparison, values: Mapping[str, Values]) -> JSONObject:
    """One Comparison from the measured values: Welch's test, or the paired test over the seeds both sides
    finished where the comparison is ``paired``; with a ``premise``, the premise's test too, and "not
    comparable" where it is reversed (:func:`premise_row`)."""
    row = tested_row(comparison, *sides_of(comparison, comparison.better, comparison.worse, values))
    row["realised"] = realised_budgets(comparison, values)
    if not comparison.premise:
        return row
    row["premise_test"] = premise_row(comparison, values)
    row["verdict"] = read_verdict(row)
    return row


def realised_budgets(comparison: Comparison, values: Mapping[str, Values]) -> JSONObject | None:
    """Both sides' realised samples per round (mean over seeds), how each is known (``how``: "released" to the
    server, "measured" in simulation where the arm's rows are sealed, or "not measured") and whether they are equal
    budgets (:func:`fedsample.budget.equal_budgets`, within :data:`~fedsample.budget.EQUAL_BUDGET_TOLERANCE`, on the
    measured figure where none was released; False where a side has none); None where a side's runs predate the record."""
    better, worse = (side_budget(values, comparison.source, side) for side in (comparison.better, comparison.worse))
    if better is None or worse is None:
        return None
    means = {side: mean for side, mean in ((comparison.better, better[0]), (comparison.worse, worse[0])) if mean is not None}
    return {"better": better[0], "worse": worse[0], "tolerance": EQUAL_BUDGET_TOLERANCE, "equal": len(means) == 2 and equal_budgets(means),
            "how": {"better": better[1], "worse": worse[1]}}


def side_budget(values: Mapping[str, Values], source: str, side: str) -> tuple[float | None, str] | None:
    """One side's realised mean over its seeds and how it is known: the figures released to the server, else those
    measured in simulation (:func:`~fedsample.reproduction.collect.seed_budgets`); ``(None, "not measured")`` where
    its rounds were sealed and not measured; None where its runs predate the record."""
    for key, how in (("samples", "released"), ("measured", "measured")):
        seeds = [v for v in lookup(values, source, side, "budget", key) or [] if v is not None]
        if seeds:
            return float(np.mean(seeds)), how
    if any(v is not None for v in lookup(values, source, side, "budget", "not_measured") or []):
        return None, "not measured"
    return None


def sides_of(comparison: Comparison, first: str, second: str, values: Mapping[str, Values]) -> tuple[Stats | None, Stats | None, list[tuple[float, float]] | None]:
    """Both sides' Stats in display units and, for a paired comparison, their per-seed pairs."""
    scale = display_scale(comparison.metric)
    a = measured(values, comparison.source, first, comparison.which, comparison.metric, scale)
    b = measured(values, comparison.source, second, comparison.which, comparison.metric, scale)
    pairs = None
    if comparison.paired and a is not None and b is not None:
        one, other = (lookup(values, comparison.source, label, comparison.which, comparison.metric) for label in (first, second))
        if one is not None and other is not None:  # measured above: both sides have values
            pairs = seed_pairs(one, other, scale)
    return a, b, pairs


def premise_row(comparison: Comparison, values: Mapping[str, Values]) -> JSONObject:
    """The premise's test: the ordering "``premise`` beats ``worse``" in the same source, paired like the claim:
    ``{"label", "d", "ci", "p", "p_reversed", "verdict"}`` (p one-sided for the premise, p_reversed against it)."""
    premise = replace(comparison, claim=f"premise: {comparison.premise} beats {comparison.worse}", better=comparison.premise,
                      tie=False, margin=None, margin_reason="", premise="", effect=None)
    first, second, pairs = sides_of(premise, premise.better, premise.worse, values)
    row = tested_row(premise, first, second, pairs)
    p = as_optional_number(row["p"], "p")
    return {"label": comparison.premise, "d": row["d"], "ci": row["ci"], "p": p, "p_reversed": None if p is None else 1.0 - p,
            "verdict": row["verdict"]}


def decisive_p(row: JSONObject) -> float | None:
    """The p value a row's verdict is decided by: for a tie the smaller of TOST's ("holds") and that of
    "differs" (``p_differs``), else the smaller one-sided p (the claimed direction's, or the reversed one's,
    1 - p)."""
    p = as_optional_number(row.get("p"), "p")
    if p is None:
        return None
    if row.get("tie"):
        differs = as_optional_number(row.get("p_differs"), "p_differs")
        return p if differs is None else min(p, differs)
    return min(p, 1.0 - p)


def with_holm(comparisons: list[JSONObject]) -> list[JSONObject]:
    """The rows with ``p_holm``: Holm's adjustment of their decisive p values (and their premise tests'), the
    paper's table as one family (:mod:`.multiplicity`), and each verdict re-read from the adjusted p
    (:func:`read_verdict`)."""
    premises = [as_object(row.get("premise_test") or {}, "premise_test") for row in comparisons]
    family = [decisive_p(row) for row in comparisons] + [decisive_p({"p": t.get("p")}) for t in premises]
    adjusted = holm(family)
    for row, premise, p_row, p_premise in zip(comparisons, premises, adjusted, adjusted[len(comparisons):]):
        row["p_holm"] = p_row
        if premise:
            premise["p_holm"] = p_premise
        if "t_verdict" in row:
            row["verdict"] = read_verdict(row)
    return comparisons


def paper_rows(paper: Paper, values: Mapping[str, Values]) -> JSONObject:
    """Every Figure and Comparison row of ``paper`` from ``{source: values}``, the Comparisons with Holm's
    adjusted p (:func:`with_holm`)."""
    return {
        "figures": [figure_row(paper, f, values) for f in paper.figures],
        "comparisons": [*with_holm([comparison_row(c, values) for c in paper.comparisons])],
    }
