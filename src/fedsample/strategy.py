"""The server's side of a round, composed of parts (three layers, one door: docs/architecture.md).

A round: size reports (if the strategy declares them) -> client selection -> data plans -> train ->
aggregate -> server step. The strategy talks to clients only through ``Federation.run``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from fedsample import checks, parts, validate
from fedsample.budget import realised_samples

from fedsample.parts import (
    Aggregator, ClientSampler, DataSampler, InclusionKind, Learns, Limit, LocalSolver, ServerOptimizer,
    SizeNeed, SizeReporting, TrainsFirst, UpdatePrivacy,
)
from fedsample.privacy import accounting
from fedsample.privacy.noise import for_cohort
from fedsample.privacy.recorder import round_figures, watch
from fedsample.messages import HeldRequest, PerClient, ProbeRequest, TrainPayload
from fedsample.federation.base import Federation
from fedsample.federation.faults import lost_to_faults
from fedsample.missing import response_rate
from fedsample.rounds import Cohort, Failed, Replies, ReplyList, RoundContext, RoundFailed, planned_sum, replies_of
from fedsample.sampling import adaptive
from fedsample.sampling.clients import AllClients
from fedsample.sampling.data import FullData
from fedsample.privacy.size_estimate import scaled_total
from fedsample.privacy.sizes import RandomizedSizes, SizeInfo
from fedsample.training.aggregate import WeightedMean
from fedsample.training.functional import Params
from fedsample.training.local import LocalSGD
from fedsample.training.schedule import Schedule, scheduled_step
from fedsample.training.server import ServerSGD

__all__ = ["RULES", "Strategy", "RoundContext", "Cohort", "RoundFailed"]


@dataclass(frozen=True)
class Strategy:
    """A federated strategy as a composition of parts.

    ``clients`` picks the cohort, ``data`` plans each client's local sample, ``local`` is the local
    solver, ``aggregate`` combines updates, ``server`` applies the result, ``sizes`` declares how the
    server learns data sizes (None: never). ``pooled`` trains on all data held by one client
    (centralized training). ``noise`` (a :class:`fedsample.privacy.noise.UpdateNoise`) makes every client clip its
    update and add Gaussian noise (client-level DP); :class:`~fedsample.privacy.noise.PerExampleNoise` clips
    each example of FedSampling's G_c and adds the client's share of noise on the cohort's sum. ``secure_sum`` declares that the training replies must be
    sealed: the layer that builds the federation wraps it in :class:`~fedsample.federation.secure_sum.SecureSum`
    (``simulate`` does; by hand: :func:`~fedsample.federation.secure_sum.with_secure_sum`), the aggregator gets
    only the weighted sum of the updates (linear aggregators), and a round whose federation answers readable
    updates is refused. ``schedule`` (:class:`~fedsample.training.schedule.Schedule`) scales the server
    optimizer's learning rate by a factor per round. Each round's log states what a client has spent so far
    (:func:`fedsample.privacy.accounting.run_spend`) and the run's privacy ledger (``privacy_*`` keys,
    :mod:`fedsample.privacy.ledger`).
    """

    clients: ClientSampler = field(default_factory=AllClients)
    data: DataSampler = field(default_factory=FullData)
    local: LocalSolver = field(default_factory=LocalSGD)
    aggregate: Aggregator = field(default_factory=lambda: WeightedMean("uniform"))
    server: ServerOptimizer = field(default_factory=ServerSGD)
    sizes: SizeReporting | None = None
    name: str = "strategy"
    pooled: bool = False
    noise: UpdatePrivacy | None = None
    secure_sum: bool = False
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Every compatibility rule between the parts (:data:`RULES`), at construction: the first one broken
        raises one ``ValueError`` naming the two parts that disagree."""
        for rule in RULES:
            problem = rule(self)
            if problem is not None:
                raise ValueError(problem)

    def limits(self) -> tuple[Limit, ...]:
        """The counts the parts ask of the data (their declared ``limits``, :class:`~fedsample.parts.Limit`), and, for
        a pooled strategy (centralized training), its minibatch: drawn from the pooled data, it cannot be larger."""
        asked = [*self.clients.capabilities.limits, *self.data.capabilities.limits]
        solver = parts.solver_capabilities(self.local)
        batch, steps = solver.minibatch, solver.steps
        if self.pooled and batch is not None:
            asked.append(Limit("samples_per_round (K)" if steps in (None, 1) else "samples_per_round / steps (the minibatch)", batch, "samples"))
        return tuple(asked)

    def check_data(self, num_clients: int, total: int) -> None:
        """Every count the strategy asks of the data (:meth:`limits`) within data of ``num_clients`` clients holding
        ``total`` training samples; the first above is one :class:`~fedsample.checks.ParameterError` line naming the
        parameter (no part caps it silently each round). ``simulate`` and ``diagnose`` call it before the first
        round; an experiment's strategies are checked against every seed's partition before anything is written."""
        for limit in self.limits():
            if limit.unit == "samples" and limit.value > total:
                checks.fail(limit.name, limit.value, f"at most the data's {total} training samples", self.name)
            if limit.unit == "clients" and limit.value > num_clients:
                checks.fail(limit.name, limit.value, f"at most the number of clients, {num_clients}", self.name)

    # --- the round --------------------------------------------------------------------------------

    def init_state(self, params: Params) -> dict:
        return {"server": self.server.init_state(params)}

    def collect_sizes(self, ctx: RoundContext, ids: np.ndarray) -> SizeInfo:
        """Size reports of ``ids``: invalid or missing ones are left out (named in ``failed``); a randomized
        total from the a of n asked that answered is scaled by n/a (docs/reliability.md)."""
        policy = self.size_policy(ctx)
        replies = ctx.federation.run("report_size", ids, policy.query, ctx.round)
        M = policy.threshold if isinstance(policy, RandomizedSizes) else None
        kept, reports, failed = validate.screen_sizes(replies, np.asarray(ids), M)
        _note_failures(ctx, failed)
        if len(kept) == 0:
            raise RoundFailed("no valid size report arrived")
        info = policy.summarize(kept, reports)
        if not info.exact and len(kept) < len(ids):
            info = replace(info, total=scaled_total(info.total, len(ids), len(kept)))
        return info

    def size_policy(self, ctx: RoundContext) -> SizeReporting:
        """The size policy with its threshold resolved for this federation (``M="rmse"``: from the number of
        clients and the user's size prior, :func:`fedsample.privacy.size_estimate.rmse_M`)."""
        if self.sizes is None:
            raise ValueError(f"{self.name} collects no sizes (sizes=None)")
        if not (isinstance(self.sizes, RandomizedSizes) and self.sizes.M == "rmse"):
            return self.sizes
        policy = self.sizes.for_population(ctx.num_clients)
        ctx.log["size_M"] = policy.M
        return policy

    def sizes_of_everyone(self, ctx: RoundContext) -> SizeInfo:
        """Every client's size reports (FedSampling). With ``reuse=R`` reports are asked for only every R rounds
        and the estimate is kept in between; with ``average=A`` the estimate is the mean of the last A
        unclamped estimates, then floored at the number of clients (docs/size-estimate.md). The memo lives in the strategy state (saved with checkpoints)."""
        if not isinstance(self.sizes, RandomizedSizes) or (self.sizes.reuse == 1 and self.sizes.average == 1):
            return self.collect_sizes(ctx, np.arange(ctx.num_clients))
        reuse, average = self.sizes.reuse, self.sizes.average
        memo = ctx.state.setdefault("size_estimates", {"asked": None, "totals": [], "info": None})
        if memo["asked"] is not None and ctx.round - memo["asked"] < reuse:
            return memo["info"]
        info = self.collect_sizes(ctx, np.arange(ctx.num_clients))
        policy = self.sizes.for_population(ctx.num_clients)
        memo["totals"] = (memo["totals"] + [policy.unclamped_total(info, ctx.num_clients)])[-average:]
        total = max(float(np.mean(memo["totals"])), float(ctx.num_clients))  # floored after averaging: unbiased mean
        memo.update(asked=ctx.round, info=replace(info, total=total))
        return memo["info"]

    def select(self, ctx: RoundContext) -> tuple[Cohort, int]:
        """The cohort, and how many chosen clients were left out of it because their size report failed
        (they count as non-responders in the response rate)."""
        if self.sizes is not None and self.sizes.scope == "all":
            ctx.sizes = self.sizes_of_everyone(ctx)
        cohort = self.clients.select(ctx)
        problem = parts.cohort_problem(self.clients, cohort, ctx.num_clients)
        if problem is not None:
            raise ValueError(problem)
        if self.sizes is not None and self.sizes.scope == "cohort":
            ctx.sizes = self.collect_sizes(ctx, cohort.ids)
        # left out: a chosen client whose size report failed (its size is needed: asked of the cohort, or exact)
        if self.sizes is not None and ctx.sizes is not None and (self.sizes.scope == "cohort" or ctx.sizes.exact):
            kept = np.isin(cohort.ids, ctx.sizes.ids)
            if not kept.all():
                return restrict(cohort, kept), int(np.count_nonzero(~kept))
        return cohort, 0

    def round(self, federation: Federation, params: Params, state: dict, round: int, seed: int) -> tuple[Params, dict]:
        """Run round ``round``; returns the new global parameters and the round's log (state is updated).

        Failed and invalid replies are left out and named in the log (``failed``, ``dropped``); when no
        valid update arrives the parameters are returned unchanged and the log says so."""
        federation = watch(federation, self, state, round)  # every release checked against the budget and recorded
        ctx = RoundContext(_CheckedProbes(federation), params, round, seed, state)
        try:
            cohort, lost = self.select(ctx)
        except RoundFailed as why:
            return params, self.unchanged(ctx, str(why))
        plan = self.data.plan(ctx, cohort)
        # one plan for all, or one per cohort member declared as PerClient (e.g. ISFedAvg's per-agent E_k, B_k)
        utility = "utility" in self.clients.capabilities.reads_replies  # Oort asks each client for its statistical utility
        payload_for = lambda p: TrainPayload(params=params, plan=p, solver=self.local, round=round, noise=for_cohort(self.noise, len(cohort)),  # noqa: E731
                                             utility=utility)
        payload = PerClient(tuple(map(payload_for, plan))) if isinstance(plan, PerClient) else payload_for(plan)
        trained_rate = 1.0
        if parts.trains_first(self.clients):  # everyone trains and keeps its update; the sampler picks whose it receives
            asked = len(cohort)  # not those left out for a lost size report: w_k = 0, outside the target (the reporters')
            cohort, replies = self.train_then_send(federation, ctx, cohort, payload)
            # the clients that failed to train are not candidates: they are non-responders
            trained_rate, lost = response_rate(asked, ctx.log["local_trainings"]), 0
        else:
            with planned_sum(cohort.ids, self.planned_weights(ctx, cohort, lost)):  # an engine may sum the updates as they come
                replies = replies_of(federation.run("train", cohort.ids, payload, round))
        if self.secure_sum and not replies.sealed:
            raise ValueError(
                f"{self.name} declares secure_sum but the federation answered readable updates: build it with "
                "fedsample.federation.secure_sum.with_secure_sum(federation) (simulate does)"
            )
        if not replies.sealed:  # sealed updates cannot be read: only their sum is checked (on the clients' side)
            replies = validate.screen_updates(replies, cohort.ids, params)
        facts = self.cohort_facts(ctx, cohort)
        replies, delta = self.combine_valid(replies, cohort, ctx, lost, trained_rate=trained_rate)
        ctx.log.update(self.describe_round(ctx, cohort, replies, facts))
        note_uncorrected_faults(ctx, self.clients)
        if parts.observes_replies(self.clients):  # server-held sampler state learnt from the valid replies (Alg. 2's updates, rpow-d, Oort)
            self.clients.observe(ctx, cohort, replies)
        if delta is None:
            return params, self.unchanged(ctx, "no valid update arrived")
        params, state["server"] = scheduled_step(self.server, self.schedule, round, params, delta, state["server"])
        return params, ctx.log

    def train_then_send(self, federation: Federation, ctx: RoundContext, trained: Cohort, payload: Any) -> tuple[Cohort, ReplyList]:
        """A :class:`~fedsample.parts.TrainsFirst` sampler's round: every client of ``trained`` trains and keeps its
        update, replying with its norm (``train_held``); the sampler chooses the cohort from the norms
        (``select_trained``); only the cohort sends its kept update (``send_held``). Clients whose training failed
        are named in the round's record and are not candidates. The record states the cost: ``local_trainings``
        (the clients that trained) for ``cohort`` uploads."""
        held = replies_of(federation.run("train_held", trained.ids, payload, ctx.round))
        held = validate.screen_held(held, trained.ids)
        _note_failures(ctx, held.failures())
        ctx.log["local_trainings"] = len(trained) - len(held.failures())
        cohort = cast(TrainsFirst, self.clients).select_trained(ctx, trained, held)  # trains_first(self.clients): declared
        request = HeldRequest(ctx.round, validate.shapes_of(ctx.params))
        return cohort, replies_of(federation.run("send_held", cohort.ids, request, ctx.round))

    def planned_weights(self, ctx: RoundContext, cohort: Cohort, lost: int = 0) -> np.ndarray | None:
        """The weights the aggregator will give the cohort's updates if every one arrives and passes the screen (its
        declared ``planned_weights``, at the response rate of a round where the whole cohort answers), declared
        with the ``train`` call so that an in-process engine may add each update into the sum as it arrives instead
        of holding them all (:mod:`fedsample.federation.summed`; any other outcome is still answered exactly). None
        for an aggregator that declares none (FedNova's weights come from the replies), under a secure sum (the
        server never sees the updates), and for a sampler that keeps the clients' updates (``server_learns``
        gradients)."""
        if not parts.plans_weights(self.aggregate) or self.secure_sum or Learns.GRADIENTS in parts.server_learns(self.clients):
            return None
        return self.aggregate.planned_weights(cohort, replace(ctx, response_rate=response_rate(len(cohort) + lost, len(cohort))))

    def combine_valid(
        self, replies: ReplyList, cohort: Cohort, ctx: RoundContext, lost: int = 0, checked: bool = False,
        trained_rate: float = 1.0,
    ) -> tuple[ReplyList, Params | None]:
        """Aggregate the valid replies at the response rate r = answered/asked, times ``trained_rate`` (a
        :class:`~fedsample.parts.TrainsFirst` round: the share of the asked clients whose training succeeded, who
        alone could be chosen; docs/reliability.md). A non-finite aggregate of replies not checked one by one (a fused sum:
        the vectorized engine's, Ray's) triggers the per-client check and a second aggregation, update by update;
        a non-finite aggregate after that is rejected (None)."""
        ctx.response_rate = trained_rate * response_rate(len(cohort) + lost, len(cohort) - len(replies.failures()))
        delta = self.aggregate.combine(replies, cohort, ctx) if ctx.response_rate > 0 else None
        if delta is not None and not checked and replies.fused and not replies.sealed and not validate.params_finite(delta):
            # per-client updates from here on: the fused sum would carry the rejected clients' NaN (0 * NaN)
            plain = Replies(list(replies), dict(replies.failed))
            replies = validate.screen_updates(plain, cohort.ids, ctx.params, deep=True)
            return self.combine_valid(replies, cohort, ctx, lost, checked=True, trained_rate=trained_rate)
        if delta is not None and not validate.params_finite(delta):
            ctx.log["rejected_aggregate"] = "non-finite aggregate of finite updates"
            return replies, None
        return replies, delta

    def unchanged(self, ctx: RoundContext, why: str) -> dict:
        ctx.log.setdefault("failed", [])
        ctx.log.setdefault("dropped", len(ctx.log["failed"]))
        ctx.log["params_unchanged"] = why
        ctx.log.update(round_figures(ctx.state))
        return ctx.log

    def describe_round(self, ctx: RoundContext, cohort: Cohort, reports: ReplyList, facts: dict | None = None) -> dict:
        """The round's record: failures, the cohort, how many updates arrived and their mean loss (from the
        replies' summed loss and count: all a secure sum reveals), then the cohort's facts and the privacy spent
        (:meth:`cohort_facts`, given or computed here)."""
        _note_failures(ctx, reports.failures())
        log: dict[str, Any] = {"cohort": len(cohort)}
        loss_sum, log["updates"] = reports.summed_loss()
        if log["updates"] and self.noise is None:  # noised replies withhold their loss (fedsample.privacy.noise)
            log["train_loss"] = loss_sum / log["updates"]
        if log["updates"]:
            drawn = drawn_or_none(reports)
            if drawn is not None:  # known only where the clients report their counts
                log["samples"] = drawn
                if parts.observes_drawn(self.data) and "ratio" in ctx.log:  # a steered FedSampling's next N^ (sampling.data)
                    self.data.observe_drawn(ctx.state, drawn, ctx.log["ratio"])
            realised = realised_samples(drawn, reports, parts.solver_capabilities(self.local).minibatch)
            if realised is not None:  # the realised budget (fedsample.budget): drawn rows, or local steps x batch
                log["realised_samples"] = realised
                budget = self.data.capabilities.budget
                if budget is not None:  # the budget it is held to (FedSampling's K)
                    log["target_samples"] = budget
        log["answered"] = len(cohort) - len(reports.failures())
        log.update(self.cohort_facts(ctx, cohort) if facts is None else facts)
        return log

    def cohort_facts(self, ctx: RoundContext, cohort: Cohort) -> dict:
        """What the round's record says once the round's calls are made, whatever the replies hold: how many
        clients the round asked anything (``clients_contacted``: size queries, probes, training), the cohort's
        inclusion probabilities (or how they are known), the size estimate, the size reports' privacy spend over the
        run so far and the run's ledger (:func:`~fedsample.privacy.recorder.round_figures`: every call's releases
        are recorded when it returns; aggregating asks nothing). Pure: no random draw, nothing changed."""
        facts: dict[str, Any] = {}
        if isinstance(ctx.federation, _CheckedProbes):
            facts["clients_contacted"] = ctx.federation.contacted(cohort.ids)
        facts.update(inclusion_figures(self.clients, cohort))
        if ctx.sizes is not None and not ctx.sizes.exact:
            facts["size_estimate"] = ctx.sizes.total
        facts.update(accounting.run_spend(self.sizes, self.noise, ctx.round + 1))
        facts.update(round_figures(ctx.state))
        return facts


