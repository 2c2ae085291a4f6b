"""Statistics of a partition: client sizes, label mixes, imbalance summaries (numpy only).

A leaf module: it imports nothing from fedsample, and :mod:`fedsample.data.types` imports it
(``FederatedData.stats()``), so imports between the two go one way only.
"""

from __future__ import annotations

from typing import Protocol, TypedDict

import numpy as np

__all__ = ["Imbalance", "LabelMix", "PartitionStats", "SizeSummary", "gini", "partition_stats"]


class Source(Protocol):
    """What the statistics read of a partition's dataset (a :class:`~fedsample.data.types.Dataset`)."""

    @property
    def name(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def num_classes(self) -> int: ...
    @property
    def num_train(self) -> int: ...


class Partition(Protocol):
    """What the statistics read of a partition (a :class:`~fedsample.data.types.FederatedData`)."""

    @property
    def dataset(self) -> Source: ...
    @property
    def order(self) -> np.ndarray: ...
    @property
    def scheme(self) -> str: ...
    @property
    def user_ids(self) -> np.ndarray | None: ...
    @property
    def num_clients(self) -> int: ...
    def sizes(self) -> np.ndarray: ...
    def label_counts(self) -> np.ndarray: ...


class SizeSummary(TypedDict):
    """:func:`size_summary`: the clients' sizes summarized (None where a ratio or a log is undefined: an empty client)."""

    num_clients: int
    total: int
    min: int
    max: int
    mean: float
    std: float
    p10: float
    p25: float
    median: float
    p75: float
    p90: float
    cv: float
    gini: float
    max_min_ratio: float | None
    log_mean: float | None
    log_std: float | None


class LabelMix(TypedDict):
    """:func:`label_mix_summary`: how skewed the clients' label mixes are."""

    num_classes: int
    mean_classes_per_client: float
    mean_dominant_share: float
    mean_normalized_entropy: float
    mean_tv_to_global: float
    global_label_counts: list[int]


class Imbalance(TypedDict):
    """The size imbalance measures of :class:`PartitionStats`."""

    gini: float
    cv: float
    max_min_ratio: float | None
    max_mean_ratio: float | None


class PartitionStats(TypedDict):
    """:func:`partition_stats`: a partition's JSON-able statistics."""

    dataset: str
    scheme: str
    task: str
    num_clients: int
    num_train: int
    num_assigned: int
    num_unassigned: int
    sizes: SizeSummary
    imbalance: Imbalance
    client_sizes: list[int]
    label_counts: list[list[int]] | None
    label_mix: LabelMix | None
    user_ids: list[str] | None


def gini(values: np.ndarray) -> float:
    """Gini coefficient of non-negative values: 0 when all are equal, towards 1 when one holds everything."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    n, total = len(v), v.sum()
    if n == 0 or total == 0:
        return 0.0
    return float(2.0 * np.sum(np.arange(1, n + 1) * v) / (n * total) - (n + 1) / n)


def size_summary(sizes: np.ndarray) -> SizeSummary:
    """Count, total, min/max/mean/median/std, quantiles, and the imbalance measures of client sizes."""
    s = np.asarray(sizes, dtype=np.float64)
    if len(s) == 0:
        raise ValueError("size_summary: no clients")
    mean = float(s.mean())
    q = np.quantile(s, [0.1, 0.25, 0.5, 0.75, 0.9])
    return {
        "num_clients": int(len(s)),
        "total": int(s.sum()),
        "min": int(s.min()),
        "max": int(s.max()),
        "mean": mean,
        "std": float(s.std()),
        "p10": float(q[0]), "p25": float(q[1]), "median": float(q[2]), "p75": float(q[3]), "p90": float(q[4]),
        "cv": float(s.std() / mean) if mean > 0 else 0.0,
        "gini": gini(s),
        "max_min_ratio": float(s.max() / s.min()) if s.min() > 0 else None,
        "log_mean": float(np.log(s[s > 0]).mean()) if np.any(s > 0) else None,
        "log_std": float(np.log(s[s > 0]).std()) if np.any(s > 0) else None,
    }


def label_mix_summary(counts: np.ndarray) -> LabelMix:
    """How skewed the clients' label mixes are, from a ``(clients, classes)`` count matrix (empty clients skipped)."""
    counts = np.asarray(counts, dtype=np.float64)
    sizes = counts.sum(axis=1)
    nonempty = counts[sizes > 0]
    p = nonempty / nonempty.sum(axis=1, keepdims=True)
    glob = counts.sum(axis=0) / counts.sum()
    c = counts.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    return {
        "num_classes": int(c),
        "mean_classes_per_client": float((nonempty > 0).sum(axis=1).mean()),
        "mean_dominant_share": float(p.max(axis=1).mean()),
        "mean_normalized_entropy": float(ent.mean() / np.log(c)) if c > 1 else 0.0,
        "mean_tv_to_global": float(0.5 * np.abs(p - glob).sum(axis=1).mean()),
        "global_label_counts": [int(v) for v in counts.sum(axis=0)],
    }


def partition_stats(fed: Partition) -> PartitionStats:
    """JSON-able statistics of a partition (a :class:`~fedsample.data.types.FederatedData`).

    Keys: dataset, scheme, task, num_clients, num_train, num_assigned, num_unassigned, sizes (summary),
    imbalance (gini, cv, max/min ratio, max/mean ratio), client_sizes (per client), label_counts (per client
    and label, ``None`` for regression), label_mix (summary, ``None`` for regression), user_ids (natural
    partitions only, as strings).
    """
    sizes = fed.sizes()
    summary = size_summary(sizes)
    classification = fed.dataset.task == "classification" and fed.dataset.num_classes > 0
    counts = fed.label_counts() if classification else None
    label_counts: list[list[int]] | None = counts.tolist() if counts is not None else None  # ints, clients × labels
    return {
        "dataset": fed.dataset.name,
        "scheme": fed.scheme,
        "task": fed.dataset.task,
        "num_clients": fed.num_clients,
        "num_train": fed.dataset.num_train,
        "num_assigned": int(len(fed.order)),
        "num_unassigned": int(fed.dataset.num_train - len(np.unique(fed.order))),
        "sizes": summary,
        "imbalance": {
            "gini": summary["gini"],
            "cv": summary["cv"],
            "max_min_ratio": summary["max_min_ratio"],
            "max_mean_ratio": summary["max"] / summary["mean"] if summary["mean"] > 0 else None,
        },
        "client_sizes": [int(v) for v in sizes],
        "label_counts": label_counts,
        "label_mix": label_mix_summary(counts) if counts is not None else None,
        "user_ids": [str(u) for u in fed.user_ids] if fed.user_ids is not None else None,
    }
