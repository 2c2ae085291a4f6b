"""Fed-CBS: class-balanced client sampling (Zhang et al., "Fed-CBS: A heterogeneity-aware client sampling
mechanism for federated learning via class-imbalance reduction", ICML 2023; arXiv 2209.15245).

The class-imbalance of a group S of clients is the quadratic class-imbalance degree of its pooled label
histogram (:func:`qcid`): QCID(S) = sum_b (alpha_b - 1/B)^2, alpha the pooled class proportions over B classes
(0 for a perfectly balanced pool). The paper computes it under homomorphic encryption from the pairwise
products n_i n_j alpha_i . alpha_j, as sum_{i,j in S} n_i n_j alpha_i . alpha_j / (sum_{i in S} n_i)^2 - 1/B, which
is the same number (sum_b alpha_b^2 - 1/B = sum_b (alpha_b - 1/B)^2); so the server learns those inner products of
the clients' label histograms, never the histograms themselves; this pure layer takes the histograms (one row per
client).

The m clients are drawn one at a time without replacement (:func:`fedcbs_sample`), each step's probabilities
given by :func:`step_probabilities`:

- first client: P(i) proportional to 1 / QCID({i})^beta_1 + lambda sqrt(3 ln t / (2 T_i))
  (:func:`exploration_bonus`; t the round, T_i how often client i was selected so far);
- k-th client (k >= 2): P(i | S) proportional to 1 / QCID(S + {i})^beta_k over the clients not yet chosen.

The paper writes the k-th step with the factor QCID(S)^beta_{k-1} in the numerator (and, at k = 2, the first
step's weight of the client already chosen in the denominator) so that the product telescopes; both factors are
constant over the candidates and cancel in the normalization, so they are left out here. (A public
re-implementation we read puts each *candidate's* bonus in that denominator at k = 2; we follow the formula.)

Conventions, and how far they are checked. The paper's text was not available to us while writing this (only a
summary and that re-implementation): the formulas above are as we remember them and as the re-implementation writes
them. beta_k = k (``beta=None``): the re-implementation's setting, which its comment attributes to the paper's
experiments. lambda: a hyperparameter, 1 by default here (the paper's value is not confirmed). T_i
(``count_rule``): the formula's T_i is the number of times client i was selected, so a never-selected client has an
infinite bonus once ln t > 0: ``"selections"`` (the default) takes that literally, and the first step then chooses
uniformly among the never-selected clients (the formula's limit, UCB1's "try every arm once"; in round t = 1, ln t =
0 and no client has a bonus). ``"plus_one"``: T_i = 1 + selections (the re-implementation's counters start at 1,
because the formula fails at 0); ``"floor_one"``: T_i = max(selections, 1) (this project's rule before, which gives a
never-selected client the bonus of a once-selected one). A candidate with QCID = 0 (a perfectly balanced pool) has
infinite weight too: a step with infinite weights chooses uniformly among those candidates (the limit of the
formula).

The aggregation is FedAvg's (sizes). The inclusion probabilities have no closed form:
:func:`estimate_inclusion` replays the draw from frozen inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Literal, Sequence, TypedDict

import numpy as np

from fedsample import checks
from fedsample.messages import ProbeRequest
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, Learns
from fedsample.rounds import Cohort
from fedsample.sampling import adaptive, design
from fedsample.sampling.design import Sample

if TYPE_CHECKING:
    from fedsample.rounds import RoundContext

__all__ = [
    "FedCBSClients",
    "FedCBSHeld",
    "FedCBSState",
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "qcid",
    "qcid_with_each",
    "exploration_bonus",
    "step_exponents",
    "step_probabilities",
    "fedcbs_sample",
    "estimate_inclusion",
]

#: Kind of inclusion probabilities.
PROBABILITY_KIND = {"fedcbs": "estimated"}
#: What the server must learn: the clients' label histograms (in the paper, only their pairwise inner
#: products, under homomorphic encryption) and how often each client has been selected.
SERVER_LEARNS = {"fedcbs": ("label_histograms", "participation_counts")}
#: QCID values at or below this count as 0 (a balanced pool).
QCID_ZERO = 1e-15
#: What T_i of the exploration bonus is (module docstring): the number of selections (0 for a never-selected
#: client, whose bonus is then infinite), one more than that, or that floored at 1.
CountRule = Literal["selections", "plus_one", "floor_one"]


def _histograms(histograms: object, where: str) -> np.ndarray:
    H = design.finite_matrix(histograms, "histograms", where)
    if np.any(H < 0):
        raise ValueError(f"{where}: histograms contain negative counts")
    if H.shape[1] < 2:
        raise ValueError(f"{where}: histograms need at least 2 classes, got {H.shape[1]}")
    empty = np.flatnonzero(H.sum(axis=1) <= 0)
    if empty.size:
        raise ValueError(f"{where}: client {int(empty[0])} has an empty label histogram")
    return H


def qcid(histogram: np.ndarray) -> float:
    """QCID of a pooled label histogram (1-D counts per class), or of a group given as one histogram per
    row (pooled first): sum_b (alpha_b - 1/B)^2 with alpha the class proportions."""
    h = np.asarray(histogram, dtype=np.float64)
    pooled = h.sum(axis=0) if h.ndim == 2 else h
    valid = pooled.ndim == 1 and pooled.size >= 2 and np.all(np.isfinite(pooled)) and np.all(pooled >= 0)
    if not valid or pooled.sum() <= 0:
        raise ValueError("qcid: histogram must hold finite non-negative counts over at least 2 classes, not all zero")
    alpha = pooled / pooled.sum()
    return float(np.sum((alpha - 1.0 / pooled.size) ** 2))


def qcid_with_each(pooled: np.ndarray, histograms: np.ndarray) -> np.ndarray:
    """QCID(S + {i}) for every client i at once, ``pooled`` being the pooled histogram of S (zeros for the
    empty group)."""
    H = _histograms(histograms, "qcid_with_each")
    base = np.asarray(pooled, dtype=np.float64)
    if base.shape != (H.shape[1],):
        raise ValueError(f"qcid_with_each: pooled has shape {base.shape}, expected ({H.shape[1]},)")
    joined = H + base
    alpha = joined / joined.sum(axis=1, keepdims=True)
    qcid: np.ndarray = np.sum((alpha - 1.0 / H.shape[1]) ** 2, axis=1)
    return qcid


def exploration_bonus(counts: np.ndarray, t: int, lam: float, count_rule: CountRule = "selections") -> np.ndarray:
    """lambda sqrt(3 ln t / (2 T_i)), the first step's exploration term (``counts`` the times each client was selected
    before round t >= 1). ``count_rule`` (module docstring): ``"selections"`` T_i = counts, infinite for a
    never-selected client when lambda ln t > 0 (0 when it is 0: in round 1 nobody has a bonus); ``"plus_one"``
    T_i = counts + 1; ``"floor_one"`` T_i = max(counts, 1)."""
    where = "exploration_bonus"
    T = design.nonnegative_vector(counts, "counts", where)
    t = design.check_count(t, "t", where, minimum=1)
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"{where}: lam must be finite and >= 0, got {lam!r}")
    if count_rule not in ("selections", "plus_one", "floor_one"):
        raise ValueError(f"{where}: count_rule must be 'selections', 'plus_one' or 'floor_one', got {count_rule!r}")
    T = T + 1.0 if count_rule == "plus_one" else np.maximum(T, 1.0) if count_rule == "floor_one" else T
    numerator = lam**2 * 3.0 * np.log(t) / 2.0
    if numerator == 0:
        return np.zeros_like(T)
    with np.errstate(divide="ignore"):
        bonus: np.ndarray = np.sqrt(numerator / T)
        return bonus


def step_exponents(m: int, beta: float | Sequence[float] | None = None) -> np.ndarray:
    """beta_1..beta_m: ``None`` gives beta_k = k, a number the same beta at every step, a sequence one per
    step (all > 0)."""
    m = design.check_count(m, "m", "step_exponents", minimum=1)
    if beta is None:
        return np.arange(1, m + 1, dtype=np.float64)
    b = np.asarray(beta, dtype=np.float64)
    if b.ndim == 0:
        b = np.full(m, float(b))
    if b.shape != (m,) or not np.all(np.isfinite(b)) or np.any(b <= 0):
        raise ValueError(f"step_exponents: beta must be positive, one number or one per step ({m}), got {beta!r}")
    return np.array(b)


def _inverse_power(q: np.ndarray, beta: float, bonus: np.ndarray | None) -> np.ndarray:
    """Weights 1/q^beta (+ bonus); when some candidates' weights are infinite (q = 0, a power beyond the floats, an
    infinite bonus) the step is uniform over them (the limit of the formula)."""
    with np.errstate(over="ignore"):
        w = np.where(q <= QCID_ZERO, np.inf, np.exp(-beta * np.log(np.maximum(q, QCID_ZERO))))
    if bonus is not None:
        w = w + bonus
    infinite = np.isinf(w)
    return infinite.astype(np.float64) if np.any(infinite) else w


def step_probabilities(
    histograms: np.ndarray,
    selected: Sequence[int],
    beta: float,
    bonus: np.ndarray | None = None,
) -> np.ndarray:
    """The probability of each client being the next one drawn after ``selected`` (0 for those already
    chosen): proportional to 1 / QCID(selected + {i})^beta, plus ``bonus`` (the exploration term, first step
    only)."""
    where = "step_probabilities"
    H = _histograms(histograms, where)
    chosen = np.asarray(selected, dtype=np.int64)
    if chosen.size and (chosen.min() < 0 or chosen.max() >= H.shape[0] or np.unique(chosen).size != chosen.size):
        raise ValueError(f"{where}: selected must be distinct client ids in [0, {H.shape[0]})")
    if chosen.size == H.shape[0]:
        raise ValueError(f"{where}: every client is already selected")
    return _step(H, chosen, beta, None if bonus is None else np.asarray(bonus, dtype=np.float64))


def _step(H: np.ndarray, chosen: np.ndarray, beta: float, bonus: np.ndarray | None) -> np.ndarray:
    """:func:`step_probabilities` on validated inputs."""
    free = np.ones(H.shape[0], dtype=bool)
    free[chosen] = False
    joined = H[free] + H[chosen].sum(axis=0)
    alpha = joined / joined.sum(axis=1, keepdims=True)
    q = np.sum((alpha - 1.0 / H.shape[1]) ** 2, axis=1)
    w = _inverse_power(q, beta, None if bonus is None else bonus[free])
    p = np.zeros(H.shape[0])
    p[free] = w / w.sum()
    return p


def fedcbs_sample(
    histograms: np.ndarray,
    m: int,
    rng: np.random.Generator,
    *,
    t: int,
    counts: np.ndarray,
    lam: float = 1.0,
    beta: float | Sequence[float] | None = None,
    count_rule: CountRule = "selections",
) -> Sample:
    """Fed-CBS's draw of m distinct clients in round ``t`` (>= 1), ``counts[i]`` the times client i was
    selected before (T_i by ``count_rule``, :func:`exploration_bonus`): one :func:`step_probabilities` draw per step.
    ``inclusion`` is NaN (:func:`estimate_inclusion`)."""
    where = "fedcbs_sample"
    rng = design.check_rng(rng, where)
    H = _histograms(histograms, where)
    m = design.check_count(m, "m", where, minimum=1)
    if m > H.shape[0]:
        raise ValueError(f"{where}: m = {m} exceeds the number of clients ({H.shape[0]})")
    T = design.nonnegative_vector(counts, "counts", where)
    if T.size != H.shape[0]:
        raise ValueError(f"{where}: counts has {T.size} entries, expected {H.shape[0]}")
    betas = step_exponents(m, beta)
    bonus = exploration_bonus(T, t, lam, count_rule)
    chosen: list[int] = []
    for k in range(m):
        p = _step(H, np.asarray(chosen, dtype=np.int64), float(betas[k]), bonus if k == 0 else None)
        chosen.append(int(rng.choice(p.size, p=p)))
    ids = np.sort(np.asarray(chosen, dtype=np.int64))
    return Sample(ids, np.full(m, np.nan), np.ones(m, dtype=np.int64))


def estimate_inclusion(
    histograms: np.ndarray,
    m: int,
    draws: int,
    rng: np.random.Generator,
    *,
    t: int,
    counts: np.ndarray,
    lam: float = 1.0,
    beta: float | Sequence[float] | None = None,
    count_rule: CountRule = "selections",
) -> np.ndarray:
    """Monte Carlo P(i in S) of :func:`fedcbs_sample` with the inputs frozen (standard error
    sqrt(pi (1 - pi) / draws)); sums to exactly m."""
    H = _histograms(histograms, "estimate_inclusion")
    return design.replay_inclusion(
        lambda g: fedcbs_sample(H, m, g, t=t, counts=counts, lam=lam, beta=beta, count_rule=count_rule), H.shape[0], draws, rng
    )


# --- the client sampler ----------------------------------------------------------------------------------------

#: What Fed-CBS does without a lost label probe (the round record's ``sampler_lost_probes_instead``).
LOST_PROBE = "drew only among the clients whose label histogram it holds, and probes the others again next round"


def draws_among(m: int, state: "FedCBSState") -> int:
    """How many clients a round draws: m, or every client whose histogram the server holds when fewer are held
    (with every histogram held, m itself: more than N is refused)."""
    return m if state.known is None or state.known.all() else min(m, int(np.count_nonzero(state.known)))


def among_known(state: "FedCBSState", draw: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """The client ids ``draw(histograms, counts)`` picks among the clients whose histogram the server holds
    (``state.known``; its positions mapped back to ids)."""
    known = np.arange(len(state.histograms)) if state.known is None else np.flatnonzero(state.known)
    ids: np.ndarray = known[draw(state.histograms[known], state.counts[known])]
    return ids



class FedCBSHeld(TypedDict, total=False):
    """What Fed-CBS's server holds between rounds: the clients' label histograms (one row each, 0 until a client's
    probe arrives), whose it holds (``known``) and how often each was selected (the counts T_i)."""

    histograms: np.ndarray
    known: np.ndarray
    counts: np.ndarray


@dataclass(frozen=True)
class FedCBSState:
    """The inputs of one round's Fed-CBS draw, frozen: the clients' label histograms (one row each), how often each
    was selected before, the round t (1-based) of the exploration bonus, and whose histograms the server holds (a
    client whose label probe was lost has none yet: it cannot be drawn, :func:`among_known`)."""

    histograms: np.ndarray
    counts: np.ndarray
    t: int
    known: np.ndarray | None = None  # the clients whose histogram arrived (None: every client's)


@dataclass(frozen=True)
@checks.constrained(m=checks.COUNT, lam=checks.NON_NEGATIVE, beta=[checks.POSITIVE, None])
class FedCBSClients(adaptive.Replayed):
    """Fed-CBS (Zhang et al., ICML 2023) as a client sampler: m clients drawn one at a time, each step favouring
    the client that lowers the pooled class imbalance QCID of the cohort (:func:`fedcbs_sample`; first step with
    the exploration bonus ``lam`` sqrt(3 ln t / (2 T_i)), T_i by ``count_rule``; exponents beta_k = k, or ``beta`` at
    every step).

    The label histograms come from one probe of every client (``statistics="labels"``) the first time the sampler
    runs (they do not change), kept by the server with the participation counts T_i (a client whose label probe was
    lost is probed again the next round and is not drawn until its histogram arrives; the round record says so). **Privacy**: the paper
    computes QCID under homomorphic encryption, so its server learns only the pairwise inner products of the
    histograms; here each client sends its histogram in the clear, which the privacy ledger records as an
    unprotected release with a warning (docs/privacy.md). Inclusion probabilities: estimated
    (:meth:`estimate_inclusion`); the paper aggregates with FedAvg's size-weighted mean, biased by design."""

    m: int = 10
    lam: float = 1.0
    beta: float | None = None
    count_rule: CountRule = "selections"
    capabilities: ClassVar[ClientSamplerCapabilities] = ClientSamplerCapabilities(
        inclusion_kind=InclusionKind.ESTIMATED, server_learns=tuple(map(Learns, SERVER_LEARNS["fedcbs"])), estimates_inclusion=True)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return float(min(self.m, num_clients))

    def select(self, ctx: "RoundContext") -> Cohort:
        state = self.frozen_state(ctx)
        ids = among_known(state, lambda h, c: fedcbs_sample(h, draws_among(self.m, state), ctx.rng("clients"), t=state.t, counts=c,
                                                            lam=self.lam, beta=self.beta, count_rule=self.count_rule).ids)
        adaptive.sampler_state(ctx, FedCBSHeld)["counts"][ids] += 1
        return Cohort(ids, np.full(len(ids), np.nan), ctx.num_clients, info={"inclusion_kind": InclusionKind.ESTIMATED.value})

    def histograms(self, ctx: "RoundContext") -> tuple[np.ndarray, np.ndarray]:
        """Every client's label histogram and whether the server holds it: probed once (every client, the first round
        the sampler runs), then kept; a client whose probe was lost is probed again the next round (until then its
        row is 0 and it cannot be drawn)."""
        state = adaptive.sampler_state(ctx, FedCBSHeld)
        if "histograms" not in state:
            state["known"] = np.zeros(ctx.num_clients, dtype=bool)
            state["counts"] = np.zeros(ctx.num_clients, dtype=np.int64)
        known = state.setdefault("known", np.ones(ctx.num_clients, dtype=bool))  # a checkpoint from before: every one
        if known.all():
            adaptive.no_probes(ctx)
            return state["histograms"], known
        ask = np.flatnonzero(~known)
        request = ProbeRequest(params=ctx.params, statistics="labels")
        replies, arrived = adaptive.probe_partial(ctx, ask, request, LOST_PROBE, needs_one=not known.any())
        rows = [np.asarray(r.label_counts, dtype=np.int64) for r in adaptive.arrived_reports(replies)]
        if "histograms" not in state:  # at least one arrived (else the round failed)
            state["histograms"] = np.zeros((ctx.num_clients, len(rows[0])), dtype=np.int64)
        if rows:
            state["histograms"][ask[arrived]] = rows
            known[ask[arrived]] = True
        return state["histograms"], known

    def frozen_state(self, ctx: "RoundContext") -> FedCBSState:
        """This round's inputs (the histograms, the counts T_i so far, t = round + 1, whose histograms are held),
        probing the histograms the first time (and the lost ones again)."""
        histograms, known = self.histograms(ctx)
        return FedCBSState(histograms, adaptive.sampler_state(ctx, FedCBSHeld)["counts"].copy(), ctx.round + 1, known.copy())

    def replay(self, state: FedCBSState, draws: int = 1000, *, seed: int = 0, round: int = 0) -> np.ndarray:
        """P(i in S) of one round from the frozen ``state``: ``draws`` replays of :func:`fedcbs_sample` read from the
        run's stream of (``seed``, ``round``) (:func:`~fedsample.sampling.adaptive.replay_rng`); standard error
        sqrt(pi (1 - pi) / draws), sum exactly m."""
        checks.check("draws", draws, checks.COUNT, owner="FedCBSClients.replay")
        rng, pi = adaptive.replay_rng(seed, round), np.zeros(len(state.histograms))
        known = np.arange(len(pi)) if state.known is None else np.flatnonzero(state.known)
        pi[known] = estimate_inclusion(state.histograms[known], draws_among(self.m, state), draws, rng, t=state.t,
                                       counts=state.counts[known], lam=self.lam, beta=self.beta, count_rule=self.count_rule)
        return pi
