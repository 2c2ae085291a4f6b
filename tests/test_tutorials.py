"""The tutorials (docs/tutorials/*.md) run as written, top to bottom, in a temporary folder: every ```bash block's
``fedsample ...`` lines through the real command line (each must exit 0), every ```python block in one namespace,
in page order; then what each page tells the reader to look at is checked on what the run left behind. A
```console block is shown, not run (an install command, a Flower deployment)."""

from __future__ import annotations

import re
import shlex
import sys
import types
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"
PAGES = ("getting-started", "comparing-samplers", "reproducing-a-claim", "flower", "ray")
NEEDS = {"flower": "flwr", "ray": "ray"}


def steps(text: str) -> list[tuple[str, str]]:
    """The page's ```bash and ```python blocks, in order, as (language, body)."""
    return re.findall(r"^```(bash|python)\n(.*?)^```$", text, flags=re.S | re.M)


def commands(body: str) -> list[list[str]]:
    """The ``fedsample ...`` lines of a bash block, as argv (comments dropped)."""
    return [shlex.split(line, comments=True)[1:] for line in body.splitlines() if line.strip().startswith("fedsample ")]


def run_page(name: str, folder: Path) -> dict:
    from fedsample.cli import main

    page = TUTORIALS / f"{name}.md"
    module = types.ModuleType(f"tutorial_{name.replace('-', '_')}")
    namespace = module.__dict__
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setitem(sys.modules, module.__name__, module)
        for i, (language, body) in enumerate(steps(page.read_text())):
            if language == "python":
                exec(compile(body, f"{page.name} block {i + 1}", "exec"), namespace)
                continue
            for argv in commands(body):
                assert main(argv) == 0, f"{page.name}: `fedsample {shlex.join(argv)}` failed"
    return namespace


def test_every_tutorial_is_tested_and_linked_first_from_the_index():
    assert sorted(p.stem for p in TUTORIALS.glob("*.md")) == sorted(PAGES)
    index = (TUTORIALS.parent / "index.md").read_text()
    toctrees = re.findall(r"```\{toctree\}\n(.*?)```", index, flags=re.S)
    assert ":caption: Tutorials" in toctrees[0]
    assert [line.strip() for line in toctrees[0].splitlines() if line.startswith("tutorials/")] == [f"tutorials/{p}" for p in PAGES]
    readme = (TUTORIALS.parents[1] / "README.md").read_text()
    assert all(f"docs/tutorials/{p}.md" in readme for p in PAGES[1:]) and "docs/index.md#tutorials" in readme


def test_getting_started(tmp_path):
    ns = run_page("getting-started", tmp_path)
    for name in ("summary.md", "curves.png", "partition.png", "results.json", "privacy.json", "timing.json", "run.json"):
        assert (tmp_path / "first" / name).is_file(), name  # every file the page lists
    assert (tmp_path / "first" / "checkpoints").is_dir()
    assert set(ns["final"]) == {"Centralized", "FedSampling (eps=3)", "FedAvg (uniform clients)",
                                "FedAvg (size-weighted clients)", "FedAvg (one step)", "Naive fixed ratio"}
    assert all(a["n"] == 2 and len(a["per_seed"]) == 2 and 0 <= a["mean"] <= 1 for a in ns["final"].values())
    assert "Final round (10 rounds)" in ns["summary"]


def test_comparing_samplers(tmp_path):
    ns = run_page("comparing-samplers", tmp_path)
    for name in ("summary.md", "diagnostics.json", "estimator.png", "exploitation.png", "labels.png"):
        assert (tmp_path / "diagnosis" / name).is_file(), name
    strategies = ns["diagnosis"]["strategies"]
    assert ns["diagnosis"]["rounds"] == 20
    e = strategies["FedSampling (eps=3)"]["estimator"]
    assert abs(e["bias_sq"]) <= 3 * e["bias_sq_se"] and e["variance"] > 0  # the page: within its noise, and the draws vary
    deciles = "FedAvg (size-weighted clients)"  # the page: its smallest/largest decile ratio is about 0.01
    tenths = strategies[deciles]["exploitation"]["by_size_decile"]
    assert tenths[0]["inclusion"] < 0.05 * tenths[-1]["inclusion"]


def test_reproducing_a_claim(tmp_path):
    ns = run_page("reproducing-a-claim", tmp_path)
    assert (tmp_path / "reproduction" / "REPRODUCTION.md").is_file()
    rows = ns["report"]["comparisons"]
    verdicts = {row["verdict"].split(" (")[0] for row in rows}
    assert verdicts <= {"holds", "reversed", "inconclusive", "differs", "not measured"}
    measured = [row for row in rows if row["verdict"] != "not measured"]
    assert len(measured) == 4 and all(row["test"] == "paired" and row["df"] == 1 for row in measured)
    t_verdicts = {row["t_verdict"] for row in measured}
    assert "holds" in t_verdicts and "inconclusive" in t_verdicts  # the page's reading: a large gain holds by its t test
    for row in measured:  # and the verdict is read from the Holm-adjusted p over the table
        assert row["p_holm"] >= min(row["p"], 1 - row["p"]) if not row["tie"] else row["p_holm"] is not None
        if row["t_verdict"] == "holds" and row["p_holm"] >= 0.025:
            assert row["verdict"].startswith("inconclusive (Holm-adjusted p = ")


def test_flower(tmp_path):
    pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")
    ns = run_page("flower", tmp_path)
    history = ns["history"]
    assert [r["round"] for r in history] == [1, 2]
    assert all(r["secure_aggregation"]["protocol"] == "SecAgg+" and r["failed"] == [] for r in history)
    assert (tmp_path / "flower-run" / "params.pt").is_file()


def test_ray(tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'fedsample[ray]'")
    ns = run_page("ray", tmp_path)
    alone, ray = ns["alone"], ns["ray"]
    assert ray["accuracy"]["per_seed"][0] == pytest.approx(alone["accuracy"]["per_seed"][0], abs=1e-6)  # the page: same numbers
    assert ray["loss"]["per_seed"][0] == pytest.approx(alone["loss"]["per_seed"][0], rel=1e-5)
    assert 0 <= ns["result"].history[-1]["accuracy"] <= 1
