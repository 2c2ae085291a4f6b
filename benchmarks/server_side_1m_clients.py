"""Server side of a FedSampling round at 10^6 clients: randomized size reports + estimate N~ + selection +
Bernoulli data draws, all vectorized (the same numbers each client would compute alone). Goal < 0.5 s.
``data_draws_kept_as_tensors_s``: the draws once more with the sizes held as a tensor and the draws kept as
tensors (``BernoulliSamples.draw_cohort_on_device``, torch's kernels; the path ``gpu.py`` times on a GPU).

Run: python benchmarks/server_side_1m_clients.py [--smoke]
"""

from __future__ import annotations

import time

import numpy as np
import torch

from _common import arguments, best_of, emit, footer, header, peak_rss_mb

from fedsample.data.types import Dataset, FederatedData
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.rng import CohortRandom
from fedsample.sampling.clients import AllClients
from fedsample.sampling.data import FedSamplingData
from fedsample.privacy.sizes import RandomizedSizes
from fedsample.strategy import RoundContext

N = 1_000_000


def federation(device: str = "cpu", clients: int = N) -> VectorizedSimulator:
    """``clients`` (10^6) clients with log-normal sizes (mean about 2, at least 1), over a one-feature dataset."""
    rng = np.random.default_rng(0)
    sizes = np.maximum(1, np.round(rng.lognormal(0, 1.2, clients) * 2 / np.exp(0.72))).astype(np.int64)
    rows = int(sizes.sum())
    x = np.zeros((rows, 1), dtype=np.float32)
    ds = Dataset("synthetic", x, np.zeros(rows, dtype=np.int64), x[:1], np.zeros(1, dtype=np.int64), 2)
    fed = FederatedData(ds, np.arange(rows, dtype=np.int64), np.concatenate([[0], np.cumsum(sizes)]))
    return VectorizedSimulator(fed, torch.nn.Linear(1, 2).to(device), seed=0, device=device)


def server_round(sim: VectorizedSimulator, timings: dict[str, list[float]], round: int = 0, sync=lambda: None,
                 sizes_on_device: "torch.Tensor | None" = None) -> int:
    """Size reports of every client, the estimate N~, selection and the Bernoulli data draws (p = K/N~) of
    round ``round``; appends each step's seconds to ``timings`` and returns the number of samples drawn.
    ``sync`` waits for the device (CUDA) before each clock reading. ``sizes_on_device``: every client's size held
    on a device for the run (they do not change); the draws then stay there as tensors
    (``BernoulliSamples.draw_cohort_on_device``) instead of coming back to the host."""
    sizes_part, clients, data = RandomizedSizes(3.0, 300), AllClients(), FedSamplingData(2048)
    ids = np.arange(sim.num_clients)
    ctx = RoundContext(sim, {}, round, 0, {})
    steps = {}
    t0 = time.perf_counter()
    reports = sim.run(ids, sizes_part.query, round)
    sync()
    steps["reports"] = time.perf_counter()
    ctx.sizes = sizes_part.summarize(ids, reports)
    steps["estimate"] = time.perf_counter()
    cohort = clients.select(ctx)
    steps["selection"] = time.perf_counter()
    plan = data.plan(ctx, cohort)
    if sizes_on_device is None:
        on_device = sim.device if sim.device.type == "cuda" else None  # the streams computed where the engine computes them
        member, _ = plan.draw_cohort(sim.sizes[cohort.ids], CohortRandom(0, round, cohort.ids, "train", on_device))
    else:
        device = sizes_on_device.device
        sizes = sizes_on_device[torch.as_tensor(cohort.ids, device=device)]
        member, _ = plan.draw_cohort_on_device(sizes, CohortRandom(0, round, cohort.ids, "train", device))
    sync()
    steps["data_draws"] = time.perf_counter()
    last = t0
    for name, at in steps.items():
        timings.setdefault(name, []).append(at - last)
        last = at
    return len(member)


def main(smoke: bool) -> None:
    header(smoke)
    t = time.perf_counter()
    sim = federation(clients=10_000 if smoke else N)
    emit("setup_s", time.perf_counter() - t)
    emit("clients", sim.num_clients)
    emit("samples", int(sim.sizes.sum()))
    timings: dict[str, list[float]] = {}
    drawn = server_round(sim, timings)
    total = best_of(lambda: server_round(sim, timings), repeats=5)
    emit("samples_drawn", drawn)
    for name, values in timings.items():
        emit(f"{name}_s", min(values))
    held, on_device = torch.as_tensor(sim.sizes, device=sim.device), {}  # the draws as tensors (on the CPU here: torch's kernels)
    assert server_round(sim, on_device, sizes_on_device=held) == drawn  # the same draws
    best_of(lambda: server_round(sim, on_device, sizes_on_device=held), repeats=5)
    emit("data_draws_kept_as_tensors_s", min(on_device["data_draws"]))
    emit("server_side_1m_clients_s" if sim.num_clients == N else f"server_side_{sim.num_clients}_clients_s", total)
    emit("peak_rss_mb", peak_rss_mb())
    footer()


if __name__ == "__main__":
    main(arguments(__doc__).parse_args().smoke)
