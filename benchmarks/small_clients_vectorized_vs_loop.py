"""1,000 clients × 2 samples, one local SGD step each, uniform mean (a FedAvg round in FedSampling's regime):
the reference per-client loop ÷ the vectorized federation, one round each. Goal >= 20×.

Also prints the time from process start to the start of round 1 with the vectorized backend.
Run: python benchmarks/small_clients_vectorized_vs_loop.py [--smoke]
"""

from __future__ import annotations

import time

START = time.perf_counter()

import numpy as np  # noqa: E402

from _common import arguments, best_of, dataset, emit, footer, header, peak_rss_mb  # noqa: E402

CLIENTS, PER_CLIENT, HIDDEN, LR = 1000, 2, 64, 0.05
SMOKE_CLIENTS = 50


def setup(clients: int = CLIENTS, smoke: bool = False):
    """The shared set-up: data, federation, strategy, model."""
    from fedsample.data.types import FederatedData
    from fedsample.models import MLP
    from fedsample.sampling.clients import AllClients
    from fedsample.strategy import Strategy
    from fedsample.training.aggregate import WeightedMean
    from fedsample.training.local import LocalSGD

    ds = dataset(smoke)
    fed = FederatedData.from_client_indices(ds, [np.arange(k * PER_CLIENT, (k + 1) * PER_CLIENT) for k in range(clients)])
    strategy = Strategy(clients=AllClients(), local=LocalSGD(lr=LR, epochs=None, steps=1, batch_size=PER_CLIENT), aggregate=WeightedMean("uniform"), name="small")
    return ds, fed, strategy, MLP(hidden=HIDDEN)


def main(smoke: bool) -> None:
    from fedsample.federation.simulator import Simulator
    from fedsample.federation.vectorized import VectorizedSimulator
    from fedsample.models import initial_parameters

    header(smoke)
    ds, fed, strategy, spec = setup(SMOKE_CLIENTS if smoke else CLIENTS, smoke)
    module = spec.build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    vec = VectorizedSimulator(fed, module, seed=0)
    emit("vectorized_time_to_round_1_s", time.perf_counter() - START)
    loop = Simulator(fed, module, seed=0)
    state = strategy.init_state(params)
    p_vec, _ = strategy.round(vec, params, state, 0, 0)
    p_loop, _ = strategy.round(loop, params, state, 0, 0)
    emit("max_abs_param_difference", max(float((p_vec[k] - p_loop[k]).abs().max()) for k in params))
    vec_s = best_of(lambda: strategy.round(vec, params, state, 0, 0), repeats=5)
    loop_s = best_of(lambda: strategy.round(loop, params, state, 0, 0), repeats=3)
    emit("dataset", ds.name)
    emit("clients_x_samples", f"{fed.num_clients} x {PER_CLIENT}")
    emit("model_parameters", sum(v.numel() for v in params.values()))
    emit("vectorized_round_s", vec_s)
    emit("loop_round_s", loop_s)
    emit("small_clients_vectorized_vs_loop", loop_s / vec_s)
    emit("peak_rss_mb", peak_rss_mb())
    footer()


if __name__ == "__main__":
    main(arguments(__doc__).parse_args().smoke)
