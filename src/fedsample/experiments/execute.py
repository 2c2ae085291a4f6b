"""Running a plan's runs, one after another or in parallel processes.

Each run (strategy label, grid value, training seed) is independent: its numbers depend only on the seed
(fedsample.rng), so ``jobs = N`` processes give the numbers of one process. Processes are started with the
``spawn`` method (never fork a process that may hold CUDA or thread pools); each receives the prepared plan
once, sets its torch threads, and reports every finished round back through a queue for the progress bar.
On a CUDA device the runs go one after another in this process (one GPU, the data loaded once).

Ctrl-C reaches every process of the terminal's process group. The processes are started with SIGINT blocked
(a blocked signal stays blocked across exec, and Python does not unblock it), so they never print a
KeyboardInterrupt traceback of their own, even while they import; this process receives it, stops the
processes and cancels the runs not started, and the command line prints one line (exit code 130). The
checkpoints written so far stay, for ``--resume``.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import multiprocessing
import queue as queue_module
import signal
import threading
from contextlib import contextmanager
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Callable, Iterator, TypedDict

import torch

from fedsample.runtime.device import resolve_device, use_threads
from fedsample.runtime.memory import capped_processes
from fedsample.experiments.footprint import plan_worker_peak
from fedsample.experiments import grid
from fedsample.experiments.plan import Failure, Job, Outcome, Plan
from fedsample.rounds import FederationLost
from fedsample.experiments.validation import validation_metrics
from fedsample.callbacks import Checkpoint, Diverged, Tracking
from fedsample.callbacks import Progress as RoundsDone
from fedsample.simulation import Backend, Engine, EngineOptions, build_module, simulate
from fedsample.tracking.base import TrackerGroup
from fedsample.tracking.setup import TrackingSpec

if TYPE_CHECKING:
    from fedsample.experiments.config import ExperimentConfig
    from fedsample.privacy.ledger import Accounting

__all__ = ["RunSettings", "checkpoint_path", "folder_name", "jobs_that_fit", "run_jobs"]

Progress = Callable[[str, int], None]


@dataclass(frozen=True)
class RunSettings:
    """How every run of an experiment is run (the same for all of them)."""

    out: Path
    resume: bool = False
    checkpoint_every: int = 10
    backend: Backend = "auto"
    device: str = "cpu"
    options: EngineOptions = field(default_factory=EngineOptions)  # further Engine settings (federation, workers, ...)
    tracking: TrackingSpec | None = None


def folder_name(name: str) -> str:
    """The default output folder's name for an experiment name: one path component, never '..'."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).strip(".")
    return safe or "experiment"


def checkpoint_path(out: Path, label: str, seed: int) -> Path:
    """One file per (run label, seed), never a path outside ``out/checkpoints`` (:func:`run_file_name`)."""
    return out / "checkpoints" / f"{run_file_name(label, seed)}.pt"


def run_file_name(label: str, seed: int) -> str:
    """A (run label, seed)'s file name: the label's safe characters for reading, plus a digest of the whole
    label so that two labels never share a file."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in label)[:40]
    tag = hashlib.blake2b(label.encode(), digest_size=6).hexdigest()
    return f"{safe}-{tag}-seed{seed}"


def run_trackers(plan: Plan, job: Job, name: str, settings: RunSettings) -> list[TrackerGroup]:
    """The run's trackers (none without tracking): run "LABEL / seed N" of the experiment (its files in the
    experiment's folder), with the experiment's settings, the label and grid value added to its config."""
    if settings.tracking is None or not settings.tracking.backends:
        return []
    experiment = plan.config.name
    config = {"experiment_config": plan.config.model_dump(mode="json"), "label": job.label, "grid_value": job.key}
    path = f"{folder_name(experiment)}/{run_file_name(name, job.seed)}"
    return [settings.tracking.open(experiment, f"{name} / seed {job.seed}", path, config)]


def job_name(plan: Plan, job: Job) -> str:
    """The run's label: the strategy's, with ``[param=value]`` for a grid value."""
    config = next(s for s in plan.config.strategies if s.display == job.label)
    return grid.run_label(job.label, config, job.key)


def run_job(plan: Plan, job: Job, settings: RunSettings, progress: Callable[[int], None] | None = None) -> Outcome:
    """One run with its checkpoint; a run that diverges is a :class:`Failure` (one line), not an error.
    The final parameters are scored on the validation split when the experiment has one. The run's garbage is
    collected when it ends, so that a process running many runs in turn (a ``--jobs``
    worker) holds one run's memory, not that of every run whose objects form reference cycles."""
    try:
        return _run_job(plan, job, settings, progress)
    finally:
        gc.collect()


