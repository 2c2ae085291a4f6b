"""FedSampling's draws, fingerprinted: the same numbers before and after any change to the per-round path.

Every random draw of a FedSampling round derives from (seed, round, client, purpose): the clients' randomized
size reports, the estimate N~ (Eq. 2), the Bernoulli(K/N~) draws on every client's samples. These figures were
read off the code of 2026-11-29 (main at 79e3957) and must not move on either engine; the engines agree with each
other exactly on the draws and to float rounding (relative 1e-5) on the trained parameters.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedsample as fs
from helpers import blobs, federate
from fedsample.simulation import Engine

# per round: (N~, clients that sent an update, the record's "samples"), seed 3, 40 clients, K = 60, eps = 3, M = 50,
# unsteered (steer=False: the ratio K/N~ every round, as main at 79e3957 drew it)
PINNED = [
    (1099.886895586003, 27, 42.55759287802427),
    (1099.886895586003, 26, 49.42467900704267),
    (1099.886895586003, 25, 49.61898243101861),
    (1099.886895586003, 24, 38.41168585050537),
]


def run(backend: str) -> fs.simulation.SimulationResult:
    sizes = [int(s) for s in np.random.default_rng(1).integers(1, 40, size=40)]
    fed = federate(blobs(n=2000, d=6, classes=3, seed=0), sizes)
    strategy = fs.recipes.fedsampling(K=60, epsilon=3.0, M=50, server_lr=0.5, steer=False)
    return fs.simulate(strategy, federated_data=fed, model=fs.models.LogisticRegression(), rounds=4, seed=3, engine=Engine(backend=backend))


@pytest.fixture(scope="module")
def results() -> dict[str, fs.simulation.SimulationResult]:
    return {backend: run(backend) for backend in ("loop", "vectorized")}


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_the_draws_are_the_pinned_ones(results, backend):
    got = [(float(h["size_estimate"]), h["updates"], h["samples"]) for h in results[backend].history]
    assert got == PINNED  # exact: integer draws and sums of them


def test_the_engines_train_the_same_parameters_to_rounding(results):
    loop, vectorized = results["loop"].params, results["vectorized"].params
    assert loop.keys() == vectorized.keys()
    for name in loop:
        torch.testing.assert_close(torch.as_tensor(vectorized[name]), torch.as_tensor(loop[name]), rtol=1e-5, atol=1e-6)
