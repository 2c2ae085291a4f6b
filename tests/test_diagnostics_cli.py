"""``fedsample diagnose``: writes diagnostics.json, summary.md and three pictures; bad input is one line, exit 2."""

from __future__ import annotations

import json

import pytest

from fedsample.cli import main

CONFIG = """
name = "tiny-diagnose"
rounds = 1
seeds = [3]

[dataset]
name = "digits"

[partition]
scheme = "lognormal"
mean = 40
sigma = 1.0

[model]
name = "logreg"

[[strategies]]
recipe = "fedsampling"
label = "FedSampling"
K = 30
M = 50

[[strategies]]
recipe = "fedavg"
label = "FedAvg"
clients_per_round = 2
steps = 1
batch_size = 1000000
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny.toml"
    path.write_text(CONFIG)
    return path


def test_diagnose_writes_json_table_and_pictures(config, tmp_path, capsys):
    out = tmp_path / "diag"
    assert main(["diagnose", str(config), "--draws", "20", "--out", str(out)]) == 0
    doc = json.loads((out / "diagnostics.json").read_text())
    assert doc["rounds"] == 20 and doc["seed"] == 3 and list(doc["strategies"]) == ["FedSampling", "FedAvg"]
    fsamp = doc["strategies"]["FedSampling"]
    assert set(fsamp) == {"estimator", "exploitation", "cost", "privacy", "seconds"}
    assert len(fsamp["exploitation"]["by_size_decile"]) == 10 and len(fsamp["exploitation"]["by_label"]) == 10
    assert doc["strategies"]["FedAvg"]["privacy"] is None
    for name in ("exploitation.png", "estimator.png", "labels.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| FedSampling |" in (out / "summary.md").read_text() and "| FedAvg |" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["diagnose", "no-such-preset", "--out", "OUT"], "unknown preset"),
    (["diagnose", "CONFIG", "--draws", "1", "--out", "OUT"], "rounds must be >= 4"),
    (["diagnose", "CONFIG", "--out", "MISSING/deeper/out"], "parent folder"),
    (["diagnose", "CONFIG", "--checkpoint", "MISSING/x.pt", "--out", "OUT"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, config, tmp_path, capsys):
    subs = {"CONFIG": str(config), "OUT": str(tmp_path / "o"), "MISSING": str(tmp_path / "missing")}
    argv = [next((a.replace(k, v) for k, v in subs.items() if k in a), a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_diagnosis_that_fails_while_writing_leaves_no_file(config, tmp_path, monkeypatch):
    """The last picture fails: nothing of the diagnosis is in the folder (no half-written set of files)."""
    import fedsample.diagnostics.plots as plots

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(plots, "plot_labels", broken)
    out = tmp_path / "diag"
    with pytest.raises(RuntimeError, match="disk full"):
        main(["diagnose", str(config), "--draws", "8", "--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == []
