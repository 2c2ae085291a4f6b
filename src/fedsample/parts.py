"""The parts a :class:`~fedsample.strategy.Strategy` is made of, declared: what each kind of part must do, and
what it declares about itself so that the strategy can check a composition at construction and the engines can
run it without knowing its class.

Seven kinds of part (docs/architecture.md):

- :class:`ClientSampler` picks the cohort (``select``) and declares its inclusion probabilities on the
  :class:`~fedsample.rounds.Cohort` it returns, how they are known (:class:`InclusionKind`), what the server learns
  to run it (:class:`Learns`), the sizes it needs and its expected cohort; a sampler that chooses among clients that
  have already trained declares it (:class:`TrainsFirst`), one that learns from the cohort's replies has ``observe``;
- :class:`DataSampler` sends each chosen client a :class:`DataPlan`, which the client executes on its own data
  (``draw``); a plan that can be drawn for a whole cohort in one pass declares it (:class:`CohortPlan`);
- :class:`LocalSolver` computes a client's update (``run``); a solver that declares its arithmetic
  (:class:`ScheduledSolver`: its batch schedule, step rule and FedNova normalizer) is run by every engine from
  that one declaration;
- :class:`Aggregator` combines the updates, :class:`ServerOptimizer` applies the result;
- :class:`SizeReporting` says how the server learns data sizes, :class:`UpdatePrivacy` what a client does to its
  update before sending it (clipping and noise).

Every part makes the declarations of :data:`MUST_DECLARE` itself (how its inclusion probabilities are known, what
the server learns, whether it divides by them: a default would claim more than the part knows); the other declared
properties a part may omit take the defaults in :data:`DEFAULTS`, which only claim less. A leaf module: it imports
:mod:`fedsample.rounds` and :mod:`fedsample.messages` only.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from fedsample.messages import ClientContext, LocalSample, Params, PerClient, SizeQuery
from fedsample.rounds import Cohort, RoundContext

if TYPE_CHECKING:
    from fedsample.rng import CohortRandom

__all__ = [
    "Aggregator", "BatchSchedule", "Census", "ClientSampler", "CohortPlan", "DEFAULTS", "DataPlan", "DataSampler", "Design",
    "DesignedClients", "DesignedPlan", "DrawnCohort", "FixedSize", "InclusionKind", "Poisson", "Undeclared", "WithReplacement",
    "DECLARATIONS", "client_sampling_design", "cohort_problem", "declaration_problem", "plan_sampling_design", "Learns", "Limit", "LocalSolver", "MUST_DECLARE", "REQUIRED", "ScheduledSolver", "ServerOptimizer", "SizeNeed", "SizeReporting",
    "StepRule", "TrainsFirst", "UpdatePrivacy", "batched", "declared", "describe", "inclusion_kind", "missing_methods",
    "replies_read", "server_learns", "settings_of", "trains_first", "undeclared",
]


class SizeNeed(Enum):
    """What a part needs to know about the clients' data sizes (``needs_sizes``), from nothing to every client's
    exact size; :meth:`met_by` says whether a strategy's size reporting provides it."""

    NONE = "none"
    """Nothing."""
    COHORT = "cohort"
    """Size reports, exact or randomized, of at least the cohort: every client's before selection or the cohort's
    after it (size-weighted means, FedSampling's total N~, FedSTaS's participant total n~)."""
    COHORT_EXACT = "cohort_exact"
    """The cohort's exact sizes, asked of every client or of the cohort (the size-weighted stratified mean)."""
    EXACT_ALL = "exact_all"
    """Every client's exact size before selection (size-proportional sampling, ``samples_per_round`` samplers)."""

    def met_by(self, sizes: "SizeReporting | None") -> bool:
        """Whether the size reporting ``sizes`` (None: none) gives what this need asks for."""
        if self is SizeNeed.NONE:
            return True
        if sizes is None:
            return False
        if self is SizeNeed.COHORT:
            return True
        exact = bool(declared(sizes, "exact"))
        return exact if self is SizeNeed.COHORT_EXACT else exact and getattr(sizes, "scope", None) == "all"

    @property
    def wording(self) -> str:
        return {
            SizeNeed.NONE: "no sizes", SizeNeed.COHORT: "size reports (exact or randomized) of at least the cohort",
            SizeNeed.COHORT_EXACT: "exact sizes of the cohort", SizeNeed.EXACT_ALL: "exact sizes of every client before selection",
        }[self]

    @property
    def remedy(self) -> str:
        return {
            SizeNeed.NONE: "", SizeNeed.COHORT: "pass sizes=ExactSizes(...) or RandomizedSizes(...)",
            SizeNeed.COHORT_EXACT: "pass sizes=ExactSizes(scope='cohort') or ExactSizes()",
            SizeNeed.EXACT_ALL: "pass sizes=ExactSizes()",
        }[self]


