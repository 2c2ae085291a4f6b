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
  inside [0.67 K, 1.5 K] (also an oracle).

The last two columns bound what any rule that chooses M (privately, from the data) can reach.

    python benchmarks/first_round.py [--draws 1000] [--smoke]
"""

from __future__ import annotations

import numpy as np
from _common import arguments, emit, footer, header

from fedsample.budget import BUDGET_RANGE
from fedsample.data.partition import Dirichlet, LogNormalSizes, Natural, Shards, partition
from fedsample.data.types import Dataset
from fedsample.privacy.size_estimate import best_M, first_round_budget, rmse_M

ROWS, CLASSES, EPSILON, K = 60_000, 10, 3.0, 2048


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


def summary(budget: np.ndarray) -> str:
    q10, q50, q90 = np.quantile(budget, [0.1, 0.5, 0.9])
    return f"{inside(budget):.0%} ({q10:.2f} / {q50:.2f} / {q90:.2f})"


def best_in_range(sizes: np.ndarray, draws: int, rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """The grid M (40 values, geometric, 2 .. largest size + 1) whose first-round budgets fall in range most often."""
    grid = np.unique(np.round(np.geomspace(2, int(sizes.max()) + 1, 40)).astype(int))
    found = [(M, first_round_budget(sizes, EPSILON, int(M), K, draws, rng)) for M in grid]
    return max(found, key=lambda pair: inside(pair[1]))


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args()
    draws = 50 if args.smoke else args.draws
    header(args.smoke)
    data, rng = labelled_rows(), np.random.default_rng(0)
    emit("budget range (x K)", f"{BUDGET_RANGE[0]} .. {BUDGET_RANGE[1]}")
    print("\nshare of draws with E[S]/K inside the range (10% / 50% / 90% quantiles of E[S]/K)\n")
    print("| partition | clients | largest client's share | M='rmse' (prior) | oracle RMSE M | best M for the range |")
    print("|---|---|---|---|---|---|")
    for name, scheme in FAMILIES.items():
        sizes = np.diff(partition(data, scheme, seed=0).offsets)
        prior = rmse_M(len(sizes), EPSILON, 2.0, 4.0)
        oracle = best_M(sizes, EPSILON)
        best, best_budget = best_in_range(sizes, draws, rng)
        cells = [f"M = {M}: {summary(first_round_budget(sizes, EPSILON, M, K, draws, rng))}" for M in (prior, oracle)]
        print(f"| {name} | {len(sizes)} | {sizes.max() / sizes.sum():.0%} | {cells[0]} | {cells[1]} | "
              f"M = {best}: {summary(best_budget)} |", flush=True)
    footer()


if __name__ == "__main__":
    main()
