"""Every registered paper module is consistent with its presets (presets for every profile that load;
every Figure/Comparison cites a preset or study of the paper, a strategy label of that preset, a known
metric); and the check itself finds each kind of mistake in a broken paper."""

import pytest

from fedsample.reproduction.consistency import check_paper
from fedsample.reproduction.registry import papers, preset_key
from fedsample.reproduction.spec import Comparison, Figure, Paper, Study

REGISTERED = papers()


@pytest.mark.skipif(not REGISTERED, reason="no paper module registered yet (the paper branches add them)")
@pytest.mark.parametrize("name", sorted(REGISTERED) or ["none"])
def test_registered_paper_is_consistent(name):
    assert check_paper(REGISTERED[name]) == []


def test_registered_papers_name_unique_preset_keys():
    """Within a profile each preset runs once (one folder per preset in the profile's output folder); a preset
    may serve both profiles (ISFedAvg's classification stand-in is the same on CPU and GPU)."""
    for paper in REGISTERED.values():
        for profile, entries in paper.presets.items():
            keys = [preset_key(e) for e in entries]
            assert len(keys) == len(set(keys)), (paper.name, profile)


def study(device, seeds, out):
    return {"IS": {"gain_db": [1.0 for _ in seeds]}}


GOOD = Paper(
    name="good",
    citation="c",
    presets={"cpu": ("quickstart",), "cuda": ("quickstart",)},
    figures=(Figure("f", "quickstart", "Centralized", 90.0), Figure("g", "s", "IS", 2.0, metric="gain_db", unit="dB")),
    comparisons=(Comparison("c", "quickstart", "Centralized", "Naive fixed ratio"),),
    studies=(Study("s", study, cost="~1 s"),),
)


def test_a_consistent_paper_has_no_problems():
    assert check_paper(GOOD) == []


@pytest.mark.parametrize("broken, problem", [
    (Paper("p", "c", presets={"cpu": ("quickstart",)}), "no presets for profile 'cuda'"),
    (Paper("p", "c", presets={"cpu": ("quickstart",), "cuda": ("nosuchpreset",)}), "cuda preset 'nosuchpreset'"),
    (Paper("p", "c", presets={"cpu": ("quickstart",), "cuda": ("quickstart",), "tpu": ("quickstart",)}), "unknown profile 'tpu'"),
    (Paper("p", "c", GOOD.presets, figures=(Figure("f", "elsewhere", "Centralized", 1.0),)), "source 'elsewhere' is neither"),
    (Paper("p", "c", GOOD.presets, figures=(Figure("f", "quickstart", "FedMagic", 1.0),)), "label 'FedMagic' is not a strategy"),
    (Paper("p", "c", GOOD.presets, figures=(Figure("f", "quickstart", "Centralized", 1.0, metric="auc"),)), "metric 'auc'"),
    (Paper("p", "c", GOOD.presets, figures=(Figure("f", "quickstart", "Centralized", 1.0, metric="loss"),)), "unit '%' for metric 'loss'"),
    (Paper("p", "c", GOOD.presets, comparisons=(Comparison("c", "quickstart", "Centralized", "Nobody"),)), "label 'Nobody'"),
])
def test_the_check_finds_each_mistake(broken, problem):
    problems = check_paper(broken)
    assert any(problem in line for line in problems), problems


def test_a_preset_that_does_not_load_is_reported_once():
    broken = Paper("p", "c", {"cpu": ("quickstart",), "cuda": ("nosuchpreset",)},
                   figures=(Figure("f", "nosuchpreset", "Centralized", 1.0),))
    assert len(check_paper(broken)) == 1


def test_docs_have_a_section_for_every_paper_and_profile():
    from pathlib import Path

    from fedsample.reproduction.splice import markers

    text = (Path(__file__).parents[1] / "docs" / "reproduction.md").read_text()
    for name in {"fedsampling", "iwds", "fedstas", "isfedavg"} | set(REGISTERED):
        for profile in ("cpu", "cuda"):
            begin, end = markers(name, profile)
            assert text.count(begin) == 1 and text.count(end) == 1 and text.index(begin) < text.index(end), (name, profile)
