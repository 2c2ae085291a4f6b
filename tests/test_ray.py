"""The Ray federation on a local Ray (2 actors, 1 CPU each): the numbers of the vectorized engine for
FedSampling, FedAvg, FedSTS, ISFedAvg, clustered sampling, optimal client sampling and DELTA; O(actors x parameters) bytes per round; a killed actor, then
resume from the last checkpoint, ends with the numbers of an uninterrupted run; the CLI's --workers."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ray_support import ray_environment  # sets Ray's environment before Ray is imported

ray = pytest.importorskip("ray", reason="the Ray tests need the extra: pip install 'fedsample[ray]'")

import fedsample as fs  # noqa: E402
from fedsample.cli import main  # noqa: E402
from fedsample.federation.ray import (  # noqa: E402
    CONNECT_TIMEOUT_S, RayFederation, ShardLost, check_reachable, ray_federation, ray_session,
)
from helpers import blobs, federate  # noqa: E402
from fedsample.callbacks import Checkpoint, Progress  # noqa: E402
from fedsample.simulation import Engine  # noqa: E402

ROUNDS = 4
SIZES = [int(s) for s in np.random.default_rng(1).integers(1, 14, size=24)]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (no dashboard, its own temp dir), stopped after. Each federation has 2
    actors of 1 CPU; 4 logical CPUs let a second federation start while the module's one lives."""
    with ray_environment() as temp_dir, ray_session(num_cpus=4, _temp_dir=temp_dir):
        yield


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=240, d=8, classes=3), SIZES)


@pytest.fixture(scope="module")
def module(fed):
    return fs.models.MLP(hidden=8).build(fed.dataset.input_shape, fed.dataset.num_classes)


@pytest.fixture(scope="module")
def ray_fed(local_ray, fed, module):
    federation = RayFederation(fed, module, seed=5, workers=2, count_bytes=True)
    yield federation
    federation.close()


RECIPES = {
    "fedsampling": lambda: fs.recipes.fedsampling(K=40, epsilon=3.0, M=10, server_lr=0.5),
    "fedsampling_default": lambda: fs.recipes.fedsampling(K=40, server_lr=0.5),  # the total from the secure sum of the sizes
    "fedsampling_drawn": lambda: fs.recipes.fedsampling(K=40, epsilon=3.0, M=10, server_lr=0.5, normalize="drawn"),
    "fedavg": lambda: fs.recipes.fedavg(clients_per_round=8, epochs=2, batch_size=4, lr=0.1),
    "fedsts": lambda: fs.recipes.fedsts(H=3, m=8, dim=5, steps=2, batch_size=4, lr=0.1),
    "isfedavg": lambda: fs.recipes.isfedavg(L=6, batch_size=3, epochs=2, update="cheap", lr=0.1),
    "clustered_similarity": lambda: fs.recipes.clustered_sampling(m=6, algorithm="similarity", epochs=2, batch_size=4, lr=0.1),
    "optimal_sampling": lambda: fs.recipes.optimal_sampling(m=6, epochs=2, batch_size=4, lr=0.1),
    "delta_reference": lambda: fs.recipes.delta(m=6, draw="reference", epochs=2, batch_size=4, lr=0.1),
}


def assert_same_run(got, want, exact=False):
    """Same cohorts, updates and logged numbers every round; parameters equal (bit for bit with ``exact``,
    else within float32 summation-order tolerance)."""
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
def test_ray_gives_the_vectorized_engines_numbers(name, fed, module, ray_fed):
    on_ray = fs.simulate(RECIPES[name](), federated_data=fed, model=module, rounds=ROUNDS, seed=5, engine=Engine(federation=ray_fed))
    alone = fs.simulate(RECIPES[name](), federated_data=fed, model=module, rounds=ROUNDS, seed=5, engine=Engine(backend="vectorized"))
    assert_same_run(on_ray, alone)
    assert on_ray.history[0]["cohort"] > 2  # clients of both actors took part


@pytest.mark.parametrize("name", ["pow-d", "cpow-d", "rpow-d", "fedcbs", "fedcor", "divfl", "oort"])
def test_ray_gives_the_vectorized_engines_numbers_for_the_adaptive_samplers(name, fed, module, ray_fed):
    """Their probes (loss, minibatch, labels, gradients) and Oort's utility in the replies, split over the actors."""
    import warnings

    from test_adaptive_samplers import strategy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fs.privacy.amplification.PrivacyWarning)  # every probe is an unprotected release
        on_ray = fs.simulate(strategy(name), federated_data=fed, model=module, rounds=8, seed=5, engine=Engine(federation=ray_fed))
        alone = fs.simulate(strategy(name), federated_data=fed, model=module, rounds=8, seed=5, engine=Engine(backend="vectorized"))
    assert_same_run(on_ray, alone)


