"""Ctrl-C during ``fedsample run --jobs 2`` is one line and exit code 130 (issue 27): the terminal sends SIGINT to
the whole process group, the spawned processes included, while they start or while they run. The test starts a
real ``fedsample run --jobs 2`` in its own session, waits until it has started its processes, sends SIGINT to
the group as a terminal does, and reads stderr: one line, no traceback (of the command or of its processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def processes_in_session(sid: int) -> int:
    """How many processes other than ``sid`` itself belong to session ``sid`` (Linux /proc)."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == sid:
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        count += int(fields[3]) == sid  # field 6 of stat: the session id
    return count


def as_in_a_terminal() -> None:
    """The child's Ctrl-C as a terminal delivers it: a suite started as a background job of a non-interactive shell
    (``.ci/run &``) inherits SIGINT ignored, and Python then installs no handler, so the run would never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists() or sys.platform != "linux", reason="reads the process table in /proc (Linux)")
@pytest.mark.parametrize("children, wait", [(1, 0.0), (2, 0.0), (3, 3.0)], ids=["first started", "starting", "running"])
def test_ctrl_c_while_jobs_start_or_run_is_one_line_and_exit_130(children, wait, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-m", "fedsample.cli", "run", "quickstart", "--rounds", "40", "--seeds", "0,1", "--jobs", "2",
               "--quiet", "--out", str(tmp_path / "out")]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                           preexec_fn=as_in_a_terminal)
    try:
        deadline = time.monotonic() + 180
        while processes_in_session(run.pid) < children and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert run.poll() is None and processes_in_session(run.pid) >= children, "the run did not start its processes"
        time.sleep(wait)
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: every process of the group
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    assert run.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedsample: interrupted") and "Traceback" not in err, err
