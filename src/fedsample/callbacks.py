"""What runs beside a simulation's rounds: callbacks that see each round's record and the run's state.

:func:`fedsample.simulation.simulate` runs the rounds; a :class:`Callback` is told when the run begins
(:meth:`~Callback.begin`), sees every round's record as it is made (:meth:`~Callback.on_record`: before it is kept, so
a callback may stop the run there), is told when the round is kept (:meth:`~Callback.after_round`) and when the
run ends (:meth:`~Callback.end`, also when it raised). The library's callbacks: :class:`Tracking` (the trackers of
:mod:`fedsample.tracking`), :class:`Checkpoint` (the state saved every N rounds and at the end, and read back to
resume), :class:`Progress` (a function called with each round done) and :class:`Divergence` (every run: a
non-finite outcome stops it with one line).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from fedsample import checks, validate
from fedsample.federation.base import Federation, client_states_of
from fedsample.messages import ClientState, TrainPayload
from fedsample.runtime.fingerprint import differences
from fedsample.runtime.records import Record, State, as_entries, as_int, as_table, as_text
from fedsample.tracking.base import Tracker, TrackerGroup, numeric_metrics
from fedsample.training.functional import Params

__all__ = [
    "Callback", "Checkpoint", "CheckpointError", "Diverged", "Divergence", "Progress", "Run", "SimulationState",
    "Tracking", "divergence",
]


@dataclass
class SimulationState:
    """Everything needed to continue a run exactly: ``round`` rounds are done. ``client_states`` are the
    clients' own ``ClientContext.state`` dicts (kept by the federation, not the strategy), by client id."""

    key: str
    seed: int
    round: int
    params: Params
    state: State
    history: list[Record] = field(default_factory=list)
    client_states: dict[int, ClientState] = field(default_factory=dict)
    fingerprint: dict[str, str] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        """Write atomically: a temporary file in the same folder, then a rename."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(self.__dict__, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, device: torch.device | str = "cpu") -> "SimulationState":
        """Read a checkpoint with every tensor on ``device``, whichever device wrote it; a truncated or corrupt
        file is one :class:`CheckpointError` line naming it."""
        try:
            fields = torch.load(path, map_location=torch.device(device), weights_only=False)
            return cls(**fields)
        except Exception as error:  # noqa: BLE001 - whatever a damaged file raises (pickle, zip, EOF, type)
            raise CheckpointError(
                f"checkpoint {path} is unreadable ({type(error).__name__}); delete it to start that run afresh"
            ) from None


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or belongs to another run (one line naming the file)."""


class Diverged(ArithmeticError):
    """A run whose loss or parameters became non-finite (one line naming strategy, seed and round)."""


@dataclass
class Run:
    """A run as its callbacks see it: the strategy's name, seed and rounds asked for, the state (``state.round``
    rounds done), the federation its clients answer through and ``config``, what the trackers record of it."""

    name: str
    seed: int
    rounds: int
    state: SimulationState
    federation: Federation
    config: dict[str, object]


class Callback:
    """Told of a run's progress; every method does nothing unless overridden."""

    def begin(self, run: Run) -> None:
        """The run is about to play its rounds (``run.state.round`` are done: a resumed run's)."""

    def on_record(self, run: Run, record: Record) -> None:
        """Round ``record["round"]``'s record, before it is kept: raising here stops the run."""

    def after_round(self, run: Run) -> None:
        """The round is kept: ``run.state`` holds it (parameters, history, ``round``)."""

    def end(self, run: Run, failed: bool) -> None:
        """The run is over: every round played (or the privacy budget reached), or ``failed``: it raised."""


