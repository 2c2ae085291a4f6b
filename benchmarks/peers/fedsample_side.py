"""fedsample on a peers workload: ``recipes.fedavg`` with the workload's settings on one backend (loop,
vectorized, auto). Run by run.py with the project's python and ``PYTHONPATH=src``:
``python benchmarks/peers/fedsample_side.py WORKLOAD_FILE WORKLOAD BACKEND THREADS ROUNDS``."""

from __future__ import annotations

import sys

import numpy as np

from workload import Workload, emit_result, load_rows, model_spec, set_threads, timed_rounds, workload_named


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
    from fedsample.models import initial_parameters
    from fedsample.federation.secure_sum import with_secure_sum
    from fedsample.simulation import build_module, make_federation, resolve_backend

    w = workload_named(workload)
    fed, source = federated_data(path, w)
    module = build_module(model_spec(w), fed)
    strategy = recipes.fedavg(clients_per_round=w.cohort, lr=w.lr, epochs=w.epochs, steps=w.steps, batch_size=w.batch,
                              server_lr=w.server_lr)
    choice = resolve_backend(backend, strategy, fed, module)
    federation = make_federation(choice.backend, fed, module, seed=0)
    params = initial_parameters(module, 0)
    state = strategy.init_state(params)
    current = {"params": params}

    def one_round(t: int) -> None:
        current["params"], _ = strategy.round(with_secure_sum(federation, strategy.secure_sum), current["params"], state, t, 0)

    first, times = timed_rounds(one_round, rounds)
    emit_result(f"fedsample-{backend}", first, times, data=source, threads=threads,
                engine=f"{choice.backend} ({choice.reason})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
