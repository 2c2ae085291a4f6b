"""The settings a fedsample Flower app reads from its run config (``[tool.flwr.app.config]``) and node config.

Run-config keys (kebab-case, as Flower writes them): ``dataset``, ``partition``, ``model`` and ``recipe``
name fedsample's parts, each with a JSON object of arguments in ``<name>-args``; ``num-clients``,
``num-server-rounds``, ``seed`` (every draw derives from it), ``data-seed`` (the partition),
``round-timeout`` and ``connect-timeout`` (seconds), ``eval-every``, ``out`` (a folder for the server's
``history.json`` and ``params.pt``; empty: none). Node-config keys: ``partition-id`` (the client id, and its
partition of the dataset) or ``data-path`` (an ``.npz`` with ``x``, ``y``) with ``client-id``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

__all__ = ["AppConfig"]


@dataclass(frozen=True)
class AppConfig:
    """The settings of the Flower app (``[tool.flwr.app.config]`` and the run config): data, partition, model,
    recipe and rounds, read by the ServerApp and every ClientApp."""
    dataset: str = "digits"
    dataset_args: dict = field(default_factory=dict)
    partition: str = "lognormal"
    partition_args: dict = field(default_factory=dict)
    model: str = "logreg"
    model_args: dict = field(default_factory=dict)
    recipe: str = "fedsampling"
    recipe_args: dict = field(default_factory=dict)
    num_clients: int = 10
    num_server_rounds: int = 2
    seed: int = 0
    data_seed: int = 0
    round_timeout: float = 60.0
    connect_timeout: float = 60.0
    eval_every: int = 1
    out: str = ""

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> "AppConfig":
        """Read the known keys (JSON for ``*-args``); unknown keys are an error naming them."""
        known = {f.name.replace("_", "-"): f for f in fields(cls)}
        unknown = sorted(set(run_config) - set(known))
        if unknown:
            raise ValueError(f"unknown fedsample run-config keys {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {}
        for key, value in run_config.items():
            name = known[key].name
            values[name] = _json_object(key, value) if name.endswith("_args") else value
        return cls(**values)

    def json(self) -> str:
        """A stable string of the settings (a cache key for node data)."""
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, sort_keys=True)


def _json_object(key: str, value: Any) -> dict:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value) if value else {}
    except (TypeError, json.JSONDecodeError):
        raise ValueError(f"run-config {key!r} must be a JSON object, got {value!r}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"run-config {key!r} must be a JSON object, got {value!r}")
    return parsed
