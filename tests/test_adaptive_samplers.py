"""The adaptive published client samplers as parts (power-of-choice pow-d/cpow-d/rpow-d, Fed-CBS, FedCor, DivFL,
Oort): their inclusion contract, the probes they add (loss, minibatch loss, label histograms; Oort's utility in the
training reply) on both engines, the replays of the estimated ones, the determinism of the degenerate ones, equal
numbers on the loop and vectorized engines, exact resume, composition with aggregators and server optimizers, and
what ``diagnose`` says of each.

Monte Carlo tolerance, stated once: an estimated inclusion probability from R replays has standard error
sqrt(pi (1 - pi) / R); two independent estimates must agree within Z = 4.5 standard errors of their difference,
sqrt(2 pi (1 - pi) / R) (pi from their mean), plus 1e-12. With about 20 clients per test a 4.5 SE band fails by
chance with probability below 2e-4 per test.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from fedsample.messages import payloads_for
import fedsample as fs
from fedsample import parts
from fedsample.client import sample_statistics
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.messages import LocalSample, ProbeReport, ProbeRequest
from fedsample.privacy import amplification
from fedsample.privacy.sizes import ExactSizes
from fedsample.rounds import Replies, RoundContext
from fedsample.sampling import adaptive, fedcbs, oort, power_of_choice
from fedsample.sampling.divfl import DivFLClients
from fedsample.sampling.fedcbs import FedCBSClients
from fedsample.sampling.fedcor import FedCorClients
from fedsample.sampling.oort import STATISTICAL_UTILITY, OortClients, statistical_utilities
from fedsample.sampling.power_of_choice import PowerOfChoiceClients
from fedsample.simulation import SimulationState
from fedsample.strategy import Strategy
from fedsample.training.aggregate import FedNova, Sum, WeightedMean
from fedsample.training.local import LocalSGD, OneGradient
from fedsample.training.server import FedAdam, ServerSGD
from helpers import blobs, federate
from fedsample.callbacks import Checkpoint
from fedsample.simulation import Engine

Z = 4.5
SIZES = [int(s) for s in np.random.default_rng(1).integers(1, 14, size=24)]
LOCAL = LocalSGD(lr=0.1, epochs=None, steps=2, batch_size=4)

SAMPLERS = {
    "pow-d": lambda: PowerOfChoiceClients(m=4, d=8),
    "cpow-d": lambda: PowerOfChoiceClients(m=4, d=8, variant="cpow-d", b=3),
    "rpow-d": lambda: PowerOfChoiceClients(m=4, d=8, variant="rpow-d"),
    "fedcbs": lambda: FedCBSClients(m=4),
    "fedcor": lambda: FedCorClients(m=4, warmup=5, rank=3, refit_every=3),
    "divfl": lambda: DivFLClients(m=4),
    "oort": lambda: OortClients(m=4),
}


def strategy(name: str, **parts) -> Strategy:
    """The sampler ``name`` in a FedAvg-like strategy: the paper's aggregation (plain mean for power-of-choice, FedAvg's
    size-weighted mean for the others) and the size reports it needs."""
    clients = SAMPLERS[name]()
    aggregate = WeightedMean("uniform") if name.endswith("pow-d") else WeightedMean("size")
    sizes = ExactSizes() if clients.capabilities.needs_sizes is not fs.parts.SizeNeed.NONE else ExactSizes(scope="cohort")
    return Strategy(**{"clients": clients, "local": LOCAL, "aggregate": aggregate, "sizes": sizes, "name": name, **parts})


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=240, d=8, classes=3), SIZES)


@pytest.fixture(scope="module")
def module(fed):
    return fs.models.MLP(hidden=8).build(fed.dataset.input_shape, fed.dataset.num_classes)


@pytest.fixture(autouse=True)
def quiet_probe_warnings():
    """Every probe is an unprotected release: the ledger warns (tested in test_ledger.py), here it is noise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", amplification.PrivacyWarning)
        yield


