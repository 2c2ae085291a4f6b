"""FedSampling's first round: how many samples it draws before any drawn count is seen, per partition family.

Until the first noised drawn count arrives, FedSampling keeps each sample with probability K/N~, N~ the
randomized size reports' estimate (Qi et al. 2023, Eq. 2, floored at the number of clients); from the second
round on the library's default steers by the drawn count instead (``steer=True``). This prints, for the
partition families the library ships (60,000 rows, as Fashion-MNIST: shards 100 x 600, Dirichlet 0.3 over 100
clients, log-normal sizes sigma 4 mean 2 and sigma 3 mean 600, Zipf-sized natural users), the first round's
expected budget E[S]/K = N min(1, K/N~)/K at eps = 3, K = 2048, over ``--draws`` draws of the reports, for
three thresholds M:

- the default, ``M="rmse"`` with the public size prior (2, 4);
- the oracle RMSE-optimal M (:func:`fedsample.privacy.size_estimate.best_M`: it reads the true sizes, so no
  private procedure can choose better for the RMSE);
- the best M for this criterion: the M, searched on a grid up to the largest client, that keeps most draws
  inside [0.67 K, 1.5 K] (also an oracle);
- a private phase, measured here and not offered by the library: each client first sends its log2 size bucket
  min(floor(log2 n), 19) by randomized response over 20 buckets at eps_b = 1, the server de-biases the bucket
  histogram, keeps the buckets more than 3 standard errors above 0, and picks the RMSE-optimal M for clients
  at those buckets' geometric middles (the prior's M where none is kept); the size reports then have eps = 2,
  so the run's total stays 3. One M per draw of the phase (``--draws`` / 20 phases, 20 report draws each);

and the library's default, which asks no size report: N^ = N + N(0, sigma_S^2), the clients' sizes summed inside the
secure sum with Gaussian noise sigma_S = 5 (``total_from="secure_sum"``,
:func:`fedsample.privacy.size_estimate.summed_first_round_budget`).

The oracle columns bound what any rule that chooses M (privately, from the data) can reach. ``--out DIR`` also
writes the table's numbers to DIR/first_round.json (docs/regenerate.py keeps it as the record of
docs/size-estimate.md's table).

    python benchmarks/first_round.py [--draws 1000] [--smoke] [--out DIR]
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from _common import arguments, emit, footer, header

from fedsample.budget import BUDGET_RANGE
from fedsample.data.partition import Dirichlet, LogNormalSizes, Natural, Shards, partition
from fedsample.data.types import Dataset
from fedsample.privacy.reports import alpha_for, randomized_response
from fedsample.privacy.size_estimate import best_M, first_round_budget, rmse_curve, rmse_M, summed_first_round_budget
from fedsample.sampling.data import COUNT_NOISE

ROWS, CLASSES, EPSILON, K = 60_000, 10, 3.0, 2048
BUCKETS, PHASE_EPSILON, KEEP_Z = 20, 1.0, 3.0  # the measured private phase: log2 buckets, its share of eps, its cut


def labelled_rows(seed: int = 7) -> Dataset:
    """60,000 rows with uniform labels (only the labels matter to the partitions)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, ROWS + 10)
    x = np.zeros((ROWS + 10, 1), dtype=np.float32)
    return Dataset("labels", x[:ROWS], y[:ROWS], x[ROWS:], y[ROWS:], CLASSES)


def zipf_users(seed: int = 11) -> np.ndarray:
    """One user id per row with Zipf-like row counts (a few heavy writers, many light ones)."""
    return np.minimum(np.random.default_rng(seed).zipf(1.6, size=ROWS), 500)


FAMILIES = {
    "shards 100 x 600": Shards(600, 1),
    "Dirichlet 0.3, 100 clients": Dirichlet(100, 0.3),
    "log-normal sigma 4, mean 2": LogNormalSizes(mean=2.0, sigma=4.0),
    "log-normal sigma 3, mean 600": LogNormalSizes(mean=600.0, sigma=3.0),
    "natural (Zipf users)": Natural(ids=zipf_users()),
}


def inside(budget: np.ndarray) -> float:
    low, high = BUDGET_RANGE
    return float(np.mean((budget >= low) & (budget <= high)))


def figures(budget: np.ndarray) -> dict:
    """The share of draws in range and the 10% / 50% / 90% quantiles of E[S]/K."""
    q10, q50, q90 = np.quantile(budget, [0.1, 0.5, 0.9])
    return {"inside": inside(budget), "q10": float(q10), "q50": float(q50), "q90": float(q90)}


def summary(cell: dict) -> str:
    return f"{cell['inside']:.0%} ({cell['q10']:.2f} / {cell['q50']:.2f} / {cell['q90']:.2f})"


HEAD = ("| partition | clients | largest client's share | M='rmse' (prior) | oracle RMSE M | best M for the range | "
        "bucket phase (eps 1 + 2) | library default: summed sizes (sigma_S 5) |")


