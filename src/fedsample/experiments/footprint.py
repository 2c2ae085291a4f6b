"""A worker process's peak memory, estimated from what it will hold (the preset's model and data, and whether the
engine stacks the cohort's clients), so that ``--jobs`` never starts more processes than the machine's available
memory holds (:func:`fedsample.runtime.memory.capped_processes`).

The estimate counts what a worker holds for certain and leaves out what it cannot know before training (the
activations of a batch, the allocator's slack), so it errs low: a cap it sets is needed, and one it does not set
may still be (a worker killed for memory is then named in one line, fedsample.experiments.execute).
"""

from __future__ import annotations

import numpy as np

from fedsample import parts
from fedsample.data.types import Dataset, FederatedData
from fedsample.federation.choose import expected_cohort
from fedsample.federation.vectorized import DEFAULT_MEMORY_BUDGET
from fedsample.simulation import Model, build_module
from fedsample.strategy import Strategy

__all__ = ["WORKER_BASE", "plan_worker_peak", "stacked_clients", "worker_peak"]

WORKER_BASE = 300 * 2**20
"""A spawned worker with Python, torch and fedsample imported, before it holds any data (measured: 249 MiB of
maximum resident memory on this project's CPU machine, rounded up)."""


def dataset_bytes(dataset: Dataset) -> int:
    """The bytes of a dataset's arrays (both splits)."""
    return sum(int(np.asarray(a).nbytes) for a in (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test))


def worker_peak(data: int, parameters: int, stacked: float = 1.0, chunk: float = DEFAULT_MEMORY_BUDGET) -> float:
    """A worker's peak bytes: :data:`WORKER_BASE`, two copies of the ``data`` bytes (the plan it receives,
    unpickled, and the clients' partition of it), and the model's float32 ``parameters`` 4 times (model, gradient,
    the local optimizer's and the server's states) plus 3 times per ``stacked`` client (the vectorized engine's
    stacked parameters, gradients and updates; 1 for the loop engine), those at most ``chunk`` bytes: the engine
    stacks a cohort in chunks that fit its memory budget (:data:`~fedsample.federation.vectorized.DEFAULT_MEMORY_BUDGET`)."""
    per_client = 4.0 * parameters * 3.0
    return WORKER_BASE + 2.0 * data + 4.0 * parameters * 4.0 + min(per_client * stacked, max(per_client, chunk))


def plan_worker_peak(model: Model, fed: FederatedData, strategies: list[Strategy], backend: str = "auto") -> float:
    """:func:`worker_peak` of a worker that runs ``strategies`` on ``fed`` with ``model``: the largest expected
    cohort of any strategy that stacks its clients (:func:`stacked_clients`) unless the engine is the loop
    (``backend="auto"`` may stack)."""
    parameters = sum(p.numel() for p in build_module(model, fed).parameters())
    cohorts = [stacked_clients(s, fed) for s in strategies]
    stacked = 1.0 if backend == "loop" or not cohorts else max(cohorts)
    return worker_peak(dataset_bytes(fed.dataset), parameters, stacked)


def stacked_clients(strategy: Strategy, fed: FederatedData) -> float:
    """The clients the vectorized engine stacks for ``strategy``: its expected cohort where its clients take several
    local steps; 1 where every client takes one step (FedSampling's one gradient, one whole-sample step), which
    the engine trains as one forward/backward over the union of the drawn rows, with no copy of the model per client
    (counting FedSampling's 30,000 asked clients as stacked estimated 16 GiB per worker for a run that peaks at 1 GB,
    benchmarks/README.md, and capped ``--jobs`` at 1)."""
    solver = strategy.local
    if parts.batched(solver) and solver.single_step(fed.sizes()):
        return 1.0
    return expected_cohort(strategy.clients, fed.num_clients, fed.sizes())
