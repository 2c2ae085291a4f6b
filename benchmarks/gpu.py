"""The GPU benchmarks of one run, with the device's name and the date (ratios are taken in one process).

- gpu_fedsampling_round_vs_centralized (MLP, CNN): a whole FedSampling round (Fashion-MNIST,
  LogNormalSizes(mean 2, sigma 4): about 30,000 clients; K = 2048, epsilon = 3, M = 300) on the device ÷ one
  centralized step on the device over the rows that round drew. Goals: <= 1.5 (MLP), <= 1.2 (CNN). Read as
  best-of round ÷ best-of step, and as the median of rounds and steps timed back to back with its 95% interval,
  with the host's second core idle (``mlp_paired_median_ratio``) and busy (``mlp_busy_paired_median_ratio``: a
  process spinning on the last core, started and stopped by the script, ``_common.competing_process``).
- gpu_fedavg_round_vs_centralized: FedAvg, 10 clients × 600 samples, 1 epoch, batch 32, CNN ÷ one
  centralized epoch (batch 32) over the same 6,000 samples on the device. Goal <= 0.5.
- gpu_vs_cpu: the FedSampling CNN round on the CPU ÷ the same round on the device. Goal >= 100.
- gpu_server_side_1m_clients: size reports, estimate, selection and Bernoulli draws for 10^6 clients.
  Goal < 0.020 s. Twice: the draws' positions brought back to the host, and kept on the device as tensors with
  the sizes held there for the run (``draws kept on the device``: ``BernoulliSamples.draw_cohort_on_device``, the
  same numbers; the vectorized engine's round on a CUDA device draws this way, bringing back only the kept rows).
- vectorized_vs_loop/<recipe>: one round of every recipe, per-client loop ÷ vectorized engine, both on the
  device (10 clients × 6,000 Fashion-MNIST samples, 5 per round where the recipe samples clients, batch 32,
  MLP). Goal >= 1 (the vectorized engine never loses).
- peak device memory (torch.cuda.max_memory_allocated) of each.

Run on a CUDA machine:   python benchmarks/gpu.py            (needs Fashion-MNIST: dataset-fashion-mnist)
Check the script:        python benchmarks/gpu.py --smoke    (tiny sizes, no verdicts; on the CPU when there is no
                         CUDA device, which it says: the CPU half of the script runs, the GPU figures are not measured)
``--synthetic`` uses random data of Fashion-MNIST's shape instead (labelled so in the output).
``--profile`` adds a torch profile of the FedSampling MLP round (where the time goes).
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from _common import (SMOKE_ROWS, arguments, best_of, competing_process, dataset, emit, footer, header, paired_median,
                     paired_ratios, progress, skipped, synthetic_images)

from fedsample import recipes
from fedsample.messages import ClientContext, LocalSample
from fedsample.data import LogNormalSizes, partition
from fedsample.data.types import Dataset, FederatedData
from fedsample.runtime.device import resolve_device, to_device
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import CNN, MLP, initial_parameters
from fedsample.rng import client_rng
from fedsample.training.functional import weighted_gradient
from fedsample.training.local import LocalSGD
from fedsample.federation.secure_sum import with_secure_sum
from fedsampling_round_vs_centralized import drawn_rows, steady_round
from server_side_1m_clients import federation as million_clients, server_round


@dataclass(frozen=True)
class Scale:
    """The sizes of one run: the issue's (full) or a quick check of the script (smoke)."""

    rows: int | None  # Fashion-MNIST training rows used (None: all 60,000)
    K: int
    fedavg_clients: int
    fedavg_per_client: int
    million: int
    recipe_per_client: int
    repeats: int
    pairs: int  # FedSampling rounds and steps timed back to back, per condition (second core idle, busy)


FULL = Scale(rows=None, K=2048, fedavg_clients=10, fedavg_per_client=600, million=1_000_000, recipe_per_client=6000, repeats=5, pairs=200)
SMOKE = Scale(rows=SMOKE_ROWS, K=128, fedavg_clients=4, fedavg_per_client=50, million=10_000, recipe_per_client=40, repeats=1, pairs=1)


@dataclass
class Row:
    name: str
    value: float
    goal: str
    met: bool | None
    peak_mib: float | None = None


