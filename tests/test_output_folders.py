"""Output folders through the real command line (issue 27): a refused command writes nothing (the folder listing
is the same before and after, and the next correct command goes ahead); operating-system failures are one line
naming the path and the reason, found before any work where they can be; nothing overwrites results without
--overwrite, whichever command wrote them; a killed command's staging is removed by the next one.

Permissions: the tests may run as root, for whom a read-only folder (chmod 555) or an unreadable file (chmod 000)
stops nothing. Where a write or read still succeeds, the test says so and simulates the refusal by patching the
writer (os.open and os.mkdir raise EACCES for paths in that folder) or the reader; a full disk is simulated by a
writer that raises ENOSPC (making a tiny file system needs root)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedsample.cli import main
from fedsample.reproduction import registry
from test_reproduce_command import MODULE, fake_package

CONFIG = """name = "tiny"
rounds = 1
seeds = [0]
[dataset]
name = "digits"
[partition]
scheme = "iid"
num_clients = 5
[model]
name = "logreg"
[[strategies]]
recipe = "fedavg"
label = "FedAvg"
clients_per_round = 3
"""


def listing(root: Path) -> list[tuple]:
    """Every path under ``root`` with its kind, size and modification time: equal listings, unchanged folder."""
    return sorted((str(p.relative_to(root)), p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))


def one_error_line(capsys, progress: bool = False) -> str:
    """The one line on stderr (``progress``: after diagnose's progress lines, one per strategy diagnosed, and its
    progress bar's last state, ``NAME: i of n strategies``)."""
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    if progress:
        lines = [line for line in lines if not line.startswith("FedAvg: bias") and " strategies " not in line]
    assert len(lines) == 1 and lines[0].startswith("fedsample: error:") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    return path


def command(name: str, config: Path, out: str | None) -> list[str]:
    """A quick invocation of each command that writes files (``out`` None: its default folder)."""
    where = [] if out is None else ["--out", out]
    return {
        "run": ["run", str(config), "--quiet", *where],
        "diagnose": ["diagnose", str(config), "--draws", "8", *where],
        "partition": ["partition", "--dataset", "digits", "--scheme", "iid", "--param", "num_clients=3", *where],
        "reproduce": ["reproduce", "fedsampling", "--quiet", "--only", "fedsampling-fmnist-sigma1", *where],
    }[name]


# --- 1. a refused run writes nothing -------------------------------------------------------------------

REFUSED = {
    "--jobs 0": ["--jobs", "0"],
    "--jobs -1": ["--jobs", "-1"],
    "--jobs 2 --workers 2": ["--jobs", "2", "--workers", "2"],
    "--workers 0": ["--workers", "0"],
}


@pytest.mark.parametrize("with_out", [True, False], ids=["--out", "default folder"])
@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_run_writes_nothing_and_the_next_run_goes_ahead(case, with_out, config, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    where = ["--out", "out"] if with_out else []
    before = listing(tmp_path)
    assert main(["run", str(config), "--quiet", *where, *REFUSED[case]]) == 2
    one_error_line(capsys)
    assert listing(tmp_path) == before  # no run.json, no checkpoints/, no empty runs/
    assert main(["run", str(config), "--quiet", *where]) == 0
    assert (tmp_path / ("out" if with_out else "runs/tiny") / "results.json").is_file()


def test_the_library_refuses_bad_jobs_before_making_the_folder(config, tmp_path):
    from fedsample.experiments import runner
    from fedsample.experiments.config import ConfigError
    from fedsample.experiments.presets import resolve

    plan = runner.prepare(resolve(str(config)))
    with pytest.raises(ConfigError, match="--jobs must be >= 1"):
        runner.run_experiment(plan, tmp_path / "out", jobs=0)
    with pytest.raises(ConfigError, match="exclude each other"):
        runner.run_experiment(plan, tmp_path / "out", jobs=2, options={"federation": "ray"})
    assert not (tmp_path / "out").exists()


# --- 2. operating-system failures are one line ---------------------------------------------------------

COMMANDS = ("run", "diagnose", "partition", "reproduce")


@pytest.mark.parametrize("name", COMMANDS)
def test_an_output_folder_under_a_file_is_one_line(name, config, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    before = listing(tmp_path)
    assert main(command(name, config, "afile/out")) == 2
    assert "afile is a file, not a folder" in one_error_line(capsys)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("name", ("run", "diagnose", "reproduce"))
def test_a_file_named_runs_is_one_line(name, config, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("not a folder")
    before = listing(tmp_path)
    assert main(command(name, config, None)) == 2
    assert "runs is a file, not a folder" in one_error_line(capsys)
    assert listing(tmp_path) == before


def writes_are_refused(folder: Path) -> bool:
    """Whether the operating system refuses to create a file in ``folder`` (not as root)."""
    try:
        (folder / "probe").write_text("x")
    except PermissionError:
        return True
    (folder / "probe").unlink()
    return False


def refuse_writes_under(folder: Path, monkeypatch) -> None:
    """Simulate a read-only ``folder``: creating a file or folder in it raises EACCES (as for a non-root user)."""
    real_open, real_mkdir = os.open, os.mkdir

    def inside(path) -> bool:
        return Path(os.fsdecode(path)).resolve().is_relative_to(folder.resolve())

    def guarded_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and inside(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    def guarded_mkdir(path, *args, **kwargs):
        if inside(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "mkdir", guarded_mkdir)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_read_only_folder_is_one_line_before_any_work(name, config, tmp_path, monkeypatch, capsys):
    import fedsample.diagnostics.measure as measure
    from fedsample.experiments import runner

    monkeypatch.chdir(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if not writes_are_refused(locked):  # root: permissions stop nothing, so the writer refuses instead
            refuse_writes_under(locked, monkeypatch)

        def never(*args, **kwargs):
            raise AssertionError("the work started although the folder cannot be written")

        monkeypatch.setattr(measure, "diagnose", never)  # diagnose: nothing is computed before the check
        monkeypatch.setattr(runner, "run_experiment", never)  # reproduce: no preset runs
        before = listing(tmp_path)
        assert main(command(name, config, "locked/out")) == 2
        err = one_error_line(capsys)
        assert "cannot write in locked" in err and "Permission denied" in err
        assert listing(tmp_path) == before
    finally:
        locked.chmod(0o755)


def full_disk(monkeypatch) -> None:
    """Every picture fails to save as on a full disk (ENOSPC), after the other files of the set were written."""
    from matplotlib.figure import Figure

    def no_space(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsdecode(path))

    monkeypatch.setattr(Figure, "savefig", no_space)


def test_a_full_disk_is_one_line_and_leaves_no_half_written_results(config, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        full_disk(patch)
        assert main(command("run", config, str(out))) == 2
        err = one_error_line(capsys)
        assert "No space left on device" in err and str(out / "curves.png") in err
    names = sorted(p.name for p in out.iterdir())
    assert names == ["checkpoints", "run.json"]  # the run's state for --resume; no results, no staging
    assert main([*command("run", config, str(out)), "--resume"]) == 0
    assert (out / "results.json").is_file() and not [p for p in out.iterdir() if p.name.startswith(".")]


def test_a_full_disk_in_diagnose_leaves_no_file(config, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    full_disk(monkeypatch)
    assert main(command("diagnose", config, str(out))) == 2
    assert "No space left on device" in one_error_line(capsys, progress=True)
    assert list(out.iterdir()) == []


def test_an_unreadable_sizes_file_is_one_line(tmp_path, monkeypatch, capsys):
    sizes = tmp_path / "sizes.txt"
    sizes.write_text("3 4 5\n")
    sizes.chmod(0o000)
    try:
        try:
            sizes.read_text()
            readable = True
        except PermissionError:
            readable = False
        if readable:  # root reads it anyway: the reader refuses instead, as it would for another user
            real = Path.read_text

            def refuse(self, *args, **kwargs):
                if self == sizes:
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
                return real(self, *args, **kwargs)

            monkeypatch.setattr(Path, "read_text", refuse)
        assert main(["privacy", "--epsilon", "3", "--M", "20", "--rounds", "2", "--sizes", str(sizes)]) == 2
        assert f"--sizes {sizes}: cannot read it: Permission denied" in one_error_line(capsys)
    finally:
        sizes.chmod(0o644)


def test_sizes_as_a_folder_or_a_long_list(tmp_path, capsys):
    assert main(["privacy", "--epsilon", "3", "--M", "20", "--rounds", "2", "--sizes", str(tmp_path)]) == 2
    assert "is a folder" in one_error_line(capsys)
    long_list = ",".join(["5"] * 3000)  # longer than a file name may be: still a list of sizes
    assert main(["privacy", "--epsilon", "3", "--M", "20", "--rounds", "2", "--draws", "1000", "--sizes", long_list]) == 0
    assert "3000 clients, total 15000" in capsys.readouterr().out


def finished_pid() -> int:
    """The id of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


STAGING = ".fedsample-staging-"  # staging names: this prefix, the writing process's id, a random part


def test_a_killed_runs_staging_is_removed_by_the_next_run(config, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(command("run", config, str(out))) == 0
    dead = out / f"{STAGING}{finished_pid()}-abc"
    dead.mkdir()
    (dead / "results.json").write_text("{half")
    (out / f"{STAGING}{finished_pid()}-xyz.summary.md").write_text("half")
    (out / ".writing-old").mkdir()  # an earlier version's staging
    alive = subprocess.Popen(["sleep", "60"])
    try:
        live = out / f"{STAGING}{alive.pid}-def"
        live.mkdir()
        assert main([*command("run", config, str(out)), "--resume"]) == 0
        left = sorted(p.name for p in out.iterdir() if p.name.startswith("."))
        assert left == [live.name]  # another process still writing there keeps its staging
    finally:
        alive.kill()
        alive.wait()


# --- 3. nothing overwrites results without --overwrite ----------------------------------------------------

def test_diagnose_into_a_run_folder_needs_overwrite(config, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(command("run", config, str(out))) == 0
    capsys.readouterr()
    before = listing(tmp_path)
    assert main(command("diagnose", config, str(out))) == 2
    assert "holds the results of 'fedsample run'" in one_error_line(capsys)
    assert listing(tmp_path) == before  # the run's summary.md is intact
    assert main([*command("diagnose", config, str(out)), "--overwrite"]) == 0
    assert (out / "diagnose.json").is_file() and not (out / "results.json").exists() and not (out / "run.json").exists()
    assert "bias" in (out / "summary.md").read_text()


@pytest.mark.parametrize("first, second", [
    ("run", "partition"), ("diagnose", "run"), ("diagnose", "diagnose"), ("partition", "partition"), ("partition", "diagnose"),
])
def test_every_command_refuses_a_folder_holding_results(first, second, config, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(command(first, config, str(out))) == 0
    capsys.readouterr()
    before = listing(tmp_path)
    argv = command(second, config, str(out))
    assert main(argv) == 2
    assert "--overwrite" in one_error_line(capsys)
    if second == "run":  # --resume continues only a run of the same experiment
        assert main([*argv, "--resume"]) == 2
        one_error_line(capsys)
    assert listing(tmp_path) == before
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads((out / f"{second}.json").read_text())["command"] == second
    assert [c for c in ("run", "diagnose", "partition", "reproduce") if (out / f"{c}.json").exists()] == [second]


@pytest.fixture
def two_papers(tmp_path, monkeypatch):
    """The fake paper of test_reproduce_command and a second one ("other") in one package."""
    monkeypatch.syspath_prepend(str(tmp_path))
    package = fake_package(tmp_path, f"twopapers_{tmp_path.name}")
    (tmp_path / package / "other.py").write_text(MODULE.format(fail=False).replace('name="fake"', 'name="other"'))
    monkeypatch.setattr(registry, "PACKAGE", package)
    return tmp_path


def test_reproduce_never_replaces_another_papers_tables(two_papers, capsys):
    out = two_papers / "R"
    assert main(["reproduce", "fake", "--only", "gains", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    before = listing(out)
    for extra in ([], ["--resume"]):
        assert main(["reproduce", "other", "--only", "gains", "--out", str(out), "--quiet", *extra]) == 2
        assert "--overwrite" in one_error_line(capsys)
        assert listing(out) == before
    assert main(["reproduce", "fake", "--only", "gains", "--out", str(out), "--quiet", "--resume"]) == 0  # the same paper continues
    assert main(["reproduce", "other", "--only", "gains", "--out", str(out), "--quiet", "--overwrite"]) == 0
    assert json.loads((out / "reproduction.json").read_text())["paper"] == "other"
    assert json.loads((out / "reproduce.json").read_text())["paper"] == "other"


def test_the_library_writers_refuse_results_too(tmp_path):
    from fedsample.data import IID, load_dataset, partition, write_partition_report

    fed = partition(load_dataset("digits"), IID(3))
    write_partition_report(fed, tmp_path / "p")
    with pytest.raises(ValueError, match="holds the results of 'fedsample partition'"):
        write_partition_report(fed, tmp_path / "p")
    write_partition_report(fed, tmp_path / "p", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["partition.json", "partition.png", "stats.json"]


def test_overwrite_removes_only_what_the_marker_names(config, tmp_path):
    out = tmp_path / "out"
    assert main(command("partition", config, str(out))) == 0
    (out / "notes.txt").write_text("mine")
    assert main([*command("run", config, str(out)), "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "mine" and not (out / "stats.json").exists() and not (out / "partition.json").exists()
