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
    assert set(fsamp) == {"estimator", "exploitation", "cost", "privacy", "sampler", "seconds"}
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
    (["diagnose", "CONFIG", "--seed", "-1", "--out", "OUT"], "--seed must be >= 0, got -1"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, config, tmp_path, capsys):
    subs = {"CONFIG": str(config), "OUT": str(tmp_path / "o"), "MISSING": str(tmp_path / "missing")}
    argv = [next((a.replace(k, v) for k, v in subs.items() if k in a), a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_another_models_checkpoint_is_one_line_and_exit_2(config, tmp_path, capsys):
    """A checkpoint of an MLP diagnosed under the logistic regression's config: one line naming the parameter that
    differs, exit 2 (on main a 74-line traceback from the matrix product)."""
    mlp = tmp_path / "mlp.toml"
    mlp.write_text(CONFIG.replace('name = "logreg"', 'name = "mlp"'))
    assert main(["run", str(mlp), "--rounds", "1", "--checkpoint-every", "1", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    checkpoint = next((tmp_path / "run" / "checkpoints").rglob("*.pt"))
    capsys.readouterr()
    assert main(["diagnose", str(config), "--draws", "4", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "the parameters are not this model's" in err and len(err.splitlines()) == 1, err
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


# --- issue 27, class 9: diagnose honours [faults], names the grid value, flags a strategy that diverges in run ---

BASE = """
name = "faults-diagnose"
rounds = 2
seeds = [0]
[dataset]
name = "digits"
[partition]
scheme = "iid"
num_clients = 20
[model]
name = "logreg"
[[strategies]]
recipe = "fedavg"
label = "FedAvg"
clients_per_round = 10
steps = 1
batch_size = 1000000
"""


def test_diagnose_honours_the_experiments_failure_model(tmp_path):
    """With [faults] train dropout 0.5, about half of the 10 chosen clients send an update each round (400 draws:
    mean 5 with a standard error of 0.08; the bounds are 6 standard errors), without faults all 10 do."""
    plain = tmp_path / "plain.toml"
    plain.write_text(BASE)
    faulty = tmp_path / "faulty.toml"
    faulty.write_text(BASE + '[faults]\ndropout = { train = 0.5 }\n')
    updates = {}
    for path in (plain, faulty):
        out = tmp_path / path.stem
        assert main(["diagnose", str(path), "--draws", "400", "--out", str(out)]) == 0
        doc = json.loads((out / "diagnostics.json").read_text())
        updates[path.stem] = doc["strategies"]["FedAvg"]["cost"]["updates"]
        assert (doc["faults"] is None) == (path is plain)
    assert updates["plain"] == 10
    assert 4.5 < updates["faulty"] < 5.5
    assert "failure model" in (tmp_path / "faulty" / "summary.md").read_text()


def test_diagnose_names_the_grid_value_it_diagnoses(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(BASE.replace('batch_size = 1000000\n', 'batch_size = 1000000\n[strategies.grid]\nlr = [0.05, 0.2]\n')
                    + "[validation]\nfraction = 0.1\n")
    out = tmp_path / "out"
    assert main(["diagnose", str(path), "--draws", "8", "--out", str(out)]) == 0
    doc = json.loads((out / "diagnostics.json").read_text())
    assert list(doc["strategies"]) == ["FedAvg [lr=0.05]"]
    assert doc["grid"] == {"FedAvg [lr=0.05]": {"param": "lr", "value": 0.05, "values": [0.05, 0.2]}}
    assert "diagnosed at lr = 0.05, the first of its grid values [0.05, 0.2]" in (out / "summary.md").read_text()


def test_diagnose_flags_a_strategy_that_diverges_in_run(tmp_path, capsys):
    path = tmp_path / "wild.toml"
    path.write_text(BASE + '[[strategies]]\nrecipe = "fedavg"\nlabel = "wild"\nclients_per_round = 10\nlr = 1e38\n')
    out = tmp_path / "out"
    assert main(["diagnose", str(path), "--draws", "8", "--out", str(out)]) == 0
    doc = json.loads((out / "diagnostics.json").read_text())
    check = doc["run_check"]
    assert check["rounds"] == 5 and check["status"]["FedAvg"] == "ok" and "diverged" not in check["status"]["FedAvg"]
    assert "round" in check["status"]["wild"] and check["status"]["wild"] != "ok"
    assert "wild diverges in `fedsample run`" in (out / "summary.md").read_text()
    assert "'wild' diverges in its first 5 rounds" in capsys.readouterr().err
