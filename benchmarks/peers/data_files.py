"""The workload files every side reads (written once by run.py with fedsample's loaders): float32 rows in
user order, int64 labels and where they come from. A missing Fashion-MNIST is an error naming the command
that installs it; CIFAR-10 is read from a folder when one is given or found (fedsample's ``cifar10`` loader),
else synthetic rows of CIFAR-10's shape stand in, labelled ``synthetic`` in every result."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workload import CIFAR, Workload

def per_channel_standardized(x: np.ndarray) -> np.ndarray:
    """(x - channel mean) / channel std over all rows and pixels, as pfl's CIFAR-10 preprocessing does."""
    mean = x.mean(axis=(0, 2, 3), dtype=np.float64).reshape(1, -1, 1, 1)
    std = x.std(axis=(0, 2, 3), dtype=np.float64).reshape(1, -1, 1, 1)
    return ((x - mean) / std).astype(np.float32)


def cifar_rows(w: Workload = CIFAR, cifar_dir: str | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """``users × per_user`` CIFAR-10 training images in a seeded random order (IID users), or synthetic
    uint8-valued images and uniform labels of the same shape when CIFAR-10 is not on disk."""
    from fedsample.data import load_dataset

    rng = np.random.default_rng(0)
    n = w.users * w.per_user
    try:
        ds = load_dataset("cifar10", **({"root": cifar_dir} if cifar_dir else {}))
    except FileNotFoundError:
        if cifar_dir:
            raise
        x = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8).astype(np.float32)
        return per_channel_standardized(x), rng.integers(0, 10, size=n).astype(np.int64), "synthetic-cifar10-shape"
    order = rng.permutation(len(ds.y_train))[:n]
    return per_channel_standardized(ds.x_train[order]), ds.y_train[order].astype(np.int64), "cifar10"


def fashion_mnist_rows(w: Workload) -> tuple[np.ndarray, np.ndarray, str]:
    """The first ``users × per_user`` Fashion-MNIST training rows; a missing dataset stops the run (a tiny
    workload, ``--smoke``, uses random images of its shape instead, and says so)."""
    from _common import dataset

    ds = dataset(smoke=w.tiny, rows=w.users * w.per_user)
    n = w.users * w.per_user
    return ds.x_train[:n].astype(np.float32), ds.y_train[:n].astype(np.int64), ds.name


def write_rows(path: Path, rows: tuple[np.ndarray, np.ndarray, str]) -> str:
    """Save (x, y, source) where every side can read it; returns the source."""
    x, y, source = rows
    np.savez(path, x=x, y=y, source=np.array(source))
    return source
