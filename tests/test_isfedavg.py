"""ISFedAvg (Rizk, Vlaski & Sayed 2022): probability formulas (Lemmas 6-7, Eqs. 52-53), systematic agent
sampling frequencies, Horvitz-Thompson unbiasedness of the Eq. 8 scaling (Monte Carlo, 4 standard errors),
the three probability updates, and the §V-A regression check (importance sampling beats uniform in MSD)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsample.messages import payloads_for
from fedsample import recipes
import dataclasses

from fedsample.messages import ClientContext, ProbeRequest

from fedsample.client import probe, weighted_second_moment
from fedsample.data.synthetic import isfedavg_regression
from fedsample.data.types import Dataset, FederatedData
from fedsample.federation.simulator import Simulator
from fedsample.sampling import importance as isx
from fedsample.sampling.design import inclusion_probabilities
from fedsample.simulation import simulate
from fedsample.training.aggregate import ISFedAvgAggregate
from fedsample.training.local import EpochSGD


def linear_module() -> torch.nn.Module:
    """The paper's regression model d = u w (no intercept), so w° of the data set is the exact optimum."""
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 1, bias=False))


def regression(K: int, points: int = 40, seed: int = 0) -> tuple[FederatedData, np.ndarray]:
    ds = isfedavg_regression(num_agents=K, points_per_agent=points, rho=0.0, regressor_var=(0.1, 4.0), noise_var=(0.01, 1.0), seed=seed)
    return FederatedData.from_assignment(ds, ds.meta["client_ids"], K), ds.meta["w_opt"]


def as_params(w: np.ndarray) -> dict:
    return {"1.weight": torch.tensor(w, dtype=torch.float32)[None]}


# --- formulas --------------------------------------------------------------------------------------


def test_agent_scores_lemma7_and_normalization():
    s = isx.agent_scores(np.array([1.0, 0.0, 4.0]), np.array([1.0, 2.0, 0.0]), alpha=3.0)
    np.testing.assert_allclose(s, [2.0, np.sqrt(12.0), 2.0])
    np.testing.assert_allclose(isx.normalized_probabilities(s), s / s.sum())
    p = isx.normalized_probabilities(np.array([0.0, 1.0, 3.0]), floor=0.1)
    np.testing.assert_allclose(p, [0.1 / 3, 0.9 * 0.25 + 0.1 / 3, 0.9 * 0.75 + 0.1 / 3])
    per_agent = isx.agent_scores(np.array([0.0, 0.0]), np.array([1.0, 1.0]), alpha=(1.0, 4.0))
    np.testing.assert_allclose(per_agent, [1.0, 2.0])


def test_cheap_update_eq52_rescales_only_the_participants():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    new = isx.rescale_subset(p, np.array([1, 3]), np.array([1.0, 2.0]))
    np.testing.assert_allclose(new, [0.1, 0.6 / 3, 0.3, 1.2 / 3])
    assert new.sum() == pytest.approx(1.0)


def test_systematic_agent_inclusion_frequencies():
    """Exactly L distinct agents each time; agent k included with frequency pi_k = L p_k (one capped at 1);
    tolerance 4 binomial standard errors."""
    p = isx.normalized_probabilities(np.array([8.0, 1.0, 2.0, 3.0, 0.5, 1.5, 4.0]))
    L, reps = 3, 10_000
    pi = inclusion_probabilities(p, L)
    assert pi[0] == 1.0  # L * p_0 > 1: taken with certainty, the rest rescaled
    rng = np.random.default_rng(1)
    counts = np.zeros(p.size)
    for _ in range(reps):
        s = isx.random_order_systematic(p, L, rng)
        assert len(np.unique(s.ids)) == L
        np.testing.assert_allclose(s.inclusion, pi[s.ids])
        counts[s.ids] += 1
    se = np.sqrt(pi * (1 - pi) / reps)
    assert np.all(np.abs(counts / reps - pi) <= 4 * se + 1e-12), (counts / reps, pi)


