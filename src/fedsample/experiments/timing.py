"""``timing.json``: an output folder's own record of the wall time its results took.

The runner writes it when an experiment's results are written (:func:`fedsample.experiments.runner.run_experiment`),
and ``fedsample reproduce`` when a study's are: every invocation that finished the folder's results, with its
wall seconds and when it finished, and their sum ``wall_s``. A resumed invocation adds itself to the record it
finds (the results carry the work of the invocations before it); an invocation killed before its results were
written is in no record, so a resumed invocation that finds checkpoints but no record marks the record
``complete: false`` (its sum leaves out that earlier work). ``fedsample reproduce --resume`` reports a reused
preset's or study's wall time from here, whichever invocation of the command produced it.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import TypedDict

from fedsample import outputs

__all__ = ["TIMING_FILE", "Invocation", "WallTime", "record_wall_time", "recorded_wall_time", "utc_now"]

#: The file in an output folder that records the wall time its results took.
TIMING_FILE = "timing.json"


class Invocation(TypedDict):
    """One invocation that finished the folder's results: when (:func:`utc_now`), its wall seconds, whether resumed."""

    finished: str
    wall_s: float
    resumed: bool


class WallTime(TypedDict):
    """timing.json: the invocations (oldest first), ``wall_s`` their sum, ``finished`` the last one's time, and whether
    the sum counts all the work (``complete``)."""

    wall_s: float
    finished: str
    complete: bool
    invocations: list[Invocation]


def utc_now() -> str:
    """The time now, in UTC to the minute (``2026-11-23 14:11 UTC``)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def recorded_wall_time(folder: Path) -> WallTime | None:
    """``folder``'s timing record ``{"wall_s", "finished", "complete", "invocations"}``; None where there is none
    or it does not read as one (a folder written before timing.json existed)."""
    try:
        document = json.loads((Path(folder) / TIMING_FILE).read_text())
        invocations = [Invocation(finished=str(i["finished"]), wall_s=float(i["wall_s"]), resumed=bool(i["resumed"]))
                       for i in document["invocations"]]
        complete = bool(document["complete"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not invocations or not all(math.isfinite(i["wall_s"]) and i["wall_s"] >= 0 for i in invocations):
        return None
    return timing_document(invocations, complete)


def timing_document(invocations: list[Invocation], complete: bool) -> WallTime:
    """The record of ``invocations`` (oldest first): ``wall_s`` their sum, ``finished`` the last one's time."""
    return WallTime(wall_s=sum(i["wall_s"] for i in invocations), finished=invocations[-1]["finished"], complete=complete,
                    invocations=invocations)


def record_wall_time(folder: Path, seconds: float, resumed: bool = False, earlier_work: bool = False) -> WallTime:
    """Record in ``folder`` that an invocation of ``seconds`` wall time finished its results now: a fresh record,
    or (``resumed``) added to the one there; ``earlier_work``: the folder held work (checkpoints) from before,
    which a missing record leaves uncounted. Written through a temporary file; returns the record."""
    earlier = recorded_wall_time(folder) if resumed else None
    invocations = [*(earlier["invocations"] if earlier else []), Invocation(finished=utc_now(), wall_s=float(seconds), resumed=resumed)]
    complete = earlier["complete"] if earlier else not (resumed and earlier_work)
    document = timing_document(invocations, complete)
    outputs.write_atomic(Path(folder) / TIMING_FILE, lambda p: p.write_text(json.dumps(document, indent=1) + "\n"))
    return document
