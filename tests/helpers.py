"""Small shared fixtures for the tests: tiny datasets and federations built in memory."""

from __future__ import annotations

import numpy as np

from fedsample.data.types import Dataset, FederatedData


def blobs(n: int = 240, d: int = 6, classes: int = 3, seed: int = 0, test: int = 60) -> Dataset:
    """Gaussian blobs, linearly separable enough for a few SGD steps to help."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(classes, d))
    y = rng.integers(0, classes, n + test)
    x = (centers[y] + rng.normal(0, 1, size=(n + test, d))).astype(np.float32)
    return Dataset("blobs", x[:n], y[:n].astype(np.int64), x[n:], y[n:].astype(np.int64), classes)


def federate(ds: Dataset, sizes: list[int]) -> FederatedData:
    """Clients holding consecutive blocks of the given sizes."""
    assert sum(sizes) <= ds.num_train
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return FederatedData.from_client_indices(ds, [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])])
