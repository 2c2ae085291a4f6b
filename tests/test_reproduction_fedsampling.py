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
