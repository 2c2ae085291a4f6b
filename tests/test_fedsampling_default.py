"""FedSampling's default (issue 25): the library protocol (permanent reports, the self-normalized update,
M = "rmse", Gaussian noise on the summed drawn count S through the secure sum) and the paper's protocol as one
switch; the noise on S as the secure sum adds it (Monte Carlo, 4 standard errors unless said otherwise) and as
the privacy ledger accounts it (by hand, and an audit that can fail)."""

import argparse
import dataclasses
import math

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.federation.secure_sum import SecureSum, count_shares, noised_count, with_secure_sum
from fedsample.messages import SizeSumRequest, TrainPayload, TrainReport
from fedsample.privacy import amplification, attacks
from fedsample.privacy.ledger import Accounting, Ledger, epsilon_of, gaussian, mixture_of_gaussians, poisson_sampled
from fedsample.privacy.noise import PerExampleNoise
from fedsample.privacy.sizes import RandomizedSizes
from fedsample.rounds import Failed, Replies
from fedsample.sampling.clients import AllClients, UniformClients
from fedsample.sampling.data import COUNT_NOISE, COUNT_NOISE_PURPOSE, DRAWN, BernoulliSamples, FedSamplingData
from fedsample.simulation import make_federation
from fedsample.training.aggregate import DrawnNormalizedSum, Sum
from fedsample.training.local import OneGradient
from helpers import blobs, federate

SIZES = [3, 1, 7, 2, 12, 5, 1, 9, 4, 6] * 3
DELTA = 1e-5


def engine(backend="vectorized", seed=0):
    fed = federate(blobs(n=int(np.sum(SIZES)) + 10), list(SIZES))
    module = fs.models.LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)
    return make_federation(backend, fed, module, seed), module


# --- the two protocols --------------------------------------------------------------------------------------------


def test_the_library_protocol_is_the_default_and_the_paper_one_switch():
    library, paper = fs.recipes.fedsampling(K=64), fs.recipes.fedsampling(K=64, protocol="paper")
    # the total from the clients' sizes summed in the secure sum (no size reports; issue 38), not steered
    assert library.sizes is None
    assert library.data == FedSamplingData(64, count_drawn=True, count_noise=COUNT_NOISE, total_from="secure_sum") and COUNT_NOISE == 5.0
    assert library.aggregate == DrawnNormalizedSum(64) and library.secure_sum
    # a size-report option asks for the reports (the paper's Eq. 2) with the library's remedies: permanent, M="rmse", steered
    reported = fs.recipes.fedsampling(K=64, total_from="reports")
    assert reported.sizes == RandomizedSizes(3.0, "rmse", scope="all", permanent=True)
    assert reported.data == FedSamplingData(64, count_drawn=True, count_noise=COUNT_NOISE, steer=True)
    # the reports' epsilon given is a size-report option too: it is never silently unused
    assert fs.recipes.fedsampling(K=64, M="rmse") == reported and fs.recipes.fedsampling(K=64, epsilon=3.0) == reported
    with pytest.raises(ValueError, match="epsilon, M, permanent"):
        fs.recipes.fedsampling(K=64, epsilon=3.0, total_from="secure_sum")
    # Algorithm 1: fresh reports every round, G_c = (1/K) sum g_s summed (Sum), the user's M (300 by default)
    assert paper.sizes == RandomizedSizes(3.0, 300, scope="all", permanent=False)
    assert paper.data == FedSamplingData(64) and paper.aggregate == Sum() and paper.local == OneGradient(64)
    assert paper == fs.recipes.fedsampling(K=64, permanent=False, normalize="K", M=300)
    # an option given explicitly wins over either protocol
    assert fs.recipes.fedsampling(K=64, protocol="paper", M=40, permanent=True).sizes == RandomizedSizes(3.0, 40, scope="all")
    assert fs.recipes.fedsampling(K=64, count_noise=2.5).data.count_noise == 2.5
    # where the server may not learn the count (no secure sum) or the data sampler does not send it: divide by K
    assert fs.recipes.fedsampling(K=64, secure_sum=False).aggregate == Sum()
    assert fs.recipes.fedsampling(K=64, data=FedSamplingData(64)).aggregate == Sum()


