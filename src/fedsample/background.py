"""A second thread for a round's bookkeeping that does not depend on training: numbers computed there are the
numbers computed in line (pure functions of their arguments, no random state shared with the caller), so a run
gives the same results with or without it; only the wall time changes (numpy and scipy release the GIL in their
array loops, and so does torch in its kernels, so the work overlaps the cohort's forward and backward pass on a
core that torch leaves idle).

Used for the secure sum's per-client count-noise shares (:func:`fedsample.federation.secure_sum.count_shares`:
30,000 clients' shares cost about 0.5 ms on this project's CPU), queued when the cohort's replies arrive, and for
the round record's facts that do not depend on the replies (:meth:`fedsample.strategy.Strategy.cohort_facts`: the
contacted clients, the inclusion figures, the privacy spent), computed while the cohort's update is aggregated (the
vectorized engine's fused backward pass).

Measured in ``benchmarks/fedsampling_round_vs_centralized.py``'s round (MLP, 30,000 clients, one torch thread;
2026-11-26, 2 cores, the second one idle, rounds interleaved in one process): the shares in the background take
0.5 ms off a 19 ms round (medians of 300 rounds each way: 18.96 against 19.47 ms), the cohort facts 0.12-0.19 ms
more (paired medians of 400 pairs, five runs). On a machine with no idle core (load 1-3) the overlap gains
nothing: the worker holds the GIL between its short array loops and the main thread waits for it.

Queued, then started where the main thread lets go of the GIL for a while. :func:`in_background` queues the work;
:func:`start_queued` starts it, called by the code about to run long kernels that release the GIL (the vectorized
engine's fused backward pass, a sum of updates, the wait for Ray's workers); asking for a result starts it too, so
work nobody started still gets done. Started at once instead, the worker's Python steps between its array loops take
the GIL from the main thread's own short steps just before that stretch: on the benchmark's round (MLP, 30,000
clients, one torch thread, 2 cores; 2026-11-26) starting both at the fused backward took 0.20 and 0.26 ms more off
the round (paired medians of 400 rounds, two runs, against starting them when queued).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Generic, TypeVar

__all__ = ["MAX_QUEUED", "Pending", "in_background", "start_queued"]

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_queued: "list[Pending]" = []
MAX_QUEUED = 16
"""More queued work than this starts at once, so work whose result nobody asks for never piles up."""


class Pending(Generic[T]):
    """Work queued for the background thread: started by :func:`start_queued` or by the first :meth:`result`."""

    def __init__(self, compute: Callable[..., T], args: tuple) -> None:
        self._compute, self._args = compute, args
        self._future: "Future[T] | None" = None

    @property
    def started(self) -> bool:
        return self._future is not None

    def start(self) -> None:
        """Hand the work to the worker (created on first use), once."""
        global _executor
        with _lock:
            if self._future is not None:
                return
            if _executor is None:
                _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedsample-background")
            self._future = _executor.submit(self._compute, *self._args)
            if self in _queued:
                _queued.remove(self)

    def result(self, timeout: float | None = None) -> T:
        """The value (started now if it was still queued), or what the work raised."""
        self.start()
        assert self._future is not None
        return self._future.result(timeout)


def _forget_in_child() -> None:
    """A forked child has no copy of the parent's worker thread: it starts its own on first use."""
    global _executor, _lock, _queued
    _executor, _lock, _queued = None, threading.Lock(), []


os.register_at_fork(after_in_child=_forget_in_child)


def in_background(compute: Callable[..., T], *args: object) -> Pending[T]:
    """``compute(*args)`` queued for the one background thread; its ``result()`` is the value, or raises what
    ``compute`` raised. It starts at the next :func:`start_queued` or at the first ``result()``."""
    pending = Pending(compute, args)
    with _lock:
        _queued.append(pending)
        crowded = len(_queued) > MAX_QUEUED
    if crowded:
        start_queued()
    return pending


def start_queued() -> None:
    """Start every queued work, oldest first: called where the main thread is about to spend a while in kernels that
    release the GIL, so the worker's steps do not wait on the main thread's nor the main thread's on the worker's."""
    with _lock:
        waiting = list(_queued)
    for pending in waiting:
        pending.start()
