"""The federation as the privacy ledger sees it: every call checked against the budget before it is sent and
recorded after it, as :mod:`fedsample.privacy.amplification` describes it.

:func:`watch` is the one hook a strategy's round calls (``Strategy.round``); the ledger lives in the strategy
state under :data:`LEDGER_KEY` (saved with checkpoints), created with the default :class:`Accounting` where
``simulate`` did not put one there.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fedsample.privacy.amplification import Accounted, answered_count, check_mechanism, releases, warn_unprotected
from fedsample.privacy.ledger import Ledger
from fedsample.rounds import ReplyList
from fedsample.runtime.records import JSONObject, State

__all__ = ["Answers", "LEDGER_KEY", "Recorded", "ledger_of", "round_figures", "watch"]

LEDGER_KEY = "privacy"
"""The strategy-state key under which a run keeps its ledger."""


class Answers(Protocol):
    """What the ledger watches: a federation (:class:`fedsample.federation.base.Federation` is one)."""

    @property
    def num_clients(self) -> int: ...

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList: ...


def ledger_of(state: State) -> Ledger:
    """The run's ledger in the strategy state (a default one is created on first use)."""
    ledger = state.get(LEDGER_KEY)
    if not isinstance(ledger, Ledger):
        ledger = state[LEDGER_KEY] = Ledger()
    return ledger


def watch(federation: Answers, strategy: Accounted, state: State, round: int) -> "Recorded":
    """``federation`` for one round of ``strategy``, its releases recorded in the state's ledger."""
    ledger = ledger_of(state)
    check_mechanism(strategy, ledger.accounting)
    return Recorded(federation, strategy, ledger, round)


def round_figures(state: State) -> JSONObject:
    """The round log's privacy keys (:meth:`fedsample.privacy.ledger.Ledger.round_figures`)."""
    return ledger_of(state).round_figures()


class Recorded:
    """A federation whose calls are checked (:meth:`Ledger.check`: the budget, assuming every asked client
    answers) and then recorded with who actually answered."""

    def __init__(self, inner: Answers, strategy: Accounted, ledger: Ledger, round: int) -> None:
        self.inner, self.strategy, self.ledger, self.round = inner, strategy, ledger, round
        self._calls = 0

    @property
    def num_clients(self) -> int:
        return self.inner.num_clients

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        """``inner.run``, its releases checked before (every asked client assumed to answer) and recorded after,
        as who answered makes them: a call's releases depend on its replies only through how many answered
        (:func:`~fedsample.privacy.amplification.releases`), so where every asked client answered they are the
        ones checked, computed once."""
        ordinal, self._calls = self._calls, self._calls + 1
        ids = np.asarray(client_ids)
        accounting, population = self.ledger.accounting, self.inner.num_clients
        assumed = releases(ids, request, round, ordinal, self.strategy, accounting, population)
        self.ledger.check(assumed)
        replies = self.inner.run(client_ids, request, round)
        # under a secure sum the replies are sealed, a client whose own check rejected its reply already counted as
        # failed (fedsample.federation.secure_sum.client_side_check): the ledger sees who actually entered the sum
        if answered_count(replies) != len(ids):
            assumed = releases(ids, request, round, ordinal, self.strategy, accounting, population, replies=replies)
        warn_unprotected(self.ledger.add(assumed))
        return replies
