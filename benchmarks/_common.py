"""Shared helpers for the benchmarks: the ``--smoke`` flag, the machine header, timing, peak memory, data and
progress lines. Not part of the library.

Smoke mode (``python benchmarks/NAME.py --smoke``): tiny sizes, a few seconds per script; the figures are
printed but mean nothing (they are not the benchmark's figures and are never checked). It exists so that
``tests/test_benchmarks_smoke.py`` runs every script the way a user does and a broken script fails CI. What a
script cannot do here (no GPU, no Fashion-MNIST, a missing extra or peer environment) it says on a
``skipped: ...`` line and does the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import resource
import sys
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fedsample.runtime.device import use_threads  # noqa: E402

use_threads(1)  # the benchmark machine is shared; one torch thread keeps ratios comparable, and numpy's BLAS on one
# thread beside it, as fedsample's commands and simulate run (fedsample.runtime.device.use_threads)

T = TypeVar("T")
STARTED = time.perf_counter()
SMOKE = False  # set by header(smoke=True): best_of then makes one call, no warm-up
SMOKE_HELP = "smoke mode: tiny sizes, a few seconds; checks that the script runs (figures printed, not meaningful)"
SMOKE_ROWS = 2000  # Fashion-MNIST training rows in smoke mode


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """The benchmark's argument parser (its description: the docstring's first line) with ``--smoke``."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    return parser


def machine() -> dict[str, object]:
    """CPU model, cores, torch version and intra-op threads, UTC date and load average of this run."""
    model = platform.processor() or platform.machine() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "load_average": [round(v, 2) for v in os.getloadavg()]}


def header(smoke: bool = False) -> None:
    """Print the machine, the date and the load average (before the figures), and whether this is smoke mode
    (which also makes :func:`best_of` time one call without warm-up)."""
    global SMOKE
    SMOKE = smoke
    m = machine()
    emit("machine", f"{m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['torch_threads']} torch thread(s)")
    emit("date_utc", m["date_utc"])
    emit("load_average", " ".join(f"{v:.2f}" for v in m["load_average"]))
    if smoke:
        emit("mode", "smoke (tiny sizes: checks that the script runs; the figures below are not benchmark figures)")


def footer() -> None:
    """Print the load average at the end and the process's wall time so far (imports included)."""
    emit("load_average_end", " ".join(f"{v:.2f}" for v in os.getloadavg()))
    emit("process_wall_s", process_seconds())


