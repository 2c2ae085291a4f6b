"""FedSampling's size estimate and its remedies (docs/size-estimate.md): the RMSE formula (hand-computed), M
chosen by RMSE (Monte Carlo), exact sizes, reuse and averaging (what is sent, what the accountant says) and
the self-normalized update (Monte Carlo bias and error against the K-normalized one).

Monte Carlo tolerances are stated at each assertion."""

import math

import numpy as np
import pytest
import torch

from fedsample.messages import payloads_for
import fedsample as fs
from fedsample import privacy
from fedsample.privacy import size_estimate
from fedsample.data.partition import LogNormalSizes
from fedsample.simulation import make_federation
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.privacy.sizes import RandomizedSizes
from helpers import blobs, federate


# --- the RMSE of N~ ---------------------------------------------------------------------------------------


def test_rmse_by_hand():
    """Sizes (1, 3, 10), M = 4, e^eps = 3: alpha = (3 - 1)/(3 + 2) = 0.4; clipped sizes (1, 3, 3), bias -7;
    u ~ U{1, 2, 3}: E u = 2, E u^2 = 14/3, so Var(r | n) = 0.4 n^2 + 0.6 * 14/3 - (0.4 n + 1.2)^2 = 0.64 for
    n = 1 and n = 3; Var(N~) = 3 * 0.64 / 0.16 = 12, RMSE = sqrt(49 + 12) = sqrt(61)."""
    sizes, eps = np.array([1, 3, 10]), math.log(3)
    assert privacy.alpha_for(eps, 4) == pytest.approx(0.4)
    assert size_estimate.estimator_bias(sizes, 4) == -7
    assert privacy.estimator_variance(sizes, eps, 4) == pytest.approx(12)
    assert size_estimate.estimator_rmse(sizes, eps, 4) == pytest.approx(math.sqrt(61))
    assert size_estimate.rmse_curve(sizes, eps, np.array([4]))[0] == pytest.approx(math.sqrt(61))


def test_rmse_curve_matches_the_direct_formula_for_every_M():
    sizes = LogNormalSizes(2.0, 3.0).sizes(4000, np.random.default_rng(3))
    Ms = np.array([2, 3, 7, 50, 301, int(sizes.max()) + 1, int(sizes.max()) + 40])
    direct = [size_estimate.estimator_rmse(sizes, 2.0, int(M)) for M in Ms]
    assert np.allclose(size_estimate.rmse_curve(sizes, 2.0, Ms), direct, rtol=1e-9)


def test_simulated_totals_have_the_formulas_mean_and_sd():
    """2000 draws: the mean within 4 standard errors of the clipped total, the sd within 10% of the formula's
    (the sd of a sample sd of 2000 near-normal draws is ~1.6%)."""
    sizes = LogNormalSizes(2.0, 4.0).sizes(3000, np.random.default_rng(0))
    totals = size_estimate.simulated_totals(sizes, 3.0, 100, 2000, np.random.default_rng(1))
    sd = math.sqrt(privacy.estimator_variance(sizes, 3.0, 100))
    assert abs(totals.mean() - privacy.clip_size(sizes, 100).sum()) < 4 * sd / math.sqrt(2000)
    assert totals.std(ddof=1) == pytest.approx(sd, rel=0.1)


def empirical_rmse(sizes, eps, M, draws, seed):
    totals = size_estimate.simulated_totals(sizes, eps, M, draws, np.random.default_rng(seed))
    return math.sqrt(np.mean((totals - sizes.sum()) ** 2))


@pytest.mark.parametrize("chooser", ["oracle", "prior"])
def test_chosen_M_has_empirical_rmse_within_10_percent_of_the_grids_best(chooser):
    """3000 clients of log-normal(mean 2, sigma 4) sizes, eps = 3. M from the formula on the true sizes
    ("oracle") or from the public prior (|C| and the assumed (2, 4); a population drawn with another seed):
    its Monte Carlo RMSE (600 draws) is within 10% of the smallest Monte Carlo RMSE over the grid
    {5, 10, 20, 40, 80, 160, 300} (the RMSE's sampling error at 600 draws is ~3%)."""
    sizes = LogNormalSizes(2.0, 4.0).sizes(6000, np.random.default_rng(11))
    M = size_estimate.best_M(sizes, 3.0) if chooser == "oracle" else size_estimate.rmse_M(len(sizes), 3.0, 2.0, 4.0)
    grid = {m: empirical_rmse(sizes, 3.0, m, 600, seed=m) for m in (5, 10, 20, 40, 80, 160, 300)}
    assert empirical_rmse(sizes, 3.0, M, 600, seed=1) <= 1.1 * min(grid.values())


