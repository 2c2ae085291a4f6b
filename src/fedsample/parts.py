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

A client sampler, a data sampler, an aggregator and (optionally) a local solver declare what they are in one
frozen record, their ``capabilities`` (:class:`ClientSamplerCapabilities`, :class:`DataSamplerCapabilities`,
:class:`AggregatorCapabilities`, :class:`LocalSolverCapabilities`): a field without a default (how the inclusion
probabilities are known, what the server learns, whether a part divides by them: a default would claim more than
the part knows) left out or a misspelt field is the dataclass's ``TypeError`` naming it, a value of the wrong kind a
one-line ``ValueError``; the other fields' defaults only claim less. An optional method a part offers
(``estimate_inclusion``, ``expected_trainings``, ``rows_trained``, ``for_cohort``, ``draw_blocks``,
``draw_cohort_on_device``) is declared by a field of its record too (:class:`UpdatePrivacyCapabilities` for an update
privacy, :class:`CohortPlanCapabilities` for a cohort plan), and read from it, never probed for: a method the part
has and does not declare, or declares and lacks, is refused in one line naming the part (:func:`offers_problem`).
A leaf module: it imports :mod:`fedsample.rounds`, :mod:`fedsample.messages` and :mod:`fedsample.checks` only.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Callable, ClassVar, Literal, Mapping, Protocol, Sequence, TypeAlias, TypeGuard, cast, runtime_checkable

import numpy as np

from fedsample import checks
from fedsample.messages import ClientContext, LocalResult, LocalSample, Params, PerClient, ReplyStatistic, SizeQuery, SummedStatistic, TrainPayload, TrainReport
from fedsample.rounds import Cohort, ReplyList, RoundContext
from fedsample.runtime.records import Record, State

if TYPE_CHECKING:
    import torch

    from fedsample.privacy.sizes import SizeInfo
    from fedsample.rng import Blocks, ClientRandom, CohortRandom

__all__ = [
    "Aggregator", "AggregatorCapabilities", "batched", "BatchSchedule", "BlocksDraw", "BlocksPlan", "Capabilities", "capabilities_problem",
    "Census", "client_sampling_design", "ClientSampler", "ClientSamplerCapabilities", "cohort_problem",
    "CohortPlan", "CohortPlanCapabilities", "conforms", "CountsRows", "CountsTrainings", "DataPlan", "DataSampler",
    "DataSamplerCapabilities", "DeclaredPlan", "DeclaredPrivacy", "DeclaredSolver", "describe", "Design", "DesignedClients",
    "DesignedPlan", "DeviceDraw", "DevicePlan", "DrawnCohort", "estimates_inclusion", "EstimatesInclusion",
    "expected_trainings", "FixedSize", "inclusion_kind", "InclusionKind", "Learns", "Limit", "LocalSolver",
    "LocalSolverCapabilities", "missing_methods", "observes_sums", "observes_replies", "ObservesSums", "ObservesReplies",
    "check_plan", "declared_plan", "offered_draws", "offers_problem", "plan_capabilities", "plan_sampling_design", "plans_weights", "PlansWeights", "Poisson",
    "privacy_capabilities", "RECORDS", "RunsSolver", "replies_read", "REPLY_FIELDS", "reply_statistics_read", "reports_rows", "REQUIRED", "rows_trained",
    "ScheduledSolver", "server_learns", "ServerOptimizer", "ServerState", "SizeNeed", "SizeReporting", "solver_capabilities", "SplitNoise",
    "StepRule", "unsent_statistics", "summed_noise", "summed_of", "trains_first", "TrainsFirst", "Undeclared", "UpdatePrivacy", "UpdatePrivacyCapabilities", "WithReplacement",
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
        return sizes.exact if self is SizeNeed.COHORT_EXACT else sizes.exact and sizes.scope == "all"

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
    which every client sampler declares in its :class:`ClientSamplerCapabilities`). The round record (``inclusion``, and ``bias`` where the aggregate cannot be unbiased)
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


@functools.cache
def _members(protocol: type) -> frozenset[str]:
    """The attributes a runtime-checkable Protocol asks for (its own and its Protocol bases', public ones)."""
    names: set[str] = set()
    for base in protocol.__mro__:
        if vars(base).get("_is_protocol", False) and base is not Protocol:
            names |= {n for n in (*vars(base), *vars(base).get("__annotations__", {})) if not n.startswith("_")}
    return frozenset(names)


@functools.cache
def _lacks(cls: type, protocol: type) -> frozenset[str]:
    """The members of ``protocol`` that the class ``cls`` itself has not (as an attribute, a property, a method or a
    dataclass field), looked up once per class."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return frozenset(n for n in _members(protocol) if n not in fields and not hasattr(cls, n))


def conforms(obj: object, protocol: type) -> bool:
    """``isinstance(obj, protocol)`` for a runtime-checkable Protocol, without its cost (tens of microseconds a call
    on Python 3.11, paid per client and per round): the class is looked up once, the instance's own attributes
    only for what its class lacks."""
    cls: type = type(obj)
    missing = _lacks(cls, protocol)
    if not missing:
        return True
    try:
        return missing <= vars(obj).keys()  # instance attributes set in __init__
    except TypeError:  # no __dict__ (slots)
        return False


def observes_replies(sampler: object) -> TypeGuard[ObservesReplies]:
    """Whether a client sampler learns from the cohort's training replies (:class:`ObservesReplies`)."""
    return conforms(sampler, ObservesReplies)


def observes_sums(sampler: object) -> TypeGuard[ObservesSums]:
    """Whether a data sampler learns from the round's summed statistics (:class:`ObservesSums`)."""
    return conforms(sampler, ObservesSums)


def plans_weights(aggregate: object) -> TypeGuard[PlansWeights]:
    """Whether an aggregator knows its weights before training (:class:`PlansWeights`)."""
    return conforms(aggregate, PlansWeights)


