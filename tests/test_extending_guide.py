"""docs/extending.md runs as written: every ```python block, in order, in one namespace, in a temporary folder;
then what its prose claims is checked on the namespace the blocks left behind."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from fedsample.parts import InclusionKind

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def python_blocks(text: str) -> list[str]:
    """The guide's ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


@pytest.fixture(scope="module")
def guide(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("extending")
    module = types.ModuleType("extending_guide")  # a module of its own, as a reader's script (dataclasses look it up)
    namespace = module.__dict__
    blocks = python_blocks(GUIDE.read_text())
    assert len(blocks) >= 6
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setitem(sys.modules, module.__name__, module)
        for i, block in enumerate(blocks):
            exec(compile(block, f"{GUIDE.name} block {i + 1}", "exec"), namespace)
    return namespace


def test_the_sampler_declares_its_inclusion_probabilities(guide):
    sampler = guide["SizeBiasedPoisson"](m=6)
    sizes = guide["sizes"].astype(float)
    pi = sampler.inclusion(sizes)
    assert np.all((pi > 0) & (pi <= 1))
    assert sampler.expected_cohort(len(sizes), sizes) == pytest.approx(pi.sum())
    assert 4 <= pi.sum() <= 6 + 1e-9  # about m clients a round (fewer where pi_k is capped at 1)


def test_check_refuses_each_size_reporting_that_does_not_meet_the_need(guide):
    refusals = guide["refusals"]
    assert len(refusals) == 3
    assert all(r.startswith("SizeBiasedPoisson(m=6) needs exact sizes of every client before selection") for r in refusals)
    assert "sizes=None" in refusals[0] and "randomized" in refusals[1] and "asks only the cohort" in refusals[2]
    assert all(r.endswith("pass sizes=ExactSizes()") for r in refusals)
    assert "disagree on K (samples per round) (64 vs 32)" in guide["disagreement"]


def test_the_run_finishes_with_finite_metrics(guide):
    final = guide["final"]
    assert final["round"] == 5 and np.isfinite(final["loss"]) and 0 <= final["accuracy"] <= 1


def test_diagnose_shows_the_unbiased_designs_unbiased_and_the_double_size_weighting_biased(guide):
    """The guide's claims: |bias_sq| <= 4 se for the Horvitz-Thompson aggregator and the exact share, > 4 se above
    zero for the size-weighted mean on a size-biased cohort (600 draws each)."""
    results = {label: r["estimator"] for label, r in guide["diagnosis"].results.items()}
    for label in ("ours", "exact share"):
        e = results[label]
        assert abs(e["bias_sq"]) <= 4 * e["bias_sq_se"], (label, e)
        assert e["variance"] > 0  # the draws vary: the check could have failed
    biased = results["size-weighted mean"]
    assert biased["bias_sq"] > 4 * biased["bias_sq_se"], biased


def test_each_declared_inclusion_kind_is_what_the_round_record_states(guide):
    assert guide["kinds"] == {
        "Coin": ("exact", None, True),
        "LargestOfCandidates": ("estimated", InclusionKind.ESTIMATED.bias, False),
        "Largest": ("degenerate", InclusionKind.DEGENERATE.bias, False),
    }


def test_a_declared_design_is_amplified_and_an_undeclared_one_is_not(guide):
    amplified, unamplified = guide["spent"]["declared Poisson(0.2)"]
    assert amplified < unamplified
    charged, full = guide["spent"]["no declaration"]
    assert charged == full


def test_each_wrong_declaration_is_refused_in_one_line_naming_the_field_or_the_part(guide):
    wrong = guide["wrong"]
    assert wrong["misspelt"] == "ClientSamplerCapabilities.__init__() got an unexpected keyword argument 'inclusion_kinds'"
    assert wrong["left out"] == "ClientSamplerCapabilities.__init__() missing 1 required keyword-only argument: 'inclusion_kind'"
    assert wrong["wrong kind"] == ("ClientSamplerCapabilities(inclusion_kind='deterministic'): inclusion_kind must be "
                                   "InclusionKind.EXACT, InclusionKind.ESTIMATED or InclusionKind.DEGENERATE")
    assert wrong["wrong kind, in a property"] == "clients=WrongKindProperty(m=4): " + wrong["wrong kind"]
    assert wrong["old way"].startswith("clients=OldWay(m=4) declares inclusion_kind, needs_sizes, server_learns as separate "
                                       "attributes, which fedsample no longer reads: declare them in one record, capabilities = "
                                       "fedsample.parts.ClientSamplerCapabilities(inclusion_kind=<")
    assert "is not a client sampler: it has no expected_cohort() method" in wrong["no expected_cohort"]
    assert "round 1: OutOfRange(q=0.2) chose client ids outside 0..29: [0, 30]" in wrong["out of range"]


def test_the_guide_shows_an_undeclared_offer_refused(guide):
    """An optional method a sampler has but does not declare (issue 39) is refused naming the sampler and the field."""
    assert guide["wrong"]["offer not declared"] == ("clients=ReplaysUnsaid(m=4) has estimate_inclusion() but its "
                                                     "ClientSamplerCapabilities does not declare it: declare estimates_inclusion=True")