@dataclass(frozen=True)
class Limit:
    """A count a part asks of the data, which the data must hold (``limits``): ``name`` the parameter as a user
    gives it (``samples_per_round (K)``), its ``value``, and ``unit``: ``"samples"`` (at most the training data's
    size: a round cannot keep more samples than there are) or ``"clients"`` (at most the number of clients: a round
    cannot choose more distinct clients than there are). :meth:`fedsample.strategy.Strategy.check_data` refuses a
    strategy whose part asks for more, where the data meets the strategy (``simulate``, ``diagnose``, ``fedsample
    run``), instead of the part capping it silently each round."""

    name: str
    value: int
    unit: Literal["samples", "clients"]


class InclusionKind(Enum):
    """How a client sampler's inclusion probabilities pi_k = P(k in S) are known (its declared ``inclusion_kind``,
    which every client sampler must declare: :data:`MUST_DECLARE`). The round record (``inclusion``, and ``bias`` where the aggregate cannot be unbiased)
    and ``fedsample.diagnose`` state it."""

    EXACT = "exact"
    """In closed form, per draw: every cohort carries each member's true pi_k (``Cohort.inclusion``) and, for draws
    with replacement (multisets), how many times it was drawn (``multiplicity``) and its expected number of draws
    (``expected_draws``), so Horvitz-Thompson and Hansen-Hurwitz weights are available."""
    ESTIMATED = "estimated"
    """No closed form: the cohort's pi_k are NaN; the sampler may offer ``estimate_inclusion(ctx, draws)``, which
    replays the round's selection ``draws`` times from the frozen state its ``select`` left in ``ctx.state`` (with
    the round's replay stream ``ctx.rng("replay")``) and returns every client's inclusion frequency. The aggregate
    is biased by design."""
    DEGENERATE = "degenerate"
    """A deterministic selection (pi_k in {0, 1}, given the state): no unbiased estimator of the full participation
    exists, and none is pretended (no division by pi_k = 1)."""

    @property
    def bias(self) -> str | None:
        """What the round record says about the aggregate's bias (None: the probabilities are exact)."""
        return {
            InclusionKind.EXACT: None,
            InclusionKind.ESTIMATED: "biased by design: the inclusion probabilities have no closed form (estimate_inclusion replays them)",
            InclusionKind.DEGENERATE: "no unbiased estimator exists: the selection is deterministic (pi in {0, 1})",
        }[self]


class Learns(Enum):
    """One kind of information the server receives from clients to run a client sampler (a sampler's declared
    ``server_learns``, a tuple of these, which every client sampler must declare: () for nothing beyond the training
    replies). The values are the names
    used in the published samplers' ``SERVER_LEARNS`` tables (``fedsample.sampling.*``) and in docs/privacy.md."""

    SIZES = "sizes"
    """Every client's exact data size."""
    LOSSES = "losses"
    """Losses at the global model on the client's data (a probe)."""
    MINIBATCH_LOSSES = "minibatch_losses"
    """Losses on a minibatch."""
    STALE_LOSSES = "stale_losses"
    """The training losses of the clients' last participation (already in their replies)."""
    UPDATE_NORMS = "update_norms"
    """The norm of every client's local update, before the server chooses whose update it receives."""
    UPDATE_NORM_SUMS = "update_norm_sums"
    """Only sums of update norms (secure aggregation)."""
    GRADIENTS = "gradients"
    """Full gradients or updates of the clients (probed, or kept from their replies)."""
    COMPRESSED_GRADIENTS = "compressed_gradients"
    """Compressed gradients (FedSTS's d' numbers)."""
    GRADIENT_NORMS = "gradient_norms"
    """Full-gradient norms (a probe)."""
    LOCAL_VARIANCES = "local_variances"
    """Local gradient variances (per-sample statistics summed on the client)."""
    LABEL_HISTOGRAMS = "label_histograms"
    """Each client's label counts."""
    PARTICIPATION = "participation"
    """When each client last took part (which the server knows from its own cohorts)."""
    PARTICIPATION_COUNTS = "participation_counts"
    """How often each client took part (which the server knows from its own cohorts)."""


