"""The round's record: what a round's log says of its failures, cohort, updates, sizes and privacy
(:func:`describe_round`, :func:`cohort_facts`), and the figures of the cohort's inclusion probabilities
(:func:`inclusion_figures`, :func:`cohort_figures`).
"""

from __future__ import annotations

import warnings

import numpy as np

from fedsample import parts
from fedsample.budget import realised_samples
from fedsample.parts import ClientSampler, InclusionKind
from fedsample.privacy import accounting
from fedsample.privacy.recorder import round_figures
from fedsample.rounds import Cohort, Failed, ReplyList, RoundContext
from fedsample.sampling import adaptive
from fedsample.sampling.clients import is_built_census
from fedsample.strategy.composition import Composition
from fedsample.strategy.probes import CheckedProbes
from fedsample.runtime.records import Record, entries_in

__all__ = [
    "census_figures", "cohort_facts", "cohort_figures", "describe_round", "inclusion_figures",
    "is_census", "note_failures", "note_uncorrected_faults", "unchanged",
]


def note_failures(ctx: RoundContext, failed: list[Failed]) -> None:
    """Add ``failed`` to the round's record (``failed``: one entry per failed reply, ``dropped``: their number)."""
    entries = entries_in(ctx.log, "failed")
    entries.extend(f.record() for f in failed)
    ctx.log["dropped"] = len(entries)


def unchanged(ctx: RoundContext, why: str) -> Record:
    """The record of a round that leaves the parameters unchanged, and ``why`` (``params_unchanged``)."""
    ctx.log.setdefault("dropped", len(entries_in(ctx.log, "failed")))
    ctx.log["params_unchanged"] = why
    ctx.log.update(round_figures(ctx.state))
    return ctx.log


def describe_round(s: Composition, ctx: RoundContext, cohort: Cohort, reports: ReplyList, facts: Record | None = None) -> Record:
    """The round's record: failures, the cohort, how many updates arrived and their mean loss (from the
    replies' summed loss and count: all a secure sum reveals), each summed statistic the replies carry under its name
    (a data sampler that observes them, :func:`~fedsample.parts.observes_sums`, learns from them here: a steered
    FedSampling's next N^), the realised and target budgets, then the cohort's facts and the privacy spent
    (:meth:`cohort_facts`, given or computed here)."""
    note_failures(ctx, reports.failures())
    log: Record = {"cohort": len(cohort)}
    loss_sum, updates = reports.summed_loss()
    log["updates"] = updates
    if updates and s.noise is None:  # noised replies withhold their loss (fedsample.privacy.noise)
        log["train_loss"] = loss_sum / updates
    if updates:
        sums = reports.sums()  # each summed statistic the clients report, by name (none where they report none)
        log.update(sums)  # by name (none is a record key: strategy.rules.summed_statistics_are_sealed)
        if sums and parts.observes_sums(s.data):  # e.g. a steered FedSampling's next N^ (sampling.data)
            s.data.observe_sums(ctx.state, sums, ctx.log)
        declared = s.data.capabilities  # a property (built on each read by some samplers): read once
        drawn = declared.drawn_count  # the summed statistic that counts the drawn samples, if one does
        realised = realised_samples(None if drawn is None else sums.get(drawn), reports)
        if realised is not None:  # the realised budget (fedsample.budget): drawn rows, or the rows the steps read
            log["realised_samples"] = realised
        budget = declared.budget
        if budget is not None:  # the budget it is held to (FedSampling's K): a public setting, recorded on sealed rounds too
            log["target_samples"] = budget
    log["answered"] = len(cohort) - len(reports.failures())
    log.update(cohort_facts(s, ctx, cohort) if facts is None else facts)
    return log


def cohort_facts(s: Composition, ctx: RoundContext, cohort: Cohort) -> Record:
    """What the round's record says once the round's calls are made, whatever the replies hold: how many
    clients the round asked anything (``clients_contacted``: size queries, probes, training), the cohort's
    inclusion probabilities (or how they are known), the size estimate, the size reports' privacy spend over the
    run so far and the run's ledger (:func:`~fedsample.privacy.recorder.round_figures`: every call's releases
    are recorded when it returns; aggregating asks nothing). Pure: no random draw, nothing changed."""
    facts: Record = {}
    if isinstance(ctx.federation, CheckedProbes):
        facts["clients_contacted"] = ctx.federation.contacted(cohort.ids)
    facts.update(inclusion_figures(s.clients, cohort))
    if ctx.sizes is not None and not ctx.sizes.exact:
        facts["size_estimate"] = ctx.sizes.total
    facts.update(accounting.run_spend(s.sizes, s.noise, ctx.round + 1))
    facts.update(round_figures(ctx.state))
    return facts


