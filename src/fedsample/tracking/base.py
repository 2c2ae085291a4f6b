"""The tracker interface: a run in an experiment tracker that is started with its config, logs numbers by step
and files, and is closed, also when the run fails (docs/tracking.md).

A leaf module (standard library only): :func:`fedsample.simulate` imports it, and each backend (``jsonl``,
``tensorboard``, ``mlflow``, ``wandb``) lives in its own module, which imports its library only when a run starts.
"""

from __future__ import annotations

import importlib.util
import warnings
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Iterable, Mapping, Sequence, SupportsFloat, TypeGuard

__all__ = ["EXTRAS", "MissingExtra", "Tracker", "TrackerGroup", "flat_config", "numeric_metrics", "require"]

#: backend name -> (the Python module it needs, the fedsample extra that installs it); jsonl needs nothing.
EXTRAS: dict[str, tuple[str, str] | None] = {
    "jsonl": None,
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
}


class MissingExtra(ImportError, ValueError):
    """A tracker whose library is not installed: one line naming the ``pip install`` that adds it (a ValueError
    too, so that the command line prints it as a usage error)."""


def require(backend: str) -> None:
    """Check, without importing it, that ``backend``'s library is installed; otherwise :class:`MissingExtra`."""
    if backend not in EXTRAS:
        raise ValueError(f"tracking backend must be one of {', '.join(EXTRAS)}, got {backend!r}")
    needed = EXTRAS[backend]
    if needed is not None and importlib.util.find_spec(needed[0]) is None:
        raise MissingExtra(f"the {backend} tracker needs the '{needed[1]}' extra: pip install 'fedsample[{needed[1]}]'")


def numeric_metrics(record: Mapping[str, object], prefix: str = "") -> dict[str, float]:
    """The numbers of a round's record, by name: ints and floats (non-finite ones kept), booleans as 0/1,
    nested dicts flattened to ``outer/inner``; strings, lists (e.g. ``failed``, whose count is ``dropped``)
    and None are left out, and so is ``round`` (it is the step)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if name == "round":
            continue
        if is_number(value):
            out[name] = float(value)
        elif isinstance(value, Mapping):
            out.update(numeric_metrics(value, f"{name}/"))
    return out


def is_number(value: object) -> TypeGuard[SupportsFloat]:
    """A real number: int, float, bool, or a numpy scalar of such a type (told without importing numpy)."""
    if isinstance(value, (int, float)):
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and getattr(value, "ndim", 1) == 0 and dtype.kind in "biuf"


def flat_config(config: Mapping[str, object] | Sequence[object], prefix: str = "") -> dict[str, object]:
    """A nested config as ``{"a.b.0.c": value}`` (dicts and lists flattened with dots), for trackers whose
    parameters are flat (MLflow)."""
    out: dict[str, object] = {}
    items: Iterable[tuple[object, object]] = config.items() if isinstance(config, Mapping) else enumerate(config)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, (Mapping, list, tuple)) and len(value):
            out.update(flat_config(value, f"{name}."))
        else:
            out[name] = value
    return out


class Tracker(ABC):
    """One tracked run. ``start(config)`` opens it, ``log``/``log_dict`` record numbers at a step (a round),
    ``log_artifact`` records a file (a table, a picture), ``close()`` ends it; ``close(failed=True)`` marks it
    failed. As a context manager it closes on leaving the block, as failed when the block raised. A backend
    implements the four ``_open``, ``_write``, ``_artifact`` and ``_close`` hooks."""

    backend: str = ""

    def __init__(self) -> None:
        self.started = False
        self.closed = False

    def start(self, config: Mapping[str, object], resumed_at: int = 0) -> None:
        """Open the run and record ``config``; ``resumed_at`` > 0: the run continues after that step (a resumed
        simulation), and steps after it that a crashed attempt logged are dropped or replaced where the
        backend allows it (docs/tracking.md)."""
        if self.started:
            raise RuntimeError(f"the {self.backend} run was already started")
        try:
            self._open(dict(config), int(resumed_at))
        except BaseException:
            self._close_quietly()  # whatever the backend had opened before the failure
            raise
        self.started = True

    def log(self, name: str, value: float, step: int) -> None:
        """One number at ``step``."""
        self.log_dict({name: value}, step)

    def log_dict(self, metrics: Mapping[str, float], step: int) -> None:
        """Numbers at ``step`` (every value a real number: pass a round's record through :func:`numeric_metrics`)."""
        self._check_open()
        bad = next((k for k, v in metrics.items() if not is_number(v)), None)
        if bad is not None:
            raise ValueError(f"metric {bad!r} must be a number, got {type(metrics[bad]).__name__}")
        if metrics:
            self._write({str(k): float(v) for k, v in metrics.items()}, int(step))

    def log_artifact(self, path: str | Path) -> None:
        """A file of the run (a table, a picture, a results document)."""
        self._check_open()
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"artifact {path} is not a file")
        self._artifact(path)

    def close(self, failed: bool = False) -> None:
        """End the run (``failed``: it raised); closing twice, or a run never started, does nothing."""
        if self.started and not self.closed:
            self.closed = True
            self._close(failed)

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        self.close(failed=kind is not None)

    def _close_quietly(self) -> None:
        try:
            self._close(failed=True)
        except Exception:  # noqa: BLE001 - the error that stopped the start is the one to report
            pass

    def _check_open(self) -> None:
        if not self.started or self.closed:
            state = "is closed" if self.started else "is not open: start it first"
            raise RuntimeError(f"the {self.backend} run {state}")

    @abstractmethod
    def _open(self, config: dict[str, object], resumed_at: int) -> None: ...

    @abstractmethod
    def _write(self, metrics: dict[str, float], step: int) -> None: ...

    @abstractmethod
    def _artifact(self, path: Path) -> None: ...

    @abstractmethod
    def _close(self, failed: bool) -> None: ...


class TrackerGroup(Tracker):
    """Several trackers as one: each call goes to every member; ``config`` is added to the config given to
    ``start`` (e.g. the experiment's settings beside a simulation's). Closing closes every member even when one
    fails; the first failure is raised afterwards (only warned about while another error is propagating)."""

    backend = "group"

    def __init__(self, trackers: Iterable[Tracker] = (), config: Mapping[str, object] | None = None) -> None:
        super().__init__()
        self.trackers = list(trackers)
        self.config = dict(config or {})

    def __len__(self) -> int:
        return len(self.trackers)

    def _open(self, config: dict[str, object], resumed_at: int) -> None:
        for tracker in self.trackers:  # a member that fails to start: the started ones are closed as failed
            tracker.start({**self.config, **config}, resumed_at)

    def _write(self, metrics: dict[str, float], step: int) -> None:
        for tracker in self.trackers:
            tracker.log_dict(metrics, step)

    def _artifact(self, path: Path) -> None:
        for tracker in self.trackers:
            tracker.log_artifact(path)

    def _close(self, failed: bool) -> None:
        self._close_all(failed, raising=not failed)

    def _close_all(self, failed: bool, raising: bool) -> None:
        first: BaseException | None = None
        for tracker in self.trackers:
            try:
                tracker.close(failed)
            except Exception as error:  # noqa: BLE001 - every member gets closed; the first failure is reported
                first = first or error
                if not raising:
                    warnings.warn(f"closing the {tracker.backend} tracker failed: {error}", RuntimeWarning, stacklevel=3)
        if first is not None and raising:
            raise first
