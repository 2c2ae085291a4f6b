"""Shared helpers for the benchmarks: timing, peak memory, data. Not part of the library."""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

torch.set_num_threads(1)  # the benchmark machine is shared; one thread keeps ratios comparable


def best_of(call: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Fastest wall time of ``repeats`` calls after ``warmup`` untimed calls (seconds)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return min(times)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MiB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


FASHION_MNIST_INSTALL = "apt-get install dataset-fashion-mnist"


def dataset():
    """Fashion-MNIST (Debian's dataset-fashion-mnist). A missing dataset stops the benchmark with the command
    that installs it: figures on another data set would be silently different figures."""
    from fedsample.data import load_dataset

    try:
        return load_dataset("fashion-mnist")
    except FileNotFoundError as error:
        raise SystemExit(f"Fashion-MNIST is not installed; install it with `{FASHION_MNIST_INSTALL}` "
                         f"or name its folder in FEDSAMPLE_FASHION_MNIST_DIR ({error})") from None


def emit(name: str, value: float | str) -> None:
    print(f"{name}: {value:.4g}" if isinstance(value, float) else f"{name}: {value}", flush=True)