@pytest.mark.parametrize("kwargs, words", [
    ({"protocol": "mine"}, "fedsampling: protocol must be one of 'library' or 'paper', got 'mine'"),
    ({"count_noise": -1.0}, "fedsampling: count_noise must be >= 0 or None, got -1.0"),
    ({"normalize": "K", "count_noise": 3.0}, "fedsampling: count_noise must be 0 or left out unless normalize='drawn'"),
    ({"normalize": "drawn", "secure_sum": False}, "fedsampling: normalize='drawn' (the library protocol's update) needs secure_sum=True"),
    ({"total_from": "secure_sum", "M": 40}, "fedsampling: total_from='secure_sum' sums the clients' sizes inside the secure sum"),
    ({"total_from": "secure_sum", "normalize": "K"}, "fedsampling: total_from='secure_sum' sums the clients' sizes inside the secure sum"),
    ({"total_from": "exact"}, "fedsampling: total_from must be"),
])
def test_bad_protocol_options_are_one_line(kwargs, words):
    with pytest.raises(ValueError) as error:
        fs.recipes.fedsampling(**kwargs)
    assert str(error.value).startswith(words)


def test_the_paper_protocol_asks_fresh_reports_and_steps_by_the_sum_over_K():
    """Two rounds of protocol='paper' (M = 10 on this population): a new estimate and one more report each round
    (epsilon 2x3 after 2 rounds); the update is server_lr * (1/K) sum_s g_s: S/K times the drawn-normalized update
    of the same draws (S the round's exact drawn count)."""
    fed, module = engine()
    params = fs.models.initial_parameters(module, 0)
    paper = fs.recipes.fedsampling(K=20, M=10, server_lr=1.0, protocol="paper")
    state, logs = paper.init_state(params), []
    for t in range(2):
        _, log = paper.round(with_secure_sum(fed), params, state, t, seed=0)
        logs.append(log)
    assert logs[0]["size_estimate"] != logs[1]["size_estimate"] and [lg["size_epsilon"] for lg in logs] == [3.0, 6.0]
    drawn = dataclasses.replace(paper, data=FedSamplingData(20, count_drawn=True), aggregate=DrawnNormalizedSum(20))
    by_K, _ = paper.round(with_secure_sum(fed), params, paper.init_state(params), 0, seed=0)
    by_S, log_S = drawn.round(with_secure_sum(fed), params, drawn.init_state(params), 0, seed=0)
    for k in params:
        torch.testing.assert_close(params[k] - by_K[k], (params[k] - by_S[k]) * log_S["samples"] / 20)


# --- the noise on S, as the secure sum adds it ------------------------------------------------------------------


class Counts:
    """A federation whose train replies carry given drawn counts (clients in ``failed`` do not answer)."""

    def __init__(self, counts, failed=(), seed=7):
        self.counts, self.failed, self.seed = list(counts), set(failed), seed

    @property
    def num_clients(self):
        return len(self.counts)

    def run(self, ids, payload, round):
        replies = [TrainReport(update={"w": torch.ones(2)}, steps=1, loss=0.0, sums={DRAWN: c}) for c in self.counts]
        failed = {i: Failed(int(ids[i]), "train", "dropped") for i in self.failed}
        return Replies([failed.get(i, r) for i, r in enumerate(replies)], failed)


def summed_count(fed, sigma, round):
    sealed = SecureSum(fed).run(np.arange(fed.num_clients), TrainPayload(plan=BernoulliSamples(
        0.5, report_count=True, count_noise=sigma), params={"w": torch.zeros(2)}, solver=None, round=round), round)
    sealed.weighted_update_sum(sealed.received_positions(), np.ones(len(sealed.received_positions())))
    return sealed.summed(DRAWN)


