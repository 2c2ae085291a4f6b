"""A simulation over a pool of local worker processes: every core, without Ray.

``simulate(..., engine=Engine(workers=2))`` (or ``backend="auto"`` where its rule picks it, :mod:`fedsample.federation.choose`)
trains the clients on a :class:`PoolFederation`: ``workers`` processes of this machine, each with ``threads``
torch threads, each holding the clients ``k mod workers`` (:mod:`fedsample.federation.shards`, the split the Ray
federation uses) and running an in-process engine (``"vectorized"`` or ``"loop"``) on its share of every call
(:class:`~fedsample.federation.sharded.ClientShard`). The server's side is the Ray federation's:
:func:`~fedsample.federation.sharded.sharded_replies`, whose fused weighted sum asks each worker for its partial
sum, so a round moves the global parameters to each worker and one parameter-sized sum back.

Every client's draws come from (seed, round, client, purpose), so the per-client numbers (cohorts, draws,
losses, updates) are the single-process engine's whatever the number of workers; the aggregate differs only by
the order in which float32 partial sums are added (tested for 1, 2 and 3 workers).

Memory: each worker receives its own clients' training rows once, at start, streamed in pieces of at most
:data:`PIECE_BYTES` (no copy of the whole dataset in any process: the shards together hold the training split
once); the server process keeps the dataset it was given and sends nothing else but the calls.

The workers are fresh interpreters (``python -c``), not forks: forking a process whose torch has started its
OpenMP threads can hang the child, and a fresh interpreter does not re-run the user's ``__main__``. So the model
and the strategy's parts must be importable by name (not classes defined in ``__main__`` or a notebook); the
workers see this process's ``sys.path``. POSIX only (a socket pair per worker, passed as a file descriptor).
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Callable, Iterator, Mapping

import numpy as np
import torch
from torch import nn

from fedsample import checks
from fedsample.data.types import FederatedData
from fedsample.runtime.device import use_threads
from fedsample.runtime.heap import freeze_heap
from fedsample.federation.base import Federation, FederationFactory
from fedsample.federation.sharded import ClientShard, states_of, worker_replies
from fedsample.federation.shards import as_range, assign_clients, positions_by_worker, shard_holding, shard_rows
from fedsample.messages import ClientState, payloads_for, unplanned
from fedsample.rounds import FederationLost, ReplyList

__all__ = ["PoolFederation", "PoolFederationFactory", "WorkerLost", "pool_federation", "procedures", "serve"]

PIECE_BYTES = 16 * 2**20
"""The most bytes of training rows gathered at once while a worker's shard is sent."""
START_TIMEOUT_S = 300.0


class WorkerLost(FederationLost):
    """A worker process holding clients died; resume from the last checkpoint on a fresh federation."""


