"""Grids: a strategy's ``[strategies.grid]`` (one parameter, a list of values) expands into one run per
value; the value is selected by the final-round validation accuracy, mean over seeds (mean validation loss,
lowest, for regression)."""

from __future__ import annotations

from typing import Mapping, Sequence

from fedsample.experiments.config import StrategyConfig
from fedsample.runtime.records import JSONObject

__all__ = ["run_label", "select", "variants"]

SELECTED_BY = "final-round validation accuracy, mean over seeds (highest)"
SELECTED_BY_LOSS = "final-round validation loss, mean over seeds (lowest)"


def value_key(value: object) -> str:
    """The value as results.json names it (e.g. "0.05")."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def variants(strategy: StrategyConfig) -> dict[str, dict[str, object]]:
    """The recipe parameters of each run of a strategy, by value key ("" for a strategy without a grid)."""
    if not strategy.grid:
        return {"": strategy.params}
    ((name, values),) = strategy.grid.items()
    return {value_key(v): {**strategy.params, name: v} for v in values}


def run_label(label: str, strategy: StrategyConfig, key: str) -> str:
    """The name of one run of a grid (checkpoints, progress): ``label [lr=0.05]``; the label alone without a grid."""
    if not strategy.grid:
        return label
    return f"{label} [{next(iter(strategy.grid))}={key}]"


def selection_score(validation: Sequence[Mapping[str, float] | None]) -> tuple[float | None, str]:
    """The score of one value over its seeds' final validation metrics (None if a seed stopped), and what it is."""
    runs = [v for v in validation if v is not None]
    if not validation or len(runs) < len(validation):
        return None, SELECTED_BY
    if all("accuracy" in v for v in runs):
        return sum(v["accuracy"] for v in runs) / len(runs), SELECTED_BY
    return -sum(v["loss"] for v in runs) / len(runs), SELECTED_BY_LOSS


def select(strategy: StrategyConfig, validation: Mapping[str, Sequence[Mapping[str, float] | None]]) -> tuple[str, JSONObject]:
    """The selected value's key and results.json's ``selected`` entry: the first value with the best score
    (values whose runs stopped are never selected unless all stopped; then the first value, score null)."""
    scores = {key: selection_score(runs) for key, runs in validation.items()}
    ranked = {key: score for key, (score, _) in scores.items() if score is not None}
    chosen = max(ranked, key=ranked.__getitem__) if ranked else next(iter(scores))
    by = scores[chosen][1]
    grid: JSONObject = {key: (None if score is None else (-score if by == SELECTED_BY_LOSS else score)) for key, (score, _) in scores.items()}
    assert strategy.grid, "select is asked of a strategy with a grid"
    name, values = next(iter(strategy.grid.items()))
    value = next(v for v in values if value_key(v) == chosen)
    return chosen, {"param": name, "value": value, "by": by, "grid": grid}
