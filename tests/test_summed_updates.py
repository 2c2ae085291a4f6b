"""Updates summed as they arrive (fedsample.federation.summed): where the aggregator plans its sum, the loop engine
holds one running sum instead of the cohort's updates, with the numbers of holding them to the bit (every
weighting, client threads, the failure model); any other question (a rejected update, an empty one) is answered
update by update from updates retrained on demand, from each client's state as it was before the call; and a run
that needs no binomial amplification does not import scipy.stats."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.federation.summed import SummedReport, SummedUpdates
from fedsample.rounds import FusedReplies
from fedsample.federation.faults import FaultModel, Faulty
from fedsample.federation.simulator import Simulator
from fedsample.models import MLP
from fedsample.strategy import round as round_steps
from fedsample.training.aggregate import WeightedMean
from helpers import blobs, federate
from fedsample.simulation import Engine

SIZES = [int(s) for s in np.random.default_rng(3).integers(3, 20, size=20)]
ROUNDS = 3


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=400, d=8, classes=3), SIZES)


@pytest.fixture(scope="module")
def mlp():
    return MLP(hidden=8).build((8,), 3)  # the blobs' 8 features and 3 classes


@pytest.fixture
def no_plan(monkeypatch):
    """Runs in which the strategy plans no sum: the engine holds every update until the server asks."""
    def off():
        monkeypatch.setattr(round_steps, "planned_weights", lambda s, ctx, cohort, lost=0: None)  # the round's step
    return off


@pytest.fixture
def train_calls(monkeypatch):
    """The clients the train procedure ran for, in call order."""
    calls: list[int] = []
    train = fs.client.PROCEDURES[fs.messages.TrainPayload]

    def counted(ctx, payload, rng):
        calls.append(ctx.client_id)
        return train(ctx, payload, rng)

    monkeypatch.setitem(fs.client.PROCEDURES, fs.messages.TrainPayload, counted)
    return calls


def weighted(by: str, **local):
    """FedAvg's cohort and local SGD, its updates weighted ``by`` (every WeightedMean weighting plans its sum)."""
    return lambda: replace(fs.recipes.fedavg(clients_per_round=8, lr=0.1, **(local or {"epochs": 2, "batch_size": 4})),
                           aggregate=WeightedMean(by))


STRATEGIES = {
    "uniform": weighted("uniform"),
    "size": weighted("size"),
    "inverse_inclusion": weighted("inverse_inclusion"),
    "momentum": weighted("size", steps=3, batch_size=2, local_momentum=0.5),
}


def run(strategy, fed, module, faults=None, **engine):
    return fs.simulate(strategy, federated_data=fed, model=module, rounds=ROUNDS, seed=11, faults=faults, engine=Engine(backend="loop", **engine))


def assert_identical(got, want):
    assert got.history == want.history
    for k in want.params:
        assert torch.equal(got.params[k], want.params[k]), k


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_summing_as_they_arrive_gives_the_held_updates_numbers_bit_for_bit(name, fed, mlp, no_plan, train_calls, one_torch_thread):
    summed = run(STRATEGIES[name](), fed, mlp)
    assert len(train_calls) == ROUNDS * 8  # no update was trained twice
    threaded = run(STRATEGIES[name](), fed, mlp, client_threads=2)
    no_plan()
    held = run(STRATEGIES[name](), fed, mlp)
    assert_identical(summed, held)
    assert_identical(threaded, held)


def test_the_engine_keeps_only_the_reports_numbers(fed, mlp):
    strategy = STRATEGIES["uniform"]()
    sim = fs.federation.simulator.Simulator(fed, mlp, seed=0)
    params = fs.models.initial_parameters(mlp, 0)
    seen = []
    original = round_steps.combine_valid  # the round's aggregation step (fedsample.strategy.round)

    def spy(self, replies, cohort, ctx, *args, **kwargs):
        seen.append(replies)
        return original(self, replies, cohort, ctx, *args, **kwargs)

    round_steps.combine_valid = spy
    try:
        strategy.round(sim, params, strategy.init_state(params), 0, 0)
    finally:
        round_steps.combine_valid = original
    replies = seen[0]
    assert isinstance(replies, FusedReplies) and isinstance(replies.backing, SummedUpdates) and all(isinstance(r, SummedReport) for r in replies)
    assert not any(isinstance(v, torch.Tensor) for r in replies for v in vars(r).values())


def test_failures_by_the_failure_model_hold_the_updates_with_the_same_numbers(fed, mlp, no_plan):
    faults = FaultModel(dropout={"train": 0.3})
    summed = run(STRATEGIES["uniform"](), fed, mlp, faults=faults)
    assert any(h["failed"] for h in summed.history)
    no_plan()
    assert_identical(summed, run(STRATEGIES["uniform"](), fed, mlp, faults=faults))


