"""The benchmarks' median interval (benchmarks/_common.py: median_interval), on hand-computed cases and by Monte
Carlo coverage. _common sets the process's torch threads when imported, so it runs in a child interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

CHILD = """
import json, sys
import numpy as np
from scipy.stats import binom
sys.path.insert(0, sys.argv[1])
from _common import median_interval

out = {"ten": median_interval(np.arange(10, 0, -1)), "five": median_interval(np.arange(5)), "six": median_interval([3, 1, 2, 6, 5, 4]),
       "empty": median_interval([]), "ninety": median_interval(np.arange(10), level=0.9)}
rng = np.random.default_rng(0)
trials, n = 4000, 50
hits = 0
for _ in range(trials):
    low, high = median_interval(rng.exponential(size=n))
    hits += low <= np.log(2) <= high
j = 0
while binom.cdf(j + 1, n, 0.5) <= 0.025:
    j += 1
out["coverage"], out["exact"] = hits / trials, 1 - 2 * binom.cdf(j, n, 0.5)
print(json.dumps(out))
"""


def test_median_interval_by_hand_and_by_coverage():
    done = subprocess.run([sys.executable, "-c", CHILD, str(BENCHMARKS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # n = 10: P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024, so x_(2) and x_(9) (coverage 1 - 22/1024)
    assert out["ten"] == [2, 9]
    assert out["five"] is None and out["empty"] is None  # P(B <= 0) = 1/32 > 0.025: no 95% interval from 5 values
    assert out["six"] == [1, 6]  # P(B <= 0) = 1/64: the extremes
    # at 90%, n = 10: P(B <= 1) = 0.0107 <= 0.05 < P(B <= 2) = 0.0547, the same order statistics
    assert out["ninety"] == [1, 8]
    # 4,000 samples of 50 exponentials (median ln 2): the coverage is the exact binomial one, within 4 standard errors
    exact, se = out["exact"], (out["exact"] * (1 - out["exact"]) / 4000) ** 0.5
    assert exact >= 0.95 and abs(out["coverage"] - exact) <= 4 * se
