"""The declared parts (fedsample.parts): a solver's declared arithmetic is what every engine runs (a custom solver
written against the protocol runs batched on the vectorized engine and equals the loop; one without the declaration
runs through the loop), plans declare their cohort draw, and every client sampler declares its expected cohort,
which the auto rule reads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import torch

from fedsample import parts, recipes
from fedsample.federation.choose import choose_backend, expected_cohort
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.messages import LocalSample
from fedsample.models import MLP
from fedsample.parts import BatchSchedule, DrawnCohort
from fedsample.privacy.sizes import ExactSizes
from fedsample.rng import client_rng
from fedsample.sampling.clients import AllClients, PoissonClients, SizeProportional, UniformClients
from fedsample.sampling.data import AllSamples, BernoulliSamples, FedSamplingData, FixedRatio
from fedsample.sampling.importance import ImportanceAgents
from fedsample.sampling.stratify import StratifiedClients
from fedsample.simulation import simulate
from fedsample.strategy import Strategy
from fedsample.training.aggregate import DrawnNormalizedSum, WeightedMean
from fedsample.training.local import EpochSGD, LocalSGD, OneGradient, SGDStep, run_schedule
from helpers import blobs, federate
from fedsample.simulation import Engine

SIZES = [1, 3, 7, 12, 20, 33, 2, 9, 0, 15]


def assert_params_close(a: dict, b: dict, tol: float = 1e-5) -> None:
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=tol, rtol=tol)


@dataclass(frozen=True)
class Blocks:
    """A solver written against fedsample.parts.ScheduledSolver, inheriting nothing: each client's drawn sample in
    ``blocks`` consecutive blocks (fewer for a smaller sample), one plain SGD step on each block's mean loss."""

    lr: float = 0.2
    blocks: int = 2
    batched: ClassVar[bool] = True
    runs: ClassVar[list] = []  # the clients whose run() was called

    def schedule(self, drawn: DrawnCohort, streams, round: int) -> BatchSchedule:
        client, step, row, weight = [], [], [], []
        for c in np.flatnonzero(drawn.counts).tolist():
            for s, block in enumerate(np.array_split(np.arange(drawn.counts[c]), min(self.blocks, drawn.counts[c]))):
                client += [c] * len(block)
                step += [s] * len(block)
                row += (drawn.starts[c] + block).tolist()
                weight += [1.0 / len(block)] * len(block)
        as_int = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
        return BatchSchedule(as_int(client), as_int(step), as_int(row), np.asarray(weight, dtype=np.float64), len(drawn))

    def step_rule(self, round: int) -> SGDStep:
        return SGDStep(self.lr)

    def norm_steps(self, steps: np.ndarray, round: int) -> np.ndarray:
        return steps.astype(np.float64)

    def single_step(self, sizes: np.ndarray) -> bool:
        return self.blocks == 1

    def run(self, ctx, sample, params, round, rng):
        Blocks.runs.append(ctx.client_id)
        return run_schedule(self, ctx, sample, params, round, rng)


@dataclass(frozen=True)
class HalvedSGD:
    """A custom solver with only ``run`` (no declared arithmetic): half of local SGD's update."""

    inner: LocalSGD = LocalSGD(lr=0.1, batch_size=4)

    def run(self, ctx, sample, params, round, rng):
        result = self.inner.run(ctx, sample, params, round, rng)
        return dataclasses.replace(result, update={k: 0.5 * v for k, v in result.update.items()})


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=200), SIZES)


@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_a_custom_solver_written_against_the_protocol_runs_batched_and_equals_the_loop(fed, blocks):
    """One block: the union shortcut (every client one step); more: stacked steps. The vectorized engine runs the
    declaration for the whole cohort without calling the solver's run(); the loop calls it per client."""
    solver = Blocks(blocks=blocks)
    assert isinstance(solver, parts.ScheduledSolver) and parts.batched(solver)
    strategy = Strategy(clients=UniformClients(6), data=FixedRatio(0.8), local=solver, aggregate=WeightedMean("inverse_inclusion"))
    runs = {}
    for backend in ("vectorized", "loop"):
        Blocks.runs.clear()
        runs[backend] = simulate(strategy, fed, MLP(hidden=8), rounds=2, seed=4, eval_every=2, engine=Engine(backend=backend))
        assert (len(Blocks.runs) > 0) == (backend == "loop")
    assert_params_close(runs["vectorized"].params, runs["loop"].params)
    assert runs["vectorized"].history[-1]["train_loss"] == pytest.approx(runs["loop"].history[-1]["train_loss"], rel=1e-5)


