"""The in-process simulator: a per-client loop over the client procedures (the reference backend), one client
after the other or several side by side on threads of this process (``client_threads``)."""

from __future__ import annotations

import contextlib
import copy
import queue
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import Callable, Iterator, TypeVar

import numpy as np
import torch
from torch import nn

from fedsample import client as procedures
from fedsample import checks
from fedsample.messages import ClientContext, ClientState, Params, TrainReport, TrainPayload, payloads_for, planned_for, requests_of
from fedsample.data.types import FederatedData
from fedsample.runtime.device import torch_threads
from fedsample.runtime.measured import RowsMeter
from fedsample.federation.base import Federation
from fedsample.rng import client_rng
from fedsample.federation.summed import RunningSum
from fedsample.rounds import Replies, ReplyList
from fedsample.models import check_inputs
from fedsample.training import random_layers
from fedsample.training.dtypes import float_dtype

__all__ = ["Simulator"]

T = TypeVar("T")  #: what a client call returns (:meth:`Simulator._side_by_side`)


class Simulator(Federation):
    """Runs client procedures in this process, one client after the other.

    Each call draws the client's randomness from (seed, round, client, procedure), so the reports do not
    depend on the order or grouping of clients: the procedure's ``rng``, the dropout masks drawn from it
    (:mod:`fedsample.training.random_layers`) and torch's global generator, reseeded for each call. Each
    client's ``ClientContext.state`` lives here across rounds; :meth:`client_states` and
    :meth:`load_client_states` move it in and out of checkpoints; :meth:`rows_measured` is what its clients trained,
    counted here and never sent (:mod:`fedsample.runtime.measured`). The training tensors are kept in client
    order (``x[offsets[k]:offsets[k+1]]`` is client k's data: the dataset's own arrays when the partition is
    already in that order, else one permuted copy made here), so a client's data is a view, never a copy.

    ``client_threads`` > 1 (CPU only) trains that many clients side by side on threads of this process, each
    with its own copy of the model and torch on one thread for the call (torch's kernels release the GIL, so
    two threads use two cores without a second interpreter or a copy of the data). Each client's numbers are
    those of a one-thread run, whatever ``client_threads`` is: the replies come back in cohort order and the
    server sums them in that order, so a run's numbers do not depend on the number of threads (the same to the
    bit as ``client_threads=1`` under ``torch.set_num_threads(1)``). A model with random operations outside
    ``nn.Dropout`` reads torch's global generator, which one client at a time reseeds: it runs one client
    after the other whatever ``client_threads`` says (``self.client_threads`` is then 1).
    """

    @checks.arguments(client_threads=checks.COUNT)
    def __init__(
        self, data: FederatedData, module: nn.Module, seed: int, device: torch.device | str = "cpu", client_threads: int = 1,
    ) -> None:
        ds = data.dataset
        self.data = data
        self.module = module
        self.seed = seed
        self.device = torch.device(device)
        x, y = _in_client_order(torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train), data.order)
        self.x, self.y = x.to(self.device), y.to(self.device)  # the training data moves to the device once
        check_inputs(module, self.x)
        self.dtype = float_dtype(self.x)  # of sample weights and dropout masks (inputs may be int64 token ids)
        self.task = ds.task
        self.num_classes = ds.num_classes
        self.random = random_layers.prepare(module, self.x[:1])
        self.train_module = random_layers.attach(self.random)  # the module with injected dropout layers
        self._states: dict[int, ClientState] = {}
        side_by_side = self.device.type == "cpu" and not self.random.has_unmanaged_random_ops(self.x)
        self.client_threads = int(client_threads) if side_by_side else 1
        self._threads: ThreadPoolExecutor | None = None
        self._modules: queue.SimpleQueue[nn.Module] = queue.SimpleQueue()
        self._meter = RowsMeter()  # the rows its clients train, for simulate alone (never sent to the server)

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    def context(self, k: int) -> ClientContext:
        """Client k's data: views of the shared training tensors (rows ``offsets[k]:offsets[k+1]``), no copy."""
        a, b = int(self.data.offsets[k]), int(self.data.offsets[k + 1])
        return ClientContext(
            k, self.x[a:b], self.y[a:b], self.train_module, self.task, self.num_classes, state=self._states.setdefault(k, {}),
            measure=self._meter.add,
        )

    def rows_measured(self) -> int | None:
        """The rows its clients trained since the last call, as this process saw them train: a simulation's measurement
        that no reply carries (:mod:`fedsample.runtime.measured`); None where a solver did not count its rows."""
        return self._meter.take()

    def _torch_random(self, round: int, k: int, procedure: str) -> contextlib.AbstractContextManager[None]:
        """Torch's global generator seeded for client k's call where the model draws from it (random operations
        outside nn.Dropout); nothing to do otherwise."""
        if self.random.has_unmanaged_random_ops(self.x):
            return random_layers.seeded_torch(self.seed, round, k, procedure)
        return contextlib.nullcontext()

    def client_states(self) -> dict[int, ClientState]:
        """A copy of every non-empty client-held state (for checkpoints; never handed to the strategy). An update
        kept for a round's second phase (:data:`fedsample.client.HELD`) is not state across rounds and is left out."""
        kept = {k: {key: v for key, v in s.items() if key != procedures.HELD} for k, s in self._states.items()}
        return {k: copy.deepcopy(s) for k, s in kept.items() if s}

    def load_client_states(self, states: dict[int, ClientState]) -> None:
        """Replace every client's state by ``states`` (clients not in it start empty), e.g. on resume."""
        for s in self._states.values():
            s.clear()
        for k, s in states.items():
            self._states.setdefault(int(k), {}).update(copy.deepcopy(s))

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        """The replies of ``client_ids`` in order. The requests that compute with the model (declared
        ``computes``: training and probes; each a client's forward/backward passes, which release the GIL) run side
        by side with ``client_threads`` > 1, on one torch thread each; the others (size reports, sending a held
        update) compute nothing with it and run one after the other. A ``train`` request that carries the sum the
        server plans to ask (its ``planned`` sum, :func:`fedsample.messages.planned_for`) adds each update into that sum as it arrives and keeps only the
        reports' numbers (:mod:`fedsample.federation.summed`)."""
        sent = payloads_for(request, len(client_ids))
        ids = np.asarray(client_ids).tolist()
        procedure = sent.procedure
        stream, fn = procedure.stream, procedures.procedure_for(sent.at(0))  # requests of one type: one procedure

        def call(position: int, module: nn.Module | None = None, state: ClientState | None = None) -> procedures.ClientReply:
            k = int(ids[position])
            ctx = self.context(k)
            if module is not None or state is not None:
                ctx = replace(ctx, module=ctx.module if module is None else module, state=ctx.state if state is None else state)
            with self._torch_random(round, k, stream):
                return fn(ctx, sent.at(position), client_rng(self.seed, round, k, stream))

        threaded = self.client_threads > 1 and procedure.computes  # one client too: on one torch thread
        plan = planned_for(sent, client_ids)
        trains = requests_of(sent, TrainPayload)  # a planned sum is a train request's
        before = {k: copy.deepcopy(self._states.get(k, {})) for k in set(ids)} if plan is not None else {}

        def again(position: int) -> Params:
            """Client ``position``'s update trained again from its state before the call, as the call trained it."""
            state = copy.deepcopy(before[int(ids[position])])
            if not threaded:
                return _update_of(call(position, state=state))
            with torch_threads(1), self._module_copy() as module:
                return _update_of(call(position, module, state))

        reports = self._side_by_side(call, len(ids)) if threaded else (call(position) for position in range(len(ids)))
        if plan is None or trains is None:
            return Replies(list(reports), failed={})
        running = RunningSum(plan)
        kept = [running.take(position, int(ids[position]), report, trains.at(position).params, partial(again, position))
                for position, report in enumerate(reports)]
        return running.replies(kept)

    def _side_by_side(self, call: Callable[[int, nn.Module], T], n: int) -> Iterator[T]:
        """``call(position, module)`` for positions 0..n-1 on ``client_threads`` threads, each call with a copy of
        the training module of its own, torch on one thread; the results one by one in position order (so that a
        caller may drop each before the next arrives). A call that raises raises here, as the loop would."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.client_threads, thread_name_prefix="fedsample-client")
            weakref.finalize(self, self._threads.shutdown, wait=False)
            for _ in range(self.client_threads):
                self._modules.put(random_layers.attach(copy.deepcopy(self.random)))  # a copy of the module, attached

        def with_a_module(position: int) -> T:
            torch.set_num_threads(1)  # in this thread too (OpenMP keeps a thread count per thread)
            with self._module_copy() as module:
                return call(position, module)

        with torch_threads(1):
            yield from self._threads.map(with_a_module, range(n))

    @contextlib.contextmanager
    def _module_copy(self) -> Iterator[nn.Module]:
        """One of the training module's copies (one per client thread), for one call at a time."""
        module = self._modules.get()
        try:
            yield module
        finally:
            self._modules.put(module)


def _in_client_order(x: torch.Tensor, y: torch.Tensor, order: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The training rows ``order`` lists, in that order: views of ``x``/``y`` when ``order`` is 0, 1, 2, ...,
    else one gathered copy."""
    if np.array_equal(order, np.arange(len(order))):
        return x[: len(order)], y[: len(order)]
    index = torch.as_tensor(order)
    return x[index], y[index]


def _update_of(reply: procedures.ClientReply) -> Params:
    """The update of a train call's ``reply`` (a :class:`TrainReport`, as the call it repeats answered)."""
    if not isinstance(reply, TrainReport):
        raise TypeError(f"a train call answered a {type(reply).__name__}, not a TrainReport")
    return reply.update