def test_each_clients_report_and_update_can_be_read_on_the_server(fed, module, ray_fed):
    """For aggregators that read every client's update: the same steps, loss, a_k and update as the engine's."""
    from fedsample.messages import TrainPayload
    from fedsample.federation.vectorized import VectorizedSimulator
    from fedsample.models import initial_parameters
    from fedsample.sampling.data import AllSamples
    from fedsample.training.local import LocalSGD

    payload = TrainPayload(initial_parameters(module, 2), AllSamples(), LocalSGD(lr=0.1, epochs=2, batch_size=3, momentum=0.5), 1)
    ids = np.array([5, 0, 17, 3, 3, 22, 8])  # both actors, a repeated client
    got = ray_fed.run(ids, payload, 1)
    want = VectorizedSimulator(fed, module, seed=5).run(ids, payload, 1)
    assert [r is None for r in got] == [r is None for r in want]
    for a, b in zip(got, want):
        assert (a.steps, a.norm_steps) == (b.steps, pytest.approx(b.norm_steps)) and a.loss == pytest.approx(b.loss, rel=1e-6)
        for k in b.update:
            torch.testing.assert_close(a.update[k], b.update[k], rtol=1e-5, atol=1e-7)


def test_client_state_lives_on_the_actors_and_round_trips(fed, module, ray_fed):
    fs.simulate(RECIPES["isfedavg"](), federated_data=fed, model=module, rounds=2, seed=5, engine=Engine(federation=ray_fed))
    states = ray_fed.client_states()
    assert states and all(ray_fed.owner[k] in (0, 1) for k in states)
    assert {int(ray_fed.owner[k]) for k in states} == {0, 1}  # held on both actors
    ray_fed.load_client_states({})
    assert ray_fed.client_states() == {}
    ray_fed.load_client_states(states)
    restored = ray_fed.client_states()
    assert restored.keys() == states.keys()
    for k in states:
        np.testing.assert_array_equal(restored[k]["isfedavg"]["data_weights"], states[k]["isfedavg"]["data_weights"])


def test_only_actor_sums_cross_the_network_for_linear_aggregators(fed, local_ray):
    """A FedAvg round whose 16 clients each hold a full update: the server receives one parameter-sized
    partial sum per actor (plus small metadata: size reports, steps, losses), not 16 updates."""
    module = fs.models.MLP(hidden=256).build(fed.dataset.input_shape, fed.dataset.num_classes)
    param_bytes = sum(v.numel() * v.element_size() for v in module.state_dict().values())
    federation = RayFederation(fed, module, seed=5, workers=2, count_bytes=True)
    try:
        strategy = fs.recipes.fedavg(clients_per_round=16, epochs=1, batch_size=4, lr=0.1)
        fs.simulate(strategy, federated_data=fed, model=module, rounds=1, seed=5, engine=Engine(federation=federation))
    finally:
        federation.close()
    received, sent = federation.traffic["received"], federation.traffic["sent"]
    assert 2 * param_bytes <= received < 2 * param_bytes + 8_000 < 16 * param_bytes / 4
    assert 2 * param_bytes <= sent < 2 * param_bytes + 8_000  # the global parameters, once per actor


def test_a_secure_summed_fedsampling_round_sends_no_per_client_array(local_ray):
    """FedSampling over 20,000 one-sample clients under secure sum: the server cannot tell who drew nothing, so
    it asks every actor for the sum over all its clients with one shared weight; that request is a range and one
    number, not 16 bytes per client (it was 320 kB here, 16 MB at 10^6 clients). What comes back is bounded by
    the size reports (8 bytes per client, inherent) plus one partial sum per actor."""
    clients = 20_000
    many = federate(blobs(n=clients, d=4, classes=2), [1] * clients)
    module = fs.models.LogisticRegression().build(many.dataset.input_shape, many.dataset.num_classes)
    param_bytes = sum(v.numel() * v.element_size() for v in module.state_dict().values())
    federation = RayFederation(many, module, seed=5, workers=2, count_bytes=True)
    try:
        fs.simulate(fs.recipes.fedsampling(K=64, M=5, server_lr=0.5), federated_data=many, model=module, rounds=1, seed=5, engine=Engine(federation=federation))
    finally:
        federation.close()
    assert federation.traffic["sent"] < 2 * param_bytes + 20_000
    assert federation.traffic["received"] < 8 * clients + 2 * param_bytes + 20_000


