"""Power-of-choice client selection (Cho, Wang & Joshi, "Towards understanding biased client selection in
federated learning", AISTATS 2022; arXiv 2010.01243).

Each round (the paper's algorithm, as we recall it):

1. the server draws a candidate set A of d clients *without replacement*, each draw proportional to the
   data fractions p_k = n_k / n (:func:`candidate_set`; numpy's successive sampling);
2. the candidates report their local loss F_k(w) at the current global model;
3. the server keeps the m candidates with the highest losses (:func:`highest_losses`), m <= d.

The global model is then the plain average of the m selected local models (weights 1/m). The variants differ
only in what "loss" the server ranks by:

- ``pow-d``: F_k(w) on the candidate's whole local data (one extra forward pass over it per candidate);
- ``cpow-d``: an estimate on a minibatch of b samples (:func:`minibatch_loss`, computed by the client);
- ``rpow-d``: no extra communication: the server ranks by each client's stale loss, the average training loss
  it reported the last time it participated (:func:`record_losses`). We do not recall what the paper assigns
  to a client that never participated; :func:`record_losses` leaves that to the caller's initial array
  (``np.inf`` ranks unseen clients first).

**Biased by design.** Selection favours high-loss clients on purpose (the paper's point: faster convergence,
at the price of a bias term in its bound); no weighting makes the average unbiased for FedAvg's objective.
Given the losses the selection is deterministic, but the candidate draw makes the inclusion probabilities
P(k in S) = P(k in A and fewer than m candidates in A rank above k), which have no closed form:
:func:`estimate_inclusion` replays the selection from frozen inputs (``design.replay_inclusion``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

import numpy as np

from fedsample import checks
from fedsample.messages import Params, ProbeReport, ProbeRequest
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, Learns, Limit, SizeNeed
from fedsample.rounds import Cohort, probe_reports, reply_as
from fedsample.sampling import adaptive, design
from fedsample.sampling.clamp import clamped
from fedsample.sampling.design import Sample

if TYPE_CHECKING:
    from fedsample.rounds import ReplyList, RoundContext

__all__ = [
    "PowerOfChoiceClients",
    "PowerOfChoiceHeld",
    "PowerOfChoiceState",
    "VARIANTS",
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "candidate_set",
    "highest_losses",
    "power_of_choice",
    "estimate_inclusion",
    "minibatch_loss",
    "record_losses",
]

VARIANTS = ("pow-d", "cpow-d", "rpow-d")
"""The power-of-choice variants: losses at the candidates, their minibatch losses, or stale losses."""
#: Kind of inclusion probabilities of each variant.
PROBABILITY_KIND = {variant: "estimated" for variant in VARIANTS}
#: What the server must learn to run each variant: the data sizes of all clients (for the candidate draw) and
#: the candidates' full-data losses (pow-d), minibatch losses (cpow-d), or the participants' training losses
#: kept from their last round (rpow-d).
SERVER_LEARNS = {
    "pow-d": ("sizes", "losses"),
    "cpow-d": ("sizes", "minibatch_losses"),
    "rpow-d": ("sizes", "stale_losses"),
}


def _check_sizes_d_m(sizes: object, d: object, m: object, where: str) -> tuple[np.ndarray, int, int]:
    n = design.nonnegative_vector(sizes, "sizes", where)
    d = design.check_count(d, "d", where, minimum=1)
    m = design.check_count(m, "m", where, minimum=1)
    positive = int(np.count_nonzero(n))
    if m > d:
        raise ValueError(f"{where}: m = {m} exceeds the candidate set size d = {d}")
    if d > positive:
        raise ValueError(f"{where}: d = {d} exceeds the number of clients with positive size ({positive})")
    return n / n.sum(), d, m


def candidate_set(sizes: np.ndarray, d: int, rng: np.random.Generator) -> np.ndarray:
    """Step 1: d distinct candidates, drawn without replacement with probabilities p_k = n_k / n
    (successive sampling: ``rng.choice(N, d, replace=False, p=p)``). Returns their ids, sorted."""
    where = "candidate_set"
    rng = design.check_rng(rng, where)
    p, d, _ = _check_sizes_d_m(sizes, d, 1, where)
    return np.sort(rng.choice(p.size, size=d, replace=False, p=p)).astype(np.int64)


def highest_losses(candidates: np.ndarray, losses: np.ndarray, m: int) -> np.ndarray:
    """Step 3: the m candidates with the highest losses (ties broken towards the smaller id). ``losses`` is
    indexed by client id (entries of non-candidates are ignored, so they may be NaN). Returns sorted ids."""
    where = "highest_losses"
    ids = np.asarray(candidates, dtype=np.int64)
    m = design.check_count(m, "m", where, minimum=1)
    if m > ids.size:
        raise ValueError(f"{where}: m = {m} exceeds the number of candidates ({ids.size})")
    values = np.asarray(losses, dtype=np.float64)
    if values.ndim != 1 or (ids.size and ids.max() >= values.size):
        raise ValueError(f"{where}: losses must be 1-D and indexed by client id, got shape {values.shape}")
    ranked = values[ids]
    if np.any(np.isnan(ranked)):
        raise ValueError(f"{where}: losses of the candidates contain NaN")
    order = np.lexsort((ids, -ranked))  # highest loss first, then smaller id
    return np.sort(ids[order[:m]])


def power_of_choice(sizes: np.ndarray, losses: np.ndarray, d: int, m: int, rng: np.random.Generator) -> Sample:
    """One round of power-of-choice from frozen losses (one per client; only the candidates' are read):
    :func:`candidate_set`, then :func:`highest_losses`. ``inclusion`` is NaN: the probabilities have no
    closed form (:func:`estimate_inclusion`)."""
    where = "power_of_choice"
    rng = design.check_rng(rng, where)
    p, d, m = _check_sizes_d_m(sizes, d, m, where)
    values = np.asarray(losses, dtype=np.float64)
    if values.shape != p.shape:
        raise ValueError(f"{where}: losses has shape {values.shape}, expected one per client ({p.size})")
    ids = highest_losses(candidate_set(sizes, d, rng), values, m)
    return Sample(ids, np.full(ids.size, np.nan), np.ones(ids.size, dtype=np.int64))


def estimate_inclusion(
    sizes: np.ndarray, losses: np.ndarray, d: int, m: int, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """Monte Carlo P(k in S) of :func:`power_of_choice` with the inputs frozen: the fraction of ``draws``
    replayed rounds that select k (standard error sqrt(pi (1 - pi) / draws)). Sums to exactly m."""
    p = design.nonnegative_vector(sizes, "sizes", "estimate_inclusion")
    return design.replay_inclusion(lambda g: power_of_choice(sizes, losses, d, m, g), p.size, draws, rng)


def minibatch_loss(sample_losses: np.ndarray, b: int, rng: np.random.Generator) -> float:
    """cpow-d's loss estimate, computed by a client: the mean loss over b of its samples drawn uniformly
    without replacement (all of them when it holds at most b)."""
    where = "minibatch_loss"
    rng = design.check_rng(rng, where)
    values = np.asarray(sample_losses, dtype=np.float64)
    b = design.check_count(b, "b", where, minimum=1)
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"{where}: sample_losses must be a non-empty 1-D finite vector")
    if values.size <= b:
        return float(values.mean())
    return float(values[rng.choice(values.size, size=b, replace=False)].mean())


def record_losses(stale: np.ndarray, ids: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """rpow-d's bookkeeping: a copy of ``stale`` (one loss per client) where the participants ``ids`` get
    the training losses they just reported; the others keep their last value."""
    where = "record_losses"
    updated = np.array(stale, dtype=np.float64)
    ids = np.asarray(ids, dtype=np.int64)
    values = np.asarray(losses, dtype=np.float64)
    if updated.ndim != 1 or ids.shape != values.shape or ids.ndim != 1:
        raise ValueError(f"{where}: stale must be 1-D and ids, losses of the same length")
    if ids.size and (ids.min() < 0 or ids.max() >= updated.size):
        raise ValueError(f"{where}: ids must lie in [0, {updated.size})")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{where}: losses contain NaN or infinite values")
    updated[ids] = values
    return updated


# --- the client sampler ----------------------------------------------------------------------------------------

Variant = Literal["pow-d", "cpow-d", "rpow-d"]

#: What power-of-choice does without a candidate's lost probe (the round record's ``sampler_lost_probes_instead``).
LOST_PROBE = "ranked only the candidates whose probe arrived (fewer than d)"


class PowerOfChoiceHeld(TypedDict, total=False):
    """What rpow-d's server holds between rounds: every client's stale loss, its training loss when it last
    participated (+inf: never seen)."""

    stale_losses: np.ndarray


@dataclass(frozen=True)
class PowerOfChoiceState:
    """The inputs of one round's power-of-choice selection, frozen: every client's data size and the loss it would
    be ranked by (pow-d: at the global model on all of its data; cpow-d: on one minibatch draw; rpow-d: its stale
    loss). The server never holds all of these in a run (it probes only the d candidates); a replay needs them."""

    sizes: np.ndarray
    losses: np.ndarray


@dataclass(frozen=True)
@checks.constrained(m=checks.COUNT, d=checks.COUNT, b=[checks.COUNT, None])
class PowerOfChoiceClients(adaptive.Replayed):
    """Power-of-choice client selection (Cho, Wang & Joshi, AISTATS 2022) as a client sampler: each round d
    candidates drawn without replacement proportionally to their data sizes (:func:`candidate_set`), the m with the
    highest loss kept (:func:`highest_losses`). ``variant`` says which loss:

    - ``"pow-d"``: each candidate's loss at the global model on all of its data (a loss probe of the d candidates:
      one forward pass over their data; the vectorized engine runs them as one);
    - ``"cpow-d"``: the loss on a minibatch of ``b`` samples the candidate draws from its own probe stream;
    - ``"rpow-d"``: no probe: the training loss each client reported when it last took part, kept by the server
      (:func:`record_losses`, from the training replies); a client never seen ranks first (loss +inf, the
      paper leaves it open).

    Needs every client's exact size (``sizes=ExactSizes()``). Inclusion probabilities: estimated (no closed form;
    :meth:`estimate_inclusion`); the plain mean the paper aggregates with is biased by design, and aggregators that
    divide by pi are refused. rpow-d reads each client's training loss, so it refuses a secure sum and noised
    replies. The round record states the probes (``sampler_probes``: d, 0 for rpow-d; ``sampler_probe_bytes``).
    A candidate whose probe the failure model lost is not ranked (the m come from the others; the record names it,
    ``failed`` with phase ``probe``, and says so, ``sampler_lost_probes_instead``)."""

    m: int = 10
    d: int = 20
    variant: Variant = "pow-d"
    b: int | None = None

    def __post_init__(self) -> None:
        if self.m > self.d:
            checks.fail("m", self.m, f"at most the candidate set size d = {self.d}", "PowerOfChoiceClients")
        if (self.b is None) != (self.variant != "cpow-d"):
            checks.fail("b", self.b, "the minibatch size (an integer >= 1) for cpow-d, None otherwise", "PowerOfChoiceClients")

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Estimated pi from every client's exact size and what its variant probes (rpow-d ranks by each
        participant's training loss); d candidates (and so m) at most the clients."""
        return ClientSamplerCapabilities(
            inclusion_kind=InclusionKind.ESTIMATED, server_learns=tuple(map(Learns, SERVER_LEARNS[self.variant])),
            needs_sizes=SizeNeed.EXACT_ALL, reads_replies=("loss",) if self.variant == "rpow-d" else (),
            limits=(Limit("candidates (d)", self.d, "clients"),), estimates_inclusion=True)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return float(min(self.m, num_clients))

    def select(self, ctx: "RoundContext") -> Cohort:
        sizes = self.sizes(ctx)
        # a client whose size report failed cannot be a candidate: fewer than d left is recorded under 'clamped'
        d = int(clamped(ctx.log, "candidates", self.d, 0, int(np.count_nonzero(sizes > 0))))
        candidates = candidate_set(sizes, d, ctx.rng("clients"))
        losses = self.losses(ctx, candidates)
        ctx.log["candidates"] = len(candidates)
        candidates = candidates[~np.isnan(losses[candidates])]  # a candidate whose probe was lost is not ranked
        ids = highest_losses(candidates, losses, min(self.m, len(candidates)))
        return Cohort(ids, np.full(len(ids), np.nan), ctx.num_clients, info={"inclusion_kind": InclusionKind.ESTIMATED.value})

    def sizes(self, ctx: "RoundContext") -> np.ndarray:
        """Every client's exact reported size (0 for a client whose report failed: it cannot be a candidate)."""
        reported = ctx.require_sizes(exact=True)
        sizes = np.zeros(ctx.num_clients)
        sizes[reported.ids] = reported.reports
        return sizes

    def losses(self, ctx: "RoundContext", candidates: np.ndarray) -> np.ndarray:
        """One loss per client (NaN where unknown: not a candidate, or its probe was lost): the candidates' probed
        losses, or every client's stale one."""
        if self.variant == "rpow-d":
            adaptive.no_probes(ctx)
            return self.stale(ctx)
        replies, arrived = adaptive.probe_partial(ctx, candidates, self.request(ctx.params), LOST_PROBE)
        losses = np.full(ctx.num_clients, np.nan)
        losses[candidates[arrived]] = [r.loss for r in adaptive.arrived_reports(replies)]
        return losses

    def request(self, params: Params) -> ProbeRequest:
        """The candidates' probe: the loss only, on all data (pow-d) or a minibatch of b (cpow-d)."""
        return ProbeRequest(params=params, statistics="loss", minibatch=self.b)

    def stale(self, ctx: "RoundContext") -> np.ndarray:
        """rpow-d's server-held stale losses (+inf for clients never seen)."""
        state = adaptive.sampler_state(ctx, PowerOfChoiceHeld)
        if "stale_losses" not in state:
            state["stale_losses"] = np.full(ctx.num_clients, np.inf)
        return state["stale_losses"]

    def observe(self, ctx: "RoundContext", cohort: Cohort, replies: "ReplyList") -> None:
        """rpow-d: the participants' training losses become their stale losses (:func:`record_losses`)."""
        if self.variant != "rpow-d":
            return
        got = replies.received_positions()
        losses = np.array([replies.report(int(i)).loss for i in got], dtype=np.float64)
        finite = np.isfinite(losses)
        state = adaptive.sampler_state(ctx, PowerOfChoiceHeld)
        state["stale_losses"] = record_losses(self.stale(ctx), cohort.ids[got][finite], losses[finite])

    def frozen_state(self, ctx: "RoundContext") -> PowerOfChoiceState:
        """This round's inputs for a replay: the sizes and every client's loss (pow-d and cpow-d probe every client for
        it, which a run never does; rpow-d's stale losses are the server's own)."""
        sizes = self.sizes(ctx)
        if self.variant == "rpow-d":
            return PowerOfChoiceState(sizes, self.stale(ctx).copy())
        everyone = np.arange(ctx.num_clients)
        replies = probe_reports(ctx.federation.run(everyone, self.request(ctx.params), ctx.round))
        return PowerOfChoiceState(sizes, np.array([reply_as(r, ProbeReport, "probe").loss for r in replies], dtype=np.float64))  # none lost: not partial

    def replay(self, state: PowerOfChoiceState, draws: int = 1000, *, seed: int = 0, round: int = 0) -> np.ndarray:
        """P(k in S) of one round from the frozen ``state``, by ``draws`` replays of the selection (candidates and
        ranking; :func:`power_of_choice`) read from the run's stream of (``seed``, ``round``)
        (:func:`~fedsample.sampling.adaptive.replay_rng`); standard error sqrt(pi (1 - pi) / draws), sum exactly m.
        cpow-d's replay holds the minibatch losses of ``state`` fixed (conditional on that draw)."""
        checks.check("draws", draws, checks.COUNT, owner="PowerOfChoiceClients.replay")
        return estimate_inclusion(state.sizes, state.losses, self.d, self.m, draws, adaptive.replay_rng(seed, round))
