"""The vectorized federation gives the loop's numbers: same draws, same updates within float tolerance."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from fedsample import recipes
from fedsample.messages import LocalSample, SizeQuery, TrainPayload
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import MLP, initial_parameters
from fedsample.sampling.clients import PoissonClients, UniformClients
from fedsample.sampling.data import AllSamples, BernoulliSamples, FixedRatio, FixedSizeSamples, UniformSubset
from fedsample.simulation import simulate
from fedsample.strategy import Strategy
from fedsample.training.aggregate import Sum, WeightedMean
from fedsample.training.local import LocalSGD, OneGradient
from helpers import blobs, federate
from fedsample.simulation import Engine

SIZES = [1, 3, 7, 12, 20, 33, 2, 9, 0, 15]  # heterogeneous: 1 to 5 local steps at batch 8, one empty client


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=200), SIZES)


@pytest.fixture(scope="module")
def setup(fed):
    module = MLP(hidden=8).build(fed.dataset.input_shape, fed.dataset.num_classes)
    return module, initial_parameters(module, 0)


def assert_params_close(a: dict, b: dict, tol: float = 2e-5) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol)


def assert_reports_match(loop: list, vec: list) -> None:
    assert len(loop) == len(vec)
    for r, v in zip(loop, vec):
        assert (r is None) == (v is None)
        if r is not None:
            assert r.steps == v.steps
            assert v.loss == pytest.approx(r.loss, rel=1e-5, abs=1e-6)
            assert_params_close(r.update, v.update)


@dataclass(frozen=True)
class WithReplacement:
    """A plan with a sampling distribution and per-sample scales (importance-sampling shape)."""

    def draw(self, ctx, rng):
        n = ctx.size
        p = np.arange(1, n + 1, dtype=np.float64)
        return LocalSample(np.arange(n), probs=p / p.sum(), scale=1.0 / (n * p / p.sum()))


@dataclass(frozen=True)
class HalvedSGD(LocalSGD):
    """A custom solver (the engine cannot batch it): must fall back to the per-client loop."""

    def run(self, ctx, sample, params, round, rng):
        result = super().run(ctx, sample, params, round, rng)
        return dataclasses.replace(result, update={k: 0.5 * v for k, v in result.update.items()})


SOLVERS = {
    "sgd_epochs": LocalSGD(lr=0.1, epochs=2, batch_size=8),
    "sgd_momentum_prox": LocalSGD(lr=0.1, epochs=1, batch_size=8, momentum=0.9, weight_decay=1e-3, prox_mu=0.1, lr_decay=0.9),
    "sgd_steps_full_batch": LocalSGD(lr=0.1, epochs=None, steps=3, batch_size=None),
    "one_gradient_K": OneGradient(K=64),
    "one_gradient_mean": OneGradient(None),
    "custom_fallback": HalvedSGD(lr=0.1, epochs=1, batch_size=4),
}
PLANS = {"all": AllSamples(), "bernoulli": BernoulliSamples(0.6), "fixed": FixedSizeSamples(4), "with_replacement": WithReplacement()}


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("solver", SOLVERS)
def test_train_reports_match_loop(fed, setup, solver, plan):
    module, params = setup
    ids = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    payload = TrainPayload(params=params, plan=PLANS[plan], solver=SOLVERS[solver], round=2)
    loop = Simulator(fed, module, seed=5).run(ids, payload, 2)
    vec = VectorizedSimulator(fed, module, seed=5).run(ids, payload, 2)
    assert_reports_match(loop, vec)


def test_heterogeneous_steps_are_taken(fed, setup):
    module, params = setup
    payload = TrainPayload(params=params, plan=AllSamples(), solver=SOLVERS["sgd_momentum_prox"], round=0)
    vec = VectorizedSimulator(fed, module, seed=1).run(np.arange(10), payload, 0)
    steps = [r.steps if r else 0 for r in vec]
    assert steps == [int(np.ceil(n / 8)) for n in SIZES]


def test_short_client_unaffected_by_longer_clients(fed, setup):
    """A 1-step client trained next to 5-step clients (momentum, weight decay: masked steps would move it)
    gets the update it gets alone."""
    module, params = setup
    payload = TrainPayload(params=params, plan=AllSamples(), solver=SOLVERS["sgd_momentum_prox"], round=0)
    sim = VectorizedSimulator(fed, module, seed=1)
    together = sim.run(np.array([0, 5, 4]), payload, 0)[0]
    alone = sim.run(np.array([0]), payload, 0)[0]
    assert together.steps == alone.steps == 1
    assert_params_close(together.update, alone.update, tol=1e-6)


@pytest.mark.parametrize("solver", ["sgd_momentum_prox", "one_gradient_K"])
def test_chunking_matches_one_chunk(fed, setup, solver):
    module, params = setup
    payload = TrainPayload(params=params, plan=BernoulliSamples(0.8), solver=SOLVERS[solver], round=1)
    one = VectorizedSimulator(fed, module, seed=3, memory_budget=2**40).run(np.arange(10), payload, 1)
    tiny = VectorizedSimulator(fed, module, seed=3, memory_budget=1).run(np.arange(10), payload, 1)
    assert_reports_match(one, tiny)


def test_size_reports_identical(fed, setup):
    module, _ = setup
    ids = np.array([0, 1, 2, 3, 4, 5, 6, 7, 9])  # client 8 holds nothing and cannot report
    for query in (SizeQuery("randomized", 1.0, 10), SizeQuery("exact")):
        loop = np.array(Simulator(fed, module, seed=9).run(ids, query, 4))
        vec = np.asarray(VectorizedSimulator(fed, module, seed=9).run(ids, query, 4))
        np.testing.assert_array_equal(loop, vec)


def test_kept_permanent_reports_are_the_ones_each_client_draws_alone(fed, setup):
    """The engine keeps the last permanent answers; asked again (any round), for other clients, for another
    query or with fresh reports, it answers what the loop's clients answer alone."""
    module, _ = setup
    ids, fewer = np.array([0, 1, 2, 3, 4, 5, 6, 7, 9]), np.array([9, 2, 5])
    vec, loop = VectorizedSimulator(fed, module, seed=9), Simulator(fed, module, seed=9)
    asks = [(ids, SizeQuery("randomized", 1.0, 10), 0), (ids, SizeQuery("randomized", 1.0, 10), 3),
            (fewer, SizeQuery("randomized", 1.0, 10), 4), (ids, SizeQuery("randomized", 2.0, 10), 5),
            (ids, SizeQuery("randomized", 2.0, 10, permanent=False), 6), (ids, SizeQuery("randomized", 2.0, 10), 7)]
    for who, query, round in asks:
        np.testing.assert_array_equal(np.asarray(vec.run(who, query, round)),
                                      np.array(loop.run(who, query, round)))
    assert vec._permanent is not None and vec._permanent[0][-1] == (2.0, 10)


