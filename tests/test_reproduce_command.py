"""`fedsample reproduce` end to end on a small fake paper (a digits preset, 2 rounds, 2 seeds, and a fake
study): the experiment folders, REPRODUCTION.md and reproduction.json with verdicts, resume, a failing
study, and bad input as one line with exit code 2 and nothing written."""

import json
import shutil
import textwrap

import pytest

from fedsample.cli import main
from fedsample.reproduction import registry

PRESET = """
name = "fake-digits{suffix}"
description = "digits, 6 iid clients, 2 rounds: a test stand-in (~2 s on 2 CPU cores)"
rounds = 2
seeds = [0, 1]
device = "{device}"
[dataset]
name = "digits"
[partition]
scheme = "iid"
num_clients = 6
[model]
name = "logreg"
[[strategies]]
recipe = "centralized"
label = "Centralized"
K = 64
lr = 0.5
[[strategies]]
recipe = "fedavg"
label = "FedAvg"
clients_per_round = 3
steps = 1
batch_size = 1000
lr = 0.5
"""

MODULE = '''
from pathlib import Path
from fedsample.reproduction.spec import Comparison, Figure, Paper, Study

HERE = Path(__file__).parent

def gains(device, seeds, out):
    if {fail}:
        raise RuntimeError("the fake study broke")
    (out / "trace.txt").write_text("ran")
    return {{"IS": {{"gain_db": [3.0 + 0.1 * s for s in seeds]}}, "uniform": {{"gain_db": [0.0 + 0.05 * s for s in seeds]}}}}

PAPER = Paper(
    name="fake",
    citation="A. Author, A fake paper (2026)",
    presets={{"cpu": (str(HERE / "fake-digits.toml"),), "cuda": (str(HERE / "fake-digits-cuda.toml"),)}},
    figures=(
        Figure("Centralized accuracy (Table 1)", "fake-digits", "Centralized", 90.0),
        Figure("FedAvg best accuracy", "fake-digits", "FedAvg", None, which="best"),
        Figure("IS gain over uniform (Fig. 2)", "gains", "IS", 3.05, metric="gain_db", unit="dB"),
        Figure("GPU only row", "fake-digits-cuda", "FedAvg", 80.0),
    ),
    comparisons=(
        Comparison("IS beats uniform", "gains", "IS", "uniform", metric="gain_db"),
        Comparison("uniform beats IS", "gains", "uniform", "IS", metric="gain_db"),
        Comparison("Centralized beats FedAvg", "fake-digits", "Centralized", "FedAvg"),
        Comparison("FedAvg matches centralized", "fake-digits", "FedAvg", "Centralized", tie=True),
        Comparison("Centralized lower loss", "fake-digits", "Centralized", "FedAvg", metric="loss"),
    ),
    studies=(Study("gains", gains, cost="~0 s anywhere", description="a fake measurement"),),
    notes=("a note the paper module keeps",),
)
'''


def fake_package(root, name, fail=False):
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "fake.py").write_text(textwrap.dedent(MODULE.format(fail=fail)))
    (package / "fake-digits.toml").write_text(PRESET.format(suffix="", device="cpu"))
    (package / "fake-digits-cuda.toml").write_text(PRESET.format(suffix="-cuda", device="cuda"))
    return name


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fakepaper")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root))
        patch.setattr(registry, "PACKAGE", fake_package(root, f"fakepapers_{root.name}"))
        yield root


@pytest.fixture
def fake_paper(fake_root, tmp_path):
    return tmp_path


@pytest.fixture(scope="module")
def reproduced(fake_root):
    out = fake_root / "out"
    code = main(["reproduce", "fake", "--out", str(out), "--quiet"])
    return code, out


def rows_by_claim(document, table):
    return {row["claim"]: row for row in document[table]}


