"""Scaling a round over Ray actors (fedsample[ray]): a FedAvg round (100 clients x 600 samples, CNN) and a
FedSampling round on 10^6 clients, on the single-process vectorized engine and on 1, 2 and 4 actors of one
CPU each (a local Ray started here). Prints each round's time (best of a few after a warm-up), the speed-up
over the single-process engine, the overhead of one actor over the single process, and the bytes that cross
per round (pickled arguments and answers of every actor call, measured in a separate round). Goals: overhead
< 50 ms at 2 actors; speed-up >= 1.6x at 2 actors where the round is compute-bound (needs >= 2 free cores).

Run: python benchmarks/ray_scaling.py [--cohort 100] [--steps N] [--actors 1,2,4] [--skip-million] [--smoke]

``--smoke``: 10 clients of 50 rows (cohort 2, 1 step), 10,000 clients instead of 10^6, 1 actor, one timed call.
Without Ray installed (the ``ray`` extra) it says so and times the single-process rounds only.
"""

from __future__ import annotations

import importlib.util
import os
import time
from contextlib import nullcontext

import numpy as np

from _common import arguments, best_of, dataset, emit, footer, header, skipped

from fedsample import recipes
from fedsample.data.types import Dataset, FederatedData
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import CNN, initial_parameters
from fedsample.federation.secure_sum import with_secure_sum


def fedavg_case(cohort: int, steps: int | None, smoke: bool = False):
    """100 clients x 600 samples of the image dataset (smoke: 10 x 50), the McMahan CNN, ``cohort`` clients per round."""
    ds = dataset(smoke)
    clients, per_client = (10, 50) if smoke else (100, 600)
    fed = FederatedData.from_client_indices(ds, [np.arange(k * per_client, (k + 1) * per_client) % ds.num_train for k in range(clients)])
    strategy = recipes.fedavg(clients_per_round=cohort, lr=0.05, epochs=None if steps else 1, steps=steps, batch_size=32)
    emit("fedavg_dataset", ds.name)
    return f"fedavg_cnn_cohort{cohort}", fed, CNN().build(ds.input_shape, ds.num_classes), strategy


def fedsampling_case(clients: int = 1_000_000):
    """10^6 clients with log-normal sizes (mean about 2) of a one-feature dataset, a linear model, K = 2048."""
    import torch

    rng = np.random.default_rng(0)
    sizes = np.maximum(1, np.round(rng.lognormal(0, 1.2, clients) * 2 / np.exp(0.72))).astype(np.int64)
    rows = int(sizes.sum())
    x = rng.normal(size=(rows, 1)).astype(np.float32)
    ds = Dataset("synthetic", x, (x[:, 0] > 0).astype(np.int64), x[:1], np.zeros(1, dtype=np.int64), 2)
    fed = FederatedData(ds, np.arange(rows, dtype=np.int64), np.concatenate([[0], np.cumsum(sizes)]))
    name = "fedsampling_1m_clients" if clients == 1_000_000 else f"fedsampling_{clients}_clients"
    return name, fed, torch.nn.Linear(1, 2), recipes.fedsampling(K=2048, epsilon=3.0, M=300, server_lr=0.5)


def measure(name: str, fed: FederatedData, module, strategy, actors: list[int], repeats: int) -> None:
    params = initial_parameters(module, 0)
    param_bytes = sum(v.numel() * v.element_size() for v in params.values())

    def round_on(federation) -> float:
        state = strategy.init_state(params)
        return best_of(lambda: strategy.round(with_secure_sum(federation, strategy.secure_sum), params, state, 0, 0), repeats=repeats)

    t = time.perf_counter()
    single = round_on(VectorizedSimulator(fed, module, seed=0))
    emit(f"{name}.clients", fed.num_clients)
    emit(f"{name}.parameter_bytes", param_bytes)
    emit(f"{name}.single_process_round_s", single)
    for n in actors:
        from fedsample.federation.ray import RayFederation

        start = time.perf_counter()
        federation = RayFederation(fed, module, seed=0, workers=n)
        emit(f"{name}.actors{n}.start_s", time.perf_counter() - start)
        on_ray = round_on(federation)
        federation.close()
        counting = RayFederation(fed, module, seed=0, workers=n, count_bytes=True)
        strategy.round(with_secure_sum(counting, strategy.secure_sum), params, strategy.init_state(params), 0, 0)
        counting.close()
        emit(f"{name}.actors{n}.round_s", on_ray)
        emit(f"{name}.actors{n}.speedup", single / on_ray)
        emit(f"{name}.actors{n}.bytes_sent", counting.traffic["sent"])
        emit(f"{name}.actors{n}.bytes_received", counting.traffic["received"])
        if n == 1:
            emit(f"{name}.actors1.overhead_s", on_ray - single)
    emit(f"{name}.wall_s", time.perf_counter() - t)
    emit(f"{name}.loadavg", " ".join(f"{v:.1f}" for v in os.getloadavg()))


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--cohort", type=int, default=100, help="FedAvg clients per round (default 100)")
    parser.add_argument("--steps", type=int, default=None, help="local steps instead of one epoch")
    parser.add_argument("--actors", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-million", action="store_true")
    parser.add_argument("--skip-fedavg", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.cohort, args.steps, args.actors, args.repeats = 2, 1, "1", 1
    actors = [int(a) for a in args.actors.split(",")]
    header(args.smoke)
    if importlib.util.find_spec("ray") is not None:
        from fedsample.federation.ray import ray_session

        session = ray_session(num_cpus=max(actors))
    else:
        skipped("every Ray actor round", "Ray is not installed (the `ray` extra: pip install -e '.[ray]'); "
                "timing the single-process rounds only")
        actors, session = [], nullcontext()
    with session:
        if not args.skip_fedavg:
            measure(*fedavg_case(args.cohort, args.steps, args.smoke), actors, args.repeats)
        if not args.skip_million:
            measure(*fedsampling_case(10_000 if args.smoke else 1_000_000), actors, args.repeats)
    footer()


if __name__ == "__main__":
    main()
