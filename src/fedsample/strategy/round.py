"""A strategy's round, step by step: size reports (if the strategy declares them) -> client selection -> data
plans -> train -> aggregate -> server step (:func:`run_round`). The strategy talks to clients only through
``Federation.run``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypedDict, cast

import numpy as np

from fedsample import parts, validate
from fedsample.federation.base import Federation
from fedsample.messages import HeldRequest, PerClient, PlannedSum, TrainHeld, TrainPayload, with_plan
from fedsample.missing import response_rate
from fedsample.parts import DataPlan, Learns, SizeReporting, TrainsFirst
from fedsample.privacy.noise import for_cohort
from fedsample.privacy.recorder import watch
from fedsample.privacy.size_estimate import scaled_total
from fedsample.privacy.sizes import RandomizedSizes, SizeInfo
from fedsample.rounds import Cohort, Failed, NumberReplies, Replies, ReplyList, RoundContext, replies_of
from fedsample.strategy.composition import Composition
from fedsample.rounds import RoundFailed
from fedsample.runtime.memo import LastOf
from fedsample.sampling.clients import census, is_built_census
from fedsample.strategy.probes import CheckedProbes
from fedsample.strategy.record import cohort_facts, describe_round, note_failures, note_uncorrected_faults, unchanged
from fedsample.training.functional import Params
from fedsample.training.schedule import scheduled_step
from fedsample.training.server import SERVER_KEY, server_state
from fedsample.runtime.records import Record, State, as_int, opened_state

__all__ = [
    "ScreenedSizes", "SizeEstimates", "collect_sizes", "combine_valid", "held_form", "planned_weights", "restrict", "run_round", "select", "size_policy",
    "sizes_of_everyone", "train_then_send",
]


def collect_sizes(s: Composition, ctx: RoundContext, ids: np.ndarray) -> SizeInfo:
    """Size reports of ``ids``: invalid or missing ones are left out (named in ``failed``); a randomized
    total from the a of n asked that answered is scaled by n/a (docs/reliability.md). The same read-only reports of
    the same read-only ids (an engine's permanent answers, the census's ids: :mod:`fedsample.runtime.memo`) are
    screened and summed once, the estimate given again while they come back (the memo is the run's: in its state,
    :data:`SCREENED`, never saved with it)."""
    policy = size_policy(s, ctx)
    replies = ctx.federation.run(ids, policy.query, ctx.round)
    M = policy.threshold if isinstance(policy, RandomizedSizes) else None
    numbers = replies if isinstance(replies, NumberReplies) and not replies.failed else None  # one array, no failure: keyed on it
    whole = numbers is not None
    arrays = (numbers.values, ids) if numbers is not None else ()
    memo = ctx.state.get(SCREENED)  # the last screened reports
    if not isinstance(memo, ScreenedSizes):  # none yet, or an older checkpoint's LastOf (empty once saved): a fresh memo
        memo = ctx.state[SCREENED] = ScreenedSizes()
    failed, info = memo.get(arrays, (M, policy), lambda: screened_estimate(policy, replies, ids, M)) if whole else \
        screened_estimate(policy, replies, ids, M)
    note_failures(ctx, failed)
    if info is None:
        raise RoundFailed("no valid size report arrived")
    return info


SCREENED = "screened_sizes"
"""The key of the run's state under which :func:`collect_sizes` keeps its memo of the last screened size reports
(:class:`ScreenedSizes`, their arrays held while the run's state is)."""


class ScreenedSizes(LastOf[tuple[list[Failed], SizeInfo | None]]):
    """The memo of the last screened size reports: the failed ones and what the server holds of the valid ones
    (:func:`screened_estimate`), given again for the same read-only reports (:class:`~fedsample.runtime.memo.LastOf`;
    a pickle of it is an empty one)."""


class SizeEstimates(TypedDict):
    """What :func:`sizes_of_everyone` keeps between rounds (under ``"size_estimates"``, saved with checkpoints): the
    round the sizes were last asked (None: never), the last unclamped estimates it averages and the estimate held."""

    asked: int | None
    totals: list[float]
    info: SizeInfo | None


def screened_estimate(policy: SizeReporting, replies: ReplyList, ids: np.ndarray, M: int | None) -> tuple[list[Failed], SizeInfo | None]:
    """(the failed size reports, what the server holds of the valid ones: None where none is valid); a randomized
    total from the a of n asked that answered is scaled by n/a."""
    kept, reports, failed = validate.screen_sizes(replies, np.asarray(ids), M)
    if len(kept) == 0:
        return failed, None
    info = policy.summarize(kept, reports)
    if not info.exact and len(kept) < len(ids):
        info = replace(info, total=scaled_total(info.total, len(ids), len(kept)))
    return failed, info


def size_policy(s: Composition, ctx: RoundContext) -> SizeReporting:
    """The size policy with its threshold resolved for this federation (``M="rmse"``: from the number of
    clients and the user's size prior, :func:`fedsample.privacy.size_estimate.rmse_M`)."""
    if s.sizes is None:
        raise ValueError(f"{s.name} collects no sizes (sizes=None)")
    if not (isinstance(s.sizes, RandomizedSizes) and s.sizes.M == "rmse"):
        return s.sizes
    policy = s.sizes.for_population(ctx.num_clients)
    ctx.log["size_M"] = policy.M
    return policy


def sizes_of_everyone(s: Composition, ctx: RoundContext) -> SizeInfo:
    """Every client's size reports (FedSampling). With ``reuse=R`` reports are asked for only every R rounds
    and the estimate is kept in between; with ``average=A`` the estimate is the mean of the last A
    unclamped estimates, then floored at the number of clients (docs/size-estimate.md). The memo lives in the strategy state (saved with checkpoints)."""
    if not isinstance(s.sizes, RandomizedSizes) or (s.sizes.reuse == 1 and s.sizes.average == 1):
        return collect_sizes(s, ctx, census(ctx.num_clients).ids)
    reuse, average = s.sizes.reuse, s.sizes.average
    memo = opened_state(ctx.state, "size_estimates", SizeEstimates, SizeEstimates(asked=None, totals=[], info=None))
    asked, held = memo["asked"], memo["info"]
    if asked is not None and held is not None and ctx.round - asked < reuse:  # asked: the estimate held since
        return held
    info = collect_sizes(s, ctx, census(ctx.num_clients).ids)
    policy = s.sizes.for_population(ctx.num_clients)
    memo["totals"] = (memo["totals"] + [policy.unclamped_total(info, ctx.num_clients)])[-average:]
    total = max(float(np.mean(memo["totals"])), float(ctx.num_clients))  # floored after averaging: unbiased mean
    info = replace(info, total=total)
    memo.update({"asked": ctx.round, "info": info})
    return info


def select(s: Composition, ctx: RoundContext) -> tuple[Cohort, int]:
    """The cohort, and how many chosen clients were left out of it because their size report failed
    (they count as non-responders in the response rate)."""
    if s.sizes is not None and s.sizes.scope == "all":
        ctx.sizes = sizes_of_everyone(s, ctx)
    cohort = s.clients.select(ctx)
    valid = is_built_census(cohort) and cohort.population == ctx.num_clients  # valid as built: no pass over it
    problem = None if valid else parts.cohort_problem(s.clients, cohort, ctx.num_clients)
    if problem is not None:
        raise ValueError(problem)
    if s.sizes is not None and s.sizes.scope == "cohort":
        ctx.sizes = collect_sizes(s, ctx, cohort.ids)
    # left out: a chosen client whose size report failed (its size is needed: asked of the cohort, or exact)
    if s.sizes is not None and ctx.sizes is not None and (s.sizes.scope == "cohort" or ctx.sizes.exact):
        kept = np.isin(cohort.ids, ctx.sizes.ids)
        if not kept.all():
            return restrict(cohort, kept), int(np.count_nonzero(~kept))
    return cohort, 0


def run_round(s: Composition, federation: Federation, params: Params, state: State, round: int, seed: int) -> tuple[Params, Record]:
    """Run round ``round``; returns the new global parameters and the round's log (state is updated).

    Failed and invalid replies are left out and named in the log (``failed``, ``dropped``); when no
    valid update arrives the parameters are returned unchanged and the log says so."""
    federation = watch(federation, s, state, round)  # every release checked against the budget and recorded
    ctx = RoundContext(CheckedProbes(federation), params, round, seed, state)
    try:
        cohort, lost = select(s, ctx)
    except RoundFailed as why:
        return params, unchanged(ctx, str(why))
    plan = s.data.plan(ctx, cohort)
    parts.check_plan(s.data, plan)  # its declaration against its methods, once per plan class, whatever the engine
    # one plan for all, or one per cohort member declared as PerClient (e.g. ISFedAvg's per-agent E_k, B_k)
    statistics = parts.reply_statistics_read(s.clients)  # what the sampler reads of each reply, asked of every client

    def payload_for(p: DataPlan) -> TrainPayload:
        return TrainPayload(params=params, plan=p, solver=s.local, round=round, noise=for_cohort(s.noise, len(cohort)), statistics=statistics)

    payload = PerClient(tuple(map(payload_for, plan))) if isinstance(plan, PerClient) else payload_for(plan)
    trained_rate = 1.0
    if parts.trains_first(s.clients):  # everyone trains and keeps its update; the sampler picks whose it receives
        asked = len(cohort)  # not those left out for a lost size report: w_k = 0, outside the target (the reporters')
        cohort, replies = train_then_send(s, federation, ctx, cohort, payload)
        # the clients that failed to train are not candidates: they are non-responders
        trained_rate, lost = response_rate(asked, as_int(ctx.log["local_trainings"], "local_trainings")), 0
    else:
        weights = planned_weights(s, ctx, cohort, lost)  # the aggregator's declared reduction: an engine may sum as updates come
        planned = payload if weights is None else with_plan(payload, PlannedSum(cohort.ids, np.asarray(weights, dtype=np.float64)))
        replies = replies_of(federation.run(cohort.ids, planned, round))
    if s.secure_sum and not replies.sealed:
        raise ValueError(
            f"{s.name} declares secure_sum but the federation answered readable updates: build it with "
            "fedsample.federation.secure_sum.with_secure_sum(federation) (simulate does)"
        )
    if not replies.sealed:  # sealed updates cannot be read: only their sum is checked (on the clients' side)
        replies = validate.screen_updates(replies, cohort.ids, params)
    facts = cohort_facts(s, ctx, cohort)
    replies, delta = combine_valid(s, replies, cohort, ctx, lost, trained_rate=trained_rate)
    ctx.log.update(describe_round(s, ctx, cohort, replies, facts))
    note_uncorrected_faults(ctx, s.clients)
    if parts.observes_replies(s.clients):  # server-held sampler state learnt from the valid replies (Alg. 2's updates, rpow-d, Oort)
        s.clients.observe(ctx, cohort, replies)
    if delta is None:
        return params, unchanged(ctx, "no valid update arrived")
    params, state[SERVER_KEY] = scheduled_step(s.server, s.schedule, round, params, delta, server_state(state))
    return params, ctx.log


def train_then_send(s: Composition, federation: Federation, ctx: RoundContext, trained: Cohort, payload: TrainPayload | PerClient[TrainPayload]) -> tuple[Cohort, ReplyList]:
    """A :class:`~fedsample.parts.TrainsFirst` sampler's round: every client of ``trained`` trains and keeps its
    update, replying with its norm (:class:`~fedsample.messages.TrainHeld`); the sampler chooses the cohort from the
    norms (``select_trained``); only the cohort sends its kept update (:class:`~fedsample.messages.HeldRequest`). Clients whose training failed
    are named in the round's record and are not candidates. The record states the cost: ``local_trainings``
    (the clients that trained) for ``cohort`` uploads."""
    held = replies_of(federation.run(trained.ids, held_form(payload), ctx.round))
    held = validate.screen_held(held, trained.ids)
    note_failures(ctx, held.failures())
    ctx.log["local_trainings"] = len(trained) - len(held.failures())
    cohort = cast(TrainsFirst, s.clients).select_trained(ctx, trained, held)  # trains_first(s.clients): declared
    request = HeldRequest(ctx.round, validate.shapes_of(ctx.params))
    return cohort, replies_of(federation.run(cohort.ids, request, ctx.round))


def held_form(payload: TrainPayload | PerClient[TrainPayload]) -> TrainHeld | PerClient[TrainHeld]:
    """The training request(s) ``payload`` as :class:`~fedsample.messages.TrainHeld`: train, keep the update, answer its norm."""
    if isinstance(payload, PerClient):
        return PerClient(tuple(map(TrainHeld.of, payload)))
    return TrainHeld.of(payload)


def planned_weights(s: Composition, ctx: RoundContext, cohort: Cohort, lost: int = 0) -> np.ndarray | None:
    """The weights the aggregator will give the cohort's updates if every one arrives and passes the screen (its
    declared ``planned_weights``, at the response rate of a round where the whole cohort answers), sent in the
    train request (:class:`~fedsample.messages.PlannedSum`) so that an in-process engine may add each update into the sum as it arrives instead
    of holding them all (:mod:`fedsample.federation.summed`; any other outcome is still answered exactly). None
    for an aggregator that declares none (FedNova's weights come from the replies), under a secure sum (the
    server never sees the updates), and for a sampler that keeps the clients' updates (``server_learns``
    gradients)."""
    if not parts.plans_weights(s.aggregate) or s.secure_sum or Learns.GRADIENTS in parts.server_learns(s.clients):
        return None
    return s.aggregate.planned_weights(cohort, replace(ctx, response_rate=response_rate(len(cohort) + lost, len(cohort))))


def combine_valid(
    s: Composition, replies: ReplyList, cohort: Cohort, ctx: RoundContext, lost: int = 0, checked: bool = False,
    trained_rate: float = 1.0,
) -> tuple[ReplyList, Params | None]:
    """Aggregate the valid replies at the response rate r = answered/asked, times ``trained_rate`` (a
    :class:`~fedsample.parts.TrainsFirst` round: the share of the asked clients whose training succeeded, who
    alone could be chosen; docs/reliability.md). A non-finite aggregate of replies not checked one by one (a fused sum:
    the vectorized engine's, Ray's) triggers the per-client check and a second aggregation, update by update;
    a non-finite aggregate after that is rejected (None)."""
    ctx.response_rate = trained_rate * response_rate(len(cohort) + lost, len(cohort) - len(replies.failures()))
    delta = s.aggregate.combine(replies, cohort, ctx) if ctx.response_rate > 0 else None
    if delta is not None and not checked and replies.fused and not replies.sealed and not validate.params_finite(delta):
        # per-client updates from here on: the fused sum would carry the rejected clients' NaN (0 * NaN)
        plain = Replies(list(replies), dict(replies.failed))
        replies = validate.screen_updates(plain, cohort.ids, ctx.params, deep=True)
        return combine_valid(s, replies, cohort, ctx, lost, checked=True, trained_rate=trained_rate)
    if delta is not None and not validate.params_finite(delta):
        ctx.log["rejected_aggregate"] = "non-finite aggregate of finite updates"
        return replies, None
    return replies, delta


def restrict(cohort: Cohort, keep: np.ndarray) -> Cohort:
    """The cohort members where ``keep`` is True (inclusion probabilities, multiplicities, strata kept)."""
    strata = None if cohort.strata is None else np.asarray(cohort.strata)[keep]
    expected = None if cohort.expected_draws is None else np.asarray(cohort.expected_draws)[keep]
    return replace(cohort, ids=cohort.ids[keep], inclusion=cohort.inclusion[keep], multiplicity=np.asarray(cohort.multiplicity)[keep], strata=strata,
                   expected_draws=expected)
