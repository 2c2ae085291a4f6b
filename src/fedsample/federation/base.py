"""The one verb a strategy uses (run this request on these clients: its type says which client procedure answers it), the one optional
ability a federation may declare (its clients keep state between rounds), and the factory a federation that
needs its own setup is passed as (e.g. Ray's workers: :func:`fedsample.federation.ray.ray_federation`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ContextManager, Protocol, runtime_checkable

import numpy as np

from fedsample.messages import ClientState
from fedsample.rounds import ReplyList

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fedsample.data.types import FederatedData

__all__ = ["Federation", "FederationFactory", "KeepsClientStates", "KeepsSeed", "client_states_of", "load_client_states_into"]


class Federation(Protocol):
    """How client procedures are executed (in-process simulators, Ray, Flower). Strategies see only this."""

    @property
    def num_clients(self) -> int: ...

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        """Ask each client in ``client_ids`` ``request`` (shared by all, or one each as a
        :class:`fedsample.messages.PerClient`, read through :func:`fedsample.messages.payloads_for`; the request's
        type declares the client procedure that answers it, :class:`fedsample.messages.Procedure`) and return
        the replies in the same order as a :class:`~fedsample.rounds.ReplyList`: every asked client's report (a
        client whose plan drew nothing sends an empty one), or :class:`fedsample.rounds.Failed` where a client
        did not answer or was rejected."""
        ...


@runtime_checkable
class KeepsClientStates(Protocol):
    """The ability of a federation whose clients keep their own state between rounds (``ClientContext.state``,
    e.g. ISFedAvg's Eq. 53 data weights): ``simulate`` saves it into checkpoints and gives it back on resume.
    A federation without it keeps no state; wrappers (faults, secure sum) declare it and delegate."""

    def client_states(self) -> dict[int, ClientState]:
        """A copy of every non-empty client-held state, by client id (never handed to the strategy)."""
        ...

    def load_client_states(self, states: dict[int, ClientState]) -> None:
        """Replace every client's state by ``states`` (clients not in it start empty)."""
        ...


@runtime_checkable
class KeepsSeed(Protocol):
    """The declaration of a federation that keeps the run's seed, the first coordinate of its clients' (seed, round,
    client, purpose) cells (every engine of fedsample's: a :class:`~fedsample.federation.secure_sum.SecureSum` around
    one draws the clients' noise shares from it where no seed is given)."""

    @property
    def seed(self) -> int: ...


def client_states_of(federation: object) -> dict[int, ClientState]:
    """The clients' states of a federation that keeps them, else none."""
    return federation.client_states() if isinstance(federation, KeepsClientStates) else {}


def load_client_states_into(federation: object, states: dict[int, ClientState]) -> None:
    """Give a federation that keeps client states these ones (a federation that keeps none needs nothing)."""
    if isinstance(federation, KeepsClientStates):
        federation.load_client_states(states)


class FederationFactory(ABC):
    """A federation that starts with the run: its workers receive the clients' data and the model, and it has
    its own setup and teardown (e.g. a Ray session and actors). ``simulate(..., engine=Engine(federation=factory))`` opens it
    once the run's state is ready and closes it at the end, also on error; everything else about the run (the
    failure model, a strategy's secure sum, checkpoints) is the same as for any federation."""

    @abstractmethod
    def open(
        self, data: FederatedData, module: nn.Module, seed: int, *, memory_budget: int | None = None,
        device: torch.device | str = "cpu",
    ) -> ContextManager[Federation]:
        """A context manager that starts the federation over ``data`` with the model ``module`` and the run's
        ``seed``, yields it, and stops it on exit."""

    @property
    def description(self) -> str:
        """The engine as a run records it (``results.json``'s ``backend``); factories name themselves."""
        return "given"