# --- sampling designs: what a sampler declares, which the privacy ledger reads ------------------------------------


@dataclass(frozen=True)
class Census:
    """Every unit, no sampling (pi_k = 1): ``AllClients``, ``AllSamples``."""


@dataclass(frozen=True)
class Poisson:
    """Each unit independently with one data-independent probability ``q`` (Poisson or Bernoulli sampling,
    pi_k = q): the amplification of a Poisson-sampled Gaussian mechanism (dp-accounting's ``PoissonSampledDpEvent``)."""

    q: float

    def __post_init__(self) -> None:
        if not 0 <= self.q <= 1:
            raise ValueError(f"Poisson(q): q must be in [0, 1], got {self.q!r}")


@dataclass(frozen=True)
class FixedSize:
    """``m`` of ``N`` units uniformly without replacement (pi_k = m/N): dp-accounting's
    ``SampledWithoutReplacementDpEvent`` under replace-one."""

    m: int
    N: int

    def __post_init__(self) -> None:
        if not 0 < self.m <= self.N:
            raise ValueError(f"FixedSize(m, N): m must be in 1..N, got m={self.m!r}, N={self.N!r}")


@dataclass(frozen=True)
class WithReplacement:
    """``m`` independent draws with probabilities ``p`` (a multiset; Hansen-Hurwitz weights m p_k). The ledger
    accounts no amplification for it."""

    m: int
    p: tuple[float, ...]


@dataclass(frozen=True)
class Undeclared:
    """No data-independent design the ledger can use, and why (a sampler whose probabilities follow from the
    clients' sizes, losses or updates)."""

    reason: str


Design = Census | Poisson | FixedSize | WithReplacement | Undeclared
"""A sampler's sampling design, as it declares it (``sampling_design``)."""


@runtime_checkable
class DesignedClients(Protocol):
    """A client sampler that declares its design for a population of ``population`` clients."""

    def sampling_design(self, population: int) -> Design: ...


@runtime_checkable
class DesignedPlan(Protocol):
    """A data plan that declares how it samples a client's records."""

    def sampling_design(self) -> Design: ...


def client_sampling_design(sampler: object, population: int) -> Design:
    """The design ``sampler`` declares for ``population`` clients (a sampler that declares none: :class:`Undeclared`).
    Every sampler, a user's own included, is accounted for from this declaration, never from its class."""
    if isinstance(sampler, DesignedClients):
        return sampler.sampling_design(population)
    return Undeclared(f"{type(sampler).__name__}'s inclusion probabilities are not data-independent and exact")


def plan_sampling_design(plan: object) -> Design:
    """The design a data plan declares for a client's records (none declared: :class:`Undeclared`)."""
    if isinstance(plan, DesignedPlan):
        return plan.sampling_design()
    return Undeclared(f"the data plan {type(plan).__name__} declares no sampling design")


# --- what a data plan drew, and what a solver does with it ------------------------------------------------------


@dataclass(frozen=True)
class DrawnCohort:
    """What a cohort's data plans drew, as flat arrays in cohort order (this stays on the clients' side of the
    door): ``member[i]`` is the cohort position of drawn row i and ``position[i]`` its position in that member's
    data; ``counts[c]`` rows belong to member c; ``scale`` is the plan's per-row gradient scale (None: all 1).
    ``samples`` holds each member's :class:`~fedsample.messages.LocalSample` where the plans were drawn client by
    client (their ``probs``, ``block`` and ``step_scale``); a cohort drawn in one pass has none."""

    member: np.ndarray
    position: np.ndarray
    counts: np.ndarray
    scale: np.ndarray | None = None
    samples: Sequence[LocalSample] | None = None

    @classmethod
    def flat(cls, member: np.ndarray, position: np.ndarray, clients: int) -> "DrawnCohort":
        """From one pass over the cohort (``member`` ascending)."""
        member = np.asarray(member, dtype=np.int64)
        return cls(member, np.asarray(position, dtype=np.int64), np.bincount(member, minlength=clients))

    @classmethod
    def of(cls, samples: Sequence[LocalSample]) -> "DrawnCohort":
        """From each member's own draw."""
        if len(samples) == 1:  # one client (the loop)
            only = samples[0]
            n = len(only)
            scale = None if only.scale is None else np.asarray(only.scale, dtype=np.float64)
            return cls(np.zeros(n, dtype=np.int64), np.asarray(only.indices, dtype=np.int64), np.array([n]), scale, samples)
        counts = np.fromiter((len(s) for s in samples), dtype=np.int64, count=len(samples))
        member = np.repeat(np.arange(len(samples)), counts)
        position = np.concatenate([np.asarray(s.indices, dtype=np.int64) for s in samples] + [np.zeros(0, np.int64)])
        scale = None
        if any(s.scale is not None for s in samples):
            scale = np.concatenate([np.ones(len(s)) if s.scale is None else np.asarray(s.scale, dtype=np.float64) for s in samples])
        return cls(member, position, counts, scale, samples)

    def __len__(self) -> int:
        return len(self.counts)

    @cached_property
    def starts(self) -> np.ndarray:
        """The first row of each member."""
        return np.cumsum(self.counts) - self.counts

    def sample(self, c: int) -> LocalSample:
        """Member c's draw as the client saw it."""
        if self.samples is not None:
            return self.samples[c]
        start = int(self.starts[c])
        return LocalSample(self.position[start : start + int(self.counts[c])])


