"""The ``mlflow`` tracker: an MLflow run in an experiment, through ``MlflowClient`` (the ``mlflow`` extra).

The default store is local and needs no server: an SQLite database ``FOLDER/mlflow.db`` with the artifacts in
``FOLDER/artifacts``. (MLflow's plain-folder store, ``./mlruns``, is deprecated: MLflow 3 refuses it unless
``MLFLOW_ALLOW_FILE_STORE=true``; pass ``tracking_uri="file:..."`` with that variable set to use it.) Any
``tracking_uri`` MLflow accepts may be given instead (another database, or a server the user runs). MLflow's
anonymous usage telemetry is switched off (``MLFLOW_DISABLE_TELEMETRY``, unless the user set it) before
MLflow is imported. View the runs with ``mlflow ui --backend-store-uri sqlite:///FOLDER/mlflow.db``.

The config becomes the run's parameters (flattened with dots, values as text, cut to MLflow's length limit)
and ``config.json``; metrics are logged per step in one batch; artifacts are copied into the run's
artifacts. A resumed run (``resumed_at`` > 0) continues the latest run of the same name in the experiment
(its rounds after the checkpoint are logged again, with the same values: a resumed simulation repeats them
exactly). ``close(failed=True)`` marks the run FAILED.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from fedsample.tracking.base import Tracker, flat_config, require

__all__ = ["MlflowTracker"]

#: MLflow's limits: parameters per batch, characters of a parameter's value.
PARAMS_PER_BATCH = 100
PARAM_VALUE_LIMIT = 6000
RUN_TAG = "fedsample.run"


def default_uri(folder: Path) -> str:
    """The local SQLite store in ``folder``."""
    return f"sqlite:///{Path(folder).resolve() / 'mlflow.db'}"


def mlflow_key(key: str) -> str:
    """A parameter or metric name MLflow accepts: letters, digits, ``_-. /``; any other character becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", key)[:250]


def client(tracking_uri: str) -> Any:
    """An ``MlflowClient`` on ``tracking_uri``, with telemetry off and the store's set-up messages quiet."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    for name in ("mlflow.store.db.utils", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return MlflowClient(tracking_uri=tracking_uri)


def experiment_id(mlflow_client: Any, name: str, artifact_location: str | None) -> str:
    """The id of experiment ``name``, created (artifacts at ``artifact_location``) when it does not exist; a
    concurrent creation by another process is tolerated."""
    from mlflow.exceptions import MlflowException

    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    try:
        return str(mlflow_client.create_experiment(name, artifact_location=artifact_location))
    except MlflowException:
        found = mlflow_client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


class MlflowTracker(Tracker):
    """Run ``run_name`` in experiment ``experiment`` of the store in ``folder`` (default: the local SQLite store
    there) or at ``tracking_uri``; ``tags`` are added to the run."""

    backend = "mlflow"

    def __init__(
        self, experiment: str, run_name: str, folder: str | Path | None = None, tracking_uri: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        require("mlflow")
        if folder is None and tracking_uri is None:
            raise ValueError("MlflowTracker needs a folder for its local store or a tracking_uri")
        super().__init__()
        self.experiment, self.run_name = experiment, run_name
        self.folder = None if folder is None else Path(folder)
        if tracking_uri:
            self.tracking_uri = tracking_uri
        elif self.folder is not None:
            self.tracking_uri = default_uri(self.folder)
        else:
            raise ValueError("MlflowTracker needs a folder for its local store or a tracking_uri")
        self.tags = dict(tags or {})
        self._client: Any = None
        self.run_id: str | None = None

    def prepare(self) -> str:
        """Create the store and the experiment (before parallel runs log to it); returns the experiment id."""
        if self.folder is not None and self.tracking_uri == default_uri(self.folder):
            self.folder.mkdir(parents=True, exist_ok=True)
        self._client = self._client or client(self.tracking_uri)
        artifacts = (self.folder.resolve() / "artifacts").as_uri() if self.folder is not None else None
        return experiment_id(self._client, self.experiment, artifacts)

    def _open(self, config: dict[str, object], resumed_at: int) -> None:
        experiment = self.prepare()
        run = self._latest_run(experiment) if resumed_at else None
        if run is not None:
            self.run_id = run.info.run_id
            self._client.update_run(self.run_id, status="RUNNING")
            self._client.set_tag(self.run_id, "fedsample.resumed_at", str(resumed_at))
            return
        run = self._client.create_run(experiment, run_name=self.run_name, tags={RUN_TAG: self.run_name, **self.tags})
        self.run_id = run.info.run_id
        self._log_params(config)
        self._client.log_dict(self.run_id, config, "config.json")

    def _latest_run(self, experiment: str) -> Any:
        name = self.run_name.replace("\\", "\\\\").replace("'", "\\'")
        runs = self._client.search_runs(
            [experiment], filter_string=f"tags.`{RUN_TAG}` = '{name}'", order_by=["attributes.start_time DESC"], max_results=1
        )
        return runs[0] if runs else None

    def _log_params(self, config: dict[str, object]) -> None:
        from mlflow.entities import Param

        params = [Param(mlflow_key(key), str(value)[:PARAM_VALUE_LIMIT]) for key, value in flat_config(config).items()]
        for start in range(0, len(params), PARAMS_PER_BATCH):
            self._client.log_batch(self.run_id, params=params[start:start + PARAMS_PER_BATCH])

    def _write(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[Metric(mlflow_key(name), value, now, step) for name, value in metrics.items()])

    def _artifact(self, path: Path) -> None:
        self._client.log_artifact(self.run_id, str(path))

    def _close(self, failed: bool) -> None:
        if self.run_id is not None:
            self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")
