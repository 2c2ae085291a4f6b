"""Flower's simulation engine ÷ ours on the small-clients round of small_clients_vectorized_vs_loop.py
(1,000 clients × 2 samples, same MLP, data, learning rate, seed; one local step each; FedAvg). Goal >= 50×.
Also the time from process start to the start of round 1 for both.

Flower runs from its own virtual environment (flwr[simulation] with torch 2.13.0), never imported by the
library: FLWR_PYTHON (default /work/venv-flwr/bin/python) runs benchmarks/_flower_side.py.
Run: python benchmarks/small_clients_vs_flower.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(python: str, script: str) -> dict[str, float]:
    out = subprocess.run([python, str(HERE / script)], capture_output=True, text=True, cwd=HERE.parent, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{out.stderr[-3000:]}")
    values = {}
    for line in out.stdout.splitlines():
        name, _, value = line.partition(": ")
        try:
            values[name] = float(value)
        except ValueError:
            pass
    return values


def main() -> None:
    ours = run(sys.executable, "small_clients_vectorized_vs_loop.py")
    ours_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    flower = run(os.environ.get("FLWR_PYTHON", "/work/venv-flwr/bin/python"), "_flower_side.py")
    flower_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"ours_time_to_round_1_s: {ours['vectorized_time_to_round_1_s']:.4g}")
    print(f"flower_time_to_round_1_s: {flower['flower_time_to_round_1_s']:.4g}")
    print(f"ours_round_s: {ours['vectorized_round_s']:.4g}")
    print(f"flower_round_s: {flower['flower_round_s']:.4g}")
    print(f"flower_updates_received: {flower['flower_results']:.0f}")
    print(f"small_clients_vs_flower: {flower['flower_round_s'] / ours['vectorized_round_s']:.4g}")
    print(f"ours_peak_rss_mb: {ours_rss:.4g}")
    print(f"flower_largest_process_peak_rss_mb: {flower_rss:.4g}")


if __name__ == "__main__":
    main()