def test_a_solver_without_the_declared_interface_runs_through_the_loop_on_both_engines(fed):
    solver = HalvedSGD()
    assert not parts.batched(solver)
    strategy = Strategy(clients=UniformClients(5), local=solver)
    got = {b: simulate(strategy, fed, MLP(hidden=8), rounds=2, seed=1, eval_every=2, engine=Engine(backend=b)) for b in ("vectorized", "loop")}
    for k in got["loop"].params:
        assert torch.equal(got["vectorized"].params[k], got["loop"].params[k])
    choice = choose_backend(strategy, np.array(SIZES), MLP(hidden=8).build((6,), 3), torch.zeros(1, 6))
    assert choice.backend == "loop" and "HalvedSGD" in choice.reason


def test_a_subclass_that_overrides_run_is_not_batched_and_epoch_sgd_is_run_client_by_client():
    @dataclass(frozen=True)
    class Logged(LocalSGD):
        def run(self, ctx, sample, params, round, rng):
            return super().run(ctx, sample, params, round, rng)

    assert parts.batched(LocalSGD()) and parts.batched(OneGradient(4))
    assert not parts.batched(Logged()) and not parts.batched(EpochSGD())


def test_one_gradient_declares_its_normalization_once_by_hand():
    """G_c = (1/K) sum_{s in S_c} scale_s g_s (Qi et al. 2023, §3.2): row weights scale/K, one step of lr 1, and the
    reported loss the plain mean (loss_scale K/|S_c|); with K=None the weights are 1/|S_c|."""
    drawn = DrawnCohort.of([LocalSample(np.array([4, 1])), LocalSample(np.zeros(0, dtype=np.int64)),
                            LocalSample(np.array([0, 2, 3]), scale=np.array([1.0, 2.0, 0.5]))])
    schedule = OneGradient(K=4).schedule(drawn, [None] * 3, 0)
    assert schedule.client.tolist() == [0, 0, 2, 2, 2] and schedule.step.tolist() == [0] * 5
    np.testing.assert_allclose(schedule.weight, [0.25, 0.25, 0.25, 0.5, 0.125])
    np.testing.assert_allclose(schedule.loss_scale[[0, 2]], [2.0, 4 / 3])
    assert schedule.single_step and schedule.steps().tolist() == [1, 0, 1]
    naive = OneGradient(K=None).schedule(drawn, [None] * 3, 0)
    np.testing.assert_allclose(naive.weight, [0.5, 0.5, 1 / 3, 2 / 3, 1 / 6])
    assert OneGradient(4).step_rule(0).is_gradient and OneGradient(4).norm_steps(np.array([1]), 0) is None


def test_local_sgd_schedule_is_its_minibatches_weighted_one_over_B():
    drawn = DrawnCohort.of([LocalSample(np.arange(5)), LocalSample(np.arange(3))])
    solver = LocalSGD(lr=0.1, epochs=2, batch_size=2)
    schedule = solver.schedule(drawn, [np.random.default_rng(0), np.random.default_rng(1)], 0)
    assert schedule.steps().tolist() == [6, 4]  # 2 epochs of ceil(5/2) and ceil(3/2) batches
    first = np.concatenate(solver.batches(drawn.sample(0), np.random.default_rng(0)))
    assert schedule.row[schedule.client == 0].tolist() == first.tolist()
    sizes = np.diff(schedule.batch_starts())
    np.testing.assert_allclose(schedule.weight, np.repeat(1.0 / sizes, sizes))
    np.testing.assert_allclose(solver.norm_steps(np.array([6, 4]), 0), [6.0, 4.0])


