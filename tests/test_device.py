"""The device setting on a machine without a GPU: names and errors, the torch form of the counter-based
streams (bit for bit the numpy one), the vectorized engine's device-side draws, checkpoints loaded with a
``map_location``, and the ``device`` plumbing of experiment files and the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsample import rng as frng
from fedsample.runtime.device import free_memory, resolve_device, to_device
from fedsample.experiments.config import ConfigError, parse_config
from fedsample.models import MLP
from fedsample.simulation import SimulationState, simulate
from device_runs import SMALL, recorded_run
from helpers import blobs, federate
from fedsample.callbacks import Checkpoint
from fedsample.simulation import Engine


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# --- names and errors --------------------------------------------------------------------------------


def test_cpu_and_auto_without_gpu(no_cuda):
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device(None) == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:1"])
def test_cuda_without_gpu_is_one_clear_line(no_cuda, name):
    with pytest.raises(ValueError, match="no CUDA GPU is available") as error:
        resolve_device(name)
    assert "\n" not in str(error.value)


def test_auto_takes_cuda_when_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda", 0)


def test_missing_cuda_index_is_rejected(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    with pytest.raises(ValueError, match="1 CUDA device"):
        resolve_device("cuda:1")


@pytest.mark.parametrize("name", ["tpu", "gpu", "", "cuda:x", "mps"])
def test_unknown_device_names(name):
    with pytest.raises(ValueError, match="device must be one of"):
        resolve_device(name)


def test_free_memory_is_a_gpu_notion():
    assert free_memory(torch.device("cpu")) is None


def test_to_device_moves_nested_tensors_only():
    state = {"m": {"w": torch.ones(2)}, "steps": 3, "v": [torch.zeros(1)]}
    moved = to_device(state, torch.device("cpu"))
    assert moved["steps"] == 3 and torch.equal(moved["m"]["w"], torch.ones(2)) and moved["v"][0].device.type == "cpu"


# --- the counter-based streams as int64 torch operations ---------------------------------------------------

U64 = st.integers(min_value=0, max_value=2**64 - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(U64, min_size=1, max_size=50))
def test_mix64_torch_equals_numpy_bit_for_bit(values):
    z = np.array(values, dtype=np.uint64)
    got = frng.mix64_torch(torch.from_numpy(z.view(np.int64).copy())).numpy().view(np.uint64)
    np.testing.assert_array_equal(got, frng.mix64(z))


@settings(max_examples=50, deadline=None)
@given(U64, st.lists(st.integers(0, 2**40), min_size=1, max_size=20), st.integers(0, 2**31))
def test_stream_uniforms_torch_equals_numpy_bit_for_bit(key, clients, start):
    clients = np.array(clients, dtype=np.int64)
    streams = frng.client_streams(key, clients)
    streams_t = frng.client_streams_torch(key, torch.from_numpy(clients))
    np.testing.assert_array_equal(streams_t.numpy().view(np.uint64), streams)
    positions = np.arange(start, start + 7, dtype=np.uint64)
    expected = frng.stream_uniforms(streams[:, None], positions[None, :])
    got = frng.stream_uniforms_torch(streams_t[:, None], torch.from_numpy(positions.astype(np.int64))[None, :]).numpy()
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)  # exact: the same 53 bits


def test_cohort_random_on_a_device_gives_the_numpy_draws():
    clients = np.array([0, 1, 2, 17, 999_999, 2**33])
    counts = np.array([0, 5, 1, 40, 3, 2])
    host, device = frng.CohortRandom(7, 4, clients, "train"), frng.CohortRandom(7, 4, clients, "train", device="cpu")
    np.testing.assert_array_equal(device.columns(3, start=2), host.columns(3, start=2))
    np.testing.assert_array_equal(device.ragged(counts), host.ragged(counts))
    np.testing.assert_array_equal(device.ragged(counts, np.arange(6)), host.ragged(counts, np.arange(6)))
    first = frng.ClientRandom(7, 4, 17, "train")  # and both equal what client 17 reads alone
    np.testing.assert_array_equal(device.ragged(counts)[6:46], first.uniforms(40))
    for threshold in (0.0, 0.3, 1.0):
        expected = np.flatnonzero(host.ragged(counts) < threshold)
        np.testing.assert_array_equal(host.ragged_below(counts, threshold), expected)
        np.testing.assert_array_equal(device.ragged_below(counts, threshold), expected)


def _device_side_draws(federation) -> None:
    federation._draw_device = torch.device("cpu")  # the CUDA path of the engine, run on the CPU


@pytest.mark.parametrize("name", ["fedsampling", "fedstas", "fedsampling_naive", "fedavg"])
def test_engine_draws_on_the_device_path_are_the_host_draws(name):
    """The engine's device-side cohort draws (size reports, Bernoulli samples) change nothing, bit for bit."""
    host, host_calls = recorded_run(name, "vectorized", "cpu")
    dev, dev_calls = recorded_run(name, "vectorized", "cpu", setup=_device_side_draws)
    assert dev_calls.calls == host_calls.calls and dev_calls.size_reports == host_calls.size_reports
    assert dev.history == host.history
    for k in host.params:
        assert torch.equal(dev.params[k], host.params[k])


# --- simulate: the device setting and checkpoints ---------------------------------------------------------


def test_auto_without_gpu_gives_the_cpu_numbers(no_cuda):
    fed = federate(blobs(n=200), [20] * 10)
    make = lambda device: simulate(SMALL["fedadam"](), fed, MLP(hidden=8), rounds=2, seed=1, engine=Engine(device=device))  # noqa: E731
    cpu, auto = make("cpu"), make("auto")
    assert cpu.history == auto.history
    assert all(torch.equal(cpu.params[k], auto.params[k]) for k in cpu.params)
    assert all(v.device.type == "cpu" for v in auto.params.values())
    with pytest.raises(ValueError, match="no CUDA GPU"):
        make("cuda")


