"""What a simulation measures and the server is never told: the rows its clients trained on (issue 38).

A client whose plan keeps its drawn count private (FedSampling's exact-sizes control and paper protocol, a
per-example-noised arm: :func:`fedsample.parts.reports_rows` is False) sends no row count, so the server cannot
know the round's realised budget. An in-process engine runs the clients itself and sees how many rows each one
trained; it counts them here, on its own side of the door, into a :class:`RowsMeter` that only ``simulate``
reads, once per round, after the round is done (the record's ``realised_measured``,
:func:`fedsample.budget.measured_figure`). No strategy part, ledger or sampler reads it, and no reply carries it.
A worker pool, Ray and Flower do not measure it (a real deployment cannot); a federation passed to ``simulate``
is measured where it offers ``rows_measured`` (:class:`MeasuresRows`; a wrapper of an in-process engine may pass it on).
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

__all__ = ["MeasuresRows", "RowsMeter"]


class RowsMeter:
    """The rows trained since it was last read, counted by the engine (under a lock: the loop engine's client
    threads count side by side); a count it was told is unknown (None) makes the total unknown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: int | None = 0

    def add(self, rows: int | None) -> None:
        """Count ``rows`` rows trained by one client (None: the client's solver does not count its rows)."""
        with self._lock:
            self._rows = None if rows is None or self._rows is None else self._rows + int(rows)

    def take(self) -> int | None:
        """The rows counted since the last take (None where one count was unknown), and start again from 0."""
        with self._lock:
            rows, self._rows = self._rows, 0
        return rows


@runtime_checkable
class MeasuresRows(Protocol):
    """An engine that counts its clients' rows trained on the simulation's side (the in-process engines)."""

    def rows_measured(self) -> int | None:
        """The rows its clients trained since it was last asked (:meth:`RowsMeter.take`)."""
        ...