def test_a_killed_actor_resumed_from_the_checkpoint_gives_the_uninterrupted_numbers(fed, module, ray_fed, tmp_path):
    strategy = RECIPES["isfedavg"]  # its clients hold state (Eq. 53 weights): resume must restore it on the actors
    uninterrupted = fs.simulate(strategy(), federated_data=fed, model=module, rounds=6, seed=5, engine=Engine(federation=ray_fed))
    checkpoint = tmp_path / "run.pt"
    doomed = RayFederation(fed, module, seed=5, workers=2)

    def kill_after_round_3(t):
        if t == 3:
            ray.kill(doomed.actors[1], no_restart=True)

    with pytest.raises(ShardLost, match="--resume"):
        fs.simulate(
            strategy(), federated_data=fed, model=module, rounds=6, seed=5, engine=Engine(federation=doomed), callbacks=[Checkpoint(checkpoint, every=1), Progress(kill_after_round_3)],
        )
    doomed.close()
    saved = fs.simulation.SimulationState.load(checkpoint)
    assert saved.round == 3 and saved.client_states  # the actors' client states are in the checkpoint
    resumed = _run_on_fresh_actors(strategy(), fed, module, rounds=6, callbacks=[Checkpoint(checkpoint, every=1, resume=True)])
    assert_same_run(resumed, uninterrupted, exact=True)


def _run_on_fresh_actors(strategy, fed, module, rounds, **kwargs):
    federation = RayFederation(fed, module, seed=5, workers=2)
    try:
        return fs.simulate(strategy, federated_data=fed, model=module, rounds=rounds, seed=5, **kwargs, engine=Engine(federation=federation))
    finally:
        federation.close()


def test_simulate_federation_ray_uses_the_running_ray(fed, local_ray):
    st = lambda: fs.recipes.fedavg(clients_per_round=6, epochs=1, batch_size=4, lr=0.1)  # noqa: E731
    got = fs.simulate(st(), federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=1, engine=Engine(federation=ray_federation(workers=2)))
    want = fs.simulate(st(), federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=1)
    assert_same_run(got, want)
    assert ray.is_initialized()  # the session this test found is left running


EXPERIMENT = """
name = "ray-cli"
rounds = 2
seeds = [0]

[dataset]
name = "digits"

[partition]
scheme = "lognormal"
mean = 3
sigma = 1.0

[model]
name = "logreg"

[[strategies]]
recipe = "fedavg"
clients_per_round = 10
"""


