"""The documented ``flwr run examples/flower local-sim ...`` as a user runs it: the connection in
``$FLWR_HOME/config.toml`` and the command are read from docs/flower.md and run as written, from the
repository's root, with the real ``flwr`` CLI. ``flwr run`` finds its local simulation SuperLink already up
(started here as ``flwr run`` would start it, with Flower's runtime dependency installation on, on free
loopback ports, so it is stopped by pid afterwards) and submits the example app. What is checked is the run's
own status as the SuperLink records it ("finished:completed"; ``flwr run`` itself exits 0 even when the run
fails, e.g. the old "fedsample[flower]" dependency that cannot be resolved offline: exit code 608), the files
the ServerApp wrote to the example's default ``out`` (``~/fedsample-runs/flower/{run_id}``, with ``HOME`` a
temporary folder here), and that no process of the run attempted an outbound connection (the guard loaded in
every Python process by ``sitecustomize``; pip installing a dependency would be one) other than Ray's dashboard's
cloud-metadata probe, which no setting turns off (outbound_guard.outbound.RAY_CLOUD_PROBE)."""

import json
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.server import secure_aggregation  # noqa: E402
from flower_deploy import EXAMPLE, ROOT, Deployment, environment_of, flower_descendants, flower_env, free_port  # noqa: E402
from flower_deploy import outbound_attempts, run_id_of, run_status, unexplained_outbound  # noqa: E402
from flower_reference import same_rounds, simulate_like, steered_rtol  # noqa: E402

DOCS = ROOT / "docs" / "flower.md"


def example_config() -> dict:
    """The example's ``[tool.flwr.app.config]`` without ``out``."""
    config = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    return {k: v for k, v in config.items() if k != "out"}


def documented_connection() -> str:
    """The ``~/.flwr/config.toml`` block of docs/flower.md."""
    found = re.search(r"```toml\n# ~/\.flwr/config\.toml\n(.*?)```", DOCS.read_text(), re.S)
    assert found, "docs/flower.md lost its local-sim connection block"
    return found.group(1)


#: The switches that keep Flower's and Ray's programs from looking outside (tests/conftest.py sets the same).
SWITCHES = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def documented_export() -> str:
    """The ``export`` line of docs/flower.md's simulation commands, as written."""
    found = re.search(r"^(export FLWR_TELEMETRY_ENABLED=.*)\nflwr run examples/flower local-sim", DOCS.read_text(), re.M)
    assert found, "docs/flower.md: the simulation commands start with an export of the switches"
    return found.group(1)


def test_the_documented_export_sets_every_switch():
    assigned = dict(re.findall(r"(\w+)=(\S+)", documented_export().split("#")[0]))
    assert assigned == SWITCHES


def documented_commands() -> list[str]:
    """The ``flwr run examples/flower local-sim`` lines of docs/flower.md, as written."""
    return re.findall(r"^(flwr run examples/flower local-sim.*)$", DOCS.read_text(), re.M)


@pytest.fixture
def local_superlink():
    folder = Path(tempfile.mkdtemp(prefix="fedsample-flwr-run-"))
    http, control = free_port(), free_port()
    env = flower_env(folder, HOME=str(folder), FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(http),
                     FLWR_LOCAL_CONTROL_API_PORT=str(control))
    d = Deployment(folder, env)
    home = Path(env["FLWR_HOME"])
    home.mkdir(parents=True)
    (home / "config.toml").write_text(documented_connection())
    try:
        d.start_simulation_superlink(http, control)
        yield d
    finally:
        started = {p.pid for p in d.processes.values()}
        d.stop()
        time.sleep(0.5)
        assert not flower_descendants(started), "processes of the run survived stop()"
        shutil.rmtree(folder, ignore_errors=True)


def test_the_documented_flwr_run_completes_offline(local_superlink):
    d = local_superlink
    commands = documented_commands()
    assert len(commands) == 2, commands
    command = commands[-1]  # the short one: digits, a few rounds
    as_a_user = {k: v for k, v in d.env.items() if k not in SWITCHES}  # a fresh shell: only what the docs export
    run = subprocess.run(["bash", "-c", f"{documented_export()}\n{command}"], cwd=ROOT, env=as_a_user, capture_output=True,
                         text=True, timeout=560)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    run_id = run_id_of(output)
    status, details = run_status(lambda *a: d.flwr(*a), run_id, "local-sim")
    assert status == "finished:completed", f"{status}: {details}\n{d.log('superlink')[-3000:]}"
    out = Path(d.env["HOME"]) / "fedsample-runs" / "flower" / str(run_id)
    history = json.loads((out / "history.json").read_text())["history"]
    rounds = int(re.search(r"num-server-rounds=(\d+)", command).group(1))
    assert [r["round"] for r in history] == list(range(1, rounds + 1))
    assert all(r["failed"] == [] for r in history) and (out / "params.pt").exists()
    # the example's configuration (its pyproject, overridden as the command says) gives fs.simulate's numbers:
    # the same size estimates and rates, training losses within SecAgg+'s quantization
    overrides = re.findall(r"([\w-]+)=(?:'([^']*)'|(\S+))", command.split("--run-config", 1)[1].strip(' "'))
    settings = {**example_config(), **{key: quoted or int(bare) for key, quoted, bare in overrides}}
    config = AppConfig.from_run_config(settings)
    reference, trained = simulate_like(config)
    secure_sum = secure_aggregation(config)  # the example's SecAgg+ settings
    same_rounds(history, reference.history, trained, ("size_estimate", "updates"))
    same_rounds(history, reference.history, trained, ("ratio",), rtol=1e-5 + steered_rtol(history, secure_sum.count_tolerance(10)))
    same_rounds(history, reference.history, trained, ("train_loss",), atol=secure_sum.tolerance(10) * 16)
    assert history[-1]["accuracy"] == pytest.approx(reference.history[-1]["accuracy"], abs=0.02)
    assert environment_of(d.processes["superlink"].pid)["FLWR_TELEMETRY_ENABLED"] == "0"
    assert unexplained_outbound(d.folder) == [], "an outbound attempt other than Ray's cloud-metadata probe"
    assert all("dashboard.py" in line for line in outbound_attempts(d.folder))
