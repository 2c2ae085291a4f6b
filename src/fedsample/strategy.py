"""The server's side of a round, composed of parts (three layers, one door: docs/architecture.md).

A round: size reports (if the strategy declares them) -> client selection -> data plans -> train ->
aggregate -> server step. The strategy talks to clients only through ``Federation.run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedsample import validate

from fedsample.privacy import accounting
from fedsample.privacy.noise import for_cohort
from fedsample.privacy.recorder import round_figures, watch
from fedsample.messages import TrainPayload
from fedsample.federation.base import Federation
from fedsample.federation.secure_sum import SealedReplies, SecureSum, summed_samples
from fedsample.missing import response_rate
from fedsample.rounds import Cohort, Failed, Replies, RoundContext
from fedsample.sampling.clients import AllClients
from fedsample.sampling.data import FullData
from fedsample.privacy.size_estimate import scaled_total
from fedsample.privacy.sizes import ExactSizes, RandomizedSizes, SizeInfo
from fedsample.training.aggregate import WeightedMean, received
from fedsample.training.functional import Params
from fedsample.training.local import LocalSGD
from fedsample.training.schedule import Schedule, scheduled_step
from fedsample.training.server import ServerSGD

__all__ = ["Strategy", "RoundContext", "Cohort", "RoundFailed"]


@dataclass(frozen=True)
class Strategy:
    """A federated strategy as a composition of parts.

    ``clients`` picks the cohort, ``data`` plans each client's local sample, ``local`` is the local
    solver, ``aggregate`` combines updates, ``server`` applies the result, ``sizes`` declares how the
    server learns data sizes (None: never). ``pooled`` trains on all data held by one client
    (centralized training). ``noise`` (a :class:`fedsample.privacy.noise.UpdateNoise`) makes every client clip its
    update and add Gaussian noise (client-level DP); :class:`~fedsample.privacy.noise.PerExampleNoise` clips
    each example of FedSampling's G_c and adds the client's share of noise on the cohort's sum. With ``secure_sum`` the training replies go through
    :class:`~fedsample.federation.secure_sum.SecureSum`: the aggregator gets only the weighted sum of the
    updates (linear aggregators). ``schedule`` (:class:`~fedsample.training.schedule.Schedule`) scales the server
    optimizer's learning rate by a factor per round. Each round's log states what a client has spent so far
    (:func:`fedsample.privacy.accounting.run_spend`) and the run's privacy ledger (``privacy_*`` keys,
    :mod:`fedsample.privacy.ledger`).
    """

    clients: Any = field(default_factory=AllClients)
    data: Any = field(default_factory=FullData)
    local: Any = field(default_factory=LocalSGD)
    aggregate: Any = field(default_factory=lambda: WeightedMean("uniform"))
    server: Any = field(default_factory=ServerSGD)
    sizes: ExactSizes | RandomizedSizes | None = None
    name: str = "strategy"
    pooled: bool = False
    noise: Any = None
    secure_sum: bool = False
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Each part that needs size reports must get the kind it needs."""
        if getattr(self.clients, "needs_sizes", None) == "exact" and not (
            isinstance(self.sizes, ExactSizes) and self.sizes.scope == "all"
        ):
            raise ValueError(f"{type(self.clients).__name__} needs exact sizes of all clients: pass sizes=ExactSizes()")
        for part in (self.data, self.aggregate):
            if getattr(part, "needs_sizes", None) and self.sizes is None:
                raise ValueError(f"{type(part).__name__} needs size reports: pass sizes=ExactSizes(...) or RandomizedSizes(...)")
            scope = getattr(part, "sizes_scope", None)
            if scope and self.sizes is not None and self.sizes.scope != scope:
                raise ValueError(f"{type(part).__name__} needs size reports with scope={scope!r}, got {self.sizes.scope!r}")

    # --- the round --------------------------------------------------------------------------------

    def init_state(self, params: Params) -> dict:
        return {"server": self.server.init_state(params)}

    def collect_sizes(self, ctx: RoundContext, ids: np.ndarray) -> SizeInfo:
        """Size reports of ``ids``: invalid or missing ones are left out (named in ``failed``); a randomized
        total from the a of n asked that answered is scaled by n/a (docs/reliability.md)."""
        policy = self.size_policy(ctx)
        replies = ctx.federation.run("report_size", ids, policy.query, ctx.round)
        M = policy.M if isinstance(policy, RandomizedSizes) else None
        kept, reports, failed = validate.screen_sizes(replies, np.asarray(ids), M)
        _note_failures(ctx, failed)
        if len(kept) == 0:
            raise RoundFailed("no valid size report arrived")
        info = policy.summarize(kept, reports)
        if not info.exact and len(kept) < len(ids):
            info = replace(info, total=scaled_total(info.total, len(ids), len(kept)))
        return info

    def size_policy(self, ctx: RoundContext) -> ExactSizes | RandomizedSizes:
        """The size policy with its threshold resolved for this federation (``M="rmse"``: from the number of
        clients and the user's size prior, :func:`fedsample.privacy.size_estimate.rmse_M`)."""
        if not (isinstance(self.sizes, RandomizedSizes) and self.sizes.M == "rmse"):
            return self.sizes
        policy = self.sizes.for_population(ctx.num_clients)
        ctx.log["size_M"] = policy.M
        return policy

    def sizes_of_everyone(self, ctx: RoundContext) -> SizeInfo:
        """Every client's size reports (FedSampling). With ``reuse=R`` reports are asked for only every R rounds
        and the estimate is kept in between; with ``average=A`` the estimate is the mean of the last A
        unclamped estimates, then floored at the number of clients (docs/size-estimate.md). The memo lives in the strategy state (saved with checkpoints)."""
        reuse, average = getattr(self.sizes, "reuse", 1), getattr(self.sizes, "average", 1)
        if reuse == 1 and average == 1:
            return self.collect_sizes(ctx, np.arange(ctx.num_clients))
        memo = ctx.state.setdefault("size_estimates", {"asked": None, "totals": [], "info": None})
        if memo["asked"] is not None and ctx.round - memo["asked"] < reuse:
            return memo["info"]
        info = self.collect_sizes(ctx, np.arange(ctx.num_clients))
        memo["totals"] = (memo["totals"] + [self.size_policy(ctx).unclamped_total(info, ctx.num_clients)])[-average:]
        total = max(float(np.mean(memo["totals"])), float(ctx.num_clients))  # floored after averaging: unbiased mean
        memo.update(asked=ctx.round, info=replace(info, total=total))
        return memo["info"]

    def select(self, ctx: RoundContext) -> tuple[Cohort, int]:
        """The cohort, and how many chosen clients were left out of it because their size report failed
        (they count as non-responders in the response rate)."""
        if self.sizes is not None and self.sizes.scope == "all":
            ctx.sizes = self.sizes_of_everyone(ctx)
        cohort = self.clients.select(ctx)
        if self.sizes is not None and self.sizes.scope == "cohort":
            ctx.sizes = self.collect_sizes(ctx, cohort.ids)
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
        # one plan for all, or one per cohort member (e.g. ISFedAvg's per-agent E_k, B_k)
        payload_for = lambda p: TrainPayload(params=params, plan=p, solver=self.local, round=round, noise=for_cohort(self.noise, len(cohort)))  # noqa: E731
        payload = [payload_for(p) for p in plan] if isinstance(plan, list) else payload_for(plan)
        replies = (SecureSum(federation) if self.secure_sum else federation).run("train", cohort.ids, payload, round)
        if not isinstance(replies, SealedReplies):  # sealed updates cannot be read: only their sum is checked
            replies = validate.screen_updates(replies, cohort.ids, params)
        replies, delta = self.combine_valid(replies, cohort, ctx, lost)
        ctx.log.update(self.describe_round(ctx, cohort, replies))
        if delta is None:
            return params, self.unchanged(ctx, "no valid update arrived")
        params, state["server"] = scheduled_step(self.server, self.schedule, round, params, delta, state["server"])
        return params, ctx.log

    def combine_valid(
        self, replies: Replies, cohort: Cohort, ctx: RoundContext, lost: int = 0, checked: bool = False
    ) -> tuple[Replies, Params | None]:
        """Aggregate the valid replies. A non-finite aggregate of replies not checked one by one (the
        vectorized engine's fused sum) triggers the per-client check and a second aggregation; a
        non-finite aggregate after that is rejected (None)."""
        ctx.response_rate = response_rate(len(cohort) + lost, len(cohort) - len(replies.failures()))
        delta = self.aggregate.combine(replies, cohort, ctx) if ctx.response_rate > 0 else None
        sealed = isinstance(replies, SealedReplies)
        if delta is not None and not checked and not sealed and not validate.params_finite(delta) and validate.has_fused_sum(replies):
            # per-client updates from here on: the fused sum would carry the rejected clients' NaN (0 * NaN)
            replies = Replies(validate.screen_updates(replies, cohort.ids, ctx.params, deep=True))
            return self.combine_valid(replies, cohort, ctx, lost, checked=True)
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

    def describe_round(self, ctx: RoundContext, cohort: Cohort, reports: Replies | SealedReplies) -> dict:
        _note_failures(ctx, reports.failures())
        log: dict[str, Any] = {"cohort": len(cohort)}
        drawn = None
        if isinstance(reports, SealedReplies):  # a secure sum reveals only the summed loss and count
            loss_sum, log["updates"] = reports.summed_loss()
            if log["updates"]:
                log["train_loss"] = loss_sum / log["updates"]
                drawn = summed_samples(reports)
        else:
            _, got = received(reports)
            log["updates"] = len(got)
            if got:
                log["train_loss"] = float(np.mean([r.loss for r in got]))
                counts = [getattr(r, "samples", None) for r in got]
                drawn = None if None in counts else int(sum(counts))
        log["answered"] = len(cohort) - len(reports.failures())
        if log["updates"] and drawn is not None:  # known only where the clients report their counts
            log["samples"] = drawn
        log.update(cohort_figures(cohort))
        if ctx.sizes is not None and not ctx.sizes.exact:
            log["size_estimate"] = ctx.sizes.total
        if self.noise is not None:  # noised replies withhold their loss (fedsample.privacy.noise)
            log.pop("train_loss", None)
        log.update(accounting.run_spend(self.sizes, self.noise, ctx.round + 1))
        log.update(round_figures(ctx.state))
        return log


