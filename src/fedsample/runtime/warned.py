"""Each warning once per run: for the duration of a run (``fs.simulate``, ``fedsample run``, ``fedsample
diagnose``, ``fedsample reproduce``) each kind of warning (its category and message text) is shown the first time
it is raised and only counted after; at the end of the outermost run one line per kind that repeated says how many
times ("PrivacyWarning shown once, repeated 1,001 more times: ..."), and the run's record keeps the list
(:meth:`Warned.record`).

Built on the standard library's ``warnings`` machinery: :func:`once_per_kind` enters ``warnings.catch_warnings()``
(which restores the filters and ``warnings.showwarning`` on exit) and installs a :class:`Warned` as
``warnings.showwarning``. The filters in force still decide what reaches it (an ``"error"`` or ``"ignore"``
filter acts as outside a run); the first warning of each kind goes on to the ``showwarning`` that was in force
(so ``pytest.warns`` around a run still sees it). A run inside a run (``simulate`` under ``fedsample run``)
passes every warning on to the outer one, which shows each kind once and counts all of them. The counts are kept
under a lock: the loop engine's client threads may warn too.
"""

from __future__ import annotations

import sys
import threading
import warnings
from contextlib import contextmanager
from typing import Callable, Iterator, TextIO

from fedsample.runtime.records import JSONObject

__all__ = ["Warned", "once_per_kind"]


class Warned:
    """``warnings.showwarning`` during a run: counts each kind (category, message text) and passes the first of
    each kind on to ``passed_on`` (every one, where ``passed_on`` is an enclosing run's :class:`Warned`)."""

    def __init__(self, passed_on: Callable[..., object]) -> None:
        self._passed_on = passed_on
        self._counts: dict[tuple[type[Warning], str], int] = {}
        self._lock = threading.Lock()

    @property
    def outermost(self) -> bool:
        """True where no enclosing run counts the warnings (this run prints the repeats at its end)."""
        return not isinstance(self._passed_on, Warned)

    def __call__(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
        key = (category, str(message))
        with self._lock:
            seen = self._counts[key] = self._counts.get(key, 0) + 1
        if seen == 1 or not self.outermost:
            self._passed_on(message, category, filename, lineno, file, line)

    def record(self) -> list[JSONObject]:
        """Each kind in the order first raised: ``{"kind": category name, "message": text, "count": times raised}``."""
        return [{"kind": category.__name__, "message": text, "count": n} for (category, text), n in self.counts()]

    def counts(self) -> list[tuple[tuple[type[Warning], str], int]]:
        """Each kind (category, message text) in the order first raised, with the times it was raised."""
        with self._lock:
            return list(self._counts.items())

    def repeats(self) -> list[str]:
        """One line per kind raised more than once."""
        return [f"{category.__name__} shown once, repeated {n - 1:,} more times: {text}"
                for (category, text), n in self.counts() if n > 1]


@contextmanager
def once_per_kind(report: TextIO | None = None) -> Iterator[Warned]:
    """The block as one run: each kind of warning shown once and counted (:class:`Warned`); at its end, where no
    enclosing run counts them, one line per kind that repeated to ``report`` (default ``sys.stderr``). The
    warnings state is restored on exit."""
    with warnings.catch_warnings():
        warned = Warned(warnings.showwarning)
        warnings.showwarning = warned
        try:
            yield warned
        finally:
            if warned.outermost:
                for line in warned.repeats():
                    print(line, file=report if report is not None else sys.stderr, flush=True)
