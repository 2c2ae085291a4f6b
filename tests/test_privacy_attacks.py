"""Attacks on a whole run, as the server would mount them, and the modes that defeat them.

Monte Carlo tolerances are stated at each assertion (4 standard errors unless said otherwise)."""

import dataclasses
import math

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample import privacy
from fedsample.sampling.data import sampling_ratio
from fedsample.privacy import attacks
from fedsample.messages import SizeQuery, TrainPayload, TrainReport
from fedsample.federation.secure_sum import SealedCohort, SecureSum, with_secure_sum
from fedsample.rounds import FusedReplies
from fedsample.federation.simulator import Simulator
from fedsample.rng import CohortRandom
from fedsample.sampling.data import BernoulliSamples
from fedsample.simulation import make_federation
from fedsample.training.local import OneGradient
from helpers import blobs, federate
from test_door import SIZES, RecordingFederation, SpyAggregator

BACKENDS = ["loop", "vectorized"]


def federation(backend, sizes=SIZES, seed=0):
    fed = federate(blobs(n=int(np.sum(sizes)) + 10), list(sizes))
    module = fs.models.LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)
    return make_federation(backend, fed, module, seed), module


# --- repeated size reports --------------------------------------------------------------------------


def test_most_frequent_report_attack_gains_nothing_from_permanent_reports():
    """eps = 3, M = 20, 4000 clients: one report names the clipped size with probability
    alpha + (1-alpha)/(M-1) = 0.527; ten fresh reports let the mode name it for > 90% of clients, ten
    permanent ones for no more than one report (within 4 standard errors)."""
    sizes = np.random.default_rng(1).integers(1, 40, 4000)
    one = attacks.one_report_guess(3.0, 20)
    se = math.sqrt(one * (1 - one) / len(sizes))
    permanent = attacks.most_frequent_report_attack(sizes, 3.0, 20, 10, permanent=True)
    fresh = attacks.most_frequent_report_attack(sizes, 3.0, 20, 10, permanent=False)
    assert abs(permanent - one) <= 4 * se, (permanent, one)
    assert fresh > 0.9, fresh


@pytest.mark.parametrize("backend", BACKENDS)
def test_engines_send_permanent_reports_by_default(backend):
    """Both engines repeat each client's report across rounds (default), re-draw them with permanent=False,
    and give the draws the audit models."""
    fed, _ = federation(backend)
    ids = np.arange(len(SIZES))
    for permanent in (True, False):
        query = SizeQuery("randomized", 3.0, 10, permanent)
        got = np.array([fed.run(ids, query, t) for t in range(4)])
        assert np.array_equal(got, attacks.size_reports_over_rounds(SIZES, 3.0, 10, 4, permanent))
        assert (np.ptp(got, axis=0).max() == 0) == permanent


def test_permanent_reports_without_a_client_stream_are_memoized_in_client_state():
    ctx = fs.messages.ClientContext(0, torch.zeros(7, 2), torch.zeros(7, dtype=torch.long), None, "classification", 2)
    query = SizeQuery("randomized", 1.0, 10)
    answers = {fs.client.report_size(ctx, query, np.random.default_rng(s)) for s in range(20)}
    assert len(answers) == 1 and ctx.state["permanent_reports"][(1.0, 10)] in answers


def test_the_permanent_estimate_a_run_uses_is_biased_up_where_the_floor_binds():
    """What a run divides by is the floored estimate max(N~, |C|) (``estimate_total(clamp=True)``, as
    RandomizedSizes summarizes the reports) of each client's one permanent report. 300 clients, eps = 1, M = 40
    (the raw estimate's sd is 3.3 times the clipped total), 1,000 seeds: the raw Eq. 2 estimate averages to the
    clipped total (4 standard errors: unbiased for the clipped total, not for N), the floored one does not: it is
    biased up by more than 4 standard errors (measured: 1.96 times the clipped total, floored in 42% of seeds),
    by what a normal N~ of the estimator's mean and variance predicts, E[max(X, |C|)] (within 4 standard errors)."""
    from scipy.stats import norm

    sizes, eps, M, R = np.array(list(SIZES) * 10), 1.0, 40, 1000
    reports = [attacks.size_reports_over_rounds(sizes, eps, M, 1, True, seed)[0] for seed in range(R)]
    raw = np.array([privacy.estimate_total(r, eps, M, clamp=False) for r in reports])
    used = np.array([privacy.estimate_total(r, eps, M) for r in reports])
    clipped, sd, floor = privacy.clip_size(sizes, M).sum(), math.sqrt(privacy.estimator_variance(sizes, eps, M)), len(sizes)
    assert abs(raw.mean() - clipped) <= 4 * sd / math.sqrt(R)
    se = used.std(ddof=1) / math.sqrt(R)
    assert used.mean() - clipped > 4 * se and 0.2 < np.mean(used == floor) < 0.6
    a = (floor - clipped) / sd
    predicted = clipped + (floor - clipped) * norm.cdf(a) + sd * norm.pdf(a)  # E[max(X, floor)], X ~ N(clipped, sd^2)
    assert abs(used.mean() - predicted) <= 4 * se, (used.mean(), predicted)


