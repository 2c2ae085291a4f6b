"""The study runner: partition_seed, the validation split, grids selected on it, best/final metrics with
the sample standard deviation, server learning-rate schedules (with resume), --only and --jobs."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from fedsample.cli import main
from fedsample.experiments import grid, runner
from fedsample.experiments.config import ConfigError, parse_config
from fedsample.experiments.stats import best_round, over_seeds
from fedsample.experiments.validation import carve_validation
from fedsample.recipes import recipe
from fedsample.simulation import simulate
from fedsample.training.schedule import Schedule, scheduled_step
from fedsample.training.server import FedAdam, ServerSGD

from helpers import blobs, federate
from fedsample.callbacks import Checkpoint


def config(**changes) -> dict:
    """A tiny study on digits: 10 IID clients, logistic regression, 2 seeds."""
    base = {
        "name": "study", "rounds": 4, "seeds": [0, 1], "eval_every": 2,
        "dataset": {"name": "digits"}, "partition": {"scheme": "iid", "num_clients": 10}, "model": {"name": "logreg"},
        "strategies": [
            {"recipe": "fedavg", "label": "A", "clients_per_round": 4, "steps": 2, "lr": 0.3},
            {"recipe": "fedsampling", "label": "B", "K": 40, "M": 10, "server_lr": 0.3},
        ],
    }
    return {**base, **changes}


# --- schedules ------------------------------------------------------------------------------------


def test_schedule_factors_by_hand():
    step = Schedule("step", every=3, gamma=0.5)
    assert [step.factor(t) for t in range(7)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    assert Schedule("exponential", gamma=0.9).factor(2) == pytest.approx(0.81)
    cosine = Schedule("cosine", rounds=4)
    assert [cosine.factor(t) for t in (0, 1, 2, 4, 10)] == pytest.approx([1, (1 + math.sqrt(0.5)) / 2, 0.5, 0, 0])
    assert Schedule().factor(50) == 1.0


def test_scheduled_step_scales_the_server_learning_rate():
    params, delta = {"w": torch.zeros(2)}, {"w": torch.ones(2)}
    new, _ = scheduled_step(ServerSGD(0.5), Schedule("exponential", gamma=0.5), 2, params, delta, {})
    assert new["w"].tolist() == [-0.125, -0.125]
    adam = FedAdam(lr=0.1)
    state = adam.init_state(params)
    scaled, _ = scheduled_step(adam, Schedule("step", every=1, gamma=0.5), 1, params, delta, state)
    by_hand, _ = FedAdam(lr=0.05).step(params, delta, state)
    assert torch.equal(scaled["w"], by_hand["w"])
    kept, moved = scheduled_step(adam, Schedule("cosine", rounds=2), 2, params, delta, state)
    assert torch.equal(kept["w"], params["w"]) and not torch.equal(moved["m"]["w"], state["m"]["w"])


def _fedavg(schedule: Schedule | None = None):
    return dataclasses.replace(recipe("fedavg", clients_per_round=3, steps=2, lr=0.2), schedule=schedule)


def test_a_schedule_changes_the_trajectory_from_round_two():
    fed = federate(blobs(), [40] * 6)
    constant = simulate(_fedavg(), fed, model=_logreg(), rounds=3, seed=0)
    decayed = simulate(_fedavg(Schedule("exponential", gamma=0.3)), fed, model=_logreg(), rounds=3, seed=0)
    assert constant.history[0]["train_loss"] == decayed.history[0]["train_loss"]  # factor 1 in the first round
    assert any(not torch.equal(constant.params[k], decayed.params[k]) for k in constant.params)
    assert constant.final["loss"] != decayed.final["loss"]


def _logreg():
    from fedsample.models import model_from_name

    return model_from_name("logreg")


def test_resume_mid_schedule_equals_an_uninterrupted_run(tmp_path):
    fed = federate(blobs(), [40] * 6)
    strategy = _fedavg(Schedule("step", every=2, gamma=0.5))
    whole = simulate(strategy, fed, model=_logreg(), rounds=5, seed=3)
    simulate(strategy, fed, model=_logreg(), rounds=3, seed=3, callbacks=[Checkpoint(tmp_path / "c.pt", every=1)])
    resumed = simulate(strategy, fed, model=_logreg(), rounds=5, seed=3, callbacks=[Checkpoint(tmp_path / "c.pt", resume=True)])
    for k in whole.params:
        assert torch.equal(whole.params[k], resumed.params[k])
    assert resumed.history == whole.history


# --- statistics -----------------------------------------------------------------------------------


def test_sample_sd_is_ddof_one():
    values = [0.5, 0.7, 0.95]
    stats = over_seeds(values)
    assert stats["sd"] == pytest.approx(np.std(values, ddof=1)) and stats["n"] == 3 and stats["mean"] == pytest.approx(np.mean(values))
    assert over_seeds([0.4])["sd"] is None
    stopped = over_seeds([0.2, None, 0.6])
    assert stopped["n"] == 2 and stopped["sd"] == pytest.approx(math.sqrt(0.08)) and stopped["per_seed"] == [0.2, None, 0.6]


def test_best_round_is_max_accuracy_and_min_loss():
    history = [{"round": 1, "accuracy": 0.3, "loss": 2.0}, {"round": 2}, {"round": 3, "accuracy": 0.5, "loss": 1.0},
               {"round": 4, "accuracy": 0.4, "loss": 1.5}]
    assert best_round(history, "accuracy") == 0.5 and best_round(history, "loss") == 1.0 and best_round(history, "mse") is None


# --- validation split and partition seed -----------------------------------------------------------


def test_validation_split_is_stratified_and_disjoint():
    ds = blobs(n=300, classes=3)
    train, val = carve_validation(ds, 0.2, seed=5)
    counts = np.bincount(ds.y_train, minlength=3)
    assert np.array_equal(np.bincount(val.y, minlength=3), np.round(0.2 * counts).astype(int))
    assert train.num_train + len(val.y) == ds.num_train
    kept = np.setdiff1d(np.arange(ds.num_train), val.rows)
    assert np.array_equal(train.x_train, ds.x_train[kept]) and np.array_equal(val.x, ds.x_train[val.rows])
    assert train.x_test is ds.x_test  # the test split is untouched
    again, _ = carve_validation(ds, 0.2, seed=5)
    other, _ = carve_validation(ds, 0.2, seed=6)
    assert np.array_equal(again.x_train, train.x_train) and not np.array_equal(other.x_train, train.x_train)


def test_a_natural_partition_keeps_each_rows_user_after_the_carve():
    from fedsample.data import partition
    from fedsample.data.partition import Natural

    ds = blobs(n=200)
    users = np.arange(200) % 7
    ds = dataclasses.replace(ds, meta={"client_ids": users, "client_ids_test": np.zeros(60)})
    train, val = carve_validation(ds, 0.25, seed=1)
    kept = np.setdiff1d(np.arange(200), val.rows)
    assert np.array_equal(train.meta["client_ids"], users[kept]) and len(train.meta["client_ids_test"]) == 60
    fed = partition(train, Natural())
    assert fed.num_clients == 7 and sum(fed.sizes()) == len(kept)


def test_the_partitioned_data_excludes_the_validation_rows():
    plan = runner.prepare(parse_config(config(validation={"fraction": 0.1})))
    fed, val = plan.federation(0), plan.validation(0)
    original = plan.dataset
    assert fed.dataset.num_train + len(val.y) == original.num_train
    assert sum(fed.sizes()) == fed.dataset.num_train  # every client row comes from the carved training data
    train_rows = {original.x_train[i].tobytes() for i in np.setdiff1d(np.arange(original.num_train), val.rows)}
    assert all(row.tobytes() in train_rows for row in fed.dataset.x_train)
    test_rows = {row.tobytes() for row in original.x_test}
    assert not any(row.tobytes() in test_rows for row in val.x)


def test_the_plan_keeps_one_seeds_split_and_gives_it_again_unchanged():
    """Each seed's split is a copy of the training data: the plan holds one at a time (the last asked; prepare asks
    every seed), and a seed asked again is carved and partitioned again into the same rows (memory, issue 38)."""
    plan = runner.prepare(parse_config(config(seeds=[0, 1, 2], validation={"fraction": 0.1})))
    assert list(plan.federations) == [2] and list(plan.validations) == [2]
    first = plan.federation(0)
    kept = (first.order.copy(), first.offsets.copy(), first.dataset.x_train.copy(), plan.validation(0).rows.copy())
    plan.federation(1)
    assert list(plan.federations) == [1]
    again = plan.federation(0)
    assert again is not first
    for a, b in zip(kept, (again.order, again.offsets, again.dataset.x_train, plan.validation(0).rows)):
        np.testing.assert_array_equal(a, b)


def test_scoring_on_the_validation_split_changes_no_test_number(tmp_path):
    """B run after A (whose validation scoring builds a module) equals B alone and B simulated directly."""
    cfg = parse_config(config(rounds=2, seeds=[0], validation={"fraction": 0.1}))
    plan = runner.prepare(cfg)
    both, _ = runner.run_experiment(plan, tmp_path / "both")
    alone, _ = runner.run_experiment(plan, tmp_path / "alone", only=["B"])
    direct = simulate(plan.variants["B"][""], plan.federation(0), plan.model, rounds=2, seed=0, eval_every=2)
    assert both["strategies"]["B"]["history"] == alone["strategies"]["B"]["history"] == [json.loads(json.dumps(direct.history))]
    assert both["strategies"]["B"]["validation"]["final"]["accuracy"]["n"] == 1


def test_a_configured_schedule_reaches_the_strategy():
    cfg = parse_config(config(strategies=[{"recipe": "fedavg", "label": "A", "lr_schedule": {"kind": "cosine"}},
                                          {"recipe": "fedavg", "label": "B", "lr_schedule": {"kind": "step", "every": 2, "gamma": 0.1}}]))
    plan = runner.prepare(cfg)
    assert plan.strategies["A"].schedule == Schedule("cosine", rounds=4)
    assert plan.strategies["B"].schedule == Schedule("step", every=2, gamma=0.1)


def test_partition_seed_fixes_the_partition_across_seeds():
    fixed = runner.prepare(parse_config(config(partition_seed=7)))
    assert fixed.federation(0) is fixed.federation(1)
    free = runner.prepare(parse_config(config()))
    a, b = free.federation(0).to_client_indices(), free.federation(1).to_client_indices()
    assert any(not np.array_equal(x, y) for x, y in zip(a, b))


# --- grids ----------------------------------------------------------------------------------------


def test_grid_selection_by_validation_loss_without_accuracy():
    strategy = parse_config(config(validation={"fraction": 0.1}, strategies=[{"recipe": "fedavg", "grid": {"lr": [0.1, 0.2]}}])).strategies[0]
    key, selected = grid.select(strategy, {"0.1": [{"loss": 0.4}], "0.2": [{"loss": 0.3}]})
    assert key == "0.2" and selected["grid"] == {"0.1": pytest.approx(0.4), "0.2": pytest.approx(0.3)} and "loss" in selected["by"]


def test_grid_selection_by_hand():
    strategy = parse_config(config(
        validation={"fraction": 0.1}, strategies=[{"recipe": "fedavg", "label": "A", "grid": {"lr": [0.01, 0.1, 1.0]}}],
    )).strategies[0]
    assert list(grid.variants(strategy)) == ["0.01", "0.1", "1.0"] and grid.variants(strategy)["0.1"] == {"lr": 0.1}
    scores = {"0.01": [{"accuracy": 0.5}, {"accuracy": 0.7}], "0.1": [{"accuracy": 0.8}, {"accuracy": 0.7}], "1.0": [None, {"accuracy": 0.99}]}
    key, selected = grid.select(strategy, scores)
    assert key == "0.1" and selected["value"] == 0.1 and selected["param"] == "lr"
    assert selected["grid"] == {"0.01": pytest.approx(0.6), "0.1": pytest.approx(0.75), "1.0": None}
    assert "validation accuracy" in selected["by"]


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid") / "g"
    cfg = parse_config(config(
        validation={"fraction": 0.15}, partition_seed=0,
        strategies=[{"recipe": "fedavg", "label": "A", "clients_per_round": 4, "steps": 3, "grid": {"lr": [1e-5, 0.5]}}],
    ))
    document, results = runner.run_experiment(runner.prepare(cfg), out)
    return out, document, results


def test_grid_selects_the_learning_rate_that_clearly_wins(grid_run):
    out, document, results = grid_run
    entry = document["strategies"]["A"]
    assert list(document["strategies"]) == ["A"]
    assert entry["selected"]["value"] == 0.5 and entry["selected"]["grid"]["0.5"] > entry["selected"]["grid"]["1e-05"] + 0.3
    assert entry["validation"]["final"]["accuracy"]["mean"] == pytest.approx(entry["selected"]["grid"]["0.5"])
    assert entry["final"]["accuracy"]["mean"] > 0.5  # the test metrics are the selected value's
    assert len(list((out / "checkpoints").glob("*.pt"))) == 4  # one per (value, seed)
    assert "Selected" in (out / "summary.md").read_text() and "lr=0.5" in (out / "summary.md").read_text()


def test_best_is_at_least_final(grid_run):
    _, document, _ = grid_run
    entry = document["strategies"]["A"]
    for b, f in zip(entry["best"]["accuracy"]["per_seed"], entry["final"]["accuracy"]["per_seed"]):
        assert b >= f
    for b, f in zip(entry["best"]["loss"]["per_seed"], entry["final"]["loss"]["per_seed"]):
        assert b <= f


def test_grid_resume_reuses_each_values_checkpoints(grid_run):
    out, document, _ = grid_run
    again, _ = runner.run_experiment(runner.prepare(parse_config(document["config"])), out, resume=True)
    assert again["strategies"]["A"]["final"] == document["strategies"]["A"]["final"]


# --- --only, --jobs and bad input -------------------------------------------------------------------


def test_jobs_two_gives_the_numbers_of_jobs_one_and_reports_every_round(tmp_path):
    cfg = parse_config(config(rounds=3))
    one, _ = runner.run_experiment(runner.prepare(cfg), tmp_path / "one")
    seen = []
    two, _ = runner.run_experiment(runner.prepare(cfg), tmp_path / "two", jobs=2, progress=lambda label, t: seen.append((label, t)))
    for label in one["strategies"]:
        assert two["strategies"][label]["final"] == one["strategies"][label]["final"]
        assert two["strategies"][label]["history"] == one["strategies"][label]["history"]
    assert sorted(seen) == sorted((label, t) for label in ("A", "B") for t in (1, 2, 3) for _ in (0, 1))


def test_only_runs_a_subset(tmp_path):
    cfg = parse_config(config(rounds=2, seeds=[0]))
    document, _ = runner.run_experiment(runner.prepare(cfg), tmp_path / "o", only=["B"])
    assert list(document["strategies"]) == ["B"] and [s["label"] for s in document["config"]["strategies"]] == ["B"]


def _toml(tmp_path, extra: str = "") -> str:
    path = tmp_path / "exp.toml"
    path.write_text(
        'name = "t"\nrounds = 2\nseeds = [0]\n' + extra + '\n[dataset]\nname = "digits"\n[partition]\nscheme = "iid"\nnum_clients = 5\n'
        '[model]\nname = "logreg"\n[[strategies]]\nrecipe = "fedsampling"\nlabel = "FS"\nK = 20\nM = 10\n'
        '[[strategies]]\nrecipe = "centralized"\nlabel = "C"\nK = 20\n'
    )
    return str(path)


def test_cli_only_and_unknown_label(tmp_path, capsys):
    assert main(["run", _toml(tmp_path), "--out", str(tmp_path / "r"), "--quiet", "--only", "C"]) == 0
    assert list(json.loads((tmp_path / "r" / "results.json").read_text())["strategies"]) == ["C"]
    capsys.readouterr()
    assert main(["run", _toml(tmp_path), "--out", str(tmp_path / "r2"), "--quiet", "--only", "X"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'X'" in err and "FS, C" in err and not (tmp_path / "r2").exists()


@pytest.mark.parametrize("args, words", [
    (["--jobs", "0"], "--jobs must be >= 1"),
])
def test_cli_bad_jobs(tmp_path, capsys, args, words):
    assert main(["run", _toml(tmp_path), "--out", str(tmp_path / "r"), "--quiet", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


BAD = {
    "grid without validation": (dict(strategies=[{"recipe": "fedavg", "grid": {"lr": [0.1, 0.2]}}]), "add a [validation] table"),
    "grid of two parameters": (dict(validation={"fraction": 0.1}, strategies=[{"recipe": "fedavg", "grid": {"lr": [0.1, 0.2], "steps": [1, 2]}}]),
                               "exactly one parameter"),
    "grid of one value": (dict(validation={"fraction": 0.1}, strategies=[{"recipe": "fedavg", "grid": {"lr": [0.1]}}]), "at least two"),
    "grid and parameter": (dict(validation={"fraction": 0.1}, strategies=[{"recipe": "fedavg", "lr": 0.1, "grid": {"lr": [0.1, 0.2]}}]),
                           "both a parameter and a grid"),
    "validation fraction 0": (dict(validation={"fraction": 0.0}), "validation.fraction"),
    "negative partition seed": (dict(partition_seed=-1), "partition_seed"),
    "step schedule without gamma": (dict(strategies=[{"recipe": "fedavg", "lr_schedule": {"kind": "step", "every": 2}}]), "needs gamma"),
    "unknown schedule kind": (dict(strategies=[{"recipe": "fedavg", "lr_schedule": {"kind": "warmup"}}]), "lr_schedule.kind"),
    "unknown schedule key": (dict(strategies=[{"recipe": "fedavg", "lr_schedule": {"kind": "cosine", "period": 3}}]), "unknown key"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_study_settings_are_one_line(name):
    changes, words = BAD[name]
    with pytest.raises(ConfigError) as error:
        parse_config(config(**changes))
    assert words in str(error.value) and len(str(error.value).splitlines()) == 1


def test_unknown_grid_parameter_is_one_line():
    cfg = parse_config(config(validation={"fraction": 0.1}, strategies=[{"recipe": "fedavg", "label": "A", "grid": {"lrr": [0.1, 0.2]}}]))
    with pytest.raises(ConfigError, match="has no parameter 'lrr'"):
        runner.prepare(cfg)


def test_jobs_with_ray_is_refused(tmp_path):
    plan = runner.prepare(parse_config(config(rounds=1)))
    with pytest.raises(ConfigError, match="exclude each other"):
        runner.run_plan(plan, tmp_path / "r", jobs=2, options={"federation": "ray"})