class Tracking(Callback):
    """Every round's numbers (:func:`~fedsample.tracking.base.numeric_metrics` of its record) to ``trackers`` at the
    round as the step; they are started with the run's config and closed at the end, as failed when the run raises
    (docs/tracking.md). A resumed run with no round left starts none."""

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self.trackers = tuple(trackers)
        self.group = TrackerGroup()

    def __repr__(self) -> str:
        return f"Tracking({list(self.trackers)!r})"

    def begin(self, run: Run) -> None:
        self.group = TrackerGroup(self.trackers if run.state.round < run.rounds else ())
        self.group.start(run.config, resumed_at=run.state.round)

    def on_record(self, run: Run, record: Record) -> None:
        self.group.log_dict(numeric_metrics(record), step=as_int(record["round"], "round"))

    def end(self, run: Run, failed: bool) -> None:
        self.group.close(failed)


@dataclass(frozen=True)
class Checkpoint(Callback):
    """The run's state saved to ``path`` every ``every`` rounds (0: only at the end) and at the end, with the
    federation's client-held states; with ``resume`` a saved state of the same run continues it
    (:meth:`resumed`), ending with the numbers of an uninterrupted run."""

    path: str | Path
    every: int = 0
    resume: bool = False

    def __post_init__(self) -> None:
        checks.validate("simulate", {"checkpoint_every": self.every, "resume": self.resume},
                        {"checkpoint_every": checks.integers(0), "resume": checks.BOOLEAN})

    def resumed(self, key: str, fingerprint: dict[str, str], rounds: int, device: torch.device) -> SimulationState | None:
        """The saved state (on ``device``) if resuming and one is saved: only the run that wrote it (its ``key``
        and ``fingerprint``), and only forward (at most ``rounds`` done); otherwise :class:`CheckpointError`."""
        path = Path(self.path)
        if not (self.resume and path.exists()):
            return None
        saved = SimulationState.load(path, device)
        if not saved.fingerprint:
            raise CheckpointError(f"checkpoint {path} has no run fingerprint (an older fedsample wrote it); delete it")
        changed = differences(saved.fingerprint, fingerprint)
        if changed or saved.key != key:
            raise CheckpointError(f"checkpoint {path} belongs to another run: {', '.join(changed or ['strategy'])} differ")
        if saved.round > rounds:
            raise CheckpointError(f"checkpoint {path} has {saved.round} rounds done, more than the {rounds} asked for")
        return saved

    def after_round(self, run: Run) -> None:
        if self.every and run.state.round % self.every == 0:
            self.save(run)

    def end(self, run: Run, failed: bool) -> None:
        if not failed:
            self.save(run)

    def save(self, run: Run) -> None:
        """Save with the federation's client-held states (a federation whose clients keep none saves none)."""
        run.state.client_states = client_states_of(run.federation)
        run.state.save(Path(self.path))


@dataclass(frozen=True)
class Progress(Callback):
    """``report(t)`` after round t is kept (t counts from 1)."""

    report: Callable[[int], None]

    def after_round(self, run: Run) -> None:
        self.report(run.state.round)


def divergence(record: Record, params: Params) -> str | None:
    """Why a round's outcome shows divergence: non-finite parameters, loss, or every update non-finite."""
    if not validate.params_finite(params):
        return "the parameters became non-finite"
    for key in ("train_loss", "loss"):
        value = record.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            return f"the {'training' if key == 'train_loss' else 'test'} loss became {value}"
    if record.get("updates") != 0:  # some update arrived (or none was asked for): the entries are not read
        return None
    failed = [as_table(entry, "failed") for entry in as_entries(record.get("failed", []), "failed")]
    reasons = [as_text(f["reason"], "failed.reason") for f in failed if f.get("phase") == TrainPayload.procedure.name]
    if reasons and all(r.startswith("non-finite") for r in reasons):
        return f"every client's update was non-finite ({reasons[0]})"
    return None


@dataclass(frozen=True)
class Divergence(Callback):
    """A round whose parameters, loss or every update became non-finite (:func:`divergence`) stops the run with
    :class:`Diverged`, one line naming strategy, seed and round (every run has it, after the caller's callbacks)."""

    def on_record(self, run: Run, record: Record) -> None:
        why = divergence(record, run.state.params)
        if why:
            raise Diverged(f"{run.name}, seed {run.seed}, round {record['round']}: {why}; likely cause: a learning rate too high")
