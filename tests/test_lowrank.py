"""Multi-step cohorts at the union's speed: the vectorized schedule equals the per-client one draw for draw, the
low-rank path (no model per client) gives the loop's numbers, and clients of very different sizes are grouped so
that padding stays under 2x."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedsample import recipes
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import SteppedCohort, VectorizedSimulator, batch_widths, padding_groups
from fedsample.rounds import FusedReplies
from fedsample.messages import LocalSample, TrainPayload
from fedsample.models import MLP, initial_parameters
from fedsample.parts import DrawnCohort
from fedsample.rng import ClientRandom, CohortStreams
from fedsample.sampling.data import AllSamples, BernoulliSamples
from fedsample.simulation import simulate
from fedsample.training.local import LocalSGD, minibatch_schedule
from fedsample.training.lowrank import linear_chain
from helpers import blobs, federate
from fedsample.simulation import Engine

SMALL = [1, 3, 7, 12, 2, 9, 0, 5, 4, 6, 2, 2]  # small clients: 0 to 6 steps at batch 2
D = 40  # input width: wide enough for the low-rank form to pay (rows x (in + out) < in x out)


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=400, d=D, classes=5), SMALL)


class DropoutChain:
    """Linear layers, three kinds of activation and dropout: a chain the low-rank path runs."""

    def build(self, shape, classes):
        return nn.Sequential(nn.Flatten(), nn.Linear(D, 32), nn.Tanh(), nn.Dropout(0.3),
                             nn.Sequential(nn.Linear(32, 16), nn.GELU()), nn.Linear(16, classes))


MODELS = {"mlp": MLP(hidden=32), "dropout_chain": DropoutChain()}
SOLVERS = {
    "epochs_partial_batches": LocalSGD(lr=0.1, epochs=2, batch_size=4),
    "steps_momentum_decay_prox": LocalSGD(lr=0.1, epochs=None, steps=3, batch_size=2, momentum=0.9, weight_decay=1e-2, prox_mu=0.1),
    "one_epoch_momentum": LocalSGD(lr=0.1, epochs=1, batch_size=3, momentum=0.5, lr_decay=0.9),
}


def assert_close(a: dict, b: dict, tol: float = 2e-5) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol)


# --- the schedule --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("trial", range(40))
def test_the_cohort_schedule_is_the_per_client_schedule_draw_for_draw(trial):
    """One numpy pass over the cohort gives every member's batches of LocalSGD.batches (each from its own
    counter-based stream), with the same weights, and leaves each stream where the member's own draws leave it."""
    rng = np.random.default_rng(trial)
    C = int(rng.integers(1, 12))
    counts = rng.integers(0, 30, size=C) * (rng.random(C) > 0.2)
    member = np.repeat(np.arange(C), counts)
    position = np.concatenate([rng.permutation(50)[:c] for c in counts] + [np.zeros(0, int)]).astype(np.int64)
    scale = rng.random(len(member)) if trial % 3 == 0 else None
    drawn = DrawnCohort(member, position, counts.astype(np.int64), scale)
    batch = [None, 1, 3, 8, 32][trial % 5]
    solver = (LocalSGD(lr=0.1, epochs=int(rng.integers(1, 4)), batch_size=batch) if trial % 2
              else LocalSGD(lr=0.1, epochs=None, steps=int(rng.integers(1, 7)), batch_size=batch))
    ids, start = rng.integers(0, 1000, size=C), rng.integers(0, 40, size=C)

    def streams():
        out = [ClientRandom(3, 2, int(k), "train") for k in ids]
        for r, p in zip(out, start):
            r.position = int(p)
        return out

    reference, vectorized = streams(), streams()
    want = minibatch_schedule(solver, drawn, reference)
    for got in (solver.schedule(drawn, vectorized, 0), solver.schedule(drawn, CohortStreams(3, 2, ids, "train", start), 0)):
        for field in ("client", "step", "row", "weight"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)
    assert [r.position for r in vectorized] == [r.position for r in reference]