def _run_job(plan: Plan, job: Job, settings: RunSettings, progress: Callable[[int], None] | None) -> Outcome:
    name = job_name(plan, job)
    fed = plan.federation(job.seed)
    config = plan.config
    try:
        callbacks = [Tracking(run_trackers(plan, job, name, settings)),
                     Checkpoint(checkpoint_path(settings.out, name, job.seed), settings.checkpoint_every, settings.resume),
                     *([RoundsDone(progress)] if progress else [])]
        result = simulate(
            plan.variants[job.label][job.key], federated_data=fed, model=plan.model, rounds=config.rounds, seed=job.seed,
            eval_every=config.eval_every, faults=plan.faults, privacy=accounting(config),
            engine=Engine(backend=settings.backend, device=settings.device, **settings.options),  # options: further Engine settings
            callbacks=callbacks,
        )
    except Diverged as error:
        return Outcome(Failure(job.seed, f"{name!r} diverged: {error}"))
    validation = plan.validation(job.seed)
    if validation is None:
        return Outcome(result)
    with torch.random.fork_rng(devices=[]):  # building a module draws initial weights: keep the global stream
        module = build_module(plan.model, fed)
    return Outcome(result, validation_metrics(module, result.params, validation, fed.dataset))


def accounting(config: ExperimentConfig) -> Accounting:
    """The runs' privacy accounting: the config's ``[privacy]`` table, or the default."""
    from fedsample.privacy.ledger import Accounting

    return Accounting(**config.privacy.model_dump()) if config.privacy is not None else Accounting()


def run_jobs(
    plan: Plan, settings: RunSettings, jobs: int = 1, threads: int | None = None, progress: Progress | None = None,
    on_failure: Callable[[str], None] | None = None,
) -> dict[Job, Outcome]:
    """Every run of the plan, by job; ``progress(run label, round)`` after each round, ``on_failure(line)``
    for each run that stopped (diverged, or stopped by the privacy budget). ``jobs > 1`` runs them in that many processes on the CPU; on a GPU they run one
    after another in this process."""
    todo = plan.runs()
    parallel = jobs > 1 and len(todo) > 1 and resolve_device(settings.device).type == "cpu"
    if parallel:  # no more processes than the available memory holds (one line says when it caps them)
        jobs = jobs_that_fit(plan, settings, min(jobs, len(todo)))
        parallel = jobs > 1
    outcomes = _in_processes(plan, todo, settings, jobs, threads, progress) if parallel else _in_turn(plan, todo, settings, progress)
    for job in todo:
        result = outcomes[job].result
        if on_failure and (isinstance(result, Failure) or result.status != "ok"):  # diverged, or stopped by the privacy budget
            on_failure(result.reason if isinstance(result, Failure) else result.status)
    return {job: outcomes[job] for job in todo}


def jobs_that_fit(plan: Plan, settings: RunSettings, jobs: int, available: int | None = None) -> int:
    """``jobs`` worker processes, or as many as the ``available`` memory (default: the machine's) holds, each at
    the peak estimated from the plan's model, data and engine (:func:`~fedsample.experiments.footprint.plan_worker_peak`);
    a cap is said in one line."""
    fed = plan.federation(plan.config.seeds[0])
    strategies = [strategy for by_key in plan.variants.values() for strategy in by_key.values()]
    peak = plan_worker_peak(plan.model, fed, strategies, settings.backend)
    return capped_processes("--jobs", jobs, peak, available)


