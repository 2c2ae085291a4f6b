"""Resume never mixes runs: checkpoints carry a fingerprint, corrupt ones are one line, names never
collide, output folders are not silently reused, files get the user's permissions."""

import json
import os
import stat

import pytest
import torch

from fedsample import recipes
from fedsample.cli import main
from fedsample.experiments.runner import checkpoint_path
from fedsample.models import LogisticRegression, MLP
from fedsample.callbacks import Checkpoint
from fedsample.simulation import CheckpointError, simulate
from helpers import blobs, federate

FED = federate(blobs(), [40] * 6)
STRATEGY = recipes.fedavg(clients_per_round=3, lr=0.1, batch_size=8)


def run(tmp_path, rounds=2, resume=True, checkpoint="c.pt", **changes):
    callbacks = [Checkpoint(tmp_path / checkpoint, every=1, resume=resume)] if checkpoint else []
    settings = dict(strategy=STRATEGY, federated_data=FED, model=LogisticRegression(), rounds=rounds, seed=0, callbacks=callbacks)
    settings.update(changes)
    return simulate(**settings)


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(strategy=recipes.fedavg(clients_per_round=3, lr=0.2, batch_size=8)), "strategy"),
        (dict(federated_data=federate(blobs(), [30] * 8)), "data"),
        (dict(federated_data=federate(blobs(seed=1), [40] * 6)), "data"),
        (dict(model=MLP(hidden=8)), "model"),
        (dict(eval_every=2), "eval_every"),
        (dict(seed=1), "seed"),
    ],
    ids=["strategy", "partition", "dataset", "model", "settings", "seed"],
)
def test_resume_with_anything_changed_refuses_naming_it(tmp_path, change, field):
    run(tmp_path, resume=False)
    with pytest.raises(CheckpointError, match=f"belongs to another run: .*{field}"):
        run(tmp_path, rounds=3, **change)


def test_more_rounds_continue_to_the_numbers_of_an_uninterrupted_run_fewer_refuse(tmp_path):
    run(tmp_path, rounds=2, resume=False)
    longer = run(tmp_path, rounds=4)
    straight = run(tmp_path / "x", rounds=4, resume=False, checkpoint=None)
    for k, v in straight.params.items():
        assert torch.equal(v, longer.params[k])
    with pytest.raises(CheckpointError, match="4 rounds done, more than the 3 asked for"):
        run(tmp_path, rounds=3)


@pytest.mark.parametrize("damage", [lambda b: b[: len(b) // 2], lambda b: b"not a checkpoint", lambda b: b""])
def test_a_corrupt_checkpoint_is_one_line_naming_the_file(tmp_path, damage):
    run(tmp_path, resume=False)
    path = tmp_path / "c.pt"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=f"checkpoint {path} is unreadable"):
        run(tmp_path)


def test_checkpoint_names_never_collide_and_stay_inside(tmp_path):
    labels = ["a/b", "a_b", "a b", "a:b", "../../etc/passwd", "..", ".", "x" * 300, "é", "e"]
    paths = {checkpoint_path(tmp_path, label, 0) for label in labels}
    assert len(paths) == len(labels)
    assert all(p.parent == tmp_path / "checkpoints" for p in paths)


def experiment(tmp_path, name="t", label="FedAvg [bold]x[/bold] $a$", lr=0.1, rounds=2, extra=""):
    path = tmp_path / f"{name}.toml"
    path.write_text(f'name = "{name}"\nrounds = {rounds}\nseeds = [0]\n{extra}\n[dataset]\nname = "digits"\n'
                    '[partition]\nscheme = "iid"\nnum_clients = 6\n[model]\nname = "logreg"\n'
                    f'[[strategies]]\nrecipe = "fedavg"\nlabel = "{label}"\nclients_per_round = 3\nlr = {lr}\n')
    return path


def test_output_folder_of_another_run_refuses_without_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(experiment(tmp_path)), "--out", str(out), "--quiet"]) == 0
    before = (out / "results.json").read_bytes()
    other = experiment(tmp_path, name="u", lr=0.2)
    assert main(["run", str(other), "--out", str(out), "--quiet"]) == 2
    assert "--overwrite" in capsys.readouterr().err and (out / "results.json").read_bytes() == before
    assert main(["run", str(other), "--out", str(out), "--quiet", "--resume"]) == 2
    assert "holds another experiment" in capsys.readouterr().err
    assert main(["run", str(other), "--out", str(out), "--quiet", "--overwrite"]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["name"] == "u"
    assert len(list((out / "checkpoints").iterdir())) == 1  # the old run's checkpoint is gone
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary leftovers


def test_cli_corrupt_checkpoint_exit_2(tmp_path, capsys):
    out = tmp_path / "out"
    path = experiment(tmp_path)
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    (checkpoint,) = (out / "checkpoints").iterdir()
    checkpoint.write_bytes(b"\x00" * 10)
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--quiet", "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(checkpoint) in err and "unreadable" in err


def test_labels_are_plain_text_and_files_get_umask_permissions(tmp_path, capsys):
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        assert main(["run", str(experiment(tmp_path)), "--out", str(out)]) == 0
    finally:
        os.umask(old)
    printed = capsys.readouterr().out
    assert "[bold]x[/bold]" in printed  # shown, not interpreted
    for name in ("results.json", "summary.md", "curves.png", "partition.png", "run.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name
    assert "FedAvg [bold]x[/bold] $a$" in json.loads((out / "results.json").read_text())["strategies"]


def test_cli_resume_with_more_rounds_continues_and_fewer_refuses(tmp_path, capsys):
    out = tmp_path / "out"
    path = experiment(tmp_path, label="plain")
    assert main(["run", str(path), "--out", str(out), "--quiet", "--checkpoint-every", "1"]) == 0
    assert main(["run", str(path), "--out", str(out), "--quiet", "--resume", "--rounds", "3"]) == 0
    history = json.loads((out / "results.json").read_text())["strategies"]["plain"]["history"][0]
    assert [r["round"] for r in history] == [1, 2, 3]
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--quiet", "--resume", "--rounds", "1"]) == 2
    assert "3 rounds done, more than the 1 asked for" in capsys.readouterr().err
