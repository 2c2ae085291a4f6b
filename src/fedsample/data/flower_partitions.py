"""Flower Datasets' partitioners as fedsample partitions (the ``hf`` extra): any row partitioner of
``flwr_datasets.partitioner`` becomes a :class:`~fedsample.data.types.FederatedData` (client → row indices).

A partition comes back from Flower as a ``datasets.Dataset`` of rows, not as row numbers, and some
partitioners reorder their dataset first (ShardPartitioner sorts it by label). So the dataset is given to the
partitioner with one extra column, :data:`ROW_ID` (0..n−1), and each partition's rows are read back from it.
``flwr_datasets`` is imported only here, only when called, with Flower's telemetry off unless the user set
``FLWR_TELEMETRY_ENABLED=1`` (:func:`fedsample.runtime.telemetry.quiet_flower`, called by ``hf_datasets()`` first).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from fedsample.data.hf import COLUMN_PREFIX, EXTRA, from_hf, hf_datasets
from fedsample.data.types import Dataset, FederatedData, Task
from fedsample.runtime.records import JSONObject

__all__ = ["FlowerScheme", "ROW_ID", "from_flwr", "with_row_ids"]

ROW_ID = "__fedsample_row__"
"""The column added to a Hugging Face dataset to carry each row's position through a Flower Datasets partitioner."""
_FLOWER_ERRORS = (ValueError, KeyError, TypeError, IndexError, AttributeError)


def flwr_partitioners() -> Any:
    """``flwr_datasets.partitioner`` (offline, no telemetry), or an ImportError naming the extra."""
    hf_datasets()
    try:
        import flwr_datasets.partitioner as partitioners
    except ImportError:
        raise ImportError(f"Flower Datasets is not installed: {EXTRA}") from None
    return partitioners


def row_partitioners() -> list[str]:
    """Names of Flower's partitioners that divide rows (the vertical ones divide columns)."""
    return [n for n in flwr_partitioners().__all__ if n != "Partitioner" and not n.startswith("Vertical")]


def with_row_ids(dataset: Any) -> Any:
    """``dataset`` (a ``datasets.Dataset`` or ``DatasetDict``) with the column :data:`ROW_ID` = 0..n−1 (of
    each split): assign this to a partitioner (or pass it as FederatedDataset's ``preprocessor``) to read its
    partitions' rows back with :func:`from_flwr`."""
    datasets = hf_datasets()
    if isinstance(dataset, datasets.DatasetDict):
        return datasets.DatasetDict({split: with_row_ids(part) for split, part in dataset.items()})
    if ROW_ID in dataset.column_names:
        raise ValueError(f"the dataset already has a {ROW_ID!r} column")
    return dataset.add_column(ROW_ID, np.arange(len(dataset), dtype=np.int64))


def _row_ids(ds: Any, where: str) -> np.ndarray:
    if ROW_ID not in ds.column_names:
        raise ValueError(f"{where} has no {ROW_ID!r} column")
    ids = ds.with_format("arrow", columns=[ROW_ID])[:].column(ROW_ID).to_numpy(zero_copy_only=False)  # pyarrow's
    return np.array(ids, dtype=np.int64)  # our own copy, as astype made it


def _flower(partitioner: Any, what: str, call: Callable[[], Any]) -> Any:
    """Run a Flower call; its errors become one ValueError line naming the partitioner."""
    try:
        return call()
    except _FLOWER_ERRORS as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{type(partitioner).__name__}: {what}: {message}") from None


def client_rows(partitioner: Any, num_rows: int) -> list[np.ndarray]:
    """Each partition's row ids, in partition order; a row in two partitions is an error."""
    count = _flower(partitioner, "num_partitions", lambda: partitioner.num_partitions)
    clients = [_row_ids(_flower(partitioner, f"partition {k}", functools.partial(partitioner.load_partition, k)), f"partition {k}")
               for k in range(count)]
    owned = np.bincount(np.concatenate(clients), minlength=num_rows) if clients else np.zeros(num_rows, np.int64)
    if np.any(owned > 1):
        row = int(np.flatnonzero(owned > 1)[0])
        raise ValueError(f"{type(partitioner).__name__}: row {row} is in {int(owned[row])} partitions; a fedsample client owns its rows alone")
    unowned = int(np.sum(owned == 0))
    if unowned:
        warnings.warn(f"{type(partitioner).__name__}: {unowned} of {num_rows} rows are in no partition (they train on no client)", stacklevel=3)
    return clients


def natural_ids(partitioner: Any, count: int) -> np.ndarray | None:
    """The natural id of each partition (NaturalIdPartitioner), or its group's ids joined by "+"
    (GroupedNaturalIdPartitioner); None for other partitioners."""
    single = getattr(partitioner, "partition_id_to_natural_id", None)
    if isinstance(single, dict) and single:
        return np.asarray([single[k] for k in range(count)])
    grouped = getattr(partitioner, "partition_id_to_natural_ids", None)
    if isinstance(grouped, dict) and grouped:
        return np.asarray(["+".join(str(i) for i in grouped[k]) for k in range(count)])
    return None