def assert_replays_agree(a: np.ndarray, b: np.ndarray, R: int, what: str) -> None:
    pi = (a + b) / 2
    bad = np.abs(a - b) > Z * np.sqrt(2 * pi * (1 - pi) / R) + 1e-12
    assert not np.any(bad), f"{what}: clients {np.flatnonzero(bad)} differ: {a[bad]} vs {b[bad]}"


# --- the contract ------------------------------------------------------------------------------------------------


def test_each_sampler_declares_its_inclusion_kind_what_the_server_learns_and_its_cohort():
    vocabulary = {"sizes", "losses", "minibatch_losses", "stale_losses", "gradients", "label_histograms",
                  "participation_counts", "participation"}
    kinds = {"pow-d": "estimated", "cpow-d": "estimated", "rpow-d": "estimated", "fedcbs": "estimated",
             "fedcor": "degenerate", "divfl": "degenerate", "oort": "estimated"}
    for name, make in SAMPLERS.items():
        sampler = make()
        assert parts.inclusion_kind(sampler) is parts.InclusionKind(kinds[name])
        learns = {v.value for v in parts.server_learns(sampler)}
        assert learns and learns <= vocabulary, name
        assert sampler.expected_cohort(24) == 4 and sampler.expected_cohort(3) == 3
    assert parts.replies_read(SAMPLERS["rpow-d"]()) == ("loss",) and parts.replies_read(SAMPLERS["oort"]()) == ("utility",)
    assert parts.replies_read(SAMPLERS["pow-d"]()) == ()


def test_bad_settings_are_one_line_naming_the_parameter():
    with pytest.raises(ValueError, match="PowerOfChoiceClients: m must be at most the candidate set size d = 3, got 4"):
        PowerOfChoiceClients(m=4, d=3)
    with pytest.raises(ValueError, match="PowerOfChoiceClients: b must be the minibatch size"):
        PowerOfChoiceClients(m=2, d=4, variant="cpow-d")
    with pytest.raises(ValueError, match="PowerOfChoiceClients: b must be"):
        PowerOfChoiceClients(m=2, d=4, b=3)
    with pytest.raises(ValueError, match="variant must be one of"):
        PowerOfChoiceClients(variant="power")
    with pytest.raises(ValueError, match="FedCorClients: warmup must be an integer >= 2"):
        FedCorClients(warmup=1)
    with pytest.raises(ValueError, match="OortClients: epsilon must be"):
        OortClients(epsilon=1.5)
    with pytest.raises(ValueError, match="DivFLClients: metric must be one of"):
        DivFLClients(metric="l1")


# --- the probes: loss, minibatch loss, label histograms, Oort's utility ------------------------------------------


@pytest.mark.parametrize("minibatch", [None, 3])
def test_loss_probes_are_the_same_numbers_on_both_engines(fed, module, minibatch):
    params = fs.models.initial_parameters(module, 0)
    ids = np.array([5, 0, 17, 3, 11, 23])
    request = ProbeRequest(params, statistics="loss", minibatch=minibatch)
    loop = Simulator(fed, module, 3).run(ids, request, 2)
    vectorized = VectorizedSimulator(fed, module, 3).run(ids, request, 2)
    for a, b in zip(loop, vectorized):
        assert a.grad_norm is None and b.grad_norm is None and a.gradient is None
        assert a.loss == pytest.approx(b.loss, rel=1e-6)
    # the loss is the mean over the rows the probe reads: every row, or b of the client's own permutation
    sim = Simulator(fed, module, 3)
    for k, reply in zip(ids.tolist(), loop):
        ctx = sim.context(k)
        rng = fs.rng.client_rng(3, 2, k, "probe")
        rows = np.arange(ctx.size) if minibatch is None or ctx.size <= minibatch else np.sort(rng.permutation(ctx.size)[:minibatch])
        losses = fs.training.functional.per_sample_losses(ctx.module, params, ctx.x[rows], ctx.y[rows], ctx.task)
        assert reply.loss == pytest.approx(float(losses.double().mean()), rel=1e-6)


