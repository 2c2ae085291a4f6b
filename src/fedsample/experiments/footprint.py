"""A worker process's peak memory, estimated from what it will hold (the preset's model and data, and whether the
engine stacks the cohort's clients), so that ``--jobs`` never starts more processes than the machine's available
memory holds (:func:`fedsample.runtime.memory.capped_processes`).

The estimate counts what a worker holds for certain and leaves out what it cannot know before training (the
activations of a batch, the allocator's slack), so it errs low: a cap it sets is needed, and one it does not set
may still be (a worker killed for memory is then named in one line, fedsample.experiments.execute).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsample.data.types import Dataset, FederatedData
from fedsample.federation.choose import expected_cohort
from fedsample.simulation import build_module

__all__ = ["WORKER_BASE", "plan_worker_peak", "worker_peak"]

WORKER_BASE = 300 * 2**20
"""A spawned worker with Python, torch and fedsample imported, before it holds any data (measured: 249 MiB of
maximum resident memory on this project's CPU machine, rounded up)."""


def dataset_bytes(dataset: Dataset) -> int:
    """The bytes of a dataset's arrays (both splits)."""
    return sum(int(np.asarray(a).nbytes) for a in (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test))


def worker_peak(data: int, parameters: int, stacked: float = 1.0) -> float:
    """A worker's peak bytes: :data:`WORKER_BASE`, two copies of the ``data`` bytes (the plan it receives,
    unpickled, and the clients' partition of it), and the model's float32 ``parameters`` 4 times (model, gradient,
    the local optimizer's and the server's states) plus 3 times per ``stacked`` client (the vectorized engine's
    stacked parameters, gradients and updates; 1 for the loop engine)."""
    return WORKER_BASE + 2.0 * data + 4.0 * parameters * (4.0 + 3.0 * stacked)


def plan_worker_peak(model: Any, fed: FederatedData, strategies: list[Any], backend: str = "auto") -> float:
    """:func:`worker_peak` of a worker that runs ``strategies`` on ``fed`` with ``model``: the largest expected
    cohort of any strategy stacked unless the engine is the loop (``backend="auto"`` may stack)."""
    parameters = sum(p.numel() for p in build_module(model, fed).parameters())
    cohorts = [expected_cohort(s.clients, fed.num_clients, fed.sizes()) for s in strategies]
    stacked = 1.0 if backend == "loop" or not cohorts else max(cohorts)
    return worker_peak(dataset_bytes(fed.dataset), parameters, stacked)