def test_fused_sum_equals_sum_of_client_gradients(fed, setup):
    """The one-backward union gradient equals the sum of each client's own G_c."""
    module, params = setup
    payload = TrainPayload(params=params, plan=BernoulliSamples(0.7), solver=OneGradient(K=50), round=0)
    reports = VectorizedSimulator(fed, module, seed=0).run(np.arange(10), payload, 0)
    got = [i for i, r in enumerate(reports) if r is not None]
    fused = reports.weighted_update_sum(np.array(got), np.ones(len(got)))
    explicit = {k: sum(reports[i].update[k] for i in got) for k in fused}
    assert_params_close(fused, explicit, tol=1e-6)


STRATEGIES = {
    "fedavg": lambda: recipes.fedavg(clients_per_round=6, lr=0.1, batch_size=8),
    "fedsampling": lambda: recipes.fedsampling(K=40, epsilon=2.0, M=30, server_lr=0.2),
    "fedsampling_naive": lambda: recipes.fedsampling_naive(ratio=0.5, server_lr=0.2),
    "poisson_ht_one_gradient": lambda: Strategy(
        clients=PoissonClients(0.6), data=FixedRatio(0.7), local=OneGradient(K=30), aggregate=WeightedMean("inverse_inclusion")
    ),
    "uniform_subset_momentum": lambda: Strategy(
        clients=UniformClients(5), data=UniformSubset(5), local=LocalSGD(lr=0.1, epochs=None, steps=2, batch_size=2, momentum=0.5),
    ),
    "single_step_sgd_fused": lambda: Strategy(  # every client one step: the linear shortcut (one backward)
        clients=UniformClients(6), data=FixedRatio(0.5), aggregate=WeightedMean("inverse_inclusion"),
        local=LocalSGD(lr=0.1, epochs=None, steps=1, batch_size=None, momentum=0.9, weight_decay=0.01, prox_mu=0.1),
    ),
    "one_gradient_sum_uniform": lambda: Strategy(clients=UniformClients(4), local=OneGradient(K=20), aggregate=Sum()),
    # the seed methods, whose reports carry more than the update (FedNova's a_k, ISFedAvg's data weights)
    "fednova_momentum": lambda: recipes.fednova(clients_per_round=5, steps=3, batch_size=4, local_momentum=0.5),
    "fedsts": lambda: recipes.fedsts(H=2, m=3, dim=3, steps=2, batch_size=8),
    "fedstas": lambda: recipes.fedstas(H=2, m=3, dim=3, eta=40, M=30, steps=2, batch_size=8),
    "iwds_fednova": lambda: recipes.iwds(base="fednova", clients_per_round=4, steps=2, batch_size=8),
    "isfedavg_cheap": lambda: recipes.isfedavg(L=4, batch_size=3, epochs=2, update="cheap"),
    "isfedavg_single_epoch": lambda: recipes.isfedavg(L=4, batch_size=3, epochs=1, update="cheap"),
}