def test_a_minibatch_probe_reads_b_distinct_rows_of_the_clients_own_stream_per_round(fed, module):
    sim = VectorizedSimulator(fed, module, 3)
    ids = np.arange(24)
    member, position = sim.probe_draw(ids, 3, round=4)
    counts = np.bincount(member, minlength=24)
    assert np.array_equal(counts, np.minimum(SIZES, 3))
    for c in range(24):
        rows = position[member == c]
        assert len(np.unique(rows)) == len(rows) and rows.max() < SIZES[c]
        if SIZES[c] > 3:
            expected = np.sort(fs.rng.client_rng(3, 4, c, "probe").permutation(SIZES[c])[:3])
            assert np.array_equal(rows, expected)
    other = sim.probe_draw(ids, 3, round=5)[1]
    assert not np.array_equal(position, other)  # another round, another draw


def test_label_probes_send_the_histogram_only_on_both_engines(fed, module):
    params = fs.models.initial_parameters(module, 0)
    ids = np.array([4, 1, 9])
    request = ProbeRequest(params, statistics="labels")
    for engine in (Simulator, VectorizedSimulator):
        replies = engine(fed, module, 0).run(ids, request, 0)
        for k, r in zip(ids.tolist(), replies):
            assert r.loss is None and r.grad_norm is None
            assert np.array_equal(r.label_counts, np.bincount(fed.dataset.y_train[fed.client_indices(k)], minlength=3))
            assert r.nbytes == 8 * 3
    assert ProbeReport(1.0, 2.0, gradient=np.zeros(5, np.float32), extra={"sigma2": 1.0}).nbytes == 8 * 3 + 4 * 5
    assert ProbeReport(1.0, None).nbytes == 8


def test_the_ledger_names_what_each_new_probe_releases():
    what = lambda request: amplification.probe_release(request, 0, (0, "probe", 0)).what  # noqa: E731
    assert what(ProbeRequest({}, statistics="loss")) == "probe: loss"
    assert what(ProbeRequest({}, statistics="loss", minibatch=4)) == "probe: loss on a minibatch of 4"
    assert what(ProbeRequest({}, statistics="labels")) == "probe: label histogram"
    with pytest.raises(ValueError, match="statistics must be 'gradient' where a gradient"):
        ProbeRequest({}, statistics="loss", gradient=True)


def sample_utility(ctx, sample, params) -> float:
    """Oort's statistical utility of ``sample`` as the client adds it to its training reply."""
    return sample_statistics(ctx, sample, params, (STATISTICAL_UTILITY,))[STATISTICAL_UTILITY.name]


def test_statistical_utility_is_size_times_root_mean_squared_loss():
    losses = np.array([1.0, 3.0, 2.0, 2.0, 0.5])
    member = np.array([0, 0, 2, 2, 2])
    got = statistical_utilities(losses, member, 3)
    np.testing.assert_allclose(got, [2 * np.sqrt((1 + 9) / 2), 0.0, 3 * np.sqrt((4 + 4 + 0.25) / 3)])


@pytest.mark.parametrize("steps", [1, 3])
def test_oorts_utility_rides_in_the_training_reply_with_the_same_number_on_both_engines(fed, module, steps):
    st = Strategy(clients=OortClients(m=5), local=LocalSGD(lr=0.1, epochs=None, steps=steps, batch_size=4))
    params = fs.models.initial_parameters(module, 0)
    logs = []
    for engine in (Simulator, VectorizedSimulator):
        federation = engine(fed, module, 1)
        state = st.init_state(params)
        st.round(federation, params, state, 0, seed=1)
        logs.append(state["clients"]["utility"].copy())
    np.testing.assert_allclose(logs[0], logs[1], rtol=1e-6)
    chosen = np.flatnonzero(logs[0])
    assert len(chosen) == 5
    sim = Simulator(fed, module, 1)
    for k in chosen.tolist():  # the whole local data (FullData): |B| = n_k
        ctx = sim.context(k)
        assert logs[0][k] == pytest.approx(sample_utility(ctx, LocalSample(np.arange(ctx.size)), params), rel=1e-6)