@dataclass(frozen=True)
class BatchSchedule:
    """A cohort's local steps, one entry per (member, step, row), ordered by member, then step, then position in
    the step's minibatch: ``client`` the cohort member, ``step`` its local step (0, 1, ...), ``row`` the drawn row
    (an index into :class:`DrawnCohort`'s flat arrays) and ``weight`` the row's weight in its step's loss
    sum_b weight_b * l_b (1/B times the plan's scale for a minibatch mean, 1/K for FedSampling's G_c, ...).
    A member's reported loss is the mean of its steps' weighted losses times ``loss_scale[c]`` (None: 1)."""

    client: np.ndarray
    step: np.ndarray
    row: np.ndarray
    weight: np.ndarray
    clients: int
    loss_scale: np.ndarray | None = None

    @cached_property
    def entries(self) -> np.ndarray:
        """How many entries (rows over all its steps) each member has, counted once: :meth:`steps` and the
        vectorized engine's one-gradient cohort both read it (one pass over the entries instead of two)."""
        return np.bincount(self.client, minlength=self.clients)

    def steps(self) -> np.ndarray:
        """The number of local steps of each member (0: it drew nothing)."""
        per = self.entries
        if self.single_step:  # one step for every member that has entries (the one-gradient cohort)
            return (per > 0).astype(np.int64)
        steps = np.zeros(self.clients, dtype=np.int64)
        has = per > 0
        steps[has] = self.step[np.cumsum(per)[has] - 1] + 1
        return steps

    @property
    def single_step(self) -> bool:
        """Whether every member takes at most one step (the union shortcut: every update is linear in one
        weighted gradient at the global model)."""
        return len(self.step) == 0 or int(self.step.max()) == 0

    def batch_starts(self) -> np.ndarray:
        """Entry positions where each (member, step) minibatch starts, and the end: ``len(starts) - 1`` batches."""
        n = len(self.step)
        if n == 0:
            return np.zeros(1, dtype=np.int64)
        edge = self.step[1:] != self.step[:-1]
        edge |= self.client[1:] != self.client[:-1]
        return np.concatenate(([0], np.flatnonzero(edge) + 1, [n]))


class StepRule(Protocol):
    """A local step's arithmetic (:class:`fedsample.training.local.SGDStep`): with minibatch gradient g,
    d = g + weight_decay * w + prox_mu * (w - w_global); b = momentum * b + d; w = w - lr * b."""

    @property
    def lr(self) -> float: ...

    @property
    def momentum(self) -> float: ...

    @property
    def weight_decay(self) -> float: ...

    @property
    def prox_mu(self) -> float: ...

    def step_weights(self, total: np.ndarray, step: np.ndarray) -> np.ndarray:
        """a_t: the weight of step ``step``'s gradient in the first-order update of a client taking ``total`` steps."""
        ...


# --- the parts ----------------------------------------------------------------------------------------------------