class PoolFederation(Federation):
    """``workers`` local processes holding the clients ``k mod workers`` (see the module docstring); ``engine``
    is the in-process federation each runs (``"vectorized"`` or ``"loop"``), ``threads`` its torch threads.
    :meth:`close` (or the factory's context) stops them."""

    def __init__(
        self, data: FederatedData, module: nn.Module, seed: int, workers: int = 2, engine: str = "vectorized",
        memory_budget: int | None = None, threads: int = 1, start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        checks.validate("PoolFederation", {"workers": workers, "threads": threads, "engine": engine},
                        {"workers": checks.COUNT, "threads": checks.COUNT, "engine": checks.Options("vectorized", "loop")})
        from fedsample.federation.vectorized import DEFAULT_MEMORY_BUDGET

        self.data, self.seed, self.workers, self.engine, self.threads = data, seed, int(workers), engine, int(threads)
        self.owner = assign_clients(data.num_clients, self.workers)
        self._token = 0
        self._procs: list[subprocess.Popen[bytes]] = []
        self._conns: list[Connection] = []
        try:
            for w in range(self.workers):
                self._start(w)
            for w in range(self.workers):
                self._send_shard(w, module, memory_budget or DEFAULT_MEMORY_BUDGET)
            for w in range(self.workers):
                if not self._conns[w].poll(start_timeout):
                    raise RuntimeError(f"pool worker {w} did not start in {start_timeout:g} s")
                self._answer(w)
        except BaseException:
            self.close()
            raise

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (to read their memory, say)."""
        return [p.pid for p in self._procs]

    def run(self, client_ids: np.ndarray, request: object, round: int) -> ReplyList:
        ids = np.asarray(client_ids, dtype=np.int64)
        sent = payloads_for(unplanned(request), len(ids))  # the planned sum stays here: the workers sum their shares
        self._token += 1
        parts = positions_by_worker(ids, self.owner, self.workers)
        calls = {
            w: ("run", as_range(ids[p]), sent.take(p) if sent.shared is None else sent.shared, round)
            for w, p in enumerate(parts) if len(p)
        }
        answers = self._call_each(calls, self._token)
        # where the call trains, updates stay on the workers (ClientShard.run)
        return worker_replies(self, self._token, parts, answers, sent.procedure.name, sent.procedure.update, len(ids))

    def client_states(self) -> dict[int, ClientState]:
        """Every worker's non-empty client-held states, by client id (for checkpoints)."""
        states: dict[int, ClientState] = {}
        for w, part in self._ask({w: ("client_states",) for w in range(self.workers)}).items():
            states.update(states_of(part, w))
        return states

    def load_client_states(self, states: dict[int, ClientState]) -> None:
        """Give each worker its clients' states (clients not in ``states`` start empty)."""
        mine = {w: ("load_client_states", {k: s for k, s in states.items() if self.owner[int(k)] == w}) for w in range(self.workers)}
        self._ask(mine)

    def close(self) -> None:
        """Stop the workers (their clients' data and state go with them)."""
        for conn in self._conns:
            try:
                conn.send_bytes(pickle.dumps(("stop",)))
            except OSError:
                pass
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []

    def __enter__(self) -> "PoolFederation":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- calls ------------------------------------------------------------------------------------------

    def _call_each(self, calls: Mapping[int, tuple[object, ...]], token: int) -> dict[int, object]:
        """Call ``method(*args, token)`` on each named worker (the calls of :class:`~fedsample.federation.sharded.ShardedUpdates`)."""
        return self._ask({w: (*call, token) for w, call in calls.items()})

    def _ask(self, calls: Mapping[int, tuple[object, ...]]) -> dict[int, object]:
        """Call ``method(*args)`` on each named worker (``calls``: worker -> (method, *args)); they work in
        parallel; the answers by worker, unpickled (``_answer``), read by the caller as what each call answers
        (:mod:`fedsample.federation.sharded`'s readers)."""
        for w, (name, *args) in calls.items():
            self._send(w, pickle.dumps((name, tuple(args)), protocol=pickle.HIGHEST_PROTOCOL))
        return {w: self._answer(w) for w in calls}

    def _send(self, w: int, blob: bytes | memoryview) -> None:
        try:
            self._conns[w].send_bytes(blob)
        except OSError as error:
            raise self._lost(w, error) from None

    def _answer(self, w: int) -> object:
        """Worker w's next answer (what pickle reads from its pipe: an object of no declared type); its error raised
        here (one line naming the worker and the error)."""
        try:
            kind, value = pickle.loads(self._conns[w].recv_bytes())
        except (EOFError, OSError) as error:
            raise self._lost(w, error) from None
        if kind == "error":
            raise RuntimeError(f"pool worker {w}: {value}")
        return value

    def _lost(self, w: int, error: BaseException) -> WorkerLost:
        code = self._procs[w].poll() if w < len(self._procs) else None
        return WorkerLost(f"pool worker {w} is gone ({type(error).__name__}, exit status {code}); rerun with --resume "
                          "(resume=True) to continue from the last checkpoint")

    # --- start ------------------------------------------------------------------------------------------

    def _start(self, w: int) -> None:
        """Start worker w: a fresh interpreter with this process's import path and ``threads`` threads, talking
        over a socket pair."""
        mine, theirs = socket.socketpair()
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads),
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        code = f"from fedsample.federation.pool import serve; serve({theirs.fileno()})"
        proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self._procs.append(proc)
        self._conns.append(Connection(mine.detach()))

    def _send_shard(self, w: int, module: nn.Module, memory_budget: int) -> None:
        """Worker w's start message (model, seed, engine, threads, its shard's layout) and its training rows, in
        pieces of at most :data:`PIECE_BYTES`."""
        rows, offsets = shard_rows(self.data, self.owner, w)
        ds = self.data.dataset
        skeleton = shard_holding(self.data, ds.x_train[:0], ds.y_train[:0], np.zeros(self.data.num_clients + 1, dtype=np.int64))
        shapes = [(tuple(a.shape[1:]), a.dtype.str) for a in (ds.x_train, ds.y_train)]
        start = {"module": module, "seed": self.seed, "engine": self.engine, "memory_budget": memory_budget,
                 "threads": self.threads, "skeleton": skeleton, "offsets": offsets, "rows": len(rows), "shapes": shapes}
        self._send(w, pickle.dumps(start, protocol=pickle.HIGHEST_PROTOCOL))
        for array in (ds.x_train, ds.y_train):
            per_row = max(1, int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
            step = max(1, PIECE_BYTES // per_row)
            for a in range(0, len(rows), step):
                piece = np.ascontiguousarray(array[rows[a : a + step]])
                self._send(w, piece.data.cast("B"))


# --- the worker's side ----------------------------------------------------------------------------------------


def serve(fd: int) -> None:
    """A pool worker's main loop on the socket ``fd``: receive the start message and the shard's rows, build the
    :class:`~fedsample.federation.sharded.ClientShard`, then answer calls (``("ok", value)`` or ``("error",
    line)``) until told to stop or the server goes away."""
    conn = Connection(fd)
    try:
        start = pickle.loads(conn.recv_bytes())
        use_threads(start["threads"])
        held = [_receive_rows(conn, start["rows"], shape, dtype) for shape, dtype in start["shapes"]]
        shard = shard_holding(start["skeleton"], held[0], held[1], start["offsets"])
        answers = procedures(ClientShard(shard, start["module"], start["seed"], start["memory_budget"], start["engine"]))
        freeze_heap()  # torch's, the rows' and the engine's objects out of every collection (fedsample.runtime.heap)
    except (EOFError, OSError):
        return
    except BaseException as error:  # noqa: BLE001 - said to the server, which raises it
        conn.send_bytes(pickle.dumps(("error", _line(error))))
        return
    conn.send_bytes(pickle.dumps(("ok", os.getpid())))
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        name, args = message
        try:
            if name not in answers:
                raise AttributeError(f"a pool worker has no procedure {name!r}; it answers {', '.join(answers)}")
            answer = ("ok", answers[name](*args))
        except BaseException as error:  # noqa: BLE001 - said to the server, which raises it
            answer = ("error", _line(error))
        conn.send_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))