# --- estimated samplers: replays from a frozen state --------------------------------------------------------------


class TableFederation:
    """A federation whose clients answer from tables: exact sizes, probe losses and label histograms (no model)."""

    def __init__(self, sizes: np.ndarray, losses: np.ndarray, labels: np.ndarray) -> None:
        self.sizes, self.losses, self.labels = np.asarray(sizes), np.asarray(losses), np.asarray(labels)

    @property
    def num_clients(self) -> int:
        return len(self.sizes)

    def run(self, client_ids, payload, round):
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        ids = np.asarray(client_ids)
        if procedure == "report_size":
            return Replies([int(self.sizes[k]) for k in ids])
        if payload.statistics == "labels":
            return Replies([ProbeReport(None, None, label_counts=self.labels[k]) for k in ids])
        return Replies([ProbeReport(float(self.losses[k]), None) for k in ids])


def table(N: int = 12, seed: int = 0) -> TableFederation:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 60, N)
    labels = np.stack([rng.multinomial(int(n), rng.dirichlet(np.full(4, 0.3))) for n in sizes])
    return TableFederation(sizes, rng.gamma(2.0, 1.0, N), labels)


def context(federation, round: int, seed: int, state: dict) -> RoundContext:
    ctx = RoundContext(federation, None, round, seed, state)
    ctx.sizes = ExactSizes().summarize(np.arange(federation.num_clients), federation.sizes)
    return ctx


def frequencies_of_the_real_selection(sampler, federation, state: dict, round: int, R: int) -> np.ndarray:
    """How often each client is chosen by ``sampler.select`` itself, from the same frozen state, over R seeds."""
    counts = np.zeros(federation.num_clients)
    for seed in range(R):
        cohort = sampler.select(context(federation, round, 1000 + seed, copy.deepcopy(state)))
        assert np.all(np.isnan(cohort.inclusion)) and cohort.info["inclusion_kind"] == "estimated"
        counts[cohort.ids] += 1
    return counts / R


def warm_state(sampler, federation, rounds: int, observe: bool = False) -> dict:
    """A sampler state after ``rounds`` rounds in which every chosen client reported a utility (Oort) or a loss."""
    state: dict = {}
    rng = np.random.default_rng(7)
    for t in range(rounds):
        ctx = context(federation, t, 0, state)
        cohort = sampler.select(ctx)
        if observe:
            from fedsample.messages import TrainReport

            replies = Replies([TrainReport({}, 1, float(rng.gamma(2.0)), statistics={"utility": float(rng.gamma(2.0, 5.0))}) for _ in cohort.ids])
            sampler.observe(ctx, cohort, replies)
    return state


@pytest.mark.parametrize("name", ["pow-d", "rpow-d", "fedcbs", "oort"])
def test_estimated_inclusion_sums_to_the_cohort_and_matches_an_independent_replay_and_the_real_selection(name):
    R = 2000
    federation = table()
    sampler = {"pow-d": PowerOfChoiceClients(m=3, d=6), "rpow-d": PowerOfChoiceClients(m=3, d=6, variant="rpow-d"),
               "fedcbs": FedCBSClients(m=3, lam=0.5), "oort": OortClients(m=3, epsilon=0.5)}[name]
    state = warm_state(sampler, federation, 4, observe=name in ("rpow-d", "oort"))
    round = 4
    frozen = sampler.frozen_state(context(federation, round, 0, copy.deepcopy(state)))
    estimate = sampler.replay(frozen, draws=R, seed=5, round=round)
    assert estimate.sum() == pytest.approx(3, abs=1e-9)  # m distinct clients in every replay
    np.testing.assert_array_equal(estimate, sampler.replay(frozen, draws=R, seed=5, round=round))  # the run's stream
    contract = sampler.estimate_inclusion(context(federation, round, 5, copy.deepcopy(state)), draws=R)  # parts' contract
    np.testing.assert_array_equal(contract, estimate)
    rng = np.random.default_rng(99)
    if name.endswith("pow-d"):
        independent = power_of_choice.estimate_inclusion(frozen.sizes, frozen.losses, 6, 3, R, rng)
    elif name == "fedcbs":
        independent = fedcbs.estimate_inclusion(frozen.histograms, 3, R, rng, t=frozen.t, counts=frozen.counts, lam=0.5)
    else:
        independent = oort.estimate_inclusion(frozen.utility, frozen.explored, 3, frozen.epsilon, R, rng)
    assert_replays_agree(estimate, independent, R, f"{name}: replay vs independent replay")
    real = frequencies_of_the_real_selection(sampler, federation, state, round, R)
    assert_replays_agree(estimate, real, R, f"{name}: replay vs the sampler's own selection")
    assert 0 < np.count_nonzero(estimate) and np.max(estimate) > 3 / federation.num_clients  # not uniform: biased on purpose