def cohort_figures(cohort: Cohort) -> dict[str, float]:
    """The sampler's figures of a round (none for an empty cohort): the min, mean and max inclusion probability
    pi_k of the cohort, and Kish's (1965) effective sample size of its design weights w_k = 1/pi_k, each drawn
    m_k times (the multiplicity): n_eff = (sum_k m_k w_k)^2 / sum_k m_k w_k^2, with the weights' coefficient
    of variation over the n = sum_k m_k draws (population sd / mean), so that n_eff = n / (1 + cv^2)."""
    if len(cohort) == 0:
        return {}
    pi = np.asarray(cohort.inclusion, dtype=np.float64)
    m = np.asarray(cohort.multiplicity, dtype=np.float64)
    w = 1.0 / pi
    total, squares, n = float(m @ w), float(m @ (w * w)), float(m.sum())
    mean = total / n
    return {
        "inclusion_min": float(pi.min()), "inclusion_mean": float(pi.mean()), "inclusion_max": float(pi.max()),
        "effective_cohort": total * total / squares,
        "weight_cv": float(np.sqrt(max(squares / n - mean * mean, 0.0))) / mean,
    }


def restrict(cohort: Cohort, keep: np.ndarray) -> Cohort:
    """The cohort members where ``keep`` is True (inclusion probabilities, multiplicities, strata kept)."""
    strata = None if cohort.strata is None else np.asarray(cohort.strata)[keep]
    return replace(cohort, ids=cohort.ids[keep], inclusion=cohort.inclusion[keep], multiplicity=cohort.multiplicity[keep], strata=strata)