def test_data_scale_is_horvitz_thompson_unbiased_monte_carlo():
    """(1/B) sum_b g_b * B/(N pi_b) is unbiased for (1/N) sum_n g_n, also when some pi_n is capped at 1; the
    with-replacement reading 1/(N w_n/sum w) is biased then. 4 standard errors per coordinate."""
    rng = np.random.default_rng(2)
    N, B, reps = 12, 4, 10_000
    g = rng.normal(size=(N, 3)) + 1.0
    w = np.abs(rng.normal(size=N)) + 0.1
    w[0] = 10.0  # forces pi_0 = 1
    p = w / w.sum()
    target = g.mean(axis=0)
    ht, naive = np.empty((reps, 3)), np.empty((reps, 3))
    for r in range(reps):
        s = isx.random_order_systematic(p, B, rng)
        ht[r] = (isx.data_scale(s.inclusion, N, B)[:, None] * g[s.ids]).mean(axis=0)
        naive[r] = (1.0 / (N * p[s.ids])[:, None] * g[s.ids]).mean(axis=0)
    se = ht.std(axis=0) / np.sqrt(reps)
    assert np.all(np.abs(ht.mean(axis=0) - target) < 4 * se), (ht.mean(axis=0), target, se)
    se_naive = naive.std(axis=0) / np.sqrt(reps)
    assert np.any(np.abs(naive.mean(axis=0) - target) > 8 * se_naive)


@pytest.mark.parametrize("scaling", ["step", "aggregate"])
def test_one_round_update_is_unbiased_for_the_full_gradient(scaling):
    """With E_k = 1 and lr = 1 a round's update is the importance-weighted gradient estimate (Eqs. 8-9) at
    w_{i-1}; over rounds its mean matches (1/K) sum_k grad P_k(w) within 4 standard errors."""
    K, reps = 8, 250
    fed, w_opt = regression(K, points=15, seed=3)
    module = linear_module()
    w = as_params(w_opt + np.array([0.4, -0.3]))
    sim = Simulator(fed, module, seed=0)
    st = recipes.isfedavg(L=3, lr=1.0, epochs=1, batch_size=(1, 2, 3, 4, 5, 2, 3, 4), update="exact", reference=as_params(w_opt), scaling=scaling)
    state = st.init_state(w)
    x, y = torch.as_tensor(fed.dataset.x_train), torch.as_tensor(fed.dataset.y_train)
    residual = (x @ w["1.weight"][0] - y).numpy()
    per_sample = 2 * residual[:, None] * x.numpy()
    sizes = fed.sizes()[fed.dataset.meta["client_ids"]]
    target = (per_sample / (K * sizes[:, None])).sum(axis=0)
    updates = np.array([(w["1.weight"] - st.round(sim, w, state, r, 0)[0]["1.weight"]).numpy()[0] for r in range(reps)])
    se = updates.std(axis=0) / np.sqrt(reps)
    assert np.all(np.abs(updates.mean(axis=0) - target) < 4 * se), (updates.mean(axis=0), target, se)


def test_plans_carry_each_agents_epochs_batches_and_scale():
    fed, w_opt = regression(6, points=10)
    sim = Simulator(fed, linear_module(), seed=0)
    sent = []
    run = sim.run
    sim.run = lambda ids, payload, rnd: (sent.append((ids, payload)) if payloads_for(payload, len(ids)).procedure.name == "train" else None) or run(ids, payload, rnd)
    st = recipes.isfedavg(L=2, lr=0.1, epochs=(1, 2, 3, 4, 5, 1), batch_size=(3, 1, 2, 4, 2, 5), update="approx")
    w = as_params(np.zeros(2))
    st.round(sim, w, st.init_state(w), 0, 0)
    ids, payloads = sent[0]
    assert len(payloads) == 2
    for k, payload in zip(ids, payloads):
        assert (payload.plan.epochs, payload.plan.batch_size) == ((1, 2, 3, 4, 5, 1)[k], (3, 1, 2, 4, 2, 5)[k])
        assert payload.plan.agent_scale > 0


# --- the probability updates ----------------------------------------------------------------------


def test_probe_reports_gradient_noise_variance():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    y = torch.tensor([1.0, -1.0, 0.5])
    ctx = ClientContext(0, x, y, linear_module(), "regression", 0)
    w = as_params(np.array([0.5, 0.25]))
    report = probe(ctx, ProbeRequest(params=w, per_sample=True), np.random.default_rng(0))
    g = 2 * (x @ w["1.weight"][0] - y)[:, None] * x
    assert report.extra["sigma2"] == pytest.approx(float(((g - g.mean(0)) ** 2).sum(1).mean()), rel=1e-5)
    assert report.grad_norm == pytest.approx(float(torch.linalg.vector_norm(g.mean(0))), rel=1e-5)
    assert "sigma2" not in probe(ctx, ProbeRequest(params=w), np.random.default_rng(0)).extra