class Clock:
    """Wall time of device work: waits for the device before reading the clock; peak device memory."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def seconds(self, call: Callable[[], object], repeats: int) -> float:
        def synced() -> None:
            call()
            self.sync()

        return best_of(synced, repeats=repeats)

    def paired(self, a: Callable[[], object], b: Callable[[], object], pairs: int) -> np.ndarray:
        """time(``a``) / time(``b``) of ``pairs`` back-to-back alternations, each waiting for the device."""
        def synced(call: Callable[[], object]) -> Callable[[], None]:
            return lambda: (call(), self.sync())[0]

        return paired_ratios(synced(a), synced(b), pairs)

    def peak_mib(self, call: Callable[[], object]) -> float | None:
        """Peak memory allocated on the device during one call (None on the CPU)."""
        if self.device.type != "cuda":
            call()
            return None
        self.sync()
        torch.cuda.reset_peak_memory_stats(self.device)
        call()
        self.sync()
        return torch.cuda.max_memory_allocated(self.device) / 2**20


def fashion_mnist(synthetic: bool, smoke: bool) -> Dataset:
    """Fashion-MNIST (Debian's dataset-fashion-mnist; its first rows in smoke mode), or with ``synthetic``
    random data of its shape."""
    if synthetic:
        return synthetic_images(SMOKE.rows if smoke else 60_000, (1, 28, 28), "synthetic (Fashion-MNIST shape)", test=1000)
    return dataset(smoke)


def model_on(spec, ds: Dataset, device: torch.device):
    """The module and its seed-0 parameters (initialised on the CPU, the same numbers on every device)."""
    module = spec.build(ds.input_shape, ds.num_classes)
    params = initial_parameters(module, 0)
    return module.to(device), to_device(params, device)


def fedsampling_round(clock: Clock, fed: FederatedData, spec, K: int, repeats: int,
                      pairs: int = 0) -> tuple[float, float, float | None, int, dict[str, np.ndarray]]:
    """(round seconds, centralized-step seconds, peak MiB of the round, rows drawn, and with ``pairs`` the
    round ÷ step ratios of ``pairs`` back-to-back alternations by condition: ``""`` with the host's second core
    idle, ``"_busy"`` with a competing process spinning on it) on ``clock.device``."""
    ds, device = fed.dataset, clock.device
    module, params = model_on(spec, ds, device)
    sim = VectorizedSimulator(fed, module, seed=0, device=device)
    strategy = recipes.fedsampling(K=K, epsilon=3.0, M=300, server_lr=0.05)
    one_round, state = steady_round(strategy, sim, params)  # round 1, steered, the same rows every call
    round_s = clock.seconds(one_round, repeats)
    peak = clock.peak_mib(one_round)
    rows = torch.as_tensor(drawn_rows(strategy, sim, fed, params, state), device=device)
    x, y = torch.as_tensor(ds.x_train, device=device), torch.as_tensor(ds.y_train, device=device)
    weights = torch.full((len(rows),), 1.0 / K, device=device)
    grad = weighted_gradient(module, ds.task)

    def centralized_step():  # gather the rows from the pooled data on the device, forward/backward, SGD update
        g, _ = grad(params, x.index_select(0, rows), y.index_select(0, rows), weights)
        return {k: params[k] - 0.05 * g[k] for k in params}

    paired = {}
    if pairs:
        paired[""] = clock.paired(one_round, centralized_step, pairs)
        with competing_process():
            paired["_busy"] = clock.paired(one_round, centralized_step, pairs)
    return round_s, clock.seconds(centralized_step, repeats), peak, len(rows), paired


def fedavg_round(clock: Clock, ds: Dataset, clients: int, per_client: int, repeats: int) -> tuple[float, float, float | None]:
    """(FedAvg round seconds, centralized epoch seconds, peak MiB of the round): CNN, 1 epoch, batch 32."""
    device = clock.device
    fed = FederatedData.from_client_indices(ds, [np.arange(k * per_client, (k + 1) * per_client) for k in range(clients)])
    module, params = model_on(CNN(), ds, device)
    sim = VectorizedSimulator(fed, module, seed=0, device=device)
    strategy = recipes.fedavg(clients_per_round=clients, lr=0.05, epochs=1, batch_size=32)
    state = strategy.init_state(params)
    n = clients * per_client
    pooled = ClientContext(0, sim.x[:n], sim.y[:n], module, ds.task, ds.num_classes)
    solver = LocalSGD(lr=0.05, epochs=1, batch_size=32)
    one_round = lambda: strategy.round(with_secure_sum(sim, strategy.secure_sum), params, state, 0, 0)  # noqa: E731
    central = lambda: solver.run(pooled, LocalSample(np.arange(n)), params, 0, client_rng(0, 0, 0, "train"))  # noqa: E731
    round_s, central_s = clock.seconds(one_round, repeats), clock.seconds(central, repeats)
    return round_s, central_s, clock.peak_mib(one_round)


def server_side(clock: Clock, clients: int, repeats: int, on_device: bool = False) -> tuple[float, float | None, dict[str, float]]:
    """(seconds, peak MiB, seconds per step) of the server side of a FedSampling round for ``clients``; with
    ``on_device`` the sizes are held on the device for the run and the draws stay there as tensors."""
    sim = million_clients(str(clock.device), clients)
    timings: dict[str, list[float]] = {}
    held = torch.as_tensor(sim.sizes, device=clock.device) if on_device else None
    call = lambda: server_round(sim, timings, sync=clock.sync, sizes_on_device=held)  # noqa: E731
    seconds = best_of(call, repeats=repeats)
    return seconds, clock.peak_mib(call), {name: min(values) for name, values in timings.items()}


def every_recipe(K: int, per_client: int) -> dict[str, object]:
    """Every registered recipe at the benchmark's size: 5 of 10 clients per round where clients are sampled."""
    c, b = 5, 32
    return {
        "fedavg": recipes.fedavg(clients_per_round=c, batch_size=b),
        "weighted_fedavg": recipes.weighted_fedavg(clients_per_round=c, batch_size=b),
        "fedprox": recipes.fedprox(clients_per_round=c, batch_size=b),
        "fednova": recipes.fednova(clients_per_round=c, batch_size=b),
        "fedavgm": recipes.fedavgm(clients_per_round=c, batch_size=b),
        "fedadam": recipes.fedadam(clients_per_round=c, batch_size=b),
        "fedyogi": recipes.fedyogi(clients_per_round=c, batch_size=b),
        "fedadagrad": recipes.fedadagrad(clients_per_round=c, batch_size=b),
        "fedsampling": recipes.fedsampling(K=K),
        "fedsampling_naive": recipes.fedsampling_naive(ratio=0.05),
        "centralized": recipes.centralized(K=K),
        "fedsts": recipes.fedsts(H=2, m=c, batch_size=b),
        "fedstas": recipes.fedstas(H=2, m=c, eta=K, batch_size=b),
        "iwds": recipes.iwds(clients_per_round=c, batch_size=b),
        "isfedavg": recipes.isfedavg(L=c, batch_size=b),
    }


def vectorized_vs_loop(clock: Clock, ds: Dataset, K: int, per_client: int, repeats: int) -> list[tuple[str, float, float, float]]:
    """(recipe, loop seconds, vectorized seconds, loop ÷ vectorized) of one round of every recipe (MLP)."""
    fed = FederatedData.from_client_indices(ds, [np.arange(k * per_client, (k + 1) * per_client) for k in range(10)])
    out = []
    for name, strategy in progress(every_recipe(K, per_client).items(), lambda item: f"recipe {item[0]}, loop and vectorized"):
        data = fed.pooled() if strategy.pooled else fed
        module, params = model_on(MLP(hidden=64), ds, clock.device)
        seconds = {}
        for backend, kind in (("loop", Simulator), ("vectorized", VectorizedSimulator)):
            sim = kind(data, module, seed=0, device=clock.device)
            state = strategy.init_state(params)
            seconds[backend] = clock.seconds(lambda: strategy.round(with_secure_sum(sim, strategy.secure_sum), params, state, 0, 0), repeats=repeats)
        out.append((name, seconds["loop"], seconds["vectorized"], seconds["loop"] / seconds["vectorized"]))
        emit(f"vectorized_vs_loop/{name}", out[-1][3])
    return out


def profile_round(clock: Clock, fed: FederatedData, K: int) -> None:
    """Where the time of one FedSampling MLP round goes: torch's profiler, top operations by self time."""
    from torch.profiler import ProfilerActivity, profile

    module, params = model_on(MLP(hidden=64), fed.dataset, clock.device)
    sim = VectorizedSimulator(fed, module, seed=0, device=clock.device)
    strategy = recipes.fedsampling(K=K, epsilon=3.0, M=300, server_lr=0.05)
    one_round, _ = steady_round(strategy, sim, params)  # the round the ratio times (round 1, steered)
    one_round()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if clock.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        one_round()
        clock.sync()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    return f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch thread(s)"


def print_table(rows: list[Row]) -> None:
    print("\n| benchmark | value | goal | met | peak device MiB |\n|---|---|---|---|---|")
    for r in rows:
        met = "—" if r.met is None else ("yes" if r.met else "no")
        peak = "—" if r.peak_mib is None else f"{r.peak_mib:.0f}"
        print(f"| {r.name} | {r.value:.4g} | {r.goal} | {met} | {peak} |")


def print_header(device: torch.device, ds: Dataset, smoke: bool) -> None:
    emit("device", device_name(device))
    emit("dataset", ds.name)
    emit("scale", "smoke (script check, not the goals)" if smoke else "full (the issue's sizes)")


def round_rows(clock: Clock, ds: Dataset, scale: Scale, verdict: Callable[[bool], bool | None]) -> list[Row]:
    """The FedSampling rounds (MLP, CNN) against a centralized step, the CPU ÷ device ratio, FedAvg's round."""
    rows = []
    fed = partition(ds, LogNormalSizes(mean=2, sigma=4), seed=0)
    emit("fedsampling_clients", fed.num_clients)
    seconds = {}
    for label, spec, goal in (("mlp", MLP(hidden=64), 1.5), ("cnn", CNN(), 1.2)):
        round_s, central_s, peak, drawn, paired = fedsampling_round(clock, fed, spec, scale.K, scale.repeats, scale.pairs)
        emit(f"{label}_samples_drawn", drawn)
        emit(f"{label}_round_s", round_s)
        emit(f"{label}_centralized_step_s", central_s)
        for condition, ratios in paired.items():
            paired_median(label + condition, ratios)
        ratio = round_s / central_s
        rows.append(Row(f"gpu_fedsampling_round_vs_centralized ({label})", ratio, f"<= {goal}", verdict(ratio <= goal), peak))
        busy = float(np.median(paired["_busy"]))
        rows.append(Row(f"gpu_fedsampling_round_vs_centralized ({label}, paired median, second core busy)", busy,
                        f"<= {goal}", verdict(busy <= goal)))
        seconds[label] = round_s
    cpu_round, _, _, _, _ = fedsampling_round(Clock(torch.device("cpu")), fed, CNN(), scale.K, repeats=1)
    emit("cnn_round_cpu_s", cpu_round)
    speedup = cpu_round / seconds["cnn"]
    rows.append(Row("gpu_vs_cpu (FedSampling CNN round, CPU ÷ device)", speedup, ">= 100", verdict(speedup >= 100)))
    round_s, central_s, peak = fedavg_round(clock, ds, scale.fedavg_clients, scale.fedavg_per_client, scale.repeats)
    emit("fedavg_round_s", round_s)
    emit("fedavg_centralized_epoch_s", central_s)
    rows.append(Row("gpu_fedavg_round_vs_centralized (CNN)", round_s / central_s, "<= 0.5", verdict(round_s / central_s <= 0.5), peak))
    return rows


def engine_rows(clock: Clock, ds: Dataset, scale: Scale, verdict: Callable[[bool], bool | None]) -> list[Row]:
    """The server side at 10^6 clients and every recipe on both backends."""
    seconds, peak, steps = server_side(clock, scale.million, scale.repeats)
    for name, value in steps.items():
        emit(f"server_side_{name}_s", value)
    rows = [Row(f"gpu_server_side_1m_clients (s, {scale.million} clients)", seconds, "< 0.020", verdict(seconds < 0.020), peak)]
    seconds, peak, steps = server_side(clock, scale.million, scale.repeats, on_device=True)
    for name, value in steps.items():
        emit(f"server_side_draws_on_device_{name}_s", value)
    rows.append(Row(f"gpu_server_side_1m_clients, draws kept on the device (s, {scale.million} clients)", seconds, "< 0.020",
                    verdict(seconds < 0.020), peak))
    for name, loop_s, vec_s, ratio in vectorized_vs_loop(clock, ds, scale.K, scale.recipe_per_client, scale.repeats):
        rows.append(Row(f"vectorized_vs_loop/{name} (loop ÷ vectorized; {vec_s:.3g} s)", ratio, ">= 1", verdict(ratio >= 1)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu")
    parser.add_argument("--synthetic", action="store_true", help="random data of Fashion-MNIST's shape (labelled)")
    parser.add_argument("--profile", action="store_true", help="print a torch profile of the FedSampling MLP round")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ValueError as error:
        if not args.smoke:
            print(f"benchmarks/gpu.py: {error}; the GPU figures need a CUDA device (or --smoke to check the script)", file=sys.stderr)
            return 2
        skipped("the GPU half (every GPU figure)", f"{error}; smoke mode runs the CPU half on the CPU")
        device = torch.device("cpu")
    header(args.smoke)
    scale, clock = (SMOKE if args.smoke else FULL), Clock(device)
    ds = fashion_mnist(args.synthetic, args.smoke)
    print_header(device, ds, args.smoke)
    judged = device.type == "cuda" and not args.smoke  # the goals are GPU goals at the sizes
    verdict = lambda met: met if judged else None  # noqa: E731
    rows = round_rows(clock, ds, scale, verdict) + engine_rows(clock, ds, scale, verdict)
    if args.profile:
        profile_round(clock, partition(ds, LogNormalSizes(mean=2, sigma=4), seed=0), scale.K)
    print_table(rows)
    footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
