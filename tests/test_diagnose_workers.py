"""``fedsample diagnose`` in worker processes: the same numbers for any number of workers, the workers' warnings
counted once per kind in diagnostics.json, a progress bar that stays out of stdout (and away with --quiet), the
precision of the table printed with it (issue 40 item 7)."""

from __future__ import annotations

import json
import warnings

import pytest

from fedsample.cli import main
from test_diagnostics_cli import CONFIG as TINY

# the CLI tests' tiny experiment (FedSampling, FedAvg) and three samplers that probe or ask for update norms
CONFIG = TINY.replace('name = "tiny-diagnose"', 'name = "tiny-workers"') + """
[[strategies]]
recipe = "power_of_choice"
label = "pow-d"
m = 2
d = 4
steps = 1
batch_size = 1000000

[[strategies]]
recipe = "power_of_choice"
label = "pow-d (d=3)"
m = 2
d = 3
steps = 1
batch_size = 1000000

[[strategies]]
recipe = "optimal_sampling"
label = "optimal"
m = 2
steps = 1
batch_size = 1000000
"""

DRAWS = 12


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny.toml"
    path.write_text(CONFIG)
    return path


def diagnosed(config, out, capsys, *extra):
    assert main(["diagnose", str(config), "--draws", str(DRAWS), "--check-rounds", "0", "--out", str(out), *extra]) == 0
    printed = capsys.readouterr()
    document = json.loads((out / "diagnostics.json").read_text())
    for result in document["strategies"].values():
        result.pop("seconds")  # wall time, the one number that may differ
    return document, (out / "summary.md").read_text(), printed


def test_one_and_two_workers_give_identical_tables_and_warning_counts(config, tmp_path, capsys):
    with warnings.catch_warnings(record=True) as shown:  # the showwarning in force: what a run shows
        warnings.simplefilter("always")  # every warning raised reaches the run (no registry of places shown)
        one, summary_one, _ = diagnosed(config, tmp_path / "one", capsys, "--jobs", "1", "--quiet")
        del shown[:]
        two, summary_two, printed = diagnosed(config, tmp_path / "two", capsys, "--jobs", "2", "--quiet")
    assert summary_one == summary_two
    assert one == two  # every number, the warnings record (kind, message, count) included
    assert list(two["strategies"]) == ["FedSampling", "FedAvg", "pow-d", "pow-d (d=3)", "optimal"]  # the file's order
    kinds = {w["message"].split(" without noise")[0]: w["count"] for w in two["warnings"]}
    # the two power-of-choice strategies probe losses every draw: one kind, raised by both (in two processes where
    # there are two workers), counted together; optimal sampling's update norms, every draw
    assert kinds == {"privacy: every probed client sends its loss": 2 * DRAWS,
                     "privacy: every client that trained sends its update's norm": DRAWS}
    # shown once, the repeats said once at the end
    assert sum("probed client sends its loss" in str(w.message) for w in shown) == 1
    assert printed.err.count("probed client sends its loss") == 1
    assert f"PrivacyWarning shown once, repeated {2 * DRAWS - 1} more times: privacy: every probed client sends its loss" in printed.err


def test_the_progress_bar_stays_off_stdout_and_quiet_has_none(config, tmp_path, capsys):
    _, _, printed = diagnosed(config, tmp_path / "bar", capsys, "--jobs", "2")
    assert printed.out.startswith("| strategy |")  # the table first on stdout, no bar in it (not a terminal here)
    assert "5 of 5 strategies" in printed.err  # the bar's last state, on stderr
    _, _, quiet = diagnosed(config, tmp_path / "quiet", capsys, "--jobs", "2", "--quiet")
    assert quiet.out.startswith("| strategy |")
    assert "strategies" not in quiet.err.replace("5 strategies x", "")


def test_the_table_states_its_precision(config, tmp_path, capsys):
    document, summary, printed = diagnosed(config, tmp_path / "precision", capsys, "--jobs", "1", "--quiet")
    relative = max(r["estimator"]["mse_se"] / r["estimator"]["mse"] for r in document["strategies"].values())
    line = f"precision: {DRAWS} draws per strategy; bias² ± its jackknife standard error"
    assert line in summary and line in printed.out
    assert f"MSE within {relative:.1%}" in summary


def test_jobs_below_one_is_one_line(config, tmp_path, capsys):
    assert main(["diagnose", str(config), "--jobs", "0", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["fedsample: error: --jobs must be >= 1, got 0"]
