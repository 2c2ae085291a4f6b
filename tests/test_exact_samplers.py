"""The published client samplers whose probabilities are exact (clustered sampling, optimal client sampling, DELTA)
as parts of a strategy: the declared inclusion probabilities against empirical frequencies, the same numbers on both
in-process engines, exact resume, the compatibility rules, the privacy ledger's records, and what ``diagnose`` shows
(the DELTA reference implementation's bias).

Monte Carlo tolerance, stated once: with a fixed seed and R independent draws (round t's draw uses the server's
stream of round t), an inclusion frequency must lie within Z = 4.5 binomial standard errors sqrt(pi (1 - pi) / R) of
the declared pi, a mean number of draws within 4.5 standard errors sqrt(m r (1 - r)) / sqrt(R) summed over the
distributions; clients with pi in {0, 1} must match exactly. About 30 units per test: a chance failure has
probability below 2e-4 per test.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from fedsample.messages import payloads_for
import fedsample as fs
from fedsample import parts
from fedsample.messages import HeldReport, ProbeReport
from fedsample.privacy.amplification import PrivacyWarning
from fedsample.privacy.ledger import Accounting
from fedsample.privacy.noise import UpdateNoise
from fedsample.privacy.sizes import ExactSizes, SizeInfo
from fedsample.rounds import Replies, RoundContext
from fedsample.sampling import clustered, delta, design, optimal
from fedsample.sampling.clustered import ClusteredClients
from fedsample.sampling.delta import DeltaClients
from fedsample.sampling.optimal import OptimalClients
from fedsample.simulation import SimulationState
from fedsample.strategy import Strategy
from fedsample.training.aggregate import WeightedMean
from helpers import blobs, federate
from fedsample.callbacks import Checkpoint, Progress
from fedsample.simulation import Engine

Z = 4.5
SIZES = np.array([40, 30, 20, 10, 5, 5, 60, 12, 8, 25, 3, 2])


def assert_frequencies(freq: np.ndarray, pi: np.ndarray, R: int, what: str) -> None:
    se = np.sqrt(pi * (1 - pi) / R)
    bad = np.abs(freq - pi) > Z * se + 1e-12
    assert not np.any(bad), f"{what}: clients {np.flatnonzero(bad)} off by > {Z} SE: freq={freq[bad]}, pi={pi[bad]}"


class Probed:
    """A federation that answers probes with given gradients and variances (and nothing else)."""

    def __init__(self, gradients: np.ndarray, sigma2: np.ndarray) -> None:
        self.gradients, self.sigma2 = gradients, sigma2

    @property
    def num_clients(self) -> int:
        return len(self.sigma2)

    def run(self, client_ids, payload, round):
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        assert procedure == "probe" and payload.gradient and payload.per_sample
        return Replies([ProbeReport(0.0, float(np.linalg.norm(self.gradients[k])), gradient=self.gradients[k],
                                    extra={"sigma2": float(self.sigma2[k])}) for k in client_ids])


def context(t: int, sizes: np.ndarray = SIZES, federation=None, state: dict | None = None) -> RoundContext:
    N = len(sizes)
    ctx = RoundContext(federation or Probed(np.zeros((N, 1)), np.ones(N)), None, t, 7, {} if state is None else state)
    ctx.sizes = SizeInfo(np.arange(N), np.asarray(sizes), float(np.sum(sizes)), True)
    return ctx


def draws_of(select, R: int, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inclusion frequencies, mean draws and the declared pi (from the cohorts) of R rounds of ``select(t)``."""
    included, drawn, declared = np.zeros(N), np.zeros(N), np.full(N, np.nan)
    for t in range(R):
        cohort = select(t)
        included[cohort.ids] += 1
        drawn[cohort.ids] += cohort.multiplicity
        seen = declared[cohort.ids]
        assert np.all(np.isnan(seen) | np.isclose(seen, cohort.inclusion)), "pi changed between rounds of a fixed design"
        declared[cohort.ids] = cohort.inclusion
    return included / R, drawn / R, declared


# --- the declared probabilities against the draws ------------------------------------------------------------