def test_cli_runs_on_ray_workers(local_ray, tmp_path, capsys):
    config = tmp_path / "ray-cli.toml"
    config.write_text(EXPERIMENT)
    out, local = tmp_path / "on-ray", tmp_path / "local"
    assert main(["run", str(config), "--workers", "2", "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    assert main(["run", str(config), "--out", str(local), "--quiet"]) == 0
    on_ray = json.loads((out / "results.json").read_text())["strategies"]
    alone = json.loads((local / "results.json").read_text())["strategies"]
    assert {b["engine"] for label in on_ray for b in on_ray[label]["backend"]} == {"ray (2 workers, address local)"}
    assert on_ray.keys() == alone.keys()
    for label in alone:
        for metric in ("accuracy", "loss"):
            assert on_ray[label]["final"][metric]["mean"] == pytest.approx(alone[label]["final"][metric]["mean"], rel=1e-5)


def test_cli_rejects_bad_worker_counts(capsys, tmp_path):
    assert main(["run", "quickstart", "--workers", "0", "--out", str(tmp_path / "x")]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_ray_answers_reply_lists_whose_fused_sum_equals_the_plain_one(fed, module, ray_fed):
    """Size reports come back as one array (NumberReplies); train replies backed by ShardedUpdates whose fused sum (one
    partial sum per actor) equals the plain sum of the same replies (each update fetched)."""
    from fedsample.federation.ray import ShardedUpdates
    from fedsample.messages import SizeQuery, TrainPayload
    from fedsample.models import initial_parameters
    from fedsample.rounds import FusedReplies, NumberReplies, Replies
    from fedsample.sampling.data import BernoulliSamples
    from fedsample.training.local import OneGradient

    ids = np.arange(fed.num_clients)
    sizes = ray_fed.run(ids, SizeQuery("exact"), 0)
    assert isinstance(sizes, NumberReplies) and sizes.values.tolist() == SIZES
    got = ray_fed.run(ids, TrainPayload(initial_parameters(module, 1), BernoulliSamples(0.5), OneGradient(20), 0), 0)
    assert isinstance(got, FusedReplies) and isinstance(got.backing, ShardedUpdates) and got.fused
    plain = Replies(list(got))
    received = got.received_positions()
    np.testing.assert_array_equal(received, plain.received_positions())
    weights = np.linspace(1.0, 2.0, len(received))
    fused, one_by_one = got.weighted_update_sum(received, weights), plain.weighted_update_sum(received, weights)
    for k in fused:
        torch.testing.assert_close(fused[k], one_by_one[k], rtol=1e-5, atol=1e-6)
    assert got.summed_loss() == plain.summed_loss()


def test_the_ray_factory_refuses_a_device_and_a_bad_worker_count_before_starting_ray(fed, module):
    with pytest.raises(ValueError, match="actors' CPUs.*got device='cuda'"):
        with ray_federation(workers=2).open(fed, module, 0, device="cuda"):
            pass
    with pytest.raises(ValueError, match="workers must be >= 1"):
        ray_federation(workers=0)


def _run_at(address: str, out: Path) -> subprocess.CompletedProcess:
    """``fedsample run quickstart --ray-address ADDRESS --workers 2 --out OUT`` as a user runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "fedsample.cli", "run", "quickstart", "--ray-address", address,
                           "--workers", "2", "--out", str(out)], capture_output=True, text=True, env=env, timeout=240)


def test_an_unreachable_ray_address_is_one_line_and_exit_2(tmp_path):
    """As a user runs it: ``fedsample run --ray-address HOST:PORT`` with nothing listening there stops at once
    (Ray alone retries such an address for minutes) with one line on stderr, and writes nothing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free again once closed: nothing listens there
    done = _run_at(f"127.0.0.1:{port}", tmp_path / "out")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--ray-address 127.0.0.1:{port}: cannot connect to Ray" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def test_a_listener_that_is_not_ray_is_one_line_and_exit_2_in_bounded_time(tmp_path):
    """A port that accepts connections but never answers (not Ray) is one line naming the address, exit 2,
    within the connect timeout and start-up (Ray alone retries it every 30 s, past 300 s)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel accepts connections; nobody reads or writes
        port = listener.getsockname()[1]
        started = time.monotonic()
        done = _run_at(f"127.0.0.1:{port}", tmp_path / "out")
        took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"--ray-address 127.0.0.1:{port}: cannot connect to Ray (127.0.0.1:{port} accepts connections but does not answer as Ray" in lines[0]
    assert took < CONNECT_TIMEOUT_S + 60, took
    assert not (tmp_path / "out").exists()


def test_the_ray_probe_accepts_a_grpc_server():
    """The probe passes any gRPC server (Ray's head and Ray Client are ones; their SETTINGS reply is the same), so it
    refuses only what is not Ray, and names the address it refused."""
    from concurrent.futures import ThreadPoolExecutor

    grpc = pytest.importorskip("grpc")
    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        check_reachable(f"127.0.0.1:{port}", timeout=5)
        check_reachable(f"ray://127.0.0.1:{port}", timeout=5)
    finally:
        server.stop(None)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        silent = listener.getsockname()[1]
        with pytest.raises(ConnectionError, match=f"127.0.0.1:{silent} accepts connections but does not answer as Ray"):
            check_reachable(f"127.0.0.1:{silent}", timeout=0.5)


def test_the_readme_workers_command_runs_in_a_fresh_clone(local_ray, tmp_path, monkeypatch):
    """README's ``fedsample run quickstart --workers 4 --out runs/qs-ray`` where ``runs/`` does not exist yet (a
    fresh clone): the parent is created as for the default folder, and the run writes its results there."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "quickstart", "--workers", "2", "--rounds", "1", "--seeds", "0", "--only", "FedSampling (eps=3)",
                 "--out", "runs/qs-ray", "--quiet"]) == 0
    assert (tmp_path / "runs" / "qs-ray" / "results.json").is_file()


def test_an_actor_dying_while_starting_is_the_documented_error(fed, local_ray):
    """A worker process that dies while the actors start (here: unpickling the model kills it) is ``ShardLost``
    with one line naming what happened, not Ray's ActorDiedError traceback; the other actors are stopped."""

    class Doomed(torch.nn.Linear):
        def __setstate__(self, state):
            os._exit(1)

    with pytest.raises(ShardLost, match="a Ray actor died while starting .*ActorDiedError") as raised:
        RayFederation(fed, Doomed(8, 3), seed=5, workers=2, start_timeout=120)
    assert raised.value.__cause__ is None and "\n" not in str(raised.value)


def test_a_ray_run_records_its_engine():
    assert ray_federation(workers=3, address="HEAD:6379").description == "ray (3 workers, address HEAD:6379)"
    assert ray_federation(workers=2).description == "ray (2 workers, address local)"


def test_the_docs_name_the_installed_ray():
    assert f"ray=={ray.__version__}" in (Path(__file__).resolve().parents[1] / "docs" / "ray.md").read_text()
