"""A second thread for a round's bookkeeping that does not depend on training: numbers computed there are the
numbers computed in line (pure functions of their arguments, no random state shared with the caller), so a run
gives the same results with or without it; only the wall time changes (numpy and scipy release the GIL in their
array loops, and so does torch in its kernels, so the work overlaps the cohort's forward and backward pass on a
core that torch leaves idle).

Used for the secure sum's per-client count-noise shares (:func:`fedsample.federation.secure_sum.count_shares`:
30,000 clients' shares cost about 0.5 ms on this project's CPU), started when the cohort's replies arrive, and for
the round record's facts that do not depend on the replies (:meth:`fedsample.strategy.Strategy.cohort_facts`: the
contacted clients, the inclusion figures, the privacy spent), computed while the cohort's update is aggregated (the
vectorized engine's fused backward pass).

Measured in ``benchmarks/fedsampling_round_vs_centralized.py``'s round (MLP, 30,000 clients, one torch thread;
2026-11-26, 2 cores, the second one idle, rounds interleaved in one process): the shares in the background take
0.5 ms off a 19 ms round (medians of 300 rounds each way: 18.96 against 19.47 ms), the cohort facts 0.12-0.19 ms
more (paired medians of 400 pairs, five runs). On a machine with no idle core (load 1-3) the overlap gains
nothing: the worker holds the GIL between its short array loops and the main thread waits for it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, TypeVar

__all__ = ["in_background"]

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def _forget_in_child() -> None:
    """A forked child has no copy of the parent's worker thread: it starts its own on first use."""
    global _executor, _lock
    _executor, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def in_background(compute: Callable[..., T], *args: object) -> "Future[T]":
    """``compute(*args)`` started on the one background thread (created on first use); its ``result()`` is the
    value, or raises what ``compute`` raised."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedsample-background")
        return _executor.submit(compute, *args)