def test_each_sample_is_kept_with_the_same_probability_under_permanent_reports():
    """Definition 3.1: with K/N~ from permanent reports, a sample of a 1-sample client and one of a client
    above M are kept equally often (600 seeds x 3 rounds; 4 standard errors of the difference)."""
    sizes, eps, M, K = np.array([1] * 40 + [30] * 4), 3.0, 10, 20
    ids = np.arange(len(sizes))
    kept, expected, draws = np.zeros(sizes.sum()), 0.0, 0
    for seed in range(600):
        reports = attacks.size_reports_over_rounds(sizes, eps, M, 1, True, seed)[0]
        p = sampling_ratio(K, privacy.estimate_total(reports, eps, M))
        for t in range(3):
            member, local = BernoulliSamples(p).draw_cohort(sizes, CohortRandom(seed, t, ids, "train"))
            kept[(np.cumsum(sizes) - sizes)[member] + local] += 1
            expected, draws = expected + p, draws + 1
    small, large = kept[:40].mean() / draws, kept[40:].mean() / draws
    q = expected / draws
    se = math.sqrt(q * (1 - q) / draws * (1 / 40 + 1 / 120))
    assert abs(small - large) <= 4 * se and abs(small - q) <= 4 * math.sqrt(q * (1 - q) / draws / 40), (small, large, q)


# --- presence and shape of the replies ----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_reply_presence_is_independent_of_size(backend):
    """Every asked client replies every round with the same fields and shapes, whatever its size, while
    whether it drew anything does depend on the size (so a silent client would reveal it)."""
    fed, module = federation(backend)
    params = fs.models.initial_parameters(module, 0)
    payload = TrainPayload(params, BernoulliSamples(0.1), OneGradient(30), 0)
    ids = np.arange(len(SIZES))
    arrived, drew = np.zeros(len(SIZES)), np.zeros(len(SIZES))
    for t in range(30):
        replies = fed.run(ids, dataclasses.replace(payload, round=t), t)
        assert len(replies) == len(ids)
        for k, r in enumerate(replies):
            arrived[k] += isinstance(r, TrainReport) and {n: tuple(v.shape) for n, v in r.update.items()} == {n: tuple(v.shape) for n, v in params.items()}
            drew[k] += r.steps > 0
    assert np.all(arrived == 30)
    small, large = drew[SIZES <= 2].mean() / 30, drew[SIZES >= 8].mean() / 30
    assert large - small > 0.3, (small, large)  # the bit the old silent replies leaked


@dataclasses.dataclass(frozen=True)
class KeepReports(SpyAggregator):
    """Delegates, and keeps the replies object it is handed."""

    def combine(self, reports, cohort, ctx):
        self.seen.append(reports)
        return self.inner.combine(reports, cohort, ctx)


