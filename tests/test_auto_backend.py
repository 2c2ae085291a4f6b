"""backend="auto": the documented rule (fedsample.federation.choose) picks the engine, the run records it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from fedsample import recipes
from fedsample.cli import main
from fedsample.federation.choose import STACKED_MIN_CLIENTS, choose_backend, expected_cohort
from fedsample.models import CNN, MLP, PflCNN
from fedsample.sampling.clients import AllClients, PoissonClients, UniformClients
from fedsample.simulation import simulate
from helpers import blobs, federate
from fedsample.simulation import Engine

SIZES = np.array([5, 40, 12, 30])
ROW = torch.zeros(1, 6)
IMAGE = torch.zeros(1, 3, 8, 8)
mlp = MLP(hidden=8).build((6,), 3)
cnn = CNN(hidden=16).build((3, 8, 8), 3)


def choice(strategy, module=mlp, sample=ROW, device="cpu", sizes=SIZES):
    return choose_backend(strategy, sizes, module, sample, device)


def test_one_gradient_and_single_step_cohorts_are_vectorized_even_with_convolutions():
    for module, sample in ((mlp, ROW), (cnn, IMAGE)):
        got = choice(recipes.fedsampling(K=20, M=10), module, sample)
        assert (got.backend, "one-gradient") == ("vectorized", got.reason[:12])
        got = choice(recipes.fedavg(clients_per_round=2, steps=1, batch_size=8), module, sample)
        assert got.backend == "vectorized" and "one local step" in got.reason
        got = choice(recipes.fedavg(clients_per_round=2, epochs=1, batch_size=40), module, sample)  # batch holds the largest client
        assert got.backend == "vectorized"


def test_multi_step_sgd_with_convolutions_on_cpu_is_the_loop_but_vectorized_on_a_device():
    strategy = recipes.fedavg(clients_per_round=50, epochs=1, batch_size=10)
    got = choice(strategy, cnn, IMAGE)
    assert got.backend == "loop" and "Conv2d" in got.reason
    assert choice(strategy, cnn, IMAGE, device="cuda").backend == "vectorized"
    assert choice(strategy, PflCNN().build((3, 32, 32), 10), torch.zeros(1, 3, 32, 32)).backend == "loop"


def test_dense_multi_step_sgd_is_vectorized_from_the_cohort_threshold():
    few = recipes.fedavg(clients_per_round=STACKED_MIN_CLIENTS - 1, epochs=1, batch_size=4)
    many = recipes.fedavg(clients_per_round=STACKED_MIN_CLIENTS, epochs=1, batch_size=4)
    sizes = np.full(100, 20)
    assert choice(few, sizes=sizes).backend == "loop"
    got = choice(many, sizes=sizes)
    assert got.backend == "vectorized" and f"~{STACKED_MIN_CLIENTS} clients" in got.reason


def test_expected_cohort_of_each_sampler():
    assert expected_cohort(UniformClients(7), 100) == 7
    assert expected_cohort(UniformClients(700), 100) == 100
    assert expected_cohort(PoissonClients(0.25), 100) == 25
    assert expected_cohort(AllClients(), 100) == 100


def test_solvers_and_models_the_vectorized_engine_runs_client_by_client_go_to_the_loop():
    got = choice(recipes.isfedavg(L=3, batch_size=2, epochs=2))
    assert got.backend == "loop" and "EpochSGD" in got.reason
    bn = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8, track_running_stats=False), nn.Linear(8, 3))
    got = choice(recipes.fedsampling(K=20, M=10), bn)
    assert got.backend == "loop" and "normalises over the batch" in got.reason


def test_simulate_defaults_to_auto_records_the_choice_and_matches_the_named_engine():
    fed = federate(blobs(n=200), [9, 14, 20, 7, 30, 11])
    for make, engine in ((lambda: recipes.fedsampling(K=30, epsilon=2.0, M=30, server_lr=0.2), "vectorized"),
                         (lambda: recipes.fedavg(clients_per_round=3, lr=0.1, batch_size=4), "loop")):
        auto = simulate(make(), fed, MLP(hidden=8), rounds=2, seed=3)
        assert auto.backend == engine and auto.backend_reason
        named = simulate(make(), fed, MLP(hidden=8), rounds=2, seed=3, engine=Engine(backend=engine))
        assert named.backend_reason == "asked for"
        for k in auto.params:
            assert torch.equal(auto.params[k], named.params[k])


def test_experiment_results_record_the_engine_per_seed():
    from fedsample.experiments.presets import load_preset
    from fedsample.experiments.runner import summarize

    fed = federate(blobs(n=200), [9, 14, 20, 7, 30, 11])
    run = simulate(recipes.fedsampling(K=30, epsilon=2.0, M=30, server_lr=0.2), fed, MLP(hidden=8), rounds=1, seed=0)
    document = json.loads(json.dumps(summarize(load_preset("quickstart"), {"FedSampling": [run]})))
    assert document["strategies"]["FedSampling"]["backend"] == [{"engine": "vectorized", "reason": run.backend_reason, "workers": 1, "client_threads": 1}]


def test_cli_takes_auto_and_refuses_an_unknown_backend(capsys):
    from fedsample.cli import _parser

    assert _parser().parse_args(["run"]).backend == "auto"
    with pytest.raises(SystemExit) as exit:
        main(["run", "quickstart", "--backend", "gpu-magic"])
    assert exit.value.code == 2
