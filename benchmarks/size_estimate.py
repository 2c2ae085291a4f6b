"""FedSampling's size estimate at the paper's population, and the remedies side by side (docs/size-estimate.md).

Part 1 (synthetic sizes, seconds): 30,000 clients holding 60,000 samples with log-normal(sigma 4) sizes (Qi et
al. 2023, §4.1: Fashion-MNIST, mean 2 per client), eps = 3. For M in {20, 100, 300, rmse}: N~/N's mean, sd and
RMSE (the clamped N~ the library uses), the formula's RMSE (raw N~), and how often N~ is floored at the number
of answers. Then, for each option, the RMSE of the round's effective step size S/K (S the samples drawn: the
update is lr * (S/K) * mean drawn gradient; 1 is centralized SGD with batch K; normalize="drawn" makes it 1).

Part 2 (``--accuracy``, minutes): Fashion-MNIST logistic regression, the same partition, the options trained
side by side (vectorized engine), final test accuracy per seed.

    python benchmarks/size_estimate.py [--draws 2000] [--accuracy --rounds 30 --seeds 0 1] [--smoke]

``--smoke``: 50 draws, and part 2 at 2 rounds on Fashion-MNIST's first rows (seconds; figures not meaningful).
"""

from __future__ import annotations

import time

import numpy as np
from _common import arguments, emit, footer, header, progress

from fedsample import privacy

from fedsample.privacy import size_estimate
from fedsample.data.partition import LogNormalSizes
from fedsample.simulation import Engine

CLIENTS, MEAN, SIGMA, EPSILON, K = 30_000, 2.0, 4.0, 3.0, 2048


def population(seed: int = 0) -> np.ndarray:
    return LogNormalSizes(MEAN, SIGMA).sizes(int(CLIENTS * MEAN), np.random.default_rng(seed))


def clamped(totals: np.ndarray, clients: int) -> np.ndarray:
    return np.maximum(totals, clients)


