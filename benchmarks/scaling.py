"""How a round's cost grows: seconds per round against the cohort size (10 to 10^4 clients), the local steps (1 to
20) and the clients in the population (10^3 to 10^6), for the default engine (``backend="auto"``'s pick), the
loop engine and the hand-written floor (``peers/floor.py``'s FedAvg round: one model, in-place SGD, a Python
loop over the clients), drawn as a PNG (three panels, log-log).

Every client holds 2 rows and takes full-batch local SGD steps (batch 2, lr 0.05), uniform mean, MLP(64) on
inputs of Fashion-MNIST's shape, one torch thread: the small-client round of ``peers/``'s ``small-S`` workloads.
Sweeps (the other two axes held): cohort = population = 10, 100, 1,000, 10,000 clients at 5 steps; steps 1, 2,
5, 10, 20 with 1,000 clients; population 10^3 ... 10^6 with 100 clients a round drawn uniformly, 5 steps.
The inputs are overlapping windows of one random vector (row i starts at element i: distinct rows, 2 × 10^6
of them in a few MB), since 10^6 clients' rows would not fit as separate images; timings depend on the shapes
only. Each point: one call, then (when it took under 2 s) the fastest of 3 more.

Run: python benchmarks/scaling.py [--out benchmarks/scaling.png] [--smoke]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from _common import arguments, emit, footer, header, peak_rss_mb, progress

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

PER_CLIENT, HIDDEN, LR, SHAPE = 2, 64, 0.05, (1, 28, 28)
COHORTS, STEPS, POPULATIONS = (10, 100, 1_000, 10_000), (1, 2, 5, 10, 20), (1_000, 10_000, 100_000, 1_000_000)
HELD_STEPS, HELD_COHORT, POPULATION_COHORT = 5, 1_000, 100
SMOKE_COHORTS, SMOKE_STEPS, SMOKE_POPULATIONS = (5, 20), (1, 3), (100, 1_000)
SMOKE_HELD_COHORT, SMOKE_POPULATION_COHORT = 20, 10
ENGINES = ("default", "loop", "floor")
ONE_CALL_S = 2.0  # a point whose first call takes longer is timed by that call alone


def window_images(rows: int):
    """``rows`` distinct inputs of Fashion-MNIST's shape without ``rows`` × 784 floats: row i is the 784 numbers
    of one seeded random vector starting at element i (a strided view), labels uniform over 10 classes."""
    from fedsample.data.types import Dataset

    rng = np.random.default_rng(0)
    flat = int(np.prod(SHAPE))
    base = rng.normal(size=rows + flat).astype(np.float32)
    x = np.lib.stride_tricks.as_strided(base, shape=(rows, *SHAPE), strides=(4, 0, 4 * SHAPE[2], 4), writeable=False)
    y = rng.integers(0, 10, rows)
    return Dataset("windows (Fashion-MNIST shape)", x, y, np.ascontiguousarray(x[:10]), y[:10], 10)


def timed(call) -> float:
    """Seconds of one call, or the fastest of 3 more when it took under :data:`ONE_CALL_S` (smoke: one call)."""
    import _common

    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    if _common.SMOKE or first >= ONE_CALL_S:
        return first
    return min(first, _common.best_of(call, repeats=3, warmup=0))


def point(population: int, cohort: int, steps: int) -> dict[str, float | str]:
    """One round of ``cohort`` of ``population`` clients × 2 rows, ``steps`` local steps, on each engine."""
    import torch
    from floor import fedavg_round
    from workload import Workload

    from fedsample.data.types import FederatedData
    from fedsample.models import MLP, initial_parameters
    from fedsample.sampling.clients import AllClients, UniformClients
    from fedsample.simulation import make_federation, resolve_backend
    from fedsample.strategy import Strategy
    from fedsample.training.aggregate import WeightedMean
    from fedsample.training.local import LocalSGD

    rows = population * PER_CLIENT
    ds = window_images(rows)
    fed = FederatedData(ds, np.arange(rows, dtype=np.int64), np.arange(0, rows + 1, PER_CLIENT, dtype=np.int64))
    clients = AllClients() if cohort >= population else UniformClients(m=cohort)
    strategy = Strategy(clients=clients, local=LocalSGD(lr=LR, epochs=None, steps=steps, batch_size=PER_CLIENT),
                        aggregate=WeightedMean("uniform"), name="scaling")
    module = MLP(hidden=HIDDEN).build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    state = strategy.init_state(params)
    choice = resolve_backend("auto", strategy, fed, module, rounds=1)
    out: dict[str, float | str] = {"auto_picked": choice.backend, "auto_reason": choice.reason}
    for name, backend in (("default", choice.backend), ("loop", "loop")):
        federation = make_federation(backend, fed, module, 0, client_threads=choice.client_threads if name == "default" else 1)
        out[name] = timed(lambda f=federation: strategy.round(f, params, state, 0, 0))
        del federation
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    w = Workload("scaling", users=population, per_user=PER_CLIENT, cohort=cohort, batch=PER_CLIENT, epochs=None,
                 steps=steps, lr=LR, server_lr=1.0)
    torch.manual_seed(0)
    floor_model = MLP(hidden=HIDDEN).build(ds.input_shape, ds.num_classes)
    global_params = [p.detach().clone() for p in floor_model.parameters()]
    rng = np.random.default_rng(0)
    draw = (lambda: rng.choice(population, size=cohort, replace=False)) if cohort < population else (lambda: np.arange(population))
    out["floor"] = timed(lambda: fedavg_round(floor_model, global_params, x, y, draw(), w))
    return out


def sweeps(smoke: bool) -> list[tuple[str, str, list[tuple[int, int, int]]]]:
    """(axis name, axis label, [(population, cohort, steps)]) of the three sweeps."""
    cohorts, steps, pops = (SMOKE_COHORTS, SMOKE_STEPS, SMOKE_POPULATIONS) if smoke else (COHORTS, STEPS, POPULATIONS)
    held = SMOKE_HELD_COHORT if smoke else HELD_COHORT
    drawn = SMOKE_POPULATION_COHORT if smoke else POPULATION_COHORT
    return [
        ("cohort", f"clients per round (all of them, {HELD_STEPS} steps)", [(c, c, HELD_STEPS) for c in cohorts]),
        ("steps", f"local steps ({held} clients)", [(held, held, s) for s in steps]),
        ("population", f"clients in the population ({drawn} a round, {HELD_STEPS} steps)", [(n, drawn, HELD_STEPS) for n in pops]),
    ]


def draw(results: list[tuple[str, str, list[int], dict[str, list[float]]]], path: Path, title: str) -> None:
    """Three log-log panels of seconds per round, one line per engine."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), constrained_layout=True)
    for ax, (_axis, label, xs, times) in zip(axes, results):
        for name, marker in zip(ENGINES, "osd"):
            ax.plot(xs, times[name], marker=marker, label=name if name != "default" else "default (auto)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds per round")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(out: Path, smoke: bool) -> None:
    import os
    import tempfile

    from _common import machine

    header(smoke)
    if smoke:  # never overwrite the committed picture with smoke figures
        out = Path(tempfile.mkdtemp()) / out.name
    results = []
    for axis, label, points in sweeps(smoke):
        xs, times = [], {name: [] for name in ENGINES}
        for population, cohort, steps in progress(points, lambda p, axis=axis: f"{axis}: population {p[0]}, cohort {p[1]}, {p[2]} steps"):
            got = point(population, cohort, steps)
            x = {"cohort": cohort, "steps": steps, "population": population}[axis]
            xs.append(x)
            for name in ENGINES:
                times[name].append(float(got[name]))
                emit(f"{axis}={x}/{name}_s", float(got[name]))
            emit(f"{axis}={x}/default_over_floor", float(got["default"]) / float(got["floor"]))
            emit(f"{axis}={x}/auto", f"{got['auto_picked']}: {got['auto_reason']}")
            emit(f"{axis}={x}/load_average", " ".join(f"{v:.2f}" for v in os.getloadavg()))
        results.append((axis, label, xs, times))
    m = machine()
    draw(results, out, f"fedsample round time, MLP(64), clients of 2 rows, batch 2 — {m['cpu']}, {m['cores']} cores, "
                       f"1 torch thread, {m['date_utc']} UTC, load average {m['load_average'][0]:.2f} at the end")
    emit("picture", str(out))
    emit("peak_rss_mb", peak_rss_mb())
    footer()


if __name__ == "__main__":
    parser = arguments(__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "scaling.png", help="the PNG to write")
    args = parser.parse_args()
    main(args.out, args.smoke)