def test_the_secure_sum_adds_the_clients_noise_shares_to_the_count():
    """8 clients drawing 3 samples each, 2 of them dropped: S = 18 and the a = 6 answering shares of N(0, sigma^2/8)
    add up to N(0, sigma^2 * 6/8); over 3,000 rounds the noise's mean is 0 (4 standard errors) and its sd
    sigma sqrt(6/8) within 5% (a chi-square sd of 1.3% at this n); the same (seed, round) gives the same count,
    the sum of exactly the answering clients' shares (client 2's and 5's are left out)."""
    sigma, rounds = 4.0, 3000
    fed = Counts([3] * 8, failed=(2, 5))
    noise = np.array([summed_count(fed, sigma, t) for t in range(rounds)]) - 18
    scale = sigma * math.sqrt(6 / 8)
    assert abs(noise.mean()) <= 4 * scale / math.sqrt(rounds) and noise.std(ddof=1) == pytest.approx(scale, rel=0.05)
    assert summed_count(fed, sigma, 11) == summed_count(fed, sigma, 11) != summed_count(Counts([3] * 8, (2, 5), seed=8), sigma, 11)
    assert summed_count(fed, 0.0, 3) == 18  # no noise: the exact count, an integer
    answered = np.array([0, 1, 3, 4, 6, 7])
    assert noised_count(18, sigma, answered, 8, 7, 11, COUNT_NOISE_PURPOSE) == summed_count(fed, sigma, 11)
    shares = [count_shares(sigma, 8, 7, 11, np.array([k]), COUNT_NOISE_PURPOSE)[0] for k in range(8)]  # each client alone
    assert summed_count(fed, sigma, 11) == pytest.approx(18 + sum(shares[k] for k in answered), abs=1e-12)
    assert summed_count(Counts([3] * 8), sigma, 11) == pytest.approx(24 + sum(shares), abs=1e-12)  # all answer: S = 24


def test_each_clients_share_is_its_own_stream():
    """The shares of 400 clients over 50 rounds (sigma 5, m = 400): each N(0, sigma^2 / m) (sd within 3%, chi-square
    sd 0.5%; the mean within 4 standard errors), uncorrelated between clients and between rounds (|r| < 4 /
    sqrt(n)), normal in the tails (the share above 3 sd within 4 binomial sds of 0.00135); one client's share is
    the same drawn alone or in a cohort, and changes with the seed, the round and the client."""
    sigma, m, rounds = 5.0, 400, 50
    shares = np.stack([count_shares(sigma, m, 3, t, np.arange(m), COUNT_NOISE_PURPOSE) for t in range(rounds)])  # (rounds, clients)
    sd, n = sigma / math.sqrt(m), shares.size
    assert abs(shares.mean()) <= 4 * sd / math.sqrt(n) and shares.std(ddof=1) == pytest.approx(sd, rel=0.03)
    assert abs(np.corrcoef(shares[:, ::2].ravel(), shares[:, 1::2].ravel())[0, 1]) < 4 / math.sqrt(n / 2)
    assert abs(np.corrcoef(shares[:-1].ravel(), shares[1:].ravel())[0, 1]) < 4 / math.sqrt(n)
    tail = float(np.mean(shares > 3 * sd))
    assert abs(tail - 0.00135) <= 4 * math.sqrt(0.00135 * (1 - 0.00135) / n)
    assert count_shares(sigma, m, 3, 7, np.array([42]), COUNT_NOISE_PURPOSE)[0] == shares[7, 42]
    assert len({shares[7, 42], count_shares(sigma, m, 4, 7, np.array([42]), COUNT_NOISE_PURPOSE)[0], shares[8, 42], shares[7, 43]}) == 4