def estimate_table(sizes: np.ndarray, Ms: dict[str, int], draws: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per M: the statistics of N~/N; returns each M's clamped draws for the step-size table."""
    N, C = sizes.sum(), len(sizes)
    out = {}
    print(f"| M | alpha | clipped total / N | mean N~/N | sd N~/N | RMSE N~/N | formula RMSE (raw) / N | floored at {C} |")
    print("|---|---|---|---|---|---|---|---|")
    for name, M in Ms.items():
        raw = size_estimate.simulated_totals(sizes, EPSILON, M, draws, rng)
        est = clamped(raw, C) / N
        out[name] = clamped(raw, C)
        print(
            f"| {name} | {privacy.alpha_for(EPSILON, M):.4f} | {privacy.clip_size(sizes, M).sum() / N:.3f} | {est.mean():.3f} | "
            f"{est.std(ddof=1):.3f} | {np.sqrt(np.mean((est - 1) ** 2)):.3f} | {size_estimate.estimator_rmse(sizes, EPSILON, M) / N:.3f} | "
            f"{np.mean(raw < C):.1%} |"
        )
    return out


def drawn(N: int, totals: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """S ~ Binomial(N, min(1, K / N~)) per estimate."""
    return rng.binomial(N, np.minimum(1.0, K / totals))


def step_rows(sizes: np.ndarray, totals: dict[str, np.ndarray], Ms: dict[str, int], draws: int, rng: np.random.Generator) -> list:
    """(option, what it changes, mean S/K, RMSE of S/K - 1, privacy per client after T rounds)."""
    N = int(sizes.sum())
    rows = []
    for name in ("300", "rmse"):
        step = drawn(N, totals[name], rng) / K
        rows.append((f"M = {Ms[name]}" + (" (paper)" if name == "300" else " (M='rmse')"), step, "eps (permanent) or T*eps (fresh)"))
    step = drawn(N, np.full(draws, float(N)), rng) / K
    rows.append(("sizes='exact' (control)", step, "none: sizes revealed"))
    for A in (5, 20):  # average A fresh estimates at M = 300 (their means, from the same kind of draws)
        raw = size_estimate.simulated_totals(sizes, EPSILON, Ms["300"], draws * A, rng).reshape(draws, A).mean(1)
        step = drawn(N, clamped(raw, len(sizes)), rng) / K
        rows.append((f"M = 300, permanent=False, average={A}", step, "T*eps (fresh reports every round)"))
    S = drawn(N, totals["300"], rng)
    rows.append(("M = 300, normalize='drawn'", np.where(S > 0, 1.0, 0.0), "eps (+ the summed count S, via the secure sum)"))
    rows.append(("M = 300, reuse=R (fresh)", drawn(N, totals["300"], rng) / K, "ceil(T/R)*eps; same per-round error"))
    return rows


def print_steps(rows: list) -> None:
    print("| option | mean S/K | RMSE of S/K - 1 | median S/K | size-report privacy |")
    print("|---|---|---|---|---|")
    for name, step, cost in rows:
        print(f"| {name} | {step.mean():.3f} | {np.sqrt(np.mean((step - 1) ** 2)):.3f} | {np.median(step):.3f} | {cost} |")


OPTIONS = {
    "paper (M=300)": dict(M=300),
    "M='rmse'": dict(M="rmse", size_prior=(MEAN, SIGMA)),
    "sizes='exact'": dict(sizes="exact"),
    "fresh reports (permanent=False)": dict(M=300, permanent=False),
    "normalize='drawn'": dict(M=300, normalize="drawn"),
    "fresh, average=5": dict(M=300, permanent=False, average=5),
    "fresh, reuse=5": dict(M=300, permanent=False, reuse=5),
}


def accuracy(rounds: int, seeds: list[int], lr: float, smoke: bool = False) -> None:
    """Fashion-MNIST logreg on the paper's partition, each option: final test accuracy per seed, its mean and
    sample sd (ddof = 1), and the mean effective step E[S]/K = ratio * N / K over the run's rounds."""
    from _common import dataset

    import fedsample as fs
    from fedsample.data import partition

    ds = dataset(smoke)
    k = min(K, ds.num_train // 2) if smoke else K  # smoke: Fashion-MNIST's first rows hold fewer than K samples
    model = fs.models.LogisticRegression()
    print(f"| option | {' | '.join(f'seed {s}' for s in seeds)} | mean ± sd | mean E[S]/K | seconds |")
    print("|---|" + "---|" * (len(seeds) + 3))
    for name, options in progress(OPTIONS.items(), lambda item: f"accuracy: {item[0]}, {len(seeds)} seed(s) x {rounds} rounds"):
        accs, steps, t = [], [], time.perf_counter()
        for seed in seeds:
            fed = partition(ds, LogNormalSizes(MEAN, SIGMA), seed=seed)
            strategy = fs.recipes.fedsampling(K=k, epsilon=EPSILON, server_lr=lr, **options)
            result = fs.simulation.simulate(strategy, fed, model, rounds, seed=seed, eval_every=rounds, engine=Engine(backend="vectorized"))
            accs.append(result.history[-1]["accuracy"])
            steps += [h["ratio"] * ds.num_train / k for h in result.history]
        cells = " | ".join(f"{a:.3f}" for a in accs)
        sd = np.std(accs, ddof=1) if len(accs) > 1 else float("nan")
        print(f"| {name} | {cells} | {np.mean(accs):.3f} ± {sd:.3f} | {np.mean(steps):.2f} | {time.perf_counter() - t:.0f} |", flush=True)


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    if args.smoke:
        args.draws, args.accuracy, args.rounds, args.seeds = 50, True, 2, [0, 1]
    header(args.smoke)
    rng = np.random.default_rng(0)
    sizes = population()
    Ms = {"20": 20, "100": 100, "300": 300, "rmse": size_estimate.rmse_M(CLIENTS, EPSILON, MEAN, SIGMA)}
    emit("clients", len(sizes))
    emit("samples", int(sizes.sum()))
    emit("largest client", int(sizes.max()))
    emit("M by rmse (prior: log-normal mean 2, sigma 4)", Ms["rmse"])
    emit("M by rmse (oracle: the true sizes)", size_estimate.best_M(sizes, EPSILON))
    totals = estimate_table(sizes, Ms, args.draws, rng)
    print()
    print_steps(step_rows(sizes, totals, Ms, args.draws, rng))
    if args.accuracy:
        print()
        accuracy(args.rounds, args.seeds, args.lr, args.smoke)
    footer()


if __name__ == "__main__":
    main()
