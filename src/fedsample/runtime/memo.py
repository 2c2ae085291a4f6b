"""What a round computed from arrays that cannot change, given again while the very same arrays come back.

A round's inputs that depend only on what is permanent (the clients' permanent size reports, the population's
census cohort) arrive as the same read-only arrays every round; what follows from them alone (the screened reports
and the estimate N~) need not be recomputed. :class:`LastOf` keeps the last value with the arrays it came from and
gives it again only for those very arrays (by identity: held here, so no other array can take their place) that no
one can have changed (read-only and owning their data: no writeable base under them), with equal settings.
"""

from __future__ import annotations

from typing import Callable, Generic, Hashable, Sequence, TypeVar

import numpy as np

__all__ = ["LastOf", "frozen", "unchangeable"]

T = TypeVar("T")


def unchangeable(array: np.ndarray) -> bool:
    """Whether nothing can change ``array``'s entries: read-only and owning its data (no view of a writeable base)."""
    return not array.flags.writeable and array.flags.owndata


def frozen(array: np.ndarray) -> np.ndarray:
    """``array`` itself where it is :func:`unchangeable`, else a read-only copy of it."""
    if unchangeable(array):
        return array
    copy = np.array(array, copy=True)
    copy.flags.writeable = False
    return copy


class LastOf(Generic[T]):
    """The value last computed from some arrays and settings, given again for the same (identical, unchangeable)
    arrays and equal settings; computed afresh otherwise (and kept where its arrays are unchangeable). It lives in
    the state of the run that uses it; a copy or a pickle of it (a checkpoint of that state) is an empty memo, since
    what it holds is only a saving of time, never part of a result."""

    def __init__(self) -> None:
        self._last: tuple[tuple[np.ndarray, ...], Hashable, T] | None = None  # one tuple: replaced at once

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return type(self), ()  # a subclass (a typed memo) pickles as an empty one of its own class

    def get(self, arrays: Sequence[np.ndarray], settings: Hashable, compute: Callable[[], T]) -> T:
        last, arrays = self._last, tuple(arrays)
        if last is not None and len(last[0]) == len(arrays) and all(a is b for a, b in zip(last[0], arrays)) and last[1] == settings:
            return last[2]
        value = compute()
        if all(unchangeable(a) for a in arrays):
            self._last = (arrays, settings, value)
        return value
