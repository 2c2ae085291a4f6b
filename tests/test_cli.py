"""The command line: the quickstart writes its outputs with the documented schema; bad input is one
clear line on stderr, exit code 2, and nothing half-written."""

import json
import subprocess
import sys

import pytest

from fedsample.cli import main


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "qs"
    code = main(["run", "quickstart", "--rounds", "3", "--seeds", "0,1", "--out", str(out), "--quiet"])
    return code, out


def test_quickstart_writes_the_three_outputs(quick_run):
    code, out = quick_run
    assert code == 0
    for name in ("results.json", "summary.md", "curves.png", "partition.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_schema(quick_run):
    _, out = quick_run
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["name"] == "quickstart" and doc["config"]["rounds"] == 3
    labels = ["Centralized", "FedSampling (eps=3)", "FedAvg (uniform clients)", "FedAvg (size-weighted clients)",
              "FedAvg (one step)", "Naive fixed ratio"]
    assert list(doc["strategies"]) == labels
    for result in doc["strategies"].values():
        for metric in ("accuracy", "macro_f1", "loss"):
            for kind in ("final", "best"):
                stats = result[kind][metric]
                assert set(stats) == {"mean", "sd", "n", "per_seed"} and len(stats["per_seed"]) == 2 and stats["n"] == 2
                assert min(stats["per_seed"]) <= stats["mean"] <= max(stats["per_seed"])
        assert len(result["history"]) == 2 and [r["round"] for r in result["history"][0]] == [1, 2, 3]
    summary = (out / "summary.md").read_text()
    assert all(label in summary for label in labels) and "±" in summary and "ddof = 1" in summary and "Best round" in summary


def test_resume_after_completion_gives_the_same_results(quick_run):
    _, out = quick_run
    before = json.loads((out / "results.json").read_text())
    timing = json.loads((out / "timing.json").read_text())
    assert len(timing["invocations"]) == 1 and timing["wall_s"] > 0 and timing["complete"]
    assert main(["run", "quickstart", "--rounds", "3", "--seeds", "0,1", "--out", str(out), "--quiet", "--resume"]) == 0
    assert json.loads((out / "results.json").read_text()) == before
    again = json.loads((out / "timing.json").read_text())  # the resumed invocation adds to the folder's wall time
    assert again["invocations"][0] == timing["invocations"][0] and [i["resumed"] for i in again["invocations"]] == [False, True]
    assert again["wall_s"] == pytest.approx(sum(i["wall_s"] for i in again["invocations"])) and again["complete"]


def test_presets_lists_quickstart(capsys):
    assert main(["presets"]) == 0
    assert "quickstart" in capsys.readouterr().out


def write_config(tmp_path, **changes):
    text = {
        "head": 'name = "t"\nrounds = 2\nseeds = [0]\n',
        "dataset": '[dataset]\nname = "digits"\n',
        "partition": '[partition]\nscheme = "iid"\nnum_clients = 5\n',
        "model": '[model]\nname = "logreg"\n',
        "strategy": '[[strategies]]\nrecipe = "fedsampling"\nK = 20\nepsilon = 3.0\nM = 10\n',
    }
    text.update(changes)
    path = tmp_path / "exp.toml"
    path.write_text("\n".join(text.values()))
    return path


BAD = {
    "epsilon <= 0": dict(strategy='[[strategies]]\nrecipe = "fedsampling"\nepsilon = 0.0\n'),
    "M < 2": dict(strategy='[[strategies]]\nrecipe = "fedsampling"\nM = 1\n'),
    "K <= 0": dict(strategy='[[strategies]]\nrecipe = "fedsampling"\nK = 0\n'),
    "ratio outside (0, 1]": dict(strategy='[[strategies]]\nrecipe = "fedsampling_naive"\nratio = 1.5\n'),
    "unknown recipe": dict(strategy='[[strategies]]\nrecipe = "fedmagic"\n'),
    "unknown dataset": dict(dataset='[dataset]\nname = "imagenet"\n'),
    "unknown config key": dict(head='name = "t"\nrounds = 2\nroundz = 3\n'),
    "unknown recipe parameter": dict(strategy='[[strategies]]\nrecipe = "fedsampling"\nkay = 3\n'),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_config_is_one_line_exit_2_nothing_written(case, tmp_path, capsys):
    path = write_config(tmp_path, **BAD[case])
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsample: error:") and "\n" not in err
    assert not out.exists()


def test_error_names_the_bad_field(tmp_path, capsys):
    main(["run", str(write_config(tmp_path, **BAD["unknown config key"])), "--out", str(tmp_path / "o"), "--quiet"])
    assert "roundz" in capsys.readouterr().err


def test_unknown_preset(tmp_path, capsys):
    assert main(["run", "nosuchpreset", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "unknown preset 'nosuchpreset'" in capsys.readouterr().err


def test_missing_output_parent(tmp_path, capsys):
    assert main(["run", "quickstart", "--rounds", "1", "--out", str(tmp_path / "no" / "such" / "dir"), "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_partition_command(tmp_path):
    out = tmp_path / "part"
    assert main(["partition", "--dataset", "digits", "--scheme", "lognormal", "--param", "mean=4", "--param", "sigma=1",
                 "--out", str(out)]) == 0
    assert (out / "stats.json").exists() and (out / "partition.png").exists()


def test_console_script_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "fedsample.cli", "presets"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "quickstart" in result.stdout


def test_default_output_folder_is_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "quickstart", "--rounds", "1", "--seeds", "0", "--quiet"]) == 0
    assert (tmp_path / "runs" / "quickstart" / "results.json").exists()


def test_loop_backend_gives_the_same_table(tmp_path):
    """The reference loop and the vectorized engine give the same final metrics (float tolerance)."""
    runs = {}
    for backend in ("loop", "vectorized"):
        out = tmp_path / backend
        assert main(["run", "quickstart", "--rounds", "2", "--seeds", "0", "--out", str(out), "--quiet", "--backend", backend]) == 0
        runs[backend] = json.loads((out / "results.json").read_text())["strategies"]
    for label, result in runs["loop"].items():
        for metric, stats in result["final"].items():
            assert stats["mean"] == pytest.approx(runs["vectorized"][label]["final"][metric]["mean"], rel=1e-3, abs=1e-3)


# Wrong types and wrong keywords in every table: each was (or could be) a TypeError deep inside a part before the
# parts checked their values; now each is refused as a ValueError line, the CLI's only user errors.
WRONG_TYPES = {
    "string epochs": (dict(strategy='[[strategies]]\nrecipe = "fedavg"\nepochs = "1"\n'), "epochs must be an integer >= 1"),
    "list lr": (dict(strategy='[[strategies]]\nrecipe = "fedavg"\nlr = [0.1]\n'), "lr must be > 0"),
    "float batch": (dict(strategy='[[strategies]]\nrecipe = "fedavg"\nbatch_size = 3.5\n'), "batch_size must be"),
    "wrong recipe keyword": (dict(strategy='[[strategies]]\nrecipe = "fedavg"\nlocal_lr = 0.1\n'), "has no parameter 'local_lr'"),
    "renamed recipe keyword": (dict(strategy='[[strategies]]\nrecipe = "fedsampling"\nlr = 0.1\n'), "lr was renamed server_lr"),
    "string model width": (dict(model='[model]\nname = "mlp"\nhidden = "64"\n'), "hidden must be an integer >= 1"),
    "wrong model keyword": (dict(model='[model]\nname = "mlp"\nwidth = 64\n'), "unknown parameter(s) width"),
    "list partition parameter": (dict(partition='[partition]\nscheme = "dirichlet"\nnum_clients = 5\nalpha = [1]\n'), "partition"),
    "string schedule gamma": (dict(strategy='[[strategies]]\nrecipe = "fedavg"\n[strategies.lr_schedule]\nkind = "step"\nevery = 1\ngamma = "x"\n'),
                              "gamma"),
}


@pytest.mark.parametrize("case", WRONG_TYPES)
def test_wrong_types_and_keywords_are_one_line_not_a_traceback(case, tmp_path, capsys):
    changes, words = WRONG_TYPES[case]
    assert main(["run", str(write_config(tmp_path, **changes)), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsample: error:") and "\n" not in err and words in err, err
    assert not (tmp_path / "out").exists()


def test_a_bad_value_names_its_toml_key_and_says_what_the_library_says(tmp_path, capsys):
    from fedsample import recipes

    with pytest.raises(ValueError) as api:
        recipes.fedavg(epochs=1.5)
    path = write_config(tmp_path, strategy='[[strategies]]\nrecipe = "fedavg"\nlabel = "A"\nepochs = 1.5\n')
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"fedsample: error: strategies.0.epochs (strategy 'A'): {api.value}"


def test_a_type_error_from_a_bug_is_not_a_user_error(monkeypatch):
    import fedsample.cli as cli

    def broken(args):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")

    monkeypatch.setitem(cli.COMMANDS, "presets", broken)
    with pytest.raises(TypeError, match="unsupported operand"):
        main(["presets"])
