"""Datasets loaded by name, offline."""

from __future__ import annotations

from typing import Callable

import numpy as np

from fedsample.data.types import Dataset


def _split(name: str, x: np.ndarray, y: np.ndarray, num_classes: int, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """A fixed stratified train/test split (the same for every run)."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for label in np.unique(y):
        rows = np.flatnonzero(y == label)
        test[rng.choice(rows, size=int(round(test_fraction * len(rows))), replace=False)] = True
    return Dataset(name, x[~test], y[~test], x[test], y[test], num_classes)


def load_digits() -> Dataset:
    """scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), scaled to [0, 1], shape (1, 8, 8)."""
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    return _split("digits", x, bunch.target.astype(np.int64), 10)


LOADERS: dict[str, Callable[..., Dataset]] = {"digits": load_digits}


def available_datasets() -> list[str]:
    return sorted(LOADERS)


def load_dataset(name: str, **options) -> Dataset:
    """Load a dataset by name; an unknown name lists the known ones."""
    if name not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(available_datasets())}")
    return LOADERS[name](**options)