def test_power_of_choice_favours_high_losses_beyond_its_share():
    """Biased by design: the highest-loss client is chosen more often than m p_k of a size-proportional draw."""
    federation = table()
    sampler = PowerOfChoiceClients(m=3, d=6)
    frozen = sampler.frozen_state(context(federation, 0, 0, {}))
    pi = sampler.replay(frozen, draws=4000, seed=0)
    top = int(np.argmax(frozen.losses))
    p = frozen.sizes / frozen.sizes.sum()
    assert pi[top] > 3 * p[top] + Z * np.sqrt(pi[top] * (1 - pi[top]) / 4000)


# --- degenerate samplers: deterministic given what the server knows -------------------------------------------


def test_divfl_chooses_the_same_clients_whatever_the_seed(fed, module):
    st = strategy("divfl")
    params = fs.models.initial_parameters(module, 0)
    cohorts, logs = [], []
    for seed in (0, 1, 2):
        federation = _Recording(Simulator(fed, module, seed))
        state = st.init_state(params)
        _, log = st.round(federation, params, state, 0, seed=seed)
        _, log = st.round(federation, params, state, 1, seed=seed)
        cohorts.append(federation.trained)
        logs.append(log)
    assert cohorts[0] == cohorts[1] == cohorts[2]
    assert all(log["inclusion"] == "degenerate" and "no unbiased estimator" in log["bias"] for log in logs)
    assert all("inclusion_min" not in log for log in logs)  # nothing divides by pi = 1
    assert logs[0]["sampler_probes"] == 4 and logs[0]["clients_contacted"] == 4  # round 1: the chosen clients' gradients
    n_params = sum(v.numel() for v in params.values())
    assert logs[0]["sampler_probe_bytes"] == 4 * (8 + 8 + 4 * n_params)


def test_fedcor_is_random_in_its_warmup_and_deterministic_after_it(fed, module):
    st = strategy("fedcor")
    params = fs.models.initial_parameters(module, 0)
    runs = []
    for seed in (0, 1):
        federation = _Recording(VectorizedSimulator(fed, module, 0))
        state = st.init_state(params)
        logs = []
        for t in range(5):  # warm-up at a fixed model: no learning, zero loss changes
            logs.append(st.round(federation, params, state, t, seed=seed)[1])
        frozen = copy.deepcopy(state)
        after = [st.round(federation, params, copy.deepcopy(frozen), 5, seed=s)[1] for s in (seed, seed + 10)]
        runs.append((federation.trained, logs, after))
    assert runs[0][0][:5] != runs[1][0][:5]  # warm-up: uniform at random, exact m/N
    for log in runs[0][1]:
        assert log["inclusion"] == "exact" and log["inclusion_mean"] == pytest.approx(4 / 24) and log["sampler_probes"] == 24
    for after in (runs[0][2], runs[1][2]):
        assert all(log["inclusion"] == "degenerate" and "no unbiased estimator" in log["bias"] for log in after)
    assert runs[0][0][5] == runs[0][0][6]  # greedy round: the same cohort whatever the seed


