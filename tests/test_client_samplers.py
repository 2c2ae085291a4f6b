"""Client samplers: declared inclusion probabilities match empirical frequencies (Monte Carlo), and the
inverse-inclusion weighted mean is unbiased for the full-participation mean."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedsample.sampling.clients import AllClients, PoissonClients, SizeProportional, UniformClients
from fedsample.privacy.sizes import ExactSizes
from fedsample.strategy import RoundContext
from fedsample.training.aggregate import Sum, WeightedMean
from fedsample.messages import TrainReport

N = 12
SIZES = np.array([1, 2, 3, 5, 8, 13, 1, 1, 2, 40, 7, 4])
ROUNDS = 6000


def context(round: int) -> RoundContext:
    fed = SimpleNamespace(num_clients=N)
    ctx = RoundContext(fed, {}, round, seed=3, state={})
    ctx.sizes = ExactSizes().summarize(np.arange(N), SIZES)
    return ctx


def frequencies(sampler) -> tuple[np.ndarray, np.ndarray]:
    """Empirical inclusion frequency of each client, and the declared pi (checked constant across rounds)."""
    hits = np.zeros(N)
    declared = np.full(N, np.nan)
    for r in range(ROUNDS):
        cohort = sampler.select(context(r))
        assert len(np.unique(cohort.ids)) == len(cohort.ids)
        hits[cohort.ids] += 1
        seen = ~np.isnan(declared[cohort.ids])
        np.testing.assert_allclose(declared[cohort.ids][seen], cohort.inclusion[seen])
        declared[cohort.ids] = cohort.inclusion
    return hits / ROUNDS, declared


@pytest.mark.parametrize("sampler", [AllClients(), UniformClients(4), SizeProportional(4), PoissonClients(0.3)], ids=repr)
def test_inclusion_frequencies_match_declared(sampler):
    freq, pi = frequencies(sampler)
    se = np.sqrt(pi * (1 - pi) / ROUNDS)
    assert np.all(np.abs(freq - pi) <= 4 * se + 1e-12), (freq, pi)


def test_size_proportional_expected_multiplicity():
    total = np.zeros(N)
    for r in range(ROUNDS):
        cohort = SizeProportional(4).select(context(r))
        total[cohort.ids] += cohort.multiplicity
    expected = 4 * SIZES / SIZES.sum()
    assert np.all(np.abs(total / ROUNDS - expected) < 4 * np.sqrt(expected / ROUNDS) + 1e-9)


def reports_for(ids: np.ndarray, values: np.ndarray) -> list[TrainReport]:
    return [TrainReport(update={"w": torch.tensor([float(values[k])])}, steps=1, loss=0.0) for k in ids]


@pytest.mark.parametrize("sampler", [UniformClients(3), SizeProportional(3), PoissonClients(0.25)], ids=repr)
def test_inverse_inclusion_mean_is_unbiased(sampler):
    """E[(1/N) sum_{k in S} Delta_k / pi_k] = (1/N) sum_k Delta_k: within 4 standard errors over rounds."""
    values = np.random.default_rng(0).normal(size=N) + SIZES / 10
    estimates = []
    for r in range(ROUNDS):
        ctx = context(r)
        cohort = sampler.select(ctx)
        delta = WeightedMean("inverse_inclusion").combine(reports_for(cohort.ids, values), cohort, ctx)
        estimates.append(float(delta["w"]) if delta is not None else 0.0)
    estimates = np.array(estimates)
    se = estimates.std() / np.sqrt(ROUNDS)
    assert abs(estimates.mean() - values.mean()) < 4 * se


def test_uniform_mean_under_size_sampling_targets_size_weighted_mean():
    """Li et al. 2019: with p_k = n_k/n and a uniform average over draws, E = sum_k n_k Delta_k / n."""
    values = np.random.default_rng(1).normal(size=N)
    estimates = []
    for r in range(ROUNDS):
        ctx = context(r)
        cohort = SizeProportional(3).select(ctx)
        estimates.append(float(WeightedMean("uniform").combine(reports_for(cohort.ids, values), cohort, ctx)["w"]))
    target = SIZES @ values / SIZES.sum()
    assert abs(np.mean(estimates) - target) < 4 * np.std(estimates) / np.sqrt(ROUNDS)
    # and the plain client mean is a different number here, so the test can tell them apart
    assert abs(values.mean() - target) > 8 * np.std(estimates) / np.sqrt(ROUNDS)


def test_size_weighted_mean_hand_computed():
    ctx = context(0)
    cohort = UniformClients(N).select(ctx)
    values = np.arange(N, dtype=float)
    delta = WeightedMean("size").combine(reports_for(cohort.ids, values), cohort, ctx)
    assert float(delta["w"]) == pytest.approx(SIZES @ values / SIZES.sum())


def test_missing_updates_are_left_out_and_sum_adds():
    ctx = context(0)
    cohort = AllClients().select(ctx)
    reports = reports_for(cohort.ids, np.ones(N))
    reports[3] = None
    assert float(Sum().combine(reports, cohort, ctx)["w"]) == N - 1
    assert float(WeightedMean("uniform").combine(reports, cohort, ctx)["w"]) == pytest.approx(1.0)
    assert Sum().combine([None] * N, cohort, ctx) is None


@pytest.mark.parametrize("bad", [lambda: UniformClients(0), lambda: PoissonClients(0.0), lambda: PoissonClients(1.5),
                                 lambda: SizeProportional(-2), lambda: WeightedMean("median")])
def test_bad_sampler_parameters(bad):
    with pytest.raises(ValueError):
        bad()