def _in_turn(plan: Plan, todo: list[Job], settings: RunSettings, progress: Progress | None) -> dict[Job, Outcome]:
    outcomes = {}
    for job in todo:
        name = job_name(plan, job)
        outcomes[job] = run_job(plan, job, settings, functools.partial(progress, name) if progress else None)
    return outcomes


# --- parallel processes ---------------------------------------------------------------------------

class _Worker(TypedDict, total=False):
    """What a worker process keeps (:func:`_start_worker`): the plan and the queue (a manager's) it reports its runs'
    rounds on, as (run name, round)."""

    plan: Plan
    rounds: queue_module.Queue[tuple[str, int]]


_WORKER: _Worker = {}


def _start_worker(plan: Plan, threads: int, rounds: queue_module.Queue[tuple[str, int]]) -> None:
    """A spawned process: keep the plan and the progress queue, one torch thread unless asked otherwise; Ctrl-C
    is the parent's to handle (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    use_threads(threads)
    _WORKER.update({"plan": plan, "rounds": rounds})


#: What a run says when one of its worker processes dies without an answer (``BrokenProcessPool``).
_WORKER_DIED = (
    "a worker process died without answering (killed by a signal: most often the system's out-of-memory killer, "
    "see `dmesg`); {jobs} runs were in memory at once: run again with fewer --jobs (the finished runs' checkpoints stay)"
)

def _run_in_worker(job: Job, settings: RunSettings) -> Outcome:
    plan, rounds = _WORKER["plan"], _WORKER["rounds"]
    name = job_name(plan, job)
    return run_job(plan, job, settings, lambda t: rounds.put((name, t)))


def _in_processes(
    plan: Plan, todo: list[Job], settings: RunSettings, jobs: int, threads: int | None, progress: Progress | None
) -> dict[Job, Outcome]:
    context = multiprocessing.get_context("spawn")
    with interrupts_blocked_in_children():
        manager = context.Manager()  # started here: its process, too, never sees a Ctrl-C
    with manager:
        rounds = manager.Queue()  # a put returns once the round is queued: none is in flight when the runs end
        with ProcessPoolExecutor(
            max_workers=min(jobs, len(todo)), mp_context=context, initializer=_start_worker, initargs=(plan, threads or 1, rounds)
        ) as pool:
            try:
                with interrupts_blocked_in_children():  # spawn (submit starts the processes) with SIGINT blocked
                    futures = {pool.submit(_run_in_worker, job, settings): job for job in todo}
                _wait_reporting(set(futures), rounds, progress)
                return {job: future.result() for future, job in futures.items()}
            except BrokenProcessPool as error:  # a worker died without answering: say the likely cause
                stop_processes(pool)
                raise FederationLost(_WORKER_DIED.format(jobs=min(jobs, len(todo)))) from error
            except BaseException:  # Ctrl-C, or a run that raised: stop the others now, not after they finish
                stop_processes(pool)
                raise


@contextmanager
def interrupts_blocked_in_children() -> Iterator[None]:
    """Processes started inside the block have SIGINT blocked for good (the signal mask survives fork and exec).
    A Ctrl-C during the block is held until it ends, then acted on as usual: this process's other threads (torch's)
    may still take the signal, so it is recorded rather than raised half-way through starting a process, which
    would leave that process unknown to the pool and never stopped."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # started inside the block it would unblock SIGINT here (it blocks its own)
    caught: list[FrameType | None] = []
    handler = signal.signal(signal.SIGINT, lambda number, frame: caught.append(frame))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)
        if caught and callable(handler):
            handler(signal.SIGINT, caught[0])  # Python's default handler raises KeyboardInterrupt


def stop_processes(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's processes and cancel the runs not started (the checkpoints written stay)."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=10)


def _wait_reporting(pending: set[Future[Outcome]], rounds: queue_module.Queue[tuple[str, int]], progress: Progress | None) -> None:
    """Wait for every run, passing the rounds the processes report to ``progress`` as they come."""
    while pending:
        _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        _drain(rounds, progress)
    _drain(rounds, progress)


def _drain(rounds: queue_module.Queue[tuple[str, int]], progress: Progress | None) -> None:
    while True:
        try:
            name, t = rounds.get_nowait()
        except queue_module.Empty:
            return
        if progress:
            progress(name, t)