@pytest.mark.parametrize("m", [3, 5])
def test_clustered_algorithm_1_draws_match_the_declared_inclusion_and_expected_draws(m):
    """m = 5 caps: the client of 60 of 220 samples has m p = 1.36 > 1, so it is drawn in every round (pi = 1)."""
    R, N = 4000, len(SIZES)
    sampler = ClusteredClients(m=m)
    r = clustered.size_distributions(SIZES, m)
    pi = clustered.inclusion_from_distributions(r)
    freq, drawn, declared = draws_of(lambda t: sampler.select(context(t)), R, N)
    assert_frequencies(freq, pi, R, "Algorithm 1")
    np.testing.assert_allclose(declared[~np.isnan(declared)], pi[~np.isnan(declared)])
    p = SIZES / SIZES.sum()
    se = np.sqrt((r * (1 - r)).sum(axis=0) / R)
    assert np.all(np.abs(drawn - m * p) <= Z * se + 1e-12)  # E[draws] = m p_i: the aggregation weight draws/m has mean p_i
    assert (pi[6] == 1.0) == (m * p[6] >= 1) and freq[6] == (1.0 if m * p[6] >= 1 else freq[6])
    assert sampler.expected_cohort(N, SIZES) == pytest.approx(pi.sum())


def test_clustered_algorithm_2_draws_match_its_distributions_from_the_kept_updates():
    """Clients 0-3 point one way, 4-7 another, 8-9 a third; 10 and 11 have not taken part (clusters of their own)."""
    R, N, m = 4000, len(SIZES), 4
    rng = np.random.default_rng(0)
    directions = np.repeat(np.eye(3) * 5, [4, 4, 2], axis=0)
    updates = np.zeros((N, 3), dtype=np.float32)
    updates[:10] = directions + rng.normal(0, 0.1, (10, 3))
    seen = np.arange(N) < 10
    state = {"clustered": {"updates": updates, "seen": seen}}
    sampler = ClusteredClients(m=m, algorithm="similarity")
    p = SIZES / SIZES.sum()
    labels = clustered.similarity_labels(updates, seen, p, m)
    assert labels[10] != labels[11] and labels[10] not in labels[:10]
    r = clustered.cluster_distributions(labels, SIZES, m)
    np.testing.assert_allclose(r.sum(axis=0), m * p)
    pi = clustered.inclusion_from_distributions(r)
    freq, _, _ = draws_of(lambda t: sampler.select(context(t, state=state)), R, N)
    assert_frequencies(freq, pi, R, "Algorithm 2")


def test_clustered_algorithm_2_keeps_each_participants_latest_update():
    sampler = ClusteredClients(m=2, algorithm="similarity")
    ctx = context(0)
    cohort = sampler.select(ctx)
    assert ctx.log["clusters"] == len(SIZES)  # before anyone took part: every client a cluster of its own
    from fedsample.messages import TrainReport

    replies = Replies([TrainReport({"w": torch.full((2,), float(k))}, 1, 0.0) for k in cohort.ids])
    sampler.observe(ctx, cohort, replies)
    kept = ctx.state["clustered"]
    assert kept["seen"].sum() == len(cohort) and np.all(kept["updates"][cohort.ids] == cohort.ids[:, None])
    assert sampler.capabilities.reads_replies and not ClusteredClients(m=2).capabilities.reads_replies


@pytest.mark.parametrize("rule", ["exact", "aocs"])
def test_optimal_sending_frequencies_match_the_declared_probabilities_with_caps(rule):
    """The case reported against FedLab (32 log-normal norms, m = 8): here sum p = m, max p <= 1, and the capped
    clients send in every round."""
    R, N, m = 4000, 32, 8
    norms = np.random.default_rng(3).lognormal(0.0, 1.5, N)
    sampler = OptimalClients(m=m, rule=rule, j_max=50, objective="uniform")
    p = sampler.probabilities(norms / N)
    assert p.max() <= 1.0 and p.sum() == pytest.approx(m, abs=1e-9) and np.count_nonzero(p == 1.0) >= 1
    np.testing.assert_allclose(p, optimal.optimal_probabilities(norms, m))
    held = Replies([HeldReport(float(u)) for u in norms])

    def select(t):
        ctx = context(t, sizes=np.ones(N, dtype=int))
        return sampler.select_trained(ctx, sampler.select(ctx), held)

    freq, _, declared = draws_of(select, R, N)
    assert_frequencies(freq, p, R, f"optimal sampling ({rule})")
    np.testing.assert_allclose(declared[~np.isnan(declared)], p[~np.isnan(declared)])
    assert np.all(freq[p == 1.0] == 1.0)