def client_sampling_design(sampler: object, population: int) -> Design:
    """The design ``sampler`` declares for ``population`` clients (a sampler that declares none: :class:`Undeclared`).
    Every sampler, a user's own included, is accounted for from this declaration, never from its class."""
    if conforms(sampler, DesignedClients):
        return cast(DesignedClients, sampler).sampling_design(population)
    return Undeclared(f"{type(sampler).__name__}'s inclusion probabilities are not data-independent and exact")


def plan_sampling_design(plan: object) -> Design:
    """The design a data plan declares for a client's records (none declared: :class:`Undeclared`)."""
    if conforms(plan, DesignedPlan):
        return cast(DesignedPlan, plan).sampling_design()
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
        return np.asarray(np.cumsum(self.counts) - self.counts)

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
    d = g + weight_decay * w + prox_mu * (w - w_global); b = momentum * b + d; w = w - lr * b. ``linear``: whether
    its update is linear in the gradients (SGD's is; a chain with Adam's moments is not), which FedNova's a_k and the
    engines' linear forms need."""

    @property
    def lr(self) -> float: ...

    @property
    def linear(self) -> bool: ...

    @property
    def momentum(self) -> float: ...

    @property
    def weight_decay(self) -> float: ...

    @property
    def prox_mu(self) -> float: ...

    @property
    def is_gradient(self) -> bool:
        """Whether a single step's update is the weighted gradient itself (lr 1, no weight decay): the vectorized
        engine's one-gradient cohort."""
        ...

    def step_weights(self, total: np.ndarray, step: np.ndarray) -> np.ndarray:
        """a_t: the weight of step ``step``'s gradient in the first-order update of a client taking ``total`` steps."""
        ...


# --- what each part declares: one frozen record per kind of part -------------------------------------------------

REPLY_FIELDS = ("update", "loss")
"""The fields of a training reply a client sampler may declare it reads (``reads_replies``), besides the
statistics it asks every client to add (:class:`~fedsample.messages.ReplyStatistic`)."""


def _reply_read(value: object) -> bool:
    """Whether ``value`` is a reply field a sampler may read: one of :data:`REPLY_FIELDS` or a reply statistic."""
    return value in REPLY_FIELDS if isinstance(value, str) else isinstance(value, ReplyStatistic)


def _is_flag(value: object) -> bool:
    """Whether ``value`` is True or False."""
    return isinstance(value, bool)


def _count_or_none(value: object) -> bool:
    """Whether ``value`` is None or a positive integer (not a bool)."""
    return value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and bool(value > 0))


_WANTED: dict[str, tuple[Callable[[object], bool], str]] = {
    "inclusion_kind": (lambda v: isinstance(v, InclusionKind),
                       "InclusionKind.EXACT, InclusionKind.ESTIMATED or InclusionKind.DEGENERATE"),
    "server_learns": (lambda v: isinstance(v, tuple) and all(isinstance(x, Learns) for x in v),
                      "a tuple of Learns, () where the server learns nothing beyond the training replies"),
    "needs_sizes": (lambda v: isinstance(v, SizeNeed), "a SizeNeed"),
    "reads_replies": (lambda v: isinstance(v, tuple) and all(map(_reply_read, v)),
                      f"a tuple of {', '.join(REPLY_FIELDS)} or reply statistics (fedsample.messages.ReplyStatistic)"),
    "limits": (lambda v: isinstance(v, tuple) and all(isinstance(x, Limit) for x in v), "a tuple of Limit"),
    "shared_settings": (lambda v: isinstance(v, Mapping), "a mapping of setting -> value"),
    "linear": (lambda v: v is None or isinstance(v, bool), "True, False or None (not known)"),
    "budget": (lambda v: _count_or_none(v), "a positive int or None"),
    "minibatch": (lambda v: _count_or_none(v), "a positive int, or None for the whole drawn sample"),
    "steps": (lambda v: _count_or_none(v), "a positive int or None"),
    "summed": (lambda v: isinstance(v, tuple) and all(conforms(x, SummedStatistic) for x in v),
               "a tuple of summed statistics (fedsample.messages.SummedStatistic: name, noise, purpose, released, symbol and "
               "of_cohort(counts))"),
    "drawn_count": (lambda v: v is None or isinstance(v, str),
                    "the name of the summed statistic that counts the drawn samples, or None"),
    "needs_summed": (lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
                     "a tuple of the names of summed statistics (fedsample.messages.SummedStatistic.name)"),
}
"""What each declared field that is not yes-or-no must be, and how the refusal says it."""


