"""Client threads: the loop engine training clients side by side on threads of this process. The numbers are
those of one client after the other on one torch thread, to the bit, whatever the number of threads and the
caller's torch threads (CNN with dropout, momentum, client-held state, probes, held updates); torch's thread count comes back after each call; failing clients,
random operations outside nn.Dropout and bad settings; and the auto rule's choice, recorded with the run."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.federation.choose import BackendChoice, choose_cores
from fedsample.federation.simulator import Simulator
from fedsample.models import MLP, PflCNN
from fedsample.training import random_layers
from helpers import federate
from fedsample.simulation import Engine

ROUNDS = 2
SIZES = [int(s) for s in np.random.default_rng(2).integers(4, 30, size=16)]


@pytest.fixture(scope="module")
def fed():
    return federate(fs.data.load_dataset("digits"), SIZES)


@pytest.fixture(scope="module")
def cnn(fed):
    """A small CNN with two dropout layers: each client's masks come from its own stream, on its own thread."""
    return PflCNN(channels=(4, 8), hidden=16).build(fed.dataset.input_shape, fed.dataset.num_classes)


RECIPES = {
    "fedavg": lambda: fs.recipes.fedavg(clients_per_round=10, epochs=2, batch_size=4, lr=0.1),
    "fednova_momentum": lambda: fs.recipes.fednova(clients_per_round=9, steps=3, batch_size=2, local_momentum=0.5),
    "isfedavg": lambda: fs.recipes.isfedavg(clients_per_round=6, batch_size=3, epochs=2, update="cheap", lr=0.1),  # client-held state
    "power_of_choice": lambda: fs.recipes.power_of_choice(clients_per_round=4, candidates=8, steps=2, batch_size=4),  # loss probes, then training
    "optimal_sampling": lambda: fs.recipes.optimal_sampling(clients_per_round=4, steps=2, batch_size=4),  # train_held, send_held
}


def run(recipe, fed, module, **engine):
    return fs.simulate(RECIPES[recipe](), federated_data=fed, model=module, rounds=ROUNDS, seed=7, engine=Engine(backend="loop", **engine))


def assert_identical(got, want):
    assert got.history == want.history
    for k in want.params:
        assert torch.equal(got.params[k], want.params[k]), k


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_number_of_client_threads_gives_the_one_thread_numbers_bit_for_bit(recipe, fed, cnn, one_torch_thread):
    alone = run(recipe, fed, cnn)
    torch.set_num_threads(2)  # the caller's threads: client threads train on one each
    for threads in (2, 3):
        got = run(recipe, fed, cnn, client_threads=threads)
        assert got.client_threads == threads
        assert_identical(got, alone)


def test_the_callers_torch_threads_do_not_change_the_numbers_and_come_back(fed, cnn, one_torch_thread):
    """Client threads run torch on one thread each, so a caller on 2 torch threads gets the one-thread numbers,
    and its own setting back after the run."""
    alone = run("fedavg", fed, cnn)
    torch.set_num_threads(2)
    got = run("fedavg", fed, cnn, client_threads=2)
    assert torch.get_num_threads() == 2
    assert_identical(got, alone)


def test_clients_really_run_on_several_threads(fed, cnn):
    seen = set()
    train = fs.client.PROCEDURES[fs.messages.TrainPayload]

    def spy(ctx, payload, rng):
        seen.add(threading.get_ident())
        return train(ctx, payload, rng)

    sim = Simulator(fed, cnn, seed=0, client_threads=2)
    strategy = RECIPES["fedavg"]()
    params = fs.models.initial_parameters(cnn, 0)
    original, fs.client.PROCEDURES[fs.messages.TrainPayload] = train, spy
    try:
        strategy.round(sim, params, strategy.init_state(params), 0, 0)
    finally:
        fs.client.PROCEDURES[fs.messages.TrainPayload] = original
    assert len(seen) == 2 and threading.get_ident() not in seen


def test_dropout_masks_are_per_thread():
    """Masks injected on one thread are not seen by a forward on another (each thread has its own)."""
    seen = []
    with random_layers.injected({"layer": torch.ones(1)}):
        other = threading.Thread(target=lambda: seen.append(random_layers._ACTIVE.masks))
        other.start()
        other.join()
        assert random_layers._ACTIVE.masks is not None
    assert seen == [None]


