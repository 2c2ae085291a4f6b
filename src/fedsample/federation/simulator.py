"""The in-process simulator: a per-client loop over the client procedures (the reference backend)."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from fedsample import client as procedures
from fedsample.messages import ClientContext, payloads_for
from fedsample.data.types import FederatedData
from fedsample.federation.base import Federation
from fedsample.rng import client_rng
from fedsample.rounds import Replies, ReplyList
from fedsample.models import check_inputs
from fedsample.training import random_layers
from fedsample.training.dtypes import float_dtype

__all__ = ["Simulator"]


class Simulator(Federation):
    """Runs client procedures in this process, one client after the other.

    Each call draws the client's randomness from (seed, round, client, procedure), so the reports do not
    depend on the order or grouping of clients: the procedure's ``rng``, the dropout masks drawn from it
    (:mod:`fedsample.training.random_layers`) and torch's global generator, reseeded for each call. Each
    client's ``ClientContext.state`` lives here across rounds; :meth:`client_states` and
    :meth:`load_client_states` move it in and out of checkpoints. The training tensors are kept in client
    order (``x[offsets[k]:offsets[k+1]]`` is client k's data: the dataset's own arrays when the partition is
    already in that order, else one permuted copy made here), so a client's data is a view, never a copy.
    """

    def __init__(self, data: FederatedData, module: nn.Module, seed: int, device: torch.device | str = "cpu") -> None:
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
        self._states: dict[int, dict] = {}

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    def context(self, k: int) -> ClientContext:
        """Client k's data: views of the shared training tensors (rows ``offsets[k]:offsets[k+1]``), no copy."""
        a, b = int(self.data.offsets[k]), int(self.data.offsets[k + 1])
        return ClientContext(
            k, self.x[a:b], self.y[a:b], self.train_module, self.task, self.num_classes, state=self._states.setdefault(k, {})
        )

    def _torch_random(self, round: int, k: int, procedure: str) -> Any:
        """Torch's global generator seeded for client k's call where the model draws from it (random operations
        outside nn.Dropout); nothing to do otherwise."""
        if self.random.has_unmanaged_random_ops(self.x):
            return random_layers.seeded_torch(self.seed, round, k, procedure)
        return contextlib.nullcontext()

    def client_states(self) -> dict[int, dict]:
        """A copy of every non-empty client-held state (for checkpoints; never handed to the strategy). An update
        kept for a round's second phase (:data:`fedsample.client.HELD`) is not state across rounds and is left out."""
        kept = {k: {key: v for key, v in s.items() if key != procedures.HELD} for k, s in self._states.items()}
        return {k: copy.deepcopy(s) for k, s in kept.items() if s}

    def load_client_states(self, states: dict[int, dict]) -> None:
        """Replace every client's state by ``states`` (clients not in it start empty), e.g. on resume."""
        for s in self._states.values():
            s.clear()
        for k, s in states.items():
            self._states.setdefault(int(k), {}).update(copy.deepcopy(s))

    def run(self, procedure: str, client_ids: np.ndarray, payload: Any, round: int) -> ReplyList:
        fn = procedures.PROCEDURES[procedure]
        sent = payloads_for(payload, len(client_ids))
        reports = []
        for position, k in enumerate(np.asarray(client_ids)):
            rng = client_rng(self.seed, round, int(k), procedures.stream_of(procedure))
            with self._torch_random(round, int(k), procedures.stream_of(procedure)):
                reports.append(fn(self.context(int(k)), sent.at(position), rng))
        return Replies(reports, failed={})


def _in_client_order(x: torch.Tensor, y: torch.Tensor, order: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The training rows ``order`` lists, in that order: views of ``x``/``y`` when ``order`` is 0, 1, 2, ...,
    else one gathered copy."""
    if np.array_equal(order, np.arange(len(order))):
        return x[: len(order)], y[: len(order)]
    index = torch.as_tensor(order)
    return x[index], y[index]
