"""Seconds per call of each sampling design over 10^6 units (prints `name: value` lines).

Run: python benchmarks/design_million_units.py
"""

import numpy as np
from _common import best_of, emit

from fedsample.sampling import design as d


def main() -> None:
    rng = np.random.default_rng(0)
    N = 1_000_000
    w = rng.lognormal(0, 2, N)
    strata = rng.integers(0, 20, N)
    alloc = d.allocate_neyman(np.bincount(strata, minlength=20), rng.uniform(0.5, 2, 20), 2000)
    calls = {
        "systematic_sample_1000_of_1m_s": lambda: d.systematic_sample(w, 1000, rng),
        "stratified_srs_1m_s": lambda: d.stratified(strata, alloc, rng),
        "stratified_weighted_1m_s": lambda: d.stratified(strata, alloc, rng, weights=w),
        "poisson_1m_s": lambda: d.poisson(d.inclusion_probabilities(w, 1000), rng),
        "pps_with_replacement_1m_s": lambda: d.pps_with_replacement(w, 1000, rng),
    }
    for name, call in calls.items():
        emit(name, best_of(call, repeats=3, warmup=0))


if __name__ == "__main__":
    main()