def note_uncorrected_faults(ctx: RoundContext, sampler: ClientSampler) -> None:
    """A round that lost clients (``failed``) under a sampler whose inclusion probabilities are estimated or degenerate
    (the record's ``bias``): no response-rate correction can make that aggregate unbiased, which the record says
    (``faults_uncorrected``, naming the sampler and, where probes were lost, what it did instead) and a warning says once
    per run (:mod:`fedsample.warned`)."""
    if ctx.log.get("failed") and ctx.log.get("bias"):
        instead = ctx.log.get(adaptive.LOST_PROBES_KEY)  # what the sampler did without its lost probes
        said = (f"{parts.describe(sampler)} lost clients this round and its inclusion probabilities are "
                f"{ctx.log['inclusion']}: no correction makes its aggregate unbiased"
                + (f"; for its lost probes it {instead}" if instead else "") + " (docs/reliability.md)")
        ctx.log["faults_uncorrected"] = said
        warnings.warn(said, RuntimeWarning, stacklevel=3)


def drawn_or_none(reports: ReplyList) -> int | None:
    """The cohort's drawn-sample total where the clients report their counts (the self-normalized FedSampling
    plan asks for them; a secure sum reveals only the total), else None."""
    try:
        return reports.drawn_total()
    except ValueError:
        return None