def test_a_raising_client_fails_alone_as_in_the_loop(fed, cnn, one_torch_thread):
    """A client whose procedure raises becomes a Failed reply (the failure model asks one by one), the same
    clients and numbers whatever the number of threads and the caller's torch threads."""
    train = fs.client.PROCEDURES[fs.messages.TrainPayload]

    def flaky(ctx, payload, rng):
        if ctx.client_id % 5 == 0:
            raise RuntimeError("disk full")
        return train(ctx, payload, rng)

    fs.client.PROCEDURES[fs.messages.TrainPayload] = flaky
    try:
        alone = run("fedavg", fed, cnn)
        torch.set_num_threads(2)  # the clients asked again one by one run on one torch thread too
        both = run("fedavg", fed, cnn, client_threads=2)
    finally:
        fs.client.PROCEDURES[fs.messages.TrainPayload] = train
    assert any(h["failed"] for h in alone.history)
    assert_identical(both, alone)


def test_random_operations_outside_dropout_run_one_client_at_a_time(fed, one_torch_thread):
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + 0.01 * torch.randn_like(x)

    noisy = torch.nn.Sequential(torch.nn.Flatten(), Noisy(), torch.nn.Linear(64, 10))
    torch.manual_seed(0)  # the evaluation's draws too come from torch's global generator
    alone = run("fedavg", fed, noisy)
    torch.manual_seed(0)
    got = run("fedavg", fed, noisy, client_threads=2)
    assert got.client_threads == 1 and "one client at a time" in got.backend_reason
    assert_identical(got, alone)


def test_client_threads_are_for_the_loop_in_this_process(fed, cnn):
    for options in ({"backend": "vectorized", "client_threads": 2}, {"backend": "loop", "client_threads": 2, "workers": 2}):
        with pytest.raises(ValueError, match="client_threads=2"):
            fs.simulate(RECIPES["fedavg"](), federated_data=fed, model=cnn, rounds=1, engine=Engine(**options))
    with pytest.raises(ValueError, match="client_threads"):
        fs.simulate(RECIPES["fedavg"](), federated_data=fed, model=cnn, rounds=1, engine=Engine(backend="loop", client_threads=0))
    from fedsample.simulation import resolve_backend

    with pytest.raises(ValueError, match="device 'cuda'"):  # checked before any device is touched
        resolve_backend("loop", RECIPES["fedavg"](), fed, cnn, device="cuda", client_threads=2)


# --- the auto rule ----------------------------------------------------------------------------------------------

CIFAR_SIZES = np.full(1000, 50)
IMAGE = torch.zeros(1, 3, 32, 32)


def cifar_fedavg():
    return fs.recipes.fedavg(clients_per_round=50, epochs=1, batch_size=10, lr=0.1)


def test_pfl_research_cifar10_workload_goes_to_client_threads_of_every_allowed_thread():
    cnn = PflCNN().build((3, 32, 32), 10)
    loop = BackendChoice("loop", "rule 6")
    for threads in (2, 4):
        got = choose_cores(loop, cifar_fedavg(), CIFAR_SIZES, cnn, IMAGE, rounds=3, threads=threads)
        assert (got.backend, got.workers, got.client_threads) == ("loop", 1, threads)
        assert f"clients side by side on {threads} threads" in got.reason


def test_the_vectorized_engine_with_enough_work_goes_to_a_pool():
    wide = MLP(hidden=4096, layers=2).build((3, 32, 32), 10)
    got = choose_cores(BackendChoice("vectorized", "rule 7"), cifar_fedavg(), CIFAR_SIZES, wide, IMAGE, rounds=50, threads=2)
    assert (got.workers, got.client_threads) == (2, 1) and "pool of 2 worker processes" in got.reason
    short = choose_cores(BackendChoice("vectorized", "rule 7"), cifar_fedavg(), CIFAR_SIZES, wide, IMAGE, rounds=1, threads=2)
    assert (short.workers, short.client_threads) == (1, 1) and "too little to pay for starting worker processes" in short.reason


def test_auto_picks_client_threads_for_a_heavy_loop_cohort_and_records_them(fed):
    """A multi-step CNN cohort with enough work per round: the run records 2 client threads and its numbers are
    the one-thread run's."""
    heavy = PflCNN(channels=(64, 128), hidden=256).build(fed.dataset.input_shape, fed.dataset.num_classes)
    strategy = fs.recipes.fedavg(clients_per_round=8, epochs=12, batch_size=4, lr=0.05)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        got = fs.simulate(strategy, federated_data=fed, model=heavy, rounds=1, seed=3)
        torch.set_num_threads(1)
        want = fs.simulate(strategy, federated_data=fed, model=heavy, rounds=1, seed=3, engine=Engine(backend="loop"))
    finally:
        torch.set_num_threads(before)
    assert (got.backend, got.workers, got.client_threads) == ("loop", 1, 2), got.backend_reason
    assert_identical(got, want)
