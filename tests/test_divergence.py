"""Divergence is loud and contained: one line naming strategy, seed, round and likely cause; the other
strategies and seeds still run and are written; strict JSON; non-zero exit at the end."""

import json

import pytest

from fedsample import recipes
from fedsample.cli import main
from fedsample.models import LogisticRegression
from fedsample.simulation import Diverged, simulate
from helpers import blobs, federate


def reject_constant(value):
    raise ValueError(f"non-standard JSON constant {value}")


def test_simulate_raises_diverged_naming_strategy_seed_and_round():
    fed = federate(blobs(), [40] * 6)
    strategy = recipes.fedavg(clients_per_round=3, lr=1e38, batch_size=8)
    with pytest.raises(Diverged, match=r"^fedavg, seed 4, round \d+: .*learning rate"):
        simulate(strategy, federated_data=fed, model=LogisticRegression(), rounds=20, seed=4)


def test_cli_contains_a_diverging_strategy(tmp_path, capsys):
    path = tmp_path / "e.toml"
    path.write_text(
        'name = "div"\nrounds = 4\nseeds = [0, 1]\n[dataset]\nname = "digits"\n[partition]\nscheme = "iid"\n'
        'num_clients = 6\n[model]\nname = "logreg"\n'
        '[[strategies]]\nrecipe = "fedavg"\nlabel = "sane"\nclients_per_round = 3\nlr = 0.1\n'
        '[[strategies]]\nrecipe = "fedavg"\nlabel = "wild"\nclients_per_round = 3\nlr = 1e38\n'
    )
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr()
    lines = [line for line in (err.out + err.err).splitlines() if "diverged" in line]
    assert len([line for line in lines if "'wild' diverged" in line]) == 2  # one line per seed
    assert any("seed 0, round" in line and "learning rate" in line for line in lines)
    doc = json.loads((out / "results.json").read_text(), parse_constant=reject_constant)  # strict JSON
    assert doc["strategies"]["sane"]["status"] == ["ok", "ok"] and "accuracy" in doc["strategies"]["sane"]["final"]
    wild = doc["strategies"]["wild"]
    assert all(s.startswith("'wild' diverged") for s in wild["status"])
    for kind in ("final", "best"):  # every seed stopped: the documented keys stay, with nulls (issue 27, class 9)
        assert set(wild[kind]) == set(doc["strategies"]["sane"][kind]) == {"accuracy", "macro_f1", "loss"}
        for stats in wild[kind].values():
            assert stats == {"mean": None, "sd": None, "n": 0, "per_seed": [None, None]}
    summary = (out / "summary.md").read_text().replace("\\", "")
    assert "'wild' diverged" in summary and "| wild | — | — | — | — |" in summary
