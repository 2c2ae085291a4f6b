"""Hugging Face ``datasets`` and Flower Datasets as inputs (the ``hf`` extra): ``from_hf`` keeps rows and
labels, ``from_flwr`` gives exactly Flower's partitions as clients, a run from an HF dataset equals the run
from the same arrays, and an experiment file reading a local Parquet file runs offline through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

REASON = "the hf extra is not installed: pip install 'fedsample[hf]'"
datasets = pytest.importorskip("datasets", reason=REASON)
P = pytest.importorskip("flwr_datasets.partitioner", reason=REASON)

import fedsample as fs  # noqa: E402
from fedsample.data.flower_partitions import ROW_ID, FlowerScheme, from_flwr, with_row_ids  # noqa: E402
from fedsample.data.hf import from_hf, load_hf  # noqa: E402
from fedsample.experiments.config import ConfigError, parse_config  # noqa: E402
from fedsample.experiments.plan import prepare  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    """``datasets.load_dataset`` writes its Arrow cache under the test's folder, not the user's home."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def table(n: int = 300, seed: int = 0, classes: int = 4) -> dict[str, np.ndarray]:
    """Columns of a small tabular problem: three features, a label, a user id and a unique row id."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    return {"f0": x[:, 0], "f1": x[:, 1], "f2": x[:, 2], "label": rng.integers(0, classes, n),
            "user": np.array([f"u{i % 7}" for i in range(n)]), "uid": np.arange(n, dtype=np.int64)}


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message, message
    return message


# --- from_hf --------------------------------------------------------------------------------------------


def test_from_hf_keeps_rows_and_class_labels():
    cols, test = table(200), table(40, seed=1)
    features = datasets.Features({"f0": datasets.Value("float32"), "f1": datasets.Value("float32"), "f2": datasets.Value("float32"),
                                  "label": datasets.ClassLabel(names=["a", "b", "c", "d", "e"]),
                                  "user": datasets.Value("string"), "uid": datasets.Value("int64")})
    ds = from_hf(datasets.Dataset.from_dict(cols, features=features), ["f0", "f1", "f2"], "label",
                 test=datasets.Dataset.from_dict(test, features=features))
    np.testing.assert_array_equal(ds.x_train, np.stack([cols["f0"], cols["f1"], cols["f2"]], axis=1))
    np.testing.assert_array_equal(ds.y_train, cols["label"])
    np.testing.assert_array_equal(ds.y_test, test["label"])
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.num_classes == 5 and ds.meta["label_names"] == ["a", "b", "c", "d", "e"]  # class "e" has no row: still a class
    np.testing.assert_array_equal(ds.meta["column:user"], cols["user"])
    np.testing.assert_array_equal(ds.meta["column:uid_test"], test["uid"])


def test_from_hf_string_labels_list_column_and_integer_values():
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(30, 4)).astype(np.float32)
    words = np.array(["pear", "apple", "fig"])[rng.integers(0, 3, 30)]
    ds = from_hf(datasets.Dataset.from_dict({"v": vectors.tolist(), "fruit": words}), "v", "fruit",
                 test=datasets.Dataset.from_dict({"v": vectors[:5].tolist(), "fruit": words[:5]}))
    np.testing.assert_array_equal(ds.x_train, vectors)
    assert ds.meta["label_names"] == ["apple", "fig", "pear"]  # sorted: the ids do not depend on row order
    np.testing.assert_array_equal(np.array(ds.meta["label_names"])[ds.y_train], words)
    odd = from_hf(datasets.Dataset.from_dict({"a": [0.0, 1.0, 2.0, 3.0], "y": [7, 3, 3, 7]}), "a", "y",
                  test=datasets.Dataset.from_dict({"a": [1.0], "y": [9]}))
    np.testing.assert_array_equal(odd.y_train, [1, 0, 0, 1])
    assert odd.num_classes == 3 and odd.y_test.tolist() == [2] and odd.meta["label_names"] == ["3", "7", "9"]


def test_from_hf_images_and_the_dataset_dicts_test_split():
    from PIL import Image

    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, size=(10, 6, 5), dtype=np.uint8)
    images = [Image.fromarray(p) for p in pixels]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["x", "y"])})
    labels = [i % 2 for i in range(10)]
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"image": images[:8], "label": labels[:8]}, features=features),
                               "test": datasets.Dataset.from_dict({"image": images[8:], "label": labels[8:]}, features=features)})
    ds = from_hf(dd, "image")
    assert ds.x_train.shape == (8, 1, 6, 5) and ds.x_test.shape == (2, 1, 6, 5)
    np.testing.assert_array_equal(ds.x_train[:, 0], pixels[:8].astype(np.float32) / 255.0)
    np.testing.assert_array_equal(ds.y_test, labels[8:])
    colour = [Image.fromarray(rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)) for _ in range(2)]
    mixed = from_hf(datasets.Dataset.from_dict({"image": images[:2] + colour, "label": [0, 1, 0, 1]}, features=features),
                    "image", test=datasets.Dataset.from_dict({"image": colour, "label": [0, 1]}, features=features))
    assert mixed.x_train.shape == (4, 3, 6, 5)  # a grayscale image beside colour ones is repeated to 3 channels
    np.testing.assert_array_equal(mixed.x_train[0, 2], pixels[0] / np.float32(255.0))


def test_from_hf_holds_out_a_fixed_stratified_test_split():
    cols = table(400)
    a = from_hf(datasets.Dataset.from_dict(cols), ["f0", "f1", "f2"], test_fraction=0.25)
    b = from_hf(datasets.Dataset.from_dict(cols), ["f0", "f1", "f2"], test_fraction=0.25)
    train, test = a.meta["column:uid"], a.meta["column:uid_test"]
    assert len(test) == 100 and len(np.intersect1d(train, test)) == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(400))
    assert np.all(np.diff(train) > 0)  # training rows keep their order
    np.testing.assert_array_equal(a.x_train, np.stack([cols[f"f{i}"] for i in range(3)], axis=1)[train])
    np.testing.assert_array_equal(a.meta["column:uid_test"], b.meta["column:uid_test"])  # the same split every time
    share = np.bincount(a.y_test, minlength=4) / np.bincount(cols["label"], minlength=4)
    assert np.all(np.abs(share - 0.25) < 0.02)  # stratified: each class gives its quarter (rounded)


@pytest.mark.parametrize("columns,features,label,expected", [
    ({"a": [1.0, 2.0], "y": [0, 1]}, ["a", "b"], "y", "features: no column 'b'"),
    ({"a": [1.0, 2.0], "y": [0, 1]}, ["a"], "z", "label: no column 'z'"),
    ({"a": [1.0, 2.0], "s": ["p", "q"], "y": [0, 1]}, None, "y", "features: column 's' holds strings, not numbers"),
    ({"a": [1.0, float("nan")], "y": [0, 1]}, ["a"], "y", "features: 1 NaN or infinite value(s) in the train split (first in row 1, column 'a')"),
    ({"a": [1.0, 2.0], "y": [0.5, 1.0]}, ["a"], "y", "labels must be classes"),
    ({"a": [1.0, 2.0], "y": [0, None]}, ["a"], "y", "column 'y': 1 missing value(s)"),
    ({"v": [[1.0, 2.0], [3.0]], "y": [0, 1]}, "v", "y", "rows of different lengths or missing values"),
])
def test_from_hf_bad_input_is_one_line(columns, features, label, expected):
    ds = datasets.Dataset.from_dict(columns)
    with pytest.raises(ValueError) as error:
        from_hf(ds, features, label, test=ds)
    assert expected in one_line(error)


def test_from_hf_class_label_without_class_is_one_line():
    features = datasets.Features({"a": datasets.Value("float32"), "y": datasets.ClassLabel(names=["p", "q"])})
    ds = datasets.Dataset.from_dict({"a": [1.0, 2.0], "y": [0, -1]}, features=features)
    with pytest.raises(ValueError) as error:
        from_hf(ds, "a", "y", test=ds)
    assert "1 train row(s) without a class (value -1" in one_line(error)


def test_load_hf_reads_local_parquet_and_csv(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = table(120)
    pq.write_table(pa.table(cols), tmp_path / "train.parquet")
    pq.write_table(pa.table(table(30, seed=5)), tmp_path / "test.parquet")
    ds = load_hf(format="parquet", data_files={"train": str(tmp_path / "train.parquet"), "test": str(tmp_path / "test.parquet")},
                 features=["f0", "f1", "f2"])
    np.testing.assert_array_equal(ds.x_train[:, 1], cols["f1"])
    np.testing.assert_array_equal(ds.y_test, table(30, seed=5)["label"])
    assert ds.name == "hf:parquet" and ds.num_train == 120
    (tmp_path / "t.csv").write_text("a,b,kind\n" + "".join(f"{i},{i / 4},{'yes' if i % 3 else 'no'}\n" for i in range(40)))
    csv = load_hf(format="csv", data_files=str(tmp_path / "t.csv"), label="kind", test_fraction=0.25)
    assert csv.name == "hf:t.csv" and (csv.num_train, len(csv.y_test)) == (30, 10) and csv.meta["label_names"] == ["no", "yes"]
    with pytest.raises(ValueError) as error:
        load_hf(format="csv", data_files=str(tmp_path / "missing.csv"))
    assert "missing.csv: no such file" in one_line(error)


def test_a_hub_name_without_a_local_copy_is_one_line():
    with pytest.raises(ValueError) as error:
        load_hf("nobody-here/no-such-dataset")
    message = one_line(error)
    assert "'nobody-here/no-such-dataset' is neither a local directory nor a Hub dataset in the local cache" in message


# --- from_flwr ------------------------------------------------------------------------------------------

PARTITIONERS = {
    "iid": lambda: P.IidPartitioner(num_partitions=6),
    "dirichlet": lambda: P.DirichletPartitioner(num_partitions=5, partition_by="label", alpha=0.3, min_partition_size=5, seed=1),
    "pathological": lambda: P.PathologicalPartitioner(num_partitions=6, partition_by="label", num_classes_per_partition=2, seed=2),
    "shard": lambda: P.ShardPartitioner(num_partitions=6, partition_by="label", num_shards_per_partition=2, shard_size=20, seed=3),
    "size": lambda: P.SizePartitioner(partition_sizes=[100, 60, 20, 5]),
    "natural": lambda: P.NaturalIdPartitioner(partition_by="user"),
    "grouped-natural": lambda: P.GroupedNaturalIdPartitioner(partition_by="user", group_size=3),
    "inner-dirichlet": lambda: P.InnerDirichletPartitioner(partition_sizes=[50, 100, 150], partition_by="label", alpha=0.5, seed=4),
    "exponential": lambda: P.ExponentialPartitioner(num_partitions=4),
    "linear": lambda: P.LinearPartitioner(num_partitions=4),
}


@pytest.mark.parametrize("name", list(PARTITIONERS))
def test_from_flwr_clients_are_flowers_partitions(name):
    cols = table(300)
    hf = datasets.Dataset.from_dict(cols)
    data = from_hf(hf, ["f0", "f1", "f2"], test=hf.select(range(20)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fed = from_flwr(PARTITIONERS[name](), hf, data=data)
    reference = PARTITIONERS[name]()  # the same partitioner, given the plain dataset as Flower users do
    reference.dataset = hf
    partitions = [reference.load_partition(k) for k in range(reference.num_partitions)]
    np.testing.assert_array_equal(fed.sizes(), [len(p) for p in partitions])
    for k, part in enumerate(partitions):  # the very rows, in Flower's order
        np.testing.assert_array_equal(cols["uid"][fed.client_indices(k)], part["uid"])
    owner = np.bincount(fed.order, minlength=300)
    assert owner.max() <= 1
    unowned = int(np.sum(owner == 0))
    assert fed.stats()["num_unassigned"] == unowned
    mine = [str(w.message) for w in caught if "in no partition" in str(w.message)]
    assert mine == ([f"{type(reference).__name__}: {unowned} of 300 rows are in no partition (they train on no client)"] if unowned else [])
    if name in ("shard", "size"):
        assert unowned > 0  # 6 x 2 x 20 = 240 and 185 of 300 rows: the rest is reported, not hidden


def test_from_flwr_keeps_natural_ids():
    cols = table(140)
    hf = datasets.Dataset.from_dict(cols)
    fed = from_flwr(P.NaturalIdPartitioner(partition_by="user"), hf, test=hf.select(range(10)), features=["f0", "f1"])
    assert fed.user_ids.tolist() == [f"u{i}" for i in range(7)]
    for k, user in enumerate(fed.user_ids):
        assert set(cols["user"][fed.client_indices(k)]) == {user}
    assert fed.stats()["user_ids"] == [f"u{i}" for i in range(7)]
    ours = fs.data.partition(fed.dataset, fs.data.Natural(key="column:user"))  # fedsample's Natural is the same partition
    np.testing.assert_array_equal(ours.order, fed.order)
    np.testing.assert_array_equal(ours.offsets, fed.offsets)
    grouped = from_flwr(P.GroupedNaturalIdPartitioner(partition_by="user", group_size=2), hf, data=fed.dataset)
    assert grouped.user_ids.tolist() == ["u0+u1", "u2+u3", "u4+u5", "u6"]


def test_from_flwr_partitioner_holding_its_own_dataset():
    """A partitioner given ``with_row_ids(dataset)`` beforehand (ShardPartitioner even sorts it): the training
    rows are the dataset's rows in their original order, the clients Flower's partitions."""
    cols = table(240)
    hf = datasets.Dataset.from_dict(cols)
    partitioner = P.ShardPartitioner(num_partitions=4, partition_by="label", num_shards_per_partition=3, shard_size=20, seed=0)
    partitioner.dataset = with_row_ids(hf)
    first = partitioner.load_partition(0)  # Flower sorts its dataset by label now
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fed = from_flwr(partitioner, test=hf.select(range(10)), features=["f0", "f1", "f2"])
    np.testing.assert_array_equal(fed.dataset.meta["column:uid"], np.arange(240))
    np.testing.assert_array_equal(fed.dataset.y_train, cols["label"])
    np.testing.assert_array_equal(cols["uid"][fed.client_indices(0)], first["uid"])
    plain = P.IidPartitioner(num_partitions=3)
    plain.dataset = hf
    with pytest.raises(ValueError) as error:
        from_flwr(plain, data=fed.dataset)
    assert f"has no {ROW_ID!r} column" in one_line(error)
    with pytest.raises(ValueError) as error:
        from_flwr(P.IidPartitioner(num_partitions=3), hf)
    assert "give test=" in one_line(error)


class _Overlapping(P.Partitioner):
    """A partitioner whose two partitions share row 1."""

    def load_partition(self, partition_id: int):
        return self.dataset.select([0, 1] if partition_id == 0 else [1, 2])

    @property
    def num_partitions(self) -> int:
        return 2


def test_a_row_in_two_partitions_is_refused():
    hf = datasets.Dataset.from_dict(table(10))
    with pytest.raises(ValueError) as error:
        from_flwr(_Overlapping(), hf, data=from_hf(hf, ["f0"], test=hf))
    assert one_line(error) == "_Overlapping: row 1 is in 2 partitions; a fedsample client owns its rows alone"


def test_flower_scheme_validates_and_partitions_any_dataset():
    with pytest.raises(ValueError) as error:
        FlowerScheme("DirichletPartitoner", {})
    assert one_line(error).startswith("unknown Flower partitioner 'DirichletPartitoner'; known: ContinuousPartitioner, DirichletPartitioner")
    with pytest.raises(ValueError) as error:
        FlowerScheme("DirichletPartitioner", {"num_partitions": 4, "partition_by": "label", "alpah": 0.5})
    assert one_line(error).startswith("flwr:DirichletPartitioner: unknown parameter(s) alpah; known: num_partitions, partition_by, alpha")
    with pytest.raises(ValueError) as error:
        FlowerScheme("DirichletPartitioner", {"num_partitions": 4, "partition_by": "label", "alpha": -1.0})
    assert one_line(error).startswith("flwr:DirichletPartitioner: ")
    digits = fs.data.load_dataset("digits")
    scheme = FlowerScheme("DirichletPartitioner", {"num_partitions": 10, "partition_by": "label", "alpha": 0.5})
    a, b, c = (fs.data.partition(digits, scheme, seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(a.order, b.order)  # the Flower seed is drawn from the partition seed
    assert not np.array_equal(a.order, c.order)
    assert np.array_equal(np.sort(a.order), np.arange(digits.num_train)) and a.scheme.startswith("flwr:DirichletPartitioner(")


# --- runs -----------------------------------------------------------------------------------------------


def test_a_run_from_an_hf_dataset_equals_the_run_from_its_arrays():
    cols, test = table(240, classes=3), table(60, seed=1, classes=3)
    x = np.stack([cols["f0"], cols["f1"], cols["f2"]], axis=1)
    x_test = np.stack([test["f0"], test["f1"], test["f2"]], axis=1)
    arrays = fs.data.Dataset("blobs", x, cols["label"], x_test, test["label"], 3)
    hf = from_hf(datasets.Dataset.from_dict(cols), ["f0", "f1", "f2"], test=datasets.Dataset.from_dict(test))
    histories = []
    for ds in (arrays, hf):
        fed = fs.data.partition(ds, fs.data.Dirichlet(num_clients=8, alpha=0.5, min_size=5), seed=0)
        result = fs.simulate(fs.recipes.fedavg(clients_per_round=3, lr=0.2), federated_data=fed, model=fs.models.MLP(hidden=8),
                             rounds=4, seed=0)
        histories.append(result.history)
    assert histories[0] == histories[1]
    assert len(histories[0]) == 4 and histories[0][-1]["accuracy"] > 0


def test_experiment_config_errors_are_one_line():
    base = {"name": "x", "rounds": 1, "partition": {"scheme": "iid", "num_clients": 2}, "model": {"name": "logreg"},
            "strategies": [{"recipe": "fedavg", "clients_per_round": 1}]}
    with pytest.raises(ConfigError) as error:
        parse_config({**base, "dataset": {"source": "hf", "format": "parquet", "data_files": "a.parquet", "featurs": ["a"]}})
    assert one_line(error) == "config: dataset: featurs: unknown key"
    with pytest.raises(ConfigError) as error:
        parse_config({**base, "dataset": {"source": "hf", "format": "xlsx", "data_files": "a.xlsx"}})
    assert "format: Input should be 'csv', 'parquet', 'json' or 'imagefolder'" in one_line(error)
    config = parse_config({**base, "dataset": {"name": "digits"}, "partition": {"scheme": "flwr:NoSuchPartitioner"}})
    with pytest.raises(ConfigError) as error:
        prepare(config)
    assert one_line(error).startswith("partition: unknown Flower partitioner 'NoSuchPartitioner'; known: ")


def write_experiment(tmp_path: Path, dataset: str, partition: str) -> Path:
    path = tmp_path / "experiment.toml"
    path.write_text(f"""name = "hf-parquet"
