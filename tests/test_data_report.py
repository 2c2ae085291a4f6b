"""Schemes by name, partition statistics (JSON-able) and the partition picture."""

import json

import numpy as np
import pytest

from fedsample.data import (IID, Dirichlet, LocalLongTail, LogNormalSizes, Natural, Shards, load_dataset, make_scheme,
                            partition, partition_stats, write_partition_report)
from fedsample.data.report import _subset
from fedsample.data.stats import gini


def test_make_scheme_names_and_coercion():
    assert make_scheme("iid", num_clients="10") == IID(10)
    assert make_scheme("dirichlet", num_clients=10, alpha="0.5") == Dirichlet(10, 0.5)
    assert make_scheme("shards", shard_size="300", drop_remainder="true") == Shards(300, 1, True)
    assert make_scheme("lognormal") == LogNormalSizes(2.0, 4.0)
    assert make_scheme("LLT", alpha_l="0.9") == LocalLongTail(0.9)
    assert isinstance(make_scheme("natural"), Natural)


@pytest.mark.parametrize("name, params, message", [
    ("lda", {}, "unknown partition scheme 'lda'; known: iid, dirichlet, shards, lognormal, llt, natural"),
    ("iid", {"clients": 3}, "unknown parameter\\(s\\) clients; known: num_clients"),
    ("dirichlet", {"num_clients": 3}, "missing parameter\\(s\\) alpha"),
    ("dirichlet", {"num_clients": "three", "alpha": 1}, "num_clients='three' is not a valid int"),
    ("shards", {"shard_size": 3, "drop_remainder": "maybe"}, "drop_remainder='maybe' is not a valid bool"),
    ("dirichlet", {"num_clients": 3, "alpha": "0"}, "alpha must be > 0"),
])
def test_make_scheme_errors(name, params, message):
    with pytest.raises(ValueError, match=message):
        make_scheme(name, **params)


def test_gini():
    assert gini(np.ones(10)) == pytest.approx(0)
    assert gini(np.array([0, 0, 0, 10])) == pytest.approx(0.75)


def test_partition_stats_json():
    ds = load_dataset("digits")
    fed = partition(ds, Dirichlet(8, 0.5), seed=0)
    stats = partition_stats(fed)
    text = json.dumps(stats)  # JSON-able, no numpy scalars
    back = json.loads(text)
    assert back["num_clients"] == 8 and sum(back["client_sizes"]) == ds.num_train
    assert np.array_equal(np.array(back["label_counts"]), fed.label_counts())
    for key in ("gini", "cv", "max_min_ratio", "max_mean_ratio"):
        assert key in back["imbalance"]
    assert back["sizes"]["min"] == fed.sizes().min() and back["sizes"]["mean"] == pytest.approx(ds.num_train / 8)


def test_report_files(tmp_path):
    ds = load_dataset("digits")
    fed = partition(ds, LocalLongTail(0.9))
    write_partition_report(fed, tmp_path / "out")
    assert (tmp_path / "out" / "partition.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["num_clients"] == 10


def test_report_many_clients_and_regression(tmp_path):
    ds = load_dataset("digits")
    many = partition(ds, LogNormalSizes(mean=3, sigma=1.0))
    write_partition_report(many, tmp_path / "many")
    assert (tmp_path / "many" / "partition.png").stat().st_size > 1000
    picked, title = _subset(many.sizes(), 50)
    assert len(picked) == 50 and f"50 of {many.num_clients:,} clients" in title
    assert list(many.sizes()[picked]) == sorted(many.sizes()[picked], reverse=True)
    reg = partition(load_dataset("isfedavg-regression", num_agents=20, points_per_agent=10), Natural())
    write_partition_report(reg, tmp_path / "reg")
    stats = json.loads((tmp_path / "reg" / "stats.json").read_text())
    assert stats["label_counts"] is None and stats["user_ids"][:2] == ["0", "1"]


def test_report_out_dir_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        write_partition_report(partition(load_dataset("digits"), IID(3)), tmp_path / "f")


def test_data_modules_import_one_way():
    """No import cycle inside fedsample.data, counting imports inside functions and under TYPE_CHECKING
    (on main, types imported stats inside ``FederatedData.stats`` while stats imported types)."""
    import ast
    from pathlib import Path

    import fedsample.data

    folder = Path(fedsample.data.__file__).parent
    graph = {}
    for path in folder.glob("*.py"):
        if path.stem == "__init__":
            continue
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            targets |= {name.split(".")[2] for name in names if name.startswith("fedsample.data.")}
        graph[path.stem] = targets - {path.stem}
    assert graph["stats"] == set()  # a leaf: types imports it
    assert graph.get("checks", set()) == set()  # a leaf: types, formats, datasets and partition import it

    def reaches(start, goal, seen=()):
        return any(t == goal or (t not in seen and reaches(t, goal, seen + (t,))) for t in graph.get(start, ()))

    cycles = sorted(m for m in graph if reaches(m, m))
    assert cycles == [], f"import cycles through {cycles}: {graph}"