def procedures(worker: ClientShard) -> dict[str, Callable[..., object]]:
    """What a pool worker answers, by the name the server calls it by (:meth:`PoolFederation._ask`): its
    :class:`~fedsample.federation.sharded.ClientShard`'s procedures."""
    return {"run": worker.run, "weighted_update_sum": worker.weighted_update_sum, "updates": worker.updates,
            "held_rows": worker.held_rows, "client_states": worker.client_states, "load_client_states": worker.load_client_states}


def _receive_rows(conn: Connection, rows: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """``rows`` rows of ``shape`` and ``dtype`` received in the pieces :meth:`PoolFederation._send_shard` sends."""
    out = np.empty((rows, *shape), dtype=np.dtype(dtype))
    flat = out.reshape(-1).data.cast("B") if out.size else memoryview(bytearray())
    at = 0
    while at < len(flat):
        at += conn.recv_bytes_into(flat, at)
    return out


def _line(error: BaseException) -> str:
    """An error as one line, with where it was raised."""
    where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    place = f" (at {os.path.basename(where.filename)}:{where.lineno})" if where else ""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}{place}"


# --- the factory ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolFederationFactory(FederationFactory):
    """A :class:`PoolFederation` for one run (:func:`pool_federation`)."""

    workers: int = 2
    engine: str = "vectorized"
    threads: int = 1

    @contextmanager
    def open(
        self, data: FederatedData, module: nn.Module, seed: int, *, memory_budget: int | None = None,
        device: torch.device | str = "cpu",
    ) -> Iterator[PoolFederation]:
        """The workers, stopped at the end, also on error."""
        if torch.device(device).type != "cpu":
            raise ValueError(f"a process pool computes on this machine's CPU cores; got device={str(device)!r}")
        federation = PoolFederation(data, module, seed, workers=self.workers, engine=self.engine, memory_budget=memory_budget,
                                    threads=self.threads)
        try:
            yield federation
        finally:
            federation.close()


def pool_federation(workers: int = 2, engine: str = "vectorized", threads: int = 1) -> PoolFederationFactory:
    """The clients of a ``simulate`` run split over ``workers`` local processes of ``threads`` torch threads each,
    each running ``engine``; the single-process engine's numbers (see the module docstring)."""
    return PoolFederationFactory(workers, engine, threads)
