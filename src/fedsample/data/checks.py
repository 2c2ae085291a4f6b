"""The one place where data are checked, so that bad data are named as bad data when they are loaded.

* :func:`check_split` — one split of a dataset: NaN or infinite features, non-finite regression targets,
  class labels that are not integers in ``0..C-1``. Called by :class:`~fedsample.data.types.Dataset` for
  both splits (so by every loader, generator and hand-built dataset), and by the file readers with the
  file's name (so the message names the file).
* :func:`check_partition` — a partition of the training rows: every index a training row, every row held
  at most once, no client without samples. Called by :func:`~fedsample.data.partition.partition` for every
  scheme; :class:`~fedsample.data.types.FederatedData` itself checks only that indices are training rows
  (engines build shards whose other clients are empty on purpose).

Each problem is one ``ValueError`` line naming where (the dataset and split, the file, or the partition),
the first few offending rows or clients and how many there are. The checks are one or two passes over the
arrays (a min/max first, the per-row search only when that finds something): negligible next to loading.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["check_finite", "check_indices", "check_labels", "check_partition", "check_split", "listed"]

SHOWN = 5  # rows or clients named in a message; the count gives the rest


def listed(indices: np.ndarray, noun: str) -> str:
    """``"3 rows (4, 17, 230)"`` or ``"1,204 rows (0, 3, 9, 12, 40, ...)"``: the count and the first few."""
    indices = np.asarray(indices)
    count = len(indices)
    head = ", ".join(str(int(i)) for i in indices[:SHOWN]) + (", ..." if count > SHOWN else "")
    return f"{count:,} {noun}{'' if count == 1 else 's'} ({head})"


def nonfinite_rows(values: ArrayLike) -> np.ndarray:
    """Indices of the rows (first axis) of ``values`` that hold a NaN or an infinity; none for integer data."""
    a = np.asarray(values)
    if a.size == 0 or a.dtype.kind not in "fc":
        return np.zeros(0, dtype=np.int64)
    if np.isfinite(a.min()) and np.isfinite(a.max()):  # NaN propagates through min and max: one cheap pass each
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(~np.isfinite(a).reshape(len(a), -1).all(axis=1))


def check_finite(where: str, what: str, values: ArrayLike, lines: ArrayLike | None = None) -> None:
    """One ValueError naming the rows of ``values`` that hold a NaN or an infinity (or, given ``lines``,
    the line of a text file that each row came from)."""
    rows = nonfinite_rows(values)
    if len(rows):
        named = listed(rows, "row") if lines is None else listed(np.asarray(lines)[rows], "line")
        raise ValueError(f"{where}: {named} with NaN or infinite {what}; expected finite numbers")


def check_labels(where: str, labels: ArrayLike, num_classes: int, first: int = 0) -> None:
    """One ValueError naming the rows whose class label is not an integer in ``first..first+num_classes-1``
    (``first`` is the label of class 0 as a file stores it, e.g. 1 for EMNIST letters)."""
    y = np.asarray(labels)
    last = first + num_classes - 1
    if y.dtype.kind not in "buif":
        raise ValueError(f"{where}: labels of type {y.dtype}; expected integer class labels {first}..{last}")
    if y.size == 0:
        return
    if y.dtype.kind in "bui" and y.min() >= first and y.max() <= last:
        return
    with np.errstate(invalid="ignore"):
        good = (y >= first) & (y <= last) & (y == np.round(y))
    rows = np.flatnonzero(~good.reshape(len(y), -1).all(axis=1))
    if len(rows) == 0:
        return
    shown = ", ".join(f"{v:g}" for v in y.reshape(len(y), -1)[rows[:SHOWN], 0].astype(np.float64))
    raise ValueError(f"{where}: {listed(rows, 'row')} with a label not in {first}..{last} (labels {shown}"
                     f"{', ...' if len(rows) > SHOWN else ''}); expected integer class labels {first}..{last}")


def check_split(where: str, x: ArrayLike, y: ArrayLike, num_classes: int, task: str) -> None:
    """Every row of one split usable: finite features, and finite targets (regression) or integer class
    labels in ``0..num_classes-1`` (classification). One ValueError naming the first rows otherwise."""
    if task not in ("classification", "regression"):
        raise ValueError(f"{where}: task {task!r}; expected 'classification' or 'regression'")
    if task == "classification" and num_classes < 1:
        raise ValueError(f"{where}: num_classes {num_classes} for a classification dataset; expected >= 1 "
                         "(or task='regression' with num_classes 0)")
    check_finite(where, "features", x)
    if task == "classification":
        check_labels(where, y, num_classes)
    else:
        check_finite(where, "targets", y)


def check_indices(where: str, order: np.ndarray, num_train: int) -> None:
    """One ValueError naming the positions of ``order`` that are not training rows ``0..num_train-1``."""
    order = np.asarray(order)
    if order.size and order.dtype.kind not in "ui":
        raise ValueError(f"{where}: row indices of type {order.dtype}; expected integers")
    if order.size == 0 or (order.min() >= 0 and order.max() < num_train):
        return
    bad = np.flatnonzero((order < 0) | (order >= num_train))
    raise ValueError(f"{where}: {listed(bad, 'position')} of the client rows outside 0..{num_train - 1} "
                     f"(indices {', '.join(str(int(v)) for v in order[bad[:SHOWN]])}); expected training rows")


def check_partition(where: str, order: np.ndarray, offsets: np.ndarray, num_train: int) -> None:
    """A partition in the strict sense: every index a training row, every row held by at most one client
    (and at most once), and every client holding at least one row. One ValueError otherwise."""
    check_indices(where, order, num_train)
    counts = np.bincount(np.asarray(order, dtype=np.int64), minlength=num_train)
    repeated = np.flatnonzero(counts > 1)
    if len(repeated):
        raise ValueError(f"{where}: {listed(repeated, 'row')} assigned more than once; expected each sample at most once")
    empty = np.flatnonzero(np.diff(np.asarray(offsets)) == 0)
    if len(empty):
        raise ValueError(f"{where}: {listed(empty, 'client')} without samples; expected every client to hold at least one")