def test_a_rejected_update_is_answered_from_retrained_updates_with_the_same_numbers_and_state(fed, mlp, no_plan, monkeypatch):
    """Client 4 sends a NaN update and counts its calls in its own state: the engine does not sum it, the screen
    rejects it, the server's sum over the others is formed from their updates trained again (from the state they
    had before the call: no client's state moves twice), and the run's numbers are those of held updates."""
    train = fs.client.PROCEDURES[fs.messages.TrainPayload]
    trained: list[int] = []

    def stateful(ctx, payload, rng):
        trained.append(ctx.client_id)
        ctx.state["calls"] = ctx.state.get("calls", 0) + 1
        report = train(ctx, payload, rng)
        if ctx.client_id == 4:
            report.update = {k: torch.full_like(v, float("nan")) for k, v in report.update.items()}
        return report

    monkeypatch.setitem(fs.client.PROCEDURES, fs.messages.TrainPayload, stateful)
    strategy = weighted("uniform")()
    strategy = replace(strategy, clients=fs.sampling.clients.AllClients())  # every client, client 4 included
    sim = fs.federation.simulator.Simulator(fed, mlp, seed=0)
    got = fs.simulate(strategy, federated_data=fed, model=mlp, rounds=2, seed=11, engine=Engine(federation=sim))
    assert [[f["client"] for f in h["failed"]] for h in got.history] == [[4], [4]]
    assert len(trained) == 2 * (20 + 19)  # each round: everyone once, then the 19 valid updates again
    assert sim.client_states()[0]["calls"] == 2 and sim.client_states()[4]["calls"] == 2
    no_plan()
    held = fs.federation.simulator.Simulator(fed, mlp, seed=0)
    assert_identical(got, fs.simulate(strategy, federated_data=fed, model=mlp, rounds=2, seed=11, engine=Engine(federation=held)))
    assert held.client_states() == sim.client_states()


def test_no_plan_where_the_aggregator_reads_the_replies_or_a_secure_sum_hides_them():
    ctx = fs.rounds.RoundContext(federation=None, params={}, round=0, seed=0, state={})
    cohort = fs.rounds.Cohort(ids=np.arange(4), inclusion=np.full(4, 0.5), population=8)
    assert fs.recipes.fednova(clients_per_round=4).planned_weights(ctx, cohort) is None  # a_k come with the replies
    assert fs.recipes.fedsampling(K=10).planned_weights(ctx, cohort) is None  # a secure sum
    np.testing.assert_array_equal(weighted("uniform")().planned_weights(ctx, cohort), np.full(4, 0.25))
    np.testing.assert_array_equal(weighted("inverse_inclusion")().planned_weights(ctx, cohort), np.full(4, 0.25))  # 1/(N pi_k)


def test_a_round_without_binomial_amplification_does_not_import_scipy_stats(tmp_path):
    """scipy.stats (about 45 MB) is imported only where a user's drawn count is amplified as a binomial."""
    script = (
        "import sys, numpy as np, fedsample as fs\n"
        "from fedsample.data.types import Dataset, FederatedData\n"
        "rng = np.random.default_rng(0); x = rng.normal(size=(60, 4)).astype(np.float32); y = rng.integers(0, 2, 60)\n"
        "ds = Dataset('tiny', x[:40], y[:40], x[40:], y[40:], 2)\n"
        "fed = FederatedData.from_client_indices(ds, [np.arange(i, i + 4) for i in range(0, 40, 4)])\n"
        "fs.simulate(fs.recipes.fedavg(clients_per_round=4, epochs=1, batch_size=2), federated_data=fed, model=fs.models.MLP(hidden=4), rounds=1)\n"
        "print(sorted(m for m in sys.modules if m.startswith('scipy.stats'))[:1])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


class Asked:
    """A federation that records the requests it is asked and answers with the engine it wraps."""

    def __init__(self, inner):
        self.inner, self.requests = inner, []

    @property
    def num_clients(self):
        return self.inner.num_clients

    def run(self, client_ids, request, round):
        self.requests.append((np.asarray(client_ids).copy(), request))
        return self.inner.run(client_ids, request, round)


@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_the_aggregators_planned_sum_travels_in_the_train_request_and_a_sub_cohort_gets_none(fed, mlp, dropout):
    """The round sends the aggregator's declared reduction in the train request itself (no hidden context): the whole
    cohort's ids in order and the aggregator's weights. The failure model asks a sub-cohort when clients drop out, and
    then drops the plan explicitly: the engine under it receives no planned sum."""
    strategy = fs.recipes.fedavg(clients_per_round=8, lr=0.1, batch_size=4)
    engine = Asked(Simulator(fed, mlp, seed=0))
    faulty = Faulty(engine, FaultModel(dropout={"train": dropout}), seed=1)
    params = fs.models.initial_parameters(mlp, 0)
    state = strategy.init_state(params)
    outer = Asked(faulty)
    strategy.round(outer, params, state, 0, seed=0)
    ids, request = next((i, r) for i, r in outer.requests if isinstance(r, fs.messages.TrainPayload))
    plan = request.planned
    assert plan is not None and np.array_equal(plan.ids, ids) and plan.weights.shape == (len(ids),)
    np.testing.assert_allclose(plan.weights.sum(), 1.0)  # FedAvg's uniform mean over the whole cohort, declared up front
    inner_ids, inner_request = next((i, r) for i, r in engine.requests if isinstance(r, fs.messages.TrainPayload))
    if dropout == 0:  # nobody dropped out: the engine gets the request as the round sent it
        assert np.array_equal(inner_ids, ids) and inner_request.planned is plan
    else:  # some dropped out (this seed loses clients): the sub-cohort's request carries no plan
        assert len(inner_ids) < len(ids) and inner_request.planned is None


def test_unplanned_drops_the_plan_of_every_per_client_request_and_leaves_other_requests_alone():
    plan = fs.messages.PlannedSum(np.arange(2), np.full(2, 0.5))
    train = fs.messages.TrainPayload(params={}, plan=None, solver=None, round=0)
    each = fs.messages.with_plan(fs.messages.PerClient((train, train)), plan)
    assert [p.planned for p in each] == [plan, plan]
    assert [p.planned for p in fs.messages.unplanned(each)] == [None, None]
    probe = fs.messages.ProbeRequest(params={})
    assert fs.messages.unplanned(probe) is probe and fs.messages.unplanned(train) is train
    sent = fs.messages.payloads_for(fs.messages.with_plan(train, plan), 2)
    assert fs.messages.planned_for(sent, np.arange(2)) is plan and fs.messages.planned_for(sent, np.array([1, 0])) is None