@runtime_checkable
class ClientSampler(Protocol):
    """Who trains this round. ``select`` returns a :class:`~fedsample.rounds.Cohort` carrying every chosen client's
    inclusion probability pi_k. Declares ``needs_sizes`` and ``expected_cohort`` (the expected number of distinct
    clients per round; ``sizes`` are the clients' data sizes, which a sampler whose cohort follows from them needs),
    ``inclusion_kind`` (:class:`InclusionKind`) and ``server_learns`` (what the server receives from clients to run
    it, a tuple of :class:`Learns`), the last two required (:data:`MUST_DECLARE`); optionally:

    - for an estimated ``inclusion_kind``, ``estimate_inclusion(ctx, draws) -> frequencies`` (one per client, from
      the state ``select`` left);
    - ``assumed_weights``: an estimated sampler whose cohorts carry the weights its method assumes
      (``expected_draws``: the DELTA reference implementation's m p_k), so an aggregator that divides by them runs
      (biased, as the round record says);
    - ``observe(ctx, cohort, replies)``: server-held state learnt from the cohort's valid training replies (kept in
      ``ctx.state``, saved with checkpoints), called after aggregation; ``reads_replies`` names the fields of each
      client's reply it reads (``update``, ``loss``, ``utility``: then a secure sum is refused, and noise where it
      reads more than the update);
    - ``draws_carry_sizes``: E[draws of k] is proportional to n_k (MD and clustered sampling), so a uniform mean
      over the draws is unbiased for FedAvg's size-weighted objective;
    - ``stratified`` (its cohorts carry ``strata`` and ``info["stratum_sizes"]``/``["allocation"]``);
    - ``limits`` (the counts it asks of the data, :class:`Limit`);
    - ``expected_trainings(N, sizes)``: clients that train per round, where more train than send (:class:`TrainsFirst`).
    """

    @property
    def needs_sizes(self) -> SizeNeed: ...

    def select(self, ctx: RoundContext) -> Cohort: ...

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float: ...


@runtime_checkable
class TrainsFirst(ClientSampler, Protocol):
    """A sampler that chooses among clients that have already trained (optimal client sampling, Chen et al. 2022).
    ``select(ctx)`` returns who trains (every available client, pi = 1); each of them trains, keeps its update and
    sends only its norm (the procedure ``train_held``); ``select_trained(ctx, trained, held)`` returns the cohort
    whose updates the server then receives (``send_held``), with their inclusion probabilities. The other updates
    never leave their clients. The round record states the cost: ``local_trainings`` for ``cohort`` uploads."""

    def select_trained(self, ctx: RoundContext, trained: Cohort, held: Any) -> Cohort: ...


@runtime_checkable
class DataPlan(Protocol):
    """The server's instruction to one client, executed on the client's own data: ``draw`` returns what it keeps."""

    def draw(self, ctx: ClientContext, rng: np.random.Generator) -> LocalSample: ...