def inclusion_figures(sampler: ClientSampler, cohort: Cohort) -> dict[str, Any]:
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
    figures: dict[str, Any] = {"inclusion": kind.value, "bias": kind.bias}
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
    cohorts), its design weights 1 / pi_k (no ``expected_draws``): two comparisons over the cohort."""
    return (cohort.expected_draws is None and bool(np.all(np.asarray(cohort.inclusion) == 1.0))
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


# --- the compatibility rules (Strategy.check) -------------------------------------------------------------------

_KINDS = {
    "clients": "client sampler", "data": "data sampler", "local": "local solver", "aggregate": "aggregator",
    "server": "server optimizer", "sizes": "size reporting", "noise": "update privacy (clipping and noise)",
}


def parts_implement_their_kind(s: Strategy) -> str | None:
    """Each part has the methods its field requires (:data:`fedsample.parts.REQUIRED`) and declares its capabilities
    in the record of its kind (:func:`fedsample.parts.capabilities_problem`: none, the old separate attributes, a
    record of another kind or one that cannot be built is refused naming the part)."""
    given = {"clients": s.clients, "data": s.data, "local": s.local, "aggregate": s.aggregate, "server": s.server,
             "sizes": s.sizes, "noise": s.noise}
    for name, kind in _KINDS.items():
        part = given[name]
        if part is None and name in ("sizes", "noise"):
            continue
        missing = [m for m in parts.missing_methods(part, name) if m != "capabilities"]  # capabilities: said below
        if missing:
            return f"{name}={parts.describe(part)} is not a {kind}: it has no {missing[0]}() method"
        problem = parts.capabilities_problem(part, name)
        if problem is not None:
            return f"{name}={problem}"
    return None


def sizes_meet_every_need(s: Strategy) -> str | None:
    """The size reporting gives each part the sizes it declares it needs (``needs_sizes``, a :class:`SizeNeed`)."""
    for part, need in ((s.clients, s.clients.capabilities.needs_sizes), (s.data, s.data.capabilities.needs_sizes),
                       (s.aggregate, s.aggregate.capabilities.needs_sizes)):
        if not need.met_by(s.sizes):
            return f"{parts.describe(part)} needs {need.wording}, but {_what_sizes_give(s.sizes, need)}: {need.remedy}"
    return None


def _what_sizes_give(sizes: SizeReporting | None, need: SizeNeed) -> str:
    if sizes is None:
        return "the strategy collects none (sizes=None)"
    if not sizes.exact:
        return f"{parts.describe(sizes)} reports randomized sizes"
    return f"{parts.describe(sizes)} asks only the cohort, after selection"


def shared_settings_agree(s: Strategy) -> str | None:
    """Parts that carry the same setting give it the same value (``shared_settings``: e.g. FedSampling's K in the
    data sampler, the solver and the aggregator; ISFedAvg's scaling in its data sampler and aggregator)."""
    first: dict[str, tuple[Any, Any]] = {}
    declared = ((s.clients, s.clients.capabilities), (s.data, s.data.capabilities), (s.local, parts.solver_capabilities(s.local)),
                (s.aggregate, s.aggregate.capabilities))
    for part, capabilities in declared:
        for name, value in capabilities.shared_settings.items():
            if name in first and first[name][1] != value:
                other = first[name][0]
                return (f"{parts.describe(other)} and {parts.describe(part)} disagree on {name} ({first[name][1]!r} vs "
                        f"{value!r}): parts that carry the same setting must agree")
            first.setdefault(name, (part, value))
    return None


def secure_sum_needs_a_linear_aggregator(s: Strategy) -> str | None:
    """A secure sum reveals one weighted sum of the updates: the aggregator's weights must be known before them."""
    if s.secure_sum and s.aggregate.capabilities.linear is False:
        return (f"secure_sum=True reveals only a weighted sum of the updates, but {parts.describe(s.aggregate)} is not "
                "linear with weights known before the updates: use Sum, WeightedMean or StratifiedMean, or secure_sum=False")
    return None


def drawn_count_is_sent(s: Strategy) -> str | None:
    """An aggregator that divides by the cohort's drawn count gets it from a data sampler that asks for it."""
    if s.aggregate.capabilities.needs_drawn_count and not s.data.capabilities.count_drawn:
        return (f"{parts.describe(s.aggregate)} needs the samples the cohort drew, but {parts.describe(s.data)} does not "
                "ask the clients to send their counts (count_drawn=True)")
    return None


def drawn_counts_are_sealed(s: Strategy) -> str | None:
    """Each client's drawn count reveals its size: it may reach the server only inside a secure sum."""
    if s.data.capabilities.count_drawn and not s.secure_sum:
        return (f"{parts.describe(s.data)} has every client send how many samples it drew, which reveals its size "
                "unless the server sees only their sum: pass secure_sum=True")
    return None


def strata_come_from_the_sampler(s: Strategy) -> str | None:
    """An aggregator that weighs by strata gets a client sampler whose cohorts carry them."""
    if s.aggregate.capabilities.needs_strata and not s.clients.capabilities.stratified:
        return (f"{parts.describe(s.aggregate)} weighs by strata (N_h / m_h), but the cohorts of "
                f"{parts.describe(s.clients)} carry none: use StratifiedClients(...) or another aggregation")
    return None


def inclusion_weights_need_known_probabilities(s: Strategy) -> str | None:
    """A part that divides by inclusion probabilities or expected draws (``weighs_by_inclusion``: an aggregator's
    Horvitz-Thompson weights, ISFedAvg's agent factor in the data plans) needs a sampler whose cohorts carry them
    (:class:`~fedsample.parts.InclusionKind`): exact, or estimated with the weights its method assumes
    (``assumed_weights``, biased as the round record says); never a deterministic one, where pi = 1 would be
    divided by and no unbiased estimator exists."""
    kind = parts.inclusion_kind(s.clients)
    if kind is InclusionKind.EXACT:
        return None
    divides = ((s.data, s.data.capabilities.weighs_by_inclusion, "use another data sampler"),
               (s.aggregate, s.aggregate.capabilities.weighs_by_inclusion, "weigh by size or uniformly instead"))
    for part, weighs, instead in divides:
        if not weighs:
            continue
        if kind is InclusionKind.DEGENERATE:
            return (f"{parts.describe(part)} divides by the inclusion probabilities, but {parts.describe(s.clients)} selects "
                    f"deterministically (degenerate, pi in {{0, 1}}): no unbiased estimator exists; {instead}")
        if not s.clients.capabilities.assumed_weights:
            return (f"{parts.describe(part)} divides by the inclusion probabilities, but those of {parts.describe(s.clients)} "
                    f"have no closed form (estimated, biased by design): {instead}")
    return None


def sampler_replies_are_readable(s: Strategy) -> str | None:
    """A sampler that learns from each client's training reply (``reads_replies``: the fields it reads) needs replies
    the server can read: not sealed by a secure sum; and, where it reads more than the update (the loss, Oort's
    statistical utility), not noised (noised replies withhold them)."""
    fields = parts.replies_read(s.clients)
    if not fields:
        return None
    if s.secure_sum:
        return (f"{parts.describe(s.clients)} reads each client's training {fields[0]} (its server-held state), which "
                "secure_sum=True hides from the server (only the sum is revealed): pass secure_sum=False")
    withheld = [f for f in fields if f != "update"]
    if s.noise is not None and withheld:
        return (f"{parts.describe(s.clients)} reads each client's training {withheld[0]}, which {parts.describe(s.noise)} "
                "withholds from its noised replies: drop the noise or choose another sampler")
    return None


def schedule_has_a_learning_rate(s: Strategy) -> str | None:
    """A learning-rate schedule scales the server optimizer's ``lr``."""
    if s.schedule is not None and not hasattr(s.server, "lr"):
        return f"{parts.describe(s.schedule)} scales the server's learning rate, but {parts.describe(s.server)} has no lr"
    return None


RULES = (
    parts_implement_their_kind, sizes_meet_every_need, shared_settings_agree, secure_sum_needs_a_linear_aggregator,
    drawn_count_is_sent, drawn_counts_are_sealed, strata_come_from_the_sampler, inclusion_weights_need_known_probabilities,
    sampler_replies_are_readable, schedule_has_a_learning_rate,
)
"""What :meth:`Strategy.check` enforces, in order."""


def restrict(cohort: Cohort, keep: np.ndarray) -> Cohort:
    """The cohort members where ``keep`` is True (inclusion probabilities, multiplicities, strata kept)."""
    strata = None if cohort.strata is None else np.asarray(cohort.strata)[keep]
    expected = None if cohort.expected_draws is None else np.asarray(cohort.expected_draws)[keep]
    return replace(cohort, ids=cohort.ids[keep], inclusion=cohort.inclusion[keep], multiplicity=np.asarray(cohort.multiplicity)[keep], strata=strata,
                   expected_draws=expected)


def _note_failures(ctx: RoundContext, failed: list[Failed]) -> None:
    """Add ``failed`` to the round's record (``failed``: one entry per failed reply, ``dropped``: their number)."""
    ctx.log.setdefault("failed", []).extend(f.record() for f in failed)
    ctx.log["dropped"] = len(ctx.log["failed"])


LOST_PROBE = "; the sampler needs every probed client's statistics, so a lost probe stops the round (docs/reliability.md)"


class _CheckedProbes:
    """The federation as the strategy's parts see it: probe replies are checked. The samplers that probe need
    every probed client's statistics, so a lost or non-finite probe is an error naming the client (``simulate``
    adds strategy, seed and round; a lost one says why it was lost, a non-finite one that the model usually
    diverged, a client without samples says so); a sampler that asks with ``ProbeRequest(partial=True)`` gets the lost
    ones as :class:`~fedsample.rounds.Failed` replies (:func:`fedsample.sampling.adaptive.probe_partial`). It also notes every client
    the parts ask (:meth:`contacted`)."""

    def __init__(self, inner: Federation) -> None:
        self.inner = inner
        self._asked: np.ndarray | None = None  # one flag per client, set when the parts ask it anything

    @property
    def num_clients(self) -> int:
        return self.inner.num_clients

    def contacted(self, cohort: np.ndarray) -> int:
        """How many distinct clients the round asked anything: the parts' size queries and probes, and the cohort."""
        asked = np.zeros(self.num_clients, dtype=bool) if self._asked is None else self._asked.copy()
        asked[np.asarray(cohort, dtype=np.int64)] = True
        return int(np.count_nonzero(asked))

    def run(self, procedure: str, client_ids: np.ndarray, payload: Any, round: int) -> ReplyList:
        if self._asked is None:
            self._asked = np.zeros(self.num_clients, dtype=bool)
        self._asked[np.asarray(client_ids, dtype=np.int64)] = True
        replies = replies_of(self.inner.run(procedure, client_ids, payload, round))
        if procedure == "probe":
            partial = isinstance(payload, ProbeRequest) and payload.partial  # the sampler does without lost probes
            for k, reply in zip(np.asarray(client_ids).tolist(), replies):
                if partial and lost_to_faults(reply):
                    continue
                problem = validate.probe_problem(reply)
                if problem is not None:  # a lost probe and an empty client's say why; any other adds the likely cause
                    hint = (LOST_PROBE if lost_to_faults(reply) else  # dropped out or too late: not the model's doing
                            "" if problem.no_samples else  # an empty client (fedsample.client.probe)
                            "; a non-finite probe usually means the model diverged (lower the learning rate)")
                    raise ValueError(f"client {k}'s probe is unusable ({problem.reason}){hint}")
        return replies
