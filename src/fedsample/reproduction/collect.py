"""Our measurements as per-seed values: ``{label: {which: {metric: [value per seed]}}}`` (``which`` is
"final", the last round, or "best", the oracle: each seed's best round on the test set, which no verdict
uses), read from an experiment's results.json or a study's output. Each list holds one value per seed of
the source's seed list, in that order (None: a seed that stopped), so two labels of one source pair by seed.

results.json has two shapes: ``{"mean", "sd", "n", "per_seed"}`` per final and best metric (written now) and
``{"mean", "std", "per_seed"}`` per final metric, with no "best" (folders written by earlier versions). Only ``per_seed`` is read, so both
work; a missing "best" is computed from each seed's round history (max accuracy/macro-F1, min loss).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from fedsample.experiments.stats import best_round

__all__ = ["Values", "experiment_values", "lookup", "read_experiment", "study_values"]

Values = dict[str, dict[str, dict[str, list[float | None]]]]
"""Per-seed values: strategy label -> metric -> ``final`` or ``best`` -> one value per seed (None: stopped)."""


def per_seed(stats: Mapping[str, Any]) -> list[float | None]:
    """One value per seed (None for a seed that stopped) from a metric's summary, either shape."""
    return list(stats.get("per_seed") or [])


def strategy_values(result: Mapping[str, Any]) -> dict[str, dict[str, list[float | None]]]:
    """One strategy's per-seed final and best (oracle) values of every metric it reports, and its realised samples per
    round (``budget``) where results.json has them."""
    final = {metric: per_seed(stats) for metric, stats in result.get("final", {}).items()}
    if "best" in result:
        best = {metric: per_seed(stats) for metric, stats in result["best"].items()}
    else:
        histories = result.get("history", [])
        best = {metric: [best_round(list(h), metric) for h in histories] for metric in final}
    return with_budget({"final": final, "best": best}, result)


def with_budget(values: dict[str, dict[str, list[float | None]]], result: Mapping[str, Any]) -> dict[str, dict[str, list[float | None]]]:
    """``values`` with each seed's realised samples per round (``budget``: :func:`seed_budgets`) where the arm's
    result (an experiment's results.json strategy, a study's label) carries its :func:`fedsample.budget.arm_budget`,
    for the budget rule."""
    if result.get("budget"):
        values["budget"] = seed_budgets(result["budget"].get("per_seed", []))
    return values


def seed_budgets(seeds: Sequence[Mapping[str, Any] | None]) -> dict[str, list[float | None]]:
    """Each seed's realised mean by where it comes from: ``samples`` the figures released to the server, ``measured``
    those the simulation measured of sealed rounds (:func:`fedsample.budget.budget_summary`'s ``source``; a summary
    without one predates it and is released), ``not_measured`` a seed whose sealed rounds were not measured."""
    def of(source: str) -> list[float | None]:
        return [seed["mean"] if seed is not None and seed.get("source", "released") == source else None for seed in seeds]

    return {"samples": of("released"), "measured": of("measured"),
            "not_measured": [1.0 if seed is not None and seed["mean"] is None else None for seed in seeds]}


def experiment_values(document: Mapping[str, Any]) -> Values:
    """Every strategy's values from a results.json document."""
    return {label: strategy_values(result) for label, result in document.get("strategies", {}).items()}


def read_experiment(folder: Path) -> Values:
    """The values in ``folder/results.json``."""
    return experiment_values(json.loads((folder / "results.json").read_text()))


def study_values(measured: Mapping[str, Mapping[str, Any]]) -> Values:
    """A study's ``{label: {metric: [per seed]}}``: one measurement, used as both "final" and "best"; a label's
    ``budget`` (:func:`fedsample.budget.arm_budget`) is read as an experiment's is (:func:`with_budget`)."""
    out: Values = {}
    for label, metrics in measured.items():
        values = {metric: [None if v is None else float(v) for v in seq] for metric, seq in metrics.items() if metric != "budget"}
        out[str(label)] = with_budget({"final": values, "best": {m: list(v) for m, v in values.items()}}, metrics)
    return out


def lookup(values: Mapping[str, Values], source: str, label: str, which: str, metric: str) -> list[float | None] | None:
    """The per-seed values of ``label``'s ``metric`` in ``source`` (None when that was not measured)."""
    return values.get(source, {}).get(label, {}).get(which, {}).get(metric)