def process_seconds() -> float:
    """Seconds since this process started (Linux's /proc; elsewhere since this module was imported)."""
    try:
        with open("/proc/self/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            return float(f.read().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - STARTED


def skipped(what: str, why: str) -> None:
    """Say what this run does not do and why (stdout, with the figures): nothing is skipped silently."""
    print(f"skipped: {what}: {why}", flush=True)


def progress(items: Iterable[T], label: Callable[[T], str] = str) -> Iterator[T]:
    """Yield ``items``, printing ``[i/n] label (s since start)`` to stderr before each: progress on long runs."""
    items = list(items)
    for i, item in enumerate(items, 1):
        print(f"[{i}/{len(items)}] {label(item)} ({time.perf_counter() - STARTED:.0f} s)", file=sys.stderr, flush=True)
        yield item


def best_of(call: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Fastest wall time of ``repeats`` calls after ``warmup`` untimed calls (seconds); in smoke mode one call."""
    if SMOKE:
        repeats, warmup = 1, 0
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return min(times)


def paired_ratios(a: Callable[[], object], b: Callable[[], object], pairs: int = 60,
                  clock: Callable[[], float] = time.perf_counter) -> np.ndarray:
    """time(``a``) / time(``b``) of ``pairs`` alternations, each pair timed back to back so that both see the same
    machine load (after one untimed call of each); in smoke mode one pair. ``clock``: wall time by default;
    ``time.thread_time`` gives the calling thread's CPU time, which a loaded machine's descheduling does not
    lengthen (for work that runs on that one thread: one torch thread, numpy without threads)."""
    if SMOKE:
        pairs = 1
    a(), b()
    ratios = []
    for _ in range(pairs):
        t0 = clock()
        a()
        t1 = clock()
        b()
        ratios.append((t1 - t0) / (clock() - t1))
    return np.asarray(ratios)


def paired_median_ratio(a: Callable[[], object], b: Callable[[], object], pairs: int = 60) -> float:
    """The median of :func:`paired_ratios`."""
    return float(statistics.median(paired_ratios(a, b, pairs)))


def median_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """The distribution-free confidence interval of the median of ``values`` (independent draws): the order
    statistics x_(j+1) and x_(n-j), j the largest count with P(Binomial(n, 1/2) <= j) <= (1 - level) / 2, which
    covers the median with probability at least ``level`` whatever the distribution. None where n is too small
    for that level (fewer than 6 values at 95%)."""
    from scipy.stats import binom

    x, n = np.sort(np.asarray(values, dtype=np.float64)), len(values)
    tail = (1 - level) / 2
    j = int(binom.ppf(tail, n, 0.5)) if n else -1
    while j >= 0 and binom.cdf(j, n, 0.5) > tail:
        j -= 1
    return None if j < 0 else (float(x[j]), float(x[n - 1 - j]))


SPIN = "import os, sys\nif hasattr(os, 'sched_setaffinity'): os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


@contextlib.contextmanager
def competing_process() -> Iterator[int]:
    """A second process spinning on the last core for the duration of the ``with`` block (its pid): the
    "second core busy" condition, started and stopped by the benchmark itself so that the load is the same in
    every run. The benchmark's own process is not pinned; where the platform cannot pin, the spinner is not
    pinned either."""
    core = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    spinner = subprocess.Popen([sys.executable, "-c", SPIN, str(core)], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.2)  # let it start spinning before anything is timed
        yield spinner.pid
    finally:
        spinner.kill()
        spinner.wait()


def paired_median(label: str, ratios: np.ndarray) -> None:
    """Emit the median of ``ratios`` as ``{label}_paired_median_ratio``, its distribution-free 95% interval
    (:func:`median_interval`) and the number of pairs."""
    emit(f"{label}_paired_median_ratio", float(np.median(ratios)))
    interval = median_interval(ratios)
    emit(f"{label}_paired_median_ratio_95ci", "n/a (too few pairs)" if interval is None else f"{interval[0]:.4g} to {interval[1]:.4g}")
    emit(f"{label}_pairs", len(ratios))


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MiB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


FASHION_MNIST_INSTALL = "apt-get install dataset-fashion-mnist"


def dataset(smoke: bool = False, rows: int = SMOKE_ROWS):
    """Fashion-MNIST (Debian's dataset-fashion-mnist). A missing dataset stops the benchmark with the command
    that installs it: figures on another data set would be silently different figures.

    In smoke mode: its first ``rows`` training rows; when it is not installed, random images of its shape
    (named so, and said on a ``skipped:`` line), since smoke figures are not figures."""
    from fedsample.data import load_dataset
    from fedsample.data.types import Dataset

    try:
        ds = load_dataset("fashion-mnist")
    except FileNotFoundError as error:
        if smoke:
            skipped("Fashion-MNIST", f"not installed (`{FASHION_MNIST_INSTALL}`); smoke mode uses random images of its shape")
            return synthetic_images(rows, (1, 28, 28), "synthetic (Fashion-MNIST shape)")
        raise SystemExit(f"Fashion-MNIST is not installed; install it with `{FASHION_MNIST_INSTALL}` "
                         f"or name its folder in FEDSAMPLE_FASHION_MNIST_DIR ({error})") from None
    if not smoke:
        return ds
    return Dataset(f"{ds.name} (first {rows} rows)", ds.x_train[:rows], ds.y_train[:rows], ds.x_test[:500], ds.y_test[:500], ds.num_classes)


def synthetic_images(rows: int, shape: tuple[int, ...], name: str, classes: int = 10, test: int = 500):
    """Seeded standard-normal images of ``shape`` with uniform labels: timings depend on the shape only."""
    from fedsample.data.types import Dataset

    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows + test, *shape)).astype(np.float32)
    y = rng.integers(0, classes, rows + test)
    return Dataset(name, x[:rows], y[:rows], x[rows:], y[rows:], classes)


def emit(name: str, value: float | str) -> None:
    print(f"{name}: {value:.4g}" if isinstance(value, float) else f"{name}: {value}", flush=True)
