"""What the docs show is what the tool prints (issue 27, class 10).

The tables and pictures of README.md and docs/ are written by ``docs/regenerate.py`` from the commands they show
(records in docs/records/). These tests fail when a generated block or picture differs from its record, when the
commands no longer give the recorded numbers (their reduced sentinel, re-run here through the real CLI), when the
README's Python example does not run, or when its example commands would be refused in the order given."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("regenerate", ROOT / "docs" / "regenerate.py")
regenerate = importlib.util.module_from_spec(_spec)
sys.modules["regenerate"] = regenerate  # dataclasses look their module up
_spec.loader.exec_module(regenerate)


def test_every_generated_block_and_picture_is_what_its_record_renders():
    found = regenerate.problems()
    assert not found, "run `python docs/regenerate.py --render` (or without --render to re-run the commands):\n" + "\n".join(found)


@pytest.mark.parametrize("name", sorted(regenerate.COMMANDS))
def test_the_commands_still_give_the_recorded_numbers(tmp_path, name):
    """The reduced command (its sentinel) through the real CLI, compared with the numbers stored beside the record."""
    if not regenerate.available(name):
        pytest.skip(f"`{regenerate.shown(regenerate.COMMANDS[name].sentinel)}` needs {regenerate.COMMANDS[name].needs}, not on this machine")
    recorded = json.loads((regenerate.RECORDS / name / "sentinel.json").read_text())
    got = regenerate.sentinel_numbers(name, tmp_path / "out")
    found = regenerate.differences(recorded, got)
    assert not found, (f"`{regenerate.shown(regenerate.COMMANDS[name].sentinel)}` no longer gives the recorded numbers, so "
                       "the docs' full-run numbers are stale: run `python docs/regenerate.py`\n" + "\n".join(found[:20]))


def _copy_of_the_docs(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "README.md", root / "README.md")
    for name, value in {"ROOT": root, "DOCS": root / "docs", "RECORDS": root / "docs" / "records", "IMG": root / "docs" / "img"}.items():
        monkeypatch.setattr(regenerate, name, value)
    return root


def test_the_check_names_a_hand_edited_number_a_replaced_picture_and_a_stray_marker(tmp_path, monkeypatch):
    root = _copy_of_the_docs(tmp_path, monkeypatch)
    assert regenerate.problems() == []
    readme = root / "README.md"
    text = readme.read_text()
    block = re.search(r"<!-- generated: quickstart-table -->\n(.*?)<!-- end", text, re.S)[1]
    edited = re.sub(r"\d\d\.\d\d", "99.99", block, count=1)
    readme.write_text(text.replace(block, edited) + "\n<!-- generated: nothing-renders-this -->\nx\n<!-- end: nothing-renders-this -->\n")
    picture = root / "docs" / "img" / "diagnose-quickstart-labels.png"
    picture.write_bytes(picture.read_bytes() + b"\0")
    found = regenerate.problems()
    assert any("block 'quickstart-table' differs" in f for f in found)
    assert any("'nothing-renders-this' is not one of" in f for f in found)
    assert any("diagnose-quickstart-labels.png is not the picture" in f for f in found)
    regenerate.render()  # rendering restores the block (the picture and the stray marker stay the user's to fix)
    assert not any("quickstart-table" in f for f in regenerate.problems())


def test_sentinel_differences_are_exact_for_counts_and_relative_for_floats():
    recorded = {"a": {"loss": [1.0, 2.0], "samples": [64, 70]}, "b": 0.5}
    assert regenerate.differences(recorded, {"a": {"loss": [1.00001, 2.0], "samples": [64, 70]}, "b": 0.5}) == []
    found = regenerate.differences(recorded, {"a": {"loss": [1.01, 2.0], "samples": [64, 71]}, "c": 0.5})
    assert found == ["/a/loss[0]: recorded 1.0, now 1.01", "/a/samples[1]: recorded 70, now 71", "/b: only in the record",
                     "/c: only in the new run"]


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_the_readme_library_example_runs_as_written():
    (block,) = [b for b in readme_blocks("python") if "fs.simulate" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert 0 <= namespace["res"].history[-1]["accuracy"] <= 1
    assert namespace["reports"].shape == (namespace["fed"].num_clients,)


def readme_commands() -> list[list[str]]:
    """Every ``fedsample ...`` line of the README's command blocks, as argv (comments dropped)."""
    lines = [line.strip() for block in readme_blocks("bash") for line in block.splitlines()]
    return [shlex.split(line, comments=True)[1:] for line in lines if line.startswith("fedsample ")]


def test_the_readme_commands_parse_and_none_is_refused_for_a_folder_an_earlier_one_filled():
    """In the order given, a command writing into a folder an earlier command wrote says --resume or --overwrite
    (the first install command writes runs/quickstart; without --out, run writes runs/NAME, diagnose runs/NAME-diagnose)."""
    from fedsample.cli import _parser

    written = {"runs/quickstart"}
    commands = readme_commands()
    assert len(commands) >= 8
    for argv in commands:
        args = _parser().parse_args(argv)
        if args.command not in ("run", "diagnose", "partition"):
            continue
        if args.out is None:  # partition requires --out
            out = f"runs/{args.target}" + ("-diagnose" if args.command == "diagnose" else "")
        else:
            out = str(args.out)
        if out in written:
            assert getattr(args, "resume", False) or args.overwrite, f"`fedsample {' '.join(argv)}` would be refused: {out} holds results"
        written.add(out)


def test_a_command_whose_data_set_is_absent_is_not_available(tmp_path, monkeypatch):
    """The samplers' diagnosis reads Fashion-MNIST: where its files are not, its sentinel is skipped, not failed."""
    monkeypatch.setenv("FEDSAMPLE_FASHION_MNIST_DIR", str(tmp_path))
    assert regenerate.COMMANDS["diagnose-samplers"].needs == "fashion-mnist"
    assert regenerate.available("diagnose-samplers") is False
    assert regenerate.available("quickstart") is True


def test_the_recorded_commit_is_dirty_only_when_code_differs_from_head(tmp_path):
    """A record's commit is HEAD, with "-dirty" only for a change that can change the numbers (src/, benchmarks/,
    pyproject.toml, constraints.txt): the docs, the README and the records the script rewrites do not count."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    files = {"src/fedsample/a.py": "x = 1\n", "docs/page.md": "text\n", "docs/records/q/meta.json": "{}\n", "README.md": "r\n",
             "pyproject.toml": "[project]\n", "benchmarks/b.py": "y = 2\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "first")
    head = git("rev-parse", "--short", "HEAD")
    assert regenerate.commit(tmp_path) == head
    for name in ("docs/page.md", "docs/records/q/meta.json", "README.md"):
        (tmp_path / name).write_text("edited\n")
    (tmp_path / "docs" / "records" / "new").mkdir()
    (tmp_path / "docs" / "records" / "new" / "meta.json").write_text("{}\n")  # a new record: still clean
    assert regenerate.commit(tmp_path) == head
    for change in ("src/fedsample/a.py", "pyproject.toml", "benchmarks/b.py", "src/fedsample/new.py"):
        original = (tmp_path / change).read_text() if (tmp_path / change).exists() else None
        (tmp_path / change).write_text("changed = True\n")
        assert regenerate.commit(tmp_path) == f"{head}-dirty", change
        if original is None:
            (tmp_path / change).unlink()
        else:
            (tmp_path / change).write_text(original)
        assert regenerate.commit(tmp_path) == head, change
    assert regenerate.commit(tmp_path / "docs" / "nowhere") == "unknown"