def test_plans_declare_their_cohort_draw_and_it_equals_each_client_drawing_alone(fed):
    sim = VectorizedSimulator(fed, MLP(hidden=8).build((6,), 3), seed=3)
    ids = np.array([0, 2, 4, 5, 8, 9])
    for plan in (AllSamples(), BernoulliSamples(0.4)):
        assert isinstance(plan, parts.CohortPlan)
        drawn, streams = sim.draw_cohort(ids, plan, 7)
        for c, k in enumerate(ids.tolist()):
            rng = client_rng(3, 7, k, "train")
            alone = plan.draw(sim.context(k), rng)
            assert drawn.sample(c).indices.tolist() == alone.indices.tolist()
            assert streams[c].position == rng.position and streams[c].random() == rng.random()


def test_the_vectorized_stacked_path_sends_the_drawn_counts_a_plan_asks_for(fed):
    """The self-normalized sum under multi-step local SGD (the stacked path had no drawn counts): equal engines."""
    strategy = Strategy(clients=AllClients(), data=FedSamplingData(40, count_drawn=True), local=LocalSGD(lr=0.1, steps=2, epochs=None, batch_size=4),
                        aggregate=DrawnNormalizedSum(40), sizes=ExactSizes(), secure_sum=True)
    runs = {b: simulate(strategy, fed, MLP(hidden=8), rounds=2, seed=0, eval_every=2, engine=Engine(backend=b)) for b in ("vectorized", "loop")}
    assert_params_close(runs["vectorized"].params, runs["loop"].params, tol=2e-5)


# --- expected cohorts ---------------------------------------------------------------------------------------------

EQUAL = np.full(1000, 20)


def test_a_samples_per_round_sampler_expects_the_derived_cohort_not_every_client():
    assert expected_cohort(UniformClients(samples_per_round=200), 1000, EQUAL) == pytest.approx(10.0)  # 200 / 20, not 1000.0
    assert expected_cohort(PoissonClients(samples_per_round=200), 1000, EQUAL) == pytest.approx(10.0)
    assert expected_cohort(StratifiedClients(H=4, samples_per_round=40), 1000, EQUAL) == pytest.approx(4.0)  # at least H
    assert expected_cohort(SizeProportional(samples_per_round=200), 1000, EQUAL) == pytest.approx(1000 * (1 - (1 - 1e-3) ** 10))
    assert expected_cohort(SizeProportional(m=5), 1000, EQUAL) == pytest.approx(1000 * (1 - (1 - 1e-3) ** 5))
    assert expected_cohort(ImportanceAgents(L=6), 1000) == 6 and expected_cohort(StratifiedClients(H=2, m=3), 1000) == 3
    with pytest.raises(ValueError, match="UniformClients.*sizes"):
        UniformClients(samples_per_round=200).expected_cohort(1000)


def test_the_expected_cohort_is_the_mean_cohort_size_measured():
    """E[|cohort|] by Monte Carlo over the samplers' own draws, against the declared value (5 standard errors)."""
    from fedsample.rounds import RoundContext
    from fedsample.privacy.sizes import SizeInfo

    class Federation:
        num_clients = 200

    sizes = np.random.default_rng(0).integers(1, 60, size=200)
    for sampler in (UniformClients(samples_per_round=300), PoissonClients(samples_per_round=300), SizeProportional(m=12)):
        counts = []
        for t in range(2000):
            ctx = RoundContext(Federation(), None, t, 0, {})
            ctx.sizes = SizeInfo(np.arange(200), sizes, float(sizes.sum()), True)
            counts.append(len(sampler.select(ctx)))
        declared = sampler.expected_cohort(200, sizes)
        assert abs(np.mean(counts) - declared) < 5 * np.std(counts) / np.sqrt(len(counts)) + 1e-9, type(sampler).__name__


def test_the_auto_rule_counts_the_derived_cohort_of_a_samples_per_round_sampler():
    module, row = MLP(hidden=8).build((6,), 3), torch.zeros(1, 6)
    few = recipes.fedavg(samples_per_round=80, epochs=1, batch_size=4)  # m = 80 / 20 = 4 of 1000
    got = choose_backend(few, EQUAL, module, row)
    assert got.backend == "loop" and "~4 clients" in got.reason
    many = recipes.fedavg(samples_per_round=400, epochs=1, batch_size=4)  # m = 20
    assert choose_backend(many, EQUAL, module, row).backend == "vectorized"


def test_a_sampler_that_declares_no_expected_cohort_is_taken_to_choose_every_client():
    class Mine:
        def select(self, ctx):
            raise NotImplementedError

    assert expected_cohort(Mine(), 50) == 50.0