@pytest.mark.parametrize("update", ["exact", "approx", "cheap", "uniform"])
def test_each_update_rule_runs(update):
    fed, w_opt = regression(8, points=12)
    st = recipes.isfedavg(L=3, lr=0.05, epochs=(1, 2, 1, 3, 1, 2, 1, 2), batch_size=3, update=update, reference=as_params(w_opt))
    res = simulate(st, fed, linear_module(), rounds=4, seed=0, eval_every=4)
    assert np.isfinite(res.history[-1]["mse"])


def test_cheap_rule_keeps_estimates_in_state():
    fed, _ = regression(8, points=12)
    sim = Simulator(fed, linear_module(), seed=0)
    st = recipes.isfedavg(L=3, lr=0.05, batch_size=4, update="cheap")
    w = as_params(np.zeros(2))
    state = st.init_state(w)
    w, _ = st.round(sim, w, state, 0, 0)
    agent_p = state["isfedavg"]["agent_p"]
    assert agent_p.sum() == pytest.approx(1.0)
    changed = np.flatnonzero(~np.isclose(agent_p, 1 / 8))
    assert 0 < len(changed) <= 3  # only the participants moved (Eq. 52)
    assert "data_weights" not in state["isfedavg"]  # the data weights stay on the clients
    held = {k: s["isfedavg"]["data_weights"] for k, s in sim.client_states().items()}
    assert len(held) == 3
    for k, weights in held.items():
        assert len(weights) == 12 and weights.sum() == pytest.approx(1.0)
        assert 0 < np.count_nonzero(~np.isclose(weights, 1 / 12)) <= 4  # only the drawn points (Eq. 53)
    st.round(sim, w, state, 1, 0)  # the client-held weights are used next round


def test_cheap_plan_draws_from_and_refreshes_the_client_held_weights():
    """Eq. 53 on the client: the plan draws from the weights in ctx.state and writes back only the drawn
    points' refreshed share; the plan itself carries no weights."""
    x = torch.randn(12, 2)
    y = x @ torch.tensor([1.0, -1.0]) + 0.1 * torch.randn(12)
    ctx = ClientContext(0, x, y[:, None], linear_module(), "regression", 0)
    held = np.r_[np.full(4, 0.25), np.full(8, 1e-9)]
    ctx.state["isfedavg"] = {"data_weights": held}
    plan = isx.ImportanceBatches(epochs=1, batch_size=4, params=as_params(np.zeros(2)), refresh=True)
    assert not any(isinstance(v, np.ndarray) for v in vars(plan).values())
    sample = plan.draw(ctx, np.random.default_rng(0))
    np.testing.assert_array_equal(np.sort(sample.indices), [0, 1, 2, 3])  # pi = 4 * 0.25 = 1 for these
    assert set(vars(sample)) <= {"indices", "probs", "scale", "block", "step_scale"}  # stays on the client; step_scale is the server's own factor
    now = ctx.state["isfedavg"]["data_weights"]
    norms = isx.gradient_norms(ctx, as_params(np.zeros(2)), np.arange(4))
    np.testing.assert_allclose(now[:4], held[:4].sum() / held.sum() * norms / norms.sum())
    np.testing.assert_allclose(now[4:], held[4:] / held.sum())
    ctx.state["isfedavg"]["data_weights"] = np.full(5, 0.2)
    with pytest.raises(ValueError, match="5 stored data weights"):
        plan.draw(ctx, np.random.default_rng(0))