def test_the_whole_command_writes_tables_and_folders(reproduced):
    code, out = reproduced
    assert code == 0
    assert (out / "fake-digits" / "results.json").exists() and (out / "gains" / "study.json").exists()
    assert (out / "gains" / "trace.txt").read_text() == "ran"
    document = json.loads((out / "reproduction.json").read_text())
    assert document["profile"] == "cpu" and document["device"] == "cpu"
    assert [r["name"] for r in document["runs"]] == ["fake-digits", "gains"]
    assert all(r["status"] == "ran" and r["wall_s"] >= 0 for r in document["runs"])
    figures = rows_by_claim(document, "figures")
    assert "GPU only row" not in figures  # a cuda preset's rows are not in the cpu profile's table
    central = figures["Centralized accuracy (Table 1)"]
    assert central["ours"]["n"] == 2 and 0 <= central["ours"]["mean"] <= 100  # shown in percent
    assert central["verdict"].startswith("not comparable (stand-in;")  # a cpu-only preset is a stand-in
    assert figures["FedAvg best accuracy"]["verdict"] == "paper gives no number"
    gain = figures["IS gain over uniform (Fig. 2)"]
    assert gain["ours"]["mean"] == pytest.approx(3.1) and gain["ours"]["n"] == 3 and gain["verdict"] == "matches"
    comparisons = rows_by_claim(document, "comparisons")
    assert comparisons["IS beats uniform"]["verdict"] == "holds"
    assert comparisons["uniform beats IS"]["verdict"] == "reversed"
    assert comparisons["IS beats uniform"]["d"] == pytest.approx(3.1 - 0.05)  # studies: seeds 0, 1, 2
    for row in comparisons.values():
        assert row["better_stats"]["n"] >= 2 and row["se"] is not None
    text = (out / "REPRODUCTION.md").read_text()
    for piece in ("# Reproduction: fake (cpu profile)", "IS beats uniform", "| holds |", "| reversed |", "a note the paper module keeps",
                  "Hardware:", "torch", "fedsample reproduce fake --device cpu --out", "±", "(2 seeds)", "(3 seeds)"):
        assert piece in text, piece


