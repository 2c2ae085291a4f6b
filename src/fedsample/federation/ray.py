"""One simulation over a pool of Ray actors (the optional extra ``fedsample[ray]``; the core never imports this).

``simulate(..., engine=Engine(federation=ray_federation(workers=4)))`` (:func:`ray_federation`, a
:class:`~fedsample.federation.base.FederationFactory`) opens a Ray session (the one already running, the
cluster at ``address``, or a local Ray with one CPU per worker) and a :class:`RayFederation` for the run, and
stops both at its end. :class:`RayFederation` implements the one verb ``run(ids, request, round)``
by splitting the asked clients over ``workers`` actors. Each actor is a :class:`~fedsample.federation.sharded.ClientShard`
(the worker's side every federation over workers shares, :mod:`fedsample.federation.sharded`): it receives its
clients' training rows once, at start (:func:`fedsample.federation.shards.shard_of`), and runs the vectorized engine
(:class:`~fedsample.federation.vectorized.VectorizedSimulator`) on its share of every call, on its GPU where
Ray gave it one. Every client draw comes from (seed, round, client, purpose), so the reports are those of the
single-process engine.

``train`` keeps the clients' updates on the actors. The server gets :func:`~fedsample.federation.sharded.sharded_replies`: a reply list
(:class:`~fedsample.rounds.ReplyList`) of light reports (steps, loss, FedNova's a_k, drawn samples, rows trained) whose fused
``weighted_update_sum(positions, weights)`` makes one call per actor, each returning its partial
``sum_k w_k * Delta_k`` (one backward pass on one-gradient cohorts); the server adds them. Per round, what crosses the network is the global parameters
to each actor and one parameter-sized sum back: O(actors x parameters), not O(clients x parameters).
Reading a report's ``update`` (aggregators that need each client's update) fetches that actor's updates.

Client-held state (ISFedAvg's Eq. 53 weights) lives on the actor holding the client; :meth:`client_states`
and :meth:`load_client_states` gather and restore it for checkpoints. An actor that dies makes the call raise
:class:`ShardLost`; ``simulate(..., callbacks=[Checkpoint(path, resume=True)])`` (``fedsample run --resume``) on a
fresh federation continues from the last checkpoint with the numbers of an uninterrupted run.
"""

from __future__ import annotations

import pickle
import socket
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from fedsample.messages import ClientState, payloads_for, unplanned
from fedsample.data.types import FederatedData
from fedsample.runtime.device import use_threads
from fedsample.runtime.heap import freeze_heap
from fedsample.federation.base import Federation, FederationFactory
from fedsample.federation.sharded import (  # noqa: F401 - ShardedUpdates, summarize_reports: re-exported
    ClientShard, ShardedUpdates, compact_weights, states_of, summarize_reports, worker_replies,
)
from fedsample.rounds import FederationLost, ReplyList
from fedsample.federation.shards import as_range, assign_clients, positions_by_worker, shard_of
from fedsample.federation.vectorized import DEFAULT_MEMORY_BUDGET
from fedsample.runtime.telemetry import quiet_ray

quiet_ray()  # before Ray starts any process: no usage report to usage-stats.ray.io unless the user opted in

import ray  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

if TYPE_CHECKING:
    from fedsample.simulation import EngineOptions

__all__ = [
    "CONNECT_TIMEOUT_S", "ClientShard", "RayFederation", "RayFederationFactory", "ShardLost", "ShardedUpdates", "cli_session",
    "ray_federation", "ray_session",
]

#: Seconds to wait for a Ray head node's port to accept a connection before calling it unreachable.
CONNECT_TIMEOUT_S = 10.0


class ShardLost(FederationLost):
    """An actor holding clients died; resume from the last checkpoint on a fresh federation."""


# --- the actor's side ------------------------------------------------------------------------------------