def test_the_drawn_normalized_update_reads_a_noised_count_below_one_as_one():
    """A round whose noised count came out below one sample divides by 1, not by it (no blown-up step)."""

    class Sealed(Replies):
        def summed(self, name):
            return -3.2

    replies = Sealed([TrainReport(update={"w": torch.full((2,), 0.5)}, steps=1, loss=0.0)])
    out = DrawnNormalizedSum(10).combine(replies, fs.rounds.Cohort(np.array([0]), np.ones(1), 1), None)
    torch.testing.assert_close(out["w"], torch.full((2,), 5.0))


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_default_runs_log_the_noised_count_and_agree_across_engines(backend):
    """The library default on both engines: the same parameters (the noise comes from the run's cells, not the
    engine) and a logged count that is not a whole number of samples."""
    out = {}
    for name in ("loop", "vectorized"):
        fed, module = engine(name)
        strategy = fs.recipes.fedsampling(K=20, M=10, server_lr=0.5)
        params = fs.models.initial_parameters(module, 0)
        state = strategy.init_state(params)
        for t in range(3):
            params, log = strategy.round(with_secure_sum(fed), params, state, t, seed=0)
        out[name] = (params, log)
    for k in out["loop"][0]:
        torch.testing.assert_close(out["loop"][0][k], out["vectorized"][0][k])
    assert out[backend][1]["samples"] != round(out[backend][1]["samples"])


# --- the ledger: S as its own release, or one mechanism with the noised update -----------------------------------


def count_release(accounting, plans, strategy=None, asked=10, answered=10):
    strategy = strategy or argparse.Namespace(clients=AllClients(), secure_sum=True)
    [release] = amplification.summed_releases(plans, asked, answered, strategy, accounting, 0, (0, "train", 0))
    return release


def test_the_drawn_count_release_by_hand():
    """sigma_S = 5, q = 0.04, 8 of 10 clients answer (noise 5 sqrt(0.8)): a record is Poisson-sampled into a Gaussian
    of that multiplier; a user of at most k = 3 records moves S by j with probability Binomial(3, q)(j); a user
    without k is unbounded; the exact count and a sampler other than 'every client' are not amplified."""
    noised = [BernoulliSamples(0.04, report_count=True, count_noise=5.0)]
    z = 5.0 * math.sqrt(0.8)
    record = count_release(Accounting(unit="record"), noised, answered=8)
    assert record.event == poisson_sampled(0.04, gaussian(z)) and record.unamplified == gaussian(z) and record.sampling == "poisson"
    user = count_release(Accounting(unit="user", k=3), noised, answered=8)
    by_hand = mixture_of_gaussians(z, [0, 1, 2, 3], [0.96**3, 3 * 0.04 * 0.96**2, 3 * 0.04**2 * 0.96, 0.04**3])
    assert {**user.event, "sampling_probs": None} == {**by_hand, "sampling_probs": None}
    assert user.event["sampling_probs"] == pytest.approx(by_hand["sampling_probs"], rel=1e-12)
    assert user.unamplified == gaussian(z / 3)
    assert not count_release(Accounting(unit="user"), noised).protected  # k unknown: a user's count is unbounded
    exact = count_release(Accounting(unit="record"), [BernoulliSamples(0.04, report_count=True)])
    assert not exact.protected and exact.what == "drawn count S"
    cohort = count_release(Accounting(unit="record"), noised, argparse.Namespace(clients=UniformClients(3), secure_sum=True))
    assert cohort.event == gaussian(5.0) and "not amplified" in cohort.reason
    assert record.call == (0, "train", 0, "drawn count")  # its own key: the update release of the call is another


