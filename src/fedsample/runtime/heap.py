"""Python's cyclic garbage collector during a run.

A process that has imported torch, numpy and scipy and loaded a dataset holds about 200,000 objects the
collector tracks; every full (generation-2) collection scans them all, which takes many times a round of the
vectorized engine on small clients, and such a round allocates enough objects to trigger one every few rounds
(benchmarks/README.md has the figures). Freezing the objects that
exist when the run starts (:func:`gc.freeze`, Python 3.7+) takes them out of every later collection: they live
as long as the run anyway. Collections of what the rounds allocate go on as before, and nothing computed
changes (the collector frees memory, it computes nothing).
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["freeze_heap", "heap_frozen"]

_lock = threading.Lock()
_depth = 0


def freeze_heap() -> None:
    """Collect what is garbage now, then leave every object alive out of later collections (for good: a worker
    process that lives as long as its run)."""
    gc.collect()
    gc.freeze()


@contextmanager
def heap_frozen() -> Iterator[None]:
    """The objects alive now left out of collections for the block (a run inside a longer session, such as a
    notebook's ``simulate``; freezing is two list splices, so a short run pays nothing for it): they go back to
    the collector when the outermost such block ends (:func:`gc.unfreeze`)."""
    global _depth
    with _lock:
        if _depth == 0:
            gc.freeze()  # no collection first: one costs 0.1-0.2 s, paid by every short run (a test, a grid of short
            # runs); what is garbage now is freed when the block ends instead
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.unfreeze()