def test_rmse_M_is_chosen_from_public_inputs_only():
    """Same number of clients, epsilon and prior: the same M, whatever the population holds."""
    assert size_estimate.rmse_M(3000, 3.0, 2.0, 4.0) == size_estimate.rmse_M(3000, 3.0, 2.0, 4.0)
    policy = RandomizedSizes(3.0, "rmse", size_prior=(2.0, 4.0)).for_population(3000)
    assert policy.M == size_estimate.rmse_M(3000, 3.0, 2.0, 4.0) and policy.query.M == policy.M


# --- the options, run -------------------------------------------------------------------------------------

SIZES = [3, 1, 7, 2, 12, 5, 1, 9, 4, 6] * 3


def small_federation(backend="vectorized", sizes=SIZES):
    fed = federate(blobs(n=int(np.sum(sizes)) + 10), list(sizes))
    module = fs.models.LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)
    return make_federation(backend, fed, module, 0), module


class CountingFederation:
    """Counts the size queries a strategy sends."""

    def __init__(self, inner):
        self.inner, self.size_queries = inner, 0

    @property
    def num_clients(self):
        return self.inner.num_clients

    def run(self, ids, payload, round):
        procedure = payloads_for(payload, len(ids)).procedure.name  # the name the request's type declares
        self.size_queries += procedure == "report_size"
        return self.inner.run(ids, payload, round)


def run_rounds(strategy, rounds, backend="vectorized"):
    fed, module = small_federation(backend)
    fed = CountingFederation(fed)
    params = fs.models.initial_parameters(module, 0)
    state, logs = strategy.init_state(params), []
    for t in range(rounds):
        params, log = strategy.round(with_secure_sum(fed, strategy.secure_sum, seed=0), params, state, t, seed=0)
        logs.append(log)
    return logs, fed.size_queries


def test_exact_sizes_give_the_true_total_and_no_size_budget():
    logs, _ = run_rounds(fs.recipes.fedsampling(K=20, server_lr=0.1, sizes="exact"), 2)
    assert all("size_estimate" not in log and "size_epsilon" not in log for log in logs)
    assert logs[0]["ratio"] == pytest.approx(20 / sum(SIZES))


@pytest.mark.parametrize("permanent", [False, True])
def test_reuse_asks_every_R_rounds_and_the_accountant_counts_those_reports(permanent):
    """reuse = 3 over 7 rounds: reports at rounds 0, 3, 6 (3 queries); the estimate is constant within a
    block; fresh reports cost ceil(t/3) * eps after t rounds, permanent ones eps."""
    strategy = fs.recipes.fedsampling(K=20, epsilon=1.0, M=10, server_lr=0.1, permanent=permanent, reuse=3)
    logs, queries = run_rounds(strategy, 7)
    assert queries == 3
    estimates = [log["size_estimate"] for log in logs]
    assert estimates[0] == estimates[1] == estimates[2] and estimates[3] == estimates[4] == estimates[5]
    spent = [log["size_epsilon"] for log in logs]
    assert spent == ([1.0] * 7 if permanent else [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0])
    assert [log["size_reports"] for log in logs] == ([1] * 7 if permanent else [1, 1, 1, 2, 2, 2, 3])


def test_average_is_the_mean_of_the_last_A_fresh_estimates():
    """The same seed sends the same fresh reports; averaged estimate at round t = mean of the plain run's
    estimates at rounds t-A+1..t (fewer at the start), floored at the number of clients after averaging (here
    no plain estimate is floored, eps = 3, so the plain run shows the raw values). Cost: one fresh report per
    round, as without averaging."""
    kwargs = dict(K=20, epsilon=3.0, M=10, server_lr=0.1, permanent=False)
    plain, _ = run_rounds(fs.recipes.fedsampling(**kwargs), 5)
    averaged, _ = run_rounds(fs.recipes.fedsampling(**kwargs, average=3), 5)
    raw = [log["size_estimate"] for log in plain]
    assert min(raw) > len(SIZES)  # the premise: no floor, so these are the unclamped estimates
    assert len(set(raw)) == 5  # fresh reports: a new estimate every round
    for t, log in enumerate(averaged):
        assert log["size_estimate"] == pytest.approx(np.mean(raw[max(0, t - 2): t + 1]))
        assert log["size_epsilon"] == plain[t]["size_epsilon"] == 3.0 * (t + 1)


def test_average_floors_the_mean_not_each_estimate():
    """Reports (1, 1, 1) with M = 4, e^eps = 3 (alpha = 0.4): raw N~ = (3 - 0.6 * 4 * 3 / 2) / 0.4 = -1.5, floored
    to 3 alone; averaging takes the raw value (scaled to the clients asked) so the mean stays unbiased."""
    policy = RandomizedSizes(math.log(3), 4, permanent=False, average=2)
    info = policy.summarize(np.arange(3), np.array([1, 1, 1]))
    assert info.total == 3.0
    assert policy.unclamped_total(info, asked=3) == pytest.approx(-1.5)
    assert policy.unclamped_total(info, asked=6) == pytest.approx(-3.0)