def test_fedcor_greedy_follows_the_fitted_covariance():
    """Loss changes of 12 clients in two groups that move together: the first pick is from the group with the larger
    weighted covariance, and the discount moves the next round's cohort."""
    rng = np.random.default_rng(3)
    N = 12
    group = np.arange(N) < 6
    rows = [np.where(group, rng.normal(-1.0, 0.5), rng.normal(-0.2, 0.05)) + rng.normal(0, 0.01, N) for _ in range(8)]
    federation = table(N)
    sampler = FedCorClients(m=2, warmup=2, rank=2, weights="uniform")
    state = {adaptive.STATE_KEY: {"changes": rows, "losses": (0, np.zeros(N))}}
    first = sampler.select(context(federation, 7, 0, state))
    assert group[first.ids].any() and np.all(first.inclusion == 1)
    second = sampler.select(context(federation, 8, 0, state))
    assert state[adaptive.STATE_KEY]["fitted_rows"] == 8 and not np.array_equal(first.ids, second.ids)  # alpha = 0.9 for the chosen


# --- both engines, resume, compositions ------------------------------------------------------------------------


class _Recording:
    """A federation that records the clients asked to train, round by round."""

    def __init__(self, inner):
        self.inner, self.trained = inner, []

    @property
    def num_clients(self):
        return self.inner.num_clients

    def run(self, client_ids, payload, round):
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        if procedure == "train":
            self.trained.append([int(k) for k in client_ids])
        return self.inner.run(client_ids, payload, round)

    def __getattr__(self, name):  # the inner federation's other abilities (client states), where it has them
        return getattr(self.inner, name)


def assert_same_run(got, want, exact: bool = False) -> None:
    assert len(got.history) == len(want.history)
    for a, b in zip(got.history, want.history):
        assert a.keys() == b.keys()
        for key in a:
            same = a[key] == (b[key] if exact or not isinstance(b[key], float) else pytest.approx(b[key], rel=1e-5, abs=1e-6))
            assert same, (key, a[key], b[key])
    for k in want.params:
        torch.testing.assert_close(got.params[k], want.params[k], rtol=0 if exact else 1e-5, atol=0 if exact else 1e-6)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_the_loop_and_the_vectorized_engine_choose_the_same_clients_and_give_the_same_numbers(name, fed, module):
    runs = {}
    for backend in ("loop", "vectorized"):
        federation = _Recording((Simulator if backend == "loop" else VectorizedSimulator)(fed, module, 3))
        result = fs.simulate(strategy(name), federated_data=fed, model=module, rounds=9, seed=3, engine=Engine(federation=federation))
        runs[backend] = (result, federation.trained)
    assert runs["loop"][1] == runs["vectorized"][1]
    assert_same_run(runs["vectorized"][0], runs["loop"][0])
    history = runs["loop"][0].history
    assert all("sampler_probes" in r and "sampler_probe_bytes" in r for r in history)
    if name.endswith("pow-d"):  # every client reports its exact size (the candidate draw); pow-d and cpow-d probe d = 8
        assert all(r["clients_contacted"] == 24 and r["sampler_probes"] == (0 if name == "rpow-d" else 8) for r in history)
        assert all(r["sampler_probe_bytes"] == 8 * r["sampler_probes"] for r in history)
    assert all(r["inclusion"] in ("estimated", "degenerate", "exact") for r in history)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_resumed_run_ends_with_the_numbers_of_an_uninterrupted_one(name, fed, module, tmp_path):
    full = fs.simulate(strategy(name), federated_data=fed, model=module, rounds=8, seed=4, engine=Engine(backend="vectorized"))
    path = tmp_path / "state.pt"
    fs.simulate(strategy(name), federated_data=fed, model=module, rounds=5, seed=4, engine=Engine(backend="vectorized"), callbacks=[Checkpoint(path)])
    if name not in ("pow-d", "cpow-d"):  # the others keep server-held state, in the checkpoint
        assert adaptive.STATE_KEY in SimulationState.load(path).state
    resumed = fs.simulate(
        strategy(name), federated_data=fed, model=module, rounds=8, seed=4, engine=Engine(backend="vectorized"), callbacks=[Checkpoint(path, resume=True)],
    )
    assert_same_run(resumed, full, exact=True)


