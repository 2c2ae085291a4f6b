"""The peers benchmark's table code on stub measurements (the benchmark itself is not run here)."""

import importlib.util
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[1] / "benchmarks" / "peers"


@pytest.fixture(scope="module")
def table():
    spec = importlib.util.spec_from_file_location("peers_table", PEERS / "table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["peers_table"] = module
    spec.loader.exec_module(module)
    return module


def stub(name, seconds, workload="cifar", threads=1, **extra):
    return {"name": name, "s_per_round": seconds, "workload": workload, "threads": threads,
            "time_to_first_round_s": 2.0 * seconds, "peak_rss_mb": 100.0, **extra}


def test_ratios_to_the_floor_and_the_peer_within_one_workload_and_thread_count(table):
    results = [stub("floor-round", 2.0), stub("pfl", 4.0), stub("fedsample-loop", 3.0),
               stub("floor-round", 1.0, threads=2), stub("fedsample-loop", 5.0, threads=2)]
    by_key = {(r["name"], r["threads"]): r for r in table.rows(results)}
    assert by_key["fedsample-loop", 1]["x_floor"] == pytest.approx(1.5)
    assert by_key["fedsample-loop", 1]["x_peer"] == pytest.approx(0.75)
    assert by_key["pfl", 1]["x_floor"] == pytest.approx(2.0)
    assert by_key["fedsample-loop", 2]["x_floor"] == pytest.approx(5.0)
    assert by_key["fedsample-loop", 2]["x_peer"] is None  # no pfl measurement at 2 threads


def test_flower_sweep_keeps_the_fastest_num_cpus_and_failures_show_their_reason(table):
    results = [stub("flower", 9.0, "small-5", num_cpus=1), stub("flower", 6.0, "small-5", num_cpus=2),
               stub("floor-round", 3.0, "small-5"), {"name": "fedsample-auto", "workload": "small-5", "threads": 1,
                                                     "error": "exit 1: ValueError: no auto"}]
    table_rows = {r["name"]: r for r in table.rows(results)}
    assert table_rows["flower"]["s_per_round"] == 6.0 and table_rows["flower"]["num_cpus"] == 2
    assert table_rows["flower"]["x_floor"] == pytest.approx(2.0)
    assert table_rows["fedsample-auto"]["x_floor"] is None
    about = {"cpu": "stub", "cores": 2, "torch": "x", "date_utc": "d", "load_average": [1.0]}
    text = table.markdown(list(table_rows.values()), about)
    assert "ValueError: no auto" in text and "| 2.00× |" in text and "num_cpus=2" in text


def test_a_runner_measured_again_replaces_its_earlier_rows_and_the_others_stay(table):
    """run.py --append: a runner re-measured (same workload, threads, name) replaces its earlier measurements, so
    the table never picks the best of an old and a new try; runners not re-run keep theirs."""
    earlier = [stub("pfl", 4.0), stub("fedsample-auto", 2.0), stub("fedsample-auto", 9.0, threads=2),
               stub("flower", 8.0, workload="small-1", num_cpus=0.25), stub("flower", 9.0, workload="small-1", num_cpus=0.5)]
    new = [stub("fedsample-auto", 3.0)]
    got = table.merged(earlier, new)
    assert [(r["name"], r["threads"], r["s_per_round"]) for r in got if r["workload"] == "cifar"] == [
        ("pfl", 1, 4.0), ("fedsample-auto", 2, 9.0), ("fedsample-auto", 1, 3.0)]
    assert sorted(r["num_cpus"] for r in got if r["name"] == "flower") == [0.25, 0.5]
    best = {(r["name"], r["threads"]): r["s_per_round"] for r in table.rows(got)}
    assert best[("fedsample-auto", 1)] == 3.0  # not the faster 2.0 of the earlier try
