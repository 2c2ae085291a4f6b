"""Which trackers a command opens, and where: :class:`TrackingSpec`, built from ``--track`` and an experiment
file's ``[tracking]`` table, opens one :class:`~fedsample.tracking.base.TrackerGroup` per run.

Layout of a command's store folder (``OUT/tracking`` by default): ``jsonl/EXPERIMENT/RUN.jsonl``,
``tensorboard/EXPERIMENT/RUN/`` (event files), ``mlflow/`` (``mlflow.db`` and ``artifacts/``), ``wandb/``
(offline runs), where EXPERIMENT/RUN is the run's path given by the caller. Runs are grouped by experiment:
MLflow's experiment, W&B's group (and project, unless one is set), a folder in TensorBoard and jsonl.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Mapping

from fedsample.tracking.base import EXTRAS, Tracker, TrackerGroup, require

if TYPE_CHECKING:
    from fedsample.tracking.mlflow import MlflowTracker

__all__ = ["BACKENDS", "TrackingSpec", "add_track_argument", "parse_backends"]

BACKENDS = tuple(EXTRAS)
"""The tracker backends by name (``--track``, ``[tracking]``)."""


def parse_backends(text: str) -> tuple[str, ...]:
    """``"tensorboard,mlflow"`` -> the backends, checked (``"none"``: no tracking); one ValueError line naming
    ``--track`` otherwise."""
    names = tuple(name.strip().lower() for name in text.split(",") if name.strip())
    if names == ("none",):
        return ()
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise ValueError(f"--track {text!r}: expected a comma list of {', '.join(BACKENDS)} (or none)")
    if len(set(names)) != len(names):
        raise ValueError(f"--track {text!r}: a backend is named twice")
    return names


def add_track_argument(parser: argparse.ArgumentParser) -> None:
    """``--track BACKENDS`` of ``fedsample run``, ``diagnose`` and ``reproduce``."""
    parser.add_argument("--track", default=None, metavar="BACKENDS",
                        help="log to these trackers: a comma list of jsonl, tensorboard, mlflow, wandb (none: off), stored "
                             "in OUT/tracking; default: the experiment's [tracking] table, else off (docs/tracking.md)")


@dataclass(frozen=True)
class TrackingSpec:
    """The trackers every run of a command opens (picklable: it travels to ``--jobs`` processes). ``folder``
    holds the local stores; ``mlflow_uri`` replaces the local MLflow store, ``wandb_project`` the W&B
    project (default: the experiment's name), ``wandb_mode`` is offline unless set, ``wandb_entity`` is for
    online runs."""

    backends: tuple[str, ...]
    folder: Path
    mlflow_uri: str | None = None
    wandb_project: str | None = None
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    wandb_entity: str | None = None

    def check(self) -> None:
        """Every backend's library is installed (otherwise one :class:`~fedsample.tracking.base.MissingExtra` line)."""
        for backend in self.backends:
            require(backend)

    def trackers(self, experiment: str, run: str, path: str) -> list[Tracker]:
        """One tracker per backend for run ``run`` of ``experiment``; ``path``: the run's relative path in
        the jsonl and TensorBoard folders (``EXPERIMENT/RUN``, safe characters only)."""
        from fedsample.tracking import jsonl

        made: list[Tracker] = []
        for backend in self.backends:
            if backend == "jsonl":
                made.append(jsonl.JsonlTracker(self.folder / "jsonl" / f"{path}.jsonl"))
            elif backend == "tensorboard":
                from fedsample.tracking.tensorboard import TensorBoardTracker

                made.append(TensorBoardTracker(self.folder / "tensorboard" / path))
            elif backend == "mlflow":
                made.append(self._mlflow(experiment, run))
            elif backend == "wandb":
                from fedsample.tracking.wandb import WandbTracker

                made.append(WandbTracker(self.folder, self.wandb_project or experiment, run, group=experiment,
                                         mode=self.wandb_mode, entity=self.wandb_entity))
        return made

    def _mlflow(self, experiment: str, run: str) -> MlflowTracker:
        from fedsample.tracking.mlflow import MlflowTracker

        folder = None if self.mlflow_uri else self.folder / "mlflow"
        return MlflowTracker(experiment, run, folder=folder, tracking_uri=self.mlflow_uri)

    def open(self, experiment: str, run: str, path: str, config: Mapping[str, object] | None = None) -> TrackerGroup:
        """The run's trackers as one, ``config`` added to what ``start`` records (not yet started)."""
        return TrackerGroup(self.trackers(experiment, run, path), config={"experiment": experiment, "run": run, **(config or {})})

    def prepare(self, experiment: str) -> None:
        """Create the stores that parallel runs share (MLflow's database and experiment) before they start."""
        if "mlflow" in self.backends:
            self._mlflow(experiment, "").prepare()

    def log_files(self, experiment: str, run: str, path: str, files: list[Path], config: Mapping[str, object] | None = None) -> None:
        """A run that records files only (a command's tables and pictures: ``diagnose``, ``reproduce``, an
        experiment's summary)."""
        with self.open(experiment, run, path, config) as group:
            group.start({})
            for file in files:
                group.log_artifact(file)
