"""The ``jsonl`` tracker: one JSON object per line in one file per run, written as the run goes (no dependency).

Lines, in order: ``{"event": "start", "time", "config"}``; per step ``{"event": "metrics", "step", "time",
"metrics": {name: number or null}}`` (a non-finite number is null: strict JSON); ``{"event": "artifact",
"time", "path"}`` (the file's absolute path: the file is not copied); ``{"event": "end", "time", "status":
"finished" | "failed"}``. A resumed run (``resumed_at`` = r) drops the lines of steps after r and writes
``{"event": "resume", "time", "step": r}``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import IO

from fedsample.runtime.records import JSONObject, as_object
from fedsample.tracking.base import Tracker

__all__ = ["JsonlTracker", "read_jsonl"]


def read_jsonl(path: str | Path) -> list[JSONObject]:
    """Every line of a jsonl tracker file, as dicts (a line that is not a JSON object is refused, naming it)."""
    lines = enumerate(Path(path).read_text().splitlines(), 1)
    return [as_object(json.loads(line), f"{path} line {n}") for n, line in lines if line.strip()]


class JsonlTracker(Tracker):
    """Writes the run to ``path`` (created with its folder; appended to when it exists: one file may hold
    several attempts of a run, each opened by a ``start`` line)."""

    backend = "jsonl"

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._file: IO[str] | None = None

    def _open(self, config: dict[str, object], resumed_at: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resumed_at and self.path.exists():
            _drop_steps_after(self.path, resumed_at)
        self._file = self.path.open("a", encoding="utf-8", buffering=1)  # line-buffered: readable while it runs
        self._line({"event": "start", "config": config})
        if resumed_at:
            self._line({"event": "resume", "step": resumed_at})

    def _write(self, metrics: dict[str, float], step: int) -> None:
        self._line({"event": "metrics", "step": step, "metrics": {k: v if math.isfinite(v) else None for k, v in metrics.items()}})

    def _artifact(self, path: Path) -> None:
        self._line({"event": "artifact", "path": str(path.resolve())})

    def _close(self, failed: bool) -> None:
        if self._file is None:
            return
        try:
            self._line({"event": "end", "status": "failed" if failed else "finished"})
        finally:
            self._file.close()
            self._file = None

    def _line(self, entry: dict[str, object]) -> None:
        assert self._file is not None
        self._file.write(json.dumps({"event": entry.pop("event"), "time": time.time(), **entry}, allow_nan=False, default=str) + "\n")


def _drop_steps_after(path: Path, step: int) -> None:
    """Rewrite ``path`` without the metrics lines of steps after ``step`` (atomically: a temporary file, then a
    rename)."""
    kept = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if _step_of(line) <= step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, path)


def _step_of(line: str) -> float:
    """The step of a metrics line; -inf for any other line (kept), and for a torn last line (dropped: +inf)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return math.inf
    return entry["step"] if entry.get("event") == "metrics" else -math.inf
