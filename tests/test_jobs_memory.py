"""``--jobs N`` never starts more worker processes than the machine's available memory holds: each worker's peak is
estimated from the preset (model, data, engine: fedsample.experiments.footprint) and a cap is said in one line. The
available memory is faked here (fedsample.runtime.memory.available_memory)."""

from __future__ import annotations

import pytest

from fedsample.cli import main
from fedsample.experiments import execute
from fedsample.experiments.footprint import WORKER_BASE, worker_peak
from fedsample.runtime import memory
from test_output_folders import config  # noqa: F401  (the tiny experiment)

GiB = 2**30


def test_a_workers_peak_counts_its_interpreter_two_copies_of_the_data_and_the_parameters():
    """Hand-computed: 10 MiB of data, 1000 parameters, 5 stacked clients: base + 2 x 10 MiB + 4 x 1000 x (4 + 3 x 5)."""
    assert worker_peak(10 * 2**20, 1000, 5) == WORKER_BASE + 20 * 2**20 + 76_000
    assert worker_peak(0, 1000) == WORKER_BASE + 28_000  # the loop engine: one client at a time
    # 1,000 stacked clients of a 50,000-parameter model would be 600 MB; the engine stacks them in chunks of at
    # most its memory budget (512 MiB), so the worker holds base + 16 x 50,000 + 512 MiB
    assert worker_peak(0, 50_000, 1000) == WORKER_BASE + 800_000 + 512 * 2**20


@pytest.mark.parametrize(("asked", "per", "available", "fit"), [
    (8, 1 * GiB, int(3.5 * GiB), 3),  # 3 fit in 3.5 GiB
    (2, 1 * GiB, 16 * GiB, 2),  # room for all: as asked
    (4, 1 * GiB, GiB // 2, 1),  # not even one: one runs anyway (a run that cannot fit is refused elsewhere)
])
def test_the_processes_that_fit(asked, per, available, fit):
    assert memory.processes_that_fit(asked, per, available) == fit


def test_a_cap_is_said_in_one_line_and_no_cap_says_nothing(capsys):
    assert memory.capped_processes("run --jobs", 8, 1 * GiB, int(3.5 * GiB)) == 3
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "--jobs 8 capped at 3" in lines[0] and "1.0 GiB" in lines[0] and "3.5 GiB" in lines[0], lines
    assert memory.capped_processes("run --jobs", 2, 1 * GiB, 16 * GiB) == 2
    assert capsys.readouterr().err == ""


def test_run_with_more_jobs_than_memory_holds_runs_them_in_turn_and_says_so(config, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Room for one worker only (WORKER_BASE alone is more than half of the fake figure): the runs go one after
    another in this process, with one line naming the cap; the results are written as with --jobs 1."""
    monkeypatch.setattr(memory, "available_memory", lambda: WORKER_BASE + 2**20)

    def no_processes(*_args, **_kwargs):
        raise AssertionError("worker processes started beyond what memory holds")

    monkeypatch.setattr(execute, "_in_processes", no_processes)
    code = main(["run", str(config), "--quiet", "--seeds", "0,1", "--jobs", "2", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0, err
    capped = [line for line in err.splitlines() if "capped" in line]
    assert len(capped) == 1 and "--jobs 2 capped at 1" in capped[0], err
    assert (tmp_path / "out" / "results.json").is_file()


def test_a_run_with_room_for_every_job_is_not_capped(config, tmp_path, monkeypatch):  # noqa: F811
    """Plenty of fake memory: jobs_that_fit gives the jobs asked (nothing capped)."""
    from fedsample.experiments import runner
    from fedsample.experiments.presets import resolve

    plan = runner.prepare(resolve(str(config)))
    settings = execute.RunSettings(out=tmp_path)
    assert execute.jobs_that_fit(plan, settings, 2, available=64 * GiB) == 2
    assert execute.jobs_that_fit(plan, settings, 2, available=WORKER_BASE) == 1


def test_diagnose_caps_its_workers_likewise(config, capsys):  # noqa: F811
    """diagnose's worker processes: as many as asked with room, one with room for one, and the cap said in one line."""
    from fedsample.diagnostics.command import worker_processes
    from fedsample.experiments import runner
    from fedsample.experiments.presets import resolve

    plan = runner.prepare(resolve(str(config)))
    fed, strategy = plan.federation(plan.config.seeds[0]), next(iter(plan.strategies.values()))
    strategies = {"a": strategy, "b": strategy}  # two strategies: two workers asked for
    assert worker_processes(plan, fed, strategies, 2, available=64 * GiB) == 2 and capsys.readouterr().err == ""
    assert worker_processes(plan, fed, strategies, 2, available=WORKER_BASE) == 1
    assert "diagnose --jobs 2 capped at 1" in capsys.readouterr().err


def test_one_step_strategies_stack_no_client():
    """The vectorized engine trains a one-step cohort (FedSampling's one gradient, a whole-sample step) as one union
    forward/backward: no model copy per client, so the estimate stacks 1; multi-step local SGD stacks its cohort."""
    from fedsample import recipes
    from fedsample.experiments.footprint import stacked_clients
    from helpers import blobs, federate

    fed = federate(blobs(n=240), [6] * 40)
    assert stacked_clients(recipes.fedsampling(K=60), fed) == 1.0
    assert stacked_clients(recipes.fedavg(clients_per_round=10, steps=1, batch_size="all"), fed) == 1.0
    assert stacked_clients(recipes.fedavg(clients_per_round=10, epochs=1, batch_size=2), fed) == 10.0
