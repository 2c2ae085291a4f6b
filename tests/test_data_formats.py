"""File readers: IDX, CIFAR pickles, LIBSVM — on tiny files written here, including broken ones."""

import gzip
import pickle

import numpy as np
import pytest

from fedsample.data.formats import read_cifar_pickle, read_idx, read_libsvm, write_cifar_pickle, write_idx, write_libsvm


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_round_trip(tmp_path, suffix, dtype):
    arr = (np.arange(2 * 3 * 4) - 5).astype(dtype).reshape(2, 3, 4) if dtype != np.uint8 else np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / f"a-idx3{suffix}"
    write_idx(path, arr)
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype) and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


def test_idx_header_is_big_endian(tmp_path):
    path = tmp_path / "labels-idx1-ubyte"
    path.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9]))
    np.testing.assert_array_equal(read_idx(path), [7, 8, 9])


def test_idx_truncated(tmp_path):
    path = tmp_path / "t-idx3-ubyte"
    write_idx(path, np.zeros((4, 5, 5), np.uint8))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match=r"t-idx3-ubyte: IDX file truncated: 97 data bytes, expected 100 for shape \(4, 5, 5\)"):
        read_idx(path)


def test_idx_trailing_bytes(tmp_path):
    path = tmp_path / "t-idx1-ubyte"
    write_idx(path, np.zeros(4, np.uint8))
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="trailing bytes"):
        read_idx(path)


@pytest.mark.parametrize("header, message", [
    (bytes([1, 2, 8, 1]), "bad IDX magic"),
    (bytes([0, 0, 0x42, 1, 0, 0, 0, 0]), "unknown IDX type code 0x42"),
    (bytes([0, 0, 8, 3, 0, 0]), "truncated IDX header"),
    (bytes([0, 0]), "too short"),
])
def test_idx_bad_headers(tmp_path, header, message):
    path = tmp_path / "bad-idx"
    path.write_bytes(header)
    with pytest.raises(ValueError, match=message) as err:
        read_idx(path)
    assert str(path) in str(err.value)


def test_idx_corrupt_gzip(tmp_path):
    path = tmp_path / "x-idx1-ubyte.gz"
    write_idx(path, np.arange(1000, dtype=np.uint8) % 7)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ValueError, match="corrupt or truncated gzip"):
        read_idx(path)


def test_idx_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_idx(tmp_path / "nope")


def test_cifar_pickle_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 3, 32, 32), dtype=np.uint8)
    labels = [3, 1, 4, 1, 5]
    write_cifar_pickle(tmp_path / "data_batch_1", images, labels)
    x, y = read_cifar_pickle(tmp_path / "data_batch_1", "labels", rows=5)
    np.testing.assert_array_equal(x, images)
    np.testing.assert_array_equal(y, labels)
    assert y.dtype == np.int64
    with pytest.raises(ValueError, match="holds 5 images; expected 10000"):
        read_cifar_pickle(tmp_path / "data_batch_1", "labels", rows=10000)


def test_cifar_pickle_truncated(tmp_path):
    path = tmp_path / "test_batch"
    write_cifar_pickle(path, np.zeros((4, 3072), np.uint8), [0, 1, 2, 3])
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(ValueError, match="test_batch: corrupt or truncated CIFAR pickle"):
        read_cifar_pickle(path, "labels")


def test_cifar_pickle_wrong_content(tmp_path):
    path = tmp_path / "train"
    write_cifar_pickle(path, np.zeros((2, 3072), np.uint8), [0, 1], label_key="coarse_labels")
    with pytest.raises(ValueError, match="no 'fine_labels' entry"):
        read_cifar_pickle(path, "fine_labels")
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(ValueError, match=r"shape \(2, 100\).*expected \(n, 3072\) uint8"):
        read_cifar_pickle(path, "labels")
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}))
    with pytest.raises(ValueError, match="1 labels for 2 images"):
        read_cifar_pickle(path, "labels")


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_cifar_pickle_refuses_code(tmp_path):
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": _Evil(), b"labels": []}))
    with pytest.raises(ValueError, match="refusing to load builtins.print"):
        read_cifar_pickle(path, "labels")


def test_libsvm_parse(tmp_path):
    path = tmp_path / "small.svm"
    path.write_text("+1 1:0.5 3:-1\n# a comment\n\n-1 2:2 4:1e-1  # trailing comment\n+1\n")
    x, y = read_libsvm(path)
    np.testing.assert_array_equal(y, [1, -1, 1])
    np.testing.assert_allclose(x, [[0.5, 0, -1, 0], [0, 2, 0, 0.1], [0, 0, 0, 0]])
    assert x.dtype == np.float32
    x6, _ = read_libsvm(path, n_features=6)
    assert x6.shape == (3, 6)


def test_libsvm_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    x = np.round(rng.standard_normal((20, 7)) * (rng.random((20, 7)) < 0.5), 3).astype(np.float32)
    y = rng.integers(0, 3, 20)
    write_libsvm(tmp_path / "r.svm", x, y)
    x2, y2 = read_libsvm(tmp_path / "r.svm", n_features=7)
    np.testing.assert_allclose(x2, x, rtol=1e-6)
    np.testing.assert_array_equal(y2, y)


@pytest.mark.parametrize("text, message", [
    ("abc 1:2\n", r":1: bad label 'abc'"),
    ("1 1:2 x\n", r":1: bad feature 'x'"),
    ("1 1:2\n1 3:1 2:1\n", r":2: feature index 2 after 3"),
    ("1 0:1\n", r":1: feature index 0 after 0"),
    ("1 a:1\n", r"bad feature 'a:1'"),
    ("\n# only comments\n", "no data lines"),
])
def test_libsvm_bad_lines(tmp_path, text, message):
    path = tmp_path / "bad.svm"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        read_libsvm(path)
    assert str(path) in str(err.value)


def test_libsvm_feature_beyond_n_features(tmp_path):
    path = tmp_path / "wide.svm"
    path.write_text("1 1:1 9:1\n")
    with pytest.raises(ValueError, match=r"wide.svm:1: feature index 9 exceeds n_features=4"):
        read_libsvm(path, n_features=4)


def test_libsvm_binary_garbage(tmp_path):
    path = tmp_path / "bin.svm"
    path.write_bytes(b"1 1:1\n\xff\xfe")
    with pytest.raises(ValueError, match="not ASCII"):
        read_libsvm(path)