def test_a_run_records_the_count_release_and_its_own_cost():
    """The default recipe at record level: each round releases the unprotected update sum and the noised count S;
    the run's epsilon is unbounded, and the summary states what the S releases cost alone (composed by hand)."""
    fed, module = engine("loop")
    strategy = fs.recipes.fedsampling(K=20, M=10, server_lr=0.5)
    params = fs.models.initial_parameters(module, 0)
    state = strategy.init_state(params)
    state["privacy"] = Ledger(Accounting(unit="record"))
    for t in range(3):
        params, log = strategy.round(with_secure_sum(fed), params, state, t, seed=0)
    ledger = state["privacy"]
    counts = [r for r in ledger.releases if r.what == "drawn count S"]
    assert len(counts) == 3 and log["privacy_epsilon"] is None and "drawn count S" not in log["privacy_unprotected"]
    alone = ledger.summary(releases=True)["by_release"]["drawn count S"]
    assert alone["epsilon"] == pytest.approx(epsilon_of([r.event for r in counts], DELTA)["epsilon"])
    assert alone["num_releases"] == 3 and alone["epsilon"] < alone["epsilon_without_amplification"]


TOTAL = "total size N (the clients' sizes, summed)"


def recorded_rounds(strategy, backend, rounds):
    """``rounds`` rounds of ``strategy`` on ``backend`` under a secure sum, accounted at record level: the final
    parameters, the ledger and the round logs."""
    fed, module = engine(backend)
    params = fs.models.initial_parameters(module, 0)
    state = strategy.init_state(params)
    state["privacy"] = Ledger(Accounting(unit="record"))
    logs = []
    for t in range(rounds):
        params, log = strategy.round(with_secure_sum(fed), params, state, t, seed=0)
        logs.append(log)
    return params, state["privacy"], logs


def test_the_summed_sizes_release_by_hand():
    """The default's summed sizes (sigma = 5, 8 of 10 clients answer: noise 5 sqrt(0.8)): one record moves N by 1, every
    record counted, so a Gaussian of that multiplier with no amplification; a user of at most k = 3 records moves N by
    3 (multiplier / 3); a user without k is unbounded; the exact sum is unprotected; one release per run (its once key)."""
    request, call = SizeSumRequest(5.0), (0, "sum_sizes", 0)
    z = 5.0 * math.sqrt(0.8)
    record = amplification.size_sum_release(request, 10, 8, Accounting(unit="record"), 0, call)
    assert (record.what, record.event, record.unamplified, record.sampling) == (TOTAL, gaussian(z), gaussian(z), "no-amplification")
    assert amplification.size_sum_release(request, 10, 8, Accounting(unit="user", k=3), 0, call).event == gaussian(z / 3)
    assert not amplification.size_sum_release(request, 10, 10, Accounting(unit="user"), 0, call).protected
    assert not amplification.size_sum_release(SizeSumRequest(0.0), 10, 10, Accounting(unit="record"), 0, call).protected
    assert record.once and amplification.releases(np.arange(10), request, 0, 0, None, Accounting(unit="record"), 10)[0].event == gaussian(5.0)


def test_a_default_run_records_the_summed_sizes_once_and_their_epsilon():
    """Three rounds of the default at record level: one summed-sizes release (asked before the first draw, never again),
    a Gaussian of multiplier 5 whose epsilon at delta = 1e-5 is the analytic Gaussian mechanism's (Balle & Wang 2018,
    Thm 8: delta(eps) = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z), solved here by bisection) within the PLD
    accountant's pessimistic discretization (it may only be above, by at most 2%); no size report is released."""
    from scipy.stats import norm

    _, ledger, logs = recorded_rounds(fs.recipes.fedsampling(K=20, server_lr=0.5), "loop", 3)
    totals = [r for r in ledger.releases if r.what == TOTAL]
    assert len(totals) == 1 and totals[0].event == gaussian(5.0) and totals[0].call == (0, "sum_sizes", 0)
    assert not any("size report" in r.what for r in ledger.releases) and len({lg["summed_total"] for lg in logs}) == 1
    z, low, high = 5.0, 0.0, 5.0
    for _ in range(100):
        eps = (low + high) / 2
        delta = norm.cdf(1 / (2 * z) - eps * z) - math.exp(eps) * norm.cdf(-1 / (2 * z) - eps * z)
        low, high = (eps, high) if delta > DELTA else (low, eps)
    alone = ledger.summary(releases=True)["by_release"][TOTAL]
    assert alone["num_releases"] == 1 and low <= alone["epsilon"] <= 1.02 * low, (alone["epsilon"], low)


