"""Updates summed as they arrive: an in-process engine's answer to a ``train`` call whose sum the server planned.

A round of 50 CNN clients otherwise holds 50 updates (about 310 MB for pfl-research's CIFAR-10 model) until the
aggregator asks for their weighted sum. Where the strategy declares the sum it will ask if every update arrives
(:class:`fedsample.messages.PlannedSum` in the train request: a linear aggregator's weights, known before training),
the loop engine adds
each update into that sum as it arrives, in cohort order and with :func:`fedsample.rounds.weighted_sum`'s
arithmetic, and keeps only the report's numbers (steps, loss, ...): the round holds one parameter-sized sum.

Each update is checked as it arrives with the server's own deep check (:func:`fedsample.validate.report_problem`:
loss, steps, keys, shapes, finite values); one that fails is not summed and its reply is the :class:`Failed` the
server's screen would have made of it (the same reason). One difference from held updates follows: the privacy
ledger, which records a call's releases as its replies come back, counts such a client as not having entered the
sum (as it does for a secure sum's client-side check), where with held updates it counts it as answered and the
screen rejects it afterwards. Asked for the
planned sum, their backing (:class:`SummedUpdates`) answers with the running sum: the same numbers to the bit as summing the held
updates. Asked anything else (a client failed or was rejected, an update was empty, other weights), it computes the
answer update by update, recomputing each dropped update on demand (:class:`SummedReport`): a client's training is
a function of (seed, round, client), and it is rerun from the client's state as it was before the call. The numbers
are then the same too; only the time doubles for that round.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from fedsample.messages import Params, PlannedSum, TrainPayload, TrainReport
from fedsample.rounds import Failed, FusedReplies, ReplyObjects, add_weighted_, carries_update, update_sum_of
from fedsample.validate import report_problem

__all__ = ["RunningSum", "SummedReport", "SummedUpdates"]


class SummedReport(TrainReport):
    """A client's train report whose update went into the planned sum and was dropped; reading ``update``
    recomputes it (``recompute()``: the client's training rerun, the same numbers)."""

    def __init__(self, recompute: Callable[[], Params], report: TrainReport) -> None:
        self._recompute = recompute
        self.steps, self.loss, self.norm_steps = report.steps, report.loss, report.norm_steps
        self.rows_trained, self.statistics = report.rows_trained, report.statistics
        if report.sums:  # else the class's empty mapping
            self.sums = report.sums

    @property
    def update(self) -> Params:  # type: ignore[override]  # the report's field, recomputed when read
        return self._recompute()

    def __repr__(self) -> str:
        return f"TrainReport(steps={self.steps}, loss={self.loss:.4g}, update summed as it arrived)"


class RunningSum:
    """``sum_i w_i * Delta_i`` of a planned sum, accumulated one update at a time in cohort order with
    :func:`fedsample.rounds.weighted_sum`'s arithmetic (:func:`fedsample.rounds.add_weighted_`)."""

    def __init__(self, plan: PlannedSum) -> None:
        self.weights = plan.weights.tolist()
        self.total: Params | None = None
        self.summed: list[int] = []
        self.rejected: dict[int, Failed] = {}

    def take(self, position: int, client: int, report: object, params: Params, recompute: Callable[[], Params]) -> object:
        """The reply to keep for ``position`` (``client``'s): a :class:`SummedReport` once its update is added, the
        report itself where it carries no update (empty), the screen's :class:`Failed` where it fails the server's
        deep check against the global ``params``."""
        if not carries_update(report) or not isinstance(report, TrainReport):
            return report
        problem = report_problem(report, params, deep=True)
        if problem:
            self.rejected[position] = Failed(client, TrainPayload.procedure.name, problem)
            return self.rejected[position]
        self.total = add_weighted_(self.total, report.update, self.weights[position])
        self.summed.append(position)
        return SummedReport(recompute, report)

    def replies(self, reports: list[object]) -> FusedReplies:
        """The call's replies (``reports``: :meth:`take`'s, in cohort order) backed by this sum, the rejected failed."""
        return FusedReplies(SummedUpdates(reports, self), failed=dict(self.rejected))


class SummedUpdates(ReplyObjects):
    """The backing (:class:`~fedsample.rounds.ReplyBacking`) of a ``train`` call's replies whose updates were summed
    as they arrived (:class:`RunningSum`): every update was checked on arrival (no suspects for the server's screen),
    and the sum is what the server asks; the other abilities are the replies', one by one."""

    def __init__(self, reports: list[object], running: RunningSum) -> None:
        self.replies = reports
        self._total, self._weights = running.total, np.asarray(running.weights, dtype=np.float64)
        self._summed = np.asarray(running.summed, dtype=np.int64)

    def suspects(self, received: np.ndarray) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray, failed: Mapping[int, Failed]) -> Params | None:
        """The running sum where ``positions``/``weights`` are the planned ones over exactly the summed updates (the
        same numbers as summing them now); otherwise update by update, each dropped update recomputed."""
        positions, weights = np.asarray(positions, dtype=np.int64), np.asarray(weights, dtype=np.float64)
        if self._total is not None and np.array_equal(positions, self._summed) and np.array_equal(weights, self._weights[positions]):
            return {k: v.clone() for k, v in self._total.items()}
        return update_sum_of(self.reply, failed, positions, weights)  # each dropped update recomputed as it is added
