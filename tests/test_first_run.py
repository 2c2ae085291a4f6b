"""The first run explains itself (issue 42): ``fedsample --help`` lists every command on one line with an example,
and ``fedsample run`` ends with where its results are and what to open first, naming files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedsample.cli import COMMANDS, main


def test_help_lists_every_command_on_one_line_and_an_example(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    for name in COMMANDS:
        (line,) = [line for line in help_text.splitlines() if line.split()[:1] == [name]]
        assert len(line.split()) > 2, f"{name}: its help is not on its line: {line!r}"
    examples = help_text.split("examples:")[1]
    assert re.search(r"^  fedsample run\s", examples, re.M) and "fedsample COMMAND --help" in examples


def test_a_run_ends_with_what_to_open_first_and_those_files_exist(tmp_path, capsys):
    out = tmp_path / "first"
    assert main(["run", "quickstart", "--rounds", "2", "--seeds", "0", "--only", "Centralized", "--out", str(out), "--quiet"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-3:]
    assert last[0].startswith("wrote ") and last[1].startswith("open first: ") and last[2].startswith("every number")
    named = re.findall(r"(\S+\.(?:md|png|json))", " ".join(last[1:]))
    assert len(named) == 4 and all(Path(name).is_file() for name in named), named