def note_uncorrected_faults(ctx: RoundContext, sampler: ClientSampler) -> None:
    """A round that lost clients (``failed``) under a sampler whose inclusion probabilities are estimated or degenerate
    (the record's ``bias``): no response-rate correction can make that aggregate unbiased, which the record says
    (``faults_uncorrected``, naming the sampler and, where probes were lost, what it did instead) and a warning says
    once per run (:mod:`fedsample.runtime.warned`)."""
    if ctx.log.get("failed") and ctx.log.get("bias"):
        instead = ctx.log.get(adaptive.LOST_PROBES_KEY)  # what the sampler did without its lost probes
        said = (f"{parts.describe(sampler)} lost clients this round and its inclusion probabilities are "
                f"{ctx.log['inclusion']}: no correction makes its aggregate unbiased"
                + (f"; for its lost probes it {instead}" if instead else "") + " (docs/reliability.md)")
        ctx.log["faults_uncorrected"] = said
        warnings.warn(said, RuntimeWarning, stacklevel=4)  # the caller of Strategy.round


def inclusion_figures(sampler: ClientSampler, cohort: Cohort) -> Record:
    """What the round record says of the cohort's inclusion probabilities, by how the sampler knows them
    (:class:`~fedsample.parts.InclusionKind`): exact ones, their figures (:func:`cohort_figures`); estimated ones,
    ``inclusion: "estimated"`` and that the aggregate is biased by design (with the figures of the weights the
    sampler assumes, if its cohorts carry any); degenerate ones, ``inclusion: "degenerate"`` and that no unbiased
    estimator exists (no figure divides by pi = 1). A cohort may state its own round's kind
    (:func:`~fedsample.parts.inclusion_kind`)."""
    kind = parts.inclusion_kind(sampler, cohort)
    if kind is InclusionKind.EXACT:  # named where the sampler is not always exact (FedCor's random warm-up rounds)
        named = parts.inclusion_kind(sampler) is not InclusionKind.EXACT
        return {**({"inclusion": kind.value} if named else {}), **cohort_figures(cohort)}
    figures: Record = {"inclusion": kind.value, "bias": kind.bias}
    if kind is InclusionKind.ESTIMATED and cohort.expected_draws is not None and len(cohort):
        figures["design_weight_total"] = float(np.sum(cohort.design_weights()))  # of the assumed weights
    return figures


def cohort_figures(cohort: Cohort) -> dict[str, float]:
    """The sampler's figures of a round (none for an empty cohort): the min, mean and max inclusion probability
    pi_k of the cohort, and Kish's (1965) effective sample size of its design weights w_k = 1/pi_k, each drawn
    m_k times (the multiplicity): n_eff = (sum_k m_k w_k)^2 / sum_k m_k w_k^2, with the weights' coefficient
    of variation over the n = sum_k m_k draws (population sd / mean), so that n_eff = n / (1 + cv^2); and
    ``design_weight_total``, sum_k d_k of the design weights (:meth:`~fedsample.rounds.Cohort.design_weights`:
    1/pi_k, or m_k / E[m_k] for draws with replacement), an unbiased estimate of the number of clients N, so its
    mean over rounds checks the probabilities (``fedsample.diagnose`` reports it)."""
    if len(cohort) == 0:
        return {}
    if is_census(cohort):
        return census_figures(len(cohort))
    pi = np.asarray(cohort.inclusion, dtype=np.float64)
    m = np.asarray(cohort.multiplicity, dtype=np.float64)
    w = 1.0 / pi
    # sums, not BLAS dot products: the same float on every machine (a threaded dot's partial sums depend on the
    # BLAS thread count), and no BLAS thread pool woken to spin beside the round's training on a small machine
    total, squares, n = float(np.sum(m * w)), float(np.sum(m * (w * w))), float(m.sum())
    mean = total / n
    return {
        "inclusion_min": float(pi.min()), "inclusion_mean": float(pi.mean()), "inclusion_max": float(pi.max()),
        "effective_cohort": total * total / squares,
        "weight_cv": float(np.sqrt(max(squares / n - mean * mean, 0.0))) / mean,
        "design_weight_total": float(np.sum(cohort.design_weights())),
    }


def is_census(cohort: Cohort) -> bool:
    """Every member included with certainty and drawn once (pi_k = 1, m_k = 1: :class:`~fedsample.sampling.clients.AllClients`'s
    cohorts), its design weights 1 / pi_k (no ``expected_draws``): two comparisons over the cohort, none for the
    census :func:`~fedsample.sampling.clients.census` built (read-only)."""
    return is_built_census(cohort) or (cohort.expected_draws is None and bool(np.all(np.asarray(cohort.inclusion) == 1.0))
            and bool(np.all(np.asarray(cohort.multiplicity) == 1)))


def census_figures(n: int) -> dict[str, float]:
    """:func:`cohort_figures` of a census of ``n`` members (:func:`is_census`), from the same formulas: every sum
    over the cohort is n (sums of ones, exact below 2^53), so the figures are the same floats without the ten
    passes over its arrays."""
    total = squares = float(n)
    mean = total / n
    return {
        "inclusion_min": 1.0, "inclusion_mean": mean, "inclusion_max": 1.0,
        "effective_cohort": total * total / squares,
        "weight_cv": float(np.sqrt(max(squares / n - mean * mean, 0.0))) / mean,
        "design_weight_total": float(n),
    }