def test_a_plan_with_probabilities_keeps_the_per_client_schedule():
    """Batches drawn with replacement from a plan's probabilities read a numpy Generator: member by member."""
    sample = LocalSample(np.arange(6), probs=np.full(6, 1 / 6))
    drawn = DrawnCohort.of([sample, sample])
    solver = LocalSGD(lr=0.1, epochs=None, steps=2, batch_size=3)
    assert solver.cohort_schedule(drawn, [ClientRandom(0, 0, k, "train") for k in (1, 2)]) is None
    got = solver.schedule(drawn, [ClientRandom(0, 0, k, "train") for k in (1, 2)], 0)
    want = minibatch_schedule(solver, drawn, [ClientRandom(0, 0, k, "train") for k in (1, 2)])
    np.testing.assert_array_equal(got.row, want.row)


# --- the low-rank path -----------------------------------------------------------------------------------------


def test_which_models_are_linear_chains():
    from fedsample.training.random_layers import prepare

    row = torch.zeros(1, D)
    for spec in MODELS.values():
        module = spec.build((D,), 5)
        trained = prepare(module, row).module  # dropout layers injected, as the engines train them
        assert linear_chain(trained, row, initial_parameters(module, 0)) is not None
    raw = MODELS["dropout_chain"].build((D,), 5)
    assert linear_chain(raw, row, initial_parameters(raw, 0)) is None  # nn.Dropout itself draws from torch's generator
    conv = nn.Sequential(nn.Unflatten(1, (1, D)), nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(2 * (D - 2), 5))
    norm = nn.Sequential(nn.Linear(D, 8), nn.LayerNorm(8), nn.Linear(8, 5))
    for module in (conv, norm):
        assert linear_chain(module, row, initial_parameters(module, 0)) is None


@pytest.mark.parametrize("plan", [AllSamples(), BernoulliSamples(0.7)], ids=["all", "bernoulli"])
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("model", MODELS)
def test_low_rank_cohorts_give_the_loops_reports_and_sums(fed, model, solver, plan):
    module = MODELS[model].build(fed.dataset.input_shape, fed.dataset.num_classes)
    params = initial_parameters(module, 0)
    payload = TrainPayload(params=params, plan=plan, solver=SOLVERS[solver], round=1)
    ids = np.arange(len(SMALL))
    loop = Simulator(fed, module, seed=5).run(ids, payload, 1)
    vec = VectorizedSimulator(fed, module, seed=5).run(ids, payload, 1)
    assert isinstance(vec, FusedReplies) and isinstance(vec.backing, SteppedCohort) and vec.backing.held  # trained in low-rank form
    for r, v in zip(loop, vec):
        assert r.steps == v.steps
        if r.steps:
            assert v.loss == pytest.approx(r.loss, rel=1e-5, abs=1e-6)
            assert_close(r.update, v.update)
    got = loop.received_positions()
    np.testing.assert_array_equal(vec.received_positions(), got)
    weights = np.linspace(0.5, 2.0, len(got))
    assert_close(vec.weighted_update_sum(got, weights), loop.weighted_update_sum(got, weights))


def test_low_rank_chunks_and_groups_do_not_change_the_numbers():
    """Clients of 1 to 400 rows: the small ones in low-rank groups, the largest stacked; one chunk or one client
    per chunk, the same numbers as the loop."""
    sizes = [2, 1, 3, 400, 2, 60, 5, 2, 0, 9]
    fed = federate(blobs(n=500, d=D, classes=5), sizes)
    module = MLP(hidden=32).build(fed.dataset.input_shape, 5)
    params = initial_parameters(module, 0)
    payload = TrainPayload(params=params, plan=AllSamples(), solver=LocalSGD(lr=0.05, epochs=1, batch_size=2, momentum=0.5), round=0)
    ids = np.arange(len(sizes))
    loop = Simulator(fed, module, seed=1).run(ids, payload, 0)
    for budget in (2**40, 1):
        vec = VectorizedSimulator(fed, module, seed=1, memory_budget=budget).run(ids, payload, 0)
        assert vec.backing.held and vec.backing._where[3, 0] < 0 and vec.backing._where[0, 0] >= 0  # client 3 (200 steps) stacked, client 0 low-rank
        for r, v in zip(loop, vec):
            assert r.steps == v.steps
            if r.steps:
                assert_close(r.update, v.update)
        got = loop.received_positions()
        assert_close(vec.weighted_update_sum(got, np.ones(len(got))), loop.weighted_update_sum(got, np.ones(len(got))), tol=1e-4)


