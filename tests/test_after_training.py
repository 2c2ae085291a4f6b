"""Nothing lost after training (issue 40, item 3): a failure in a step after the rounds (the ledger, the plots,
the summary table) leaves the trained results written and says in one warning line what could not be computed;
a size report at epsilon = 1000 (no noise left) runs through the command line and is accounted as unprotected."""

from __future__ import annotations

import json

import pytest

from fedsample.cli import main
from fedsample.experiments import report
from test_cli import write_config


def config(tmp_path, epsilon=3.0):
    """test_cli's two-round FedSampling experiment on digits, at ``epsilon``."""
    return write_config(tmp_path, strategy=f'[[strategies]]\nrecipe = "fedsampling"\nK = 20\nepsilon = {float(epsilon)!r}\nM = 10\n')


def test_a_noiseless_size_report_writes_the_results(tmp_path):
    """On main eps = 1000 trained every round, then dp-accounting raised on a noise parameter of 0 and nothing was written."""
    out = tmp_path / "run"
    assert main(["run", str(config(tmp_path, 1000)), "--out", str(out), "--quiet"]) == 0
    ledger = json.loads((out / "results.json").read_text())["strategies"]["fedsampling"]["privacy"]["ledger"][0]
    assert "size reports" in ledger["unprotected"] and ledger["epsilon"] is None  # infinite: None in JSON


def test_a_failing_plot_leaves_the_results_and_one_line(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no glyph for this label")

    monkeypatch.setattr(report, "plot_curves", broken)
    out = tmp_path / "run"
    with pytest.warns(RuntimeWarning) as caught:
        assert main(["run", str(config(tmp_path)), "--out", str(out), "--quiet"]) == 0
    lines = [str(w.message) for w in caught if "could not write" in str(w.message)]
    assert lines == ["could not write curves.png (RuntimeError: no glyph for this label); the results are written"]
    assert not (out / "curves.png").exists()
    for name in ("results.json", "privacy.json", "summary.md", "partition.png"):
        assert (out / name).stat().st_size > 0, name


def test_a_failing_ledger_keeps_the_trained_run(tmp_path, monkeypatch):
    from fedsample.privacy.ledger import Ledger

    rounds_summary = Ledger.summary

    def broken(self, releases=False):  # the round logs' summaries work; the run's final one (every release) fails
        if releases:
            raise ValueError("Noise parameter must be strictly between 0 and 1")
        return rounds_summary(self, releases)

    monkeypatch.setattr(Ledger, "summary", broken)
    out = tmp_path / "run"
    with pytest.warns(RuntimeWarning, match="the privacy ledger could not be computed"):
        assert main(["run", str(config(tmp_path)), "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "results.json").read_text())
    result = doc["strategies"]["fedsampling"]
    assert len(result["history"][0]) == 2 and "could not be computed" in result["privacy"]["ledger"][0]["error"]
