"""Sizes that cannot fit are refused before they are tried (issue 27): one line with the memory estimate and the
memory available, exit code 2, nothing written; integers beyond int64 are named. The estimates are checked
against the memory the work really allocates (tracemalloc's peak of numpy's allocations)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fedsample.cli import main

SIZES = "3,1,4,1,5,9,2,6"
PRIVACY = ["privacy", "--epsilon", "3", "--M", "20", "--rounds", "10", "--draws", "1000", "--sizes", SIZES]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedsample: error:") and "Traceback" not in err, err
    return err


def with_option(argv: list[str], option: str, value: str) -> list[str]:
    argv = list(argv)
    argv[argv.index(option) + 1] = value
    return argv


@pytest.mark.parametrize("option, value", [("--rounds", "1000000000000"), ("--M", "100000000000000"), ("--draws", "1000000000000")])
def test_privacy_sizes_that_cannot_fit_are_one_line_with_the_estimate(option, value, capsys):
    assert main(with_option(PRIVACY, option, value)) == 2
    err = one_error_line(capsys)
    assert "needs about" in err and "is available" in err and f"{option} {value}" in err


@pytest.mark.parametrize("option, value, words", [
    ("--M", str(10**30), "--M = 1000000000000000000000000000000 is beyond the largest supported integer"),
    ("--sizes", f"3,{10**20}", "--sizes: a size = 100000000000000000000 is beyond the largest supported integer"),
    ("--sizes", f"{2**62},{2**62}", "--sizes: the total = 9223372036854775808 is beyond"),
])
def test_integers_beyond_int64_are_named(option, value, words, capsys):
    assert main(with_option(PRIVACY, option, value)) == 2
    assert words in one_error_line(capsys)


def test_diagnose_draws_that_cannot_fit_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    import fedsample.diagnostics.measure as measure

    def never(*args, **kwargs):
        raise AssertionError("the diagnosis started")

    monkeypatch.setattr(measure, "diagnose", never)
    out = tmp_path / "out"
    assert main(["diagnose", "quickstart", "--draws", str(10**8), "--out", str(out)]) == 2
    err = one_error_line(capsys)
    assert "--draws" in err and "needs about" in err and "TiB of memory" in err and "is available" in err
    assert list(tmp_path.iterdir()) == []


def test_check_fits_states_both_numbers_and_never_refuses_when_memory_is_unknown():
    from fedsample.runtime.memory import available_memory, check_fits

    with pytest.raises(ValueError, match=r"^x needs about 3\.0 GiB of memory; 1\.0 GiB is available$"):
        check_fits("x", 3 * 2**30, available=2**30)
    check_fits("x", 2**29, available=2**30)
    assert available_memory() is None or available_memory() > 0


def traced_peak(work) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("M, rounds, clients, draws", [(20, 2000, 300, 1000), (20, 10, 10, 400_000), (200_000, 10, 10, 1000)])
def test_the_privacy_estimate_covers_what_the_report_allocates(M, rounds, clients, draws):
    """Each term dominating in turn (the attack's reports, the audit's draws, the counts per size value): the
    estimate is at least 95% of the measured peak and at most 3 times it."""
    from fedsample.privacy.command import report, report_memory

    sizes = np.random.default_rng(0).integers(1, 3 * M, size=clients)
    peak = traced_peak(lambda: report(3.0, M, rounds, sizes, 1e-5, draws, 0))
    estimate = report_memory(M, rounds, clients, draws)
    assert 0.95 * peak <= estimate <= 3 * peak


def test_the_diagnose_estimate_covers_what_a_diagnosis_allocates():
    """The numpy side of a diagnosis (the draws, their statistics and logs; tracemalloc sees numpy's
    allocations, not torch's) stays below the estimate less its torch part (the gradient basis and one chunk of
    per-sample gradients), and the estimate is at most 3 times the measured total (after a first small
    diagnosis, whose imports are not part of any estimate)."""
    from fedsample.diagnostics.command import diagnosed_strategies, diagnosis_memory
    from fedsample.diagnostics.gradients import GRADIENT_CHUNK, basis_shape
    from fedsample.diagnostics.measure import diagnose
    from fedsample.experiments import runner
    from fedsample.experiments.presets import resolve
    from fedsample.simulation import build_module

    plan = runner.prepare(resolve("quickstart"))
    fed = plan.federation(0)
    strategies, _ = diagnosed_strategies(plan)
    parameters = sum(p.numel() for p in build_module(plan.model, fed).parameters())
    rows, draws = len(fed.dataset.y_train), 400
    diagnose(strategies, fed, plan.model, rounds=8, seed=0)  # the imports and caches of a first call are not per draw
    peak = traced_peak(lambda: diagnose(strategies, fed, plan.model, rounds=draws, seed=0))
    estimate = diagnosis_memory(rows, parameters, len(strategies), draws, 1024)
    dim, sketched = basis_shape(rows, parameters)
    torch_part = rows * dim * (4 if sketched else 8) + min(rows, GRADIENT_CHUNK) * parameters * 12
    assert peak <= estimate - torch_part and estimate <= 3 * (peak + torch_part)