def row(r: dict) -> str:
    """One line of the table from one partition's figures (``rows`` of first_round.json)."""
    return (f"| {r['partition']} | {r['clients']} | {r['largest_share']:.0%} | M = {r['prior_M']}: {summary(r['prior'])} | "
            f"M = {r['oracle_M']}: {summary(r['oracle'])} | M = {r['best_M']}: {summary(r['best'])} | {summary(r['bucket'])} | "
            f"{summary(r['summed'])} |")


def best_in_range(sizes: np.ndarray, draws: int, rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """The grid M (40 values, geometric, 2 .. largest size + 1) whose first-round budgets fall in range most often."""
    grid = np.unique(np.round(np.geomspace(2, int(sizes.max()) + 1, 40)).astype(int))
    found = [(M, first_round_budget(sizes, EPSILON, int(M), K, draws, rng)) for M in grid]
    return max(found, key=lambda pair: inside(pair[1]))


def bucket_phase_M(sizes: np.ndarray, rng: np.random.Generator) -> int:
    """The measured (not offered) private phase: log2 buckets by randomized response at PHASE_EPSILON (Eq. 1 over
    BUCKETS values), the histogram de-biased (E[h_j] = alpha c_j + (1 - alpha) |C| / BUCKETS), buckets above
    KEEP_Z standard errors kept, and the RMSE-optimal M at EPSILON - PHASE_EPSILON for clients at their middles."""
    C, rest = len(sizes), EPSILON - PHASE_EPSILON
    buckets = np.minimum(np.floor(np.log2(sizes)).astype(np.int64), BUCKETS - 1) + 1  # 1 .. BUCKETS
    reports = randomized_response(buckets, PHASE_EPSILON, BUCKETS + 1, rng)
    alpha = alpha_for(PHASE_EPSILON, BUCKETS + 1)
    fake = (1 - alpha) / BUCKETS
    counts = (np.bincount(reports - 1, minlength=BUCKETS) - C * fake) / alpha
    kept = np.where(counts > KEEP_Z * np.sqrt(C * fake * (1 - fake)) / alpha, np.round(counts), 0).astype(np.int64)
    if kept.sum() == 0:
        return rmse_M(C, rest, 2.0, 4.0)
    clients = np.repeat(np.round(2 ** (np.arange(BUCKETS) + 0.5)).astype(np.int64), kept)
    Ms = np.arange(2, int(clients.max()) + 2)
    return int(Ms[np.argmin(rmse_curve(clients, rest, Ms))])


def bucket_phase_budget(sizes: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    phases = max(draws // 20, 1)
    return np.concatenate([first_round_budget(sizes, EPSILON - PHASE_EPSILON, bucket_phase_M(sizes, rng), K, 20, rng)
                           for _ in range(phases)])


def family_row(name: str, sizes: np.ndarray, draws: int, rng: np.random.Generator) -> dict:
    """One partition's figures: each column's M (where it has one) and its :func:`figures`."""
    prior, oracle = rmse_M(len(sizes), EPSILON, 2.0, 4.0), best_M(sizes, EPSILON)
    best, best_budget = best_in_range(sizes, draws, rng)
    return {
        "partition": name, "clients": int(len(sizes)), "largest_share": float(sizes.max() / sizes.sum()),
        "prior_M": int(prior), "prior": figures(first_round_budget(sizes, EPSILON, prior, K, draws, rng)),
        "oracle_M": int(oracle), "oracle": figures(first_round_budget(sizes, EPSILON, oracle, K, draws, rng)),
        "best_M": int(best), "best": figures(best_budget), "bucket": figures(bucket_phase_budget(sizes, draws, rng)),
        "summed": figures(summed_first_round_budget(sizes, COUNT_NOISE, K, draws, rng)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=None, help="also write the table's numbers to OUT/first_round.json")
    args = parser.parse_args(argv)
    draws = 50 if args.smoke else args.draws
    header(args.smoke)
    data, rng = labelled_rows(), np.random.default_rng(0)
    emit("budget range (x K)", f"{BUDGET_RANGE[0]} .. {BUDGET_RANGE[1]}")
    print("\nshare of draws with E[S]/K inside the range (10% / 50% / 90% quantiles of E[S]/K)\n")
    print(HEAD)
    print("|---" * HEAD.count(" | ") + "|---|")
    rows = []
    for name, scheme in FAMILIES.items():
        rows.append(family_row(name, np.diff(partition(data, scheme, seed=0).offsets), draws, rng))
        print(row(rows[-1]), flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        settings = {"rows": ROWS, "K": K, "epsilon": EPSILON, "count_noise": COUNT_NOISE, "draws": draws, "range": list(BUDGET_RANGE)}
        (args.out / "first_round.json").write_text(json.dumps({"settings": settings, "rows": rows}, indent=1) + "\n")
    footer()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