def test_padding_groups_keep_padding_under_twice():
    rng = np.random.default_rng(0)
    steps = rng.integers(0, 300, size=500)
    widths = np.where(steps > 0, rng.integers(1, 70, size=500), 0)
    groups = padding_groups(steps, widths)
    assert sorted(np.concatenate(groups).tolist()) == np.flatnonzero(steps).tolist()  # every stepping client once
    for g in groups:
        assert np.all(2 * widths[g] > widths[g].max()) or widths[g].max() == 1
        assert np.all(2 * steps[g] > steps[g].max()) or steps[g].max() == 1
        assert np.all(np.diff(g) > 0)  # cohort order kept


def test_batch_widths_are_each_members_widest_minibatch():
    drawn = DrawnCohort.flat(np.repeat([0, 2], [7, 3]), np.concatenate([np.arange(7), np.arange(3)]), 3)
    schedule = LocalSGD(lr=0.1, epochs=1, batch_size=4).schedule(drawn, CohortStreams(0, 0, np.arange(3), "train"), 0)
    np.testing.assert_array_equal(batch_widths(schedule, 3), [4, 0, 3])


RECIPES = {
    "fedavg": lambda: recipes.fedavg(clients_per_round=8, lr=0.1, epochs=2, batch_size=2),
    "fedprox_momentum": lambda: recipes.fedprox(clients_per_round=8, lr=0.1, steps=4, batch_size=2, prox_mu=0.1, local_momentum=0.9),
    "fednova": lambda: recipes.fednova(clients_per_round=8, steps=3, batch_size=2, local_momentum=0.5),
}


@pytest.mark.parametrize("name", RECIPES)
def test_simulate_with_low_rank_cohorts_matches_the_loop(fed, name):
    sizes = [n or 3 for n in SMALL]
    data = federate(blobs(n=400, d=D, classes=5), sizes)
    runs = {b: simulate(RECIPES[name](), data, MLP(hidden=32), rounds=3, seed=2, eval_every=3, engine=Engine(backend=b)) for b in ("loop", "vectorized")}
    assert_close(runs["loop"].params, runs["vectorized"].params, tol=1e-4)
    assert runs["vectorized"].history[-1]["train_loss"] == pytest.approx(runs["loop"].history[-1]["train_loss"], rel=1e-4)


def test_the_low_rank_form_refuses_a_rule_other_than_local_sgd():
    """The low-rank form rewrites SGDStep's arithmetic; a chain such as a local Adam is refused in one line."""
    from fedsample.training.lowrank import Linear, RowMap, train_low_rank
    from fedsample.training.rules import chain, scale_by_adam

    module = nn.Sequential(nn.Linear(D, 4), nn.ReLU(), nn.Linear(4, 3))
    params = initial_parameters(module, 0)
    found = linear_chain(module, torch.zeros(1, D), params)
    assert found is not None
    assert found.layers == (Linear("0.weight", "0.bias"), RowMap(found.layers[1].module), Linear("2.weight", "2.bias"))
    x, y = torch.zeros(4, D), torch.zeros(4, dtype=torch.int64)
    rows, weights = torch.zeros((1, 1, 2), dtype=torch.int64), torch.ones((1, 1, 2))
    with pytest.raises(TypeError, match="SGDStep"):
        train_low_rank(found, "classification", params, x, y, rows, weights, np.array([1]), chain(scale_by_adam(), lr=0.1))
