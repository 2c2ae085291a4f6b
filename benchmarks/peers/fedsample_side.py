"""fedsample on a peers workload: ``recipes.fedavg`` with the workload's settings on one backend (loop,
vectorized, auto). Run by run.py with the project's python and ``PYTHONPATH=src``:
``python benchmarks/peers/fedsample_side.py WORKLOAD_FILE WORKLOAD BACKEND THREADS ROUNDS``."""

from __future__ import annotations

import sys
from contextlib import ExitStack

import numpy as np

from workload import Workload, emit_result, load_rows, model_spec, peak_rss_mb, set_threads, timed_rounds, workload_named


RUN_ROUNDS = 100
"""The length of run a timed round stands for, given to the ``auto`` rule (which weighs a worker pool's start-up
against the run's rounds): the timed rounds are a sample of a long run, the start-up is in "time to round 1"."""


def federated_data(path: str, w: Workload):
    """The workload file as fedsample ``FederatedData``: user ``u`` owns rows ``u*per_user …``."""
    from fedsample.data.types import Dataset, FederatedData

    x, y, source = load_rows(path)
    ds = Dataset(source, x.numpy(), y.numpy(), x[:10].numpy(), y[:10].numpy(), 10)
    rows = np.arange(w.users * w.per_user).reshape(w.users, w.per_user)
    return FederatedData.from_client_indices(ds, list(rows)), source


def main(path: str, workload: str, backend: str, threads: int, rounds: int) -> None:
    set_threads(threads)
    from fedsample import recipes
    from fedsample.federation.pool import pool_federation
    from fedsample.runtime.heap import heap_frozen
    from fedsample.simulation import build_module, make_federation, resolve_backend

    w = workload_named(workload)
    fed, source = federated_data(path, w)
    module = build_module(model_spec(w), fed)
    strategy = recipes.fedavg(clients_per_round=w.cohort, lr=w.lr, epochs=w.epochs, steps=w.steps, batch_size=w.batch,
                              server_lr=w.server_lr)
    choice = resolve_backend(backend, strategy, fed, module, rounds=RUN_ROUNDS)
    with ExitStack() as stack:
        if choice.workers > 1:  # auto picked a pool of worker processes (started before round 1's clock stops)
            federation = stack.enter_context(pool_federation(choice.workers, choice.backend).open(fed, module, 0))
        else:
            federation = make_federation(choice.backend, fed, module, seed=0, client_threads=choice.client_threads)
        stack.enter_context(heap_frozen())  # as simulate runs its rounds (fedsample.runtime.heap)
        run(strategy, federation, module, choice, source, backend, threads, rounds)


def run(strategy, federation, module, choice, source: str, backend: str, threads: int, rounds: int) -> None:
    """Time ``rounds`` warm rounds after round 1 and print the result line."""
    from fedsample.federation.secure_sum import with_secure_sum
    from fedsample.models import initial_parameters

    params = initial_parameters(module, 0)
    state = strategy.init_state(params)
    current = {"params": params}

    def one_round(t: int) -> None:
        current["params"], _ = strategy.round(with_secure_sum(federation, strategy.secure_sum), current["params"], state, t, 0)

    first, times, cpu = timed_rounds(one_round, rounds)
    workers = [process_peak_mb(pid) for pid in getattr(federation, "pids", [])]  # a pool's workers hold the clients' rows
    memory = {"peak_rss_mb": peak_rss_mb() + sum(workers), "workers_peak_rss_mb": workers} if workers else {}
    emit_result(f"fedsample-{backend}", first, times, cpu, data=source, threads=threads,
                engine=f"{choice.backend} ({choice.reason})", workers=choice.workers,
                client_threads=choice.client_threads, **memory)


def process_peak_mb(pid: int) -> float:
    """Peak resident memory (``VmHWM``, MiB) of the process ``pid``: with a pool, the table's peak RSS is this
    process's plus its workers' (an upper bound of the peak they held at once)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
