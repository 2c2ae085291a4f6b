"""Readers for the standard dataset file formats: IDX (MNIST family), the CIFAR python pickles, LIBSVM text.

Every reader checks what it reads against what the format promises: a truncated file, trailing bytes, a
wrong magic number or a malformed line raise one ``ValueError`` naming the problem, the path and what was
expected. Nothing is silently truncated or padded.
"""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import numpy as np

from fedsample.data.checks import check_finite

__all__ = ["read_cifar_pickle", "read_idx", "read_libsvm", "write_cifar_pickle", "write_idx", "write_libsvm"]

# IDX type codes (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT"); data are big-endian.
_IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when the name ends in ``.gz``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rb") as fh:
                return fh.read()
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise ValueError(f"{path}: corrupt or truncated gzip file ({err}); expected a complete .gz archive") from None
    return path.read_bytes()


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (optionally ``.gz``) into a numpy array of its declared shape and native byte order."""
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise ValueError(f"{path}: {len(raw)} bytes, too short for an IDX header (expected at least 4)")
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: bad IDX magic number {raw[:4].hex()}; expected 0x0000 followed by a type code and a rank")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_TYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02X}; expected one of 08, 09, 0B, 0C, 0D, 0E")
    if ndim == 0:
        raise ValueError(f"{path}: IDX rank 0; expected at least one dimension")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes; expected {header} for rank {ndim})")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_TYPES[code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    actual = len(raw) - header
    if actual != expected:
        what = "truncated" if actual < expected else "has trailing bytes"
        raise ValueError(
            f"{path}: IDX file {what}: {actual} data bytes, expected {expected} for shape {dims} of {dtype.name}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return data.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file (gzip-compressed when the name ends in ``.gz``); used by tests and tools."""
    array = np.asarray(array)
    codes = {np.dtype(v.newbyteorder("=")): k for k, v in _IDX_TYPES.items()}
    native = np.dtype(array.dtype.newbyteorder("="))
    if native not in codes:
        raise ValueError(f"write_idx: dtype {array.dtype} has no IDX type code")
    header = bytes([0, 0, codes[native], array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + array.astype(_IDX_TYPES[codes[native]]).tobytes()
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as fh:
            fh.write(payload)
    else:
        path.write_bytes(payload)


# --- CIFAR python pickles ----------------------------------------------------------------------------

class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles only plain containers and numpy arrays: a dataset file must not run arbitrary code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> object:  # the class or function pickle calls to rebuild a value
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_cifar_pickle(path: str | Path, label_key: str, rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR python batch: images as uint8 ``(n, 3, 32, 32)`` and labels as int64 ``(n,)``.

    ``label_key`` is ``"labels"`` (CIFAR-10), ``"fine_labels"`` or ``"coarse_labels"`` (CIFAR-100);
    ``rows``, when given, is the number of images the batch must hold.
    """
    path = Path(path)
    raw = _read_bytes(path)
    try:
        obj = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as err:  # truncated pickles raise EOFError, UnpicklingError, ValueError, ...
        raise ValueError(f"{path}: corrupt or truncated CIFAR pickle ({type(err).__name__}: {err}); "
                         "expected a python pickle of a dict with 'data' and labels") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: CIFAR pickle holds a {type(obj).__name__}; expected a dict with 'data' and '{label_key}'")
    batch = {(k.decode("latin-1") if isinstance(k, bytes) else k): v for k, v in obj.items()}
    for key in ("data", label_key):
        if key not in batch:
            raise ValueError(f"{path}: CIFAR pickle has no {key!r} entry (keys: {sorted(batch)}); expected 'data' and '{label_key}'")
    data = np.asarray(batch["data"])
    labels = np.asarray(batch[label_key])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{path}: CIFAR 'data' has shape {data.shape} and dtype {data.dtype}; expected (n, 3072) uint8")
    if labels.ndim != 1 or len(labels) != len(data):
        raise ValueError(f"{path}: {len(labels)} labels for {len(data)} images; expected one label per image")
    if rows is not None and len(data) != rows:
        raise ValueError(f"{path}: CIFAR batch holds {len(data)} images; expected {rows}")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def write_cifar_pickle(path: str | Path, images: np.ndarray, labels: np.ndarray, label_key: str = "labels") -> None:
    """Write a CIFAR-style python batch (used by tests)."""
    images = np.asarray(images, dtype=np.uint8).reshape(len(images), -1)
    batch = {b"data": images, label_key.encode(): [int(v) for v in labels], b"batch_label": b"test"}
    Path(path).write_bytes(pickle.dumps(batch, protocol=2))


# --- LIBSVM text --------------------------------------------------------------------------------------

def read_libsvm(path: str | Path, n_features: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Read a LIBSVM/svmlight text file (``label index:value ...``, 1-based ascending indices).

    Returns a dense float32 matrix ``(n, d)`` and float64 labels. ``d`` is ``n_features`` when given
    (an index beyond it is an error) and otherwise the largest index in the file. Blank lines and
    ``#`` comments are skipped. A NaN or infinite value (``nan``, ``inf``, or beyond float32's range such
    as ``1e300``) is an error naming the lines.
    """
    path = Path(path)
    raw = _read_bytes(path)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not ASCII text at byte {err.start}; expected LIBSVM lines 'label index:value ...'") from None
    labels: list[float] = []
    lines: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        try:
            labels.append(float(parts[0]))
        except ValueError:
            raise ValueError(f"{path}:{lineno}: bad label {parts[0]!r}; expected a number") from None
        lines.append(lineno)
        row = len(labels) - 1
        last = 0
        for item in parts[1:]:
            index, sep, value = item.partition(":")
            try:
                if not sep:
                    raise ValueError
                j, v = int(index), float(value)
            except ValueError:
                raise ValueError(f"{path}:{lineno}: bad feature {item!r}; expected index:value with an integer index") from None
            if j <= last:
                raise ValueError(f"{path}:{lineno}: feature index {j} after {last}; expected ascending indices starting at 1")
            if n_features is not None and j > n_features:
                raise ValueError(f"{path}:{lineno}: feature index {j} exceeds n_features={n_features}")
            last = j
            rows.append(row)
            cols.append(j - 1)
            vals.append(v)
    if not labels:
        raise ValueError(f"{path}: no data lines; expected LIBSVM lines 'label index:value ...'")
    d = n_features if n_features is not None else (max(cols) + 1 if cols else 0)
    x = np.zeros((len(labels), d), dtype=np.float32)
    with np.errstate(over="ignore"):  # a value beyond float32's range becomes inf, which the check names
        x[np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)] = np.asarray(vals, dtype=np.float32)
    y = np.asarray(labels, dtype=np.float64)
    check_finite(str(path), "features", x, lines)
    check_finite(str(path), "labels", y, lines)
    return x, y


def write_libsvm(path: str | Path, x: np.ndarray, y: np.ndarray) -> None:
    """Write a dense matrix as LIBSVM text, leaving out zeros (used by tests)."""
    lines = []
    for row, label in zip(np.asarray(x), np.asarray(y)):
        items = " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(row) if v != 0)
        lines.append(f"{label:g} {items}".rstrip())
    Path(path).write_text("\n".join(lines) + "\n")