def test_optimal_sampling_weights_the_norms_by_size_and_leaves_out_failed_clients():
    from fedsample.rounds import Failed

    N, m = 6, 2
    sizes = np.array([10, 10, 20, 40, 10, 10])
    sampler = OptimalClients(m=m)
    held = Replies([HeldReport(1.0), HeldReport(1.0), HeldReport(1.0), HeldReport(1.0), Failed(4, "train_held", "dropped out"), HeldReport(0.0)])
    ctx = context(0, sizes=sizes)
    cohort = sampler.select_trained(ctx, sampler.select(ctx), held)
    u = sizes / sizes.sum() * np.array([1, 1, 1, 1, 0, 0])
    assert set(cohort.ids) <= {0, 1, 2, 3} and ctx.log["sending_probability_sum"] == pytest.approx(m)
    np.testing.assert_allclose(cohort.inclusion, optimal.optimal_probabilities(u, m)[cohort.ids])


def _delta_federation(N: int = 10) -> Probed:
    """Gradients of two groups (clients 0-1 far from the rest) and unequal variances."""
    rng = np.random.default_rng(5)
    g = rng.normal(0, 0.2, (N, 4))
    g[:2] += 10.0
    return Probed(g, rng.uniform(0.1, 2.0, N))


@pytest.mark.parametrize("score_weights", ["objective", "none"])
@pytest.mark.parametrize("draw", ["with_replacement", "poisson"])
def test_delta_draws_match_the_declared_probabilities(draw, score_weights):
    """p_k proportional to w_k sqrt(zeta_k^2 + sigma_k^2) (the default, w_k = n_k/n) or to the unweighted score."""
    R, N, m = 4000, 10, 3
    fed = _delta_federation(N)
    sizes = np.arange(1, N + 1) * 4
    sampler = DeltaClients(m=m, draw=draw, score_weights=score_weights)
    w = sizes / sizes.sum()
    scores = delta.delta_scores(delta.gradient_diversity(fed.gradients, w), fed.sigma2) * (w if score_weights == "objective" else 1.0)
    p = scores / scores.sum()
    pi = 1 - (1 - p) ** m if draw == "with_replacement" else optimal.optimal_probabilities(scores, m)
    freq, drawn, declared = draws_of(lambda t: sampler.select(context(t, sizes, fed)), R, N)
    assert_frequencies(freq, pi, R, f"DELTA ({draw})")
    np.testing.assert_allclose(declared[~np.isnan(declared)], pi[~np.isnan(declared)])
    if draw == "with_replacement":  # E[draws] = m p_k, the Hansen-Hurwitz weights' denominator
        assert np.all(np.abs(drawn - m * p) <= Z * np.sqrt(m * p * (1 - p) / R))
    else:
        assert np.all(freq[pi == 1.0] == 1.0) and pi.sum() == pytest.approx(m)
        assert np.any(pi == 1.0) == (score_weights == "none")  # the unweighted scores of clients 0-1 are capped here


def test_delta_reference_draw_is_estimated_and_its_assumed_weights_are_not_its_probabilities():
    N, m = 10, 3
    fed = _delta_federation(N)
    sizes = np.full(N, 8)
    sampler = DeltaClients(m=m, draw="reference")
    assert parts.inclusion_kind(sampler) is parts.InclusionKind.ESTIMATED and sampler.capabilities.assumed_weights
    ctx = context(0, sizes, fed)
    cohort = sampler.select(ctx)
    assert np.all(np.isnan(cohort.inclusion)) and np.all(cohort.multiplicity == 1)
    p = delta.delta_probabilities(ctx.state["delta"]["scores"])
    np.testing.assert_allclose(cohort.expected_draws, m * p[cohort.ids])  # what the reference code divides by
    R = 3000
    replayed = sampler.estimate_inclusion(ctx, draws=R)
    exact = design.successive_sampling_inclusion(p, m)
    assert_frequencies(replayed, exact, R, "replayed reference draw")
    assert np.max(np.abs(exact / (m * p) - 1)) > 0.1  # the weights it assumes are not its probabilities


# --- strategies: both engines, resume, the rules ---------------------------------------------------------------

SMALL = dict(lr=0.1, epochs=2, batch_size=4)
RECIPES = {
    "clustered_size": lambda: fs.recipes.clustered_sampling(clients_per_round=5, **SMALL),
    "clustered_similarity": lambda: fs.recipes.clustered_sampling(clients_per_round=5, algorithm="similarity", similarity="L2", **SMALL),
    "optimal": lambda: fs.recipes.optimal_sampling(clients_per_round=5, **SMALL),
    "optimal_aocs": lambda: fs.recipes.optimal_sampling(clients_per_round=5, rule="aocs", j_max=2, objective="uniform", **SMALL),
    "delta": lambda: fs.recipes.delta(clients_per_round=5, **SMALL),
    "delta_poisson": lambda: fs.recipes.delta(clients_per_round=5, draw="poisson", **SMALL),
    "delta_reference": lambda: fs.recipes.delta(clients_per_round=5, draw="reference", **SMALL),
}


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=240, d=8, classes=3), [int(s) for s in np.random.default_rng(1).integers(1, 14, size=24)])


