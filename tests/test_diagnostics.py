"""diagnose: the measured bias, variance and exploitation against what theory says they are (Monte Carlo;
tolerances in standard errors), and the linearised federation against the real engine's round."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.data.types import FederatedData
from fedsample.diagnostics.estimator import estimator_statistics, squared_bias
from fedsample.diagnostics.federation import step_weights
from fedsample.diagnostics.gradients import gradient_basis
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import initial_parameters
from fedsample.sampling.clients import AllClients, UniformClients
from fedsample.sampling.data import FedSamplingData, FullData, UniformSubset
from fedsample.simulation import build_module
from fedsample.privacy.sizes import ExactSizes, RandomizedSizes
from fedsample.strategy import Strategy
from fedsample.training.aggregate import Sum, WeightedMean
from fedsample.training.functional import flatten
from fedsample.training.local import LocalSGD, OneGradient
from tests.helpers import blobs

MODEL = fs.models.LogisticRegression()


def label_sorted(sizes: list[int], seed: int = 0) -> FederatedData:
    """Clients holding consecutive blocks of the label-sorted data: each client sees one or two labels."""
    ds = blobs(n=sum(sizes), d=5, classes=4, seed=seed)
    order = np.argsort(ds.y_train, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return FederatedData.from_client_indices(ds, [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])])


def skewed_sizes(clients: int, seed: int = 1) -> list[int]:
    rng = np.random.default_rng(seed)
    return (1 + np.floor(rng.lognormal(0, 1.3, size=clients) * 2)).astype(int).tolist()


def exact_fedsampling(K: int) -> Strategy:
    return Strategy(clients=AllClients(), data=FedSamplingData(K), local=OneGradient(K), aggregate=Sum(), sizes=ExactSizes())


def one_step(clients, aggregate, data=None, sizes=None, lr=0.1) -> Strategy:
    return Strategy(clients=clients, data=data or FullData(), local=LocalSGD(lr=lr, epochs=None, steps=1, batch_size=None),
                    aggregate=aggregate, sizes=sizes)


def test_unbiased_fedsampling_bias_within_four_standard_errors():
    fed = label_sorted(skewed_sizes(120))
    d = fs.diagnose({"fedsampling": exact_fedsampling(K=20)}, fed, MODEL, rounds=600, seed=3)
    e = d.results["fedsampling"]["estimator"]
    assert abs(e["bias_sq"]) <= 4 * e["bias_sq_se"], e
    assert e["variance"] > 0.05  # the draws do vary: the test could have failed


def test_naive_fixed_ratio_shows_its_known_bias():
    """Qi et al. §3.3: each client's local mean, averaged uniformly over the clients that drew a sample, so a
    client weighs pi_c = 1 - (1 - r)^{n_c} instead of n_c. The measured mean matches that weighting (ratio of
    expectations; its error is O(1 / clients)) and is many standard errors away from g*."""
    fed = label_sorted(skewed_sizes(150))
    ratio, rounds = 0.3, 600
    d = fs.diagnose({"naive": fs.recipes.fedsampling_naive(ratio=ratio)}, fed, MODEL, rounds=rounds, seed=1)
    e = d.results["naive"]["estimator"]
    assert e["bias_z"] > 8 and e["bias"] > 0.05, e
    module = build_module(MODEL, fed)
    basis = gradient_basis(module, fed.dataset.task, initial_parameters(module, 1), torch.as_tensor(fed.dataset.x_train),
                           torch.as_tensor(fed.dataset.y_train)).matrix.numpy()
    sizes = fed.sizes()
    local_means = np.array([basis[fed.client_indices(k)].mean(0) for k in range(fed.num_clients)])
    pi = 1 - (1 - ratio) ** sizes
    predicted = pi @ local_means / pi.sum()
    g_star = basis[fed.order].mean(0)
    measured = d.draws["naive"].estimates.mean(0)
    assert np.linalg.norm(measured - predicted) < 0.25 * np.linalg.norm(predicted - g_star)


def test_uniform_client_sampling_variance_matches_finite_population_formula():
    """m of N equal-size clients, Horvitz-Thompson mean of full-batch gradients: ĝ = (1/m) sum_{k in S} grad f_k,
    E||ĝ - g*||^2 = (1 - m/N) / m * S^2 with S^2 = sum_k ||grad f_k - g*||^2 / (N - 1) (Cochran 1977, Thm 2.2)."""
    N, m, rounds = 40, 6, 1500
    fed = label_sorted([5] * N)
    st = one_step(UniformClients(m), WeightedMean("inverse_inclusion"))
    d = fs.diagnose({"uniform": st}, fed, MODEL, rounds=rounds, seed=2)
    module = build_module(MODEL, fed)
    basis = gradient_basis(module, "classification", initial_parameters(module, 2), torch.as_tensor(fed.dataset.x_train),
                           torch.as_tensor(fed.dataset.y_train)).matrix.numpy()
    local = np.array([basis[fed.client_indices(k)].mean(0) for k in range(N)])
    g_star = local.mean(0)
    S2 = np.sum((local - g_star) ** 2) / (N - 1)
    closed = (1 - m / N) / m * S2 / np.dot(g_star, g_star)
    e = d.results["uniform"]["estimator"]
    assert abs(e["mse"] - closed) < 4 * e["mse_se"], (e["mse"], closed, e["mse_se"])
    assert abs(e["bias_sq"]) <= 4 * e["bias_sq_se"]


def test_fedsampling_exploitation_is_flat_at_K_over_N_tilde():
    """Every sample is kept with probability K/Ñ whatever its client's size: each size decile's mean inclusion
    frequency is within 4 binomial standard errors of the mean logged K/Ñ, and the spread across samples is
    the binomial one. Uniform clients with a fixed local subset are not flat: small clients' samples are used
    more (the picture of FedSampling's Definition 3.1)."""
    fed = label_sorted(skewed_sizes(200))
    rounds = 400
    fsamp = fs.recipes.fedsampling(K=40, epsilon=3.0, M=60)
    subset = Strategy(clients=UniformClients(20), data=UniformSubset(2), local=OneGradient(None),
                      aggregate=WeightedMean("uniform"))
    d = fs.diagnose({"fedsampling": fsamp, "subset": subset}, fed, MODEL, rounds=rounds, seed=4)
    p = np.mean([log["ratio"] for log in d.draws["fedsampling"].logs])
    x = d.results["fedsampling"]["exploitation"]
    for decile in x["by_size_decile"]:
        held = decile["data_share"] * len(fed.order)
        se = np.sqrt(p * (1 - p) / (rounds * held))
        assert abs(decile["inclusion"] - p) < 4 * se + 0.02 * p, (decile, p)
    binomial_cv = np.sqrt((1 - p) / (p * rounds))
    assert 0.8 * binomial_cv < x["cv"] < 1.25 * binomial_cv
    deciles = d.results["subset"]["exploitation"]["by_size_decile"]
    assert deciles[0]["inclusion"] > 3 * deciles[-1]["inclusion"]


def _recorded_delta(strategy: Strategy, fed: FederatedData, params, round: int, seed: int):
    from fedsample.diagnostics.estimator import _RecordingServer
    import dataclasses

    recorder = _RecordingServer()
    frozen = dataclasses.replace(strategy, server=recorder)
    sim = VectorizedSimulator(fed, build_module(MODEL, fed), seed)
    federation, state = with_secure_sum(sim, frozen.secure_sum), frozen.init_state(params)
    for t in range(round + 1):  # the rounds before carry the state (a steered FedSampling's drawn counts), at the same model
        frozen.round(federation, params, state, t, seed)
    return flatten(recorder.delta).double().numpy()


@pytest.mark.parametrize("name", ["fedsampling", "fedsampling_paper", "fedavg", "naive"])
def test_one_step_draws_equal_the_engines_rounds(name):
    """With exact gradients, draw i is the real round i's aggregate divided by the local learning rate (FedSampling's
    default divides by the noised drawn count, which the diagnosis's secure sum adds as the run's does)."""
    fed = label_sorted(skewed_sizes(30))
    lr = 0.3
    strategy = {
        "fedsampling": fs.recipes.fedsampling(K=15, M=20, server_lr=lr),
        "fedsampling_paper": fs.recipes.fedsampling(K=15, M=20, server_lr=lr, protocol="paper"),
        "fedavg": fs.recipes.fedavg(clients_per_round=5, steps=1, batch_size=None, lr=lr),
        "naive": fs.recipes.fedsampling_naive(ratio=0.2, server_lr=lr),
    }[name]
    d = fs.diagnose({name: strategy}, fed, MODEL, rounds=4, seed=5)
    params = initial_parameters(build_module(MODEL, fed), 5)
    local_lr = lr if name == "fedavg" else 1.0
    for i in range(3):
        real = _recorded_delta(strategy, fed, params, i, 5) / local_lr
        np.testing.assert_allclose(d.draws[name].estimates[i], real, rtol=1e-4, atol=1e-6)


def test_several_local_steps_are_measured_to_first_order_in_lr():
    """Three momentum steps on minibatches: the draw is lr^-1 times the real update up to O(lr)."""
    fed = label_sorted(skewed_sizes(30))
    strategy = Strategy(clients=UniformClients(5), data=FullData(), local=LocalSGD(lr=1e-4, steps=3, epochs=None, batch_size=2, momentum=0.5),
                        aggregate=WeightedMean("size"), sizes=ExactSizes("cohort"))
    d = fs.diagnose({"sgd": strategy}, fed, MODEL, rounds=4, seed=6)
    params = initial_parameters(build_module(MODEL, fed), 6)
    real = _recorded_delta(strategy, fed, params, 1, 6) / 1e-4
    np.testing.assert_allclose(d.draws["sgd"].estimates[1], real, rtol=2e-3, atol=1e-4)


def test_step_weights_by_hand():
    np.testing.assert_allclose(step_weights(3, 0.0, 0.0), [1, 1, 1])
    np.testing.assert_allclose(step_weights(3, 0.5, 0.0), [1.75, 1.5, 1.0])  # a_t = (1 - rho^(tau - t)) / (1 - rho)
    np.testing.assert_allclose(step_weights(3, 0.0, 0.1), [0.81, 0.9, 1.0])  # (1 - lr mu)^(tau - 1 - t)


def test_squared_bias_is_unbiased_where_the_mean_is_zero():
    """||mean||^2 overestimates ||E x||^2 = 0 by tr(Cov)/R; the U-statistic does not (average of 400 repeats)."""
    rng = np.random.default_rng(0)
    values = []
    for _ in range(400):
        x = rng.normal(size=(50, 20))
        values.append(squared_bias(x.sum(0), float(np.sum(x * x)), 50))
    assert abs(np.mean(values)) < 4 * np.std(values) / np.sqrt(400)
    stats = estimator_statistics(rng.normal(size=(200, 20)) + 1.0, np.ones(20))
    assert abs(stats["bias_sq"]) < 4 * stats["bias_sq_se"] and abs(stats["variance"] - 1.0) < 0.1


def test_sketched_basis_agrees_with_the_exact_one():
    fed = label_sorted(skewed_sizes(60))
    st = {"uniform": one_step(UniformClients(8), WeightedMean("size"), sizes=ExactSizes("cohort"))}
    exact = fs.diagnose(st, fed, MODEL, rounds=200, seed=7)
    sketched = fs.diagnose(st, fed, MODEL, rounds=200, seed=7, memory_budget=1, sketch_dim=16)
    assert sketched.basis["kind"] == "countsketch" and exact.basis["kind"] == "exact"
    bound = sketched.basis["relative_error_bound"]
    for key in ("mse", "variance"):
        a, b = exact.results["uniform"]["estimator"][key], sketched.results["uniform"]["estimator"][key]
        assert abs(b - a) < 3 * bound * a, (key, a, b)


def test_same_seed_same_numbers_and_privacy_fields():
    fed = label_sorted(skewed_sizes(40))
    st = {"fs": fs.recipes.fedsampling(K=10, epsilon=2.0, M=10)}
    a, b = (fs.diagnose(st, fed, MODEL, rounds=20, seed=8).to_dict() for _ in range(2))
    for r in (a, b):
        r["strategies"]["fs"].pop("seconds")
    assert a == b
    priv = a["strategies"]["fs"]["privacy"]
    assert priv["epsilon_per_round"] == 2.0 and 0 < priv["alpha"] < 1 and priv["estimate_se_theory"] > 0
    assert a["strategies"]["fs"]["cost"]["clients_contacted"] == fed.num_clients


def test_rounds_without_any_client_give_a_zero_update():
    """Poisson sampling with a small q leaves some cohorts empty: those draws count as ĝ = 0, not as errors."""
    from fedsample.sampling.clients import PoissonClients

    fed = label_sorted([4] * 10)
    st = one_step(PoissonClients(0.05), WeightedMean("inverse_inclusion"))
    d = fs.diagnose({"poisson": st}, fed, MODEL, rounds=60, seed=9)
    empty = d.draws["poisson"].updates == 0
    assert empty.any() and (~empty).any()
    assert np.all(d.draws["poisson"].estimates[empty] == 0)


def test_bad_input_is_refused():
    fed = label_sorted([3] * 4)
    with pytest.raises(ValueError, match="rounds"):
        fs.diagnose(exact_fedsampling(5), fed, MODEL, rounds=1)
    with pytest.raises(TypeError, match="Strategy"):
        fs.diagnose({}, fed, MODEL, rounds=5)