class RoundFailed(Exception):
    """Nothing usable arrived in a phase of the round: the round leaves the parameters unchanged."""


def _note_failures(ctx: RoundContext, failed: list[Failed]) -> None:
    """Add ``failed`` to the round's record (``failed``: one entry per failed reply, ``dropped``: their number)."""
    ctx.log.setdefault("failed", []).extend(f.record() for f in failed)
    ctx.log["dropped"] = len(ctx.log["failed"])


class _CheckedProbes:
    """The federation as the strategy's parts see it: probe replies are checked. The samplers that probe need
    every probed client's statistics, so a lost or non-finite probe is an error naming the client (``simulate``
    adds strategy, seed and round; a non-finite one usually means the model diverged)."""

    def __init__(self, inner: Federation) -> None:
        self.inner = inner

    @property
    def num_clients(self) -> int:
        return self.inner.num_clients

    def run(self, procedure: str, client_ids: np.ndarray, payload: Any, round: int) -> list:
        replies = self.inner.run(procedure, client_ids, payload, round)
        if procedure == "probe":
            for k, reply in zip(np.asarray(client_ids).tolist(), replies):
                problem = validate.probe_problem(reply)
                if problem:
                    raise ValueError(
                        f"client {k}'s probe is unusable ({problem}); a non-finite probe usually means the model "
                        "diverged (lower the learning rate)"
                    )
        return replies