rounds = 2
seeds = [0]
[dataset]
{dataset}
[partition]
{partition}
[model]
name = "mlp"
hidden = 8
[[strategies]]
recipe = "fedavg"
clients_per_round = 3
lr = 0.2
""")
    return path


def run_cli(config: Path, out: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """``python -m fedsample.cli run`` in a fresh process with no Hugging Face variables set and no network use
    (the offline defaults are fedsample's), its cache under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FLWR_"))}
    env.update({"PYTHONPATH": str(SRC), "HF_HOME": str(tmp_path / "hf-home")})
    return subprocess.run([sys.executable, "-m", "fedsample.cli", "run", str(config), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, env=env, timeout=300)


def test_cli_runs_a_flower_partition_of_a_local_parquet_file_offline(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = table(300)
    pq.write_table(pa.table(cols), tmp_path / "data.parquet")
    config = write_experiment(
        tmp_path,
        f'source = "hf"\nformat = "parquet"\ndata_files = "{tmp_path / "data.parquet"}"\nfeatures = ["f0", "f1", "f2"]\ntest_fraction = 0.2',
        'scheme = "flwr:NaturalIdPartitioner"\npartition_by = "user"',
    )
    done = run_cli(config, tmp_path / "out", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads((tmp_path / "out" / "partition_stats.json").read_text())
    assert stats["scheme"] == "flwr:NaturalIdPartitioner(partition_by='user')"
    assert stats["user_ids"] == [f"u{i}" for i in range(7)] and stats["num_train"] == 240 and stats["num_unassigned"] == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(results["strategies"]["fedavg"]["history"][0]) == 2


def test_cli_hub_name_without_a_local_copy_is_one_line_and_writes_nothing(tmp_path):
    config = write_experiment(tmp_path, 'source = "hf"\npath = "nobody-here/no-such-dataset"', 'scheme = "iid"\nnum_clients = 4')
    done = run_cli(config, tmp_path / "out", tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is neither a local directory nor a Hub dataset in the local cache (offline mode" in lines[0]
    assert not (tmp_path / "out").exists()


def test_offline_defaults_respect_the_users_choice(tmp_path):
    probe = ("import os, fedsample.data.hf as h; h.hf_datasets(); import datasets; "
             "print(os.environ.get('HF_HUB_OFFLINE'), os.environ.get('HF_DATASETS_OFFLINE'), os.environ.get('FLWR_TELEMETRY_ENABLED'), "
             "os.environ.get('HF_HUB_DISABLE_TELEMETRY'), datasets.config.HF_HUB_OFFLINE)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FLWR_"))}
    outputs = []
    for extra in ({}, {"HF_HUB_OFFLINE": "0", "FLWR_TELEMETRY_ENABLED": "1"}):
        env = {**clean, **extra, "PYTHONPATH": str(SRC), "HF_HOME": str(tmp_path)}
        outputs.append(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120).stdout.split())
    assert outputs[0] == ["1", "1", "0", "1", "True"]
    assert outputs[1] == ["0", "None", "1", "1", "False"]
