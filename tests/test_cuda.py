"""CPU and GPU give the same run: the same cohorts, size reports and data draws (bit for bit), parameters
within float tolerance, for every recipe on both backends; checkpoints move between the devices.

Needs a CUDA GPU: skipped (with the reason shown) where there is none, e.g. on CI.
Run on a GPU machine: ``PYTHONPATH=src python -m pytest tests/test_cuda.py`` (the project's options already add ``-q -rs``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsample import rng as frng
from fedsample.models import MLP
from fedsample.simulation import SimulationState, make_federation, simulate
from device_runs import SMALL, recorded_run
from helpers import blobs, federate
from fedsample.callbacks import Checkpoint
from fedsample.simulation import Engine

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

EXACT = ("round", "cohort", "updates", "size_estimate", "ratio", "strata_nonempty", "tau_eff", "beta")


def assert_same_run(cpu, gpu, tol: float = 1e-4) -> None:
    """Counts and estimates (functions of the draws) equal; losses and parameters within ``tol``."""
    assert len(cpu.history) == len(gpu.history)
    for a, b in zip(cpu.history, gpu.history):
        assert a.keys() == b.keys()
        for key in a:
            if key in EXACT:
                assert a[key] == b[key], key
            else:
                assert b[key] == pytest.approx(a[key], rel=tol, abs=tol), key
    for k in cpu.params:
        assert gpu.params[k].device.type == "cuda"
        torch.testing.assert_close(gpu.params[k].cpu(), cpu.params[k], rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", ["vectorized", "loop"])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_recipe_same_draws_and_parameters_on_cpu_and_gpu(name, backend):
    cpu, cpu_calls = recorded_run(name, backend, "cpu")
    gpu, gpu_calls = recorded_run(name, backend, "cuda")
    assert gpu_calls.calls == cpu_calls.calls  # the same cohorts, call by call
    assert gpu_calls.size_reports == cpu_calls.size_reports  # the same randomized size reports
    assert_same_run(cpu, gpu)


@pytest.mark.parametrize("backend", ["vectorized", "loop"])
@pytest.mark.parametrize("name", ["fedsampling", "fedavg", "fedadam"])
def test_cnn_same_run_on_cpu_and_gpu_in_strict_float32(name, backend):
    """Convolutions too, with TF32 switched off (PyTorch's default lets cuDNN use TF32 on Ampere and later)."""
    cpu, cpu_calls = recorded_run(name, backend, "cpu", images=True)
    matmul = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            gpu, gpu_calls = recorded_run(name, backend, "cuda", images=True)
    finally:
        torch.set_float32_matmul_precision(matmul)
    assert gpu_calls.calls == cpu_calls.calls and gpu_calls.size_reports == cpu_calls.size_reports
    assert_same_run(cpu, gpu)


def test_cohort_streams_on_the_gpu_are_the_numpy_streams():
    clients = np.arange(0, 3_000_000, 7, dtype=np.int64)
    counts = (clients % 5).astype(np.int64)
    host, gpu = frng.CohortRandom(11, 2, clients, "train"), frng.CohortRandom(11, 2, clients, "train", device="cuda")
    assert gpu.streams.device.type == "cuda"
    np.testing.assert_array_equal(gpu.columns(2), host.columns(2))
    np.testing.assert_array_equal(gpu.ragged(counts, 1), host.ragged(counts, 1))
    np.testing.assert_array_equal(gpu.ragged_below(counts, 0.01), host.ragged_below(counts, 0.01))


def test_bernoulli_cohort_draw_stays_on_the_gpu_with_the_numpy_numbers():
    """FedSampling's per-round draw as tensors on the GPU (``BernoulliSamples.draw_cohort_on_device``): the same
    (member, position) as the numpy pass on the host, bit for bit, 30,000 clients of log-normal sizes."""
    from fedsample.sampling.data import BernoulliSamples

    sizes = np.floor(np.random.default_rng(3).lognormal(0.0, 2.0, 30_000)).astype(np.int64)
    ids = np.arange(len(sizes), dtype=np.int64)
    plan = BernoulliSamples(0.034)
    host = plan.draw_cohort(sizes, frng.CohortRandom(7, 2, ids, "train"))
    member, position = plan.draw_cohort_on_device(sizes, frng.CohortRandom(7, 2, ids, "train", device="cuda"))
    assert member.device.type == position.device.type == "cuda"
    np.testing.assert_array_equal(member.cpu().numpy(), host[0])
    np.testing.assert_array_equal(position.cpu().numpy(), host[1])


def test_the_engine_draws_a_cohort_on_the_gpu_with_the_host_numbers():
    """The vectorized engine on CUDA draws FedSampling's cohort there (``VectorizedSimulator._cohort_draw``: the
    sizes copied to the device once, only the kept rows brought back): the same (member, position) as the CPU
    engine's draw over its kept layout, in three rounds."""
    from fedsample.federation.vectorized import VectorizedSimulator
    from fedsample.sampling.data import BernoulliSamples

    fed = federate(blobs(n=600), [int(n) for n in np.random.default_rng(5).integers(1, 40, 30)])
    module = MLP(hidden=8).build(fed.dataset.input_shape, fed.dataset.num_classes)
    cpu, gpu = VectorizedSimulator(fed, module, seed=4), VectorizedSimulator(fed, module.cuda(), seed=4, device="cuda")
    ids = np.arange(fed.num_clients)
    for round in range(3):
        host, _ = cpu.draw_cohort(ids, BernoulliSamples(0.3), round)
        device, _ = gpu.draw_cohort(ids, BernoulliSamples(0.3), round)
        np.testing.assert_array_equal(device.member, host.member)
        np.testing.assert_array_equal(device.position, host.position)
    assert gpu._blocks._on_device[1].device.type == "cuda" and cpu._blocks._on_device is None


def test_data_and_model_live_on_the_gpu():
    fed = federate(blobs(n=200), [20] * 10)
    module = MLP(hidden=8).build(fed.dataset.input_shape, fed.dataset.num_classes).cuda()
    federation = make_federation("vectorized", fed, module, seed=0, device="cuda")
    assert federation.x.device.type == "cuda" and federation.y.device.type == "cuda"
    assert 0 < federation.chunk_budget() <= federation.memory_budget
    result = simulate(SMALL["fedadam"](), fed, module, rounds=1, seed=0, engine=Engine(federation=federation, device="cuda"))
    assert all(v.device.type == "cuda" for v in result.params.values())


@pytest.mark.parametrize("first, second", [("cuda", "cpu"), ("cpu", "cuda")])
def test_checkpoint_moves_between_devices(tmp_path, first, second):
    fed = federate(blobs(n=200), [20] * 10)
    path = tmp_path / "run.pt"
    whole = simulate(SMALL["fedadam"](), fed, MLP(hidden=8), rounds=4, seed=3, engine=Engine(device="cpu"))
    simulate(SMALL["fedadam"](), fed, MLP(hidden=8), rounds=2, seed=3, engine=Engine(device=first), callbacks=[Checkpoint(path)])
    saved = SimulationState.load(path, device=second)
    assert all(t.device.type == second for t in saved.params.values())
    resumed = simulate(SMALL["fedadam"](), fed, MLP(hidden=8), rounds=4, seed=3, engine=Engine(device=second), callbacks=[Checkpoint(path, resume=True)])
    assert [h["cohort"] for h in resumed.history] == [h["cohort"] for h in whole.history]
    for k in whole.params:
        torch.testing.assert_close(resumed.params[k].cpu(), whole.params[k], rtol=1e-4, atol=1e-4)


def test_a_missing_gpu_index_is_one_clear_error():
    with pytest.raises(ValueError, match="CUDA device"):
        simulate(SMALL["fedavg"](), federate(blobs(n=60), [6] * 10), MLP(hidden=4), rounds=1, engine=Engine(device=f"cuda:{torch.cuda.device_count()}"))


def test_cli_runs_on_the_gpu(tmp_path):
    from fedsample.cli import main

    assert main(["run", "quickstart", "--device", "cuda", "--rounds", "1", "--seeds", "0", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert (tmp_path / "o" / "results.json").exists()


@pytest.mark.parametrize("backend", ["vectorized", "loop"])
@pytest.mark.parametrize("name", ["textcnn", "transformer", "resnet", "vgg9"])
def test_paper_models_same_run_on_cpu_and_gpu(name, backend):
    """The papers' models (tiny configurations, dropout included) train to the same parameters on both devices,
    TF32 off; token-id inputs stay int64 on the GPU."""
    from test_paper_models import SMALL as PAPER_MODELS

    spec, data = PAPER_MODELS[name]
    fed = federate(data(n=120, test=20), [12] * 10)
    runs = {}
    matmul = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            for device in ("cpu", "cuda"):
                runs[device] = simulate(SMALL["fedavg"](), fed, spec, rounds=2, seed=1, eval_every=2, engine=Engine(backend=backend, device=device))
    finally:
        torch.set_float32_matmul_precision(matmul)
    assert_same_run(runs["cpu"], runs["cuda"])


def test_params_finite_waits_for_the_gpu_once():
    """params_finite reads one flag per device: a model of six tensors on the GPU costs the synchronizing reads of
    a model of one (it cost six before), and the answer is that of each tensor alone."""
    import warnings

    from fedsample import validate

    def reads(params: dict) -> list[str]:
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                assert validate.params_finite(params)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return [str(w.message) for w in caught if str(w.message).startswith("called a synchronizing")]

    params = {f"p{i}": torch.randn(50, 3, device="cuda") for i in range(6)}
    one, six = reads({"p0": params["p0"]}), reads(params)
    assert one and len(six) == len(one), (one, six)
    params["p4"][7, 1] = float("inf")
    assert not validate.params_finite(params)
