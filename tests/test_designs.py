"""Sampling designs, declared: the privacy ledger reads a sampler's declared design (``Poisson(q)``,
``FixedSize(m, N)``, ``WithReplacement``, ``Census``), never its class, so a user's own sampler is accounted for
from its declaration. Checked here: a user-written Poisson client sampler and a user-written Bernoulli data plan
get the amplification of the built-in ones (the same dp-accounting events and, in a run, the same epsilon); without a
declaration they get none, with the reason; a declaration out of range is refused at construction; and each
built-in declaration is measured against the sampler's own draws (Monte Carlo inclusion frequencies)."""

from __future__ import annotations

import argparse
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("dp_accounting")

import fedsample as fs  # noqa: E402
from fedsample.messages import ClientContext, LocalSample  # noqa: E402
from fedsample.parts import (  # noqa: E402
    Census, ClientSamplerCapabilities, FixedSize, InclusionKind, Poisson, Undeclared, WithReplacement, client_sampling_design,
    plan_sampling_design,
)
from fedsample.privacy import Accounting, amplification  # noqa: E402
from fedsample.privacy.noise import PerExampleNoise, UpdateNoise  # noqa: E402
from fedsample.rounds import Cohort, RoundContext  # noqa: E402
from fedsample.sampling.clients import AllClients, PoissonClients, UniformClients  # noqa: E402
from fedsample.sampling.data import AllSamples, BernoulliSamples  # noqa: E402
from fedsample.training.aggregate import WeightedMean  # noqa: E402
from helpers import blobs, federate  # noqa: E402
from fedsample.simulation import Engine  # noqa: E402


@dataclasses.dataclass(frozen=True)
class CoinClients:
    """A user's own client sampler: each client independently on a coin of probability q (no fedsample class)."""

    q: float
    capabilities = ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=())

    def select(self, ctx: RoundContext) -> Cohort:
        ids = np.flatnonzero(ctx.rng("coins").random(ctx.num_clients) < self.q)
        return Cohort(ids, np.full(len(ids), self.q), ctx.num_clients)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return self.q * num_clients


@dataclasses.dataclass(frozen=True)
class DeclaredCoinClients(CoinClients):
    """The same sampler, declaring its design."""

    def sampling_design(self, population: int) -> Poisson:
        return Poisson(self.q)


@dataclasses.dataclass(frozen=True)
class CoinPlan:
    """A user's own data plan: each record kept on a coin of probability p, declaring it."""

    p: float

    def draw(self, ctx: ClientContext, rng: np.random.Generator) -> LocalSample:
        return LocalSample(np.flatnonzero(rng.random(ctx.size) < self.p))

    def sampling_design(self) -> Poisson:
        return Poisson(self.p)


EVERY_RECORD = (AllSamples(),)
CLIENT_NOISE = UpdateNoise(1.0, 1.0)


def release(clients, plans=EVERY_RECORD, noise=CLIENT_NOISE, unit="user", k=None, population=8):
    accounting = Accounting(unit=unit, k=k, threat="released")
    strategy = argparse.Namespace(clients=clients, secure_sum=True)
    return amplification.train_release(noise, list(plans), population, population, strategy, accounting, population, 0,
                                       (0, "train", 0))


def test_a_user_written_poisson_sampler_is_amplified_from_its_declaration():
    ours, theirs = release(PoissonClients(q=0.3)), release(DeclaredCoinClients(0.3))
    assert ours.sampling == theirs.sampling == "poisson"
    assert theirs.event == ours.event and theirs.event != theirs.unamplified
    undeclared = release(CoinClients(0.3))
    assert undeclared.event == undeclared.unamplified and "CoinClients's inclusion probabilities are not" in undeclared.reason


def test_a_user_written_data_plan_is_amplified_from_its_declaration():
    built_in = release(AllClients(), plans=(BernoulliSamples(0.2),), noise=PerExampleNoise(1.0, 1.0), unit="record")
    users = release(AllClients(), plans=(CoinPlan(0.2),), noise=PerExampleNoise(1.0, 1.0), unit="record")
    assert users.sampling == built_in.sampling == "poisson" and users.event == built_in.event


def test_in_a_run_the_user_sampler_spends_the_epsilon_of_poisson_clients():
    """The ledger's epsilon depends on the declared design only: 2 rounds of a noised uniform mean under
    ``PoissonClients(q)`` and under the user's declared coin sampler spend the same epsilon, below the unamplified one."""
    fed = federate(blobs(n=160, d=4, classes=2, seed=1), [16] * 10)
    base = fs.recipes.fedavg(clients_per_round=4, lr=0.05, steps=1, batch_size=4)

    def epsilons(clients):
        strategy = dataclasses.replace(base, clients=clients, aggregate=WeightedMean(by="uniform"), sizes=None,
                                       noise=UpdateNoise(clip=1.0, noise_multiplier=1.0))
        last = fs.simulate(
            strategy, federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=1, privacy=Accounting(threat="released"), engine=Engine(backend="loop"),
        ).history[-1]
        return last["privacy_epsilon"], last["privacy_epsilon_no_amplification"]

    ours, users = epsilons(PoissonClients(q=0.3)), epsilons(DeclaredCoinClients(0.3))
    assert users == ours and users[0] < users[1]
    undeclared = epsilons(CoinClients(0.3))
    assert undeclared[0] == undeclared[1] == ours[1]


@pytest.mark.parametrize("make, message", [
    (lambda: Poisson(1.5), "q must be in [0, 1]"),
    (lambda: Poisson(-0.1), "q must be in [0, 1]"),
    (lambda: FixedSize(5, 3), "m must be in 1..N"),
    (lambda: FixedSize(0, 3), "m must be in 1..N"),
])
def test_a_design_out_of_range_is_refused_at_construction(make, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_designs_that_give_no_amplification_say_why():
    assert "with replacement" in amplification.client_design(
        SimpleNamespace(sampling_design=lambda population: WithReplacement(3, (0.5, 0.5))), "released", 2).reason
    assert "degenerate client sampler: m = 8 of 8" in release(UniformClients(m=8)).reason
    assert "from the clients' sizes" in release(PoissonClients(samples_per_round=30)).reason
    assert isinstance(plan_sampling_design(object()), Undeclared)


@pytest.mark.parametrize("sampler, population", [(PoissonClients(q=0.3), 12), (UniformClients(m=4), 12), (AllClients(), 12)])
def test_each_built_in_declaration_matches_the_samplers_draws(sampler, population):
    """Monte Carlo over 4000 rounds: every client's inclusion frequency is the declared design's pi
    (q, m/N or 1) within 5 binomial standard errors."""
    design = client_sampling_design(sampler, population)
    pi = {Poisson: lambda d: d.q, FixedSize: lambda d: d.m / d.N, Census: lambda d: 1.0}[type(design)](design)
    rounds = 4000
    counts = np.zeros(population)
    for r in range(rounds):
        ctx = RoundContext(SimpleNamespace(num_clients=population), {}, r, seed=11, state={})
        counts[sampler.select(ctx).ids] += 1
    se = np.sqrt(pi * (1 - pi) / rounds)
    assert np.all(np.abs(counts / rounds - pi) <= 5 * se + 1e-12), counts / rounds