def from_flwr(partitioner: Any, dataset: Any = None, *, data: Dataset | None = None, features: str | Sequence[str] | None = None,
              label: str = "label", test: Any = None, task: Task = "classification", name: str | None = None) -> FederatedData:
    """A fedsample :class:`FederatedData` from a Flower Datasets partitioner: client k owns the rows of
    ``partitioner.load_partition(k)``.

    ``dataset``: the ``datasets.Dataset`` to partition, given to the partitioner here (with :data:`ROW_ID`
    added); or None when the partitioner already holds a dataset made with :func:`with_row_ids`. The training
    data are ``data`` (a fedsample Dataset whose training rows are the partitioned rows, in order) or, without
    it, :func:`from_hf` of the partitioned rows with ``features``/``label``/``task`` and ``test`` (a
    ``datasets.Dataset`` of test rows: every partitioned row is a training row). Natural ids become
    ``user_ids``; rows in no partition are left out with a warning (``fed.stats()["num_unassigned"]``); a
    row in two partitions is an error.
    """
    datasets, partitioners = hf_datasets(), flwr_partitioners()
    if not isinstance(partitioner, partitioners.Partitioner):
        raise TypeError(f"from_flwr: expected a flwr_datasets.partitioner.Partitioner, got {type(partitioner).__name__}")
    if type(partitioner).__name__.startswith("Vertical"):
        raise ValueError(f"{type(partitioner).__name__} divides columns, not rows: a fedsample client holds rows")
    if dataset is not None:
        if partitioner.is_dataset_assigned():
            raise ValueError("from_flwr: the partitioner already holds a dataset; pass dataset=None")
        if not isinstance(dataset, datasets.Dataset):
            raise TypeError(f"from_flwr: dataset must be a datasets.Dataset, got {type(dataset).__name__}")
        partitioner.dataset = with_row_ids(dataset)
    elif not partitioner.is_dataset_assigned():
        raise ValueError("from_flwr: the partitioner holds no dataset; pass dataset= (a datasets.Dataset)")
    assigned = partitioner.dataset
    where = f"{type(partitioner).__name__}'s dataset"
    rows = _row_ids(assigned, f"{where} (assign fedsample.data.with_row_ids(dataset), or pass dataset= to from_flwr)")
    if not np.array_equal(np.sort(rows), np.arange(len(rows))):
        raise ValueError(f"{where}: its {ROW_ID!r} column is not 0..{len(rows) - 1}, one id per row")
    if data is None:
        if test is None:
            raise ValueError("from_flwr: give test= (a datasets.Dataset of test rows) or data= (a fedsample Dataset): "
                             "every partitioned row is a training row")
        source = dataset if dataset is not None else assigned.select(np.argsort(rows)).remove_columns(ROW_ID)
        data = from_hf(source, features, label, test, task=task, name=name)
    elif data.num_train != len(rows):
        raise ValueError(f"from_flwr: data has {data.num_train} training rows, the partitioner's dataset {len(rows)}")
    clients = client_rows(partitioner, len(rows))
    return FederatedData.from_client_indices(data, clients, scheme=f"flwr:{type(partitioner).__name__}",
                                             user_ids=natural_ids(partitioner, len(clients)))


def partition_columns(dataset: Dataset) -> dict[str, np.ndarray]:
    """What a Flower partitioner may partition by: the label (under its column name, ``"label"`` unless
    :func:`from_hf` recorded another) and every per-training-row ``meta`` entry (``column:NAME`` as NAME)."""
    columns = {str(dataset.meta.get("label_column", "label")): np.asarray(dataset.y_train)}
    for key, value in dataset.meta.items():
        if isinstance(value, np.ndarray) and value.shape == (dataset.num_train,) and not key.endswith("_test"):
            columns.setdefault(key.removeprefix(COLUMN_PREFIX), value)
    return columns


@dataclass(frozen=True, eq=False)
class FlowerScheme:
    """A Flower Datasets partitioner by name with its parameters, as a fedsample partition scheme (for
    ``scheme = "flwr:NAME"`` in an experiment file). A partitioner that takes ``seed`` and is given none gets
    one drawn from the partition seed, so every fedsample seed partitions afresh, reproducibly."""

    name: str
    params: JSONObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = row_partitioners()
        if self.name not in known:
            raise ValueError(f"unknown Flower partitioner {self.name!r}; known: {', '.join(known)}")
        accepted = inspect.signature(self.partitioner_class).parameters
        unknown = sorted(set(self.params) - set(accepted))
        if unknown:
            raise ValueError(f"flwr:{self.name}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(accepted)}")
        self.make(self.params)  # the partitioner's own checks of its parameters, now rather than at the first seed

    @property
    def partitioner_class(self) -> type:
        partitioner: type = getattr(flwr_partitioners(), self.name)
        return partitioner

    def make(self, params: JSONObject) -> Any:
        try:
            return self.partitioner_class(**params)
        except _FLOWER_ERRORS as error:
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ValueError(f"flwr:{self.name}: {message}") from None

    def __repr__(self) -> str:
        return f"flwr:{self.name}(" + ", ".join(f"{k}={v!r}" for k, v in self.params.items()) + ")"

    def build(self, dataset: Dataset, rng: np.random.Generator) -> FederatedData:
        params = dict(self.params)
        if "seed" in inspect.signature(self.partitioner_class).parameters and "seed" not in params:
            params["seed"] = int(rng.integers(2**31))
        columns = partition_columns(dataset)
        fed = from_flwr(self.make(params), hf_datasets().Dataset.from_dict(columns), data=dataset)
        shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
        return dataclasses.replace(fed, scheme=f"flwr:{self.name}({shown})")
