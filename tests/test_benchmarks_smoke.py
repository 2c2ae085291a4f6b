"""Every benchmark script runs in smoke mode, the way a user runs it (``python benchmarks/NAME.py --smoke``, a
process of its own from the repository root), so that a script broken by a library change fails here and not
the next time someone measures. Smoke mode is tiny sizes and a few seconds a script; its figures mean nothing
and are not checked. A script passes when it exits 0, prints no traceback, and prints its header (machine, load
average, smoke mode). What a script cannot do here (no GPU, no Fashion-MNIST, a peer's virtual environment or
an extra missing) it must say on a ``skipped:`` line, which this test shows (``-rA`` or a failure's output)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
# every top-level script (a new one is covered without editing this file), and each suite's entry point
SCRIPTS = (sorted(p for p in BENCHMARKS.glob("*.py") if p.name != "_common.py") + sorted(BENCHMARKS.glob("*/run.py"))
           + [BENCHMARKS / "peers" / "alternate.py"])
TIMEOUT_S = 300  # per script; a smoke run takes seconds, so this only stops a hang


def test_the_glob_finds_the_benchmarks():
    names = {str(p.relative_to(BENCHMARKS)) for p in SCRIPTS}
    assert {"gpu.py", "fedsampling_round_vs_centralized.py", "vectorized_vs_loop_every_recipe.py", "scaling.py", "peers/run.py"} <= names
    assert "_common.py" not in names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_benchmark_runs_in_smoke_mode(script: Path):
    done = subprocess.run([sys.executable, str(script), "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    output = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, f"{script.name} --smoke exited {done.returncode}\n{output[-6000:]}"
    assert "Traceback (most recent call last)" not in output, output[-6000:]
    assert "mode: smoke" in done.stdout and "load_average:" in done.stdout and "machine:" in done.stdout, output[-6000:]
    for line in done.stdout.splitlines():  # shown with -rA / -s: what this machine could not run
        if line.startswith("skipped:"):
            print(f"{script.name}: {line}")
