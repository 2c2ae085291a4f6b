"""Hugging Face ``datasets`` as inputs (the ``hf`` extra): a ``datasets.Dataset`` (or ``DatasetDict``, or a
local csv/parquet/json/imagefolder file read by ``datasets.load_dataset``) turned into fedsample's
:class:`~fedsample.data.types.Dataset`.

Nothing is downloaded: unless the user has set them, ``HF_HUB_OFFLINE`` and ``HF_DATASETS_OFFLINE`` are set
to 1 (and the Hub's and Flower's telemetry off: :func:`fedsample.runtime.telemetry.quiet_flower`) before ``datasets``
is used, so a Hub name that is not in the local cache
is one error line at once rather than a wait for network time-outs. ``datasets`` is imported only here, only
when called.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fedsample.data.types import Dataset, Meta, Task

__all__ = ["COLUMN_PREFIX", "EXTRA", "from_hf", "hf_datasets", "load_hf"]
from fedsample.runtime.telemetry import quiet_flower

EXTRA = "pip install 'fedsample[hf]'"
"""How to install what this module needs (named in its ImportError)."""
FORMATS = ("csv", "parquet", "json", "imagefolder")  # datasets' packaged builders for local files
COLUMN_PREFIX = "column:"  #: meta[COLUMN_PREFIX + name]: a kept per-row column (natural ids, for partitioners)
_OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
_QUIET = {"HF_HUB_DISABLE_TELEMETRY": "1"}  # and Flower's (fedsample.runtime.telemetry.quiet_flower)


_offline_is_ours: bool | None = None  # decided once per process, at the first call


def offline_by_default() -> bool:
    """Set the offline and no-telemetry variables the user has not set; True when offline mode is ours to
    choose (the user had set neither ``HF_HUB_OFFLINE`` nor ``HF_DATASETS_OFFLINE``), so it was turned on."""
    global _offline_is_ours
    if _offline_is_ours is None:
        _offline_is_ours = not any(key in os.environ for key in _OFFLINE)
    if _offline_is_ours:
        os.environ.update(_OFFLINE)
    for key, value in _QUIET.items():
        os.environ.setdefault(key, value)
    quiet_flower()
    return _offline_is_ours


def hf_datasets() -> Any:
    """The ``datasets`` module with offline mode on (unless the user chose otherwise); a clear ImportError
    naming the extra when it is missing. If ``datasets`` was imported before the variables were set, its
    offline switches (read at import) are turned on too."""
    ours = offline_by_default()
    try:
        import datasets
        import huggingface_hub.constants
    except ImportError:
        raise ImportError(f"Hugging Face datasets are not installed: {EXTRA}") from None
    if ours:
        datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
        huggingface_hub.constants.HF_HUB_OFFLINE = True
    return datasets


# --- columns to arrays ----------------------------------------------------------------------------------


def _kind(feature: Any, datasets: Any) -> str:
    """``number`` (a numeric or bool Value, a ClassLabel), ``array`` (a list or ArrayND column), ``image``,
    ``string`` or ``other``."""
    if isinstance(feature, datasets.ClassLabel):
        return "number"
    if isinstance(feature, datasets.Value):
        dtype = feature.dtype
        if dtype == "bool" or dtype.startswith(("int", "uint", "float")):
            return "number"
        return "string" if dtype in ("string", "large_string") else "other"
    if isinstance(feature, datasets.Image):
        return "image"
    arrays = (datasets.Sequence, datasets.LargeList, datasets.Array2D, datasets.Array3D, datasets.Array4D, datasets.Array5D)
    return "array" if isinstance(feature, arrays) else "other"


def _scalar_column(ds: Any, column: str) -> np.ndarray:
    """One column of scalars as numpy (indices mappings respected); missing values are an error."""
    values = ds.with_format("arrow", columns=[column])[:].column(column)
    if values.null_count:
        raise ValueError(f"column {column!r}: {values.null_count} missing value(s); expected one value per row")
    return values.to_numpy(zero_copy_only=False) if len(values) else np.zeros(0)


def _array_column(ds: Any, column: str) -> np.ndarray:
    """A list/ArrayND column as one ``(n, *shape)`` float32 array; ragged rows or missing values are an error."""
    values = ds.with_format("numpy", columns=[column])[:][column] if len(ds) else np.zeros((0, 0))
    if values.dtype == object or not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        what = "rows of different lengths or missing values" if values.dtype == object else f"{values.dtype} values"
        raise ValueError(f"features: column {column!r} has {what}; expected numbers of one shape in every row")
    return values.astype(np.float32)


def _image_array(image: Any, column: str, row: int) -> np.ndarray:
    """One PIL image as ``(C, H, W)`` float32 in [0, 1]: grayscale modes give 1 channel, colour modes 3 (RGB;
    alpha dropped)."""
    if image is None:
        raise ValueError(f"features: column {column!r} row {row} has no image")
    if image.mode in ("I", "I;16", "F"):
        raise ValueError(f"features: column {column!r} row {row} is a {image.mode!r} (high bit depth) image; expected 8-bit L or RGB images")
    gray = image.mode in ("1", "L", "LA")
    pixels = np.asarray(image.convert("L" if gray else "RGB"), dtype=np.float32) / 255.0
    return pixels[None] if gray else pixels.transpose(2, 0, 1)


def _image_column(ds: Any, column: str) -> np.ndarray:
    """An Image column as ``(n, C, H, W)`` float32; every image must have the same size (grayscale images are
    repeated to 3 channels when the column also holds colour images)."""
    arrays = [_image_array(image, column, row) for row, image in enumerate(ds[column])]
    shapes = {a.shape[1:] for a in arrays}
    if len(shapes) > 1:
        first = arrays[0].shape[1:]
        row = next(i for i, a in enumerate(arrays) if a.shape[1:] != first)
        raise ValueError(f"features: column {column!r}: image {row} is {arrays[row].shape[2]}x{arrays[row].shape[1]}, "
                         f"image 0 is {first[1]}x{first[0]}; resize them to one size first")
    if any(a.shape[0] == 3 for a in arrays):
        arrays = [np.repeat(a, 3, axis=0) if a.shape[0] == 1 else a for a in arrays]
    return np.stack(arrays) if arrays else np.zeros((0, 1, 1, 1), np.float32)


def _finite(x: np.ndarray, columns: Sequence[str], split: str) -> np.ndarray:
    bad = ~np.isfinite(x.reshape(len(x), -1))
    if bad.any():
        row, col = np.argwhere(bad)[0]
        where = f"column {columns[col]!r}" if len(columns) > 1 else f"column {columns[0]!r}"
        raise ValueError(f"features: {int(bad.sum())} NaN or infinite value(s) in the {split} split (first in row {row}, {where})")
    return x


def feature_array(ds: Any, columns: Sequence[str], split: str = "train") -> np.ndarray:
    """The features of ``ds`` as float32: several numeric columns side by side ``(n, k)``, one list/ArrayND
    column ``(n, *shape)``, or one Image column ``(n, C, H, W)`` in [0, 1]."""
    datasets = hf_datasets()
    kinds = {c: _kind(ds.features[c], datasets) for c in columns}
    if len(columns) == 1 and kinds[columns[0]] == "image":
        return _image_column(ds, columns[0])
    if len(columns) == 1 and kinds[columns[0]] == "array":
        return _finite(_array_column(ds, columns[0]), columns, split)
    for column, kind in kinds.items():
        if kind != "number":
            what = {"string": "strings", "image": "images", "array": "lists"}.get(kind, str(ds.features[column]))
            hint = "name one list or image column alone" if kind in ("array", "image") else "leave it out of features"
            raise ValueError(f"features: column {column!r} holds {what}, not numbers; {hint}")
    stacked = np.stack([_scalar_column(ds, c).astype(np.float32) for c in columns], axis=1) if columns else np.zeros((len(ds), 0))
    return _finite(stacked.astype(np.float32), columns, split)


# --- labels ---------------------------------------------------------------------------------------------


def class_labels(train_values: np.ndarray, test_values: np.ndarray, feature: Any, column: str) -> tuple[np.ndarray, np.ndarray, int, Meta]:
    """Class ids 0..C−1 of the train and test labels, C and the label meta. A ClassLabel keeps its ids and
    names; integers, bools and strings map to ids in sorted order of the values found in either split
    (``meta["label_values"]`` keeps the values, ``meta["label_names"]`` their text)."""
    datasets = hf_datasets()
    if isinstance(feature, datasets.ClassLabel):
        for split, values in (("train", train_values), ("test", test_values)):
            outside = values[(values < 0) | (values >= feature.num_classes)]
            if len(outside):
                raise ValueError(f"label: column {column!r} has {len(outside)} {split} row(s) without a class (value {outside[0]}; "
                                 f"classes 0..{feature.num_classes - 1}); drop them first")
        return train_values.astype(np.int64), test_values.astype(np.int64), feature.num_classes, {"label_names": list(feature.names)}
    both = np.concatenate([train_values, test_values])
    if both.dtype.kind == "f":
        fractional = both[both != np.round(both)]
        if len(fractional):
            raise ValueError(f"label: column {column!r} holds non-integer numbers (e.g. {fractional[0]}); "
                             "labels must be classes (pass task='regression' for real-valued targets)")
    elif both.dtype.kind not in "iubUO":
        raise ValueError(f"label: column {column!r} holds {both.dtype} values; labels must be classes")
    values = np.unique(both)
    meta: Meta = {"label_values": values, "label_names": [str(v) for v in values]}
    return np.searchsorted(values, train_values).astype(np.int64), np.searchsorted(values, test_values).astype(np.int64), len(values), meta


def regression_targets(values: np.ndarray, column: str) -> np.ndarray:
    if values.dtype.kind not in "iuf" or not np.all(np.isfinite(values.astype(np.float64))):
        raise ValueError(f"label: column {column!r} must hold finite numbers for task='regression'")
    return values.astype(np.float32)


# --- splits ---------------------------------------------------------------------------------------------


def _split_of(dataset: Any, datasets: Any, split: str, what: str) -> Any:
    if not isinstance(dataset, datasets.DatasetDict):
        raise ValueError(f"{what}: a split name ({split!r}) needs a DatasetDict, got {type(dataset).__name__}")
    if split not in dataset:
        raise ValueError(f"{what}: no split {split!r}; the splits are {', '.join(dataset)}")
    return dataset[split]


def train_and_test(dataset: Any, test: Any, split: str, datasets: Any) -> tuple[Any, Any]:
    """The training ``datasets.Dataset`` and the test one (None: carve one off). A DatasetDict gives its
    ``split`` and, when ``test`` is None, its "test" split if it has one."""
    if isinstance(dataset, datasets.DatasetDict):
        train = _split_of(dataset, datasets, split, "split")
        if test is None and "test" in dataset and split != "test":
            test = "test"
    elif isinstance(dataset, datasets.Dataset):
        train = dataset
    else:
        raise TypeError(f"from_hf: expected a datasets.Dataset or DatasetDict, got {type(dataset).__name__}")
    if isinstance(test, str):
        test = _split_of(dataset, datasets, test, "test")
    elif test is not None and not isinstance(test, datasets.Dataset):
        raise TypeError(f"from_hf: test must be None, a split name or a datasets.Dataset, got {type(test).__name__}")
    return train, test


def held_out_rows(y: np.ndarray, fraction: float, stratified: bool) -> np.ndarray:
    """Sorted rows of a fixed test split (scikit-learn's ``train_test_split``, ``random_state=0``), stratified
    by class for classification."""
    from sklearn.model_selection import train_test_split

    if not 0 < fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {fraction}")
    try:
        _, test = train_test_split(np.arange(len(y)), test_size=fraction, random_state=0, stratify=y if stratified else None)
    except ValueError as error:
        raise ValueError(f"test_fraction {fraction} of {len(y)} rows: {str(error).splitlines()[0]}") from None
    return np.sort(test)


def _columns(train: Any, features: str | Sequence[str] | None, label: str) -> list[str]:
    if label not in train.column_names:
        raise ValueError(f"label: no column {label!r}; the columns are {', '.join(train.column_names)}")
    columns = [c for c in train.column_names if c != label] if features is None else [features] if isinstance(features, str) else list(features)
    missing = [c for c in columns if c not in train.column_names]
    if missing:
        raise ValueError(f"features: no column {missing[0]!r}; the columns are {', '.join(train.column_names)}")
    if not columns:
        raise ValueError("features: no feature columns")
    if label in columns:
        raise ValueError(f"features: {label!r} is the label column")
    return columns


def _kept(ds: Any, columns: Sequence[str], datasets: Any) -> dict[str, np.ndarray]:
    """The other scalar columns (e.g. a user id), one value per row, for natural partitions."""
    kept = {}
    for column in columns:
        if _kind(ds.features[column], datasets) in ("number", "string"):
            values = ds.with_format("arrow", columns=[column])[:].column(column)
            if not values.null_count:
                kept[column] = values.to_numpy(zero_copy_only=False)
    return kept


def from_hf(dataset: Any, features: str | Sequence[str] | None = None, label: str = "label", test: Any = None, *,
            split: str = "train", test_fraction: float = 0.2, task: Task = "classification", name: str | None = None) -> Dataset:
    """A fedsample :class:`Dataset` from a Hugging Face ``datasets.Dataset`` or ``DatasetDict``.

    ``features``: several numeric columns (side by side), one list/ArrayND column, or one Image column
    (``(C, H, W)`` float32 in [0, 1]); None takes every column but the label. ``label``: a ClassLabel, integer,
    bool or string column (ids in sorted order of the values, names kept in ``meta["label_names"]``), or numbers
    for ``task="regression"``. ``test``: a second ``datasets.Dataset``, a split name of the DatasetDict, or None
    (the DatasetDict's "test" split if any, else a fixed stratified ``test_fraction`` of the rows). Training
    rows keep their order. The other scalar columns are kept per row in ``meta["column:NAME"]`` (and
    ``meta["column:NAME_test"]``), e.g. for ``Natural(key="column:user")`` or Flower's natural-id partitioners.
    """
    datasets = hf_datasets()
    if task not in ("classification", "regression"):
        raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
    train, test_ds = train_and_test(dataset, test, split, datasets)
    columns = _columns(train, features, label)
    if test_ds is not None:
        absent = [c for c in [*columns, label] if c not in test_ds.column_names]
        if absent:
            raise ValueError(f"test: no column {absent[0]!r}; the test columns are {', '.join(test_ds.column_names)}")
    x = feature_array(train, columns, "train")
    y_raw = _scalar_column(train, label)
    rest = [c for c in train.column_names if c not in columns and c != label]
    kept = _kept(train, rest, datasets)
    if test_ds is None:
        test_rows = held_out_rows(y_raw, test_fraction, stratified=task == "classification")
        keep = np.ones(len(y_raw), dtype=bool)
        keep[test_rows] = False
        x_test, y_test_raw = x[test_rows], y_raw[test_rows]
        kept_test = {c: v[test_rows] for c, v in kept.items()}
        x, y_raw, kept = x[keep], y_raw[keep], {c: v[keep] for c, v in kept.items()}
    else:
        x_test, y_test_raw = feature_array(test_ds, columns, "test"), _scalar_column(test_ds, label)
        kept_test = _kept(test_ds, [c for c in rest if c in test_ds.column_names], datasets)
        if x_test.shape[1:] != x.shape[1:]:
            raise ValueError(f"test: features of shape {x_test.shape[1:]}, the training features {x.shape[1:]}")
    meta: Meta = {"source": "hf", "features": list(columns), "label_column": label}
    if task == "classification":
        y, y_test, num_classes, label_meta = class_labels(y_raw, y_test_raw, train.features[label], label)
        meta.update(label_meta)
    else:
        y, y_test, num_classes = regression_targets(y_raw, label), regression_targets(y_test_raw, label), 0
    meta.update({COLUMN_PREFIX + c: v for c, v in kept.items()})
    meta.update({COLUMN_PREFIX + c + "_test": v for c, v in kept_test.items()})
    return Dataset(name or _name_of(train), x, y, x_test, y_test, num_classes, task=task, meta=meta)


def _name_of(ds: Any) -> str:
    info = getattr(ds, "info", None)
    return f"hf:{info.dataset_name}" if info is not None and info.dataset_name else "hf"


# --- files and cached Hub datasets ----------------------------------------------------------------------


def load_hf(path: str | None = None, *, format: str | None = None, data_files: Any = None, subset: str | None = None,
            split: str = "train", test: str | None = None, test_fraction: float = 0.2,
            features: str | Sequence[str] | None = None, label: str = "label", task: Task = "classification",
            name: str | None = None) -> Dataset:
    """``datasets.load_dataset`` offline, then :func:`from_hf`. ``format`` (csv, parquet, json, imagefolder)
    with ``data_files`` (a file, a list, or ``{split: files}``) and/or ``path`` (a directory) reads local
    files; ``path`` alone is a local dataset directory or a Hub name already in the local cache (``subset``:
    its configuration). ``split``/``test`` name the splits; without a test split, ``test_fraction`` of the
    rows is held out."""
    datasets = hf_datasets()
    if format is not None and format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if format is None and path is None:
        raise ValueError("give path (a local dataset directory or a cached Hub name) or format with data_files")
    if format is not None and path is None and data_files is None:
        raise ValueError(f"format {format!r} needs data_files (or path, a directory of {format} files)")
    _check_local(data_files)
    args: tuple[str | None, ...]
    if format is not None:
        args, options = (format,), {"data_files": data_files, "data_dir": path}
    else:
        args, options = (path, subset), {"data_files": data_files}
    try:
        loaded = datasets.load_dataset(*args, **{k: v for k, v in options.items() if v is not None})
    except (ConnectionError, FileNotFoundError) as error:
        raise ValueError(_not_available(path, format, error, datasets.config.HF_HUB_OFFLINE)) from None
    if not isinstance(loaded, datasets.DatasetDict):
        raise ValueError(f"datasets.load_dataset gave a {type(loaded).__name__}; expected a DatasetDict")
    return from_hf(loaded, features, label, test, split=split, test_fraction=test_fraction, task=task,
                   name=name or _display_name(path, format, data_files))


def _check_local(data_files: Any) -> None:
    """Every named data file must exist locally (a glob pattern is left to ``datasets``)."""
    files = [data_files] if isinstance(data_files, str) else list(data_files.values()) if isinstance(data_files, dict) else list(data_files or [])
    flat = [f for group in files for f in ([group] if isinstance(group, str) else group)]
    for file in flat:
        if not any(ch in file for ch in "*?[") and not Path(file).exists():
            raise ValueError(f"data_files: {file}: no such file")


def _not_available(path: str | None, format: str | None, error: Exception, offline: bool) -> str:
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    if format is None and path is not None and not Path(path).exists():
        why = ("offline mode: nothing is downloaded; fetch it once with HF_HUB_OFFLINE=0, or give format and data_files"
               if offline else "and the Hub could not be reached")
        return f"path {path!r} is neither a local directory nor a Hub dataset in the local cache ({why}) [{first}]"
    return f"could not read {path or format!r}: {first}"


def _display_name(path: str | None, format: str | None, data_files: Any) -> str:
    if format is None:
        return f"hf:{path}"
    first = data_files if isinstance(data_files, str) else None
    return f"hf:{Path(first).name if first else (path or format)}"