def test_resume_reuses_finished_presets_and_studies(reproduced, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(reproduced[1], out)
    before = json.loads((out / "reproduction.json").read_text())
    (out / "gains" / "trace.txt").unlink()
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--resume"]) == 0
    after = json.loads((out / "reproduction.json").read_text())
    records = [json.loads((out / name / "timing.json").read_text()) for name in ("fake-digits", "gains")]
    assert [r["status"] for r in after["runs"]] == [f"reused (ran {record['finished']})" for record in records]
    assert [r["wall_s"] for r in after["runs"]] == [record["wall_s"] for record in records]  # the time it took then
    for record, run in zip(records, before["runs"]):  # each folder's own record of the invocation that produced it
        assert record["complete"] and len(record["invocations"]) == 1 and 0 < record["wall_s"] <= run["wall_s"]
    assert not (out / "gains" / "trace.txt").exists()  # the study did not run again
    assert after["figures"] == before["figures"] and after["comparisons"] == before["comparisons"]


def timing_record(wall_s, finished="2026-01-02 03:04 UTC"):
    return json.dumps({"wall_s": wall_s, "finished": finished, "complete": True,
                       "invocations": [{"finished": finished, "wall_s": wall_s, "resumed": False}]})


def test_a_reused_run_reports_its_own_folders_wall_time_after_an_only_run_without_it(reproduced, tmp_path):
    """OUT's last reproduction.json, written by an --only run, does not list the preset: its wall time still comes
    from its folder's record, and the total adds every reused run's own time (not the seconds spent checking it)."""
    out = tmp_path / "copy"
    shutil.copytree(reproduced[1], out)
    (out / "fake-digits" / "timing.json").write_text(timing_record(1000.0))
    (out / "gains" / "timing.json").write_text(timing_record(20.0, "2026-01-01 00:00 UTC"))
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--resume", "--only", "gains"]) == 0
    only = json.loads((out / "reproduction.json").read_text())
    assert {r["name"]: r["wall_s"] for r in only["runs"]} == {"gains": 20.0, "fake-digits": None}
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--resume"]) == 0
    after = json.loads((out / "reproduction.json").read_text())
    assert {r["name"]: (r["wall_s"], r["status"]) for r in after["runs"]} == {
        "fake-digits": (1000.0, "reused (ran 2026-01-02 03:04 UTC)"), "gains": (20.0, "reused (ran 2026-01-01 00:00 UTC)")}
    assert after["wall_s"] < 1000  # this invocation only checked them
    assert "2 run(s) reused from an earlier invocation; the runs' own wall times add up to 1020 s)" in (out / "REPRODUCTION.md").read_text()


def test_a_folder_without_a_record_falls_back_to_the_last_reproduction_then_to_unknown(reproduced, tmp_path):
    """A preset folder written before timing.json existed: its time in OUT's last reproduction.json, and where that
    does not list it, no time at all (never the seconds spent checking it), named apart in the total."""
    out = tmp_path / "copy"
    shutil.copytree(reproduced[1], out)
    first = {r["name"]: r["wall_s"] for r in json.loads((out / "reproduction.json").read_text())["runs"]}
    (out / "fake-digits" / "timing.json").unlink()
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--resume"]) == 0
    runs = {r["name"]: r for r in json.loads((out / "reproduction.json").read_text())["runs"]}
    assert runs["fake-digits"]["wall_s"] == first["fake-digits"]
    assert runs["fake-digits"]["status"] == "reused (ran earlier; wall time from the last reproduction.json)"
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--resume", "--only", "gains"]) == 0
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--resume"]) == 0
    runs = {r["name"]: r for r in json.loads((out / "reproduction.json").read_text())["runs"]}
    assert runs["fake-digits"]["wall_s"] is None and runs["fake-digits"]["status"] == "reused (ran earlier; wall time not recorded)"
    gains = json.loads((out / "gains" / "timing.json").read_text())["wall_s"]
    assert runs["gains"]["wall_s"] == gains
    text = (out / "REPRODUCTION.md").read_text()
    assert f"add up to {gains:.0f} s, without the 1 reused run(s) whose wall time was not recorded)" in text
    assert "| — | reused (ran earlier; wall time not recorded) |" in text


def test_the_wall_time_record_adds_a_resumed_invocation_and_says_when_it_misses_earlier_work(tmp_path):
    from fedsample.experiments.timing import record_wall_time, recorded_wall_time

    assert recorded_wall_time(tmp_path) is None
    first = record_wall_time(tmp_path, 30.0)
    assert first["wall_s"] == 30.0 and first["complete"] and recorded_wall_time(tmp_path) == first
    second = record_wall_time(tmp_path, 12.5, resumed=True, earlier_work=True)  # the record holds the earlier work
    assert second["wall_s"] == 42.5 and second["complete"] and [i["resumed"] for i in second["invocations"]] == [False, True]
    assert record_wall_time(tmp_path, 5.0)["wall_s"] == 5.0  # a fresh run starts a fresh record
    (tmp_path / "timing.json").unlink()
    resumed = record_wall_time(tmp_path, 7.0, resumed=True, earlier_work=True)  # an interrupted run had no record
    assert resumed["wall_s"] == 7.0 and not resumed["complete"]
    other = tmp_path / "other"
    other.mkdir()
    assert record_wall_time(other, 1.0, resumed=True)["complete"]  # resumed, but nothing had run before
    (tmp_path / "timing.json").write_text('{"wall_s": "a lot"}')
    assert recorded_wall_time(tmp_path) is None


def test_a_second_run_into_the_same_folder_needs_resume_or_overwrite(reproduced, capsys):
    _, out = reproduced
    capsys.readouterr()
    assert main(["reproduce", "fake", "--out", str(out), "--quiet"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_only_runs_the_named_study(fake_paper, capsys):
    out = fake_paper / "only"
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--only", "gains"]) == 0
    assert "fake: figures: 2 not measured, 1 matches; comparisons: 1 holds, 1 reversed, 3 not measured" in capsys.readouterr().out
    document = json.loads((out / "reproduction.json").read_text())
    assert {r["name"]: r["status"] for r in document["runs"]} == {"gains": "ran", "fake-digits": "not run (--only)"}
    assert not (out / "fake-digits").exists()
    assert rows_by_claim(document, "comparisons")["Centralized beats FedAvg"]["verdict"] == "not measured"
    assert "--only gains" in document["command"]


def test_a_failing_study_is_reported_and_the_rest_still_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "PACKAGE", fake_package(tmp_path, f"failing_{tmp_path.name}", fail=True))
    out = tmp_path / "out"
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--rounds", "1", "--seeds", "3"]) == 1
    assert "the fake study broke" in capsys.readouterr().err
    document = json.loads((out / "reproduction.json").read_text())
    statuses = {r["name"]: r["status"] for r in document["runs"]}
    assert statuses["fake-digits"] == "ran" and statuses["gains"].startswith("failed: RuntimeError: the fake study broke")
    comparisons = rows_by_claim(document, "comparisons")
    assert comparisons["IS beats uniform"]["verdict"] == "not measured"
    assert "one seed" in comparisons["Centralized beats FedAvg"]["verdict"] and comparisons["Centralized beats FedAvg"]["se"] is None
    assert json.loads((out / "fake-digits" / "results.json").read_text())["config"]["seeds"] == [3]


BAD_INPUT = {
    "unknown paper": (["reproduce", "nosuchpaper"], "unknown paper 'nosuchpaper'; known: fake"),
    "bad device": (["reproduce", "fake", "--device", "tpu"], "device must be one of"),
    "unknown --only": (["reproduce", "fake", "--only", "fake-digits-cuda"], "--only 'fake-digits-cuda': not a cpu preset or study of fake"),
    "no paper": (["reproduce"], "name a paper"),
    "bad seeds": (["reproduce", "fake", "--seeds", "a,b"], "--seeds 'a,b'"),
    "bad rounds": (["reproduce", "fake", "--rounds", "0"], "--rounds must be >= 1"),
    "bad jobs": (["reproduce", "fake", "--jobs", "0"], "--jobs must be >= 1"),
    "resume and overwrite": (["reproduce", "fake", "--resume", "--overwrite"], "exclude each other"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_line_exit_2_nothing_written(case, fake_paper, capsys):
    argv, message = BAD_INPUT[case]
    out = fake_paper / "out"
    assert main([*argv, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsample: error:") and "\n" not in err and message in err
    assert not out.exists()


def test_cuda_without_a_gpu_is_one_line(fake_paper, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the cuda profile would run")
    assert main(["reproduce", "fake", "--device", "cuda", "--out", str(fake_paper / "o"), "--quiet"]) == 2
    assert "no CUDA GPU is available" in capsys.readouterr().err


def test_list_names_presets_profiles_and_costs(fake_paper, capsys):
    assert main(["reproduce", "--list"]) == 0
    text = capsys.readouterr().out
    assert "fake: A. Author" in text and "[cpu] fake-digits: digits" in text and "[cuda] fake-digits-cuda" in text
    assert "~2 s on 2 CPU cores" in text and "[study] gains: a fake measurement (cost: ~0 s anywhere)" in text


def test_splice_puts_the_tables_between_the_markers(reproduced, tmp_path, capsys):
    from fedsample.reproduction.splice import main as splice_main

    _, out = reproduced
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n## fake\n<!-- reproduction:fake:cpu -->\nnot yet run\n<!-- /reproduction:fake:cpu -->\nafter\n")
    assert splice_main([str(doc), str(out / "reproduction.json")]) == 0
    text = doc.read_text()
    assert "not yet run" not in text and "### Reproduction: fake (cpu profile)" in text and "#### Comparisons" in text
    assert text.endswith("<!-- /reproduction:fake:cpu -->\nafter\n")
    assert splice_main([str(doc), str(out / "reproduction.json")]) == 0 and doc.read_text() == text  # idempotent
    doc.write_text("no markers")
    assert splice_main([str(doc), str(out / "reproduction.json")]) == 2
    assert "no section <!-- reproduction:fake:cpu -->" in capsys.readouterr().err


def test_a_changed_description_still_counts_as_the_same_experiment(tmp_path):
    """The description is prose (a preset's stated cost is updated after measuring it): a finished folder is
    still reused and an interrupted one still resumes; any real setting that changed is still refused."""
    import json

    from fedsample.experiments import runner
    from fedsample.experiments.presets import load_preset
    from fedsample.reproduction.command import finished

    config = load_preset("quickstart")
    (tmp_path / "results.json").write_text(json.dumps({"config": config.model_dump(mode="json")}))
    (tmp_path / "run.json").write_text(json.dumps({"config": config.model_dump(mode="json")}))
    reworded = config.model_copy(update={"description": "measured: 24 s"})
    assert finished(tmp_path, reworded)
    runner.check_output_folder(tmp_path, reworded, resume=True)
    other = config.model_copy(update={"eval_every": 5})
    assert not finished(tmp_path, other)
    with pytest.raises(ValueError, match="eval_every"):
        runner.check_output_folder(tmp_path, other, resume=True)


def test_a_study_runs_its_own_seeds_unless_seeds_is_given(tmp_path):
    from types import SimpleNamespace

    from fedsample.reproduction.command import run_study
    from fedsample.reproduction.spec import Study

    seen = []

    def measure(device, seeds, out):
        seen.append(list(seeds))
        return {"IS": {"gain_db": [1.0] * len(seeds)}}

    study = Study("gains", measure, cost="~0 s", seeds=(4, 5, 6, 7))
    args = SimpleNamespace(resume=False)
    run_study(study, SimpleNamespace(out=tmp_path, seeds=None, device="cpu"), args)
    run_study(study, SimpleNamespace(out=tmp_path, seeds=[0, 1], device="cpu"), args)
    run_study(Study("plain", measure, cost="~0 s"), SimpleNamespace(out=tmp_path, seeds=None, device="cpu"), args)
    assert seen == [[4, 5, 6, 7], [0, 1], [0, 1, 2]]