@runtime_checkable
class CohortPlan(DataPlan, Protocol):
    """A plan whose draws for a whole cohort are one pass (every client's own counter-based stream, read in
    bulk): ``draw_cohort`` gives ``(member, position)`` of every kept row, the same rows each client's ``draw``
    keeps, and ``stream_reads`` how many draws each client's draw reads from its stream."""

    def draw_cohort(self, sizes: np.ndarray, rng: "CohortRandom") -> tuple[np.ndarray, np.ndarray]: ...

    def stream_reads(self, sizes: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class DataSampler(Protocol):
    """What each chosen client trains on: ``plan`` returns one :class:`DataPlan` for the cohort, or one per member (PerClient).
    Declares ``needs_sizes`` and ``weighs_by_inclusion`` (required, :data:`MUST_DECLARE`: whether its plans divide by the
    cohort's inclusion probabilities, as ISFedAvg's agent factor does); optionally ``count_drawn`` (its plans make each client add its drawn count to its
    reply), ``shared_settings`` and ``limits`` (:class:`Limit`)."""

    @property
    def needs_sizes(self) -> SizeNeed: ...

    def plan(self, ctx: RoundContext, cohort: Cohort) -> DataPlan | PerClient: ...


@runtime_checkable
class LocalSolver(Protocol):
    """What a chosen client computes on its drawn sample: ``run`` returns the update (a descent direction), the
    steps taken, the mean loss and, optionally, FedNova's ``norm_steps``. The loop runs any solver this way.
    Optionally declares ``per_example``: its update is (1/K) sum_s g_s over the drawn examples with a known K
    (FedSampling's one gradient), which per-example clipping needs."""

    def run(self, ctx: ClientContext, sample: LocalSample, params: Params, round: int, rng: np.random.Generator) -> Any: ...


@runtime_checkable
class ScheduledSolver(LocalSolver, Protocol):
    """A solver that declares its arithmetic once, for every engine:

    - ``schedule(drawn, streams, round)``: every cohort member's minibatches and per-row weights
      (:class:`BatchSchedule`) for what the cohort drew; ``streams[c]`` is member c's ``rng`` positioned after its
      draw (:class:`fedsample.rng.CohortStreams` where the cohort was drawn in one pass);
    - ``step_rule(round)``: the SGD step every local step applies (:class:`StepRule`);
    - ``norm_steps(steps, round)``: FedNova's a_k for each member's step count (None: a_k = tau_k);
    - ``single_step(sizes)``: whether every client takes exactly one step whatever it draws (at most its data);
    - ``batched``: whether the vectorized engine may run the schedule for a whole cohort (False: a solver whose
      ``run`` adds something the schedule does not say, run client by client).
    """

    @property
    def batched(self) -> bool: ...

    def schedule(self, drawn: DrawnCohort, streams: Sequence[np.random.Generator], round: int) -> BatchSchedule: ...

    def step_rule(self, round: int) -> StepRule: ...

    def norm_steps(self, steps: np.ndarray, round: int) -> np.ndarray | None: ...

    def single_step(self, sizes: np.ndarray) -> bool: ...


@runtime_checkable
class Aggregator(Protocol):
    """How the updates combine into one pseudo-gradient (None: nothing usable arrived). Declares ``needs_sizes``,
    ``linear`` (a weighted sum of the updates whose weights are known before the updates are: what a secure sum and
    the engines' fused sums compute) and, required (:data:`MUST_DECLARE`), ``weighs_by_inclusion`` (whether its
    weights divide by the cohort's inclusion probabilities or expected draws); optionally ``needs_strata``,
    ``needs_drawn_count``, ``needs_step_counts`` (its weights need each client's step count, which a noised reply
    withholds), ``equal_weights`` (every received update weighs the same: what per-example noise shares are
    calibrated for), ``shared_settings`` and ``planned_weights(cohort, ctx)`` (the weights :meth:`combine` gives the cohort if every
    update arrives, known before training: an in-process engine then sums the updates as they arrive instead of
    holding them, :mod:`fedsample.federation.summed`)."""

    @property
    def needs_sizes(self) -> SizeNeed: ...

    @property
    def linear(self) -> bool: ...

    def combine(self, reports: Sequence[Any], cohort: Cohort, ctx: RoundContext) -> Params | None: ...


@runtime_checkable
class ServerOptimizer(Protocol):
    """Applies the aggregate: ``step(params, delta, state) -> (params, state)``; ``lr`` is what a learning-rate
    schedule scales."""

    @property
    def lr(self) -> float: ...

    def init_state(self, params: Params) -> dict: ...

    def step(self, params: Params, delta: Params, state: dict) -> tuple[Params, dict]: ...


@runtime_checkable
class SizeReporting(Protocol):
    """How the server learns sizes: the ``query`` clients answer, who is asked (``scope``: every client before
    selection or the cohort after it), whether the answers are ``exact``, and their summary."""

    @property
    def scope(self) -> Literal["all", "cohort"]: ...

    @property
    def exact(self) -> bool: ...

    @property
    def query(self) -> SizeQuery: ...

    def summarize(self, ids: np.ndarray, reports: np.ndarray) -> Any: ...


@runtime_checkable
class UpdatePrivacy(Protocol):
    """What every client does to its reply before sending it (:mod:`fedsample.privacy.noise`: clipping and Gaussian
    noise on the whole update, :class:`~fedsample.privacy.noise.UpdateNoise`, or per example,
    :class:`~fedsample.privacy.noise.PerExampleNoise`); ``noise_multiplier`` is what the privacy ledger composes and
    ``clipping`` ("client" or "example") says which unit is clipped. A part that clips per example also computes the
    gradient itself (``run_solver``, in the place of the solver's ``run``)."""

    @property
    def noise_multiplier(self) -> float: ...

    @property
    def clipping(self) -> str: ...

    def private_reply(self, report: Any, payload: Any, rng: np.random.Generator) -> Any: ...


REQUIRED: dict[str, tuple[str, ...]] = {
    "clients": ("select", "expected_cohort"), "data": ("plan",), "local": ("run",), "aggregate": ("combine",), "server": ("init_state", "step"),
    "sizes": ("query", "summarize"), "noise": ("private_reply",),
}
"""The methods a part of each Strategy field must have."""

MUST_DECLARE: dict[str, dict[str, str]] = {
    "clients": {
        "inclusion_kind": "InclusionKind.EXACT, InclusionKind.ESTIMATED or InclusionKind.DEGENERATE",
        "server_learns": "a tuple of Learns, () where the server learns nothing beyond the training replies",
    },
    "data": {"weighs_by_inclusion": "True or False (whether its plans divide by the inclusion probabilities)"},
    "aggregate": {"weighs_by_inclusion": "True or False (whether its weights divide by the inclusion probabilities)"},
}
"""The declarations a part of each Strategy field must make itself, with the choices, because their defaults would
claim more than the part knows: a sampler taken as exact would have its pi divided by as if they were true (and a
degenerate one's pi = 1 pretended unbiased), one taken to learn nothing would understate what the server sees, and
a part taken not to divide by pi would escape the rule that refuses it an estimated or deterministic sampler. Every
part declares them, the library's as a user's (:func:`undeclared`); the other declared properties have the
defaults of :data:`DEFAULTS`, which only ever claim less."""

DEFAULTS: dict[str, Any] = {
    "needs_sizes": SizeNeed.NONE, "linear": None, "stratified": False, "needs_strata": False, "count_drawn": False,
    "needs_drawn_count": False, "shared_settings": {}, "batched": False, "exact": False, "report_count": False,
    "limits": (), "assumed_weights": False, "reads_replies": (), "draws_carry_sizes": False, "needs_step_counts": False,
    "equal_weights": False, "per_example": False,
}
"""What a part that does not declare a property is taken to declare (``linear`` None: not known); the declarations
of :data:`MUST_DECLARE` have no default."""

DECLARATIONS = frozenset(DEFAULTS) | {name for names in MUST_DECLARE.values() for name in names}
"""Every property a part may declare (what a misspelt public attribute is compared with)."""


_FLAGS = ("stratified", "needs_strata", "count_drawn", "needs_drawn_count", "batched", "exact", "report_count",
          "assumed_weights", "draws_carry_sizes", "weighs_by_inclusion", "needs_step_counts", "equal_weights", "per_example")
"""The declared properties that are yes-or-no."""

REPLY_FIELDS = ("update", "loss", "utility")
"""The fields of a training reply a client sampler may declare it reads (``reads_replies``)."""


def _kind_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not a valid declared ``name`` (None: it is)."""
    if name in _FLAGS and not isinstance(value, (bool, np.bool_)):
        return "True or False"
    if name == "linear" and not (value is None or isinstance(value, (bool, np.bool_))):
        return "True, False or None"
    if name == "inclusion_kind" and value not in {k.value for k in InclusionKind} | set(InclusionKind):
        return "an InclusionKind"
    if name == "server_learns" and any(v not in {k.value for k in Learns} | set(Learns) for v in value):
        return "a tuple of Learns"
    if name == "reads_replies" and any(v not in REPLY_FIELDS for v in value):
        return f"a tuple of {', '.join(REPLY_FIELDS)}"
    if name == "limits" and any(not isinstance(v, Limit) for v in value):
        return "a tuple of Limit"
    if name == "shared_settings" and not isinstance(value, Mapping):
        return "a mapping of setting -> value"
    return None


def declaration_problem(part: object) -> str | None:
    """What is wrong with what ``part`` declares (None: nothing): a declared property of the wrong kind, or a
    public attribute one letter or two away from a declared property's name (a misspelt declaration, which would
    otherwise be silently ignored and the default taken)."""
    owned = {n for n in dir(type(part)) if not n.startswith("_") and not callable(inspect.getattr_static(part, n))}
    if dataclasses.is_dataclass(part):
        owned |= {f.name for f in dataclasses.fields(part)}
    for name in sorted(owned - DECLARATIONS):
        near = difflib.get_close_matches(name, sorted(DECLARATIONS), n=1, cutoff=0.85)
        if near:
            return f"{describe(part)} declares {name!r}, which no part of fedsample reads: did you mean {near[0]!r}?"
    for name in sorted(owned & DECLARATIONS):
        value = declared(part, name)
        wanted = _kind_problem(name, value)
        if wanted is not None:
            return f"{describe(part)} declares {name}={value!r}: it must be {wanted}"
    return None


def declared(part: Any, name: str) -> Any:
    """The part's declared ``name``, or its default (:data:`DEFAULTS`). A declaration of :data:`MUST_DECLARE` has
    none: reading one that a part leaves out raises ``AttributeError`` (a Strategy refuses such a part when built,
    so the strategy's parts always have it)."""
    return getattr(part, name, DEFAULTS[name]) if name in DEFAULTS else getattr(part, name)


def inclusion_kind(sampler: Any, cohort: Any = None) -> InclusionKind:
    """How ``sampler``'s inclusion probabilities are known (declared: it has no default); a string is read as the kind.
    With ``cohort``: that round's kind, which a cohort may state itself (``info["inclusion_kind"]``: FedCor's random
    warm-up rounds are exact although the sampler is degenerate)."""
    kind = declared(sampler, "inclusion_kind")
    if cohort is not None:
        kind = cohort.info.get("inclusion_kind", kind)
    return kind if isinstance(kind, InclusionKind) else InclusionKind(kind)


def replies_read(sampler: Any) -> tuple[str, ...]:
    """The fields of each client's training reply that ``sampler`` keeps (declared ``reads_replies``: ``update``,
    ``loss``, ``utility``; none by default): a secure sum hides them, noised replies withhold all but the update."""
    return tuple(declared(sampler, "reads_replies"))


def server_learns(sampler: Any) -> tuple[Learns, ...]:
    """What the server receives from clients to run ``sampler`` (declared; strings are read as :class:`Learns`)."""
    return tuple(v if isinstance(v, Learns) else Learns(v) for v in declared(sampler, "server_learns"))


def trains_first(sampler: Any) -> bool:
    """Whether ``sampler`` chooses among clients that have already trained (:class:`TrainsFirst`)."""
    return callable(getattr(sampler, "select_trained", None))


def missing_methods(part: Any, field: str) -> list[str]:
    """The methods the Strategy field ``field`` requires that ``part`` lacks (looked up without running them: a
    property such as ``RandomizedSizes.query`` is not called)."""
    missing = object()
    return [m for m in REQUIRED[field] if inspect.getattr_static(part, m, missing) is missing]


def undeclared(part: object, field: str) -> str | None:
    """The first declaration of :data:`MUST_DECLARE` that ``part``, in the Strategy field ``field``, leaves out
    (None: it makes them all), looked up without running it."""
    missing = object()
    return next((d for d in MUST_DECLARE.get(field, {}) if inspect.getattr_static(part, d, missing) is missing), None)


def cohort_problem(sampler: object, cohort: Cohort, num_clients: int) -> str | None:
    """What is wrong with the cohort ``sampler`` returned for ``num_clients`` clients (None: nothing): ids that are
    not unique ascending integers in [0, N), inclusion probabilities that are not one per member in (0, 1] (NaN
    where estimated), multiplicities that are not one positive count per member."""
    ids, pi, name = np.asarray(cohort.ids), np.asarray(cohort.inclusion, dtype=np.float64), describe(sampler)
    if len(ids) and (ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= num_clients):
        return f"{name} chose client ids outside 0..{num_clients - 1}: {ids.tolist()[:8]}"
    if np.any(np.diff(ids) <= 0):
        return f"{name} returned cohort ids that are not unique and ascending: {ids.tolist()[:8]}"
    if pi.shape != ids.shape or np.any((pi <= 0) | (pi > 1)):
        return f"{name} returned inclusion probabilities outside (0, 1] or not one per member: {pi.tolist()[:8]}"
    counts = np.asarray(cohort.multiplicity)
    if counts.shape != ids.shape or np.any(counts < 1):
        return f"{name} returned multiplicities that are not one positive count per member: {counts.tolist()[:8]}"
    return None


def batched(solver: Any) -> bool:
    """Whether the vectorized engine may run ``solver``'s declared schedule for a cohort."""
    return isinstance(solver, ScheduledSolver) and bool(solver.batched)


def describe(part: Any) -> str:
    """A part as a user wrote it, short: its class and the fields that differ from their defaults
    (``StratifiedMean(by='size')``, ``RandomizedSizes(scope='cohort')``)."""
    if part is None:
        return "None"
    if not dataclasses.is_dataclass(part) or isinstance(part, type):
        return type(part).__name__
    shown = []
    for f in dataclasses.fields(part):
        if not f.repr:
            continue
        value = getattr(part, f.name)
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING
        )
        try:
            same = bool(value == default)
        except (ValueError, TypeError, RuntimeError):
            same = False
        if not same:
            shown.append(f"{f.name}={value!r}")
    return f"{type(part).__name__}({', '.join(shown)})"


def settings_of(part: Any) -> Mapping[str, Any]:
    """The settings a part shares with the strategy's other parts (``shared_settings``): two parts that declare the
    same setting must give it the same value (e.g. ``K``, FedSampling's samples per round)."""
    return dict(declared(part, "shared_settings"))
