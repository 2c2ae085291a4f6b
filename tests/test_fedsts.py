"""FedSTS / FedSTaS: stratification, Neyman allocation, within-stratum importance sampling, stratified
aggregation, the participants-only data level, recipes and short end-to-end runs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from fedsample.messages import payloads_for
import fedsample as fs
from fedsample import privacy
from fedsample.messages import ClientContext, ProbeReport, TrainReport
from fedsample.evaluation import evaluate
from fedsample.models import LogisticRegression, initial_parameters
from fedsample.sampling import design
from fedsample.sampling.clients import Cohort, UniformClients
from fedsample.sampling.participant_data import FixedShareSamples, ParticipantData
from fedsample.sampling.stratify import StratifiedClients, kmeans_strata, selection_weights, stratum_spread
from fedsample.privacy.sizes import ExactSizes, RandomizedSizes
from fedsample.strategy import RoundContext
from fedsample.training.aggregate import StratifiedMean, WeightedMean

from helpers import blobs, federate
from fedsample.callbacks import Checkpoint


class ProbeOnly:
    """A federation whose clients answer probes with fixed compressed gradients (and log the requests)."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = np.asarray(vectors, dtype=np.float64)
        self.requests: list = []

    @property
    def num_clients(self) -> int:
        return len(self.vectors)

    def run(self, client_ids, payload, round):
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        assert procedure == "probe"
        self.requests.append(payload)
        return [ProbeReport(0.0, 0.0, compressed=self.vectors[k]) for k in client_ids]


def three_clusters(seed: int = 0) -> np.ndarray:
    """18 clients in three well-separated clusters of sizes 4, 6, 8 and different spreads; norms differ
    a lot inside each cluster (so norm-proportional sampling is far from uniform)."""
    rng = np.random.default_rng(seed)
    centers = np.array([[50.0, 0, 0], [0, 50.0, 0], [0, 0, 50.0]])
    spreads = [0.5, 4.0, 1.5]
    parts = [centers[h] * rng.uniform(0.6, 1.6, size=(n, 1)) + rng.normal(0, spreads[h], (n, 3)) for h, n in enumerate((4, 6, 8))]
    return np.concatenate(parts)


def context(fed, round: int = 0, seed: int = 0, state: dict | None = None) -> RoundContext:
    return RoundContext(fed, {}, round, seed, {} if state is None else state)


# --- stratification and allocation ------------------------------------------------------------------


def test_stratum_spread_by_hand():
    X = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 8.0], [1.0, 1.0]])
    labels = np.array([0, 0, 0, 1])
    # stratum 0: mean (1, 4); squared distances 17, 4, 17 -> sum 38, / (3 - 1) = 19
    np.testing.assert_allclose(stratum_spread(X, labels, 3, "std"), [math.sqrt(19), 0.0, 0.0])
    # pairwise distances 5, 8, 5 -> mean 6
    np.testing.assert_allclose(stratum_spread(X, labels, 3, "pairwise"), [6.0, 0.0, 0.0])


