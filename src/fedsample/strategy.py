"""The server's side of a round, composed of parts (DESIGN.md, "Three layers, one door").

A round: size reports (if the strategy declares them) -> client selection -> data plans -> train ->
aggregate -> server step. The strategy talks to clients only through ``Federation.run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsample import accounting
from fedsample.client import TrainPayload
from fedsample.federation.base import Federation
from fedsample.federation.secure_sum import SealedReplies, SecureSum
from fedsample.rng import SERVER, generator
from fedsample.sampling.clients import AllClients, Cohort
from fedsample.sampling.data import FullData
from fedsample.sizes import ExactSizes, RandomizedSizes, SizeInfo
from fedsample.training.aggregate import WeightedMean, received
from fedsample.training.functional import Params
from fedsample.training.local import LocalSGD
from fedsample.training.server import ServerSGD


@dataclass
class RoundContext:
    """What the parts of a strategy may use in one round: the federation, the global parameters, the
    server's randomness for this round, persistent strategy state, size information and a log."""

    federation: Federation
    params: Params
    round: int
    seed: int
    state: dict
    log: dict = field(default_factory=dict)
    sizes: SizeInfo | None = None

    @property
    def num_clients(self) -> int:
        return self.federation.num_clients

    def rng(self, purpose: str) -> np.random.Generator:
        """The server's generator for ``purpose`` in this round (derived from seed and round)."""
        return generator(self.seed, self.round, SERVER, purpose)

    def require_sizes(self, exact: bool = False) -> SizeInfo:
        if self.sizes is None or (exact and not self.sizes.exact):
            raise RuntimeError("this part needs size reports the strategy did not collect")
        return self.sizes


@dataclass(frozen=True)
class Strategy:
    """A federated strategy as a composition of parts.

    ``clients`` picks the cohort, ``data`` plans each client's local sample, ``local`` is the local
    solver, ``aggregate`` combines updates, ``server`` applies the result, ``sizes`` declares how the
    server learns data sizes (None: never). ``pooled`` trains on all data held by one client
    (centralized training). ``noise`` (a :class:`fedsample.privacy.UpdateNoise`) makes every client clip its
    update and add Gaussian noise (client-level DP). With ``secure_sum`` the training replies go through
    :class:`~fedsample.federation.secure_sum.SecureSum`: the aggregator gets only the weighted sum of the
    updates (linear aggregators). Each round's log states what a client has spent so far
    (:func:`fedsample.accounting.run_spend`).
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
        reports = ctx.federation.run("report_size", ids, self.sizes.query, ctx.round)
        return self.sizes.summarize(np.asarray(ids), np.asarray(reports))

    def select(self, ctx: RoundContext) -> Cohort:
        if self.sizes is not None and self.sizes.scope == "all":
            ctx.sizes = self.collect_sizes(ctx, np.arange(ctx.num_clients))
        cohort = self.clients.select(ctx)
        if self.sizes is not None and self.sizes.scope == "cohort":
            ctx.sizes = self.collect_sizes(ctx, cohort.ids)
        return cohort

    def round(self, federation: Federation, params: Params, state: dict, round: int, seed: int) -> tuple[Params, dict]:
        """Run round ``round``; returns the new global parameters and the round's log (state is updated)."""
        ctx = RoundContext(federation, params, round, seed, state)
        cohort = self.select(ctx)
        plan = self.data.plan(ctx, cohort)
        # one plan for all, or one per cohort member (e.g. ISFedAvg's per-agent E_k, B_k)
        payload_for = lambda p: TrainPayload(params=params, plan=p, solver=self.local, round=round, noise=self.noise)  # noqa: E731
        payload = [payload_for(p) for p in plan] if isinstance(plan, list) else payload_for(plan)
        reports = (SecureSum(federation) if self.secure_sum else federation).run("train", cohort.ids, payload, round)
        delta = self.aggregate.combine(reports, cohort, ctx)
        ctx.log.update(self.describe_round(ctx, cohort, reports))
        if delta is None:
            return params, ctx.log
        params, state["server"] = self.server.step(params, delta, state["server"])
        return params, ctx.log

    def describe_round(self, ctx: RoundContext, cohort: Cohort, reports: list) -> dict:
        log: dict[str, Any] = {"cohort": len(cohort)}
        if isinstance(reports, SealedReplies):  # a secure sum reveals only the summed loss and count
            loss_sum, log["updates"] = reports.summed_loss()
            if log["updates"]:
                log["train_loss"] = loss_sum / log["updates"]
        else:
            _, got = received(reports)
            log["updates"] = len(got)
            if got:
                log["train_loss"] = float(np.mean([r.loss for r in got]))
        if ctx.sizes is not None and not ctx.sizes.exact:
            log["size_estimate"] = ctx.sizes.total
        log.update(accounting.run_spend(self.sizes, self.noise, ctx.round + 1))
        return log
