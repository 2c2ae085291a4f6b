"""The ``wandb`` tracker: a Weights & Biases run, offline by default (the ``wandb`` extra).

``mode="offline"`` (the default) writes the run under ``FOLDER/wandb/offline-run-*`` and never connects out;
``wandb sync FOLDER/wandb/offline-run-*`` uploads it later. Another mode (``"online"``, ``"disabled"``) is
used only when passed explicitly (``[tracking.wandb] mode`` in an experiment file); the ``WANDB_MODE``
environment variable is not read, so a global setting cannot make a run connect out. W&B's own usage
telemetry, which probes the W&B server even for an offline run, is switched off (``WANDB_ERROR_REPORTING=false``,
unless the user set that variable) before W&B is imported. The run is made quiet and light: no console
capture, no system metrics, no machine or git information, no code saving.

The config is the run's config (nested); metrics are logged at the round as the step; an artifact is copied
into the run's files folder (``run.dir``) and saved with the run; ``close(failed=True)`` finishes with exit
code 1. A resumed run (``resumed_at`` > 0) is a new run in the same group, named "... (resumed at round r)",
with ``resumed_at`` in its config (W&B steps must grow, and an offline run cannot be reopened).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Literal

from fedsample.tracking.base import Tracker, require

__all__ = ["WandbTracker"]

MODES = ("offline", "online", "disabled")


def settings() -> Any:
    """Quiet, light settings: nothing on the console, no system metrics, machine or git information, no code."""
    import wandb

    return wandb.Settings(
        silent=True, console="off", disable_git=True, save_code=False, disable_code=True, disable_job_creation=True,
        x_disable_stats=True, x_disable_machine_info=True,
    )


class WandbTracker(Tracker):
    """Run ``run_name`` of ``project`` (in ``group``), written under ``folder``; ``mode`` offline by default,
    ``entity`` only for an online run."""

    backend = "wandb"

    def __init__(
        self, folder: str | Path, project: str, run_name: str, group: str | None = None,
        mode: Literal["offline", "online", "disabled"] = "offline", entity: str | None = None,
    ) -> None:
        require("wandb")
        if mode not in MODES:
            raise ValueError(f"wandb mode must be one of {', '.join(MODES)}, got {mode!r}")
        super().__init__()
        self.folder, self.project, self.run_name, self.group = Path(folder), project, run_name, group
        self.mode, self.entity = mode, entity
        self.run: Any = None

    def _open(self, config: dict[str, object], resumed_at: int) -> None:
        if self.mode != "online":  # W&B's own usage telemetry probes its server even for an offline run
            os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        import wandb

        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"{self.run_name} (resumed at round {resumed_at})" if resumed_at else self.run_name
        self.run = wandb.init(
            dir=str(self.folder), project=self.project, entity=self.entity, group=self.group, name=name,
            config={**config, **({"resumed_at": resumed_at} if resumed_at else {})}, mode=self.mode,
            reinit="create_new", settings=settings(),
        )

    def _write(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def _artifact(self, path: Path) -> None:
        copy = Path(self.run.dir) / path.name  # a copy in the run's files folder (not a link to a file that may move)
        shutil.copy2(path, copy)
        self.run.save(str(copy), base_path=self.run.dir, policy="now")  # recorded in the run: wandb sync uploads it

    def _close(self, failed: bool) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)
