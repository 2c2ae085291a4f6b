"""Ray processes for the tests: an environment of their own (auth token, temp dir, no usage stats) and a
real two-node cluster on loopback addresses, whose every process is stopped at the end, also on failure."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

RAY = str(Path(sys.executable).with_name("ray"))
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"  # loopback; Ray rewrites 127.0.0.1 to the host's address
NODE_FLAGS = ["--num-cpus=1", "--object-store-memory=100000000", "--disable-usage-stats", "--block"]
#: Where a ``ray start`` head node's dashboard sends its "usage stats disabled" notice: the discard port on loopback
#: (nothing listens; the POST fails at once and Ray logs it at debug level).
RAY_REPORT_URL_AT_HOME = "http://127.0.0.1:9/"


# Set before Ray is imported (Ray reads its configuration once): token authentication with this process's own
# token for every Ray process the tests start, and no usage statistics. A cluster started by ``ray start`` (not by
# ray.init) whose usage statistics are off still POSTs a "usage stats disabled" notice to usage-stats.ray.io from
# its dashboard (ray/dashboard/modules/usage_stats/usage_stats_head.py, _report_disabled_usage_sync); the URL comes
# from RAY_USAGE_STATS_REPORT_URL, pointed here at a closed loopback port so that the notice never leaves the machine.
os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0",
                  RAY_USAGE_STATS_REPORT_URL=RAY_REPORT_URL_AT_HOME)


@contextmanager
def ray_environment() -> Iterator[str]:
    """A short temp dir for Ray (its socket paths must stay under 107 characters), removed afterwards."""
    temp = tempfile.mkdtemp(prefix="fsray-")
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@contextmanager
def two_node_cluster(timeout: float = 180.0) -> Iterator[str]:
    """``ray start --head`` on HEAD_IP and a worker node (``ray start --address``) on WORKER_IP, each in its
    own session with its own temp dir; yields the head's address. Every process of both sessions is
    stopped at the end."""
    with ray_environment() as temp:
        port = _free_port()
        nodes: list[subprocess.Popen] = []
        try:
            head_log = Path(temp, "head.log")
            nodes.append(_start_node(["--head", f"--node-ip-address={HEAD_IP}", f"--port={port}", "--include-dashboard=false"],
                                     Path(temp, "head"), head_log))
            _wait_for_text(head_log, "Ray runtime started", nodes[0], timeout)
            nodes.append(_start_node([f"--address={HEAD_IP}:{port}", f"--node-ip-address={WORKER_IP}"],
                                     Path(temp, "worker"), Path(temp, "worker.log")))
            yield f"{HEAD_IP}:{port}"
        finally:
            stop_sessions(nodes)


def _start_node(args: list[str], temp_dir: Path, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([RAY, "start", *args, *NODE_FLAGS, f"--temp-dir={temp_dir}"], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ))


def _wait_for_text(log: Path, text: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"ray node did not start: {log.read_text()[-2000:]}")
        time.sleep(0.5)


def stop_sessions(leaders: list[subprocess.Popen], grace: float = 10.0) -> None:
    """SIGTERM every process in the sessions these processes lead, SIGKILL what is left after ``grace``
    seconds, and reap the leaders."""
    sessions = {p.pid for p in leaders}
    _signal_sessions(sessions, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _session_members(sessions) and time.monotonic() < deadline:
        for p in leaders:
            p.poll()
        time.sleep(0.2)
    _signal_sessions(sessions, signal.SIGKILL)
    for p in leaders:
        p.wait(timeout=30)


def _session_members(sessions: set[int]) -> list[int]:
    """Live (not zombie) processes whose session id is one of ``sessions``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) in sessions:  # state, ppid, pgrp, session
            members.append(int(entry.name))
    return members


def _signal_sessions(sessions: set[int], sig: int) -> None:
    for pid in _session_members(sessions):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HEAD_IP, 0))
        return s.getsockname()[1]
