"""One round of every recipe, and of four reference workloads, on the loop engine, the vectorized engine and
``backend="auto"``, timed in one run: the ratio auto ÷ the better of the two (goal ≤ 1.1) and the engine auto
picked. Prints the machine, the date and the load average beside the figures.

Workloads: every recipe with its defaults on Fashion-MNIST in 100 IID clients, MLP(64); the CIFAR-10 workload
of pfl-research's benchmark (1,000 users × 50 images, 50 users per round, 1 epoch, batch 10, lr 0.1, the
PflCNN model with dropout; synthetic images of CIFAR-10's shape, labelled as such); the quickstart preset's
strategies (digits, log-normal sizes); IWDS (10 clients × 6,000 Fashion-MNIST images, 5 per round, batch 32);
the FedSampling round of ``fedsampling_round_vs_centralized.py`` (MLP).

Each figure is the fastest of ``--repeats`` rounds after one warm-up round, engines interleaved round by
round so that load changes hit all three alike. Each row prints as soon as it is measured (a progress line per
workload on stderr); a workload's data is made when it is first needed. Fashion-MNIST must be installed
(Debian's ``dataset-fashion-mnist``); it is never replaced by another set (``--smoke``: its first rows, or
random images of its shape when it is missing, 20 clients instead of 100, 10 CIFAR-shaped users of 20 images,
2 per round, K = 128 for the FedSampling MLP round, one round per engine, its first).

Run: python benchmarks/vectorized_vs_loop_every_recipe.py [--threads 1] [--repeats 3] [--skip-cifar] [--only NAME] [--smoke]
"""

from __future__ import annotations

import os
import time
from functools import cache
from typing import Callable

import numpy as np
import torch

from _common import SMOKE_ROWS, arguments, dataset, emit, footer, header, progress

from fedsample import recipes
from fedsample.data import IID, LogNormalSizes, load_dataset, partition
from fedsample.data.types import Dataset, FederatedData
from fedsample.models import MLP, PflCNN, initial_parameters
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.simulation import make_federation, resolve_backend

ENGINES = ("loop", "vectorized", "auto")


