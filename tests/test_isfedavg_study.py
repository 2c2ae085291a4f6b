"""ISFedAvg's §V-A study (fedsample.reproduction.isfedavg_msd): the batched systematic sampler's inclusion
frequencies, the unbiasedness of one round of the numpy Algorithm 1 (Monte Carlo, 4 standard errors), the
variance-bound gain by hand, the study's output shape on a tiny problem, and its realised budget (rows trained per
round, read by the tables through the same path as an experiment's)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsample.reproduction import isfedavg_msd as m
from fedsample.reproduction.papers.isfedavg import PAPER
from fedsample.sampling.design import inclusion_probabilities


def test_batched_capped_inclusion_matches_the_design_module():
    rng = np.random.default_rng(0)
    p = m.normalize_rows(rng.random((5, 9)) ** 4)
    n = np.array([1, 2, 3, 4, 5])
    pi = m.capped_inclusion(p, n)
    for row, k in zip(range(5), n):
        np.testing.assert_allclose(pi[row], inclusion_probabilities(p[row], int(k)), atol=1e-12)


def test_batched_systematic_rows_inclusion_frequencies():
    """Distinct units, n_r per row, unit frequencies within 4 binomial standard errors of pi."""
    p = m.normalize_rows(np.array([[8.0, 1.0, 2.0, 3.0, 0.5, 1.5, 4.0], [1.0] * 7]))
    n = np.array([3, 2])
    pi = m.capped_inclusion(p, n)
    reps, rng = 8000, np.random.default_rng(1)
    counts = np.zeros_like(pi)
    for _ in range(reps):
        ids, valid = m.systematic_rows(pi, n, rng)
        for r in range(2):
            chosen = ids[r][valid[r]]
            assert len(np.unique(chosen)) == n[r]
            counts[r, chosen] += 1
    se = np.sqrt(pi * (1 - pi) / reps)
    assert np.all(np.abs(counts / reps - pi) <= 4 * se + 1e-12)


def small_problem(seed: int = 0) -> m.Problem:
    return m.paper_problem(seed, num_agents=8, points=6, rho=0.01)


def test_one_round_is_unbiased_for_the_global_gradient():
    """E_k = 1, mu = 1: w_0 - w_1 estimates (1/K) sum_k grad P_k(w_0) (Eqs. 8-9) for importance probabilities."""
    problem = small_problem()
    problem = m.Problem(problem.u, problem.d, problem.rho, problem.w_opt, np.ones(8, dtype=int), problem.batch)
    w0 = np.array([[0.7, -0.4]])
    target = m.sample_gradients(problem, w0)[0].mean(axis=(0, 1))
    data_p, agent_p = m.importance_probabilities(problem, w0)
    reps, L = 4000, 3
    rng = np.random.default_rng(2)
    w = np.repeat(w0, reps, axis=0)
    pi = m.capped_inclusion(np.repeat(agent_p, reps, axis=0), np.full(reps, L))
    agents, _ = m.systematic_rows(pi, np.full(reps, L), rng)
    rows = np.arange(reps)[:, None]
    local, _ = m.local_training(problem, w, agents, pi[rows, agents], np.repeat(data_p, reps, axis=0)[rows, agents], 1.0, False, rng)
    steps = w0 - local.mean(axis=1)
    se = steps.std(axis=0) / np.sqrt(reps)
    assert np.all(np.abs(steps.mean(axis=0) - target) < 4 * se), (steps.mean(axis=0), target, se)


def test_bound_gain_for_identical_agents_is_the_data_level_gain_by_hand():
    """Identical agents (E_k B_k = 6): no agent-level gain, so the bound ratio is c(mean g^2) / c(mean(g)^2) with
    c(m) = 6 m / 6 + (3 + 6/6) ||grad P||^2 (Eqs. 21, 23, Lemmas 6-7); heterogeneous agents gain more."""
    problem = small_problem()
    same = m.Problem(np.repeat(problem.u[:1], 8, 0), np.repeat(problem.d[:1], 8, 0), problem.rho, problem.w_opt,
                     np.full(8, 2), np.full(8, 3))
    g = m.sample_gradients(same, same.w_opt[None])[0, 0]
    norms, grad2 = np.linalg.norm(g, axis=-1), np.sum(g.mean(axis=0) ** 2)
    by_hand = (np.mean(norms**2) + 4 * grad2) / (np.mean(norms) ** 2 + 4 * grad2)
    assert m.bound_gain_db(same) == pytest.approx(10 * np.log10(by_hand), rel=1e-9)
    assert m.bound_gain_db(problem) > 0


def test_tiny_study_output(tmp_path):
    out = m.msd_study([0], rounds=30, steady=10, reps=2, num_agents=8, points=6, L=2, mu=0.05, out=tmp_path)
    assert set(out) == set(m.VARIANTS.values()) | {m.BOUND}
    assert out[m.VARIANTS["uniform"]]["gain_db"] == [0.0]
    assert all(np.isfinite(v["msd_db"][0]) for k, v in out.items() if k != m.BOUND)
    curves = json.loads((tmp_path / "isfedavg-regression.json").read_text())["msd_db"]
    assert len(curves[m.VARIANTS["exact"]]) == 30
    assert "budget" not in out[m.BOUND]
    for label in m.VARIANTS.values():
        budget = out[label]["budget"]
        assert budget["source"] == "released" and budget["rounds"] == 30 * 2 and len(budget["per_seed"]) == 1
        assert 0 < budget["min"] <= budget["mean"] <= budget["max"]


def test_rows_trained_per_round_is_the_chosen_agents_sum_of_epochs_times_batch():
    """Uniform sampling picks each agent with probability L / K, so a round trains L mean_k(E_k B_k) rows in
    expectation; 300 rounds x 40 repetitions of the paper's heterogeneity (E_k in [1, 5], B_k in [1, 10]) must land
    within 4 standard errors (rounds taken as independent; systematic sampling within a round only lowers the
    spread). One round by hand: the drawn points counted equal the chosen agents' E_k B_k."""
    problem = m.paper_problem(3, num_agents=40, points=12)
    L = 4
    _, samples = m.run_variant(problem, "uniform", rounds=300, reps=40, L=L, mu=0.01, seed=3)
    expected = L * np.mean(problem.epochs * problem.batch)
    assert abs(samples.mean() - expected) <= 4 * samples.std() / np.sqrt(samples.size), (samples.mean(), expected)
    rng = np.random.default_rng(0)
    agents = np.array([[0, 5, 9], [1, 2, 3]])
    w, uniform = np.zeros((2, problem.w_opt.size)), np.full((2, 3, problem.N), 1.0 / problem.N)
    _, drawn = m.local_training(problem, w, agents, np.full((2, 3), 3 / problem.K), uniform, 0.01, False, rng)
    by_hand = (problem.epochs * problem.batch)[agents].sum(axis=1)
    np.testing.assert_array_equal(m.rows_trained(drawn), by_hand)