def test_kmeans_finds_separated_clusters_and_is_deterministic():
    X = three_clusters()
    a = kmeans_strata(X, 3, np.random.default_rng(7))
    b = kmeans_strata(X, 3, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    truth = np.repeat([0, 1, 2], [4, 6, 8])
    assert len({(t, l) for t, l in zip(truth, a)}) == 3  # same partition up to relabelling


@pytest.mark.parametrize("spread", ["std", "pairwise"])
def test_select_uses_neyman_allocation_on_the_strata(spread):
    X = three_clusters()
    sampler = StratifiedClients(H=3, m=9, dim=3, spread=spread)
    fed = ProbeOnly(X)
    state: dict = {}
    cohort = sampler.select(context(fed, state=state))
    labels = state["strata"]["labels"]
    N_h = np.bincount(labels, minlength=3)
    expected = design.allocate_neyman(N_h, stratum_spread(X, labels, 3, spread), 9)
    np.testing.assert_array_equal(cohort.info["stratum_sizes"], N_h)
    np.testing.assert_array_equal(cohort.info["allocation"], expected)
    assert len(cohort) == 9
    np.testing.assert_array_equal(np.bincount(cohort.strata, minlength=3), expected)
    np.testing.assert_array_equal(cohort.strata, labels[cohort.ids])
    # the widest cluster (6 clients, spread 4) gets more than the tight 4-client one
    wide, tight = labels[4], labels[0]
    assert expected[wide] > expected[tight]
    request = fed.requests[0]
    assert request.compression == "squeeze" and request.dim == 3


def test_within_stratum_inclusion_probabilities_by_monte_carlo():
    """Empirical inclusion frequencies over 4000 rounds match the cohort's pi_k within 4 standard errors,
    and pi_k = m_h * ||X_k|| / sum_{j in h} ||X_j|| (no unit is capped in this configuration)."""
    X = three_clusters(1)
    sampler = StratifiedClients(H=3, m=6, dim=3, recompute_every=10**9)
    fed = ProbeOnly(X)
    state: dict = {}
    reps = 4000
    counts = np.zeros(len(X))
    pi = np.full(len(X), np.nan)
    for t in range(reps):
        cohort = sampler.select(context(fed, round=t, state=state))
        counts[cohort.ids] += 1
        pi[cohort.ids] = cohort.inclusion
    labels = state["strata"]["labels"]
    alloc = cohort.info["allocation"]
    norms = np.linalg.norm(X, axis=1)
    by_hand = np.array([alloc[labels[k]] * norms[k] / norms[labels == labels[k]].sum() for k in range(len(X))])
    assert by_hand.max() < 1
    np.testing.assert_allclose(pi, by_hand, rtol=1e-9)
    freq = counts / reps
    se = np.sqrt(pi * (1 - pi) / reps)
    assert np.all(np.abs(freq - pi) < 4 * se + 1e-12)


def test_strata_are_kept_between_recomputations():
    X = three_clusters()
    sampler = StratifiedClients(H=3, m=3, dim=3, recompute_every=3)
    fed = ProbeOnly(X)
    state: dict = {}
    for t in range(7):
        sampler.select(context(fed, round=t, state=state))
        assert state["strata"]["round"] == 3 * (t // 3)


def test_zero_norm_clients_stay_selectable():
    w = selection_weights(np.array([[0.0, 0.0], [3.0, 4.0]]), "norm")
    assert w[0] > 0 and w[1] == 5.0
    np.testing.assert_array_equal(selection_weights(np.zeros((2, 2)), "norm"), [1.0, 1.0])
    assert selection_weights(np.ones((2, 2)), "uniform") is None


# --- aggregation: unbiased vs the paper's formula --------------------------------------------------


def scalar_reports(values: np.ndarray, ids: np.ndarray) -> list[TrainReport]:
    return [TrainReport(update={"w": torch.tensor([float(values[k])], dtype=torch.float64)}, steps=1, loss=0.0) for k in ids]


def test_unbiased_stratified_mean_is_unbiased_and_the_paper_formula_is_not():
    """Updates correlated with the norms make norm-proportional sampling skewed. Over 4000 rounds:
    the default (Horvitz-Thompson) aggregate's mean is within 4 standard errors of the full mean; the
    paper's (1/N) sum_h N_h mean_h matches its own analytic expectation (1/N) sum_h (N_h/m_h) sum pi_k v_k
    within 4 standard errors and is more than 4 standard errors away from the full mean."""
    X = three_clusters(2)
    norms = np.linalg.norm(X, axis=1)
    values = norms / 10 + np.random.default_rng(3).normal(0, 1, len(X))
    sampler = StratifiedClients(H=3, m=6, dim=3, recompute_every=10**9)
    fed = ProbeOnly(X)
    state: dict = {}
    unbiased, paper = StratifiedMean(), StratifiedMean("paper")
    est_u, est_p = [], []
    reps = 4000
    for t in range(reps):
        ctx = context(fed, round=t, state=state)
        cohort = sampler.select(ctx)
        reports = scalar_reports(values, cohort.ids)
        est_u.append(float(unbiased.combine(reports, cohort, ctx)["w"]))
        est_p.append(float(paper.combine(reports, cohort, ctx)["w"]))
    truth = values.mean()
    est_u, est_p = np.array(est_u), np.array(est_p)
    se_u, se_p = est_u.std(ddof=1) / np.sqrt(reps), est_p.std(ddof=1) / np.sqrt(reps)
    assert abs(est_u.mean() - truth) < 4 * se_u
    labels = state["strata"]["labels"]
    pi = np.zeros(len(X))
    alloc = cohort.info["allocation"]
    for h in range(3):
        members = labels == h
        pi[members] = design.inclusion_probabilities(norms[members], alloc[h])
    N_h = np.bincount(labels, minlength=3)
    paper_mean = sum(N_h[h] / alloc[h] * np.sum(pi[labels == h] * values[labels == h]) for h in range(3)) / len(X)
    assert abs(est_p.mean() - paper_mean) < 4 * se_p
    assert abs(est_p.mean() - truth) > 4 * se_p
    assert abs(paper_mean - truth) > 0.05 * abs(truth)


def test_paper_and_unbiased_agree_under_uniform_within_stratum_sampling():
    X = three_clusters()
    sampler = StratifiedClients(H=3, m=7, dim=3, within="uniform")
    ctx = context(ProbeOnly(X))
    cohort = sampler.select(ctx)
    positions = np.arange(len(cohort))
    np.testing.assert_allclose(StratifiedMean("paper").weights(positions, cohort), StratifiedMean().weights(positions, cohort))


def test_missing_reports_count_as_zero_updates():
    cohort = Cohort(np.array([0, 1, 2]), np.array([0.5, 0.5, 1.0]), 4, strata=np.array([0, 0, 1]),
                    info={"stratum_sizes": np.array([2, 2]), "allocation": np.array([2, 1])})
    reports = scalar_reports(np.array([1.0, 2.0, 3.0]), np.array([0, 1, 2]))
    reports[1] = None
    ctx = context(ProbeOnly(np.zeros((4, 2))))
    # unbiased: (1/4) * (1/0.5 + 3/1); paper: (1/4) * (2 * (1/2) * 1 + 2 * (1/1) * 3)
    assert float(StratifiedMean().combine(reports, cohort, ctx)["w"]) == pytest.approx((2 + 3) / 4)
    assert float(StratifiedMean("paper").combine(reports, cohort, ctx)["w"]) == pytest.approx((1 + 6) / 4)


def test_size_aggregation_by_hand_and_equal_to_fedavg_under_equal_inclusion():
    cohort = Cohort(np.array([0, 1, 2]), np.array([0.5, 0.25, 1.0]), 4, strata=np.array([0, 0, 1]),
                    info={"stratum_sizes": np.array([3, 1]), "allocation": np.array([2, 1])})
    ctx = context(ProbeOnly(np.zeros((4, 2))))
    ctx.sizes = ExactSizes("cohort").summarize(cohort.ids, np.array([10, 30, 20]))
    # n_k / pi_k = 20, 120, 20 -> weights 1/8, 6/8, 1/8
    reports = scalar_reports(np.array([1.0, 2.0, 3.0]), cohort.ids)
    assert float(StratifiedMean("size").combine(reports, cohort, ctx)["w"]) == pytest.approx((1 + 12 + 3) / 8)
    equal = Cohort(cohort.ids, np.full(3, 0.75), 4)
    np.testing.assert_allclose(StratifiedMean("size").weights(np.arange(3), equal, ctx),
                               WeightedMean("size").weights(np.arange(3), equal, ctx))


def test_size_aggregation_targets_the_size_weighted_mean_and_unbiased_the_client_mean():
    """Sizes correlated with the updates (as on a label-skewed partition): over 3000 rounds of the stratified
    norm-proportional design, the default HT mean is within 4 SE of the client mean (1/N) sum Delta_k and far
    from the size-weighted mean; the size-weighted ratio estimator is within 2% of the size-weighted mean
    (its O(1/m) bias) and far from the client mean."""
    X = three_clusters(4)
    rng = np.random.default_rng(5)
    sizes = rng.integers(5, 200, len(X))
    values = np.log(sizes) + rng.normal(0, 0.3, len(X))
    sampler = StratifiedClients(H=3, m=6, dim=3, recompute_every=10**9)
    fed, state = ProbeOnly(X), {}
    est_u, est_s = [], []
    for t in range(3000):
        ctx = context(fed, round=t, state=state)
        cohort = sampler.select(ctx)
        ctx.sizes = ExactSizes("cohort").summarize(np.sort(cohort.ids), sizes[np.sort(cohort.ids)])
        reports = scalar_reports(values, cohort.ids)
        est_u.append(float(StratifiedMean().combine(reports, cohort, ctx)["w"]))
        est_s.append(float(StratifiedMean("size").combine(reports, cohort, ctx)["w"]))
    client_mean, size_mean = values.mean(), np.dot(sizes, values) / sizes.sum()
    assert abs(size_mean - client_mean) > 0.1 * abs(size_mean)
    est_u, est_s = np.array(est_u), np.array(est_s)
    assert abs(est_u.mean() - client_mean) < 4 * est_u.std(ddof=1) / np.sqrt(len(est_u))
    assert abs(est_s.mean() - size_mean) < 0.02 * abs(size_mean)
    assert abs(est_s.mean() - client_mean) > 0.08 * abs(size_mean)


def test_size_aggregation_needs_exact_sizes():
    assert fs.recipes.recipe("fedsts", aggregation="size").sizes == ExactSizes(scope="cohort")
    assert fs.recipes.recipe("fedstas", aggregation="size", epsilon=None).sizes == ExactSizes(scope="cohort")
    with pytest.raises(ValueError, match="use epsilon=None"):
        fs.recipes.recipe("fedstas", aggregation="size", epsilon=3.0)


# --- FedSTaS data level ------------------------------------------------------------------------------


def test_participant_ratio_uses_eq8_over_the_cohort_only():
    cohort = Cohort(np.array([2, 5, 7]), np.ones(3), 10)
    reports = np.array([40, 3, 91])
    sizes = RandomizedSizes(3.0, 100, scope="cohort")
    ctx = context(ProbeOnly(np.zeros((10, 2))))
    ctx.sizes = sizes.summarize(cohort.ids, reports)
    alpha = privacy.alpha_for(3.0, 100)
    assert alpha == pytest.approx(0.1616, abs=1e-4)
    n_tilde = (reports.sum() - (1 - alpha) * 100 * 3 / 2) / alpha  # Eq. 8 with m = 3
    assert ParticipantData(eta=50).ratio(ctx, cohort) == pytest.approx(50 / n_tilde)
    # reports collected from more clients than the cohort: Eq. 8 still runs over the participants only
    ctx.sizes = sizes.summarize(np.array([2, 5, 7, 9]), np.append(reports, 10))
    assert ParticipantData(eta=50).ratio(ctx, cohort) == pytest.approx(50 / n_tilde)


def test_the_two_readings_of_eta():
    """The paper's §3.1 gives eta as K_desired = 2048 and as "the sampling ratio q = 0.1, determining the requested
    sample size": eta=2048 keeps each sample with probability 2048 / n~ (Eq. 8), samples_fraction=q (alias q)
    requests eta_t = q * n~_t, so the keep probability is q whatever the reports say (by hand: n~ over 3 reports)."""
    cohort = Cohort(np.array([2, 5, 7]), np.ones(3), 10)
    reports = np.array([40, 3, 91])
    ctx = context(ProbeOnly(np.zeros((10, 2))))
    ctx.sizes = RandomizedSizes(3.0, 100, scope="cohort").summarize(cohort.ids, reports)
    alpha = privacy.alpha_for(3.0, 100)
    n_tilde = (reports.sum() - (1 - alpha) * 100 * 3 / 2) / alpha
    by_eta = fs.recipes.recipe("fedstas", eta=50).data
    by_fraction = fs.recipes.recipe("fedstas", q=0.1).data
    assert by_eta == ParticipantData(50) and by_fraction == ParticipantData(2048, fraction=0.1)
    assert by_eta.ratio(ctx, cohort) == pytest.approx(50 / n_tilde)
    assert by_fraction.ratio(ctx, cohort) == 0.1 and ctx.log["eta"] == pytest.approx(0.1 * n_tilde)
    assert fs.recipes.recipe("fedstas", samples_fraction=0.1, epsilon=None).data.fraction == 0.1
    with pytest.raises(ValueError, match=r"fedstas: samples_fraction \(q\) must be left out when samples_per_round"):
        fs.recipes.recipe("fedstas", q=0.1, eta=2048)
    with pytest.raises(ValueError, match=r"fedstas: q must be in \(0, 1\] or None, got 1.5"):
        fs.recipes.recipe("fedstas", q=1.5)


@pytest.mark.parametrize("epsilon", [None, "none"])
def test_fedstas_without_dp_uses_the_participants_exact_total(epsilon):
    """epsilon=None: the cohort reports exact sizes, so p = eta / (sum of the participants' true sizes)
    every round (checked against the partition's sizes), and no size report is randomized."""
    fed = tiny_federation()
    strategy = fs.recipes.recipe("fedstas", H=3, m=6, eta=40, lr=0.05, batch_size=16, epsilon=epsilon)
    assert strategy.sizes == ExactSizes(scope="cohort")
    sizes = np.asarray(fed.sizes())
    seen = []

    class Spy(ParticipantData):
        def plan(self, ctx, cohort):
            assert ctx.sizes.exact
            seen.append(self.ratio(ctx, cohort) * sizes[cohort.ids].sum())
            return super().plan(ctx, cohort)

    spied = dataclasses.replace(strategy, data=Spy(eta=40))
    fs.simulate(spied, fed, LogisticRegression(), rounds=4, seed=1, eval_every=4)
    np.testing.assert_allclose(seen, [40.0] * 4)


def test_fedstas_epsilon_must_be_a_number_or_none():
    with pytest.raises(ValueError, match="epsilon must be a number > 0 or 'none'"):
        fs.recipes.recipe("fedstas", epsilon="off")


def test_fixed_share_samples_keep_each_sample_with_probability_p():
    n, p, reps = 13, 0.37, 6000
    x = torch.zeros(n, 2)
    ctx = ClientContext(0, x, torch.zeros(n, dtype=torch.int64), torch.nn.Identity(), "classification", 2)
    plan = FixedShareSamples(p)
    rng = np.random.default_rng(0)
    counts = np.zeros(n)
    for _ in range(reps):
        idx = plan.draw(ctx, rng).indices
        assert len(idx) in (4, 5) and len(np.unique(idx)) == len(idx)
        counts[idx] += 1
    se = math.sqrt(p * (1 - p) / reps)
    assert np.all(np.abs(counts / reps - p) < 4 * se)


# --- recipes and end-to-end runs ---------------------------------------------------------------------


def test_recipes_carry_the_paper_defaults():
    sts, stas = fs.recipes.recipe("fedsts"), fs.recipes.recipe("fedstas")
    assert (sts.clients.H, sts.clients.m, sts.clients.dim) == (10, 10, 9)
    assert (sts.local.steps, sts.local.lr, sts.local.batch_size) == (3, 0.01, 128)
    assert sts.aggregate == StratifiedMean("unbiased") and sts.sizes is None
    assert stas.data == ParticipantData(2048, "bernoulli")
    assert (stas.sizes.epsilon, stas.sizes.M, stas.sizes.scope) == (3.0, 100, "cohort")
    assert privacy.alpha_for(stas.sizes.epsilon, stas.sizes.M) == pytest.approx(0.1616, abs=1e-4)
    assert fs.recipes.recipe("fedstas", draw="fixed", aggregation="paper").data.draw == "fixed"


def tiny_federation():
    ds = blobs(n=500, d=6, classes=3, seed=1, test=150)
    sizes = np.random.default_rng(2).integers(6, 28, 30)
    sizes = (sizes * 500 // sizes.sum()).tolist()
    return federate(ds, sizes)


@pytest.mark.parametrize(
    "name, params",
    [("fedsts", {}), ("fedsts", {"compression": "projection"}), ("fedstas", {"eta": 100}), ("fedstas", {"eta": 100, "draw": "fixed"})],
)
def test_end_to_end_runs_improve_accuracy_and_are_deterministic(name, params):
    fed = tiny_federation()
    model = LogisticRegression()
    strategy = fs.recipes.recipe(name, H=3, m=6, lr=0.05, batch_size=16, **params)
    res = fs.simulate(strategy, fed, model, rounds=8, seed=3, eval_every=8)
    module = model.build(fed.dataset.input_shape, fed.dataset.num_classes)
    ds = fed.dataset
    start = evaluate(module, initial_parameters(module, 3), torch.as_tensor(ds.x_test), torch.as_tensor(ds.y_test), ds.task, ds.num_classes)
    assert res.final["accuracy"] > max(0.8, start["accuracy"] + 0.2)
    assert all(h["cohort"] == 6 for h in res.history)
    if name == "fedstas":
        assert all(0 < h["ratio"] <= 1 for h in res.history)
    again = fs.simulate(strategy, fed, model, rounds=8, seed=3, eval_every=8)
    assert again.history == res.history


# --- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"H": 0}, "number of strata H"),
        ({"H": 4, "m": 3}, "m must be an integer >= H"),
        ({"dim": 0}, "dimension d'"),
        ({"compression": "gzip"}, "compression must be one of"),
        ({"recompute_every": 0}, "recompute_every"),
        ({"spread": "range"}, "spread"),
        ({"within": "size"}, "within"),
    ],
)
def test_bad_sampler_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StratifiedClients(**kwargs)


def test_more_strata_or_clients_than_the_federation_has():
    fed = ProbeOnly(np.random.default_rng(0).normal(size=(5, 3)))
    with pytest.raises(ValueError, match="H = 10 exceeds the number of clients N = 5"):
        StratifiedClients(H=10, m=10).select(context(fed))
    with pytest.raises(ValueError, match="m = 6 exceeds the number of clients N = 5"):
        StratifiedClients(H=2, m=6).select(context(fed))


def test_bad_aggregation_and_data_settings():
    with pytest.raises(ValueError, match="'unbiased', 'paper' or 'size'"):
        StratifiedMean("mean")
    ctx = context(ProbeOnly(np.zeros((4, 2))))
    cohort = UniformClients(2).select(ctx)
    with pytest.raises(ValueError, match="needs a stratified cohort"):
        StratifiedMean("paper").combine(scalar_reports(np.ones(4), cohort.ids), cohort, ctx)
    with pytest.raises(ValueError, match="eta"):
        ParticipantData(eta=0)
    with pytest.raises(ValueError, match="draw"):
        ParticipantData(draw="poisson")


def test_resume_keeps_the_strata_and_ends_like_an_uninterrupted_run(tmp_path):
    fed = tiny_federation()
    strategy = fs.recipes.recipe("fedstas", H=3, m=6, eta=100, lr=0.05, batch_size=16, recompute_every=2)
    model = LogisticRegression()
    full = fs.simulate(strategy, fed, model, rounds=5, seed=4, eval_every=5)
    ckpt = tmp_path / "run.pt"
    fs.simulate(strategy, fed, model, rounds=3, seed=4, eval_every=5, callbacks=[Checkpoint(ckpt)])
    resumed = fs.simulate(strategy, fed, model, rounds=5, seed=4, eval_every=5, callbacks=[Checkpoint(ckpt, resume=True)])
    assert resumed.history[-1] == full.history[-1]
