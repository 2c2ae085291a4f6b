"""``FlowerFederation``: fedsample's one verb, ``run(ids, request, round)``, over Flower messages.

Each asked client gets one message (``query.<procedure>``, the name its request's type declares) on the node that serves it; replies are
collected until all are in or the round's timeout passes. A client without a node, without a reply in
time, with an error reply or with a malformed one (:mod:`fedsample.flower.codec`: wrong fields, shapes,
non-finite numbers) gets :class:`fedsample.rounds.Failed` in its slot, and the failure is kept in
``failures[round]`` for the round's record. A client that did not answer in time, or whose node the SuperLink
no longer lists as connected, is left out of the rest of that round without waiting again.

With ``secure=SecAggPlus(...)`` (the server builds it so for a strategy that declares ``secure_sum``) a
``train`` call runs Flower's SecAgg+ protocol instead (:mod:`fedsample.flower.secagg`): the server receives
masked vectors only, and the answer is sealed (one weighted sum, as
:class:`~fedsample.federation.secure_sum.SecureSum` gives in-process).
"""

from __future__ import annotations

import time
from collections import defaultdict
from logging import WARNING
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Message, RecordDict
from flwr.common.logger import log as flower_log
from flwr.serverapp import Grid

from fedsample.federation.base import Federation
from fedsample.client import ClientReply, ClientRequest
from fedsample.flower.codec import MalformedReply, decode_report, encode_request, request_of
from fedsample.messages import HeldRequest, payloads_for, procedure_of, unplanned
from fedsample.rounds import Failed, Replies, ReplyList
from fedsample.runtime.records import Record

if TYPE_CHECKING:
    from fedsample.flower.secagg import SealedSums, SecAggPlus

__all__ = ["FlowerFederation", "discover_nodes", "say_failures"]

IDENTIFY = "query.identify"
PULL_INTERVAL = 0.05  # seconds between pulls for replies


class FlowerFederation(Federation):
    """Client procedures as Flower messages through a ServerApp's ``Grid``; its answers are plain
    :class:`~fedsample.rounds.Replies` (each reply decoded from its own message: every sum is formed on the
    server, reply by reply).

    ``nodes`` maps a fedsample client id to the Flower node id serving it (see :func:`discover_nodes`);
    ``num_clients`` is the number of clients the strategy samples from (a client whose node is missing
    fails every round). ``timeout`` (seconds) bounds each call of :meth:`run` (each of SecAgg+'s four
    exchanges under ``secure``). ``secure`` (:class:`~fedsample.flower.secagg.SecAggPlus`) makes ``train``
    go through Flower's SecAgg+ workflow and client mod; its answers are sealed.
    """

    def __init__(
        self, grid: Grid, nodes: dict[int, int], num_clients: int, seed: int, timeout: float = 60.0, secure: SecAggPlus | None = None,
    ) -> None:
        self.grid = grid
        self.nodes = dict(nodes)
        self._num_clients = num_clients
        self.seed = seed
        self.timeout = timeout
        self.failures: dict[int, list[Failed]] = defaultdict(list)
        self.asked: dict[int, list[tuple[str, list[int]]]] = defaultdict(list)  # round -> (procedure's name, clients asked)
        self.trained: dict[int, list[int]] = {}  # round -> the clients last asked to train
        self.left_out: dict[int, dict[int, str]] = defaultdict(dict)  # round -> {client: why}
        self.secure = secure
        self.secure_rounds: dict[int, Record] = {}  # round -> what the secure aggregation did (for the round's record)
        self.sealed_sums: SealedSums | None = None  # the sealed cohorts awaiting their one sum (secure mode's)

    @property
    def num_clients(self) -> int:
        return self._num_clients

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        ids = [int(k) for k in np.asarray(client_ids)]
        if len(set(ids)) != len(ids):
            raise ValueError("FlowerFederation asks each client once per call; client_ids has repeats")
        sent = payloads_for(unplanned(request), len(ids))  # every sum is formed here, reply by reply: no planned sum sent
        procedure = sent.procedure
        self.asked[round].append((procedure.name, ids))
        if procedure.trains:
            self.trained[round] = ids
        payloads = [request_of(sent.at(i)) for i in range(len(ids))]
        # sealed by SecAgg+ (fedsample.flower.secagg): a train or count-only request; a kept update is sent as it is
        if self.secure is not None and procedure.sealed and not isinstance(sent.at(0), HeldRequest):
            return self.secure.train(self, ids, payloads, round)
        reachable = self._reachable(ids, round)
        replies: list[ClientReply | Failed | None] = [Failed(k, procedure.name, reachable.get(k) or "") for k in ids]
        messages = {i: self._message(k, payloads[i], round) for i, k in enumerate(ids) if reachable.get(k) is None}
        answers = exchange(self.grid, list(messages.values()), self.timeout)
        for i, message in messages.items():
            reply = replies[i] = self._read(ids[i], payloads[i], answers.get(id(message)))
            if isinstance(reply, Failed) and id(message) not in answers:
                self.left_out[round][ids[i]] = reply.reason
        failed = [r for r in replies if isinstance(r, Failed)]
        self.failures[round].extend(failed)
        say_failures(round, failed)
        return Replies(replies)

    def _reachable(self, ids: list[int], round: int) -> dict[int, str | None]:
        """For each client: None if a message can go to it, else why it is left out of this round."""
        connected = set(self.grid.get_node_ids())
        why: dict[int, str | None] = {}
        for k in ids:
            if k not in self.nodes:
                why[k] = "no node serves this client"
            elif k in self.left_out[round]:
                why[k] = f"left out of this round: {self.left_out[round][k]}"
            elif self.nodes[k] not in connected:
                why[k] = "its node is not connected"
            else:
                why[k] = None
        return why

    def _message(self, client: int, payload: ClientRequest, round: int) -> Message:
        content = encode_request(client, self.seed, round, payload)
        return Message(content, dst_node_id=self.nodes[client], message_type=f"query.{procedure_of(payload).name}", group_id=str(round))

    def _read(self, client: int, payload: ClientRequest, reply: Message | None) -> ClientReply | Failed | None:
        """The report in ``reply``, or :class:`Failed` with the reason it cannot be used."""
        procedure = procedure_of(payload).name
        if reply is None:
            return Failed(client, procedure, f"no reply within {self.timeout:g} s")
        if reply.has_error():
            return Failed(client, procedure, f"error reply: {reply.error.reason}")
        try:
            return decode_report(reply.content, payload)
        except MalformedReply as error:
            return Failed(client, procedure, f"rejected: {error}")


