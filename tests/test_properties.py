"""Property-based tests (hypothesis): sampling designs, the size estimator, the config loader (the partitioners' are in
test_partition_properties.py)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fedsample import privacy
from fedsample.experiments.config import ConfigError, parse_config
from fedsample.experiments.runner import prepare
from fedsample.sampling import design

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