def test_checkpoint_loads_onto_the_asked_device_and_resumes(tmp_path):
    """Saved state (parameters, server optimizer moments) is read with a map_location and resumes exactly."""
    fed = federate(blobs(n=200), [20] * 10)
    path = tmp_path / "run.pt"
    whole = simulate(SMALL["fedadam"](), fed, MLP(hidden=8), rounds=4, seed=3)
    simulate(SMALL["fedadam"](), fed, MLP(hidden=8), rounds=2, seed=3, callbacks=[Checkpoint(path)])
    saved = SimulationState.load(path, device="cpu")
    tensors = [*saved.params.values(), *saved.state["server"]["m"].values(), *saved.state["server"]["v"].values()]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    resumed = simulate(SMALL["fedadam"](), fed, MLP(hidden=8), rounds=4, seed=3, engine=Engine(device="cpu"), callbacks=[Checkpoint(path, resume=True)])
    assert resumed.history == whole.history
    for k in whole.params:
        assert torch.equal(resumed.params[k], whole.params[k])


def test_load_asks_torch_for_the_device(tmp_path, monkeypatch):
    """Loading passes the device as torch.load's map_location (which rebuilds CUDA-written tensors on the CPU;
    the real GPU-to-CPU round trip is in test_cuda.py)."""
    path = tmp_path / "state.pt"
    SimulationState(key="k", seed=0, round=1, params={"w": torch.ones(3)}, state={"server": {}}).save(path)
    calls, original = [], torch.load

    def recording_load(*args, **kwargs):
        calls.append(kwargs.get("map_location"))
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    loaded = SimulationState.load(path, device="cpu")
    assert calls == [torch.device("cpu")] and torch.equal(loaded.params["w"], torch.ones(3))


# --- experiment files and the CLI ------------------------------------------------------------------------

BASE = {"name": "x", "dataset": {"name": "digits"}, "partition": {"scheme": "iid", "clients": 4}, "model": {"name": "mlp"},
        "rounds": 1, "strategies": [{"recipe": "fedavg"}]}


def test_experiment_device_field():
    assert parse_config(BASE).device == "cpu"
    assert parse_config({**BASE, "device": "CUDA:1"}).device == "cuda:1"
    assert parse_config({**BASE, "device": "auto"}).device == "auto"
    with pytest.raises(ConfigError, match="device"):
        parse_config({**BASE, "device": "tpu"})


def test_cli_device_cuda_without_gpu_exits_2_with_one_line(no_cuda, tmp_path, capsys):
    from fedsample.cli import main

    assert main(["run", "quickstart", "--device", "cuda", "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no CUDA GPU" in err
    assert not (tmp_path / "out").exists()


def test_experiment_file_asking_for_cuda_without_gpu_exits_2(no_cuda, tmp_path, capsys):
    from importlib import resources

    from fedsample.cli import main

    preset = resources.files("fedsample.experiments").joinpath("presets/quickstart.toml").read_text()
    path = tmp_path / "gpu.toml"
    path.write_text('device = "cuda"\n' + preset)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert main(["run", str(path), "--device", "cuda:x", "--out", str(tmp_path / "out"), "--quiet"]) == 2


def test_cli_auto_without_gpu_runs_on_cpu_and_records_it(no_cuda, tmp_path):
    import json

    from fedsample.cli import main

    out = tmp_path / "out"
    assert main(["run", "quickstart", "--device", "auto", "--rounds", "1", "--seeds", "0", "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["device"] == "cpu"


def test_use_threads_sets_torch_and_one_blas_thread():
    """use_threads(n): torch on n threads (at least 1), numpy's BLAS on one (its pool would spin beside torch's)."""
    import ast
    import subprocess
    import sys

    code = (
        "import torch; from threadpoolctl import threadpool_info; import numpy as np; np.ones((64, 64)) @ np.ones((64, 64)); "
        "from fedsample.runtime.device import use_threads; use_threads(0); a = torch.get_num_threads(); use_threads(2); "
        "blas = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']; print(a, torch.get_num_threads(), blas)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
    assert out[0] == "1" and out[1] == "2"
    assert out[2].strip() != "[]" and set(ast.literal_eval(out[2].strip())) == {1}


def test_simulate_runs_numpy_blas_on_one_thread_and_restores_it_after():
    """simulate limits numpy's BLAS to one thread for the run it makes (beside torch's threads), and gives the
    caller's limit back when it returns: a notebook that called simulate keeps its BLAS threads."""
    import ast
    import subprocess
    import sys

    code = (
        "import numpy as np; from threadpoolctl import threadpool_info, threadpool_limits; np.ones((64, 64)) @ np.ones((64, 64)); "
        "threadpool_limits(limits=2, user_api='blas'); import fedsample as fs, fedsample.simulation as sim; "
        "blas = lambda: sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}); seen = []; "
        "inner = sim._run_rounds; sim._run_rounds = lambda *a, **k: (seen.append(blas()), inner(*a, **k))[1]; "
        "b = blas(); ds = fs.data.load_dataset('digits'); fed = fs.data.partition(ds, fs.data.LogNormalSizes(mean=3, sigma=1), seed=0); "
        "fs.simulate(fs.recipes.fedavg(clients_per_round=4, epochs=1, batch_size=8, lr=0.1), federated_data=fed, "
        "model=fs.models.LogisticRegression(), rounds=1, seed=0); print([b, seen[0], blas()])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    before, during, after = ast.literal_eval(out.splitlines()[-1])
    # a BLAS that importing fedsample loads (on some machines a second one) keeps its own limit: it is restored too
    assert 2 in before and during == [1] and after == before, out