def same_run(a, b) -> None:
    assert len(a.history) == len(b.history)
    for x, y in zip(a.history, b.history):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == (pytest.approx(y[key], rel=1e-5, abs=1e-6) if isinstance(y[key], float) else y[key]), key
    for k in a.params:
        torch.testing.assert_close(a.params[k], b.params[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(RECIPES))
def test_both_engines_give_the_same_rounds(name, fed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        runs = [fs.simulate(RECIPES[name](), fed, fs.models.MLP(hidden=8), rounds=4, seed=5, engine=Engine(backend=b)) for b in ("loop", "vectorized")]
    same_run(*runs)
    record = runs[0].history[-1]
    assert record["cohort"] >= 1
    if name.startswith("optimal"):
        assert record["local_trainings"] == fed.num_clients and "sending_probability_sum" in record
    if name.startswith("delta"):
        assert record["sampler_probes"] == fed.num_clients
    if name == "delta_reference":
        assert record["inclusion"] == "estimated" and "biased by design" in record["bias"] and "inclusion_mean" not in record
    else:
        assert "inclusion" not in record and record["inclusion_max"] <= 1.0


@pytest.mark.parametrize("name", ["clustered_similarity", "optimal", "delta"])
def test_a_resumed_run_gives_the_uninterrupted_numbers(name, fed, tmp_path):
    model, path = fs.models.MLP(hidden=8), tmp_path / "state.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        full = fs.simulate(RECIPES[name](), fed, model, rounds=6, seed=4, eval_every=3)

        class Killed(Exception):
            pass

        def kill_at_round_5(t):
            if t == 5:
                raise Killed

        with pytest.raises(Killed):
            fs.simulate(
                RECIPES[name](), fed, model, rounds=6, seed=4, eval_every=3, callbacks=[Checkpoint(path, every=2), Progress(kill_at_round_5)],
            )
        saved = SimulationState.load(path)
        assert saved.round == 4
        if name == "clustered_similarity":  # the server-held updates are in the checkpoint
            assert saved.state["clustered"]["seen"].any()
        assert all("held_update" not in s for s in saved.client_states.values())  # a round's held update is not state
        resumed = fs.simulate(RECIPES[name](), fed, model, rounds=6, seed=4, eval_every=3, callbacks=[Checkpoint(path, every=2, resume=True)])
    assert resumed.history == full.history
    for k in full.params:
        assert torch.equal(resumed.params[k], full.params[k])


def test_the_rules_refuse_what_cannot_work_and_name_both_parts():
    with pytest.raises(ValueError, match="ClusteredClients.*secure_sum"):
        dataclasses.replace(fs.recipes.clustered_sampling(algorithm="similarity"), secure_sum=True)
    dataclasses.replace(fs.recipes.clustered_sampling(), secure_sum=True)  # Algorithm 1 reads no reply
    with pytest.raises(ValueError, match="OptimalClients.*WeightedMean.*disagree"):
        Strategy(clients=OptimalClients(objective="size"), aggregate=WeightedMean("inverse_inclusion"), sizes=ExactSizes())
    with pytest.raises(ValueError, match="DeltaClients.*exact sizes"):
        Strategy(clients=DeltaClients(), aggregate=WeightedMean("size_inverse_inclusion"))
    with pytest.raises(ValueError, match="clients_per_round"):
        fs.recipes.optimal_sampling(clients_per_round=0)
    with pytest.raises(ValueError, match="j_max"):
        fs.recipes.optimal_sampling(j_max=0)
    with pytest.raises(ValueError, match="draw"):
        fs.recipes.delta(draw="without_replacement")
    # fedavg with a clustered sampler averages over the draws (the paper's omega_i = draws / m)
    assert fs.recipes.fedavg(clients=ClusteredClients(3)).aggregate == WeightedMean("uniform")


def test_a_secure_sum_seals_the_chosen_updates_and_gives_the_same_numbers(fed):
    plain = fs.recipes.optimal_sampling(clients_per_round=5, **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        a = fs.simulate(plain, fed, fs.models.MLP(hidden=8), rounds=3, seed=2, engine=Engine(backend="loop"))
        b = fs.simulate(dataclasses.replace(plain, secure_sum=True), fed, fs.models.MLP(hidden=8), rounds=3, seed=2, engine=Engine(backend="loop"))
    for k in a.params:
        torch.testing.assert_close(a.params[k], b.params[k], rtol=1e-5, atol=1e-6)
    assert "update sum" in " ".join(b.history[-1]["privacy_unprotected"])


def test_the_ledger_records_the_norms_and_the_chosen_updates(fed):
    with pytest.warns(PrivacyWarning, match="update's norm"):
        result = fs.simulate(fs.recipes.optimal_sampling(clients_per_round=5, **SMALL), fed, fs.models.MLP(hidden=8), rounds=2, seed=1)
    whats = [r["what"] for r in result.privacy["releases"]]
    assert sum(w.startswith("update norms") for w in whats) == 2 and sum(w.startswith("per-client updates chosen") for w in whats) == 2
    noised = dataclasses.replace(fs.recipes.optimal_sampling(clients_per_round=5, **SMALL), noise=UpdateNoise(clip=1.0, noise_multiplier=1.0))
    result = fs.simulate(noised, fed, fs.models.MLP(hidden=8), rounds=2, seed=1, privacy=Accounting(unit="user"))
    releases = result.privacy["releases"]
    held = [r for r in releases if r["what"].startswith("every client's noised update")]
    assert len(held) == 2 and all(r["event"] is not None for r in held)
    assert not any(r["what"].startswith("the chosen clients' noised updates") for r in releases)  # the same release, counted once


# --- diagnose: every new sampler, and the reference implementation's bias --------------------------------------


def test_diagnose_shows_the_delta_reference_bias_and_the_two_phase_cost():
    """Two clients of eight have their labels shifted, so their gradients are far from the others' and DELTA's p is
    skewed (alpha2 = 0: p proportional to zeta). The matched draws are unbiased; the reference implementation's
    draw (without replacement, weighted as with replacement) is not: its bias and its weights' calibration
    (sum_S 1/(m p_k) against N) are off by many standard errors, and the calibration's mean is the exact
    sum_k pi_k / (m p_k) / N of successive sampling."""
    ds = blobs(n=160, d=6, classes=3, seed=3)
    y = ds.y_train.copy()
    y[:40] = (y[:40] + 1) % 3
    fed = federate(dataclasses.replace(ds, y_train=y), [20] * 8)
    one = dict(lr=1.0, steps=1, batch_size=1000)
    strategies = {d: fs.recipes.delta(clients_per_round=3, draw=d, alpha2=0.0, **one) for d in ("with_replacement", "poisson", "reference")}
    strategies["optimal"] = fs.recipes.optimal_sampling(clients_per_round=3, **one)
    strategies["clustered"] = fs.recipes.clustered_sampling(clients_per_round=3, algorithm="similarity", **one)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        d = fs.diagnose(strategies, fed, fs.models.LogisticRegression(), rounds=1200, seed=0)
    r = d.results
    for name in ("with_replacement", "poisson", "optimal", "clustered"):
        assert abs(r[name]["estimator"]["bias_z"]) < 3, name
        calibration = r[name]["sampler"]["calibration"]
        assert abs(calibration["mean"] - 1) <= Z * calibration["se"] + 1e-12, name
        assert r[name]["sampler"]["inclusion"] == "exact"
    ref = r["reference"]
    assert ref["estimator"]["bias_z"] > 4 and ref["sampler"]["inclusion"] == "estimated"
    p = delta.delta_probabilities(d.draws["reference"].state["delta"]["scores"])
    expected = float(np.sum(design.successive_sampling_inclusion(p, 3) / (3 * p))) / 8
    calibration = ref["sampler"]["calibration"]
    assert abs(calibration["mean"] - expected) < Z * calibration["se"] and abs(calibration["mean"] - 1) > Z * calibration["se"]
    assert ref["sampler"]["replayed"]["expected_cohort"] == pytest.approx(3.0)
    assert r["optimal"]["cost"]["local_trainings"] == 8 and r["optimal"]["cost"]["updates"] < 3.5
    assert r["reference"]["cost"]["probes"] == 8 and "gradients" in r["reference"]["sampler"]["server_learns"]
    assert r["optimal"]["sampler"]["server_learns"] == ["update_norms", "sizes"] and r["optimal"]["sampler"]["trains_first"]
    assert "| reference | estimated |" in fs.diagnostics.report.summary_table(d.to_dict())
