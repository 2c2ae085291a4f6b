"""Start-up pays only for what a run uses; evaluation's macro-F1 matches scikit-learn's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsample.evaluation import macro_f1

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import sys
import numpy as np
import fedsample as fs
from fedsample.data.types import Dataset, FederatedData
rng = np.random.default_rng(0)
x = rng.normal(size=(80, 4)).astype(np.float32); y = rng.integers(0, 3, 80)
ds = Dataset("tiny", x[:60], y[:60], x[60:], y[60:], 3)
fed = FederatedData.from_client_indices(ds, [np.arange(i, i + 6) for i in range(0, 60, 6)])
for backend in ("loop", "vectorized"):
    for strategy in (fs.recipes.fedavg(clients_per_round=3), fs.recipes.fedsampling(K=20, M=10)):
        fs.simulate(strategy, fed, fs.models.MLP(hidden=4), rounds=1, engine=fs.simulation.Engine(backend=backend))
print(",".join(sorted(m for m in ("sklearn", "matplotlib", "flwr", "ray", "torch._dynamo", "pandas") if m in sys.modules)))
"""


def test_a_run_imports_nothing_it_does_not_use():
    """Both backends, FedAvg and FedSampling: no scikit-learn, matplotlib, Flower, Ray or torch._dynamo."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_macro_f1_matches_scikit_learn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(1)
    for classes in (2, 5, 10):
        y_true, y_pred = rng.integers(0, classes, 50), rng.integers(0, max(classes - 1, 1), 50)
        expected = f1_score(y_true, y_pred, average="macro", labels=np.arange(classes), zero_division=0)
        assert macro_f1(y_true, y_pred, classes) == pytest.approx(expected, abs=1e-12)
