"""Shared by the device tests: every recipe at a tiny size, and a run that records what the server saw
(the cohort of every call, every size report) so two runs can be compared draw for draw."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fedsample.messages import payloads_for
from fedsample import recipes
from fedsample.models import MLP
from fedsample.simulation import make_federation, simulate
from fedsample.strategy import Strategy
from helpers import blobs, federate
from fedsample.simulation import Engine

SIZES = [4, 3, 7, 12, 20, 33, 2, 9, 5, 15]

SMALL: dict[str, Callable[[], Strategy]] = {  # every registered recipe, sized for 10 clients of 2 to 33 samples
    "fedavg": lambda: recipes.fedavg(clients_per_round=4, batch_size=4),
    "weighted_fedavg": lambda: recipes.weighted_fedavg(clients_per_round=4, batch_size=4, local_momentum=0.5),
    "fedprox": lambda: recipes.fedprox(mu=0.1, clients_per_round=4, batch_size=4),
    "fednova": lambda: recipes.fednova(clients_per_round=5, steps=3, batch_size=4, local_momentum=0.5),
    "fedavgm": lambda: recipes.fedavgm(clients_per_round=4, batch_size=4),
    "fedadam": lambda: recipes.fedadam(clients_per_round=4, batch_size=4),
    "fedyogi": lambda: recipes.fedyogi(clients_per_round=4, batch_size=4),
    "fedadagrad": lambda: recipes.fedadagrad(clients_per_round=4, batch_size=4),
    "fedsampling": lambda: recipes.fedsampling(K=40, epsilon=3.0, M=30),
    "fedsampling_naive": lambda: recipes.fedsampling_naive(ratio=0.3),
    "centralized": lambda: recipes.centralized(K=40),
    "fedsts": lambda: recipes.fedsts(H=2, m=3, dim=3, steps=2, batch_size=8),
    "fedstas": lambda: recipes.fedstas(H=2, m=3, dim=3, eta=40, M=30, steps=2, batch_size=8),
    "iwds": lambda: recipes.iwds(clients_per_round=4, batch_size=4),
    "isfedavg": lambda: recipes.isfedavg(L=4, batch_size=3, epochs=2, update="cheap"),
}


class Recorder:
    """A federation that passes every call through and keeps (procedure, round, client ids) and the size reports."""

    def __init__(self, federation: Any) -> None:
        self.federation = federation
        self.calls: list[tuple[str, int, list[int]]] = []
        self.size_reports: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.federation, name)

    def run(self, client_ids, payload, round) -> list[Any]:
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        self.calls.append((procedure, round, [int(k) for k in np.asarray(client_ids)]))
        reports = self.federation.run(client_ids, payload, round)
        if procedure == "report_size":
            self.size_reports.append([int(r) for r in reports])
        return reports


def small_images(n: int = 200, side: int = 8, classes: int = 3) -> Any:
    """Random ``(1, side, side)`` images whose class shifts the mean of one quadrant (a CNN can learn it)."""
    from fedsample.data.types import Dataset

    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, n + 40)
    x = rng.normal(size=(n + 40, 1, side, side)).astype(np.float32)
    for c in range(classes):
        x[y == c, 0, : side // 2, c : c + side // 2] += 1.5
    return Dataset("small-images", x[:n], y[:n], x[n:], y[n:], classes)


def recorded_run(
    name: str, backend: str, device: str, rounds: int = 3, setup: Callable[[Any], None] | None = None, images: bool = False
) -> tuple[Any, Recorder]:
    """Run recipe ``name`` on ``device`` through a :class:`Recorder` (MLP on blobs, or with ``images`` a small
    CNN on small images); ``setup`` may adjust the federation first."""
    from fedsample.models import CNN

    fed = federate(small_images() if images else blobs(n=200), SIZES)
    strategy, spec = SMALL[name](), (CNN(channels=(4, 8), hidden=16) if images else MLP(hidden=8))
    data = fed.pooled() if strategy.pooled else fed
    module = spec.build(data.dataset.input_shape, data.dataset.num_classes).to(device)
    federation = make_federation(backend, data, module, seed=5, device=device)
    if setup is not None:
        setup(federation)
    recorder = Recorder(federation)
    result = simulate(strategy, fed, module, rounds=rounds, seed=5, eval_every=rounds, engine=Engine(federation=recorder, device=device))
    return result, recorder