class _Capabilities:
    """The check every capabilities record makes when it is built: each field of the right kind (a yes-or-no field
    a ``bool``), else one ``ValueError`` line naming the record, the field and what it must be. A missing required
    field or a misspelt keyword is the dataclass's ``TypeError``, which names the field."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[object]]]  # every record is a dataclass

    def offered(self) -> dict[str, tuple[str, bool]]:
        """For each declared field that says a part offers an optional method: the method's name and whether this
        record declares it (:func:`offers_problem`); none by default."""
        return {}

    def __post_init__(self) -> None:
        flags = {f.name for f in dataclasses.fields(self) if f.type == "bool"}
        for name, value in checks.declared_values(self).items():
            ok, wanted = (_is_flag, "True or False") if name in flags else _WANTED[name]
            if not ok(value):
                raise ValueError(f"{type(self).__name__}({name}={value!r}): {name} must be {wanted}")


@dataclass(frozen=True, kw_only=True)
class ClientSamplerCapabilities(_Capabilities):
    """What a client sampler declares (its ``capabilities``). Required, because a default would claim more than the
    sampler knows: ``inclusion_kind`` (:class:`InclusionKind`: a sampler taken as exact would have its pi divided by
    as if true) and ``server_learns`` (:class:`Learns`, () for nothing beyond the training replies). Optional:

    - ``needs_sizes`` (:class:`SizeNeed`) and ``limits`` (the counts it asks of the data, :class:`Limit`);
    - ``assumed_weights``: an estimated sampler whose cohorts carry the weights its method assumes
      (``expected_draws``: the DELTA reference implementation's m p_k), so an aggregator that divides by them runs
      (biased, as the round record says);
    - ``reads_replies``: what its ``observe`` reads of each client's training reply (``update``, ``loss``, or a
      :class:`~fedsample.messages.ReplyStatistic`, which every client then adds to its reply, e.g. Oort's
      statistical utility): then a secure sum is refused, and noise where it reads more than the update;
    - ``draws_carry_sizes``: E[draws of k] is proportional to n_k (MD and clustered sampling), so a uniform mean
      over the draws is unbiased for FedAvg's size-weighted objective;
    - ``stratified``: its cohorts carry ``strata`` and ``info["stratum_sizes"]``/``["allocation"]``;
    - ``estimates_inclusion``: it offers ``estimate_inclusion(ctx, draws)`` (:class:`EstimatesInclusion`: its
      inclusion frequencies replayed from the state ``select`` left), which ``fedsample.diagnose`` reports; by
      default it offers none;
    - ``counts_trainings``: it offers ``expected_trainings(num_clients, sizes)`` (:class:`CountsTrainings`: more
      clients train than send, :class:`TrainsFirst`); by default as many train as its ``expected_cohort``;
    - ``shared_settings``: settings other parts must give the same value.

    A sampler that has one of the offered methods without declaring it, or declares one it does not have, is
    refused where the strategy is built (:func:`offers_problem`)."""

    inclusion_kind: InclusionKind
    server_learns: tuple[Learns, ...]
    needs_sizes: SizeNeed = SizeNeed.NONE
    limits: tuple[Limit, ...] = ()
    assumed_weights: bool = False
    reads_replies: tuple[str | ReplyStatistic, ...] = ()
    draws_carry_sizes: bool = False
    stratified: bool = False
    estimates_inclusion: bool = False
    counts_trainings: bool = False
    shared_settings: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def offered(self) -> dict[str, tuple[str, bool]]:
        return {"estimates_inclusion": ("estimate_inclusion", self.estimates_inclusion),
                "counts_trainings": ("expected_trainings", self.counts_trainings)}


@dataclass(frozen=True, kw_only=True)
class DataSamplerCapabilities(_Capabilities):
    """What a data sampler declares (its ``capabilities``). Required: ``weighs_by_inclusion`` (whether its plans
    divide by the cohort's inclusion probabilities, as ISFedAvg's agent factor does: a part taken not to would
    escape the rule that refuses it an estimated or deterministic sampler). Optional: ``needs_sizes``, ``limits``,
    ``summed`` (the :class:`~fedsample.messages.SummedStatistic` s its plans make each client add to its reply, each
    with the noise on the cohort's sum: FedSampling's drawn count), ``drawn_count`` (the name of the one among them
    that counts the samples the clients drew, sum_c |S_c|: the round record's ``realised_samples``,
    :func:`fedsample.budget.realised_samples`; None: none does, and the realised budget is the rows the replies
    trained), ``budget`` (the samples per round it is held to, FedSampling's K: the round record's
    ``target_samples``) and ``shared_settings``."""

    weighs_by_inclusion: bool
    needs_sizes: SizeNeed = SizeNeed.NONE
    limits: tuple[Limit, ...] = ()
    summed: tuple[SummedStatistic, ...] = ()
    drawn_count: str | None = None
    budget: int | None = None
    shared_settings: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        names = [statistic.name for statistic in self.summed]
        if self.drawn_count is not None and self.drawn_count not in names:
            raise ValueError(f"DataSamplerCapabilities(drawn_count={self.drawn_count!r}): drawn_count must name one of its "
                             f"summed statistics ({', '.join(map(repr, names)) or 'none declared'})")


@dataclass(frozen=True, kw_only=True)
class AggregatorCapabilities(_Capabilities):
    """What an aggregator declares (its ``capabilities``). Required: ``weighs_by_inclusion`` (whether its weights
    divide by the cohort's inclusion probabilities or expected draws). Optional: ``needs_sizes``; ``linear`` (a
    weighted sum of the updates whose weights are known before the updates are: what a secure sum and the engines'
    fused sums compute; None: not known); ``needs_strata``; ``needs_summed`` (the names of the summed statistics it
    reads of the cohort, :meth:`fedsample.rounds.ReplyList.summed`, which the data sampler must declare: the
    self-normalized update's drawn count); ``needs_step_counts`` (its
    weights need each client's step count, which a noised reply withholds); ``normalizes_steps`` (it divides each
    update by the client's effective step count a_k, FedNova's, known only for a local rule linear in the
    gradients); ``equal_weights`` (every received update weighs the same: what per-example noise shares are
    calibrated for) and ``shared_settings``."""

    weighs_by_inclusion: bool
    needs_sizes: SizeNeed = SizeNeed.NONE
    linear: bool | None = None
    needs_strata: bool = False
    needs_summed: tuple[str, ...] = ()
    needs_step_counts: bool = False
    normalizes_steps: bool = False
    equal_weights: bool = False
    shared_settings: Mapping[str, object] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class LocalSolverCapabilities(_Capabilities):
    """What a local solver declares (its ``capabilities``, all optional): ``per_example`` (its update is
    (1/K) sum_s g_s over the drawn examples with a known K, FedSampling's one gradient, which per-example clipping
    needs), ``minibatch`` (the rows one local step reads; None: the whole drawn sample, or not a fixed count),
    ``steps`` (its local steps per round where fixed), ``counts_rows`` (it offers ``rows_trained(sizes)``, the rows
    a client of each size trains on in a round, :class:`CountsRows`, which the engine choice estimates a round's
    work from; by default one pass over the client's data) and ``shared_settings``."""

    per_example: bool = False
    minibatch: int | None = None
    steps: int | None = None
    counts_rows: bool = False
    shared_settings: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def offered(self) -> dict[str, tuple[str, bool]]:
        return {"counts_rows": ("rows_trained", self.counts_rows)}


@dataclass(frozen=True, kw_only=True)
class UpdatePrivacyCapabilities(_Capabilities):
    """What an update privacy declares (its ``capabilities``, all optional; a part that declares none claims
    neither): ``hides_draw`` (its reply says nothing of whether and how much the client drew: no step count, loss
    or drawn count, :meth:`fedsample.privacy.noise.UpdateNoise.private_reply`; the ledger's amplification by data
    sampling needs it), ``splits_among_cohort`` (its noise is added in equal shares by the cohort: it offers
    ``for_cohort(size)`` and carries its ``shares``, :class:`SplitNoise`; by default every reply carries all of it)
    and ``runs_solver`` (it computes the update itself, per-example clipping: it offers
    ``run_solver(solver, ctx, sample, params, round, rng)``, :class:`RunsSolver`, which the client runs in the place
    of the solver's ``run``; by default the solver runs)."""

    hides_draw: bool = False
    splits_among_cohort: bool = False
    runs_solver: bool = False

    def offered(self) -> dict[str, tuple[str, bool]]:
        return {"splits_among_cohort": ("for_cohort", self.splits_among_cohort), "runs_solver": ("run_solver", self.runs_solver)}


@dataclass(frozen=True, kw_only=True)
class CohortPlanCapabilities(_Capabilities):
    """What a :class:`CohortPlan` declares (its ``capabilities``, all optional; a plan that declares none offers
    only ``draw_cohort``): ``draws_blocks`` (it offers ``draw_blocks(blocks, rng)``, the same draw over the layout
    an engine keeps for the same sizes, :class:`BlocksPlan`) and ``draws_on_device`` (it offers
    ``draw_cohort_on_device(sizes, rng)``, the same draw with the cohort's arrays on ``rng``'s device,
    :class:`DevicePlan`); ``private_draw`` (how many samples a client drew reaches the server only summed, so a reply
    names no rows trained unless the plan sums a statistic of it, :func:`reports_rows`) and ``summed`` (the
    :class:`~fedsample.messages.SummedStatistic` s each client adds to its reply, :func:`summed_of`). Read by
    :func:`plan_capabilities`, which refuses a plan whose methods and declaration disagree."""

    draws_blocks: bool = False
    draws_on_device: bool = False
    private_draw: bool = False
    summed: tuple[SummedStatistic, ...] = ()

    def offered(self) -> dict[str, tuple[str, bool]]:
        return {"draws_blocks": ("draw_blocks", self.draws_blocks), "draws_on_device": ("draw_cohort_on_device", self.draws_on_device)}

    @property
    def reports_rows(self) -> bool:
        """Whether a client may add the rows it trained on to its reply (:func:`reports_rows`)."""
        return not self.private_draw or bool(self.summed)


Capabilities = (ClientSamplerCapabilities | DataSamplerCapabilities | AggregatorCapabilities | LocalSolverCapabilities
                | UpdatePrivacyCapabilities)
"""The declaration of a part of any kind."""

RECORDS: dict[str, type[_Capabilities]] = {
    "clients": ClientSamplerCapabilities, "data": DataSamplerCapabilities, "aggregate": AggregatorCapabilities,
    "local": LocalSolverCapabilities, "noise": UpdatePrivacyCapabilities,
}
"""The capabilities record a part of each Strategy field declares (the server optimizer and size reporting declare
what they do through their Protocols' properties)."""

OLD_DECLARATIONS = frozenset(
    f.name for record in RECORDS.values() for f in dataclasses.fields(record)
) - {"limits", "shared_settings", "summed", "drawn_count", "needs_summed", "per_example", "budget", "minibatch", "steps"}
"""Names a part declared as separate class attributes before its capabilities record (what an old-style part is
recognised by; settings that are also a part's own fields, such as ``budget``, and fields that came with the records,
such as ``summed``, are left out)."""



# --- the parts ----------------------------------------------------------------------------------------------------


@runtime_checkable
class ClientSampler(Protocol):
    """Who trains this round. ``select`` returns a :class:`~fedsample.rounds.Cohort` carrying every chosen client's
    inclusion probability pi_k; ``expected_cohort`` is the expected number of distinct clients per round (``sizes``
    are the clients' data sizes, which a sampler whose cohort follows from them needs); ``capabilities``
    (:class:`ClientSamplerCapabilities`) declares how its pi_k are known, what the server learns to run it, the
    sizes it needs and the rest. Optionally:

    - for an estimated ``inclusion_kind``, ``estimate_inclusion(ctx, draws) -> frequencies`` (one per client, from
      the state ``select`` left; :class:`EstimatesInclusion`, declared ``estimates_inclusion``);
    - ``observe(ctx, cohort, replies)`` (:class:`ObservesReplies`): server-held state learnt from the cohort's valid
      training replies (kept in ``ctx.state``, saved with checkpoints), called after aggregation, reading the reply
      fields its capabilities name (``reads_replies``);
    - ``sampling_design(population)`` (:class:`DesignedClients`): its design, which the privacy ledger reads;
    - ``expected_trainings(N, sizes)``: clients that train per round, where more train than send (:class:`TrainsFirst`;
      :class:`CountsTrainings`, declared ``counts_trainings``).
    """

    @property
    def capabilities(self) -> ClientSamplerCapabilities: ...

    def select(self, ctx: RoundContext) -> Cohort: ...

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float: ...


@runtime_checkable
class ObservesReplies(Protocol):
    """A client sampler that learns from the cohort's valid training replies, after aggregation."""

    def observe(self, ctx: RoundContext, cohort: Cohort, replies: ReplyList) -> None: ...


@runtime_checkable
class TrainsFirst(ClientSampler, Protocol):
    """A sampler that chooses among clients that have already trained (optimal client sampling, Chen et al. 2022).
    ``select(ctx)`` returns who trains (every available client, pi = 1); each of them trains, keeps its update and
    sends only its norm (a :class:`~fedsample.messages.TrainHeld` request); ``select_trained(ctx, trained, held)`` returns the cohort
    whose updates the server then receives (``send_held``), with their inclusion probabilities. The other updates
    never leave their clients. The round record states the cost: ``local_trainings`` for ``cohort`` uploads."""

    def select_trained(self, ctx: RoundContext, trained: Cohort, held: ReplyList) -> Cohort: ...


@runtime_checkable
class DataPlan(Protocol):
    """The server's instruction to one client, executed on the client's own data: ``draw`` returns what it keeps."""

    def draw(self, ctx: ClientContext, rng: ClientRandom) -> LocalSample: ...


def summed_of(plan: object) -> tuple[SummedStatistic, ...]:
    """The summed statistics ``plan`` declares (its capabilities' ``summed``, :class:`CohortPlanCapabilities`): what
    each client adds to its reply for the server to learn only summed (FedSampling's drawn count); () where none."""
    return declared_plan(plan).summed


def unsent_statistics(aggregate: Aggregator, data: DataSampler) -> list[str]:
    """The summed statistics ``aggregate`` reads of the cohort (its ``needs_summed``, by name) that ``data``'s plans
    do not declare (its ``summed``): [] where the data sampler sends all it needs."""
    declared = {statistic.name for statistic in data.capabilities.summed}
    return [name for name in aggregate.capabilities.needs_summed if name not in declared]


def summed_noise(plan: object) -> float:
    """The largest standard deviation of the Gaussian noise on a summed statistic ``plan`` declares (0: none
    declared, or exact sums)."""
    return max((float(s.noise) for s in summed_of(plan)), default=0.0)


def reports_rows(plan: object) -> bool:
    """Whether a client under ``plan`` may add the rows it trained on to its reply (the realised budget,
    :mod:`fedsample.budget`): not where the plan declares its draw private (``private_draw``, FedSampling's: the
    count reaches the server only summed inside the secure sum, and a client's rows would reveal it) unless the
    plan sums a statistic of it anyway."""
    return declared_plan(plan).reports_rows


@runtime_checkable
class CohortPlan(DataPlan, Protocol):
    """A plan whose draws for a whole cohort are one pass (every client's own counter-based stream, read in
    bulk): ``draw_cohort`` gives ``(member, position)`` of every kept row, the same rows each client's ``draw``
    keeps, and ``stream_reads`` how many draws each client's draw reads from its stream. A plan may also offer,
    declaring it in its ``capabilities`` (:class:`CohortPlanCapabilities`), ``draw_blocks(blocks, rng)``, the same
    draw over the layout an engine keeps from round to round for the same sizes (:class:`~fedsample.rng.Blocks`), and
    ``draw_cohort_on_device``; the vectorized engine uses them where declared (:func:`offered_draws`)."""

    def draw_cohort(self, sizes: np.ndarray, rng: "CohortRandom") -> tuple[np.ndarray, np.ndarray]: ...

    def stream_reads(self, sizes: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class DataSampler(Protocol):
    """What each chosen client trains on: ``plan`` returns one :class:`DataPlan` for the cohort, or one per member
    (PerClient); ``capabilities`` (:class:`DataSamplerCapabilities`) declares whether its plans divide by the
    inclusion probabilities, the sizes it needs and the rest. A data sampler steered by the round's summed statistics
    has ``observe_sums`` (:class:`ObservesSums`)."""

    @property
    def capabilities(self) -> DataSamplerCapabilities: ...

    def plan(self, ctx: RoundContext, cohort: Cohort) -> DataPlan | PerClient[DataPlan]: ...


@runtime_checkable
class ObservesSums(Protocol):
    """A data sampler that learns from the round's summed statistics (a steered FedSampling's next N^ from the drawn
    count, :class:`fedsample.sampling.data.FedSamplingData`): ``observe_sums(state, sums, log)`` after the round, with
    the sums by name (:meth:`fedsample.rounds.ReplyList.sums`) and the round's record so far (e.g. its sampling ratio)."""

    def observe_sums(self, state: State, sums: Mapping[str, float], log: Record) -> None: ...


@runtime_checkable
class LocalSolver(Protocol):
    """What a chosen client computes on its drawn sample: ``run`` returns one :class:`~fedsample.messages.LocalResult`
    (the update, a descent direction; the steps taken; the mean loss; FedNova's ``norm_steps`` and the
    ``rows_trained``, each None where the solver does not say). The loop runs any solver this way. A solver may
    declare ``capabilities`` (:class:`DeclaredSolver`, :class:`LocalSolverCapabilities`)."""

    def run(self, ctx: ClientContext, sample: LocalSample, params: Params, round: int, rng: ClientRandom) -> LocalResult: ...


@runtime_checkable
class DeclaredSolver(LocalSolver, Protocol):
    """A local solver that declares its capabilities (:class:`LocalSolverCapabilities`)."""

    @property
    def capabilities(self) -> LocalSolverCapabilities: ...


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

    def schedule(self, drawn: DrawnCohort, streams: Sequence[ClientRandom], round: int) -> BatchSchedule: ...

    def step_rule(self, round: int) -> StepRule: ...

    def norm_steps(self, steps: np.ndarray, round: int) -> np.ndarray | None: ...

    def single_step(self, sizes: np.ndarray) -> bool: ...


@runtime_checkable
class Aggregator(Protocol):
    """How the updates combine into one pseudo-gradient (None: nothing usable arrived); ``capabilities``
    (:class:`AggregatorCapabilities`) declares whether its weights divide by the inclusion probabilities, whether it
    is linear, the sizes it needs and the rest. An aggregator whose weights are known before training has
    ``planned_weights(cohort, ctx)`` (:class:`PlansWeights`)."""

    @property
    def capabilities(self) -> AggregatorCapabilities: ...

    def combine(self, reports: ReplyList | Sequence[TrainReport | None], cohort: Cohort, ctx: RoundContext) -> Params | None: ...


@runtime_checkable
class PlansWeights(Protocol):
    """An aggregator that knows, before training, the weights :meth:`Aggregator.combine` gives the cohort if every
    update arrives: an in-process engine then sums the updates as they arrive instead of holding them all
    (:mod:`fedsample.federation.summed`)."""

    def planned_weights(self, cohort: Cohort, ctx: RoundContext) -> np.ndarray | None: ...


#: A server optimizer's state: its buffers, one tensor per parameter each, by name (FedAvgM's ``velocity``, the
#: adaptive methods' ``m`` and ``v``); empty for plain SGD.
ServerState: TypeAlias = dict[str, Params]


@runtime_checkable
class ServerOptimizer(Protocol):
    """Applies the aggregate: ``step(params, delta, state) -> (params, state)``; ``lr`` is what a learning-rate
    schedule scales."""

    @property
    def lr(self) -> float: ...

    def init_state(self, params: Params) -> ServerState: ...

    def step(self, params: Params, delta: Params, state: ServerState) -> tuple[Params, ServerState]: ...


@runtime_checkable
class SizeReporting(Protocol):
    """How the server learns sizes: the ``query`` clients answer, who is asked (``scope``: every client before
    selection or the cohort after it), whether the answers are ``exact``, and their summary (:class:`~fedsample.privacy.sizes.SizeInfo`)."""

    @property
    def scope(self) -> Literal["all", "cohort"]: ...

    @property
    def exact(self) -> bool: ...

    @property
    def query(self) -> SizeQuery: ...

    def summarize(self, ids: np.ndarray, reports: np.ndarray) -> SizeInfo: ...


@runtime_checkable
class UpdatePrivacy(Protocol):
    """What every client does to its reply before sending it (:mod:`fedsample.privacy.noise`: clipping and Gaussian
    noise on the whole update, :class:`~fedsample.privacy.noise.UpdateNoise`, or per example,
    :class:`~fedsample.privacy.noise.PerExampleNoise`); ``noise_multiplier`` is what the privacy ledger composes and
    ``clipping`` ("client" or "example") says which unit is clipped. It may declare ``capabilities``
    (:class:`UpdatePrivacyCapabilities`: whether its reply hides the draw, whether its noise is split among the
    cohort, whether it computes the gradient itself, :class:`RunsSolver`, as per-example clipping does)."""

    @property
    def noise_multiplier(self) -> float: ...

    @property
    def clipping(self) -> str: ...

    def private_reply(self, report: TrainReport, payload: TrainPayload, rng: np.random.Generator | ClientRandom) -> TrainReport: ...


# --- the optional methods a part declares it offers (the ``offered`` fields of its record) ---------------------


@runtime_checkable
class EstimatesInclusion(ClientSampler, Protocol):
    """A client sampler that declares ``estimates_inclusion``: ``estimate_inclusion(ctx, draws)`` replays the
    round's selection ``draws`` times from the state ``select`` left in ``ctx.state`` and returns every client's
    inclusion frequency (:attr:`InclusionKind.ESTIMATED`)."""

    def estimate_inclusion(self, ctx: RoundContext, draws: int) -> np.ndarray: ...


@runtime_checkable
class CountsTrainings(ClientSampler, Protocol):
    """A client sampler that declares ``counts_trainings``: ``expected_trainings(num_clients, sizes)`` clients train
    per round, more than its expected cohort sends (:class:`TrainsFirst`)."""

    def expected_trainings(self, num_clients: int, sizes: np.ndarray | None = None) -> float: ...


@runtime_checkable
class CountsRows(LocalSolver, Protocol):
    """A local solver that declares ``counts_rows``: ``rows_trained(sizes)``, the rows (with repeats) a client of each
    size trains on in a round when its plan keeps all its data."""

    def rows_trained(self, sizes: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class DeclaredPrivacy(Protocol):
    """An update privacy that declares its capabilities (:class:`UpdatePrivacyCapabilities`)."""

    @property
    def capabilities(self) -> UpdatePrivacyCapabilities: ...


@runtime_checkable
class SplitNoise(UpdatePrivacy, Protocol):
    """An update privacy that declares ``splits_among_cohort``: ``for_cohort(size)`` is the same noise split into
    ``size`` equal shares, one per cohort member, and ``shares`` says into how many it is split."""

    @property
    def shares(self) -> int: ...

    def for_cohort(self, size: int) -> "SplitNoise": ...


@runtime_checkable
class RunsSolver(UpdatePrivacy, Protocol):
    """An update privacy that declares ``runs_solver``: ``run_solver(solver, ctx, sample, params, round, rng)``
    computes the client's update itself (per-example clipping needs each example's gradient), in the place of
    ``solver.run``, and returns the same :class:`~fedsample.messages.LocalResult`."""

    def run_solver(self, solver: LocalSolver, ctx: ClientContext, sample: LocalSample, params: Params, round: int,
                   rng: ClientRandom) -> LocalResult: ...


@runtime_checkable
class DeclaredPlan(Protocol):
    """A cohort plan that declares its capabilities (:class:`CohortPlanCapabilities`)."""

    @property
    def capabilities(self) -> CohortPlanCapabilities: ...


@runtime_checkable
class BlocksPlan(CohortPlan, Protocol):
    """A cohort plan that declares ``draws_blocks``: ``draw_blocks(blocks, rng)`` is its ``draw_cohort`` over the
    layout an engine keeps from round to round for the same sizes (:class:`~fedsample.rng.Blocks`)."""

    def draw_blocks(self, blocks: "Blocks", rng: "CohortRandom") -> tuple[np.ndarray, np.ndarray]: ...


@runtime_checkable
class DevicePlan(CohortPlan, Protocol):
    """A cohort plan that declares ``draws_on_device``: ``draw_cohort_on_device(sizes, rng)`` is its ``draw_cohort``
    with the cohort's arrays on ``rng``'s device (``(member, position)`` as tensors there)."""

    def draw_cohort_on_device(self, sizes: "np.ndarray | torch.Tensor", rng: "CohortRandom") -> tuple["torch.Tensor", "torch.Tensor"]: ...


def offers_problem(part: object, declared: _Capabilities) -> str | None:
    """Where ``part``'s optional methods and the record it ``declared`` disagree (None: they agree): a method the
    record says it offers and the part lacks (misspelt, say), or one the part has and the record does not declare
    (a declaration left out, which nothing would read). Looked up without running anything."""
    record = type(declared).__name__
    for field, (method, says) in declared.offered().items():
        has = inspect.getattr_static(part, method, None) is not None
        if says and not has:
            return f"{describe(part)} declares {field}=True in its {record} but has no {method}() method"
        if has and not says:
            return f"{describe(part)} has {method}() but its {record} does not declare it: declare {field}=True"
    return None


def estimates_inclusion(sampler: ClientSampler) -> TypeGuard[EstimatesInclusion]:
    """Whether ``sampler`` declares that it offers ``estimate_inclusion`` (:class:`EstimatesInclusion`)."""
    return sampler.capabilities.estimates_inclusion


def expected_trainings(sampler: ClientSampler, num_clients: int, sizes: np.ndarray | None = None) -> float:
    """Clients that train per round: the sampler's declared ``expected_trainings`` where more train than send
    (:class:`CountsTrainings`), else its expected cohort."""
    if sampler.capabilities.counts_trainings:
        return float(cast(CountsTrainings, sampler).expected_trainings(num_clients, sizes))
    return float(sampler.expected_cohort(num_clients, sizes))


def rows_trained(solver: object, sizes: np.ndarray) -> np.ndarray:
    """The rows a client of each size trains on in a round: the solver's declared ``rows_trained(sizes)``
    (:class:`CountsRows`), else one pass over its data."""
    if solver_capabilities(solver).counts_rows:
        return np.asarray(cast(CountsRows, solver).rows_trained(sizes), dtype=np.float64)
    return np.asarray(sizes, dtype=np.float64)


def privacy_capabilities(noise: object) -> UpdatePrivacyCapabilities:
    """What the update privacy ``noise`` declares (one that declares nothing: the record of defaults, which claims
    nothing: its reply may show the draw, and every reply carries all of its noise)."""
    return cast(DeclaredPrivacy, noise).capabilities if conforms(noise, DeclaredPrivacy) else UpdatePrivacyCapabilities()


def declared_plan(plan: object) -> CohortPlanCapabilities:
    """What the cohort plan ``plan`` declares (none: the record of defaults, ``draw_cohort`` only), read without
    comparing it with the plan's methods (:func:`plan_capabilities` does, where an engine takes the plan's draws): the
    per-round and per-client reads of its summed statistics and private draw. A record of another kind is refused in
    one line."""
    declared = cast(DeclaredPlan, plan).capabilities if conforms(plan, DeclaredPlan) else CohortPlanCapabilities()
    if not isinstance(declared, CohortPlanCapabilities):
        raise ValueError(f"{describe(plan)} declares capabilities of type {type(declared).__name__}: a cohort plan declares a "
                         f"CohortPlanCapabilities")
    return declared


_AGREEING_PLANS: set[tuple[type, tuple[bool, ...]]] = set()
"""The cohort plan classes, with the draws their plans declared, found to agree with their methods
(:func:`plan_capabilities`)."""


def _agreement_key(plan: object, declared: CohortPlanCapabilities) -> tuple[type, tuple[bool, ...]]:
    """What a plan's agreement with its methods depends on: its class (the methods) and which it declares it offers."""
    return type(plan), tuple(says for _, says in declared.offered().values())


def plan_capabilities(plan: object) -> CohortPlanCapabilities:
    """What the cohort plan ``plan`` declares (:func:`declared_plan`); a plan whose record disagrees with its methods
    (:func:`offers_problem`) is refused in one line. Compared once per plan class and declared draws (the methods
    are the class's)."""
    declared = declared_plan(plan)
    key = _agreement_key(plan, declared)
    if key not in _AGREEING_PLANS:
        problem = offers_problem(plan, declared)
        if problem is not None:
            raise ValueError(problem)
        _AGREEING_PLANS.add(key)
    return declared


def check_plan(data: object, plan: object) -> None:
    """The plan the data sampler ``data`` made (one for the cohort, or the members' of a :class:`PerClient`, all of
    one class) agrees with its declaration (:func:`plan_capabilities`, once per plan class and declared draws),
    checked where the strategy makes it, before any engine reads it: a wrong declaration is refused on every engine,
    in one line naming the data sampler. The round's one check of its plan: an engine then reads the declaration as
    it is (:func:`offered_draws` given it)."""
    first = (plan.payloads[0] if plan.payloads else None) if isinstance(plan, PerClient) else plan
    try:
        plan_capabilities(first)
    except ValueError as why:
        raise ValueError(f"data={describe(data)} makes plans whose declaration disagrees with their methods: {why}") from None


DeviceDraw = Callable[["np.ndarray | torch.Tensor", "CohortRandom"], tuple["torch.Tensor", "torch.Tensor"]]
"""A cohort plan's ``draw_cohort_on_device``."""
BlocksDraw = Callable[["Blocks", "CohortRandom"], tuple[np.ndarray, np.ndarray]]
"""A cohort plan's ``draw_blocks``."""


def offered_draws(plan: CohortPlan, checked: CohortPlanCapabilities | None = None) -> tuple[DeviceDraw | None, BlocksDraw | None]:
    """The cohort plan's declared ``draw_cohort_on_device`` and ``draw_blocks`` (None where it does not offer one).
    ``checked``: its declaration, already compared with its methods (an engine running a round's plan, which the round
    checked, :func:`check_plan`), read as it is; None: compared here (:func:`plan_capabilities`, refused where they
    disagree)."""
    declared = plan_capabilities(plan) if checked is None else checked
    return (cast(DevicePlan, plan).draw_cohort_on_device if declared.draws_on_device else None,
            cast(BlocksPlan, plan).draw_blocks if declared.draws_blocks else None)


REQUIRED: dict[str, tuple[str, ...]] = {
    "clients": ("select", "expected_cohort", "capabilities"), "data": ("plan", "capabilities"), "local": ("run",),
    "aggregate": ("combine", "capabilities"), "server": ("init_state", "step"), "sizes": ("query", "summarize"),
    "noise": ("private_reply",),
}
"""The methods (and, for the parts that declare a record, ``capabilities``) a part of each Strategy field must have."""


def capabilities_problem(part: object, field: str) -> str | None:
    """What is wrong with the capabilities ``part`` declares as the Strategy's ``field`` (None: nothing, or a field
    whose parts declare none): a declaration the old way, as separate attributes, which nothing reads (named, with
    how to declare it now), no record, a record of another kind of part, or a record that cannot be built (its
    one-line refusal)."""
    record = RECORDS.get(field)
    if record is None:
        return None
    required = [f.name for f in dataclasses.fields(record) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    old = sorted(n for n in OLD_DECLARATIONS if inspect.getattr_static(part, n, None) is not None)
    if old:
        fields = ", ".join(f"{n}=<{_wanted(n)}>" for n in dict.fromkeys([*required, *old]))
        return (f"{describe(part)} declares {', '.join(old)} as separate attributes, which fedsample no longer reads: "
                f"declare them in one record, capabilities = fedsample.parts.{record.__name__}({fields})")
    if inspect.getattr_static(part, "capabilities", None) is None:
        if not required:  # a local solver or a noise may declare nothing (the record of defaults, which offers nothing)
            return offers_problem(part, record())
        fields = ", ".join(f"{n}=<{_wanted(n)}>" for n in required)
        return f"{describe(part)} does not declare its capabilities: declare capabilities = fedsample.parts.{record.__name__}({fields})"
    try:
        declared = part.capabilities  # type: ignore[attr-defined]  # present (above); a property builds it here
    except (TypeError, ValueError) as why:  # the record's own refusal, now naming the part
        return f"{describe(part)}: {why}"
    if not isinstance(declared, record):
        return f"{describe(part)} declares capabilities of type {type(declared).__name__}: a {field} part declares a {record.__name__}"
    return offers_problem(part, declared)


def _wanted(name: str) -> str:
    """What the declared field ``name`` must be, in words."""
    return "True or False" if name not in _WANTED else _WANTED[name][1]


def solver_capabilities(solver: object) -> LocalSolverCapabilities:
    """What ``solver`` declares (a solver with only ``run`` declares nothing: the default record, which claims
    nothing: no per-example update, no fixed minibatch, no shared setting)."""
    return cast(DeclaredSolver, solver).capabilities if conforms(solver, DeclaredSolver) else LocalSolverCapabilities()


def inclusion_kind(sampler: ClientSampler, cohort: Cohort | None = None) -> InclusionKind:
    """How ``sampler``'s inclusion probabilities are known (declared in its capabilities). With ``cohort``: that
    round's kind, which a cohort may state itself (``info["inclusion_kind"]``: FedCor's random warm-up rounds are
    exact although the sampler is degenerate)."""
    kind: object = sampler.capabilities.inclusion_kind
    if cohort is not None:
        kind = cohort.info.get("inclusion_kind", kind)
    return kind if isinstance(kind, InclusionKind) else InclusionKind(kind)


def replies_read(sampler: ClientSampler) -> tuple[str, ...]:
    """The names of the fields of each client's training reply that ``sampler`` keeps (declared ``reads_replies``:
    ``update``, ``loss``, a reply statistic's name; none by default): a secure sum hides them, noised replies
    withhold all but the update."""
    return tuple(x if isinstance(x, str) else x.name for x in sampler.capabilities.reads_replies)


def reply_statistics_read(sampler: ClientSampler) -> tuple[ReplyStatistic, ...]:
    """The reply statistics ``sampler`` reads (declared in ``reads_replies``): what the train request asks every
    client to add to its reply (:attr:`fedsample.messages.TrainPayload.statistics`)."""
    return tuple(x for x in sampler.capabilities.reads_replies if not isinstance(x, str))


def server_learns(sampler: ClientSampler) -> tuple[Learns, ...]:
    """What the server receives from clients to run ``sampler`` (declared in its capabilities)."""
    return sampler.capabilities.server_learns


def trains_first(sampler: ClientSampler) -> bool:
    """Whether ``sampler`` chooses among clients that have already trained (:class:`TrainsFirst`)."""
    return conforms(sampler, TrainsFirst)


def missing_methods(part: object, field: str) -> list[str]:
    """The methods the Strategy field ``field`` requires that ``part`` lacks (looked up without running them: a
    property such as ``RandomizedSizes.query`` is not called)."""
    missing = object()
    return [m for m in REQUIRED[field] if inspect.getattr_static(part, m, missing) is missing]


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


def batched(solver: object) -> TypeGuard[ScheduledSolver]:
    """Whether the vectorized engine may run ``solver``'s declared schedule for a cohort (a :class:`ScheduledSolver`
    that declares ``batched``)."""
    return conforms(solver, ScheduledSolver) and bool(cast(ScheduledSolver, solver).batched)


def describe(part: object) -> str:
    """A part as a user wrote it, short: its class and the fields that differ from their defaults
    (``StratifiedMean(by='size')``, ``RandomizedSizes(scope='cohort')``)."""
    if part is None:
        return "None"
    if not dataclasses.is_dataclass(part) or isinstance(part, type):
        return type(part).__name__
    shown, values = [], checks.declared_values(part)
    for f in dataclasses.fields(part):
        if not f.repr:
            continue
        value = values[f.name]
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
