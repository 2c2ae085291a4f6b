"""The failure model: dropout, stragglers and raising clients become Failed replies; the round goes on,
names them, and the same seed fails the same clients on both backends."""

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from fedsample.messages import ProbeRequest, TrainPayload, payloads_for
from fedsample import recipes
from fedsample.federation.faults import FaultModel, Faulty, Straggler, miss_probability
from fedsample.federation.simulator import Simulator
from fedsample.models import LogisticRegression
from fedsample.rounds import Failed, is_failed
from fedsample.simulation import simulate
from fedsample.strategy import Strategy
from fedsample.training.local import LocalSGD
from helpers import blobs, federate
from fedsample.simulation import Engine


TRAIN = TrainPayload(params={}, plan=None, solver=None, round=0)  # a training request (the failure model's "train" phase)
PROBE = ProbeRequest(params={})  # a probe request (its "probe" phase)


class Echo:
    """A federation whose clients answer their own id."""

    num_clients = 1000

    def run(self, ids, payload, round):
        return [int(k) for k in ids]


def test_dropout_rate_matches_p_and_decisions_do_not_depend_on_order():
    ids = np.arange(1000)
    fed = Faulty(Echo(), FaultModel(dropout={"train": 0.3}), seed=7)
    replies = fed.run(ids, TRAIN, round=3)
    failed = {r.client for r in replies if is_failed(r)}
    # Binomial(1000, 0.3): sd = 14.5; 4 sd
    assert abs(len(failed) - 300) < 58
    shuffled = np.random.default_rng(0).permutation(ids)
    again = Faulty(Echo(), FaultModel(dropout={"train": 0.3}), seed=7).run(shuffled, TRAIN, round=3)
    assert {r.client for r in again if is_failed(r)} == failed
    assert all(r == k for r, k in zip(replies, ids) if not is_failed(r))
    other_round = fed.run(ids, TRAIN, round=4)
    assert {r.client for r in other_round if is_failed(r)} != failed
    assert not any(is_failed(r) for r in fed.run(ids, PROBE, round=3))  # no dropout in this phase


def test_straggler_miss_rate_is_exp_minus_deadline_over_mean():
    model = FaultModel(straggler=Straggler(deadline=2.0, mean=1.0))
    replies = Faulty(Echo(), model, seed=1).run(np.arange(1000), TRAIN, round=0)
    late = [r for r in replies if is_failed(r)]
    p = math.exp(-2.0)  # 0.135; sd of the count 10.8
    assert abs(len(late) - 1000 * p) < 44 and miss_probability(model, "train") == pytest.approx(p)
    assert all(r.reason.startswith("straggler") for r in late)


@pytest.mark.parametrize("bad", [{"train": 1.0}, {"train": -0.1}, {"upload": 0.1}])
def test_fault_model_rejects_bad_probabilities_and_phases(bad):
    with pytest.raises(ValueError):
        FaultModel(dropout=bad)


@dataclass(frozen=True)
class RaisesOn(LocalSGD):
    """Local SGD that raises on one client (a client-side crash)."""

    client: int = 2

    def run(self, ctx, sample, params, round, rng):
        if ctx.client_id == self.client:
            raise RuntimeError("disk full")
        return super().run(ctx, sample, params, round, rng)


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_a_raising_client_is_left_out_and_named(backend):
    fed = federate(blobs(), [40] * 6)
    base = recipes.fedavg(clients_per_round=6, lr=0.1, batch_size=8)
    strategy = Strategy(clients=base.clients, data=base.data, local=RaisesOn(lr=0.1, batch_size=8),
                        aggregate=base.aggregate, server=base.server, sizes=base.sizes)
    result = simulate(strategy, federated_data=fed, model=LogisticRegression(), rounds=2, seed=0, engine=Engine(backend=backend))
    for record in result.history:
        assert record["failed"] == [{"client": 2, "phase": "train", "reason": "raised RuntimeError: disk full"}]
        assert record["dropped"] == 1 and record["updates"] == 5
    assert all(torch.isfinite(v).all() for v in result.params.values())


def test_every_client_raising_is_a_bug_and_is_raised():
    class Broken:
        num_clients = 3

        def run(self, ids, payload, round):
            raise KeyError("no such procedure")

    with pytest.raises(KeyError):
        Faulty(Broken()).run(np.arange(3), TRAIN, 0)


@pytest.mark.parametrize("strategy", [recipes.fedavg(clients_per_round=5, lr=0.1, batch_size=8),
                                      recipes.fedsampling(K=60, epsilon=3.0, M=50, server_lr=0.5)], ids=["fedavg", "fedsampling"])
def test_same_seed_fails_the_same_clients_on_both_backends(strategy):
    fed = federate(blobs(), [30, 50, 20, 40, 60, 40])
    faults = FaultModel(dropout={"report_size": 0.3, "train": 0.3})
    runs = {b: simulate(strategy, federated_data=fed, model=LogisticRegression(), rounds=4, seed=3, faults=faults, engine=Engine(backend=b))
            for b in ("loop", "vectorized")}
    failed = [[tuple(f.values()) for f in r.get("failed", [])] for r in runs["loop"].history]
    assert failed == [[tuple(f.values()) for f in r.get("failed", [])] for r in runs["vectorized"].history]
    assert sum(len(f) for f in failed) > 0
    for k, v in runs["loop"].params.items():
        torch.testing.assert_close(v, runs["vectorized"].params[k], rtol=1e-4, atol=1e-5)


def test_a_round_where_nothing_arrives_leaves_the_parameters_unchanged_and_says_so():
    class Silent(Simulator):
        def run(self, ids, payload, round):
            procedure = payloads_for(payload, len(ids)).procedure.name  # the name the request's type declares
            return [Failed(int(k), procedure, "no network") for k in ids]

    fed = federate(blobs(), [40] * 4)
    strategy = recipes.fedavg(clients_per_round=4, lr=0.1, batch_size=8)
    module = LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)
    from fedsample.models import initial_parameters

    params = initial_parameters(module, 0)
    new, log = strategy.round(Silent(fed, module, 0), params, strategy.init_state(params), 0, 0)
    assert all(torch.equal(new[k], params[k]) for k in params)
    assert log["params_unchanged"] and log["dropped"] == 4


RECIPE_PARAMS = {"fedsts": dict(H=2, m=4, dim=3), "fedstas": dict(H=2, m=4, dim=3, M=20, eta=100), "isfedavg": dict(L=4),
                 "fedsampling": dict(K=60, M=30), "fedsampling_naive": {}, "centralized": dict(K=32), "iwds": {},
                 "power_of_choice": dict(clients_per_round=4, candidates=8)}


@pytest.mark.parametrize("name", sorted(recipes.RECIPES))
def test_every_recipe_completes_its_rounds_under_faults_alike_on_both_backends(name):
    fed = federate(blobs(n=400), [20, 40, 30, 50, 60, 25, 35, 45, 55, 40])
    strategy = recipes.recipe(name, **RECIPE_PARAMS.get(name, dict(clients_per_round=4)))
    faults = FaultModel(dropout={"report_size": 0.3, "train": 0.3}, straggler=Straggler(3.0))
    runs = [simulate(strategy, federated_data=fed, model=LogisticRegression(), rounds=2, seed=1, faults=faults, engine=Engine(backend=b))
            for b in ("loop", "vectorized")]
    assert [r["dropped"] for r in runs[0].history] == [r["dropped"] for r in runs[1].history]
    assert runs[0].final["accuracy"] == pytest.approx(runs[1].final["accuracy"], abs=1e-6)
    assert all(torch.isfinite(v).all() for v in runs[1].params.values())