def test_the_study_budget_reaches_the_comparison_rows_like_an_experiments(tmp_path):
    """The study's ``budget`` goes through command.run_study's study.json and collect.study_values to the row's
    realised budgets and the equal-budget rule, as an experiment's results.json does; the figures are the study's."""
    from types import SimpleNamespace

    from fedsample.budget import equal_budgets
    from fedsample.reproduction.command import run_study
    from fedsample.reproduction.rows import comparison_row
    from fedsample.reproduction.spec import Comparison, Study
    from fedsample.reproduction.table import claim_text

    def tiny(device, seeds, out):
        return m.msd_study(seeds, rounds=20, steady=10, reps=2, num_agents=10, points=6, L=3, mu=0.05, out=out)

    _, values = run_study(Study("tiny", tiny, cost="~1 s"), SimpleNamespace(out=tmp_path, seeds=[0, 1], device="cpu"),
                          SimpleNamespace(resume=False))
    uniform, exact = m.VARIANTS["uniform"], m.VARIANTS["exact"]
    stored = json.loads((tmp_path / "tiny" / "study.json").read_text())["values"]
    means = {label: [s["mean"] for s in stored[label]["budget"]["per_seed"]] for label in (uniform, exact)}
    assert values[uniform]["budget"]["samples"] == means[uniform] and "budget" not in values[uniform]["final"]
    row = comparison_row(Comparison("IS beats uniform", "tiny", exact, uniform, metric="msd_db", paired=True), {"tiny": values})
    realised = {label: float(np.mean(means[label])) for label in (uniform, exact)}
    assert row["realised"] == {"better": realised[exact], "worse": realised[uniform], "tolerance": 0.10,
                               "equal": equal_budgets(realised), "how": {"better": "released", "worse": "released"}}
    assert f"realised: {exact} {realised[exact]:.0f}, {uniform} {realised[uniform]:.0f} samples per round" in claim_text(row)


def test_paper_rows_name_the_study_labels_and_preset():
    labels = set(m.VARIANTS.values()) | {m.BOUND}
    for row in PAPER.figures + PAPER.comparisons:
        if row.source == "isfedavg-regression":
            assert {getattr(row, "label", None), getattr(row, "better", None), getattr(row, "worse", None)} - {None} <= labels
    assert PAPER.studies[0].name == "isfedavg-regression"
