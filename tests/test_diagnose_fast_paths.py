"""The diagnosis' fast paths give the slow paths' numbers, to the bit (tolerance 0): what a client computes from its
data and the fixed model is computed once (``ClientContext.kept``, ISFedAvg's per-sample gradient norms) and a
diagnosis draws the same rounds with it as without it; the clients' shuffled passes sort one packed integer key
(``segment_sort``) into lexsort's order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample import recipes
from fedsample.client import gradient_noise_variance
from fedsample.data.types import FederatedData
from fedsample.diagnostics.federation import LinearisedFederation
from fedsample.federation.simulator import Simulator
from fedsample.messages import ClientContext
from fedsample.models import initial_parameters
from fedsample.rng import ClientRandom
from fedsample.sampling import importance as isx
from fedsample.simulation import build_module
from fedsample.training.local import segment_sort, shuffled_passes
from tests.helpers import blobs

MODEL = fs.models.LogisticRegression()


def client_context(kept: dict | None) -> tuple[ClientContext, dict]:
    ds = blobs(n=40, d=5, classes=3, seed=2)
    fed = FederatedData.from_client_indices(ds, [np.arange(40)])
    module = build_module(MODEL, fed)
    ctx = ClientContext(0, torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train), module, "classification", 3, kept=kept)
    return ctx, initial_parameters(module, 0)


def test_kept_gradient_norms_are_the_computed_ones_computed_once_per_model(monkeypatch):
    fresh_ctx, params = client_context(kept=None)
    fresh = isx.gradient_norms(fresh_ctx, params)
    calls = []
    computed = isx.per_sample_gradients
    monkeypatch.setattr(isx, "per_sample_gradients", lambda *a, **k: calls.append(1) or computed(*a, **k))
    ctx, _ = client_context(kept={})
    first, again = isx.gradient_norms(ctx, params), isx.gradient_norms(ctx, {k: v.clone() for k, v in params.items()})
    assert np.array_equal(first, fresh) and again is first and len(calls) == 1  # an equal model reads them back
    assert not first.flags.writeable  # nobody can change what the next round reads
    moved = {k: v + 0.5 for k, v in params.items()}
    assert not np.array_equal(isx.gradient_norms(ctx, moved), first) and len(calls) == 2  # another model: computed
    rows = np.array([3, 1])
    subset = isx.gradient_norms(fresh_ctx, moved, rows)
    assert np.array_equal(isx.gradient_norms(ctx, moved, rows), subset) and len(calls) == 4  # a subset is never kept


def test_an_isfedavg_diagnosis_draws_the_same_rounds_with_and_without_kept_norms(monkeypatch):
    ds = blobs(n=300, d=5, classes=3, seed=4)
    fed = FederatedData.from_client_indices(ds, np.array_split(np.random.default_rng(0).permutation(300), 12))
    strategy = {"isfedavg": recipes.isfedavg(clients_per_round=4, batch_size=5, epochs=2)}
    kept = fs.diagnose(strategy, fed, MODEL, rounds=40, seed=1)
    monkeypatch.setattr(LinearisedFederation, "context", Simulator.context)  # the slow path: nothing kept
    computed = fs.diagnose(strategy, fed, MODEL, rounds=40, seed=1)
    assert np.array_equal(kept.draws["isfedavg"].estimates, computed.draws["isfedavg"].estimates)
    assert np.array_equal(kept.draws["isfedavg"].inclusion, computed.draws["isfedavg"].inclusion)
    assert kept.draws["isfedavg"].estimates.std(axis=0).max() > 0  # the draws do differ: the comparison could fail



@pytest.mark.parametrize("segments", [1, 7, 2048, 2049])
def test_segment_sort_is_lexsort_of_segment_then_uniform_ties_included(segments):
    rng = np.random.default_rng(segments)
    n = 5000
    segment = np.sort(rng.integers(0, segments, n))
    u = rng.integers(0, 2**53, n, dtype=np.int64) * 2.0**-53  # uniforms as the streams make them (53 bits)
    u[rng.random(n) < 0.3] = u[0]  # many equal uniforms: the stable order decides
    u[:3] = [0.0, 1 - 2.0**-53, 2.0**-53]  # the extremes of the 53-bit grid
    assert np.array_equal(segment_sort(segment, u), np.lexsort((u, segment)))
    assert len(segment_sort(np.zeros(0, np.int64), np.zeros(0))) == 0


def test_shuffled_passes_are_the_clients_own_permutations():
    sizes, passes = np.array([5, 1, 40, 9]), np.array([2, 1, 1, 3])
    streams = [ClientRandom(3, 2, k, "train") for k in range(4)]
    states = np.fromiter((s.stream for s in streams), dtype=np.uint64, count=4)
    got = shuffled_passes(states, np.zeros(4, np.int64), sizes, passes)
    expected = np.concatenate([s.permutation(n) for s, n, p in zip(streams, sizes, passes) for _ in range(p)])
    assert np.array_equal(got, expected)


def test_the_noise_variance_computed_in_place_is_the_same_number():
    g = torch.randn(300, 57, generator=torch.Generator().manual_seed(0)) * 3 + 1
    mean = g.mean(0)
    expected = float(((g - mean) ** 2).sum(dim=1).mean())  # sigma^2 by its definition
    assert gradient_noise_variance(g.clone(), mean) == expected
    assert gradient_noise_variance(g.clone(), mean, overwrite=True) == expected