def synthetic_cifar10(users: int = 1000, per_user: int = 50) -> FederatedData:
    """Random images of CIFAR-10's shape (3x32x32, 10 classes): the timing depends on the shape only."""
    rng = np.random.default_rng(0)
    n = users * per_user
    x = rng.normal(size=(n, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, n)
    ds = Dataset("synthetic-cifar10-shape", x, y, x[:100], y[:100], 10)
    return FederatedData.from_client_indices(ds, [np.arange(i * per_user, (i + 1) * per_user) for i in range(users)])


def workloads(only: str | None, skip_cifar: bool, smoke: bool = False) -> list[tuple[str, Callable, Callable[[], FederatedData], object]]:
    """(name, strategy factory, federated data factory, model spec) of every workload; the data is made on
    first use (and kept for the workloads that share it)."""
    fmnist = cache(lambda: dataset(smoke))
    clients = 20 if smoke else 100
    many = cache(lambda: partition(fmnist(), IID(num_clients=clients), seed=0))
    every = {
        "fedavg": {}, "weighted_fedavg": {}, "fedprox": {}, "fednova": {}, "fedavgm": {}, "fedadam": {}, "fedyogi": {},
        "fedadagrad": {}, "fedsampling": {"K": 2048}, "fedsampling_naive": {"ratio": 0.05}, "centralized": {"K": 2048},
        "fedsts": {"H": 4, "m": 10}, "fedstas": {"H": 4, "m": 10}, "iwds": {}, "isfedavg": {"L": 6, "batch_size": 4},
    }
    out = [(f"recipe:{name}", lambda name=name, p=p: recipes.recipe(name, **p), many, MLP(hidden=64)) for name, p in every.items()]
    if not skip_cifar:
        users, per_user, cohort = (10, 20, 2) if smoke else (1000, 50, 50)
        out.append(("cifar10_pfl_workload", lambda: recipes.fedavg(clients_per_round=cohort, lr=0.1, epochs=1, batch_size=10),
                    cache(lambda: synthetic_cifar10(users, per_user)), PflCNN()))
    digits = cache(lambda: partition(load_dataset("digits"), LogNormalSizes(mean=4, sigma=2), seed=0))
    quick = {
        "centralized": lambda: recipes.centralized(K=64, lr=0.5),
        "fedavg": lambda: recipes.fedavg(clients_per_round=16, steps=1, batch_size=1_000_000, lr=0.5),
        "weighted_fedavg": lambda: recipes.weighted_fedavg(clients_per_round=16, steps=1, batch_size=1_000_000, lr=0.5),
        "fedsampling": lambda: recipes.fedsampling(K=64, epsilon=3.0, M=20, server_lr=0.5),
        "fedsampling_naive": lambda: recipes.fedsampling_naive(ratio=0.045, server_lr=0.5),
    }
    out += [(f"quickstart:{name}", make, digits, MLP(hidden=64)) for name, make in quick.items()]
    ten = cache(lambda: partition(fmnist(), IID(num_clients=10), seed=0))
    out.append((f"iwds_10x{SMOKE_ROWS // 10 if smoke else 6000}", lambda: recipes.iwds(clients_per_round=5, batch_size=32), ten, MLP(hidden=64)))
    lognormal = cache(lambda: partition(fmnist(), LogNormalSizes(mean=2, sigma=4), seed=0))
    K = 128 if smoke else 2048
    out.append(("fedsampling_mlp_round", lambda: recipes.fedsampling(K=K, epsilon=3.0, M=300, server_lr=0.05), lognormal, MLP(hidden=64)))
    return [w for w in out if only is None or only in w[0]]


def time_rounds(make, data: FederatedData, spec, repeats: int) -> tuple[dict[str, float], str]:
    """Fastest round per engine (interleaved) after a warm-up round, and auto's choice; ``repeats=0`` (smoke
    mode) times the warm-up round itself."""
    strategy = make()
    if strategy.pooled:
        data = data.pooled()
    module = spec.build(data.dataset.input_shape, data.dataset.num_classes)
    params = initial_parameters(module, 0)
    choice = resolve_backend("auto", strategy, data, module)
    feds = {e: make_federation(choice.backend if e == "auto" else e, data, module, 0) for e in ENGINES}
    states = {e: strategy.init_state(params) for e in ENGINES}
    best = {e: float("inf") for e in ENGINES}
    for r in range(repeats + 1):  # round 0 warms up (and is the figure when repeats is 0)
        for e in ENGINES:
            start = time.perf_counter()
            strategy.round(with_secure_sum(feds[e], strategy.secure_sum), params, states[e], r, 0)
            if r or not repeats:
                best[e] = min(best[e], time.perf_counter() - start)
    return best, f"{choice.backend} ({choice.reason})"


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-cifar", action="store_true")
    parser.add_argument("--only", default=None, help="run the workloads whose name contains this")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    header(args.smoke)
    repeats = 0 if args.smoke else args.repeats
    print(f"{'workload':34} {'loop s':>9} {'vector s':>9} {'auto s':>9} {'auto/best':>9}  load  auto's pick", flush=True)
    worst = 0.0
    for name, make, data, spec in progress(workloads(args.only, args.skip_cifar, args.smoke), lambda w: w[0]):
        best, picked = time_rounds(make, data(), spec, repeats)
        ratio = best["auto"] / min(best["loop"], best["vectorized"])
        worst = max(worst, ratio)
        load = os.getloadavg()[0]
        print(f"{name:34} {best['loop']:9.4f} {best['vectorized']:9.4f} {best['auto']:9.4f} {ratio:9.2f}  {load:4.1f}  {picked}", flush=True)
    emit("worst_auto_vs_best", worst)
    footer()


if __name__ == "__main__":
    main()
