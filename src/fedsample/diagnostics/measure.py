"""``diagnose``: bias, variance, data exploitation, cost and privacy of strategies' rounds at a fixed model.

For each strategy: R draws of its round (:func:`~fedsample.diagnostics.estimator.draw_rounds`) through a
:class:`~fedsample.diagnostics.federation.LinearisedFederation`, measured against g*, the full-participation,
full-data, exact-size gradient (1/n) sum_s g_s, in one per-sample gradient basis computed once
(:mod:`fedsample.diagnostics.gradients`).
"""

from __future__ import annotations

import copy
import multiprocessing
import multiprocessing.queues
import time
import warnings
from dataclasses import dataclass, field
from queue import Empty
from typing import Callable, Iterator, Mapping

import numpy as np
import torch

from fedsample import parts
from fedsample.privacy.reports import alpha_for, clip_size, estimator_variance
from fedsample.data.types import FederatedData
from fedsample.diagnostics.estimator import MIN_DRAWS, Draws, draw_rounds, estimator_statistics, full_gradient
from fedsample.diagnostics.exploitation import exploitation_summary
from fedsample.diagnostics.federation import LinearisedFederation
from fedsample.federation.faults import FaultModel
from fedsample.diagnostics.gradients import DEFAULT_MEMORY_BUDGET, DEFAULT_SKETCH_DIM, GradientBasis, gradient_basis
from fedsample.models import initial_parameters
from fedsample.simulation import Diverged, Model, build_module, simulate
from fedsample.privacy.sizes import RandomizedSizes
from fedsample.rounds import RoundContext
from fedsample.diagnostics.document import Cost, DiagnosisDocument, SamplerSummary, SizePrivacy, StrategyResult
from fedsample.runtime.records import JSONObject
from fedsample.strategy import Strategy
from fedsample.training.functional import Params
from fedsample.validate import shapes_of

__all__ = ["Diagnosis", "diagnose", "measure_strategy", "run_check"]


@dataclass
class Diagnosis:
    """Per strategy label: ``results[label]`` (estimator, exploitation, cost, privacy: see :func:`diagnose`)
    and the raw ``draws``; ``basis`` describes the gradient basis, ``g_norm`` is ||g*||; ``run_check[label]``: "ok" or
    why the strategy diverged in its first rounds of a run (:func:`run_check`; empty without ``check_rounds``)."""

    results: dict[str, StrategyResult]
    draws: dict[str, Draws] = field(repr=False)
    basis: JSONObject
    g_norm: float
    rounds: int
    seed: int
    data: FederatedData = field(repr=False)
    run_check: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> DiagnosisDocument:
        return {"rounds": self.rounds, "seed": self.seed, "basis": self.basis, "g_star_norm": self.g_norm,
                "clients": self.data.num_clients, "samples": int(len(self.data.order)), "strategies": self.results}


def _strategies(strategy: Strategy | Mapping[str, Strategy]) -> dict[str, Strategy]:
    if isinstance(strategy, Strategy):
        return {strategy.name: strategy}
    if not isinstance(strategy, Mapping) or not strategy:
        raise TypeError("diagnose: strategy must be a Strategy or a non-empty mapping of labels to Strategy")
    return dict(strategy)


def cost_summary(draws: Draws) -> Cost:
    """Per-round means of samples drawn, clients contacted, updates received, bytes sent up, local trainings (more
    than the updates where the sampler chooses among trained clients) and probes answered."""
    return {"samples": float(draws.samples.mean()), "samples_sd": float(draws.samples.std()),
            "clients_contacted": float(draws.contacted.mean()), "updates": float(draws.updates.mean()),
            "bytes_up": float(draws.bytes_up.mean()), "local_trainings": float(draws.trainings.mean()),
            "probes": float(draws.probes.mean())}


