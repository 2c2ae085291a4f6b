"""Splitting a federation's clients over workers (no Ray here: the Ray federation and its tests use this).

A worker holds a *shard*: a :class:`~fedsample.data.types.FederatedData` that keeps the global client
numbering (so every client still draws from its own (seed, round, client, purpose) stream) but holds only
its own clients' training rows; the other clients are empty in it.
"""

from __future__ import annotations

import numpy as np

from fedsample.data.types import Dataset, FederatedData

__all__ = ["as_range", "assign_clients", "positions_by_worker", "shard_of"]


def assign_clients(num_clients: int, workers: int) -> np.ndarray:
    """The worker of each client: round-robin, ``k mod workers`` (equal counts; any sampled cohort splits
    about evenly)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return np.arange(num_clients, dtype=np.int64) % workers


def shard_of(data: FederatedData, owner: np.ndarray, worker: int) -> FederatedData:
    """``data`` restricted to the clients whose ``owner`` is ``worker``: their rows only (renumbered, in
    client order), the global offsets kept so that client ids mean the same everywhere. The test split is
    left out (the server evaluates)."""
    rows, offsets = shard_rows(data, owner, worker)
    return shard_holding(data, data.dataset.x_train[rows], data.dataset.y_train[rows], offsets)


def shard_rows(data: FederatedData, owner: np.ndarray, worker: int) -> tuple[np.ndarray, np.ndarray]:
    """The training rows of ``worker``'s clients (in client order: what its shard holds) and the shard's
    offsets (global client numbering; the other clients empty)."""
    sizes = data.sizes() * (owner == worker)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return _rows_of(data, np.flatnonzero(owner == worker)), offsets


def shard_holding(data: FederatedData, x: np.ndarray, y: np.ndarray, offsets: np.ndarray) -> FederatedData:
    """A shard of ``data`` (its name, classes, task and partition scheme) holding the rows ``x``, ``y`` in client
    order under ``offsets``; no test split."""
    ds = data.dataset
    held = Dataset(ds.name, x, y, ds.x_test[:0], ds.y_test[:0], ds.num_classes, ds.task, ds.meta)
    return FederatedData(held, np.arange(len(y), dtype=np.int64), offsets, scheme=data.scheme)


def _rows_of(data: FederatedData, clients: np.ndarray) -> np.ndarray:
    """Training rows of ``clients`` (ascending ids) in client order, in one numpy pass."""
    sizes = data.sizes()[clients]
    starts = data.offsets[clients]
    position = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    rows: np.ndarray = data.order[np.repeat(starts, sizes) + position]
    return rows


def positions_by_worker(ids: np.ndarray, owner: np.ndarray, workers: int) -> list[np.ndarray]:
    """For each worker, the cohort positions whose client it holds (in cohort order)."""
    who = owner[np.asarray(ids, dtype=np.int64)]
    order = np.argsort(who, kind="stable")
    cuts = np.searchsorted(who[order], np.arange(workers + 1))
    return [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def as_range(ids: np.ndarray) -> np.ndarray | range:
    """``ids`` as a ``range`` where they are one (every client, split round-robin: a few bytes instead of 8 per
    client), else as they are."""
    if len(ids) < 2:
        return ids
    step = int(ids[1] - ids[0])
    if step > 0 and np.all(np.diff(ids) == step):
        return range(int(ids[0]), int(ids[-1]) + 1, step)
    return ids
