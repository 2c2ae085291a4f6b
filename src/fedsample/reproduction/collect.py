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
from typing import Mapping

from fedsample.experiments.stats import best_round
from fedsample.runtime.records import JSON, JSONObject, as_list, as_object, as_optional_number

__all__ = ["Values", "experiment_values", "lookup", "read_experiment", "study_values"]

Values = dict[str, dict[str, dict[str, list[float | None]]]]
"""Per-seed values: strategy label -> metric -> ``final`` or ``best`` -> one value per seed (None: stopped)."""


def per_seed(stats: JSON) -> list[float | None]:
    """One value per seed (None for a seed that stopped) from a metric's summary, either shape."""
    return seed_values(as_object(stats, "metric summary").get("per_seed") or [])


def seed_values(values: JSON) -> list[float | None]:
    """A JSON list of one number (or null: a seed that stopped) per seed."""
    return [as_optional_number(v, "per_seed") for v in as_list(values, "per_seed")]


def strategy_values(result: JSONObject) -> dict[str, dict[str, list[float | None]]]:
    """One strategy's per-seed final and best (oracle) values of every metric it reports, and its realised samples per
    round (``budget``) where results.json has them."""
    final = {metric: per_seed(stats) for metric, stats in as_object(result.get("final", {}), "final").items()}
    if "best" in result:
        best = {metric: per_seed(stats) for metric, stats in as_object(result["best"], "best").items()}
    else:
        histories = [[as_object(r, "round record") for r in as_list(h, "history")] for h in as_list(result.get("history", []), "history")]
        best = {metric: [best_round(h, metric) for h in histories] for metric in final}
    return with_budget({"final": final, "best": best}, result)


def with_budget(values: dict[str, dict[str, list[float | None]]], result: JSONObject) -> dict[str, dict[str, list[float | None]]]:
    """``values`` with each seed's realised samples per round (``budget``: :func:`seed_budgets`) where the arm's
    result (an experiment's results.json strategy, a study's label) carries its :func:`fedsample.budget.arm_budget`,
    for the budget rule."""
    if result.get("budget"):
        values["budget"] = seed_budgets(as_list(as_object(result["budget"], "budget").get("per_seed", []), "budget per_seed"))
    return values


def seed_budgets(per_seed: list[JSON]) -> dict[str, list[float | None]]:
    """Each seed's realised mean by where it comes from: ``samples`` the figures released to the server, ``measured``
    those the simulation measured of sealed rounds (:func:`fedsample.budget.budget_summary`'s ``source``; a summary
    without one predates it and is released), ``not_measured`` a seed whose sealed rounds were not measured."""
    seeds = [None if seed is None else as_object(seed, "budget per_seed") for seed in per_seed]

    def of(source: str) -> list[float | None]:
        return [as_optional_number(seed["mean"], "mean") if seed is not None and seed.get("source", "released") == source else None
                for seed in seeds]

    return {"samples": of("released"), "measured": of("measured"),
            "not_measured": [1.0 if seed is not None and seed["mean"] is None else None for seed in seeds]}


def experiment_values(document: JSONObject) -> Values:
    """Every strategy's values from a results.json document."""
    strategies = as_object(document.get("strategies", {}), "strategies")
    return {label: strategy_values(as_object(result, label)) for label, result in strategies.items()}


def read_experiment(folder: Path) -> Values:
    """The values in ``folder/results.json``."""
    return experiment_values(as_object(json.loads((folder / "results.json").read_text()), "results.json"))


def study_values(measured: JSONObject) -> Values:
    """A study's ``{label: {metric: [per seed]}}``: one measurement, used as both "final" and "best"; a label's
    ``budget`` (:func:`fedsample.budget.arm_budget`) is read as an experiment's is (:func:`with_budget`)."""
    out: Values = {}
    for label, metrics in measured.items():
        metrics = as_object(metrics, label)
        values = {metric: [None if v is None else float(v) for v in seed_values(seq)]
                  for metric, seq in metrics.items() if metric != "budget"}
        out[str(label)] = with_budget({"final": values, "best": {m: list(v) for m, v in values.items()}}, metrics)
    return out


def lookup(values: Mapping[str, Values], source: str, label: str, which: str, metric: str) -> list[float | None] | None:
    """The per-seed values of ``label``'s ``metric`` in ``source`` (None when that was not measured)."""
    return values.get(source, {}).get(label, {}).get(which, {}).get(metric)