def sampler_summary(strategy: Strategy, draws: Draws, fed: LinearisedFederation, params: Params, seed: int, first_round: int) -> SamplerSummary:
    """What the client sampler declares and what its draws show: how its inclusion probabilities are known
    (``inclusion``, and ``bias`` where the aggregate cannot be unbiased: biased by design, or no unbiased estimator),
    the number of drawn rounds of each kind (``rounds_by_kind``: FedCor's random warm-up rounds are exact), what the
    server learns to run it (``server_learns``), whether every client trains before the choice (``trains_first``),
    its probes per round (``probes``: replies, ``probe_bytes``; already part of the cost's clients contacted and bytes
    up), and ``calibration``: the mean over the draws of sum_{k in S} d_k / N, the cohort's design weights (1/pi_k,
    or m_k / E[m_k]) against the number of clients, which is 1 within its standard error when the declared
    probabilities are the true ones (for an estimated sampler: the weights it assumes). An estimated sampler that offers
    ``estimate_inclusion`` (declared ``estimates_inclusion``) also gets ``replayed``: its inclusion frequencies replayed from (a copy of) the state after
    the last draw, as many replays as draws, at the fixed model (a sampler whose replay needs every client's
    statistics probes them through the diagnosis' federation)."""
    sampler = strategy.clients
    kind = parts.inclusion_kind(sampler)
    kinds = [log.get("inclusion", kind.value) for log in draws.logs]
    out: SamplerSummary = {"inclusion": kind.value, "bias": kind.bias,
                           "rounds_by_kind": {k.value: kinds.count(k.value) for k in parts.InclusionKind if k.value in kinds},
                           "server_learns": [v.value for v in parts.server_learns(sampler)], "trains_first": parts.trains_first(sampler),
                           "probes": float(np.mean([log.get("sampler_probes", 0) for log in draws.logs])),
                           "probe_bytes": float(np.mean([log.get("sampler_probe_bytes", 0) for log in draws.logs]))}
    totals = np.array([log["design_weight_total"] for log in draws.logs if "design_weight_total" in log])
    if len(totals) > 1:
        N = fed.num_clients
        out["calibration"] = {"mean": float(totals.mean() / N), "se": float(totals.std(ddof=1) / np.sqrt(len(totals)) / N),
                              "rounds": int(len(totals))}
    if kind is parts.InclusionKind.ESTIMATED and parts.estimates_inclusion(sampler) and draws.state is not None:
        ctx = RoundContext(fed, params, first_round + len(draws.logs) - 1, seed, copy.deepcopy(draws.state))
        if strategy.sizes is not None and strategy.sizes.scope == "all":
            ctx.sizes = strategy.sizes_of_everyone(ctx)
        frequencies = np.asarray(sampler.estimate_inclusion(ctx, len(draws.logs)), dtype=np.float64)
        out["replayed"] = {"draws": len(draws.logs), "expected_cohort": float(frequencies.sum()),
                           "min": float(frequencies.min()), "max": float(frequencies.max())}
    return out


def privacy_summary(strategy: Strategy, draws: Draws, fed: FederatedData) -> SizePrivacy | None:
    """For randomized size reports: epsilon per round, alpha, the standard error of Ñ (Eq. 2; the clipped
    total is what it estimates) in theory and across the draws."""
    sizes = strategy.sizes
    if not isinstance(sizes, RandomizedSizes):
        return None
    sizes = sizes.for_population(fed.num_clients)  # M="rmse" resolved as the strategy resolves it
    estimates = np.array([log["size_estimate"] for log in draws.logs if "size_estimate" in log])
    theory = np.sqrt(estimator_variance(fed.sizes(), sizes.epsilon, sizes.threshold)) if sizes.scope == "all" else None
    return {
        "epsilon_per_round": sizes.epsilon, "M": sizes.M, "alpha": alpha_for(sizes.epsilon, sizes.threshold),
        "scope": sizes.scope, "total": int(len(fed.order)), "clipped_total": int(clip_size(fed.sizes(), sizes.threshold).sum()),
        "estimate_mean": float(estimates.mean()) if len(estimates) else None,
        "estimate_sd": float(estimates.std()) if len(estimates) > 1 else None, "estimate_se_theory": theory,
    }


