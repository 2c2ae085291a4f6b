"""What a federation over worker processes needs on both sides, whatever carries the calls (Ray actors,
:mod:`fedsample.federation.ray`; a local process pool, :mod:`fedsample.federation.pool`).

The clients are split over the workers as :mod:`fedsample.federation.shards` says (client k on worker
k mod workers). A worker holds its clients' rows and runs an in-process engine on its share of every call
(:class:`ClientShard`); ``train`` keeps the clients' updates on the worker and answers with a summary
(:func:`summarize_reports`). The server gets :func:`sharded_replies`: a reply list of light reports (steps,
loss, FedNova's a_k, summed statistics) whose fused ``weighted_update_sum(positions, weights)`` asks each worker
for its partial ``sum_k w_k * Delta_k`` and adds them in worker order; reading a report's ``update`` fetches
that worker's updates. Per round, what crosses is the global parameters to each worker and one parameter-sized
sum back: O(workers x parameters), not O(clients x parameters).

A federation built on this implements ``_call_each(calls, token)``: call ``method(*args, token)`` on each
named worker (``calls``: worker -> ``(method, *args)``) and return the answers by worker, as they arrive (unpickled:
objects of no declared type); the server reads each as what its call answers (:func:`answers_as`,
:func:`partial_sum`, :func:`updates_of`, :func:`states_of`), another refused in one line naming the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, TypeGuard, TypeVar

import numpy as np
import torch
from torch import nn

from fedsample.data.types import FederatedData
from fedsample.federation.shards import as_range
from fedsample.messages import ClientState, TrainReport, payloads_for
from fedsample.rounds import Failed, FusedReplies, ReplyObjects, NumberReplies, Replies, ReplyList, train_reports
from fedsample.training.functional import Params

__all__ = ["NO_SUMMARY", "ClientShard", "RemoteReport", "ShardedUpdates", "TrainSummary", "answers_as", "compact_weights", "in_cohort_order",
           "partial_sum", "sharded_replies", "states_of", "summarize_reports", "updates_of", "worker_replies", "wrong_answer"]

T = TypeVar("T")


# --- the worker's side -------------------------------------------------------------------------------------


class ClientShard:
    """The clients of one worker: their data, their held state, and the last ``train`` call's reports (kept
    here until the server has combined them, so that only sums cross). ``engine``: ``"vectorized"`` or
    ``"loop"``, the in-process federation that runs them."""

    def __init__(self, shard: FederatedData, module: nn.Module, seed: int, memory_budget: int, engine: str = "vectorized") -> None:
        if engine == "loop":
            from fedsample.federation.simulator import Simulator

            self.sim: Simulator = Simulator(shard, module, seed)
        else:
            from fedsample.federation.vectorized import VectorizedSimulator

            self.sim = VectorizedSimulator(shard, module, seed, memory_budget=memory_budget)
        self._held: tuple[int, ReplyList] = (-1, Replies())

    def run(self, ids: np.ndarray | range, request: object, round: int, token: int) -> ReplyList | TrainSummary:
        """The engine's answer for ``ids``; for a request whose replies carry updates (``train``, ``send_held``:
        declared ``update``), a summary (:func:`summarize_reports`) while the reports stay here under ``token``."""
        if isinstance(ids, range):
            ids = np.arange(ids.start, ids.stop, ids.step, dtype=np.int64)
        reports = self.sim.run(ids, request, round)
        if not payloads_for(request, len(ids)).procedure.update:
            return reports
        self._held = (token, reports)
        return summarize_reports(reports)

    def weighted_update_sum(self, positions: np.ndarray | range, weights: np.ndarray | float, token: int) -> Params | None:
        """``sum_i weights_i * Delta_{positions_i}`` over this worker's part of call ``token`` (``positions`` may
        come as a range and ``weights`` as one number shared by all: :func:`compact_weights`)."""
        positions = np.arange(positions.start, positions.stop, positions.step, dtype=np.int64) if isinstance(positions, range) else positions
        each = np.full(len(positions), weights, dtype=np.float64) if np.ndim(weights) == 0 else np.asarray(weights)
        return self._reports(token).weighted_update_sum(positions, each)

    def updates(self, positions: np.ndarray, token: int) -> list[Params]:
        """The updates of ``positions`` in call ``token`` (for aggregators that read each client's update)."""
        reports = self._reports(token)
        return [reports.report(int(i)).update for i in positions]

    def held_rows(self) -> int:
        """The training rows this worker holds (its clients' only)."""
        return len(self.sim.y)

    def client_states(self) -> dict[int, ClientState]:
        return self.sim.client_states()

    def load_client_states(self, states: dict[int, ClientState]) -> None:
        self.sim.load_client_states(states)

    def _reports(self, token: int) -> ReplyList:
        if self._held[0] != token:
            raise RuntimeError(f"the reports of train call {token} are gone (a later call replaced them)")
        return self._held[1]


@dataclass(frozen=True)
class TrainSummary:
    """A worker's summary of a train call (:func:`summarize_reports`): the positions of the ``received`` reports, one
    row of ``table`` (steps, loss, FedNova's a_k or NaN, rows trained or NaN) per received report, and each one's reply
    ``statistics`` and summed statistics (``sums``), in the same order."""

    received: np.ndarray
    table: np.ndarray
    statistics: list[Mapping[str, float]]
    sums: list[Mapping[str, int]]


def summarize_reports(reports: ReplyList) -> TrainSummary:
    """What the server needs of a train call besides the updates: the positions of the received reports, one
    row (steps, loss, FedNova's a_k or NaN, rows trained or NaN) per received report, and each one's reply statistics
    and summed statistics (:attr:`fedsample.messages.TrainReport.statistics`, ``sums``); replies that carry no update
    (empty: no step taken) are not summarized and cost nothing."""
    positions = reports.received_positions()
    got = train_reports([reports[int(i)] for i in positions])
    rows = [(r.steps, r.loss, _or_nan(r.norm_steps), _or_nan(r.rows_trained))
            for r in got]  # every received report is a TrainReport: its fields' defaults are class attributes
    return TrainSummary(np.asarray(positions, dtype=np.int64), np.array(rows, dtype=np.float64).reshape(-1, 4), [r.statistics for r in got],
                   [dict(r.sums) for r in got])  # plain dicts: they cross a pipe


#: The summary of a worker none of whose clients was asked (:func:`summarize_reports` of no report).
NO_SUMMARY = TrainSummary(np.zeros(0, np.int64), np.zeros((0, 4)), [], [])


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else value


# --- the server's side -------------------------------------------------------------------------------------


class Workers(Protocol):
    """A federation over workers, as :class:`ShardedUpdates` calls it: the answers by worker, as they arrive (read
    with :func:`partial_sum` and :func:`updates_of`)."""

    def _call_each(self, calls: Mapping[int, tuple[object, ...]], token: int) -> Mapping[int, object]: ...


def answers_as(answers: Mapping[int, object], kind: type[T], call: str) -> dict[int, T]:
    """The workers' answers to a ``call`` read as the ``kind`` it answers (a :class:`TrainSummary` of a ``train``), by
    worker; another object refused in one line naming the worker (:func:`wrong_answer`)."""
    out: dict[int, T] = {}
    for w, answer in answers.items():
        if not isinstance(answer, kind):
            raise wrong_answer(w, call, answer, f"a {kind.__name__}")
        out[w] = answer
    return out


def wrong_answer(worker: int, call: str, answer: object, wanted: str) -> TypeError:
    """The one-line refusal of a worker's answer to a ``call`` that is not what the call answers (``wanted``)."""
    return TypeError(f"worker {worker}'s answer to {call} is a {type(answer).__name__}, not {wanted}")


def is_params(value: object) -> TypeGuard[Params]:
    """Whether ``value`` is parameters (or an update) by name: a dict of str -> tensor."""
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def partial_sum(answer: object, worker: int) -> Params | None:
    """A worker's answer to ``weighted_update_sum``: its partial sum (None where none of its replies carries an
    update); another object refused in one line naming the worker."""
    if answer is None or is_params(answer):
        return answer
    raise wrong_answer(worker, "weighted_update_sum", answer, "parameters by name")


def updates_of(answer: object, worker: int) -> list[Params]:
    """A worker's answer to ``updates``: one update per asked position; another object refused in one line naming
    the worker."""
    if isinstance(answer, list) and all(is_params(u) for u in answer):
        return answer
    raise wrong_answer(worker, "updates", answer, "a list of updates")


def states_of(answer: object, worker: int) -> dict[int, ClientState]:
    """A worker's answer to ``client_states``: its clients' held states by client id; another object refused in one
    line naming the worker."""
    if isinstance(answer, dict) and all(isinstance(k, int) and isinstance(v, dict) and all(isinstance(n, str) for n in v)
                                       for k, v in answer.items()):
        return answer
    raise wrong_answer(worker, "client_states", answer, "states by client id")


class RemoteReport(TrainReport):
    """A client's train report whose update stays on its worker until read."""

    def __init__(self, owner: "ShardedUpdates", position: int, steps: int, loss: float, norm_steps: float | None,
                 rows_trained: int | None = None, statistics: Mapping[str, float] | None = None, sums: Mapping[str, int] | None = None) -> None:
        self._owner, self._position = owner, position
        self.steps, self.loss, self.norm_steps, self.rows_trained = steps, loss, norm_steps, rows_trained
        self.statistics = {} if statistics is None else statistics
        if sums:  # else the class's empty mapping
            self.sums = sums

    @property
    def update(self) -> Params:  # type: ignore[override]  # the report's field, computed when read
        return self._owner.update_of(self._position)

    def __repr__(self) -> str:
        return f"TrainReport(cohort position {self._position}, steps={self.steps}, loss={self.loss:.4g}, update on its worker)"


class ShardedUpdates(ReplyObjects):
    """The backing (:class:`~fedsample.rounds.ReplyBacking`) of a ``train`` call's reports over the workers: light
    reports (:class:`RemoteReport`) whose received positions come with the summaries and whose weighted sum is
    fused (one partial sum per worker, added here); the other abilities are the reports', one by one."""

    def __init__(self, fed: Workers, token: int, parts: list[np.ndarray], summaries: list[TrainSummary], size: int) -> None:
        self.replies: list[TrainReport | None] = [None] * size
        self._fed, self._token, self._parts = fed, token, parts
        self._fetched: dict[int, dict[int, Params]] = {}
        self._worker = np.zeros(size, dtype=np.int64)
        self._local = np.zeros(size, dtype=np.int64)
        for w, (positions, summary) in enumerate(zip(parts, summaries)):
            self._worker[positions], self._local[positions] = w, np.arange(len(positions))
            for j, (steps, loss, norm, trained), stats, summed in zip(positions[summary.received].tolist(), summary.table.tolist(),
                                                                      summary.statistics, summary.sums):
                self.replies[j] = RemoteReport(self, j, int(steps), loss, None if np.isnan(norm) else norm,
                                               None if np.isnan(trained) else int(trained), stats, summed)
        self._received = np.sort(np.concatenate([p[s.received] for p, s in zip(parts, summaries)] + [np.zeros(0, np.int64)]))

    def received(self) -> np.ndarray:
        return self._received

    def weighted_update_sum(self, positions: np.ndarray, weights: np.ndarray, failed: Mapping[int, Failed]) -> Params | None:
        """``sum_i weights_i * Delta_{positions_i}``: each worker sums its own clients, the server adds the
        workers' partial sums (in worker order, so the result is deterministic); rejected replies add nothing."""
        positions, weights = np.asarray(positions, dtype=np.int64), np.asarray(weights, dtype=np.float64)
        if failed:
            keep = ~np.isin(positions, list(failed))
            positions, weights = positions[keep], weights[keep]
        calls: dict[int, tuple[object, ...]] = {}
        for w in range(len(self._parts)):
            mine = self._worker[positions] == w
            if mine.any():
                calls[w] = ("weighted_update_sum", as_range(self._local[positions[mine]]), compact_weights(weights[mine]))
        partial = self._fed._call_each(calls, self._token)
        total: Params | None = None
        for w in sorted(partial):
            got = partial_sum(partial[w], w)
            if got is None:
                continue
            total = got if total is None else {k: total[k] + v for k, v in got.items()}
        return total

    def update_of(self, position: int) -> Params:
        """Client ``position``'s update: its worker's received updates are fetched together on first read."""
        w = int(self._worker[position])
        if w not in self._fetched:
            got = self._received[self._worker[self._received] == w]
            fetched = updates_of(self._fed._call_each({w: ("updates", self._local[got])}, self._token)[w], w)
            self._fetched[w] = dict(zip(got.tolist(), fetched))
        return self._fetched[w][position]


def compact_weights(weights: np.ndarray) -> np.ndarray | float:
    """One number where every weight is the same (FedSampling's sum over a secure-summed cohort of 10^6 clients:
    8 bytes instead of 8 per client), else the array."""
    return float(weights[0]) if len(weights) > 1 and np.all(weights == weights[0]) else weights


def in_cohort_order(answered: Mapping[int, object], parts: list[np.ndarray], size: int, call: str) -> ReplyList:
    """The workers' answers to a ``call`` (reply lists: another refused, :func:`wrong_answer`) put back in cohort order:
    one array where every worker answered with one (size reports, :class:`~fedsample.rounds.NumberReplies`), else a
    list."""
    answers: dict[int, ReplyList] = {}
    for w, answer in answered.items():  # written out: ReplyList is abstract, which answers_as's type[T] refuses
        if not isinstance(answer, ReplyList):
            raise wrong_answer(w, call, answer, "a reply list")
        answers[w] = answer
    numbers = {w: a for w, a in answers.items() if isinstance(a, NumberReplies) and not a.failed}
    if answers and len(numbers) == len(answers):
        values = np.zeros(size, dtype=next(iter(numbers.values())).values.dtype)
        for w, number in numbers.items():
            values[parts[w]] = number.values
        return NumberReplies(values)
    out: list[object] = [None] * size
    for w, answer in answers.items():
        for j, report in zip(parts[w].tolist(), answer):
            out[j] = report
    return Replies(out)


def worker_replies(fed: Workers, token: int, parts: list[np.ndarray], answers: Mapping[int, object], call: str, updates: bool,
                   size: int) -> ReplyList:
    """The server's reply list of call ``token`` over a cohort of ``size`` from the workers' ``answers`` (``parts``: each
    worker's cohort positions): where the call's updates stay on the workers (``updates``), their train summaries
    (:func:`sharded_replies`, an empty one for a worker not asked); else their reply lists in cohort order
    (:func:`in_cohort_order`)."""
    if updates:
        summaries = answers_as(answers, TrainSummary, call)
        return sharded_replies(fed, token, parts, [summaries.get(w, NO_SUMMARY) for w in range(len(parts))], size)
    return in_cohort_order(answers, parts, size, call)


def sharded_replies(fed: Workers, token: int, parts: list[np.ndarray], summaries: list[TrainSummary], size: int) -> FusedReplies:
    """The server's reply list of train call ``token`` over the workers (``parts``: each worker's cohort positions,
    ``summaries``: their :func:`summarize_reports`), backed by :class:`ShardedUpdates`."""
    return FusedReplies(ShardedUpdates(fed, token, parts, summaries, size))