@pytest.mark.parametrize("name", STRATEGIES)
def test_simulate_backends_agree(name):
    fed = federate(blobs(n=200), [n or 4 for n in SIZES])  # every client can report a size
    runs = {b: simulate(STRATEGIES[name](), fed, MLP(hidden=8), rounds=3, seed=2, eval_every=3, engine=Engine(backend=b)) for b in ("loop", "vectorized")}
    assert_params_close(runs["loop"].params, runs["vectorized"].params, tol=1e-4)
    assert runs["loop"].history[-1]["updates"] == runs["vectorized"].history[-1]["updates"]
    assert runs["vectorized"].history[-1]["train_loss"] == pytest.approx(runs["loop"].history[-1]["train_loss"], rel=1e-4)


def test_unknown_backend_rejected(fed):
    with pytest.raises(ValueError, match="backend"):
        simulate(recipes.fedavg(), fed, MLP(hidden=4), rounds=1, engine=Engine(backend="gpu-magic"))


def test_simulate_memory_budget_setting_does_not_change_numbers():
    fed = federate(blobs(n=200), [n or 4 for n in SIZES])
    make = lambda: recipes.fedavg(clients_per_round=6, lr=0.1, batch_size=4, epochs=2)
    small = simulate(make(), fed, MLP(hidden=8), rounds=2, seed=0, engine=Engine(memory_budget=1))
    default = simulate(make(), fed, MLP(hidden=8), rounds=2, seed=0)
    assert_params_close(small.params, default.params, tol=1e-5)
    with pytest.raises(ValueError, match="memory_budget"):
        simulate(make(), fed, MLP(hidden=8), rounds=1, engine=Engine(memory_budget=-5))