def exchange(grid: Grid, messages: list[Message], timeout: float) -> dict[int, Message]:
    """Push ``messages`` and pull replies until all are in or ``timeout`` seconds have passed since the push,
    then pull once more: {id(request): reply}.

    The last pull is what makes the timeout about the replies, not about the pulls: one pull can block far
    past the deadline (a reply whose upload was cut off, by a node killed while sending it, is retried by
    Flower's grid until the SuperLink's object-push session expires, minutes later), and a healthy reply that
    reached the SuperLink meanwhile must not be recorded as missing."""
    pushed = list(grid.push_messages(messages)) if messages else []
    waiting = {mid: id(m) for mid, m in zip(pushed, messages) if mid}
    answers: dict[int, Message] = {}
    deadline = time.monotonic() + timeout
    while waiting:
        last = time.monotonic() >= deadline
        for reply in grid.pull_messages(list(waiting)):
            request = waiting.pop(reply.metadata.reply_to_message_id, None)
            if request is not None:
                answers[request] = reply
        if last:
            break
        if waiting:
            time.sleep(min(PULL_INTERVAL, max(0.0, deadline - time.monotonic())))
    return answers


def discover_nodes(grid: Grid, expected: int, wait: float, timeout: float) -> dict[int, int]:
    """Ask every connected node which fedsample client it serves (its node config names it), after waiting up
    to ``wait`` seconds for ``expected`` nodes to connect. Returns {client id: node id}; a second node
    claiming a client already claimed is ignored."""
    deadline = time.monotonic() + wait
    node_ids = list(grid.get_node_ids())
    while len(node_ids) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        node_ids = list(grid.get_node_ids())
    messages = [Message(RecordDict(), dst_node_id=n, message_type=IDENTIFY) for n in node_ids]
    answers = exchange(grid, messages, timeout)
    nodes: dict[int, int] = {}
    for reply in (answers[id(m)] for m in messages if id(m) in answers):
        identity = None if reply.has_error() else reply.content.config_records.get("identity")
        client = None if identity is None else identity.get("client")
        if isinstance(client, int) and not isinstance(client, bool) and client not in nodes:
            nodes[client] = reply.metadata.src_node_id
    return nodes


def say_failures(round: int, failed: list[Failed]) -> None:
    """One warning line in the ServerApp's log per client that failed in round ``round`` (0-based), with the
    reason the round's record (history.json ``failed``) holds."""
    for failure in failed:
        flower_log(WARNING, "fedsample: round %d: client %d failed (%s): %s", round + 1, failure.client, failure.phase, failure.reason)
