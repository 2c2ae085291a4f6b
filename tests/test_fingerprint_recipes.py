"""Run fingerprints: every recipe's numbers, pinned to the bit on the loop and vectorized engines (and the pool for
two recipes), so that a refactor of the parts' declarations, the round or the ledger is checked against the numbers
the code gave before it. Each run is 2 rounds on 12 tiny clients; its fingerprint is a digest of the final parameters'
bytes and of the round records (every float written exactly, ``float.hex``), the privacy ledger's included.

``tests/fingerprints.json`` was written from main before issue 39's declarations changed, by
``python tests/test_fingerprint_recipes.py --write``; a change that is meant to move numbers rewrites it and says so."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import fedsample as fs
from fedsample.runtime.fingerprint import digest
from fedsample.privacy import Accounting, PerExampleNoise, UpdateNoise
from fedsample.sampling.clients import PoissonClients, UniformClients
from fedsample.training.aggregate import WeightedMean
from fedsample.simulation import Engine
from helpers import blobs, federate

FILE = Path(__file__).with_name("fingerprints.json")
SIZES = [int(s) for s in np.random.default_rng(1).integers(5, 25, size=12)]
LOCAL = dict(lr=0.05, steps=2, batch_size=4)

def _noised_mean(clients: object) -> fs.Strategy:
    """FedAvg's uniform mean with noised updates and no size reports: the client sampler's design amplifies."""
    base = fs.recipes.fedavg(clients_per_round=4, **LOCAL)
    return dataclasses.replace(base, clients=clients, aggregate=WeightedMean(by="uniform"), sizes=None,
                               noise=UpdateNoise(clip=1.0, noise_multiplier=1.0))


#: One small configuration of every recipe (and privacy-noised compositions, whose ledger and amplification are pinned too).
RUNS = {
    "fedavg": lambda: fs.recipes.fedavg(clients_per_round=4, **LOCAL),
    "weighted_fedavg": lambda: fs.recipes.weighted_fedavg(clients_per_round=4, **LOCAL),
    "fedprox": lambda: fs.recipes.fedprox(clients_per_round=4, prox_mu=0.1, **LOCAL),
    "fednova": lambda: fs.recipes.fednova(clients_per_round=4, local_momentum=0.5, **LOCAL),
    "fedavgm": lambda: fs.recipes.fedavgm(clients_per_round=4, **LOCAL),
    "fedadam": lambda: fs.recipes.fedadam(clients_per_round=4, **LOCAL),
    "fedyogi": lambda: fs.recipes.fedyogi(clients_per_round=4, **LOCAL),
    "fedadagrad": lambda: fs.recipes.fedadagrad(clients_per_round=4, **LOCAL),
    "fedsampling": lambda: fs.recipes.fedsampling(samples_per_round=40),
    "fedsampling_paper": lambda: fs.recipes.fedsampling(samples_per_round=40, protocol="paper", M=30),
    "fedsampling_naive": lambda: fs.recipes.fedsampling_naive(ratio=0.2),
    "centralized": lambda: fs.recipes.centralized(samples_per_round=32, steps=2),
    "fedsts": lambda: fs.recipes.fedsts(H=3, clients_per_round=5, dim=4, steps=2, batch_size=4, lr=0.05),
    "fedstas": lambda: fs.recipes.fedstas(H=3, clients_per_round=5, samples_per_round=60, dim=4, M=30, steps=2, batch_size=4, lr=0.05),
    "iwds": lambda: fs.recipes.iwds(clients_per_round=4, **LOCAL),
    "isfedavg": lambda: fs.recipes.isfedavg(clients_per_round=4, batch_size=3, epochs=1, lr=0.05),
    "clustered_sampling": lambda: fs.recipes.clustered_sampling(clients_per_round=4, epochs=None, **LOCAL),
    "optimal_sampling": lambda: fs.recipes.optimal_sampling(clients_per_round=4, epochs=None, **LOCAL),
    "delta": lambda: fs.recipes.delta(clients_per_round=4, epochs=None, **LOCAL),
    "power_of_choice": lambda: fs.recipes.power_of_choice(clients_per_round=4, candidates=8, epochs=None, **LOCAL),
    "fedcbs": lambda: fs.recipes.fedcbs(clients_per_round=4, epochs=None, **LOCAL),
    "fedcor": lambda: fs.recipes.fedcor(clients_per_round=4, warmup=2, rank=2, epochs=None, **LOCAL),
    "divfl": lambda: fs.recipes.divfl(clients_per_round=4, epochs=None, **LOCAL),
    "oort": lambda: fs.recipes.oort(clients_per_round=4, epochs=None, **LOCAL),
    "fedavg_noised": lambda: dataclasses.replace(fs.recipes.fedavg(clients_per_round=4, **LOCAL),
                                                 noise=UpdateNoise(clip=1.0, noise_multiplier=1.0)),
    "poisson_noised": lambda: _noised_mean(PoissonClients(q=0.4)),
    "uniform_noised": lambda: _noised_mean(UniformClients(m=4)),
    "fedsampling_noised": lambda: dataclasses.replace(fs.recipes.fedsampling(samples_per_round=40),
                                                      noise=PerExampleNoise(clip=1.0, noise_multiplier=1.0)),
}
ENGINES = {"loop": {"backend": "loop"}, "vectorized": {"backend": "vectorized"}}
OPTIONS = {"poisson_noised": {"privacy": Accounting(threat="released")},
           "uniform_noised": {"privacy": Accounting(threat="released")},
           "fedsampling_noised": {"privacy": Accounting(unit="record")}}
"""Simulation options of a run (the ledger's unit where per-example noise is accounted)."""
POOLED = {"fedavg", "fedsampling"}
"""The recipes also run on a pool of 2 worker processes (its numbers are the single-process engine's up to the order
of float32 partial sums, so it has its own fingerprint)."""


def exact(value):
    """A round record's value with every float written exactly."""
    if isinstance(value, float):
        return value.hex() if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {k: exact(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [exact(v) for v in value]
    if isinstance(value, np.generic):
        return exact(value.item())
    if isinstance(value, np.ndarray):
        return digest(value)
    return value if value is None or isinstance(value, (int, str, bool)) else repr(value)


def fingerprint(name: str, engine: str) -> str:
    return run_digest(name, **ENGINES.get(engine, {"backend": "vectorized", "workers": 2}))


def run_digest(name: str, **engine: object) -> str:
    """The digest of recipe ``name``'s run on the engine (or federation) that ``engine``'s simulation options name."""
    fed = federate(blobs(n=240, d=6, classes=3, seed=0), SIZES)
    result = fs.simulate(RUNS[name](), federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=3,
                         engine=Engine(**engine), **OPTIONS.get(name, {}))
    params = [result.params[k].detach().cpu().numpy() for k in sorted(result.params)]
    return digest(json.dumps(exact(result.history), sort_keys=True), *params)


def cases() -> list[tuple[str, str]]:
    return [(n, e) for n in RUNS for e in ENGINES] + [(n, "pool") for n in sorted(POOLED)]


@pytest.mark.parametrize(("name", "engine"), cases())
def test_every_recipe_gives_the_numbers_it_gave_before_to_the_bit(name, engine, one_torch_thread):
    want = json.loads(FILE.read_text())[f"{name}/{engine}"]
    assert fingerprint(name, engine) == want


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import torch

    torch.set_num_threads(1)
    FILE.write_text(json.dumps({f"{n}/{e}": fingerprint(n, e) for n, e in cases()}, indent=1, sort_keys=True) + "\n")
