"""Strict input: types checked before anything runs, ranges up front, extreme legal values work."""

import pytest

from fedsample import privacy, recipes
from fedsample.cli import main
from fedsample.models import LogisticRegression
from fedsample.simulation import simulate
from helpers import blobs, federate

HEAD = 'name = "t"\nseeds = [0]\n[dataset]\nname = "digits"\n[partition]\nscheme = "iid"\nnum_clients = 5\n[model]\nname = "logreg"\n'


def run_toml(tmp_path, text):
    path = tmp_path / "e.toml"
    path.write_text(text)
    return main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"])


@pytest.mark.parametrize(
    "text, words",
    [
        ('rounds = "10"\n' + HEAD + '[[strategies]]\nrecipe = "fedavg"\n', "rounds: Input should be a valid integer"),
        ("rounds = 2.0\n" + HEAD + '[[strategies]]\nrecipe = "fedavg"\n', "rounds"),
        ("rounds = 2\neval_every = true\n" + HEAD + '[[strategies]]\nrecipe = "fedavg"\n', "eval_every"),
        ("rounds = 2\n" + HEAD.replace("seeds = [0]", "seeds = [-1]") + '[[strategies]]\nrecipe = "fedavg"\n', "seeds"),
        ("rounds = 2\n" + HEAD + '[[strategies]]\nrecipe = "fedavg"\nclients_per_round = 6\n', "clients_per_round (m) must be at most the number of clients, 5, got 6"),
        ("rounds = 2\n" + HEAD.replace("num_clients = 5", "num_clients = 100000") + '[[strategies]]\nrecipe = "fedavg"\n', "100000 clients"),
        ("rounds = 2\n" + HEAD + '[[strategies]]\nrecipe = "fedavg"\nlabel = "a\\nb"\n', "printable"),
        ("rounds = 2\n" + HEAD + '[[strategies]]\nrecipe = "fedavg"\n[faults]\ndropout = {train = 1.5}\n', "dropout"),
        ("rounds = 2\n" + HEAD + '[[strategies]]\nrecipe = "fedavg"\n[faults]\ndropout = {upload = 0.1}\n', "faults.dropout"),
    ],
    ids=["string rounds", "float rounds", "bool eval_every", "negative seed", "m > N", "partition too large", "label newline",
         "dropout > 1", "unknown phase"],
)
def test_bad_values_are_one_line_exit_2_before_any_file(tmp_path, capsys, text, words):
    assert run_toml(tmp_path, text) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err, err
    assert not (tmp_path / "out").exists()


def test_faults_table_runs_and_records_failures(tmp_path):
    import json

    text = "rounds = 2\n" + HEAD.replace("num_clients = 5", "num_clients = 20") + (
        '[[strategies]]\nrecipe = "fedsampling"\nK = 40\nM = 20\n'
        "[faults]\ndropout = {train = 0.3, report_size = 0.3}\nstraggler = {deadline = 3.0}\n")
    assert run_toml(tmp_path, text) == 0
    history = json.loads((tmp_path / "out" / "results.json").read_text())["strategies"]["fedsampling"]["history"][0]
    assert all(r["dropped"] == len(r["failed"]) for r in history) and sum(r["dropped"] for r in history) > 0


@pytest.mark.parametrize("epsilon", [800.0, 1e300])
def test_epsilon_large_enough_to_overflow_exp_works(epsilon):
    assert privacy.alpha_for(epsilon, 100) == 1.0
    fed = federate(blobs(), [40] * 6)
    result = simulate(recipes.fedsampling(K=60, epsilon=epsilon, M=2, server_lr=0.5), federated_data=fed, model=LogisticRegression(), rounds=2)
    assert result.history[-1]["size_estimate"] == pytest.approx(6.0)  # M = 2: every report is 1, alpha = 1
