"""A FedAvg round (10 clients × 600 samples, 1 epoch, batch 32, MLP) on the vectorized federation ÷ the
centralized pass over the same 6,000 samples (1 epoch, batch 32, the library's LocalSGD on pooled data).
Goal <= 1.1.

Run: python benchmarks/fedavg_round_vs_centralized.py
"""

from __future__ import annotations

import numpy as np
import torch

from _common import best_of, dataset, emit, peak_rss_mb

from fedsample import recipes
from fedsample.messages import ClientContext, LocalSample
from fedsample.data.types import FederatedData
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import MLP, initial_parameters
from fedsample.rng import client_rng
from fedsample.training.local import LocalSGD
from fedsample.federation.secure_sum import with_secure_sum


def main() -> None:
    ds = dataset()
    fed = FederatedData.from_client_indices(ds, [np.arange(k * 600, (k + 1) * 600) for k in range(10)])
    strategy = recipes.fedavg(clients_per_round=10, lr=0.05, epochs=1, batch_size=32)
    module = MLP(hidden=64).build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    sim = VectorizedSimulator(fed, module, seed=0)
    state = strategy.init_state(params)
    rows = torch.arange(6000)
    pooled = ClientContext(0, torch.as_tensor(ds.x_train)[rows], torch.as_tensor(ds.y_train)[rows], module, ds.task, ds.num_classes)
    solver = LocalSGD(lr=0.05, epochs=1, batch_size=32)
    central = lambda: solver.run(pooled, LocalSample(np.arange(6000)), params, 0, client_rng(0, 0, 0, "train"))  # noqa: E731
    for _ in range(2):  # interleave to share the machine's load fairly between the two
        round_s = best_of(lambda: strategy.round(with_secure_sum(sim, strategy.secure_sum), params, state, 0, 0), repeats=3)
        central_s = best_of(central, repeats=3)
    emit("dataset", ds.name)
    emit("fedavg_round_s", round_s)
    emit("centralized_epoch_s", central_s)
    emit("fedavg_round_vs_centralized", round_s / central_s)
    emit("peak_rss_mb", peak_rss_mb())


if __name__ == "__main__":
    main()