def test_M_rmse_is_logged_and_used():
    logs, _ = run_rounds(fs.recipes.fedsampling(K=20, M="rmse", server_lr=0.1, size_prior=(4.0, 1.0)), 1)
    assert logs[0]["size_M"] == size_estimate.rmse_M(len(SIZES), 3.0, 4.0, 1.0)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"sizes": "guess"}, "sizes must be"),
        ({"normalize": "N"}, "normalize must be"),
        ({"M": "best"}, "M must be"),
        ({"sizes": "exact", "reuse": 2}, "randomized size reports"),
        ({"reuse": 0}, "reuse must be"),
        ({"average": 2}, "fresh reports"),
        ({"normalize": "drawn", "secure_sum": False}, "secure_sum=True"),
    ],
)
def test_bad_options_are_one_clear_error(params, message):
    with pytest.raises(ValueError, match=message):
        fs.recipes.fedsampling(**params)


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_drawn_normalized_update_is_the_mean_gradient_of_the_drawn_samples(backend):
    """normalize="drawn": the update equals (K/S) times the K-normalized one for the same draws (same seed),
    S the number drawn: checked against the K-normalized run's update and the ratio logged by both."""
    fed, module = small_federation(backend)
    params = fs.models.initial_parameters(module, 0)
    base = fs.recipes.fedsampling(K=20, epsilon=3.0, M=10, server_lr=1.0, normalize="K")
    drawn = fs.recipes.fedsampling(K=20, epsilon=3.0, M=10, server_lr=1.0, normalize="drawn", count_noise=0)
    noised = fs.recipes.fedsampling(K=20, epsilon=3.0, M=10, server_lr=1.0, count_noise=2.0)  # the library protocol
    updates = []
    for strategy in (base, drawn, noised):
        new, log = strategy.round(with_secure_sum(fed), params, strategy.init_state(params), 0, seed=0)
        updates.append((torch.cat([(params[k] - new[k]).flatten() for k in params]), log))
    (g_K, _), (g_S, log_S), (g_noised, log_noised) = updates
    for g in (g_S, g_noised):
        cosine = torch.dot(g_K, g) / (g_K.norm() * g.norm())
        assert float(cosine) == pytest.approx(1.0, abs=1e-5)
    # the drawn count implied by the two updates is a whole number of samples, the one the round logged
    S = 20 * float(g_K.norm() / g_S.norm())
    assert S == pytest.approx(round(S), abs=1e-3) and 1 <= round(S) <= sum(SIZES) and log_S["samples"] == round(S)
    # with noise on the count the update divides by S + noise: the logged (noised) count, not a whole number
    S_noised = 20 * float(g_K.norm() / g_noised.norm())
    assert S_noised == pytest.approx(log_noised["samples"], rel=1e-5) and S_noised != round(S_noised)


def monte_carlo_updates(strategy, fed, params, draws):
    """``draws`` single-round updates at the same parameters (round index varies: fresh draws and, with fresh
    reports, fresh size estimates), flattened."""
    out = []
    for t in range(draws):
        new, _ = strategy.round(with_secure_sum(fed, strategy.secure_sum), params, strategy.init_state(params), t, seed=0)
        out.append(torch.cat([(params[k] - new[k]).flatten() for k in params]).double())
    return torch.stack(out)


def test_drawn_normalization_lowers_the_error_of_a_noisy_estimate():
    """30 clients, 152 samples, K = 20, eps = 1, M = 13 (alpha = 0.14: N~ has sd ~ its mean), fresh reports,
    400 rounds at one point. Reference: the full-data mean gradient g. The K-normalized update is unbiased
    only given N~ (E = E[N/N~] g, not g: N/N~ is noisy and skewed); the drawn-normalized one is a ratio estimator
    with bias O(1/E[S]). Measured: its mean squared error is at most half the K-normalized one's (the ratio
    of two 400-draw MSEs has a sampling error of ~15%), and its relative bias ||E - g||/||g|| below 0.15
    (the Monte Carlo error of the mean is ~0.05 of ||g|| here)."""
    fed, module = small_federation("vectorized")
    params = fs.models.initial_parameters(module, 0)
    kwargs = dict(K=20, epsilon=1.0, M=13, server_lr=1.0, permanent=False)
    by_K = monte_carlo_updates(fs.recipes.fedsampling(**kwargs, normalize="K"), fed, params, 400)
    by_S = monte_carlo_updates(fs.recipes.fedsampling(**kwargs, normalize="drawn", count_noise=0), fed, params, 400)
    full = fs.recipes.fedsampling(K=sum(SIZES), server_lr=1.0, sizes="exact")  # p = 1: every sample, (1/N) sum g
    g = monte_carlo_updates(full, fed, params, 1)[0]
    mse_K, mse_S = [float(((u - g) ** 2).sum(1).mean()) for u in (by_K, by_S)]
    assert mse_S < 0.5 * mse_K
    assert float((by_S.mean(0) - g).norm() / g.norm()) < 0.15