class RayClientShard(ClientShard):
    """:class:`~fedsample.federation.sharded.ClientShard` as a Ray actor: ``threads`` torch threads, always the
    vectorized engine, and the node it runs on."""

    def __init__(self, shard: FederatedData, module: nn.Module, seed: int, memory_budget: int, threads: int) -> None:
        use_threads(threads)
        super().__init__(shard, module, seed, memory_budget)
        freeze_heap()  # the actor's objects out of every collection (fedsample.runtime.heap)

    def node(self) -> str:
        """The Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()


# --- the server's side -------------------------------------------------------------------------------------


class RayFederation(Federation):
    """A federation over ``workers`` Ray actors (see the module docstring). Ray must be initialized
    (:func:`ray_session`; :func:`ray_federation` opens both for a ``simulate`` run).
    ``cpus_per_worker``/``gpus_per_worker`` are each actor's Ray resources; ``spread`` places actors on as many nodes as possible; actors not running after ``start_timeout``
    seconds (the cluster lacks the resources) are an error. With ``count_bytes`` the pickled size of what
    each call sends and receives is added up in :attr:`traffic` (for benchmarks; it costs a serialization)."""

    def __init__(
        self, data: FederatedData, module: nn.Module, seed: int, workers: int = 2, memory_budget: int | None = None,
        cpus_per_worker: float = 1, gpus_per_worker: float = 0, spread: bool = True, count_bytes: bool = False,
        start_timeout: float = 120.0,
    ) -> None:
        if not ray.is_initialized():
            raise RuntimeError("RayFederation needs a running Ray: use fedsample.federation.ray.ray_session(...)")
        self.data, self.seed, self.workers = data, seed, int(workers)
        self.owner = assign_clients(data.num_clients, self.workers)
        self.traffic = {"sent": 0, "received": 0, "calls": 0} if count_bytes else None
        self._token = 0
        options: dict[str, float | str] = {"num_cpus": cpus_per_worker, "num_gpus": gpus_per_worker, "max_restarts": 0}
        if spread:
            options["scheduling_strategy"] = "SPREAD"
        actor = ray.remote(RayClientShard).options(**options)
        threads = max(1, int(cpus_per_worker))
        budget = memory_budget or DEFAULT_MEMORY_BUDGET
        # Ray's actor handles stay untyped: ray 2.55 types ActorClass.remote as ActorHandle[T] | type[T], and a method read
        # from an ActorHandle[T] as Never (which would silently end the checking of what follows)
        self.actors: list[Any] = [actor.remote(shard_of(data, self.owner, w), module, seed, budget, threads) for w in range(self.workers)]
        self.nodes = self._started([a.node.remote() for a in self.actors], start_timeout, options)

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        ids = np.asarray(client_ids, dtype=np.int64)
        sent = payloads_for(unplanned(request), len(ids))  # the planned sum stays here: the workers sum their shares
        self._token += 1
        parts = positions_by_worker(ids, self.owner, self.workers)
        shared = None if sent.shared is None else ray.put(sent.shared)  # serialized once, read by every actor
        calls = {
            w: ("run", as_range(ids[p]), sent.take(p) if shared is None else shared, round)
            for w, p in enumerate(parts) if len(p)
        }
        answers = self._call_each(calls, self._token)
        # where the call trains, updates stay on the actors (ClientShard.run)
        return worker_replies(self, self._token, parts, answers, sent.procedure.name, sent.procedure.update, len(ids))

    def client_states(self) -> dict[int, ClientState]:
        """Every actor's non-empty client-held states, by client id (for checkpoints)."""
        states: dict[int, ClientState] = {}
        for w, part in enumerate(self._gather([a.client_states.remote() for a in self.actors])):
            states.update(states_of(part, w))
        return states

    def load_client_states(self, states: dict[int, ClientState]) -> None:
        """Give each actor its clients' states (clients not in ``states`` start empty)."""
        mine = [{k: s for k, s in states.items() if self.owner[int(k)] == w} for w in range(self.workers)]
        self._gather([a.load_client_states.remote(m) for a, m in zip(self.actors, mine)])

    def close(self) -> None:
        """Stop the actors (their clients' data and state go with them)."""
        for a in self.actors:
            ray.kill(a, no_restart=True)
        self.actors = []

    # --- calls ------------------------------------------------------------------------------------------

    def _call_each(self, calls: Mapping[int, tuple[object, ...]], token: int) -> dict[int, object]:
        """Call ``method(*args, token)`` on each named actor in parallel (``calls``: actor -> (method, *args)); the
        answers by actor, as Ray returns them (read by the caller as what each call answers,
        :mod:`fedsample.federation.sharded`'s readers)."""
        refs = {w: getattr(self.actors[w], str(name)).remote(*args, token) for w, (name, *args) in calls.items()}
        answers = dict(zip(refs, self._gather(list(refs.values()))))
        if self.traffic is not None:
            self.traffic["calls"] += len(calls)
            self.traffic["sent"] += sum(_pickled_size(args) for _, *args in calls.values())
            self.traffic["received"] += sum(_pickled_size(a) for a in answers.values())
        return answers

    def _started(self, refs: Sequence[ray.ObjectRef[str]], timeout: float, options: Mapping[str, float | str]) -> list[str]:
        """The actors' nodes once every actor runs; stops them and raises when they cannot all be placed."""
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise RuntimeError(
                f"{self.workers} Ray actors with {options['num_cpus']} CPU and {options['num_gpus']} GPU each did not start "
                f"in {timeout:g} s; the cluster has {ray.available_resources()} free"
            ) from None
        except ray.exceptions.RayActorError as error:
            self.close()
            raise ShardLost(f"a Ray actor died while starting ({type(error).__name__}: {_first_line(error)}); "
                            "check the workers' memory and logs, then rerun (--resume continues from the last checkpoint)") from None

    def _gather(self, refs: Sequence[ray.ObjectRef[object]]) -> list[object]:
        """The actors' answers to ``refs``, in order (objects of no declared type, read by the caller); an actor that
        died is :class:`ShardLost`."""
        try:
            return ray.get(refs)
        except ray.exceptions.RayActorError as error:
            raise ShardLost(f"a Ray actor holding clients died ({type(error).__name__}); rerun with --resume "
                            "(resume=True) to continue from the last checkpoint") from error


