"""Experiment tracking: each run's config, per-round metrics and files sent to the trackers researchers use
(``jsonl``, TensorBoard, MLflow, Weights & Biases; docs/tracking.md). The interface is
:class:`~fedsample.tracking.base.Tracker`; each backend is one module that imports its library only when a run
starts, behind its own extra (``pip install 'fedsample[tensorboard]'``, ``[mlflow]``, ``[wandb]``).

Names load on first use."""

from __future__ import annotations

from fedsample.runtime import lazy

_HOME = {
    "Tracker": "base", "TrackerGroup": "base", "MissingExtra": "base", "numeric_metrics": "base", "require": "base",
    "JsonlTracker": "jsonl", "read_jsonl": "jsonl", "TensorBoardTracker": "tensorboard", "MlflowTracker": "mlflow",
    "WandbTracker": "wandb", "TrackingSpec": "setup", "BACKENDS": "setup", "parse_backends": "setup",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = lazy.submodules(__name__, __path__, _HOME)
