"""What the loop engine's updates summed as they arrive (``fedsample.federation.summed``) save: a FedAvg round of
50 clients of pfl-research's CIFAR-10 model (``PflCNN``, 1,626,442 parameters; random images of CIFAR-10's shape,
20 rows a client, 2 local steps of 10) on the loop engine, with the server's planned sum (each update added to the
running sum as it arrives, then dropped) ÷ with the updates held until the aggregator sums them.

Each variant runs in a process of its own (peak resident memory is a per-process high-water mark), the two
alternated ``--pairs`` times: the figures are each variant's peak RSS (MiB) and round time (s), medians over the
pairs, and the ratio of the round times (whether the fused sum costs or saves time).

Run: python benchmarks/summed_updates_memory.py [--smoke] [--pairs N]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

CLIENTS, ROWS, STEPS, BATCH = 50, 20, 2, 10


def one_round(held: bool, smoke: bool) -> dict[str, float]:
    """Peak RSS (MiB) and the round's seconds of one FedAvg round in this process."""
    import torch

    import fedsample.federation.simulator as simulator
    from _common import peak_rss_mb, synthetic_images
    from fedsample import models, recipes
    from fedsample.data.partition import IID, partition
    from fedsample.models import initial_parameters

    torch.set_num_threads(1)
    clients = 4 if smoke else CLIENTS
    data = partition(synthetic_images(clients * ROWS, (3, 32, 32), "synthetic (CIFAR-10 shape)"), IID(clients), seed=0)
    module = models.PflCNN().build(data.dataset.input_shape, data.dataset.num_classes)
    params = initial_parameters(module, 0)
    federation = simulator.Simulator(data, module, seed=0)
    strategy = recipes.fedavg(clients_per_round=clients, steps=STEPS, batch_size=BATCH, lr=0.05)
    if held:
        import fedsample.strategy.round as round_steps

        round_steps.planned_weights = lambda s, ctx, cohort, lost=0: None  # no planned sum in the request: the engine holds every update
    start = time.perf_counter()
    strategy.round(federation, params, strategy.init_state(params), 0, 0)
    return {"round_s": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    from _common import arguments, emit, footer, header, median_interval

    parser = arguments(__doc__)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    header(args.smoke)
    pairs = 1 if args.smoke else args.pairs
    runs: dict[str, list[dict[str, float]]] = {"summed": [], "held": []}
    for _ in range(pairs):
        for variant in runs:
            command = [sys.executable, __file__, "--variant", variant] + (["--smoke"] if args.smoke else [])
            runs[variant].append(json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1]))
    emit("clients", 4 if args.smoke else CLIENTS)
    for variant, figures in runs.items():
        for key in ("peak_rss_mb", "round_s"):
            emit(f"{variant}_{key}_median", statistics.median(f[key] for f in figures))
    emit("saved_mb_median", statistics.median(h["peak_rss_mb"] - s["peak_rss_mb"] for s, h in zip(runs["summed"], runs["held"])))
    ratios = [s["round_s"] / h["round_s"] for s, h in zip(runs["summed"], runs["held"])]
    emit("summed_vs_held_round_s_median_ratio", statistics.median(ratios))
    interval = median_interval(ratios)
    emit("summed_vs_held_round_s_95ci", "n/a (too few pairs)" if interval is None else f"{interval[0]:.4g} to {interval[1]:.4g}")
    emit("pairs", pairs)
    footer()


if __name__ == "__main__":
    if "--variant" in sys.argv:
        print(json.dumps(one_round(sys.argv[sys.argv.index("--variant") + 1] == "held", "--smoke" in sys.argv)))
    else:
        main()