COMPOSITIONS = {
    "plain mean, FedAvgM": dict(aggregate=WeightedMean("uniform"), server=ServerSGD(lr=1.0, momentum=0.9)),
    "size-weighted, FedAdam": dict(aggregate=WeightedMean("size"), server=FedAdam(lr=0.05)),
    "FedNova": dict(aggregate=FedNova("size")),
    "sum of one gradient each": dict(aggregate=Sum(), local=OneGradient(40), server=ServerSGD(lr=0.01)),
}


@pytest.mark.parametrize("combo", list(COMPOSITIONS))
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_each_sampler_runs_with_each_sensible_aggregator_and_server_optimizer(name, combo, fed, module):
    parts = dict(COMPOSITIONS[combo])
    if combo == "sum of one gradient each":
        from fedsample.sampling.data import FixedRatio

        parts["data"] = FixedRatio(0.5)
    result = fs.simulate(strategy(name, **parts), federated_data=fed, model=module, rounds=3, seed=0, engine=Engine(backend="vectorized"))
    assert len(result.history) == 3 and all(np.isfinite(v).all() for v in (p.numpy() for p in result.params.values()))
    assert result.history[-1]["updates"] > 0


# --- diagnose ----------------------------------------------------------------------------------------------------


def test_diagnose_states_the_kind_what_the_server_learns_and_the_probes_of_each_sampler(fed, module):
    from fedsample.diagnostics.report import summary_table

    strategies = {name: strategy(name) for name in SAMPLERS}
    diagnosis = fs.diagnose(strategies, fed, module, rounds=20, seed=0)
    table = summary_table(diagnosis.to_dict())
    for name, result in diagnosis.results.items():
        sampler, cost, estimator = result["sampler"], result["cost"], result["estimator"]
        assert sampler["server_learns"] == [v.value for v in parts.server_learns(strategies[name].clients)]
        assert np.isfinite(estimator["bias_sq"]) and np.isfinite(estimator["variance"])
        assert result["exploitation"]["mean"] > 0
        expected = "biased by design" if sampler["inclusion"] == "estimated" else "no unbiased estimator"
        assert expected in sampler["bias"] and f"{name}: inclusion probabilities {sampler['inclusion']}" in table
        assert cost["bytes_up"] >= sampler["probe_bytes"] and cost["clients_contacted"] >= 4
    assert diagnosis.results["pow-d"]["sampler"]["probes"] == 8 and diagnosis.results["rpow-d"]["sampler"]["probes"] == 0
    assert diagnosis.results["fedcor"]["sampler"]["rounds_by_kind"] == {"exact": 10, "degenerate": 10}  # warm-up, refit rounds
    assert diagnosis.results["divfl"]["sampler"]["probe_bytes"] > diagnosis.results["pow-d"]["sampler"]["probe_bytes"]


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_flower_gives_the_loops_numbers(name, monkeypatch):
    """Through FlowerFederation and fedsample's real ClientApp handler (an in-process grid: the probes and training
    replies go through the codec as typed records): the same cohorts and numbers as the reference loop."""
    pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")
    from flwr.supercore.task_identity import TaskIdentity

    from fedsample.flower import FlowerFederation
    from test_flower_federation import FakeGrid, local_data

    for attribute in ("_run_id", "_task_id", "_node_id"):  # what a running ServerApp has set (Flower internals)
        if hasattr(TaskIdentity, attribute):
            monkeypatch.setattr(TaskIdentity, attribute, 0)
    data, model = local_data()
    runs = []
    for federation in (FlowerFederation(FakeGrid({}, 8), {k: k for k in range(8)}, 8, seed=0, timeout=30.0), Simulator(data, model, 0)):
        recorded = _Recording(federation)
        runs.append((fs.simulate(strategy(name), federated_data=data, model=model, rounds=7, seed=0, engine=Engine(federation=recorded)),
                     recorded.trained))
    assert runs[0][1] == runs[1][1]
    assert_same_run(runs[0][0], runs[1][0])
