"""A second thread for a round's bookkeeping that does not depend on training: numbers computed there are the
numbers computed in line (pure functions of their arguments, no random state shared with the caller), so a run
gives the same results with or without it; only the wall time changes (numpy and scipy release the GIL in their
array loops, and so does torch in its kernels, so the work overlaps the cohort's forward and backward pass on a
core that torch leaves idle).

Used for the secure sum's per-client count-noise shares (:func:`fedsample.federation.secure_sum.count_shares`:
30,000 clients' shares cost about 0.8 ms on this project's CPU, as much as 5% of a FedSampling round's union step).

Measured in that round (2026-11-26, 2 cores, load 1-3): the overlap does not happen. The worker takes the GIL at
the main thread's first release after the submit (a short numpy call before the backward pass) and keeps it
between its own short array loops until it is done, so the main thread waits about as long as computing the
shares in line would take; started right before the backward pass instead, the shares do run inside it, but on a
machine with no idle core the round is no faster (paired A/B: +0.11 and +0.14 ms).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, TypeVar

__all__ = ["in_background"]

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def in_background(compute: Callable[..., T], *args: object) -> "Future[T]":
    """``compute(*args)`` started on the one background thread (created on first use); its ``result()`` is the
    value, or raises what ``compute`` raised."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedsample-background")
        return _executor.submit(compute, *args)
