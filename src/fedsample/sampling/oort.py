"""Oort's participant selection, statistical utility only (Lai, Zhu, Madhyastha & Chowdhury, "Oort: Efficient
federated learning via guided participant selection", OSDI 2021). The system-speed part of Oort (the preferred
round duration T, the penalty (T / t_i)^alpha and the pacer) is left out: there is no system-time model here.

- Statistical utility (:func:`statistical_utility`): U_i = |B_i| sqrt((1/|B_i|) sum_{k in B_i}
  Loss(k)^2), from the size of the client's last training sample set B_i and its mean squared per-sample loss,
  which the client reports after participating.
- Staleness (Algorithm 1, :func:`staleness_bonus`): an explored client's utility gains sqrt(0.1 log R / L_i),
  R the current round and L_i the round it last participated, so clients not seen for long are re-tried.
  (The authors' released code normalizes utilities and uses the time since the last participation instead;
  we follow the paper's formula.)
- Exploration-exploitation (Algorithm 1, :func:`oort_select`): a fraction epsilon of the m slots goes to
  clients never explored, the rest to explored clients. The exploitation keeps the explored clients whose
  utility is at least c times the utility of the k-th best (k = the number of exploitation slots; c = 0.95 by
  default, the paper's "confidence interval" cut-off) and samples k of them without replacement with
  probability proportional to utility. Unexplored clients are drawn uniformly (the paper prefers faster ones
  by their system speed, which we do not model). epsilon starts at 0.9 and decays by a factor each round to
  a floor (:func:`exploration_rate`); the released code's factor and floor vary (0.95 or 0.98, 0.2 or 0.3),
  so both are parameters. When fewer than epsilon m clients are unexplored, the remaining slots are
  exploited.

The aggregation is FedAvg's. Selection is biased on purpose (towards high loss); the inclusion probabilities
have no closed form: :func:`estimate_inclusion` replays the draw from frozen inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypedDict

import numpy as np

from fedsample import checks
from fedsample.parts import ClientSamplerCapabilities, InclusionKind, Learns
from fedsample.rounds import Cohort
from fedsample.sampling import adaptive, design
from fedsample.sampling.design import Sample

if TYPE_CHECKING:
    from fedsample.rounds import ReplyList, RoundContext

__all__ = [
    "OortClients",
    "OortHeld",
    "OortState",
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "STATISTICAL_UTILITY",
    "StatisticalUtility",
    "statistical_utilities",
    "statistical_utility",
    "staleness_bonus",
    "exploration_rate",
    "slot_split",
    "oort_select",
    "estimate_inclusion",
]

#: Kind of inclusion probabilities.
PROBABILITY_KIND = {"oort": "estimated"}
#: What the server must learn: each participant's training-set size and mean squared per-sample loss (its
#: statistical utility), and the round it last participated.
SERVER_LEARNS = {"oort": ("losses", "participation")}
#: Tolerance on epsilon * m when it is rounded down to a number of slots.
SLOT_TOLERANCE = 1e-9


def statistical_utility(batch_sizes: np.ndarray, mean_squared_losses: np.ndarray) -> np.ndarray:
    """U_i = |B_i| sqrt(mean_{k in B_i} Loss(k)^2) (the paper's statistical utility), one entry per client."""
    where = "statistical_utility"
    B = design.nonnegative_vector(batch_sizes, "batch_sizes", where)
    L2 = design.nonnegative_vector(mean_squared_losses, "mean_squared_losses", where)
    if B.shape != L2.shape:
        raise ValueError(f"{where}: batch_sizes and mean_squared_losses differ in length ({B.size} vs {L2.size})")
    utility: np.ndarray = B * np.sqrt(L2)
    return utility


def statistical_utilities(losses: np.ndarray, member: np.ndarray, clients: int) -> np.ndarray:
    """Oort's statistical utility U_c = |B_c| sqrt((1/|B_c|) sum_{s in B_c} loss_s^2) of each of ``clients`` members
    (Lai et al. 2021, Sec. 4.2; :func:`statistical_utility`) from the per-sample ``losses`` of their drawn samples,
    ``member[s]`` the member of sample s; 0 for a member that drew nothing. The losses are taken at the parameters
    the client received (Oort collects them during local training)."""
    counts = np.bincount(member, minlength=clients).astype(np.float64)
    squares = np.bincount(member, weights=np.asarray(losses, dtype=np.float64) ** 2, minlength=clients)
    return statistical_utility(counts, squares / np.maximum(counts, 1.0))


@dataclass(frozen=True)
class StatisticalUtility:
    """Oort's statistical utility as a reply statistic (:class:`fedsample.messages.ReplyStatistic`): each client
    adds |B| sqrt(mean_{s in B} loss_s^2) of its drawn sample B at the received parameters to its training reply
    under ``utility`` (:func:`statistical_utilities`); :class:`OortClients` reads it."""

    name: str = "utility"
    released: str = "statistical utilities"

    def of_cohort(self, losses: np.ndarray, member: np.ndarray, clients: int) -> np.ndarray:
        return statistical_utilities(losses, member, clients)


#: The statistic :class:`OortClients` declares it reads (``reads_replies``).
STATISTICAL_UTILITY = StatisticalUtility()


def staleness_bonus(last_round: np.ndarray, round: int) -> np.ndarray:
    """sqrt(0.1 log R / L_i) (Algorithm 1), R = ``round`` >= 1 the current round and L_i >= 1 the round client
    i last participated (1-based)."""
    where = "staleness_bonus"
    R = design.check_count(round, "round", where, minimum=1)
    L = design.nonnegative_vector(last_round, "last_round", where)
    if np.any(L < 1) or np.any(L > R):
        raise ValueError(f"{where}: last_round must lie in [1, round = {R}]")
    bonus: np.ndarray = np.sqrt(0.1 * np.log(R) / L)
    return bonus


def exploration_rate(round: int, initial: float = 0.9, decay: float = 0.98, floor: float = 0.2) -> float:
    """epsilon in ``round`` (0-based): ``initial`` multiplied by ``decay`` once per round, never below
    ``floor``."""
    where = "exploration_rate"
    round = design.check_count(round, "round", where)
    for name, value in (("initial", initial), ("decay", decay), ("floor", floor)):
        if not (0 <= value <= 1):
            raise ValueError(f"{where}: {name} must be in [0, 1], got {value!r}")
    return float(max(initial * decay**round, floor))


def slot_split(m: int, epsilon: float, explored: int, unexplored: int) -> tuple[int, int]:
    """(exploit, explore): floor((1 - epsilon) m) exploitation slots, raised when fewer than the remaining
    slots' worth of clients are unexplored, and never more than the explored clients."""
    where = "slot_split"
    m = design.check_count(m, "m", where, minimum=1)
    if not (0 <= epsilon <= 1):
        raise ValueError(f"{where}: epsilon must be in [0, 1], got {epsilon!r}")
    if m > explored + unexplored:
        raise ValueError(f"{where}: m = {m} exceeds the number of clients ({explored + unexplored})")
    exploit = int(np.floor((1.0 - epsilon) * m + SLOT_TOLERANCE))
    exploit = min(max(exploit, m - unexplored), explored)
    return exploit, m - exploit


def _exploit(utility: np.ndarray, pool: np.ndarray, k: int, cutoff: float, rng: np.random.Generator) -> np.ndarray:
    """k of ``pool`` by utility: those at or above cutoff x the k-th best, drawn without replacement
    proportionally to utility (uniformly where the utilities run out)."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    u = utility[pool]
    threshold = cutoff * np.sort(u)[::-1][k - 1]
    eligible = pool[u >= threshold]
    w = utility[eligible]
    positive = int(np.count_nonzero(w))
    if positive >= k:
        return rng.choice(eligible, size=k, replace=False, p=w / w.sum())
    zero = eligible[w == 0]
    return np.concatenate([eligible[w > 0], rng.choice(zero, size=k - positive, replace=False)])


def oort_select(
    utility: np.ndarray,
    explored: np.ndarray,
    m: int,
    epsilon: float,
    rng: np.random.Generator,
    cutoff: float = 0.95,
) -> Sample:
    """Algorithm 1 without the system terms: ``utility`` per client (statistical utility plus staleness
    bonus; read for explored clients only), ``explored`` a boolean mask, ``epsilon`` the exploration rate.
    ``inclusion`` is NaN (:func:`estimate_inclusion`)."""
    where = "oort_select"
    rng = design.check_rng(rng, where)
    values = np.asarray(utility, dtype=np.float64)
    seen = np.asarray(explored)
    if seen.dtype != bool or seen.shape != values.shape or values.ndim != 1:
        raise ValueError(f"{where}: explored must be a boolean mask with one entry per client ({values.size})")
    u = design.nonnegative_vector(np.where(seen, values, 0.0), "utility", where)
    if not (0 < cutoff <= 1):
        raise ValueError(f"{where}: cutoff must be in (0, 1], got {cutoff!r}")
    known, new = np.flatnonzero(seen), np.flatnonzero(~seen)
    exploit, explore = slot_split(m, epsilon, known.size, new.size)
    ids = np.concatenate([_exploit(u, known, exploit, cutoff, rng), rng.choice(new, size=explore, replace=False)])
    ids = np.sort(ids.astype(np.int64))
    return Sample(ids, np.full(ids.size, np.nan), np.ones(ids.size, dtype=np.int64))


def estimate_inclusion(
    utility: np.ndarray,
    explored: np.ndarray,
    m: int,
    epsilon: float,
    draws: int,
    rng: np.random.Generator,
    cutoff: float = 0.95,
) -> np.ndarray:
    """Monte Carlo P(i in S) of :func:`oort_select` with the inputs frozen (standard error
    sqrt(pi (1 - pi) / draws)); sums to exactly m."""
    N = np.asarray(explored).size
    return design.replay_inclusion(lambda g: oort_select(utility, explored, m, epsilon, g, cutoff), N, draws, rng)


# --- the client sampler ----------------------------------------------------------------------------------------


class OortHeld(TypedDict, total=False):
    """What Oort's server holds between rounds: each client's last reported utility, whether it was explored, and
    the round (1-based) of its last participation (0: never)."""

    utility: np.ndarray
    explored: np.ndarray
    last: np.ndarray


@dataclass(frozen=True)
class OortState:
    """The inputs of one round's Oort selection, frozen: each explored client's utility with its staleness bonus,
    which clients are explored, and the round's exploration rate epsilon."""

    utility: np.ndarray
    explored: np.ndarray
    epsilon: float


@dataclass(frozen=True)
@checks.constrained(
    m=checks.COUNT, epsilon=checks.PROBABILITY, decay=checks.PROBABILITY, floor=checks.PROBABILITY,
    cutoff=checks.reals(0, 1, "(]"), staleness=checks.BOOLEAN,
)
class OortClients(adaptive.Replayed):
    """Oort's participant selection (Lai et al., OSDI 2021), statistical utility only, as a client sampler: there is
    no system-time model in fedsample, so Oort's preferred duration, its (T / t_i)^alpha penalty and its pacer are
    left out, and unexplored clients are drawn uniformly (Oort prefers fast ones).

    Each round :func:`oort_select`: a fraction epsilon of the m slots (``epsilon``, times ``decay`` every round, at
    least ``floor``: :func:`exploration_rate`) goes to clients never explored, the rest to explored clients whose
    utility is at least ``cutoff`` times the k-th best, drawn proportionally to utility. A client's utility is the
    statistical utility |B_i| sqrt(mean_{s in B_i} loss_s^2) it reports with its training reply (its capabilities read
    the :data:`STATISTICAL_UTILITY` statistic, so the payload asks every client for it; the losses at the model it
    received, on what it drew), plus the staleness bonus
    sqrt(0.1 log R / L_i) with ``staleness`` (:func:`staleness_bonus`). Server-held state (in checkpoints): the
    utilities, who was explored, the round of each client's last participation.

    Inclusion probabilities: estimated (:meth:`estimate_inclusion`); FedAvg's aggregation is biased by design. It
    reads each participant's training reply, so it refuses a secure sum and noised replies."""

    m: int = 10
    epsilon: float = 0.9
    decay: float = 0.98
    floor: float = 0.2
    cutoff: float = 0.95
    staleness: bool = True
    capabilities: ClassVar[ClientSamplerCapabilities] = ClientSamplerCapabilities(
        inclusion_kind=InclusionKind.ESTIMATED, server_learns=tuple(map(Learns, SERVER_LEARNS["oort"])), reads_replies=(STATISTICAL_UTILITY,),
        estimates_inclusion=True)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return float(min(self.m, num_clients))

    def select(self, ctx: "RoundContext") -> Cohort:
        if self.m > ctx.num_clients:
            checks.fail("m", self.m, f"at most the number of clients ({ctx.num_clients})", "OortClients")
        adaptive.no_probes(ctx)
        state = self.frozen_state(ctx)
        sample = oort_select(state.utility, state.explored, self.m, state.epsilon, ctx.rng("clients"), self.cutoff)
        ctx.log["exploration_rate"] = state.epsilon
        return Cohort(sample.ids, np.full(len(sample), np.nan), ctx.num_clients, info={"inclusion_kind": InclusionKind.ESTIMATED.value})

    def held(self, ctx: "RoundContext") -> OortHeld:
        """The server-held state: utilities, explored mask, round (1-based) of the last participation (0: never)."""
        state = adaptive.sampler_state(ctx, OortHeld)
        if "utility" not in state:
            N = ctx.num_clients
            state.update({"utility": np.zeros(N), "explored": np.zeros(N, dtype=bool), "last": np.zeros(N, dtype=np.int64)})
        return state

    def frozen_state(self, ctx: "RoundContext") -> OortState:
        """This round's inputs: the explored clients' utilities (plus the staleness bonus of round R = round + 1),
        who is explored, and epsilon."""
        state = self.held(ctx)
        utility = state["utility"].copy()
        seen = state["explored"]
        if self.staleness and seen.any():
            utility[seen] += staleness_bonus(state["last"][seen], ctx.round + 1)
        return OortState(utility, seen.copy(), exploration_rate(ctx.round, self.epsilon, self.decay, self.floor))

    def observe(self, ctx: "RoundContext", cohort: Cohort, replies: "ReplyList") -> None:
        """The participants' reported utilities (0 for one that drew nothing); they are explored from now on."""
        state = self.held(ctx)
        got = replies.received_positions()
        ids = cohort.ids[got]
        name = STATISTICAL_UTILITY.name
        values = np.array([replies.report(int(i)).statistics.get(name) for i in got], dtype=object)  # received: TrainReports
        utility = np.array([0.0 if v is None or not np.isfinite(v) else float(v) for v in values], dtype=np.float64)
        state["utility"][ids] = utility
        state["explored"][ids] = True
        state["last"][ids] = ctx.round + 1

    def replay(self, state: OortState, draws: int = 1000, *, seed: int = 0, round: int = 0) -> np.ndarray:
        """P(i in S) of one round from the frozen ``state``: ``draws`` replays of :func:`oort_select` read from the run's
        stream of (``seed``, ``round``) (:func:`~fedsample.sampling.adaptive.replay_rng`); standard error
        sqrt(pi (1 - pi) / draws), sum exactly m."""
        checks.check("draws", draws, checks.COUNT, owner="OortClients.replay")
        return estimate_inclusion(state.utility, state.explored, self.m, state.epsilon, draws, adaptive.replay_rng(seed, round),
                                  self.cutoff)
