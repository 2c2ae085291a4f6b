"""The validation split: a fraction of the training data carved off before partitioning, to select on.

It is stratified by label (each class gives the same fraction, rounded), drawn with the partition seed, and
disjoint from the test split and from every client's data. Scoring a run on it uses no random draw, so it
changes neither the run's numbers nor its random streams.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from fedsample import checks
from fedsample.data.types import Dataset
from fedsample.evaluation import evaluate

__all__ = ["FRACTION", "Validation", "carve_validation", "validation_metrics"]

VALIDATION_PURPOSE = 0x7A11D  # the carve's own SeedSequence entry: not any partition's stream
#: The fraction of the training data carved off: strictly between 0 and 1.
FRACTION = checks.reals(0, 1, "()")


@dataclass(frozen=True)
class Validation:
    """The carved rows: ``rows`` are their positions in the original training arrays."""

    x: np.ndarray
    y: np.ndarray
    rows: np.ndarray


def validation_rows(y: np.ndarray, fraction: float, seed: int, stratified: bool = True) -> np.ndarray:
    """Sorted positions of the validation rows: round(fraction * n_c) random rows of every class c
    (or round(fraction * n) of all rows when not ``stratified``, e.g. regression)."""
    checks.check("fraction", fraction, FRACTION, owner="validation")
    rng = np.random.default_rng([int(seed), VALIDATION_PURPOSE])
    groups = [np.flatnonzero(y == c) for c in np.unique(y)] if stratified else [np.arange(len(y))]
    chosen = [rng.permutation(rows)[: int(round(fraction * len(rows)))] for rows in groups]
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def carve_validation(dataset: Dataset, fraction: float, seed: int) -> tuple[Dataset, Validation]:
    """The dataset without the validation rows (train rows keep their order), and the validation rows."""
    rows = validation_rows(dataset.y_train, fraction, seed, stratified=dataset.task != "regression")
    if len(rows) == 0 or len(rows) == dataset.num_train:
        raise ValueError(f"validation fraction {fraction} of {dataset.num_train} training rows leaves no validation or no training data")
    keep = np.ones(dataset.num_train, dtype=bool)
    keep[rows] = False
    meta = {key: per_train_row(key, value, dataset.num_train, keep) for key, value in dataset.meta.items()}
    train = dataclasses.replace(dataset, x_train=dataset.x_train[keep], y_train=dataset.y_train[keep], meta=meta)
    return train, Validation(dataset.x_train[rows], dataset.y_train[rows], rows)


def per_train_row(key: str, value: object, num_train: int, keep: np.ndarray) -> object:
    """A ``meta`` entry with one value per training row (e.g. ``client_ids``, which a natural partition reads)
    keeps the training rows' values; per-test-row entries (``*_test``) and everything else are unchanged."""
    if isinstance(value, np.ndarray) and value.shape[:1] == (num_train,) and not key.endswith("_test"):
        return value[keep]
    return value


def validation_metrics(module: torch.nn.Module, params: dict[str, torch.Tensor], validation: Validation, dataset: Dataset) -> dict[str, float]:
    """The run's metrics on the validation rows (on the parameters' device)."""
    device = next(iter(params.values())).device
    x = torch.as_tensor(validation.x, device=device)
    y = torch.as_tensor(validation.y, device=device)
    return evaluate(module.to(device), params, x, y, dataset.task, dataset.num_classes)
