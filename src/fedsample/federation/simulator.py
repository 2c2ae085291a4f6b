"""The in-process simulator: a per-client loop over the client procedures (the reference backend)."""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from fedsample import client as procedures
from fedsample.data.types import FederatedData
from fedsample.federation.base import payload_for
from fedsample.rng import client_rng
from fedsample.training import random_layers


class Simulator:
    """Runs client procedures in this process, one client after the other.

    Each call draws the client's randomness from (seed, round, client, procedure), so the reports do not
    depend on the order or grouping of clients: the procedure's ``rng``, the dropout masks drawn from it
    (:mod:`fedsample.training.random_layers`) and torch's global generator, reseeded for each call. Each
    client's ``ClientContext.state`` lives here across rounds; :meth:`client_states` and
    :meth:`load_client_states` move it in and out of checkpoints. A client's data is gathered from the shared
    training tensors for each call (a view where its rows are contiguous) and not kept afterwards.
    """

    def __init__(self, data: FederatedData, module: nn.Module, seed: int) -> None:
        ds = data.dataset
        self.data = data
        self.module = module
        self.seed = seed
        self.x = torch.as_tensor(ds.x_train)
        self.y = torch.as_tensor(ds.y_train)
        self.task = ds.task
        self.num_classes = ds.num_classes
        self.random = random_layers.prepare(module, self.x[:1])
        self.train_module = random_layers.attach(self.random)  # the module with injected dropout layers
        self._states: dict[int, dict] = {}

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    def context(self, k: int) -> procedures.ClientContext:
        """Client k's data as tensors: views of the shared training tensors where its rows are one ascending
        run, else a gathered copy that lives as long as the call."""
        rows = self.data.client_indices(k)
        if len(rows) and rows[-1] - rows[0] == len(rows) - 1 and np.all(np.diff(rows) == 1):
            x, y = self.x[rows[0] : rows[-1] + 1], self.y[rows[0] : rows[-1] + 1]
        else:
            index = torch.as_tensor(rows)
            x, y = self.x[index], self.y[index]
        return procedures.ClientContext(k, x, y, self.train_module, self.task, self.num_classes, state=self._states.setdefault(k, {}))

    def client_states(self) -> dict[int, dict]:
        """A copy of every non-empty client-held state (for checkpoints; never handed to the strategy)."""
        return {k: copy.deepcopy(s) for k, s in self._states.items() if s}

    def load_client_states(self, states: dict[int, dict]) -> None:
        """Replace every client's state by ``states`` (clients not in it start empty), e.g. on resume."""
        for s in self._states.values():
            s.clear()
        for k, s in states.items():
            self._states.setdefault(int(k), {}).update(copy.deepcopy(s))

    def run(self, procedure: str, client_ids: np.ndarray, payload: Any | Sequence[Any], round: int) -> list[Any]:
        fn = procedures.PROCEDURES[procedure]
        per_client = isinstance(payload, (list, tuple))
        if per_client and len(payload) != len(client_ids):
            raise ValueError(f"{len(payload)} payloads for {len(client_ids)} clients")
        reports = []
        for position, k in enumerate(np.asarray(client_ids)):
            rng = client_rng(self.seed, round, int(k), procedure)
            with random_layers.seeded_torch(self.seed, round, int(k), procedure):
                reports.append(fn(self.context(int(k)), payload_for(payload, position, per_client), rng))
        return reports
