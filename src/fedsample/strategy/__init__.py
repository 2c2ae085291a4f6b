"""The server's side of a round, composed of parts (three layers, one door: docs/architecture.md).

A round: size reports (if the strategy declares them) -> client selection -> data plans -> train ->
aggregate -> server step. The strategy talks to clients only through ``Federation.run``.

:class:`Strategy` is the composition and its public face; its jobs live in one module each: the parts and switches
(:mod:`~fedsample.strategy.composition`), the compatibility rules (:mod:`~fedsample.strategy.rules`), the round's
steps (:mod:`~fedsample.strategy.round`), the round's record (:mod:`~fedsample.strategy.record`) and the federation
as the parts see it (:mod:`~fedsample.strategy.probes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsample import checks, parts
from fedsample.federation.base import Federation
from fedsample.parts import Limit
from fedsample.privacy.sizes import SizeInfo
from fedsample.rounds import Cohort, ReplyList, RoundContext
from fedsample.strategy import record
from fedsample.strategy import round as _round
from fedsample.strategy.composition import Composition
from fedsample.rounds import RoundFailed  # noqa: F401 - importable from here, as before it moved
from fedsample.strategy.probes import CheckedProbes as _CheckedProbes  # noqa: F401 - the tests wrap a federation with it
from fedsample.strategy.record import cohort_figures, is_census  # noqa: F401 - importable from here, as before the split
from fedsample.strategy.rules import RULES
from fedsample.training.functional import Params
from fedsample.training.server import SERVER_KEY
from fedsample.runtime.records import Record, State

__all__ = ["RULES", "Strategy", "RoundContext", "Cohort"]  # RoundFailed (fedsample.rounds) stays importable from here


@dataclass(frozen=True)
class Strategy(Composition):
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

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Every compatibility rule between the parts (:data:`~fedsample.strategy.rules.RULES`), at construction: the first one broken
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

    # --- the round (fedsample.strategy.round) and its record (fedsample.strategy.record) ------------------------

    def init_state(self, params: Params) -> State:
        return {SERVER_KEY: self.server.init_state(params)}

    def round(self, federation: Federation, params: Params, state: State, round: int, seed: int) -> tuple[Params, Record]:
        """Run round ``round`` (:func:`fedsample.strategy.round.run_round`); returns the new global parameters and
        the round's log (state is updated)."""
        return _round.run_round(self, federation, params, state, round, seed)

    def select(self, ctx: RoundContext) -> tuple[Cohort, int]:
        """The cohort, and how many chosen clients were left out of it (:func:`fedsample.strategy.round.select`)."""
        return _round.select(self, ctx)

    def collect_sizes(self, ctx: RoundContext, ids: np.ndarray) -> SizeInfo:
        """Size reports of ``ids`` (:func:`fedsample.strategy.round.collect_sizes`)."""
        return _round.collect_sizes(self, ctx, ids)

    def sizes_of_everyone(self, ctx: RoundContext) -> SizeInfo:
        """Every client's size reports (:func:`fedsample.strategy.round.sizes_of_everyone`)."""
        return _round.sizes_of_everyone(self, ctx)

    def planned_weights(self, ctx: RoundContext, cohort: Cohort, lost: int = 0) -> np.ndarray | None:
        """The weights the aggregator will give the cohort's updates if every one arrives
        (:func:`fedsample.strategy.round.planned_weights`)."""
        return _round.planned_weights(self, ctx, cohort, lost)

    def describe_round(self, ctx: RoundContext, cohort: Cohort, reports: ReplyList, facts: Record | None = None) -> Record:
        """The round's record (:func:`fedsample.strategy.record.describe_round`)."""
        return record.describe_round(self, ctx, cohort, reports, facts)