def test_regression_importance_sampling_beats_uniform_msd():
    """§V-A at test size: K = 12 agents, L = 6, heterogeneous E_k, B_k. The time-averaged MSD over the second
    half of 70 rounds, averaged over 3 seeds, is lower with importance sampling (Lemmas 6-7 at w°) than with
    uniform sampling (same seeds, same parts otherwise); measured gap ~3.5 dB, asserted > 1 dB."""
    K, rounds = 12, 70
    fed, w_opt = regression(K)
    epochs, batches = isx.paper_heterogeneity(K, np.random.default_rng(0))

    def msd_db(update: str, seed: int) -> float:
        st = recipes.isfedavg(L=6, lr=0.05, epochs=epochs, batch_size=batches, update=update, reference=as_params(w_opt))
        sim = Simulator(fed, linear_module(), seed)
        w = as_params(np.zeros(2))
        state, msd = st.init_state(w), []
        for r in range(rounds):
            w, _ = st.round(sim, w, state, r, seed)
            msd.append(np.sum((w["1.weight"].numpy()[0] - w_opt) ** 2))
        return 10 * np.log10(np.mean(msd[rounds // 2 :]))

    uniform = np.mean([msd_db("uniform", s) for s in range(3)])
    importance = np.mean([msd_db("exact", s) for s in range(3)])
    assert importance < uniform - 1.0, (importance, uniform)


# --- the paper's agent scores (Eqs. 21-23, 43) and the l2 term (Eqs. 2, 55) ------------------------------


def copies(K: int, x: np.ndarray, y: np.ndarray) -> FederatedData:
    """K agents holding the same points (so every agent has the same gradient statistics)."""
    xs, ys = np.tile(x, (K, 1)).astype(np.float32), np.tile(y, K).astype(np.float32)
    ds = Dataset("copies", xs, ys, xs[:1], ys[:1], 0, task="regression")
    return FederatedData.from_assignment(ds, np.repeat(np.arange(K), len(y)), K)


def test_data_variability_eq23_and_alpha_by_hand():
    """sigma^2_{s,k} = 6/(E_k B_k) (1/N^2) sum_n ||g_n||^2 / p_n; alpha_k = 3 + 6/(E_k B_k)."""
    g = np.array([2.0, 4.0])
    assert weighted_second_moment(g, np.array([0.5, 0.5])) == pytest.approx((4 / 0.5 + 16 / 0.5) / 4)  # mean g^2 = 10
    assert weighted_second_moment(g, g / g.sum()) == pytest.approx(9.0)  # Lemma 6: (mean ||g||)^2
    np.testing.assert_allclose(isx.data_variability(np.array([9.0, 9.0, 9.0]), np.array([1, 2, 5]), np.array([1, 1, 2])), [54.0, 27.0, 5.4])
    np.testing.assert_allclose(isx.paper_alpha(np.array([1, 2, 5]), np.array([1, 1, 2])), [9.0, 6.0, 3.6])


def test_probe_reports_the_weighted_second_moment_under_the_agents_rule():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    ctx = ClientContext(0, x, torch.tensor([1.0, -1.0]), linear_module(), "regression", 0)
    w = as_params(np.zeros(2))  # g_n = -2 y_n x_n: norms 2 and 4
    gradient = probe(ctx, ProbeRequest(params=w, per_sample=True, data_weights=isx.DataRule("gradient")), np.random.default_rng(0))
    assert gradient.extra["weighted_second_moment"] == pytest.approx(9.0, rel=1e-6)
    held = probe(ctx, ProbeRequest(params=w, per_sample=True, data_weights=isx.DataRule("held")), np.random.default_rng(0))
    assert held.extra["weighted_second_moment"] == pytest.approx(10.0, rel=1e-6)  # uniform before any round
    ctx.state["isfedavg"] = {"data_weights": np.array([0.2, 0.8])}
    held = probe(ctx, ProbeRequest(params=w, per_sample=True, data_weights=isx.DataRule("held")), np.random.default_rng(0))
    assert held.extra["weighted_second_moment"] == pytest.approx((4 / 0.2 + 16 / 0.8) / 4, rel=1e-6)


def test_agent_probabilities_carry_epochs_and_batch_sizes_by_hand():
    """Three agents with the same data (g_n norms 2 and 4 at w = 0, mean gradient (-1, 2)): with Lemma 6's data
    probabilities the reported sum is 9 and ||grad P_k||^2 = 5, so s_k^2 = 54/(E_k B_k) + (3 + 6/(E_k B_k)) 5:
    99 for (E, B) = (1, 1), 57 for (2, 1), 23.4 for (5, 2). More epochs / larger batches: lower probability."""
    fed = copies(3, np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([1.0, -1.0]))
    w = as_params(np.zeros(2))
    st = recipes.isfedavg(L=1, lr=0.01, epochs=(1, 2, 5), batch_size=(1, 1, 2), update="exact", reference=w, floor=0.0)
    state = st.init_state(w)
    st.round(Simulator(fed, linear_module(), seed=0), w, state, 0, 0)
    np.testing.assert_allclose(state["isfedavg"]["agent_scores_exact"], np.sqrt([99.0, 57.0, 23.4]), rtol=1e-5)
    same = recipes.isfedavg(L=1, lr=0.01, epochs=1, batch_size=1, update="exact", reference=w, floor=0.0)
    state = same.init_state(w)
    same.round(Simulator(fed, linear_module(), seed=0), w, state, 0, 0)
    np.testing.assert_allclose(state["isfedavg"]["agent_scores_exact"], np.sqrt([99.0] * 3), rtol=1e-5)


def fixed_point(st, fed: FederatedData, rounds: int = 150) -> np.ndarray:
    sim, w = Simulator(fed, linear_module(), seed=0), as_params(np.zeros(2))
    state = st.init_state(w)
    for r in range(rounds):
        w, _ = st.round(sim, w, state, r, 0)
    return w["1.weight"].numpy()[0].astype(np.float64)


def test_rho_fixed_point_is_the_regularized_optimum_heterogeneous_agents():
    """Full participation, full batches, E_k = 1: the iteration's fixed point is the minimizer of
    (1/K) sum_k [(1/N_k) sum_n |d - u w|^2 + rho ||w||^2], (R_u + rho I)^-1 r_du (Eq. 57), to 1e-6."""
    K, N, rho = 4, 6, 0.5
    ds = isfedavg_regression(num_agents=K, points_per_agent=N, rho=rho, seed=1)
    fed = FederatedData.from_assignment(ds, ds.meta["client_ids"], K)
    st = recipes.isfedavg(L=K, lr=0.2, epochs=1, batch_size=N, update="uniform", rho=rho)
    np.testing.assert_allclose(fixed_point(st, fed), ds.meta["w_opt"], atol=1e-6)


def test_rho_enters_each_local_step_like_the_data_term():
    """Agents with the same data and E_k = 1, 2, 4 epochs: every local iteration has the regularized optimum
    (R + rho I)^-1 r as its fixed point, so the federated one does (to 1e-6). A plain weight decay 2 rho w per
    step (the data term divided by E_k, the decay not) lands elsewhere."""
    x = np.array([[1.0, 0.2], [0.3, -1.5], [-0.7, 0.9]])
    y = np.array([0.5, -1.0, 2.0])
    rho, fed = 0.5, copies(3, x, y)
    closed = np.linalg.solve(x.T @ x / 3 + rho * np.eye(2), x.T @ y / 3)
    st = recipes.isfedavg(L=3, lr=0.2, epochs=(1, 2, 4), batch_size=3, update="uniform", rho=rho)
    np.testing.assert_allclose(fixed_point(st, fed), closed, atol=1e-6)
    decay = dataclasses.replace(st, local=EpochSGD(lr=0.2, weight_decay=2 * rho))
    assert np.max(np.abs(fixed_point(decay, fed) - closed)) > 1e-2


# --- bad input ------------------------------------------------------------------------------------


def test_bad_input_gives_clear_errors():
    with pytest.raises(ValueError, match="alpha_k"):
        isx.agent_scores(np.ones(2), np.ones(2), alpha=-1.0)
    with pytest.raises(ValueError, match="alpha_k"):
        isx.ImportanceAgents(alpha=-0.5)
    with pytest.raises(ValueError, match="NaN"):
        isx.normalized_probabilities(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="NaN"):
        isx.agent_scores(np.array([np.nan]), np.ones(1))
    with pytest.raises(ValueError, match="probability 0 for unit 1"):
        isx.normalized_probabilities(np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="all zero"):
        isx.normalized_probabilities(np.zeros(3), floor=0.1)
    with pytest.raises(ValueError, match=">= 0"):
        isx.normalized_probabilities(np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="update must be one of"):
        recipes.isfedavg(update="optimal")
    with pytest.raises(ValueError, match="needs reference"):
        recipes.isfedavg(update="exact")
    with pytest.raises(ValueError, match="epochs E_k"):
        isx.ImportanceData(epochs=(1, 0))
    with pytest.raises(ValueError, match="floor"):
        isx.ImportanceData(floor=1.0)
    with pytest.raises(ValueError, match="L"):
        isx.ImportanceAgents(L=0)
    with pytest.raises(ValueError, match="scaling"):
        ISFedAvgAggregate("both")
    with pytest.raises(ValueError, match="rho"):
        recipes.isfedavg(rho=-0.1)
