"""The data types every layer shares: a dataset with its test split, and its partition into clients.

A :class:`FederatedData` stays compact at a million clients: one index array grouped by client and
an offsets array (client ``k`` owns ``order[offsets[k]:offsets[k+1]]``), never a Python list of arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence, TypeAlias

import numpy as np

from fedsample.data.checks import check_indices, check_split
from fedsample.data.stats import PartitionStats, partition_stats
from fedsample.runtime.records import JSON

__all__ = ["Dataset", "FederatedData", "Meta", "Task"]

#: What a loader knows beside the arrays, by name: per-row columns (numpy arrays: client ids, feature scales) and
#: JSON values (the source, label names).
Meta: TypeAlias = dict[str, "JSON | np.ndarray"]

Task = Literal["classification", "regression"]
"""What a dataset's labels are: classes (integers) or real values."""


@dataclass(frozen=True)
class Dataset:
    """Arrays of a dataset with a fixed train/test split.

    ``x_*`` are float32 arrays of shape ``(n, *input_shape)`` (int64 token ids for text loaded with
    ``representation="tokens"``); ``y_*`` are int64 class labels for classification and float32 targets for
    regression (``num_classes == 0``).

    Construction checks both splits (:func:`~fedsample.data.checks.check_split`): NaN or infinite features,
    non-finite targets and labels outside ``0..num_classes-1`` are one ValueError naming the rows.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    task: Task = "classification"
    meta: Meta = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if len(self.x_train) != len(self.y_train):
            raise ValueError(f"dataset {self.name!r}: x_train has {len(self.x_train)} rows, y_train {len(self.y_train)}")
        if len(self.x_test) != len(self.y_test):
            raise ValueError(f"dataset {self.name!r}: x_test has {len(self.x_test)} rows, y_test {len(self.y_test)}")
        check_split(f"dataset {self.name!r}, training split", self.x_train, self.y_train, self.num_classes, self.task)
        check_split(f"dataset {self.name!r}, test split", self.x_test, self.y_test, self.num_classes, self.task)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def num_train(self) -> int:
        return len(self.y_train)


@dataclass(frozen=True)
class FederatedData:
    """A dataset's training split divided among clients.

    ``order`` lists training-row indices grouped by client; client ``k`` owns
    ``order[offsets[k]:offsets[k + 1]]``. ``user_ids`` optionally names each client (natural partitions).

    Construction checks that every index is a training row; :func:`~fedsample.data.partition.partition`
    checks more (each row at most once, no empty client), which a hand-built federation need not satisfy
    (a worker's shard holds other workers' clients as empty ones).
    """

    dataset: Dataset
    order: np.ndarray
    offsets: np.ndarray
    scheme: str = ""
    user_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets)
        if offsets.ndim != 1 or len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != len(self.order):
            raise ValueError("offsets must start at 0, end at len(order) and list at least one client")
        if np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must be non-decreasing")
        check_indices(f"partition {self.scheme or '(unnamed)'} of dataset {self.dataset.name!r}", self.order, self.dataset.num_train)

    @classmethod
    def from_client_indices(
        cls, dataset: Dataset, indices: Sequence[np.ndarray], scheme: str = "", user_ids: np.ndarray | None = None
    ) -> "FederatedData":
        """Build the compact form from one index array per client."""
        sizes = np.fromiter((len(ix) for ix in indices), dtype=np.int64, count=len(indices))
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        order = np.concatenate([np.asarray(ix, dtype=np.int64) for ix in indices]) if len(indices) else np.zeros(0, np.int64)
        return cls(dataset=dataset, order=order, offsets=offsets, scheme=scheme, user_ids=user_ids)

    @classmethod
    def from_assignment(cls, dataset: Dataset, client_of_row: np.ndarray, num_clients: int, scheme: str = "") -> "FederatedData":
        """Build from a client id per training row (rows with id < 0 are left out)."""
        client_of_row = np.asarray(client_of_row, dtype=np.int64)
        kept = np.flatnonzero(client_of_row >= 0)
        order = kept[np.argsort(client_of_row[kept], kind="stable")]
        sizes = np.bincount(client_of_row[kept], minlength=num_clients)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return cls(dataset=dataset, order=order, offsets=offsets, scheme=scheme)

    @property
    def num_clients(self) -> int:
        return len(self.offsets) - 1

    def client_indices(self, k: int) -> np.ndarray:
        """Training-row indices of client ``k``."""
        return self.order[self.offsets[k] : self.offsets[k + 1]]

    def client_arrays(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        ix = self.client_indices(k)
        return self.dataset.x_train[ix], self.dataset.y_train[ix]

    def sizes(self) -> np.ndarray:
        """True client sizes. Simulation and reporting code only: a strategy never calls this."""
        return np.diff(self.offsets)

    def to_client_indices(self) -> list[np.ndarray]:
        return [self.client_indices(k) for k in range(self.num_clients)]

    def client_of_row(self) -> np.ndarray:
        """The client of each training row (-1 for rows no client holds)."""
        owner = np.full(self.dataset.num_train, -1, dtype=np.int64)
        owner[self.order] = np.repeat(np.arange(self.num_clients, dtype=np.int64), self.sizes())
        return owner

    def label_counts(self) -> np.ndarray:
        """``(num_clients, num_classes)`` int64 counts of each label on each client (classification only)."""
        if self.dataset.task != "classification" or self.dataset.num_classes < 1:
            raise ValueError(f"label_counts: dataset {self.dataset.name!r} is a {self.dataset.task} dataset without class labels")
        c = self.dataset.num_classes
        clients = np.repeat(np.arange(self.num_clients, dtype=np.int64), self.sizes())
        labels = np.asarray(self.dataset.y_train, dtype=np.int64)[self.order]
        return np.bincount(clients * c + labels, minlength=self.num_clients * c).reshape(self.num_clients, c)

    def stats(self) -> PartitionStats:
        """JSON-able statistics: client sizes, per-client label counts, an imbalance summary."""
        return partition_stats(self)

    def pooled(self) -> "FederatedData":
        """All clients' data held by one client (centralized training)."""
        return FederatedData(self.dataset, self.order, np.array([0, len(self.order)], dtype=np.int64), scheme="pooled")