def test_fedsampling_rounds_with_the_draws_on_a_device_equal_the_host_draws(setup):
    """The engine's cohort draw on a device (``BernoulliSamples.draw_cohort_on_device`` from the sizes kept there,
    the path a GPU run takes; here torch's CPU device) gives the host pass's rounds bit for bit: three FedSampling
    rounds (secure sum, steered ratio), the same parameters and the same record; the sizes are copied to the
    device once (:meth:`fedsample.rng.Blocks.on`), and the host draws reuse one kept layout."""
    from fedsample.federation.secure_sum import with_secure_sum

    fed = federate(blobs(n=300), [3, 40, 7, 12, 60, 33, 2, 9, 1, 15, 50, 20])  # every client reports a size (>= 1)
    module, params = setup
    strategy = recipes.fedsampling(K=40, epsilon=3.0, M=30)
    runs = []
    for device in (None, torch.device("cpu")):
        sim = VectorizedSimulator(fed, module, seed=3)
        sim._draw_device = device  # what a CUDA simulator sets (the streams and the draws on its device)
        p, state, logs = params, strategy.init_state(params), []
        for t in range(3):
            p, log = strategy.round(with_secure_sum(sim, strategy.secure_sum), p, state, t, 3)
            logs.append(log)
        runs.append((p, logs, sim._blocks))
    (host, host_logs, host_blocks), (device_params, device_logs, device_blocks) = runs
    assert all(torch.equal(host[k], device_params[k]) for k in host)
    assert host_logs == device_logs and host_logs[1]["samples"] > 0
    assert device_blocks._on_device is not None and device_blocks._on_device[1].device.type == "cpu"
    assert host_blocks._on_device is None and host_blocks.same_counts(fed.sizes())


def test_a_cohort_plan_without_a_kept_layout_draw_gets_the_sizes(fed, setup):
    """A plan that declares only ``draw_cohort`` (a user's :class:`~fedsample.parts.CohortPlan`) is handed the
    cohort's sizes as an array, as before; the library's plan draws the same rows over the engine's kept layout
    (``draw_blocks``)."""
    seen = []

    @dataclass(frozen=True)
    class OwnBernoulli:
        def draw(self, ctx, rng):
            return BernoulliSamples(0.5).draw(ctx, rng)

        def sampling_design(self):
            return BernoulliSamples(0.5).sampling_design()

        def draw_cohort(self, sizes, rng):
            seen.append(type(sizes))
            return BernoulliSamples(0.5).draw_cohort(sizes, rng)

        def stream_reads(self, sizes):
            return np.asarray(sizes, dtype=np.int64)

    sim = VectorizedSimulator(fed, setup[0], seed=0)
    ids = np.arange(fed.num_clients)
    own, _ = sim.draw_cohort(ids, OwnBernoulli(), 2)
    library, _ = sim.draw_cohort(ids, BernoulliSamples(0.5), 2)
    assert seen == [np.ndarray] and sim._blocks is not None and len(own.member) > 0
    np.testing.assert_array_equal(own.member, library.member)
    np.testing.assert_array_equal(own.position, library.position)


@pytest.mark.parametrize("solver", ["one_gradient_K", "sgd_steps_full_batch", "sgd_epochs"])
def test_a_federation_is_freed_with_its_last_reference(fed, setup, solver):
    """No reference cycle holds the federation (and its copy of the training rows): once the caller drops it and the
    replies, it is freed at once, with the garbage collector off, after its updates were read (a cycle kept every
    finished run's federation in an experiment's worker process until a full collection: 4.5 GB after 33 runs of
    fedsampling-fmnist-shards, benchmarks/README.md)."""
    import gc
    import weakref

    module, params = setup
    payload = TrainPayload(params=params, plan=AllSamples(), solver=SOLVERS[solver], round=0)
    gc.collect()
    gc.disable()
    try:
        sim = VectorizedSimulator(fed, module, seed=5)
        reports = sim.run(np.arange(10), payload, 0)
        assert all(reports[int(i)].update is not None for i in reports.received_positions())
        assert reports.weighted_update_sum(reports.received_positions(), np.ones(len(reports.received_positions()))) is not None
        gone = weakref.ref(sim)
        del sim, reports
        assert gone() is None
    finally:
        gc.enable()
