"""No phoning home. fedsample turns Flower's telemetry and update check off before flwr or flwr-datasets are
imported (``fedsample.runtime.telemetry.quiet_flower``) unless the user opted in; in the Flower tests every outbound
attempt is refused and fails the test (tests/conftest.py's guard, tests/outbound_guard/outbound.py), and the
processes the deployment tests start carry the same guard (``sitecustomize``) and the same environment.
These tests show that each of those can fail: the guard catches a deliberate outside connect and Flower's own
telemetry call when it is on, in this process and in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from outbound_guard import outbound  # noqa: E402

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
OUTSIDE = ("203.0.113.7", 443)  # TEST-NET-3: an address of another machine


def caught(action) -> list[str]:
    """Run ``action`` under the guard (active in this module) and return what it refused (then forget it, so
    that the fixture does not fail this test for the deliberate attempts)."""
    before = len(outbound.attempts)
    try:
        action()
    except OSError:
        pass
    got = outbound.attempts[before:]
    del outbound.attempts[before:]
    return got


def test_the_guard_refuses_an_outside_connect_and_lookup_and_allows_loopback():
    assert caught(lambda: socket.create_connection(OUTSIDE, timeout=1))
    assert caught(lambda: socket.getaddrinfo("telemetry.flower.ai", 443))
    assert caught(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", OUTSIDE))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert not caught(lambda: socket.create_connection(server.getsockname(), timeout=1).close())


def test_flower_telemetry_is_off_and_would_be_caught_if_it_were_on(monkeypatch, tmp_path):
    """fedsample.flower leaves Flower's telemetry switch off; with the switch on, Flower's event() posts to
    telemetry.flower.ai and the guard refuses it."""
    import fedsample.flower  # noqa: F401
    from flwr.supercore import telemetry

    monkeypatch.setenv("FLWR_HOME", str(tmp_path))  # Flower writes its source id there when telemetry is on
    assert telemetry.FLWR_TELEMETRY_ENABLED == "0" and os.environ["FLWR_DISABLE_UPDATE_CHECK"] == "1"
    assert not caught(lambda: _wait(telemetry.event(telemetry.EventType.PING)))
    monkeypatch.setattr(telemetry, "FLWR_TELEMETRY_ENABLED", "1")
    assert any("telemetry.flower.ai" in line for line in caught(lambda: _wait(telemetry.event(telemetry.EventType.PING))))


def _wait(future) -> None:
    if future is not None:
        future.result(timeout=120)


def run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def fresh_env(**extra: str) -> dict:
    """This environment without the tests' Flower settings (a user's shell), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("FLWR_TELEMETRY_ENABLED", "FLWR_DISABLE_UPDATE_CHECK", "RAY_USAGE_STATS_ENABLED")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    return {**env, **extra}


READ_SWITCHES = """
import os
import flwr.supercore.telemetry as t   # imported first: its switch is read before fedsample runs
import fedsample.flower
print(t.FLWR_TELEMETRY_ENABLED, *(os.environ[k] for k in ("FLWR_TELEMETRY_ENABLED", "FLWR_DISABLE_UPDATE_CHECK", "RAY_USAGE_STATS_ENABLED")))
"""


def test_fedsample_switches_flower_telemetry_off_unless_the_user_opted_in():
    """...and Ray's usage statistics (Flower's simulation runtime runs on Ray); a user's own settings stay."""
    assert run_python(READ_SWITCHES, fresh_env()).stdout.split() == ["0", "0", "1", "0"]
    opted_in = fresh_env(FLWR_TELEMETRY_ENABLED="1", RAY_USAGE_STATS_ENABLED="1")
    assert run_python(READ_SWITCHES, opted_in).stdout.split() == ["1", "1", "1", "1"]


def test_the_subprocess_guard_records_an_outside_connect(tmp_path):
    """The guard the deployment tests put in every Flower process (sitecustomize on PYTHONPATH) records an
    outside connect to its log file, which those tests check is empty."""
    log = tmp_path / "outbound.log"
    env = fresh_env(FEDSAMPLE_OUTBOUND_LOG=str(log))
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS / "outbound_guard"), env["PYTHONPATH"]])
    code = f"import socket\ntry:\n    socket.create_connection({OUTSIDE!r}, timeout=1)\nexcept OSError as e:\n    print(type(e).__name__)"
    assert run_python(code, env).stdout.strip() == "OutboundBlocked"
    assert "203.0.113.7" in log.read_text()