def diagnose(
    strategy: Strategy | Mapping[str, Strategy], data: FederatedData, model: Model, params: Params | None = None,
    rounds: int = 1000, seed: int = 0, first_round: int = 0, sketch_dim: int = DEFAULT_SKETCH_DIM,
    memory_budget: int = DEFAULT_MEMORY_BUDGET, progress: Callable[[str, StrategyResult], None] | None = None,
    faults: FaultModel | None = None, jobs: int = 1, advance: Callable[[int], None] | None = None, check_rounds: int = 0,
) -> Diagnosis:
    """Draw ``rounds`` rounds of each strategy's sampling at the fixed model ``params`` (default: the model's
    initial parameters for ``seed``, as ``simulate`` starts) without updating it, and measure each round's
    aggregated update ĝ (divided by the local learning rate: exact for one local step, first order in it for
    more) against g* (every client, every sample, exact sizes). Per strategy: ``estimator`` (bias, variance,
    mean squared error relative to ||g*||^2, see :func:`~fedsample.diagnostics.estimator.estimator_statistics`),
    ``exploitation`` (per-sample inclusion frequency: mean, CV, by client-size decile, by label, label skew),
    ``cost`` (per round: samples drawn, clients contacted, updates, bytes up, local trainings, probes), ``privacy``
    (randomized size reports only), ``sampler`` (how its inclusion probabilities are known, what the server learns,
    its probes, their calibration: :func:`sampler_summary`) and ``seconds``.

    ``jobs`` > 1 measures the strategies in that many worker processes (forked after the gradient basis is
    computed, so they share it); each strategy's draws depend only on ``seed``, so the results are the same for any
    number of workers. The workers' warnings are passed on to this process's ``warnings.showwarning`` (a run's
    :class:`fedsample.runtime.warned.Warned` counts them once per kind). ``check_rounds`` > 0 also runs each strategy's
    first ``check_rounds`` rounds as ``fedsample run`` does (:func:`run_check`, in the strategy's worker:
    ``run_check``). ``progress(label, result)`` is called as each strategy finishes, ``advance(draws)`` as draws are
    made (a progress bar)."""
    if rounds < MIN_DRAWS:
        raise ValueError(f"diagnose: rounds must be >= {MIN_DRAWS}, got {rounds}")
    if jobs < 1:
        raise ValueError(f"diagnose: jobs must be >= 1, got {jobs}")
    if check_rounds < 0:
        raise ValueError(f"diagnose: check_rounds must be >= 0, got {check_rounds}")
    strategies = _strategies(strategy)
    for st in strategies.values():  # K, m within the data: no silent clamp
        st.check_data(1 if st.pooled else data.num_clients, int(data.sizes().sum()))
    module = build_module(model, data)
    params = initial_parameters(module, seed) if params is None else _matching(params, module)
    ds = data.dataset
    basis = gradient_basis(module, ds.task, params, torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train), seed=seed,
                           memory_budget=memory_budget, sketch_dim=sketch_dim)
    target = full_gradient(basis.matrix, data.order)
    work = _Work(strategies, data, model, module, params, basis, target, rounds, seed, first_round, faults, check_rounds)
    measured = _measure_all(work, jobs, advance) if jobs > 1 and len(strategies) > 1 else _measure_each(work, advance)
    results, all_draws, checked = {}, {}, {}
    for label, (result, draws, status) in measured:
        results[label], all_draws[label] = result, draws
        if status is not None:
            checked[label] = status
        if progress:
            progress(label, result)
    return Diagnosis(results, all_draws, basis.describe(), float(np.linalg.norm(target)), rounds, seed, data, checked)


@dataclass(frozen=True)
class _Work:
    """Everything a strategy's measurement reads (a forked worker inherits it)."""

    strategies: dict[str, Strategy]
    data: FederatedData
    model: Model
    module: torch.nn.Module
    params: Params
    basis: GradientBasis
    target: np.ndarray
    rounds: int
    seed: int
    first_round: int
    faults: FaultModel | None
    check_rounds: int = 0


def measure_strategy(work: _Work, label: str, advance: Callable[[], None] | None = None) -> tuple[StrategyResult, Draws, str | None]:
    """One strategy's draws and what they show (the per-strategy entry of :func:`diagnose`), and its run check
    (:func:`run_check`; None without ``check_rounds``). Its warnings start afresh (``warnings.catch_warnings``
    resets the registry of warnings already shown at a place), so how many reach ``warnings.showwarning`` does not
    depend on which strategies the same process measured before."""
    start, st, data = time.perf_counter(), work.strategies[label], work.data
    fed = LinearisedFederation(data.pooled() if st.pooled else data, work.module, work.seed, work.basis)
    with warnings.catch_warnings():
        draws = draw_rounds(st, fed, work.params, work.rounds, work.seed, work.first_round, work.faults, advance)
    result: StrategyResult = {
        "estimator": estimator_statistics(draws.estimates, work.target),
        "exploitation": exploitation_summary(draws.inclusion, work.rounds, data),
        "cost": cost_summary(draws), "privacy": privacy_summary(st, draws, data),
        "sampler": sampler_summary(st, draws, fed, work.params, work.seed, work.first_round),
        "seconds": time.perf_counter() - start,
    }
    if not work.check_rounds:
        return result, draws, None
    with warnings.catch_warnings():
        status = run_check(st, data, work.model, work.check_rounds, work.seed, work.faults)
    return result, draws, status


