"""What a strategy sees of failed clients until strategies handle :class:`fedsample.rounds.Failed` themselves.

The minimal glue a deployment needs: a failed ``train`` reply becomes ``None`` (a client that sent nothing:
every aggregator leaves it out, so a rejected NaN update is never averaged in); a failed ``report_size``
reply is replaced by the mean of the reports received in the same call (the nonresponse adjustment that
keeps a total estimate unbiased when clients fail at random, rounded to an integer report); a failed
``probe`` leaves the strategy without the statistics it selects on, so the round is skipped
(:class:`RoundSkipped`) and the global model kept. Every failure stays in the federation's log.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedsample.rounds import Failed, is_failed


class RoundSkipped(RuntimeError):
    """A round that cannot go on without the failed clients' replies."""

    def __init__(self, failed: list[Failed]) -> None:
        super().__init__(f"{failed[0].phase} failed for clients {[f.client for f in failed]}")
        self.failed = failed


class TolerantView:
    """Wraps a federation that returns :class:`Failed` replies, for strategies that do not expect them."""

    def __init__(self, federation: Any) -> None:
        self.federation = federation

    @property
    def num_clients(self) -> int:
        return self.federation.num_clients

    def run(self, procedure: str, client_ids: np.ndarray, payload: Any | Sequence[Any], round: int) -> list[Any]:
        replies = self.federation.run(procedure, client_ids, payload, round)
        failed = [r for r in replies if is_failed(r)]
        if not failed:
            return replies
        if procedure == "train":
            return [None if is_failed(r) else r for r in replies]
        if procedure == "report_size":
            return imputed_sizes(replies, failed)
        raise RoundSkipped(failed)


def imputed_sizes(replies: list[Any], failed: list[Failed]) -> list[int]:
    """Size reports with each failed one replaced by the rounded mean of the received ones."""
    got = [r for r in replies if not is_failed(r)]
    if not got:
        raise RoundSkipped(failed)
    fill = int(round(float(np.mean(got))))
    return [fill if is_failed(r) else r for r in replies]
