"""The process-pool federation (every core, no Ray): the single-process engine's numbers whatever the number of
workers (1, 2, 3; loop and vectorized engines; client-held state; resume), each worker holding only its own
clients' rows, errors and lost workers as one line; and the auto rule's choice of torch's threads where splitting
the clients would not pay, recorded with the run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.federation.choose import BackendChoice, choose_cores, macs_per_sample, round_work, unimportable
from fedsample.federation.pool import PoolFederation, WorkerLost, pool_federation
from fedsample.models import CNN, MLP, PflCNN
from helpers import blobs, federate
from fedsample.callbacks import Checkpoint, Progress
from fedsample.simulation import Engine

ROUNDS = 3
SIZES = [int(s) for s in np.random.default_rng(1).integers(1, 14, size=24)]


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=240, d=8, classes=3), SIZES)


@pytest.fixture(scope="module")
def module(fed):
    return MLP(hidden=8).build(fed.dataset.input_shape, fed.dataset.num_classes)


@pytest.fixture(scope="module")
def pools(fed, module):
    """Pools of 1, 2 and 3 workers (vectorized engine) for the module's tests, stopped after them."""
    started = {w: PoolFederation(fed, module, seed=5, workers=w) for w in (1, 2, 3)}
    yield started
    for pool in started.values():
        pool.close()


RECIPES = {
    "fedavg": lambda: fs.recipes.fedavg(clients_per_round=8, epochs=2, batch_size=4, lr=0.1),
    "fedsampling": lambda: fs.recipes.fedsampling(K=40, epsilon=3.0, M=10, server_lr=0.5),
    "fedsampling_default": lambda: fs.recipes.fedsampling(K=40, server_lr=0.5),  # the total from the secure sum of the sizes
    "fednova_momentum": lambda: fs.recipes.fednova(clients_per_round=9, steps=3, batch_size=2, local_momentum=0.5),
    "isfedavg": lambda: fs.recipes.isfedavg(L=6, batch_size=3, epochs=2, update="cheap", lr=0.1),
}


