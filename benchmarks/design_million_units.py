"""Seconds per call of each sampling design over 10^6 units (prints `name: value` lines).

Run: python benchmarks/design_million_units.py [--smoke]
"""

import numpy as np
from _common import arguments, best_of, emit, footer, header

from fedsample.sampling import design as d


def main(smoke: bool) -> None:
    header(smoke)
    rng = np.random.default_rng(0)
    N, n = (10_000, 100) if smoke else (1_000_000, 1000)
    w = rng.lognormal(0, 2, N)
    strata = rng.integers(0, 20, N)
    alloc = d.allocate_neyman(np.bincount(strata, minlength=20), rng.uniform(0.5, 2, 20), 2 * n)
    units = "1m" if N == 1_000_000 else f"{N}"
    calls = {
        f"systematic_sample_{n}_of_{units}_s": lambda: d.systematic_sample(w, n, rng),
        f"stratified_srs_{units}_s": lambda: d.stratified(strata, alloc, rng),
        f"stratified_weighted_{units}_s": lambda: d.stratified(strata, alloc, rng, weights=w),
        f"poisson_{units}_s": lambda: d.poisson(d.inclusion_probabilities(w, n), rng),
        f"pps_with_replacement_{units}_s": lambda: d.pps_with_replacement(w, n, rng),
    }
    for name, call in calls.items():
        emit(name, best_of(call, repeats=3, warmup=0))
    footer()


if __name__ == "__main__":
    main(arguments(__doc__).parse_args().smoke)