def integer_arrays(obj, skip, depth=0):
    """Integer arrays and tensors reachable from ``obj`` (drawn rows, cohort members, counts), not entering ``skip``."""
    if depth > 10 or obj is None or isinstance(obj, (str, bytes, float, int, bool) + skip):
        return []
    if isinstance(obj, torch.Tensor):
        return [tuple(obj.shape)] if not obj.is_floating_point() else []
    if isinstance(obj, np.ndarray):
        return [obj.shape] if np.issubdtype(obj.dtype, np.integer) and obj.size > 1 else []
    items = []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj) + (list(vars(obj).values()) if hasattr(obj, "__dict__") else [])
    elif dataclasses.is_dataclass(obj):
        items = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    return [s for v in items for s in integer_arrays(v, skip, depth + 1)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("recipe", ["fedsampling", "fedsampling_sgd"])
def test_aggregator_inputs_hold_message_content_only(backend, recipe):
    """The replies the aggregator is handed (and every field of each) hold no drawn rows, members or counts:
    only float updates, a step count in {0, 1} and a loss. The engines' batched reports included (plain mode:
    the replies themselves reach the aggregator)."""
    strategy = fs.recipes.fedsampling(K=30, epsilon=3.0, M=10, server_lr=0.1, secure_sum=False)
    if recipe == "fedsampling_sgd":  # single-step local SGD on the drawn sample: the engine's other fused path
        strategy = dataclasses.replace(strategy, local=fs.training.local.LocalSGD(lr=0.1, epochs=None, steps=1, batch_size=None),
                                       aggregate=fs.training.aggregate.WeightedMean("uniform"))
    fed, module = federation(backend)
    seen = []
    strategy = dataclasses.replace(strategy, aggregate=KeepReports(strategy.aggregate, seen))
    params = fs.models.initial_parameters(module, 0)
    state = strategy.init_state(params)
    for t in range(3):
        params, _ = strategy.round(fed, params, state, t, seed=0)
    assert len(seen) == 3
    for reports in seen:
        # the round's reply list keeps positional bookkeeping (Replies.source_position: cohort positions, not
        # rows or counts); what it holds is the replies and the engine's batched reports
        held = [list(reports), getattr(reports, "source", None)]
        assert integer_arrays(held, skip=(Simulator,)) == []
        for r in reports:
            assert set(vars(r)) <= {"update", "steps", "loss", "norm_steps", "samples", "rows_trained", "statistics", "_owner", "_position"}
            assert getattr(r, "samples", None) is None  # a drawn count is sent only for a secure sum
            assert getattr(r, "rows_trained", None) is None  # nor the rows trained, which would tell the same count
            assert r.steps in (0, 1) and isinstance(r.loss, float)


# --- secure sum ---------------------------------------------------------------------------------------------


def float_tensors(obj, skip, depth=0):
    if depth > 10 or obj is None or isinstance(obj, (str, bytes, float, int, bool) + skip):
        return []
    if isinstance(obj, torch.Tensor):
        return [obj.detach()] if obj.is_floating_point() else []
    items = []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif dataclasses.is_dataclass(obj):
        items = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    return [t for v in items for t in float_tensors(v, skip, depth + 1)]


def run_fedsampling(backend, secure, rounds=3):
    """Run FedSampling; returns (client-side train replies per round, server-side objects, final parameters)."""
    inner, module = federation(backend)
    client_side = RecordingFederation(inner)
    server_fed = RecordingFederation(SecureSum(client_side) if secure else client_side)
    seen = []
    strategy = fs.recipes.fedsampling(K=30, epsilon=3.0, M=10, server_lr=0.1, secure_sum=False)  # wrapped here instead
    strategy = dataclasses.replace(strategy, aggregate=SpyAggregator(strategy.aggregate, seen))
    params = fs.models.initial_parameters(module, 0)
    state, history = strategy.init_state(params), []
    for t in range(rounds):
        params, log = strategy.round(server_fed, params, state, t, seed=0)
        history.append(log)
    replies = [r for (procedure, _), (_, r) in zip(client_side.queries, client_side.returned) if procedure == "train"]
    return replies, [state, history, server_fed.returned, seen], params


@pytest.mark.parametrize("backend", BACKENDS)
def test_secure_sum_server_holds_nothing_but_the_sum(backend):
    """No single client's update is reachable from any server-side object in secure-sum mode (the same scan
    finds them in plain mode), and the run's parameters are the plain run's: the server got the same sum."""
    skip = (RecordingFederation, SecureSum, Simulator)
    plain_replies, plain_server, plain_params = run_fedsampling(backend, secure=False)
    replies, server_side, params = run_fedsampling(backend, secure=True)
    singles = [(k, r.update[k]) for round_replies in replies for r in round_replies if r.steps > 0 for k in r.update]
    assert len(singles) > 10

    def holds_single(objects):
        tensors = float_tensors(objects, skip)
        return any(t.shape == u.shape and torch.allclose(t, u) for _, u in singles for t in tensors)

    assert not holds_single(server_side)
    assert holds_single(plain_server)
    for k in params:
        torch.testing.assert_close(params[k], plain_params[k], rtol=1e-5, atol=1e-6)
    assert all("train_loss" in log for log in server_side[1])
    assert [log["updates"] for log in server_side[1]] == [log["updates"] for log in plain_server[1]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_default_fedsampling_runs_through_a_secure_sum(backend):
    """The recipe's default: the aggregator is handed sealed replies only, and the numbers are the plain run's."""
    out = {}
    for secure in (True, False):
        fed, module = federation(backend)
        seen = []
        strategy = fs.recipes.fedsampling(K=30, epsilon=3.0, M=10, server_lr=0.1, secure_sum=secure, normalize="K")
        strategy = dataclasses.replace(strategy, aggregate=KeepReports(strategy.aggregate, seen))
        params = fs.models.initial_parameters(module, 0)
        state = strategy.init_state(params)
        logs = []
        for t in range(2):
            params, log = strategy.round(with_secure_sum(fed, strategy.secure_sum), params, state, t, seed=0)
            logs.append(log)
        out[secure] = (params, logs)
        assert all((isinstance(reports, FusedReplies) and isinstance(reports.backing, SealedCohort)) == secure for reports in seen)
    default = fs.recipes.fedsampling()
    # the counts (drawn samples, and the sizes summed before the first draw: no size report) only inside the sum
    assert default.secure_sum and default.sizes is None and default.data.count_drawn and default.data.total_from == "secure_sum"
    for k in out[True][0]:
        torch.testing.assert_close(out[True][0][k], out[False][0][k])
    assert [lg["train_loss"] for lg in out[True][1]] == pytest.approx([lg["train_loss"] for lg in out[False][1]])


def test_secure_sum_reveals_one_sum_and_refuses_fednova():
    inner, module = federation("loop")
    fed = SecureSum(inner)
    params = fs.models.initial_parameters(module, 0)
    sealed = fed.run(np.arange(5), TrainPayload(params, BernoulliSamples(0.5), OneGradient(10), 0), 0)
    assert len(sealed) == 5 and list(sealed.received_positions()) == [0, 1, 2, 3, 4]
    with pytest.raises(AttributeError, match="not visible"):
        sealed[0].update
    sealed.weighted_update_sum(np.arange(5), np.ones(5))
    with pytest.raises(RuntimeError, match="already revealed"):
        sealed.weighted_update_sum(np.array([0]), np.ones(1))
    strategy = fs.recipes.fednova(lr=0.1)
    state = strategy.init_state(params)
    with pytest.raises(AttributeError, match="not visible"):
        strategy.round(fed, params, state, 0, seed=0)


# --- update clipping and noise --------------------------------------------------------------------------------


def test_update_noise_clips_and_adds_unbiased_gaussian_noise():
    """Clipped to norm C; over 4000 draws the noise has mean 0 (4 standard errors) and std z*C (5%)."""
    update = {"w": torch.tensor([3.0, 4.0]), "b": torch.tensor([0.0])}  # norm 5
    noise = privacy.UpdateNoise(clip=1.0, noise_multiplier=0.5)
    clipped = noise.clipped(update)
    assert float(torch.linalg.vector_norm(clipped["w"])) == pytest.approx(1.0)
    draws = np.array([torch.cat([v for v in noise.privatize(update, np.random.default_rng(s)).values()]).numpy() for s in range(4000)])
    target = np.array([0.6, 0.8, 0.0])
    assert np.all(np.abs(draws.mean(0) - target) <= 4 * 0.5 / math.sqrt(4000))
    assert np.allclose(draws.std(0), 0.5, rtol=0.05)


def test_noised_runs_agree_across_backends_and_log_their_epsilon():
    pytest.importorskip("dp_accounting")
    strategy = dataclasses.replace(fs.recipes.fedsampling(K=30, epsilon=3.0, M=10, server_lr=0.1, normalize="K"),
                                   noise=privacy.UpdateNoise(clip=0.5, noise_multiplier=1.0))
    out = {}
    for backend in BACKENDS:
        fed, module = federation(backend)
        params = fs.models.initial_parameters(module, 0)
        state = strategy.init_state(params)
        for t in range(2):
            params, log = strategy.round(with_secure_sum(fed, strategy.secure_sum), params, state, t, seed=0)
        out[backend] = (params, log)
    for k in out["loop"][0]:
        torch.testing.assert_close(out["loop"][0][k], out["vectorized"][0][k])
    log = out["loop"][1]
    assert log["size_epsilon"] == 3.0 and log["update_epsilon"] == pytest.approx(fs.privacy.accounting.gaussian_update_epsilon(1.0, 2))