def _first_line(error: BaseException) -> str:
    """The first non-empty line of an error's message (Ray's are long and span several lines)."""
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def _pickled_size(value: object) -> int:
    """Bytes of ``value`` pickled, with Ray object references replaced by their objects (what a worker on
    another node receives)."""
    if isinstance(value, (list, tuple)):
        value = [ray.get(v) if isinstance(v, ray.ObjectRef) else v for v in value]
    return len(pickle.dumps(value))


@contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None, **init: Any) -> Iterator[None]:
    """Ray for the duration of the block: connect to ``address`` (``"auto"``: the cluster ``ray start``
    started on this machine; ``"HOST:PORT"``: that head node), or, with none, start a local Ray with
    ``num_cpus`` CPUs, no dashboard and a small object store, and stop it afterwards. An already
    initialized Ray is used as it is and left running. ``init``: more of ``ray.init``'s keywords, passed on as they are
    (untyped: each of ray.init's keywords has its own type)."""
    if ray.is_initialized():
        yield
        return
    if address is None:
        init = {"num_cpus": num_cpus, "include_dashboard": False, "object_store_memory": 200 * 2**20, **init}
    else:
        check_reachable(address)
    try:
        ray.init(address=address, configure_logging=False, log_to_driver=False, **init)
        yield
    finally:
        ray.shutdown()


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 0x04, 0, 0, 0, 0, 0])
"""What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame (RFC 9113 section 3.4)."""


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ``ConnectionError`` naming ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``) when, within ``timeout``
    seconds, it does not accept a TCP connection or does not answer as Ray does: Ray's head (GCS) and Ray Client
    are gRPC servers, which answer an HTTP/2 connection preface with a SETTINGS frame (RFC 9113 section 3.4).
    ``ray.init`` would otherwise retry such an address for minutes. ``"auto"`` and other forms are left to Ray
    (it resolves them from this machine's files, quickly)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as connection:
            connection.settimeout(timeout)
            connection.sendall(HTTP2_PREFACE)
            frame = _received(connection, 9)
    except OSError as failure:
        raise ConnectionError(f"nothing answers at {host}:{port} within {timeout:g} s ({failure.strerror or failure})") from None
    if len(frame) < 9 or frame[3] != 0x04:
        raise ConnectionError(f"{host}:{port} accepts connections but does not answer as Ray (a gRPC server) within {timeout:g} s")


def _received(connection: socket.socket, size: int) -> bytes:
    """Up to ``size`` bytes from ``connection``: fewer when it closes or stays silent past its timeout."""
    data = b""
    while len(data) < size:
        try:
            chunk = connection.recv(size - len(data))
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return data


@dataclass(frozen=True)
class RayFederationFactory(FederationFactory):
    """A :class:`RayFederation` of ``workers`` actors for one run (:func:`ray_federation`)."""

    workers: int = 2
    address: str | None = None
    cpus_per_worker: float = 1
    gpus_per_worker: float = 0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")

    @property
    def description(self) -> str:
        """The engine as a run records it: ``ray (N workers, address A)`` (``local``: a Ray started for the run
        or the one already running in this program)."""
        return f"ray ({self.workers} workers, address {self.address or 'local'})"

    @contextmanager
    def open(
        self, data: FederatedData, module: nn.Module, seed: int, *, memory_budget: int | None = None,
        device: torch.device | str = "cpu",
    ) -> Iterator[RayFederation]:
        """Ray (:func:`ray_session`: the one already running, the cluster at ``address``, or a local Ray with one
        CPU per worker, stopped at the end) and the actors, stopped at the end, also on error."""
        if torch.device(device).type != "cpu":
            raise ValueError(f"a Ray federation computes on the actors' CPUs (docs/ray.md); got device={str(device)!r}")
        with ray_session(self.address, num_cpus=self.workers if self.address is None else None):
            federation = RayFederation(data, module, seed, workers=self.workers, memory_budget=memory_budget,
                                       cpus_per_worker=self.cpus_per_worker, gpus_per_worker=self.gpus_per_worker)
            try:
                yield federation
            finally:
                federation.close()


def ray_federation(
    workers: int = 2, address: str | None = None, cpus_per_worker: float = 1, gpus_per_worker: float = 0
) -> RayFederationFactory:
    """The clients of a ``simulate`` run split over ``workers`` Ray actors: ``simulate(..., engine=Engine(
    federation=ray_federation(workers=4)))`` on a local Ray started and stopped for the run, ``address="auto"`` or
    ``"HOST:PORT"`` on a cluster, or the Ray your program already started (left running); the same numbers as
    the single-process engine (docs/ray.md)."""
    return RayFederationFactory(workers, address, cpus_per_worker, gpus_per_worker)


@contextmanager
def cli_session(address: str | None, workers: int, error: type[Exception]) -> Iterator[EngineOptions]:
    """``fedsample run --workers N --ray-address A``: one Ray session for the whole experiment, yielding the
    ``simulate`` options (a :func:`ray_federation` per run, on this session); a cluster that cannot be reached
    is ``error`` (one line, exit 2)."""
    with ExitStack() as stack:
        try:
            stack.enter_context(ray_session(address, num_cpus=workers if address is None else None))
        except (ConnectionError, RuntimeError) as failure:
            raise error(f"--ray-address {address}: cannot connect to Ray ({str(failure).splitlines()[0]})") from None
        options: EngineOptions = {"federation": ray_federation(workers=workers, address=address)}
        yield options
