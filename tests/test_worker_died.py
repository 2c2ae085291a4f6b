"""A run whose worker process dies without answering (the out-of-memory killer's SIGKILL; concurrent.futures then
raises ``BrokenProcessPool``, whose own text names no cause) says so in one line with the likely cause and what to
do, and exits 1 (runs failed; ``--resume`` continues). The death is simulated in the parent: the pool's wait raises what a killed worker makes it raise."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

from fedsample.cli import main
from fedsample.experiments import execute
from test_output_folders import config  # noqa: F401  (the tiny experiment)


def test_a_killed_worker_is_named_with_its_likely_cause(config, tmp_path, monkeypatch, capsys):  # noqa: F811
    def killed(*_args, **_kwargs):
        raise BrokenProcessPool("A process in the process pool was terminated abruptly while the future was running or pending.")

    monkeypatch.setattr(execute, "_wait_reporting", killed)
    code = main(["run", str(config), "--quiet", "--seeds", "0,1", "--jobs", "2", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert "out-of-memory" in line and "fewer --jobs" in line and "2 runs were in memory" in line, line