def test_per_example_noise_and_the_noised_count_are_one_mechanism():
    """PerExampleNoise (sigma 2) with the default's drawn normalization: one record moves the update sum by C/K and S
    by 1, each with its own multiplier (2 and 5), so the release is one Gaussian of multiplier 1/sqrt(1/4 + 1/25)
    = 1.857, Poisson-sampled at the round's q; both engines give the same numbers and ledger."""
    assert amplification.joint_multiplier(2.0, 5.0) == pytest.approx(1 / math.sqrt(1 / 4 + 1 / 25))
    out = {}
    for backend in ("loop", "vectorized"):
        strategy = dataclasses.replace(fs.recipes.fedsampling(K=20, M=10, server_lr=0.5), noise=PerExampleNoise(1.0, 2.0))
        out[backend] = recorded_rounds(strategy, backend, 2)
    params, ledger, logs = out["loop"]
    for k in params:
        torch.testing.assert_close(params[k], out["vectorized"][0][k])
    train = [r for r in ledger.releases if r.what == "update sum and drawn count"]
    assert [r.event for r in train] == [poisson_sampled(log["ratio"], gaussian(amplification.joint_multiplier(2.0, 5.0))) for log in logs]
    assert not any(r.what == "drawn count S" for r in ledger.releases) and logs[-1]["privacy_epsilon"] is not None


# --- an audit of the count's release that can fail -----------------------------------------------------------------


def count_scores(sigma, with_record, trials, seed, q=0.5):
    """The server's noised count S~ over ``trials`` rounds of one client whose only candidate record is the target,
    kept with probability q (the world without it has no record): the strongest attacker's score, S~ itself."""
    rng = np.random.default_rng(seed)
    drawn = (rng.random(trials) < q).astype(int) if with_record else np.zeros(trials, dtype=int)
    return np.array([noised_count(int(c), sigma, np.array([0]), 1, seed, t, COUNT_NOISE_PURPOSE) for t, c in enumerate(drawn)])


def test_membership_audit_of_the_noised_count():
    """sigma_S = 1, q = 0.5, one round, 3,000 runs per world: the distinguishing test (S~ above each of 7 thresholds)
    proves an epsilon (Clopper-Pearson, one-sided 1e-4) below the ledger's for that release (3.5); the same attack on
    a count noised at sigma / 5 proves more than the ledger's figure at sigma: the audit can fail."""
    thresholds = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0]

    def ledger_epsilon(sigma):
        release = count_release(Accounting(unit="record"), [BernoulliSamples(0.5, report_count=True, count_noise=sigma)], asked=1, answered=1)
        ledger = Ledger(Accounting(unit="record"))
        ledger.add([release])
        return ledger.summary()["epsilon"]

    claimed = ledger_epsilon(1.0)
    audit = attacks.membership_audit(count_scores(1.0, True, 3000, 1), count_scores(1.0, False, 3000, 2), DELTA, thresholds)
    assert 0 < audit["epsilon_lower_bound"] <= claimed, (audit["epsilon_lower_bound"], claimed)
    thin = attacks.membership_audit(count_scores(0.2, True, 3000, 3), count_scores(0.2, False, 3000, 4), DELTA, thresholds)
    assert thin["epsilon_lower_bound"] > claimed, (thin["epsilon_lower_bound"], claimed)
    assert thin["epsilon_lower_bound"] <= ledger_epsilon(0.2)
