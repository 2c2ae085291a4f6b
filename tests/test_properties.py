"""Property-based tests (hypothesis): partitioners, sampling designs, the size estimator, the config loader."""

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fedsample import privacy
from fedsample.data.partition import IID, Dirichlet, LogNormalSizes, Shards, partition
from fedsample.experiments.config import ConfigError, parse_config
from fedsample.experiments.runner import prepare
from fedsample.sampling import design
from helpers import blobs

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DATA = blobs(n=120, classes=3)


def assert_each_sample_once(fed, n):
    assigned = np.concatenate([fed.client_indices(k) for k in range(fed.num_clients)])
    assert np.array_equal(np.sort(assigned), np.arange(n))


@FAST
@given(clients=st.integers(1, 120), seed=st.integers(0, 2**32 - 1))
def test_iid_assigns_every_sample_once_in_near_equal_parts(clients, seed):
    fed = partition(DATA, IID(clients), seed=seed)
    assert fed.num_clients == clients
    assert_each_sample_once(fed, 120)
    assert fed.sizes().max() - fed.sizes().min() <= 1


@FAST
@given(mean=st.floats(1, 60), sigma=st.floats(0, 6), seed=st.integers(0, 2**32 - 1))
def test_lognormal_assigns_every_sample_once_every_client_nonempty(mean, sigma, seed):
    fed = partition(DATA, LogNormalSizes(mean, sigma), seed=seed)
    assert fed.num_clients == max(1, round(120 / mean))
    assert_each_sample_once(fed, 120)
    assert fed.sizes().min() >= 1


@FAST
@given(clients=st.integers(1, 10), alpha=st.floats(0.01, 100), min_size=st.integers(0, 10), seed=st.integers(0, 2**32 - 1))
def test_dirichlet_assigns_every_sample_once_with_min_size(clients, alpha, min_size, seed):
    fed = partition(DATA, Dirichlet(clients, alpha, min_size=min_size), seed=seed)
    assert fed.num_clients == clients
    assert_each_sample_once(fed, 120)
    assert fed.sizes().min() >= min_size


@FAST
@given(shard=st.sampled_from([1, 2, 3, 4, 5, 6, 10, 12, 15, 20]), per=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_shards_give_every_client_the_requested_size(shard, per, seed):
    try:
        fed = partition(DATA, Shards(shard, per), seed=seed)
    except ValueError as error:  # the shards do not divide among clients: a clear error, as documented
        assert "shard" in str(error).lower()
        return
    assert np.all(fed.sizes() == shard * per)
    assert_each_sample_once(fed, 120)


weights = st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=60).filter(lambda w: sum(w) > 0)


@FAST
@given(w=weights, frac=st.floats(0, 1))
@example(w=[2.0, 5e-324], frac=0.75)
def test_inclusion_probabilities_sum_to_n_and_lie_in_0_1(w, frac):
    """(Regression found by this test: weights [2.0, 5e-324] with n = 1.5 gave NaN when the certainty step
    worked on weights scaled by their maximum, which underflowed the subnormal weight to 0.)"""
    w = np.array(w)
    n = frac * np.count_nonzero(w)
    pi = design.inclusion_probabilities(w, n)
    assert np.all((pi >= 0) & (pi <= 1 + 1e-12))
    assert pi.sum() == pytest.approx(n, rel=1e-9, abs=1e-9)
    assert np.all(pi[w == 0] == 0)


@FAST
@given(w=weights, seed=st.integers(0, 2**32 - 1), data=st.data())
def test_systematic_sample_has_its_size_and_valid_probabilities(w, seed, data):
    w = np.array(w)
    n = data.draw(st.integers(1, int(np.count_nonzero(w))))
    sample = design.systematic_sample(w, n, np.random.default_rng(seed))
    assert len(sample.ids) == n and len(set(sample.ids.tolist())) == n
    assert np.all((sample.inclusion > 0) & (sample.inclusion <= 1 + 1e-12))


@FAST
@given(N=st.integers(1, 200), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_simple_random_probabilities_are_m_over_n(N, data, seed):
    m = data.draw(st.integers(1, N))
    sample = design.simple_random(N, m, np.random.default_rng(seed))
    assert len(np.unique(sample.ids)) == m and np.allclose(sample.inclusion, m / N)


@FAST
@given(
    sizes=st.lists(st.integers(1, 10**6), min_size=1, max_size=50),
    epsilon=st.floats(1e-3, 1e6), M=st.integers(2, 10**6), seed=st.integers(0, 2**32 - 1),
)
def test_estimator_is_finite_and_at_least_the_number_of_answers(sizes, epsilon, M, seed):
    reports = privacy.randomized_response(np.array(sizes), epsilon, M, np.random.default_rng(seed))
    assert np.all((reports >= 1) & (reports <= M - 1))
    total = privacy.estimate_total(reports, epsilon, M)
    assert np.isfinite(total) and total >= len(sizes)
    assert 0 < privacy.alpha_for(epsilon, M) <= 1


toml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
BASE = {"name": "p", "rounds": 1, "seeds": [0], "dataset": {"name": "digits"},
        "partition": {"scheme": "iid", "num_clients": 4}, "model": {"name": "logreg"},
        "strategies": [{"recipe": "fedavg", "clients_per_round": 2}]}
PATHS = [("name",), ("rounds",), ("seeds",), ("eval_every",), ("dataset", "name"), ("partition", "num_clients"),
         ("partition", "scheme"), ("model", "hidden"), ("strategies",), ("faults",), ("faults", "dropout")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=toml_values, strategy_key=st.sampled_from(["lr", "clients_per_round", "epochs", "label"]),
       strategy_value=toml_values)
def test_config_loader_gives_one_clean_error_or_a_valid_plan(path, value, strategy_key, strategy_value):
    import copy

    data = copy.deepcopy(BASE)
    data["strategies"][0][strategy_key] = strategy_value
    target = data
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = value
    try:
        prepare(parse_config(data, "prop"))
    except ConfigError as error:
        message = str(error)
        assert message and "\n" not in message and "Traceback" not in message