def assert_same_run(got, want, exact=False):
    """Same cohorts, updates and logged numbers every round; parameters equal (bit for bit with ``exact``, else
    within float32 summation-order tolerance)."""
    assert len(got.history) == len(want.history)
    for a, b in zip(got.history, want.history):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == (b[key] if exact or not isinstance(b[key], float) else pytest.approx(b[key], rel=1e-5, abs=1e-6)), key
    for k in want.params:
        if exact:
            assert torch.equal(got.params[k], want.params[k]), k
        else:
            torch.testing.assert_close(got.params[k], want.params[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_number_of_workers_gives_the_single_process_numbers(name, fed, module, pools):
    alone = fs.simulate(RECIPES[name](), federated_data=fed, model=module, rounds=ROUNDS, seed=5, engine=Engine(backend="vectorized"))
    for workers, pool in pools.items():
        got = fs.simulate(RECIPES[name](), federated_data=fed, model=module, rounds=ROUNDS, seed=5, engine=Engine(federation=pool))
        assert_same_run(got, alone, exact=False)


def test_one_worker_is_the_single_process_engine_bit_for_bit(fed, module, pools):
    alone = fs.simulate(RECIPES["fedavg"](), federated_data=fed, model=module, rounds=ROUNDS, seed=5, engine=Engine(backend="vectorized"))
    got = fs.simulate(RECIPES["fedavg"](), federated_data=fed, model=module, rounds=ROUNDS, seed=5, engine=Engine(federation=pools[1]))
    assert_same_run(got, alone, exact=True)


def test_each_worker_holds_only_its_clients_rows(fed, pools):
    """No copy of the dataset per worker: worker w holds the rows of clients k = w mod workers, nothing else."""
    for workers, pool in pools.items():
        held = pool._ask({w: ("held_rows",) for w in range(workers)})
        assert sum(held.values()) == sum(SIZES)
        for w, rows in held.items():
            assert rows == sum(n for k, n in enumerate(SIZES) if k % workers == w)


def test_client_state_lives_on_the_workers_and_round_trips(fed, module, pools):
    pool = pools[2]
    fs.simulate(RECIPES["isfedavg"](), federated_data=fed, model=module, rounds=2, seed=5, engine=Engine(federation=pool))
    states = pool.client_states()
    assert {int(pool.owner[k]) for k in states} == {0, 1}
    pool.load_client_states({})
    assert pool.client_states() == {}
    pool.load_client_states(states)
    restored = pool.client_states()
    for k in states:
        np.testing.assert_array_equal(restored[k]["isfedavg"]["data_weights"], states[k]["isfedavg"]["data_weights"])


def test_simulate_workers_opens_a_pool_of_the_loop_engine_and_records_it(fed, module):
    make = RECIPES["fednova_momentum"]
    got = fs.simulate(make(), federated_data=fed, model=module, rounds=2, seed=3, engine=Engine(backend="loop", workers=2))
    want = fs.simulate(make(), federated_data=fed, model=module, rounds=2, seed=3, engine=Engine(backend="loop"))
    assert (got.backend, got.workers, want.workers) == ("loop", 2, 1) and "2 worker processes" in got.backend_reason
    assert_same_run(got, want)


def test_a_killed_worker_is_one_line_and_resume_gives_the_uninterrupted_numbers(fed, module, pools, tmp_path):
    strategy = RECIPES["isfedavg"]  # clients hold state: resume restores it on the workers
    uninterrupted = fs.simulate(strategy(), federated_data=fed, model=module, rounds=4, seed=5, engine=Engine(federation=pools[2]))
    checkpoint = tmp_path / "run.pt"
    doomed = PoolFederation(fed, module, seed=5, workers=2)

    def kill_after_round_2(t):
        if t == 2:
            doomed._procs[1].kill()
            doomed._procs[1].wait()

    try:
        with pytest.raises(WorkerLost, match="pool worker 1 is gone.*--resume"):
            fs.simulate(
                strategy(), federated_data=fed, model=module, rounds=4, seed=5, engine=Engine(federation=doomed), callbacks=[Checkpoint(checkpoint, every=1), Progress(kill_after_round_2)],
            )
    finally:
        doomed.close()
    resumed = fs.simulate(
        strategy(), federated_data=fed, model=module, rounds=4, seed=5, engine=Engine(federation=pools[2]), callbacks=[Checkpoint(checkpoint, resume=True)],
    )
    assert_same_run(resumed, uninterrupted, exact=True)


def test_a_workers_error_is_raised_on_the_server_as_one_line(pools):
    with pytest.raises(RuntimeError, match=r"pool worker 0: AttributeError: .*no_such_method"):
        pools[1]._ask({0: ("no_such_method",)})
    assert pools[1]._ask({0: ("held_rows",)})[0] == sum(SIZES)  # the worker still answers


def test_bad_pool_settings_are_refused(fed, module):
    with pytest.raises(ValueError, match="workers"):
        PoolFederation(fed, module, seed=0, workers=0)
    with pytest.raises(ValueError, match="engine"):
        PoolFederation(fed, module, seed=0, engine="gpu")
    with pytest.raises(ValueError, match="CPU cores"):
        with pool_federation(2).open(fed, module, 0, device="cuda"):
            pass
    with pytest.raises(ValueError, match="workers"):
        fs.simulate(RECIPES["fedavg"](), federated_data=fed, model=module, rounds=1, engine=Engine(workers=0))


# --- the auto rule: threads or a pool ---------------------------------------------------------------------------

CIFAR_SIZES = np.full(1000, 50)
IMAGE = torch.zeros(1, 3, 32, 32)
ENGINE = BackendChoice("loop", "rule 6")


def cifar_fedavg():
    return fs.recipes.fedavg(clients_per_round=50, epochs=1, batch_size=10, lr=0.1)


def test_threads_where_splitting_clients_would_not_pay():
    """Torch's threads in this process, neither client threads nor a pool (the rule's split by client:
    tests/test_client_threads.py)."""
    cnn = PflCNN().build((3, 32, 32), 10)
    cases = {
        "one thread": dict(threads=1),
        "a device": dict(device="cuda"),
        "too few clients": dict(strategy=fs.recipes.fedavg(clients_per_round=3, epochs=1, batch_size=10)),
        "one step each": dict(strategy=fs.recipes.fedavg(clients_per_round=50, steps=1, batch_size=10)),
        "one short round": dict(rounds=1, strategy=fs.recipes.fedavg(clients_per_round=50, steps=1, batch_size=10)),
        "little work": dict(module=MLP(hidden=8).build((3, 32, 32), 10)),
    }
    for case, given in cases.items():
        options = {"threads": 2, "rounds": 3, **given}
        got = choose_cores(ENGINE, options.pop("strategy", cifar_fedavg()), CIFAR_SIZES, options.pop("module", cnn), IMAGE, **options)
        assert (got.workers, got.client_threads) == (1, 1) and "in this process on" in got.reason, case


def test_work_estimate_counts_multiply_adds_of_linear_and_convolution_layers():
    mlp = MLP(hidden=64).build((1, 28, 28), 10)
    assert macs_per_sample(mlp, torch.zeros(1, 1, 28, 28)) == 784 * 64 + 64 * 10
    cnn = CNN(channels=(4, 8), hidden=16).build((1, 8, 8), 3)
    conv1, conv2 = 4 * 1 * 25 * 64, 8 * 4 * 25 * 16  # out channels x in x kernel x output pixels
    assert macs_per_sample(cnn, torch.zeros(1, 1, 8, 8)) == conv1 + conv2 + 8 * 2 * 2 * 16 + 16 * 3
    solver = fs.training.local.LocalSGD(lr=0.1, epochs=None, steps=5, batch_size=2)
    assert round_work(solver, np.full(10, 2), 10, mlp, torch.zeros(1, 1, 28, 28)) == 3 * (784 * 64 + 64 * 10) * 10 * 10


def test_parts_defined_in_main_keep_the_run_in_this_process():
    class Local(torch.nn.Linear):
        pass

    Local.__module__ = "__main__"
    assert unimportable(cifar_fedavg(), torch.nn.Sequential(Local(4, 2))) == "Local"
    assert unimportable(cifar_fedavg(), MLP().build((4,), 2)) is None


def test_auto_records_threads_in_the_reason(fed, module):
    run = fs.simulate(RECIPES["fedavg"](), federated_data=fed, model=module, rounds=1, seed=0)
    assert run.workers == 1 and "in this process on" in run.backend_reason


def test_auto_reads_read_only_training_rows_without_a_warning():
    """The auto rule looks at one training row; rows in read-only memory (a memory map, a view of a frozen array)
    must not make torch warn about a non-writable tensor."""
    import warnings

    from fedsample.simulation import resolve_backend

    ds = fs.data.load_dataset("digits")
    ds.x_train.flags.writeable = False
    data = fs.data.partition(ds, fs.data.LogNormalSizes(mean=3, sigma=1), seed=0)
    model = fs.models.LogisticRegression().build(ds.input_shape, ds.num_classes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice = resolve_backend("auto", fs.recipes.fedavg(clients_per_round=4, epochs=1, batch_size=8, lr=0.1), data, model, None, "cpu")
    assert choice.backend in ("loop", "vectorized")


def test_a_worker_answers_every_procedure_of_its_client_shard_from_one_table():
    """The worker's dispatch table (pool.procedures) names each public method of ClientShard, bound to the shard."""
    from fedsample.federation.pool import procedures
    from fedsample.federation.sharded import ClientShard

    shard = ClientShard.__new__(ClientShard)  # the table binds methods; nothing runs
    table = procedures(shard)
    assert set(table) == {name for name in vars(ClientShard) if not name.startswith("_")}
    assert all(fn.__self__ is shard and fn.__name__ == name for name, fn in table.items())
