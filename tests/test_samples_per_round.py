"""``samples_per_round``: client samplers derive their cohort size from the reported sizes so that the
cohort holds K samples in expectation (Monte Carlo, 4 standard errors), declare inclusion probabilities
that match the empirical frequencies, and refuse ambiguous input in one line."""

from types import SimpleNamespace

import numpy as np
import pytest

from fedsample import recipes
from fedsample.sampling import cohort_size
from fedsample.sampling.clients import PoissonClients, SizeProportional, UniformClients
from fedsample.privacy.sizes import ExactSizes
from fedsample.strategy import RoundContext

N = 12
SIZES = np.array([1, 2, 3, 5, 8, 13, 1, 1, 2, 40, 7, 4])  # mean 7.25, sum n^2 / n = 22.33
ROUNDS = 4000


def context(round: int, sizes: np.ndarray = SIZES) -> RoundContext:
    ctx = RoundContext(SimpleNamespace(num_clients=len(sizes)), {}, round, seed=5, state={})
    ctx.sizes = ExactSizes().summarize(np.arange(len(sizes)), sizes)
    return ctx


def samples_in_cohorts(sampler, sizes: np.ndarray = SIZES) -> np.ndarray:
    """Samples each round's cohort holds, a client drawn twice counted twice."""
    counts = []
    for r in range(ROUNDS):
        cohort = sampler.select(context(r, sizes))
        counts.append(float(np.sum(sizes[cohort.ids] * cohort.multiplicity)))
    return np.array(counts)


@pytest.mark.parametrize("sampler", [UniformClients, SizeProportional, PoissonClients], ids=lambda c: c.__name__)
@pytest.mark.parametrize("K", [25, 45, 70])  # each above one size-weighted draw (22.3) and below the total (87)
def test_expected_samples_per_round_is_the_target(sampler, K):
    counts = samples_in_cohorts(sampler(samples_per_round=K))
    tolerance = 4 * counts.std(ddof=1) / np.sqrt(ROUNDS)
    assert abs(counts.mean() - K) <= tolerance, (counts.mean(), K, tolerance)


@pytest.mark.parametrize(
    "sampler", [UniformClients(samples_per_round=30), SizeProportional(samples_per_round=30)], ids=repr
)
def test_declared_inclusion_matches_frequency(sampler):
    hits = np.zeros(N)
    declared = np.full(N, np.nan)
    for r in range(ROUNDS):
        cohort = sampler.select(context(r))
        hits[cohort.ids] += 1
        declared[cohort.ids] = cohort.inclusion
    freq = hits / ROUNDS
    seen = ~np.isnan(declared)
    se = np.sqrt(declared[seen] * (1 - declared[seen]) / ROUNDS)
    assert np.all(np.abs(freq[seen] - declared[seen]) <= 4 * se + 1e-12), (freq, declared)


def test_hand_computed_counts():
    assert cohort_size.uniform_count(SIZES, 29) == pytest.approx(4.0)
    assert cohort_size.size_weighted_count(SIZES, 67) == pytest.approx(67 * 87 / 1943)
    assert cohort_size.uniform_count(SIZES, 1) == 1.0  # never fewer than one client
    rng = np.random.default_rng(0)
    draws = [cohort_size.randomly_rounded(2.25, rng) for _ in range(4000)]
    assert set(draws) == {2, 3} and abs(np.mean(draws) - 2.25) < 4 * 0.433 / np.sqrt(4000)


def test_samples_per_round_asks_every_client_for_its_exact_size():
    for name in ["fedavg", "weighted_fedavg", "fedprox", "fednova", "fedavgm", "fedadam", "fedyogi", "fedadagrad"]:
        strategy = recipes.recipe(name, samples_per_round=64)
        assert strategy.clients.samples_per_round == 64
        assert strategy.sizes == ExactSizes(scope="all")
    assert recipes.fedavg().sizes == ExactSizes(scope="cohort")  # a fixed m asks the cohort only, as before
    assert recipes.iwds(samples_per_round=64).clients.samples_per_round == 64


@pytest.mark.parametrize(
    "build",
    [
        lambda: UniformClients(m=3, samples_per_round=30),
        lambda: PoissonClients(q=0.2, samples_per_round=30),
        lambda: recipes.fedavg(clients_per_round=3, samples_per_round=30),
        lambda: recipes.fedyogi(samples_per_round=0),
        lambda: UniformClients(samples_per_round=2.5),
    ],
)
def test_ambiguous_or_bad_targets_are_one_line_errors(build):
    with pytest.raises(ValueError) as error:
        build()
    assert "\n" not in str(error.value)


def test_target_without_positive_sizes_is_refused():
    with pytest.raises(ValueError, match="positive reported size"):
        UniformClients(samples_per_round=30).select(context(0, np.zeros(N, dtype=int)))


def test_fedsts_derives_its_cohort_from_sizes_and_keeps_one_client_per_stratum():
    from fedsample.sampling.stratify import StratifiedClients

    strategy = recipes.fedsts(H=2, samples_per_round=30)
    assert strategy.sizes == ExactSizes(scope="all")
    sampler = strategy.clients
    counts = [sampler.clients_per_round(context(r)) for r in range(ROUNDS)]
    assert abs(np.mean(counts) - 30 / SIZES.mean()) <= 4 * np.std(counts) / np.sqrt(ROUNDS)
    assert min(StratifiedClients(H=6, samples_per_round=10).clients_per_round(context(r)) for r in range(50)) == 6
    with pytest.raises(ValueError, match="not both"):
        recipes.fedsts(m=10, samples_per_round=30)
