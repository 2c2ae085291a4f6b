"""A real Flower deployment on loopback: ``flower-superlink`` with TLS (certificates made here) and SuperNode
authentication, 3 honest ``flower-supernode`` processes and one whose ClientApp returns NaN updates; the
example app submitted with ``flwr run``. One SuperNode is killed after its first training reply: the run
finishes, the round log names the missing client and the rejected NaN client, and nothing non-finite is
averaged in; no process of the deployment attempts an outbound connection (the guard in each, via
sitecustomize). Every process started is stopped by pid, also when the test fails."""

import json
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")
pytest.importorskip("cryptography", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

import torch  # noqa: E402

from fedsample.flower.config import AppConfig  # noqa: E402
from flower_deploy import CONNECTION, EXAMPLE, Deployment, flower_descendants, flower_env, outbound_attempts  # noqa: E402
from flower_reference import flower_output, simulate_like  # noqa: E402

RUN_CONFIG = {"dataset": "digits", "model": "logreg", "model-args": "{}", "partition-args": '{"sigma": 1.0}',
              "recipe": "fedsampling", "recipe-args": '{"K": 64, "epsilon": 8.0, "M": 800, "server_lr": 0.5}',
              "num-clients": 4, "num-server-rounds": 2, "seed": 1, "round-timeout": 150.0, "eval-every": 1}
VICTIM, FAULTY = 2, 3


def toml_value(value):
    return f"'{value}'" if isinstance(value, str) else repr(value)


@pytest.fixture
def deployment():
    folder = Path(tempfile.mkdtemp(prefix="fedsample-flower-"))
    d = Deployment(folder, flower_env(folder))
    try:
        d.start_superlink()
        for k in range(3):
            d.start_supernode(k)
        d.start_supernode(FAULTY, "fault='nan'")
        yield d
    finally:
        started = {p.pid for p in d.processes.values()}
        d.stop()
        time.sleep(0.5)
        assert not flower_descendants(started), "processes of the deployment survived stop()"
        shutil.rmtree(folder, ignore_errors=True)


def kill_after_first_training_reply(d: Deployment, name: str, stop: threading.Event) -> None:
    """Kill SuperNode ``name`` once it has sent its first training reply: FedSampling trains through SecAgg+
    (a secure-sum strategy), whose four stages (setup, share-keys, collect-masked-vectors, unmask) are each a
    ``train`` message; after the fourth, round 1 is complete on this node."""
    sent = re.compile(r"Sending: train message.*?Sent successfully", re.S)
    while not stop.is_set():
        if len(sent.findall(d.log(name))) >= 4:
            d.kill(name)
            return
        time.sleep(0.2)


def test_loopback_deployment_survives_a_killed_node_and_rejects_nan_updates(deployment):
    out = deployment.folder / "out"
    config = " ".join(f"{k}={toml_value(v)}" for k, v in {**RUN_CONFIG, "out": str(out)}.items())
    stop = threading.Event()
    killer = threading.Thread(target=kill_after_first_training_reply, args=(deployment, f"supernode-{VICTIM}", stop))
    killer.start()
    try:
        run = deployment.flwr("run", str(EXAMPLE), CONNECTION, "--run-config", config, "--stream", timeout=540)
    finally:
        stop.set()
        killer.join()
    assert (out / "history.json").exists(), f"no history:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    history, params = flower_output(out)
    print(json.dumps(history, indent=1, default=str))  # shown when the test fails
    assert deployment.processes[f"supernode-{VICTIM}"].poll() is not None  # it was killed mid-run
    assert [r["round"] for r in history] == [1, 2]

    first, second = history
    failed = lambda record: {(f["client"], f["phase"]) for f in record["failed"]}  # noqa: E731
    # round 1: every client answered; the NaN client's update is rejected and left out
    assert failed(first) == {(FAULTY, "train")}
    assert "non-finite" in first["failed"][0]["reason"]
    assert first["train_clients"] == [0, 1, 2, 3] and first["updates"] == 3
    # the library default's drawn count, noised by the 3 summed clients' sealed shares (sigma_S^2 * 3/4)
    assert first["secure_aggregation"]["count_tolerance"] == pytest.approx(3 * 2 * 2**16 / 2**22)  # set where noised
    # with every size report received, the size estimate and ratio are the in-process ones
    reference, _ = simulate_like(AppConfig.from_run_config(RUN_CONFIG))
    assert first["size_estimate"] == pytest.approx(reference.history[0]["size_estimate"], rel=1e-9)
    assert first["ratio"] == pytest.approx(reference.history[0]["ratio"], rel=1e-9)
    # round 2: the killed node is named (no size report, no update), the NaN client rejected again
    assert (VICTIM, "report_size") in failed(second) and (FAULTY, "train") in failed(second)
    assert second["updates"] == 2
    assert all(bool(torch.isfinite(v).all()) for v in params.values())
    assert all(r["loss"] == r["loss"] for r in history)  # evaluated losses are numbers, not NaN
    assert outbound_attempts(deployment.folder) == []  # no process of the deployment tried to reach another machine
