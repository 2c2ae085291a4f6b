"""The FedSampling paper module: every row names a preset of one of its profiles and a strategy label in
it; the figures are the paper's Table 1 (MIND) numbers; the presets match K per round."""

import re
from pathlib import Path

import pytest

from fedsample.experiments.config import load_config
from fedsample.reproduction.papers.fedsampling import PAPER, TEXTCNN, TRANSFORMER

PRESETS = Path(__file__).resolve().parents[1] / "src" / "fedsample" / "experiments" / "presets"
PROFILE_PRESETS = {name for names in PAPER.presets.values() for name in names}


def config(name: str):
    return load_config(PRESETS / f"{name}.toml")


@pytest.mark.parametrize("row", PAPER.figures + PAPER.comparisons, ids=lambda r: r.claim)
def test_every_row_names_a_preset_and_its_labels(row):
    assert row.source in PROFILE_PRESETS
    labels = {s.display for s in config(row.source).strategies}
    named = [row.label] if hasattr(row, "label") else [row.better, row.worse]
    assert set(named) <= labels, (row.source, named)


def test_table1_figures_hand_checked():
    """Two cells read from Table 1: Text-CNN FedSampling accuracy 71.15, Transformer FedAvg Macro-F1 50.46."""
    cell = {(f.source, f.label, f.metric): f.paper for f in PAPER.figures}
    assert cell[(TEXTCNN, "FedSampling", "accuracy")] == 71.15
    assert cell[(TRANSFORMER, "FedAvg", "macro_f1")] == 50.46
    assert len(PAPER.figures) == 2 * 2 * 6


@pytest.mark.parametrize("name", sorted(PROFILE_PRESETS))
def test_presets_match_every_baseline_to_k_samples_per_round(name):
    cfg = config(name)
    assert ("cuda" in name) == (cfg.device == "cuda")
    assert re.search(r"\d+ (s|min) on|not yet measured", cfg.description), "the description states the cost"
    for strategy in cfg.strategies:
        params = strategy.params
        if strategy.recipe in ("fedsampling", "centralized"):
            assert params["K"] == 2048
        elif strategy.recipe != "fedsampling_naive":
            assert params["samples_per_round"] == 2048 and params["epochs"] == 1, strategy.display


FL_BASELINES = ("FedAvg", "FedYogi", "FedAdagrad", "FedAdam")


def test_cpu_claims_state_their_budget_and_check_the_premise():
    """Every cpu claim that FedSampling beats an FL baseline states its budget and names centralized training as the
    premise; both budgets are run for the FedAvg family (one local epoch; one full-batch step)."""
    cpu = set(PAPER.presets["cpu"])
    against = [c for c in PAPER.comparisons if c.source in cpu and c.better == "FedSampling" and c.worse.startswith(FL_BASELINES)]
    assert against and all(c.premise == "Centralized" and c.budget for c in against)
    assert {c.worse.rsplit(" ", 2)[-2:][-1] for c in against} == {"epoch)", "step)"}


@pytest.mark.parametrize("name", sorted(n for n in PAPER.presets["cpu"] if "sigma" in n or "shards" in n))
def test_cpu_presets_select_every_lr_on_validation_and_one_step_is_one_step(name):
    cfg = config(name)
    assert cfg.validation is not None and len(cfg.seeds) >= 8
    for strategy in cfg.strategies:
        assert strategy.grid, strategy.display  # every method's (server) lr selected on the validation split
        if strategy.display.endswith("(one step)") or strategy.display.endswith(", one step)"):
            assert strategy.params["batch_size"] == "all"  # each client's whole sample: one full-batch step per round
