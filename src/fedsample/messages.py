"""The messages that cross the door between the server and a client, and the client's own context.

A leaf module (it imports no other fedsample module but the parameter type): the strategy's parts, the
client procedures (:mod:`fedsample.client`), the engines and the federations all speak these types.

- server -> client: :class:`SizeQuery`, :class:`SizeSumRequest`, :class:`ProbeRequest`, :class:`TrainPayload`,
  :class:`TrainHeld`, :class:`HeldRequest`; one request shared by every asked client, or :class:`PerClient` (one
  each), read by every federation through :func:`payloads_for`. A request's type decides what the client does: each
  request class declares its :class:`Procedure` (the procedure's name, its random stream, its failure-model phase,
  whether it trains, computes with the model, or answers an update a secure sum seals), and
  :data:`fedsample.client.PROCEDURES` maps the type to the client function;
- client -> server: an ``int`` size report, :class:`ProbeReport`, :class:`TrainReport`, :class:`HeldReport`;
- on the client only: :class:`ClientContext` (its data, the model, its own state), :class:`LocalSample` (what its
  data plan drew) and the :class:`DataWeights` rule it applies to its own data.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, ClassVar, Generic, Iterator, Literal, Mapping, Protocol, Sequence, TypeAlias, TypeVar, cast, overload, runtime_checkable

import numpy as np
import torch
from torch import nn

from fedsample import checks

if TYPE_CHECKING:  # the parts' Protocols, which speak these messages (fedsample.parts imports this module)
    from fedsample.parts import DataPlan, LocalSolver, UpdatePrivacy

__all__ = [
    "ClientContext", "ClientState", "DataWeights", "SIZES", "HeldReport", "HeldRequest", "LocalResult", "LocalSample", "NoSamples", "Params", "PerClient", "ProbeReport",
    "ProbeRequest", "Procedure", "ReplyStatistic", "Shared", "SummedStatistic", "summed_statistics", "SizeQuery", "SizeSumRequest", "TrainHeld", "TrainPayload", "TrainReport", "payloads_for",
    "PlannedSum", "planned_for", "procedure_of", "reply_statistics", "requests_of", "unplanned", "with_plan",
]

#: A model's parameters (or an update) by name: what crosses the door as tensors.
Params = dict[str, torch.Tensor]


class NoSamples(ValueError):
    """A client asked for statistics of data it does not hold (a probe of a client without samples): its reply is
    ``Failed`` with ``no_samples`` set, which the strategy names as such rather than as a diverged model."""


#: What a client keeps on its side between calls, by key (:attr:`ClientContext.state`; in checkpoints, never sent):
#: each client procedure reads back, by type, the values it wrote (:mod:`fedsample.client`).
ClientState: TypeAlias = dict[str, object]


@dataclass
class ClientContext:
    """One client's data (as tensors) and the shared model architecture, plus ``state``: a dict the client
    procedures may read and write that stays with the client across rounds and never goes to the server
    (the federation keeps it, and exports it only into checkpoints, e.g. ISFedAvg's Eq. 53 data weights).
    ``kept``: where a federation that holds the model still (the diagnosis) keeps what the client computes from
    its data and that model alone, so that it is computed once rather than every round (ISFedAvg's per-sample
    gradient norms, :func:`fedsample.sampling.importance.gradient_norms`); None (every other federation): nothing
    is kept. Unlike ``state`` it changes no result and is never checkpointed. ``measure``: where an in-process
    engine measures what its clients train (:mod:`fedsample.runtime.measured`), the rows a train call trained on are
    told to it here, on the simulation's side of the door (never in the reply); None elsewhere."""

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    module: nn.Module
    task: str
    num_classes: int
    state: ClientState = field(default_factory=dict)
    kept: dict[str, object] | None = None
    measure: Callable[[int | None], None] | None = None

    @property
    def size(self) -> int:
        return len(self.y)

    def label_counts(self) -> np.ndarray:
        return np.bincount(self.y.cpu().numpy(), minlength=self.num_classes)


@dataclass
class LocalSample:
    """What a data plan drew on a client: positions into its data, optionally a distribution over them for
    minibatches drawn with replacement (``probs``) and a per-sample gradient scale (``scale``). ``block``: the
    sample is made of consecutive minibatches of ``block`` positions, one local step each, in order (ISFedAvg's
    epochs), and ``step_scale`` multiplies each step's regularizer gradient (the factor 1/(K p_k E_k) of its Eq. 8,
    :class:`fedsample.training.local.EpochSGD`)."""

    indices: np.ndarray
    probs: np.ndarray | None = None
    scale: np.ndarray | None = None
    block: int | None = None
    step_scale: float = 1.0

    def __len__(self) -> int:
        return len(self.indices)


class DataWeights(Protocol):
    """A server-sent rule the client applies to its own data: its normalized data inclusion probabilities
    p_n (sum 1) given the per-sample gradient norms at the probed model (ISFedAvg's Lemma 6 / Eq. 49 / Eq. 53)."""

    def probabilities(self, ctx: ClientContext, grad_norms: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Procedure:
    """What a request asks of a client, declared once by the request's class (its ``procedure`` class variable), so
    that no federation tells requests apart by a name:

    - ``name``: the client procedure's name, as a round's record names a failed client's phase, the privacy ledger a
      call, and Flower a message type (:mod:`fedsample.flower.codec`);
    - ``stream``: the purpose of the client's random stream (seed, round, client, purpose) (:mod:`fedsample.rng`);
    - ``phase``: the failure model's phase (:mod:`fedsample.federation.faults`): whose dropout decides the client;
    - ``trains``: the client trains locally (a round's local trainings);
    - ``computes``: the client computes with the model (runs side by side on client threads);
    - ``update``: the reply carries an update (summed on Ray's actors and a worker pool's shards);
    - ``sealed``: a secure sum seals the replies (:mod:`fedsample.federation.secure_sum`)."""

    name: str
    stream: str
    phase: str
    trains: bool = False
    computes: bool = False
    update: bool = False
    sealed: bool = False


@dataclass(frozen=True)
class SizeQuery:
    """The server's question about data size: ``exact`` (only when the strategy declares it) or
    ``randomized`` response with budget ``epsilon`` and threshold ``M``. With ``permanent`` (the default)
    each client randomizes once and repeats that answer every round (RAPPOR's memoization), so a run
    reveals what one report reveals; ``permanent=False`` re-draws the answer every round."""

    procedure: ClassVar[Procedure] = Procedure("report_size", stream="report_size", phase="report_size")

    mode: Literal["exact", "randomized"]
    epsilon: float | None = None
    M: int | None = None
    permanent: bool = True

    @property
    def randomization(self) -> tuple[float, int]:
        """``(epsilon, M)`` of a randomized query (an exact query has none: a ValueError)."""
        if self.epsilon is None or self.M is None:
            raise ValueError(f"a {self.mode} size query carries no (epsilon, M)")
        return self.epsilon, self.M


@dataclass(frozen=True)
@checks.constrained(count_noise=checks.NON_NEGATIVE)
class SizeSumRequest:
    """Ask every client for its size *into a secure sum*, before the first draw (a count-only request: no model, no
    training). Each client's true size goes only into the sum, with its share N(0, count_noise^2 / asked) of Gaussian
    noise, exactly as a round's summed statistics are (:mod:`fedsample.federation.secure_sum`,
    :mod:`fedsample.flower.secagg`): the server learns N + N(0, count_noise^2 a / asked) for the a clients that
    answered, nothing per client. FedSampling's first ratio K/N^ comes from it
    (:class:`fedsample.sampling.data.FedSamplingData` with ``total_from="secure_sum"``). Answered by the count-only
    client procedure :func:`fedsample.client.sum_sizes`. The server reads the noised total as the sealed replies'
    :data:`SIZES` (:meth:`fedsample.rounds.ReplyList.summed`)."""

    procedure: ClassVar[Procedure] = Procedure("sum_sizes", stream="sum_sizes", phase="sum_sizes", sealed=True)

    count_noise: float


SIZES = "sizes"
"""The name of the clients' summed sizes, the one sum of a :class:`SizeSumRequest`."""


@dataclass(frozen=True)
@checks.constrained(minibatch=[checks.COUNT, None])
class ProbeRequest:
    """Ask for statistics of the local objective at ``params``. ``statistics`` says which:

    - ``"gradient"`` (the default): loss and full-gradient norm; with ``gradient=True`` also the flattened gradient
      (compression hooks refine this). With ``per_sample=True`` the report's ``extra["sigma2"]`` is the
      gradient-noise variance mean_n ||grad Q(w; x_n) - grad P_k(w)||^2 (ISFedAvg, Rizk et al. 2022, Lemma 7), from
      per-sample gradients; with ``data_weights`` (a rule the client applies to its own data) also
      ``extra["weighted_second_moment"]`` = (1/N_k^2) sum_n ||grad Q(w; x_n)||^2 / p_n, the sum in ISFedAvg's
      data-variability term sigma^2_{s,k} (Eq. 23), with the client's p_n; no per-sample value leaves the client;
    - ``"loss"``: the loss only (one forward pass, no gradient: power-of-choice, FedCor);
    - ``"labels"``: the client's label histogram only, no model evaluation (Fed-CBS).

    ``minibatch=b``: the loss (and gradient) on b of the client's samples drawn uniformly without replacement
    from its own probe stream (all of them when it holds at most b; power-of-choice's cpow-d) instead of on all
    of its data. The gradient options apply to ``statistics="gradient"`` only.

    ``partial=True``: the sampler can do without the clients the failure model loses in this phase (DELTA: they are
    not drawn, and the others' inclusion probabilities carry the share whose probe arrived); their replies stay
    :class:`~fedsample.rounds.Failed` instead of stopping the round. Clients do not read it."""

    procedure: ClassVar[Procedure] = Procedure("probe", stream="probe", phase="probe", computes=True)

    params: Params
    gradient: bool = False
    compression: str | None = None  # "squeeze" or "projection" (fedsample.sampling.compression), FedSTS/FedSTaS
    dim: int = 9  # compressed dimension d'
    projection_seed: int = 0  # seed of the shared Gaussian projection matrix
    per_sample: bool = False
    data_weights: DataWeights | None = None
    statistics: Literal["gradient", "loss", "labels"] = "gradient"
    minibatch: int | None = None
    partial: bool = False

    def __post_init__(self) -> None:
        if self.statistics != "gradient" and (self.gradient or self.compression is not None or self.per_sample):
            checks.fail("statistics", self.statistics, "'gradient' where a gradient, compression or per_sample is asked for", "ProbeRequest")


#: Bytes of one scalar in a probe reply (a float64 or an int64 count), and of one gradient coordinate (float32).
SCALAR_BYTES, COORDINATE_BYTES = 8, 4


@dataclass
class ProbeReport:
    """A client's answer to a :class:`ProbeRequest`: its ``loss`` and ``grad_norm`` (None where not asked for),
    the flattened ``gradient``, ``extra`` statistics, the ``compressed`` gradient and the ``label_counts``
    (one count per class) where asked for."""

    loss: float | None
    grad_norm: float | None
    gradient: np.ndarray | None = None
    extra: dict[str, float] = field(default_factory=dict)
    compressed: np.ndarray | None = None
    label_counts: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """What the reply sends up: 8 bytes per scalar (loss, gradient norm, each extra statistic, each label
        count) and 4 per gradient or compressed coordinate (float32)."""
        scalars = sum(v is not None for v in (self.loss, self.grad_norm)) + len(self.extra)
        scalars += 0 if self.label_counts is None else int(np.size(self.label_counts))
        coordinates = sum(int(np.size(a)) for a in (self.gradient, self.compressed) if a is not None)
        return SCALAR_BYTES * scalars + COORDINATE_BYTES * coordinates


@dataclass(frozen=True)
class PlannedSum:
    """The aggregator's declared reduction of a ``train`` call: the weighted sum the server will ask if every asked
    client's update arrives and passes the screen, ``sum_i weights_i * Delta_i`` over the positions of ``ids``, in
    order (:func:`fedsample.rounds.weighted_sum`'s arithmetic). It travels in the train request
    (:attr:`TrainPayload.planned`); an in-process engine that reads it there (:func:`planned_for`) may add each update
    into that sum as it arrives and drop it, instead of holding the cohort's updates until the server asks; asked
    anything else, it must still answer (:class:`fedsample.federation.summed.SummedUpdates` recomputes the updates it
    dropped)."""

    ids: np.ndarray
    weights: np.ndarray


@runtime_checkable
class ReplyStatistic(Protocol):
    """A number each client adds to its training reply, computed from the per-sample losses of the sample its plan
    drew, at the parameters it received (e.g. Oort's statistical utility,
    :class:`fedsample.sampling.oort.StatisticalUtility`). A client sampler that reads it declares it in its
    capabilities' ``reads_replies``; the train request names it (:attr:`TrainPayload.statistics`) and every engine
    adds ``of_cohort``'s value to each report's :attr:`TrainReport.statistics` under ``name``: a client by itself
    (one member), a batched engine for its whole cohort at once, the same float. It must be picklable (it travels in
    the request) and its value finite."""

    @property
    def name(self) -> str:
        """The key of the value in :attr:`TrainReport.statistics` (and of the Flower reply's metric)."""
        ...

    @property
    def released(self) -> str:
        """What the privacy ledger records the cohort's values as (e.g. ``"statistical utilities"``)."""
        ...

    def of_cohort(self, losses: np.ndarray, member: np.ndarray, clients: int) -> np.ndarray:
        """One value per member of a cohort of ``clients`` from the per-sample ``losses`` (float64) of their drawn
        samples, ``member[s]`` the member of sample s (a member that drew nothing has no entry)."""
        ...


def reply_statistics(statistics: Sequence[ReplyStatistic], losses: np.ndarray, member: np.ndarray, clients: int) -> dict[str, np.ndarray]:
    """Each statistic's values for a cohort of ``clients`` (:meth:`ReplyStatistic.of_cohort`), by name; a single
    client is the cohort of one (``member`` all zeros)."""
    return {s.name: s.of_cohort(losses, member, clients) for s in statistics}


@runtime_checkable
class SummedStatistic(Protocol):
    """An integer each client adds to its training reply from what its plan drew, which the server learns only summed
    over the cohort (one more coordinate of the secure sum where there is one), with Gaussian noise of standard
    deviation ``noise`` on that sum, added by the asked clients in equal shares drawn from the cells of ``purpose``
    (:func:`fedsample.federation.secure_sum.count_shares`). A data plan declares it in its capabilities' ``summed``
    (e.g. FedSampling's drawn count, :class:`fedsample.sampling.data.DrawnCount`); every engine adds ``of_cohort``'s
    value to each report's :attr:`TrainReport.sums` under ``name``, and the server reads the sum by that name
    (:meth:`fedsample.rounds.ReplyList.summed`). It must be picklable (it travels in the plan)."""

    @property
    def name(self) -> str:
        """The key of the value in :attr:`TrainReport.sums` (and of the Flower reply's metric)."""
        ...

    @property
    def noise(self) -> float:
        """sigma, the standard deviation of the Gaussian noise on the cohort's sum (0: the exact sum)."""
        ...

    @property
    def purpose(self) -> str:
        """The purpose of the random cell the clients' noise shares come from (:mod:`fedsample.rng`)."""
        ...

    @property
    def released(self) -> str:
        """What the privacy ledger calls the sum (e.g. ``"drawn count"``): its release alone is ``"{released}
        {symbol}"``, with the noised update ``"update sum and {released}"`` (:mod:`fedsample.privacy.amplification`)."""
        ...

    @property
    def symbol(self) -> str:
        """The sum's letter in the ledger's reasons (e.g. ``"S"``: Gaussian noise sigma_S on S)."""
        ...

    def of_cohort(self, counts: np.ndarray) -> np.ndarray:
        """One integer per member of a cohort from ``counts[c]``, the number of samples member c's plan drew; it moves
        by at most j when a client draws j samples more or fewer (the ledger's sensitivity: one record moves the sum by
        at most 1)."""
        ...


def summed_statistics(statistics: Sequence[SummedStatistic], counts: np.ndarray) -> dict[str, np.ndarray]:
    """Each summed statistic's values for a cohort whose members drew ``counts`` samples (:meth:`SummedStatistic.of_cohort`),
    by name, as int64; a single client is the cohort of one."""
    return {s.name: np.asarray(s.of_cohort(counts), dtype=np.int64) for s in statistics}


@dataclass(frozen=True)
class TrainPayload:
    """Global parameters, the data plan, the local solver, the round number and, optionally, the update's
    privacy (clipping and Gaussian noise, :class:`fedsample.privacy.noise.UpdateNoise`) the client applies;
    ``statistics``: the :class:`ReplyStatistic` s each client adds to its report (those a client sampler's
    capabilities read, ``reads_replies``). ``planned``: the sum the server plans to ask of the
    call's replies (:class:`PlannedSum`, the aggregator's declared reduction), for the engine only; clients do not
    read it, and a federation that asks other clients than the round's cohort, or sends the request elsewhere, drops
    it (:func:`unplanned`)."""

    procedure: ClassVar[Procedure] = Procedure("train", stream="train", phase="train", trains=True, computes=True, update=True, sealed=True)

    params: Params
    plan: DataPlan
    solver: LocalSolver
    round: int
    noise: UpdatePrivacy | None = None
    statistics: tuple[ReplyStatistic, ...] = ()
    planned: PlannedSum | None = None


@dataclass(frozen=True)
class TrainHeld(TrainPayload):
    """Train as :class:`TrainPayload` asks, but keep the update on the client and answer only its norm
    (:class:`HeldReport`; :func:`fedsample.client.train_held`): the first phase of a sampler that chooses among clients
    that have trained (:class:`fedsample.parts.TrainsFirst`). It trains from the ``train`` stream, so a held update is
    the update the client would have sent, and it is the training phase of the failure model."""

    procedure: ClassVar[Procedure] = Procedure("train_held", stream="train", phase="train", trains=True, computes=True)

    @classmethod
    def of(cls, payload: TrainPayload) -> "TrainHeld":
        """The held form of ``payload`` (the same fields)."""
        return cls(**vars(payload))

    def training(self) -> TrainPayload:
        """The plain training request with the same fields (what the client trains before it holds the update)."""
        return TrainPayload(**vars(self))


@dataclass(frozen=True)
class LocalResult:
    """What a local solver's ``run`` returns (:class:`fedsample.parts.LocalSolver`): the pseudo-gradient, the local
    steps taken (tau_k), the mean loss where the solver knows it, FedNova's effective number of steps ||a_k||_1
    (Wang et al. 2020; None: a_k = tau_k), and the rows the steps read, with repeats (``rows_trained``: the sum of
    the minibatches' widths; None where not counted)."""

    update: Params
    steps: int
    loss: float
    norm_steps: float | None = None
    rows_trained: int | None = None


@dataclass(init=False)
class TrainReport:
    """A client's update (a descent direction), the number of local steps taken (tau_k), its mean loss,
    where the solver reports it, FedNova's effective number of steps ||a_k||_1 (None: a_k = tau_k), ``sums``: the
    value of each :class:`SummedStatistic` its plan declares, by name, which the server learns only summed (empty
    otherwise; e.g. FedSampling's drawn count, :class:`fedsample.sampling.data.DrawnCount`) and ``statistics``: the value of each
    :class:`ReplyStatistic` the payload asks for, by name (empty otherwise; a reply that took no step carries none,
    and a noised reply withholds them). ``rows_trained``: the rows its local steps read,
    with repeats (the sum of its minibatches' widths over its steps or epochs: the realised budget's unit,
    :func:`fedsample.budget.realised_samples`); None where the solver does not say, and in a noised reply, which
    withholds it like the loss and the steps."""

    update: Params
    steps: int
    loss: float
    norm_steps: float | None = None
    rows_trained: int | None = None
    statistics: Mapping[str, float] = field(default_factory=dict)
    sums: Mapping[str, int] = field(default_factory=dict)

    def __init__(self, update: Params, steps: int, loss: float, norm_steps: float | None = None, rows_trained: int | None = None,
                 statistics: Mapping[str, float] | None = None, sums: Mapping[str, int] | None = None) -> None:
        self.update, self.steps, self.loss, self.norm_steps, self.rows_trained = update, steps, loss, norm_steps, rows_trained
        self.statistics = {} if statistics is None else statistics
        if sums:  # else the class's empty mapping: a report carries sums only where its plan declares them
            self.sums = dict(sums)


TrainReport.sums = MappingProxyType({})  # the default of every report without sums, its own subclasses' included


@dataclass
class HeldReport:
    """A client's answer to ``train_held``: the norm ||U_k|| of the update it trained and keeps on its side (0 when
    its plan drew nothing); the update itself leaves the client only if the server asks for it (:class:`HeldRequest`)."""

    norm: float


@dataclass(frozen=True)
class HeldRequest:
    """Send the update kept by round ``round``'s :class:`TrainHeld` (the second phase of a sampler that chooses among
    clients that have trained, :class:`fedsample.parts.TrainsFirst`). ``shapes``: the parameters' names and shapes,
    so that the server checks the reply without sending the parameters again. The failure model decides it with the
    training phase (a client that trained and keeps its update sends it when asked)."""

    procedure: ClassVar[Procedure] = Procedure("send_held", stream="send_held", phase="train", update=True, sealed=True)

    round: int
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()


# --- one payload for all, or one per client ------------------------------------------------------------------

T = TypeVar("T")
"""What a :class:`PerClient` or a :class:`Shared` holds: requests, or a data sampler's plans."""
T_co = TypeVar("T_co", covariant=True)
"""The same, in the read-only classes (a PerClient of plans of one kind is a PerClient of plans)."""
P = TypeVar("P", bound="TrainPayload")
"""A train request (:class:`TrainPayload` or :class:`TrainHeld`)."""


@dataclass(frozen=True)
class PerClient(Generic[T_co]):
    """One request per asked client, in the order of the client ids (e.g. ISFedAvg's plans, one per agent), all of
    one type. Every other request handed to ``run`` is shared by every asked client."""

    payloads: tuple[T_co, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "payloads", tuple(self.payloads))
        if len(set(map(type, self.payloads))) > 1:
            raise TypeError(f"PerClient holds requests of one type, not {sorted({type(p).__name__ for p in self.payloads})}")

    shared = None  # no payload is shared by all

    @property
    def procedure(self) -> Procedure:
        """The procedure its requests declare (an empty PerClient declares none: a ValueError)."""
        if not self.payloads:
            raise ValueError("an empty PerClient declares no procedure")
        return procedure_of(self.payloads[0])

    def __len__(self) -> int:
        return len(self.payloads)

    def __iter__(self) -> Iterator[T_co]:
        return iter(self.payloads)

    def at(self, position: int) -> T_co:
        """The payload of the client at ``position``."""
        return self.payloads[position]

    def take(self, positions: Sequence[int] | np.ndarray) -> PerClient[T_co]:
        """The payloads of the clients at ``positions`` (a sub-cohort), in that order."""
        return PerClient(tuple(self.payloads[int(i)] for i in positions))


@dataclass(frozen=True)
class Shared(Generic[T_co]):
    """A payload sent to every asked client (what :func:`payloads_for` makes of any payload but :class:`PerClient`)."""

    shared: T_co

    @property
    def procedure(self) -> Procedure:
        """The procedure the shared request declares."""
        return procedure_of(self.shared)

    def at(self, position: int) -> T_co:
        return self.shared

    def take(self, positions: Sequence[int] | np.ndarray) -> T_co:
        return self.shared


@overload
def payloads_for(payload: PerClient[T], count: int) -> PerClient[T]: ...


@overload
def payloads_for(payload: T, count: int) -> PerClient[T] | Shared[T]: ...


def payloads_for(payload: PerClient[T] | T, count: int) -> PerClient[T] | Shared[T]:
    """How ``count`` asked clients read ``payload``: a :class:`PerClient` as it is (one payload each; its length
    checked), anything else as :class:`Shared` by all. A bare list or tuple is refused: per-client payloads are
    declared with :class:`PerClient`."""
    if isinstance(payload, PerClient):
        if len(payload) != count:
            raise ValueError(f"{len(payload)} payloads for {count} clients")
        return payload
    if isinstance(payload, (list, tuple)):
        raise TypeError("one payload per client is declared as fedsample.messages.PerClient(payloads), not a bare sequence")
    return Shared(payload)


def procedure_of(request: object) -> Procedure:
    """The :class:`Procedure` a request declares (by its class, or the class it extends); a TypeError naming the
    object for anything else."""
    for cls in type(request).__mro__:
        declared = vars(cls).get("procedure")
        if isinstance(declared, Procedure):
            return declared
    raise TypeError(f"{type(request).__name__} is not a request: a request class declares its procedure (fedsample.messages.Procedure)")


def requests_of(sent: PerClient[object] | Shared[object], kind: type[T]) -> PerClient[T] | Shared[T] | None:
    """``sent`` as requests of ``kind`` where it holds them (its first does: a :class:`PerClient` holds requests of
    one type), else None."""
    first = sent.shared if isinstance(sent, Shared) else sent.payloads[0] if len(sent) else None
    if not isinstance(first, kind):
        return None
    return cast("PerClient[T] | Shared[T]", sent)  # every payload of a PerClient has its first's type (__post_init__)


def planned_for(sent: PerClient[object] | Shared[object], client_ids: np.ndarray) -> PlannedSum | None:
    """The planned sum a train request carries (:attr:`TrainPayload.planned`) where it is a sum over exactly these
    clients in this order (a sub-cohort of the round's gets none), else None."""
    trains = requests_of(sent, TrainPayload)
    plan = trains.at(0).planned if trains is not None else None
    if plan is None or len(plan.ids) != len(client_ids) or not np.array_equal(plan.ids, np.asarray(client_ids)):
        return None
    return plan


@overload
def with_plan(request: PerClient[P], plan: PlannedSum | None) -> PerClient[P]: ...


@overload
def with_plan(request: P, plan: PlannedSum | None) -> P: ...


def with_plan(request: PerClient[P] | P, plan: PlannedSum | None) -> PerClient[P] | P:
    """``request`` (a train request, or :class:`PerClient` train requests) carrying ``plan`` as its planned sum."""
    if isinstance(request, PerClient):
        return PerClient(tuple(replace(p, planned=plan) for p in request))
    return replace(request, planned=plan)


@overload
def unplanned(request: PerClient[T]) -> PerClient[T]: ...


@overload
def unplanned(request: T) -> T: ...


def unplanned(request: object) -> object:
    """``request`` without a planned sum: what a federation sends when it asks other clients than the round's cohort
    (the failure model's sub-cohort) or sends the request out of this process (workers, Ray actors, Flower nodes).
    Every other request is returned as it is."""
    first = request.payloads[0] if isinstance(request, PerClient) and len(request) else request
    if not isinstance(first, TrainPayload) or first.planned is None:
        return request
    if isinstance(request, PerClient):  # train requests, all of one type
        return PerClient(tuple(replace(p, planned=None) for p in request.payloads if isinstance(p, TrainPayload)))
    return replace(first, planned=None)
