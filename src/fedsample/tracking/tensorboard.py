"""The ``tensorboard`` tracker: TensorBoard event files in one folder per run, through PyTorch's
``torch.utils.tensorboard.SummaryWriter`` (the ``tensorboard`` extra: the ``tensorboard`` package, not
TensorFlow). View them with ``tensorboard --logdir FOLDER`` (docs/tracking.md).

Metrics are scalars at the round as the global step; the config is a text summary (``config``, JSON); a
picture artifact (.png) is an image, a text artifact (.md, .txt, .json, .csv up to 64 KiB) a text summary,
and a larger or other file a text summary naming its path. A resumed run (``resumed_at`` = r) purges the
events of steps after r (SummaryWriter's ``purge_step``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedsample.tracking.base import Tracker, require

__all__ = ["TensorBoardTracker"]

TEXT_SUFFIXES = (".md", ".txt", ".json", ".csv")
TEXT_LIMIT = 64 * 1024


class TensorBoardTracker(Tracker):
    """Event files in ``log_dir`` (created); ``flush_secs``: how often pending events reach the file (they
    always do on close)."""

    backend = "tensorboard"

    def __init__(self, log_dir: str | Path, flush_secs: int = 5) -> None:
        require("tensorboard")
        super().__init__()
        self.log_dir = Path(log_dir)
        self.flush_secs = flush_secs
        self._writer: Any = None

    def _open(self, config: dict[str, object], resumed_at: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(self.log_dir), purge_step=resumed_at + 1 if resumed_at else None, flush_secs=self.flush_secs)
        self._writer.add_text("config", "```json\n" + json.dumps(config, indent=1, default=str) + "\n```", global_step=resumed_at)

    def _write(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)

    def _artifact(self, path: Path) -> None:
        tag = f"artifacts/{path.name}"
        if path.suffix.lower() == ".png":
            from matplotlib.image import imread

            self._writer.add_image(tag, imread(str(path)), dataformats="HWC")
        elif path.suffix.lower() in TEXT_SUFFIXES and path.stat().st_size <= TEXT_LIMIT:
            text = path.read_text(encoding="utf-8", errors="replace")
            self._writer.add_text(tag, text if path.suffix.lower() == ".md" else f"```\n{text}\n```")
        else:
            self._writer.add_text(tag, f"`{path.resolve()}` ({path.stat().st_size} bytes)")
        self._writer.flush()

    def _close(self, failed: bool) -> None:
        if self._writer is None:
            return
        try:
            self._writer.add_text("status", "failed" if failed else "finished")
        finally:
            self._writer.close()
            self._writer = None
