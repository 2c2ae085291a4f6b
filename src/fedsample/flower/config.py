"""The settings a fedsample Flower app reads from its run config (``[tool.flwr.app.config]``) and node config.

Run-config keys (kebab-case, as Flower writes them): ``dataset``, ``partition``, ``model`` and ``recipe``
name fedsample's parts, each with a JSON object of arguments in ``<name>-args``; ``num-clients``,
``num-server-rounds``, ``seed`` (every draw derives from it), ``data-seed`` (the partition),
``round-timeout`` and ``connect-timeout`` (seconds), ``eval-every``, ``out`` (the folder for the server's
``history.json`` and ``params.pt``: an absolute path, ``~`` for the home of the user running the ServerApp,
``{run_id}`` for the Flower run's id; default ``~/fedsample-runs/flower/{run_id}``; empty: no files), and
SecAgg+'s settings for a strategy that declares ``secure_sum`` (``secagg-num-shares``,
``secagg-reconstruction-threshold``, ``secagg-clipping-range``, ``secagg-quantization-range``,
``secagg-count-range``:
:class:`fedsample.flower.secagg.SecAggPlus`). Node-config keys: ``partition-id`` (the client id, and its
partition of the dataset) or ``data-path`` (an ``.npz`` with ``x``, ``y``) with ``client-id``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, TypeAlias

from flwr.app import UserConfigValue

from fedsample import checks
from fedsample.runtime.records import JSONObject

__all__ = ["AppConfig", "DEFAULT_OUT", "RunConfig"]

DEFAULT_OUT = "~/fedsample-runs/flower/{run_id}"
"""Where a run writes its records when the run config names no ``out`` (absolute, one folder per run)."""
#: A run config as the app reads it: Flower's (its values bool, float, int or str) with the overrides a
#: ``client_app(settings)`` or ``server_app(settings)`` adds, whose ``*-args`` may be JSON objects already parsed.
RunConfig: TypeAlias = Mapping[str, UserConfigValue | JSONObject]


@dataclass(frozen=True)
class AppConfig:
    """The settings of the Flower app (``[tool.flwr.app.config]`` and the run config): data, partition, model,
    recipe and rounds, read by the ServerApp and every ClientApp."""
    dataset: str = "digits"
    dataset_args: JSONObject = field(default_factory=dict)
    partition: str = "lognormal"
    partition_args: JSONObject = field(default_factory=dict)
    model: str = "logreg"
    model_args: JSONObject = field(default_factory=dict)
    recipe: str = "fedsampling"
    recipe_args: JSONObject = field(default_factory=dict)
    num_clients: int = 10
    num_server_rounds: int = 2
    seed: int = 0
    data_seed: int = 0
    round_timeout: float = 60.0
    connect_timeout: float = 60.0
    eval_every: int = 1
    out: str = DEFAULT_OUT
    secagg_num_shares: float = 1.0
    secagg_reconstruction_threshold: float = 0.5
    secagg_clipping_range: float = 1024.0
    secagg_quantization_range: int = 2**22
    secagg_count_range: float = 2.0**16

    @classmethod
    def from_run_config(cls, run_config: RunConfig) -> "AppConfig":
        """Read the known keys (JSON for ``*-args``); unknown keys are an error naming them."""
        known = {f.name.replace("_", "-"): f for f in fields(cls)}
        unknown = sorted(set(run_config) - set(known))
        if unknown:
            raise ValueError(f"unknown fedsample run-config keys {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {}  # Any: the values go on with ** to fields of several types (mypy holds the one value type against each)
        for key, value in run_config.items():
            name = known[key].name
            values[name] = _json_object(key, value) if name.endswith("_args") else value
        if "out" in values:
            out_folder(values["out"], run_id=0)  # a relative folder is refused here, on the node that reads it
        return cls(**values)

    def out_folder(self, run_id: int) -> Path | None:
        """Where the server writes (:func:`out_folder`)."""
        return out_folder(self.out, run_id)

    def json(self) -> str:
        """A stable string of the settings (a cache key for node data)."""
        return json.dumps(checks.declared_values(self), sort_keys=True)


def out_folder(out: str, run_id: int) -> Path | None:
    """``out`` as an absolute folder (``~`` expanded, ``{run_id}`` the run's id), None for an empty ``out``. A
    relative folder is refused: the ServerApp runs in the app's folder under the SuperLink's Flower home, where a
    relative path would land unseen."""
    if not isinstance(out, str):
        raise ValueError(f"run-config 'out' must be a folder path, got {out!r}")
    if not out:
        return None
    path = Path(os.path.expanduser(out.replace("{run_id}", str(run_id))))
    if not path.is_absolute():
        raise ValueError(f"run-config 'out' must be an absolute folder (or start with ~): the ServerApp runs in the "
                         f"SuperLink's app folder, where {out!r} would land unseen; got {out!r}")
    return path


def _json_object(key: str, value: UserConfigValue | JSONObject) -> JSONObject:
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ValueError(f"run-config {key!r} must be a JSON object, got {value!r}")
    return parsed