def run_check(strategy: Strategy, data: FederatedData, model: Model, rounds: int, seed: int, faults: FaultModel | None) -> str:
    """The strategy's first ``rounds`` rounds run as ``fedsample run`` runs them (its failure model, the automatic
    backend): "ok", or why it diverged."""
    try:
        simulate(strategy, federated_data=data, model=model, rounds=rounds, seed=seed, eval_every=rounds, faults=faults)
    except Diverged as error:
        return str(error)
    return "ok"


def _measure_each(work: _Work, advance: Callable[[int], None] | None) -> Iterator[tuple[str, tuple[StrategyResult, Draws, str | None]]]:
    one = None if advance is None else (lambda: advance(1))
    for label in work.strategies:
        yield label, measure_strategy(work, label, one)


Raised = tuple[type[Warning], str, str, int]  #: a warning a worker raised: category, message, file, line
_FORKED: list[tuple[_Work, multiprocessing.queues.Queue[int]]] = []  # the work and the progress queue a forked worker inherits (one pair)
PROGRESS_EVERY = 10  #: draws a worker makes between two progress messages


def _in_worker(label: str) -> tuple[str, StrategyResult, Draws, str | None, list[Raised]]:
    """Measure ``label`` in a forked worker: its result, draws, run check and the warnings it raised (category,
    message, filename, line), which the filters in force let through."""
    work, queue = _FORKED[0]
    made = 0

    def advance() -> None:
        nonlocal made
        made += 1
        if made == PROGRESS_EVERY:
            queue.put(made)
            made = 0

    raised: list[Raised] = []
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: raised.append(
            (category, str(message), filename, lineno))
        result, draws, status = measure_strategy(work, label, advance)
    queue.put(made)
    return label, result, draws, status, raised


def _measure_all(work: _Work, jobs: int, advance: Callable[[int], None] | None) -> Iterator[tuple[str, tuple[StrategyResult, Draws, str | None]]]:
    """The strategies measured in ``jobs`` forked workers, yielded in their order (each as soon as it and those
    before it are done, so the output and the warnings' order do not depend on the number of workers); their draws'
    progress goes to ``advance`` and their warnings to ``warnings.showwarning``."""
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.queues.Queue[int] = context.Queue()
    _FORKED.append((work, queue))
    try:
        with context.Pool(min(jobs, len(work.strategies))) as pool:
            pending = [pool.apply_async(_in_worker, (label,)) for label in work.strategies]
            while pending:
                _drain(queue, advance, wait=0.2)
                while pending and pending[0].ready():
                    label, result, draws, status, raised = pending.pop(0).get()
                    for category, message, filename, lineno in raised:
                        warnings.showwarning(category(message), category, filename, lineno)
                    yield label, (result, draws, status)
            _drain(queue, advance, wait=0.0)
    finally:
        _FORKED.clear()


def _drain(queue: multiprocessing.queues.Queue[int], advance: Callable[[int], None] | None, wait: float) -> None:
    """Pass the workers' progress messages on to ``advance``, waiting up to ``wait`` seconds for the first."""
    try:
        made = queue.get(timeout=wait) if wait > 0 else queue.get_nowait()
        while True:
            if advance is not None:
                advance(made)
            made = queue.get_nowait()
    except Empty:
        return


def _matching(params: Params, module: torch.nn.Module) -> Params:
    """``params`` when they are the model's (same names and shapes), else one ValueError line saying which differ
    (a checkpoint of another model or data set)."""
    expected = dict(shapes_of(dict(module.named_parameters())))
    given = dict(shapes_of(params))
    differ = [name for name in dict.fromkeys([*expected, *given]) if expected.get(name) != given.get(name)]
    if differ:
        name = differ[0]
        raise ValueError(f"the parameters are not this model's: {name} is {given.get(name, 'missing')} in them, "
                         f"{expected.get(name, 'absent')} in the model ({len(differ)} of {len(expected)} differ); "
                         "was the checkpoint written by another experiment?")
    return params
