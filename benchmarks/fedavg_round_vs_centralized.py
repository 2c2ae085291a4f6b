"""A FedAvg round (10 clients × 600 samples, 1 epoch, batch 32, MLP) on the vectorized federation ÷ the
centralized pass over the same 6,000 samples (1 epoch, batch 32, the library's LocalSGD on pooled data).
Goal <= 1.1.

Run: python benchmarks/fedavg_round_vs_centralized.py [--smoke]
"""

from __future__ import annotations

import numpy as np
import torch

from _common import arguments, best_of, dataset, emit, footer, header, peak_rss_mb

from fedsample import recipes
from fedsample.messages import ClientContext, LocalSample
from fedsample.data.types import FederatedData
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import MLP, initial_parameters
from fedsample.rng import client_rng
from fedsample.training.local import LocalSGD
from fedsample.federation.secure_sum import with_secure_sum


def main(smoke: bool) -> None:
    header(smoke)
    clients, per_client = (4, 64) if smoke else (10, 600)
    n = clients * per_client
    ds = dataset(smoke)
    fed = FederatedData.from_client_indices(ds, [np.arange(k * per_client, (k + 1) * per_client) for k in range(clients)])
    strategy = recipes.fedavg(clients_per_round=clients, lr=0.05, epochs=1, batch_size=32)
    module = MLP(hidden=64).build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    sim = VectorizedSimulator(fed, module, seed=0)
    state = strategy.init_state(params)
    rows = torch.arange(n)
    pooled = ClientContext(0, torch.as_tensor(ds.x_train)[rows], torch.as_tensor(ds.y_train)[rows], module, ds.task, ds.num_classes)
    solver = LocalSGD(lr=0.05, epochs=1, batch_size=32)
    central = lambda: solver.run(pooled, LocalSample(np.arange(n)), params, 0, client_rng(0, 0, 0, "train"))  # noqa: E731
    for _ in range(2):  # interleave to share the machine's load fairly between the two
        round_s = best_of(lambda: strategy.round(with_secure_sum(sim, strategy.secure_sum), params, state, 0, 0), repeats=3)
        central_s = best_of(central, repeats=3)
    emit("dataset", ds.name)
    emit("clients_x_samples", f"{clients} x {per_client}")
    emit("fedavg_round_s", round_s)
    emit("centralized_epoch_s", central_s)
    emit("fedavg_round_vs_centralized", round_s / central_s)
    emit("peak_rss_mb", peak_rss_mb())
    footer()


if __name__ == "__main__":
    main(arguments(__doc__).parse_args().smoke)
