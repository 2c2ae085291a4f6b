"""The run's privacy ledger: every release that left the clients, as dp-accounting events, and epsilon(delta).

A *release* is what one call of a round sends to the server (size reports, probe statistics, training
replies), with the mechanism that protects it as a ``dp-accounting`` event (Google's ``dp_accounting``
package, the ``privacy`` extra) and the same release accounted without amplification:

- randomized-response size reports: ``RandomizedResponseDpEvent(1 - alpha, M - 1)`` (Qi et al. 2023, Eq. 1:
  the true clipped size with probability alpha, else uniform on M - 1 buckets); a permanent report is one
  release for the whole run (repeating it is post-processing);
- Gaussian noise on updates: ``GaussianDpEvent(z)``, ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``,
  ``SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z))`` or ``MixtureOfGaussiansDpEvent`` (a user's
  number of drawn records is binomial), as :mod:`fedsample.privacy.amplification` allows;
- releases without noise (exact sizes, probes, plain updates): recorded as *unprotected*; the run's epsilon is
  then infinite (reported as None in JSON) and the release is named.

Noise multipliers are the noise's standard deviation over the release's sensitivity under its neighbouring
relation (C for add/remove of one unit, 2C for replacing one, for a sum of contributions clipped to C).

epsilon(delta) composes the events with the privacy-loss-distribution accountant (``method="pld"``, the
default: dp-accounting's connect-the-dots PLD, pessimistic, discretized at :data:`PLD_DISCRETIZATION`, an upper
bound on the exact value) or the Renyi-DP accountant (``"rdp"``). Two events are outside one accountant's reach
in dp-accounting 0.6 and use the other for their relation, which the summary says (``accounting_method``): the
mixture of Gaussians (PLD only) and sampling without replacement (RDP only). A randomized response is
accounted as the change of one client's report bucket (dp-accounting's replace-one pair for the mechanism),
which is what adding, removing or replacing a record or a user's data does to that client's report, so it
composes with the releases of every relation.

Releases under different neighbouring relations (add/remove one, replace one: Flower's ``NeighboringRelation``
values) are never composed together: the summary gives one epsilon per relation (``by_relation``) and says so.

Field names follow Flower's accountant types (``flwr.supercore.privacy_accounting``: ``PrivacyConfig``'s
``target_delta``, ``neighboring_relation``, ``sampling_method``, ``max_epsilon``; ``PrivacySpent``'s ``epsilon``,
``delta``, ``num_releases``, ``accounting_method``, ``optimal_order``), so :func:`flower_spent` gives the
arguments of Flower's ``PrivacySpent`` from a summary.

The budget: with ``max_epsilon`` every call is checked *before* it is sent (:meth:`Ledger.check`), with the
release it would make if every asked client answered; a release that would take epsilon past the budget is
refused with :class:`BudgetExceeded` (one line), and the run stops before it. The ledger lives in the strategy
state, so a checkpoint saves it and ``resume`` continues it; a call that a resumed run repeats (same round, same
procedure, same position in the round: the same seed gives the same answer) is not counted twice.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator, Literal, Mapping, Sequence, TypedDict

import numpy as np

from fedsample import checks
from fedsample.privacy.accounting import DEFAULT_DELTA
from fedsample.runtime.records import JSON, JSONObject, as_int, as_list, as_object, as_text, malformed

__all__ = [
    "Accounting", "AccountingState", "BudgetExceeded", "Call", "Event", "KindSpent", "Ledger", "LedgerState", "PLD_DISCRETIZATION", "RelationSpent", "Release",
    "Spent", "Summary", "epsilon_of", "flower_spent", "gaussian", "mixture_of_gaussians", "poisson_sampled", "randomized_response", "sampled_without_replacement",
]

Unit = Literal["record", "user"]
Relation = Literal["add-or-remove-one", "replace-one"]
Threat = Literal["server", "released"]
Method = Literal["pld", "rdp"]
ADD_REMOVE: Relation = "add-or-remove-one"
REPLACE: Relation = "replace-one"
PLD_DISCRETIZATION = 1e-3  #: dp-accounting's value_discretization_interval: pessimistic rounding, an upper bound
Call = tuple[int | str, ...]  #: (round, procedure, position in the round[, which of its releases]) of one call
Event = JSONObject  #: a dp-accounting ``DpEvent`` as a plain dict: ``class_name`` and its arguments (JSON)


class Spent(TypedDict):
    """epsilon at ``delta`` of some releases composed: Flower's ``PrivacySpent`` fields (``optimal_order``: RDP only)."""

    epsilon: float
    delta: float
    num_releases: int
    accounting_method: str
    optimal_order: float | None


class KindSpent(TypedDict):
    """One kind of protected release on its own (:meth:`Ledger.spent_by_kind`; None: no accountant installed)."""

    epsilon: float | None
    epsilon_without_amplification: float | None
    num_releases: int


class RelationSpent(TypedDict, total=False):
    """One neighbouring relation's epsilon with and without amplification (None: no accountant installed), as
    :meth:`Ledger.summary` gives it (every key present)."""

    epsilon: float | None
    delta: float
    num_releases: int
    accounting_method: str
    optimal_order: float | None
    epsilon_without_amplification: float | None
    neighboring_relation: Relation


class Summary(RelationSpent, total=False):
    """:meth:`Ledger.summary`: the settings, epsilon with and without amplification (one relation: its
    :class:`RelationSpent` at the top level; several: ``by_relation``, and ``epsilon`` None), the unprotected releases
    and why, the latest amplification decision."""

    unit: Unit
    threat_model: Threat
    threat: str
    target_delta: float
    max_epsilon: float | None
    k: int | None
    sampling_method: str | list[str]
    unprotected: list[str]
    unprotected_why: dict[str, str]
    amplification: str
    by_relation: dict[Relation, RelationSpent]
    note: str
    releases: list[JSONObject]
    by_release: dict[str, KindSpent]
    error: str  #: a run's summary that could not be computed: only this line (simulate keeps the trained run)


THREATS = {
    "server": "the server's view: every message it receives (size reports, probes, replies or their secure sum) and "
              "who was asked and answered",
    "released": "the released models only (the server is trusted and keeps its view)",
}


# --- events: dp-accounting's DpEvent classes, written as plain dicts (JSON; no import until epsilon is asked) --


def gaussian(noise_multiplier: float) -> Event:
    """``GaussianDpEvent``: Gaussian noise of ``noise_multiplier`` times the sensitivity."""
    return {"class_name": "GaussianDpEvent", "noise_multiplier": float(noise_multiplier)}


def poisson_sampled(rate: float, event: Event) -> Event:
    """``PoissonSampledDpEvent``: ``event`` on a sample that holds each unit independently with probability ``rate``."""
    return {"class_name": "PoissonSampledDpEvent", "sampling_probability": float(rate), "event": event}


def sampled_without_replacement(population: int, size: int, event: Event) -> Event:
    """``SampledWithoutReplacementDpEvent``: ``event`` on ``size`` of ``population`` units drawn uniformly."""
    return {"class_name": "SampledWithoutReplacementDpEvent", "source_dataset_size": int(population), "sample_size": int(size), "event": event}


def mixture_of_gaussians(noise_multiplier: float, sensitivities: Sequence[float], probabilities: Sequence[float]) -> Event:
    """``MixtureOfGaussiansDpEvent``: N(0, z^2) against sum_i p_i N(c_i, z^2) (the unit moves the output by
    c_i with probability p_i)."""
    return {"class_name": "MixtureOfGaussiansDpEvent", "standard_deviation": float(noise_multiplier),
            "sensitivities": [float(c) for c in sensitivities], "sampling_probs": [float(p) for p in probabilities]}


def randomized_response(noise_parameter: float, buckets: int) -> Event:
    """``RandomizedResponseDpEvent``: the true bucket with probability 1 - p, else one of ``buckets`` uniformly."""
    return {"class_name": "RandomizedResponseDpEvent", "noise_parameter": float(noise_parameter), "num_buckets": int(buckets)}


# --- settings, releases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accounting:
    """How a run's privacy is accounted (``simulate(privacy=...)``, an experiment's ``[privacy]`` table).

    ``unit``: whose privacy, one ``"record"`` or one ``"user"`` (a client's whole data); ``k``: at most k records
    per user (user-level accounting of per-example clipping and of data sampling needs it; the library checks
    it against the clients' sizes in a simulation, a deployment states it); ``delta``: the delta of the reported
    epsilon; ``method``: ``"pld"`` or ``"rdp"``; ``threat``: what the adversary sees (:data:`THREATS`);
    ``max_epsilon``: the budget (None: none), checked before every release."""

    unit: Unit = "user"
    k: int | None = None
    delta: float = DEFAULT_DELTA
    method: Method = "pld"
    threat: Threat = "server"
    max_epsilon: float | None = None

    def __post_init__(self) -> None:
        if self.unit not in ("record", "user"):
            raise ValueError(f"unit must be 'record' or 'user', got {self.unit!r}")
        if self.k is not None:
            checks.count("k (records per user)", self.k)
        checks.in_interval("delta", self.delta, 0, 1, closed="()")
        if self.method not in ("pld", "rdp"):
            raise ValueError(f"method must be 'pld' or 'rdp', got {self.method!r}")
        if self.threat not in THREATS:
            raise ValueError(f"threat must be 'server' or 'released', got {self.threat!r}")
        checks.positive("max_epsilon", self.max_epsilon, optional=True)

    def shaping(self) -> dict[str, str | int | None]:
        """The settings that decide which events a release makes (unit, k, threat); delta, method and the
        budget only change what is computed from them."""
        return {"unit": self.unit, "k": self.k, "threat": self.threat}


@dataclass(frozen=True)
class Release:
    """One thing that left the clients in one call of a round, and what protects it.

    ``event``: the mechanism with the amplification the conditions allow (None: unprotected); ``unamplified``:
    the same release accounted without amplification; ``relation``: its neighbouring relation (None: holds
    under every relation, as a per-client randomized response does); ``sampling``: Flower's sampling-method
    name of the amplification used (``poisson``, ``without-replacement``, ``no-amplification``, or
    ``binomial-count`` for a user's mixture); ``reason``: why amplification applies or why not; ``once``: a key
    shared by releases that are one release (a permanent report repeated); ``call``: (round, procedure, position
    in the round), so that a call repeated after a resume is not counted twice."""

    round: int
    what: str
    event: Event | None
    unamplified: Event | None
    relation: Relation | None
    sampling: str = "no-amplification"
    reason: str = ""
    once: str = ""
    call: Call | None = None

    @property
    def protected(self) -> bool:
        return self.event is not None

    def record(self) -> JSONObject:
        """The release as JSON (privacy.json)."""
        out: JSONObject = asdict(self)
        out["call"] = list(self.call) if self.call is not None else None
        return out

    @classmethod
    def of_record(cls, record: Mapping[str, JSON]) -> Release:
        """The release :meth:`record` wrote, read back from JSON field by field (``call`` back to a tuple; a field
        a record leaves out keeps its default); a ValueError names a field of the wrong kind."""
        texts = {name: as_text(record[name], f"release.{name}") for name in ("sampling", "reason", "once") if name in record}
        return cls(
            round=as_int(record["round"], "release.round"), what=as_text(record["what"], "release.what"),
            event=_event_of(record, "event"), unamplified=_event_of(record, "unamplified"),
            relation=_relation_of(record["relation"]), **texts, call=_call_of(record.get("call")),
        )


def _event_of(record: Mapping[str, JSON], name: str) -> Event | None:
    value = record[name]
    return None if value is None else as_object(value, f"release.{name}")


def _relation_of(value: JSON) -> Relation | None:
    for relation in (None, ADD_REMOVE, REPLACE):
        if value == relation:
            return relation
    raise malformed(value, "release.relation", f"{ADD_REMOVE!r}, {REPLACE!r} or null")


def _call_of(value: JSON) -> Call | None:
    if value is None:
        return None
    items = as_list(value, "release.call")
    call = tuple(v for v in items if isinstance(v, (int, str)))
    if len(call) != len(items):
        raise malformed(value, "release.call", "an array of integers and strings")
    return call


class BudgetExceeded(Exception):
    """A release would take the run past ``max_epsilon``: the run stops before it (one line)."""


# --- epsilon ----------------------------------------------------------------------------------------------


def _dp_accounting() -> Any:  # the dp-accounting package (no type information)
    try:
        import dp_accounting
        from dp_accounting.pld import privacy_loss_distribution  # noqa: F401
        from dp_accounting.rdp import rdp_privacy_accountant  # noqa: F401
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("the privacy ledger's epsilon needs the 'dp-accounting' package: pip install 'fedsample[privacy]'") from error
    return dp_accounting


PLD_ONLY = {"MixtureOfGaussiansDpEvent"}
RDP_ONLY = {"SampledWithoutReplacementDpEvent"}


def _names(event: Event) -> set[str]:
    inner = event.get("event")
    return {str(event["class_name"])} | (_names(inner) if isinstance(inner, dict) else set())


def method_for(events: Sequence[Event], asked: Method) -> Method:
    """The accountant that can compose ``events``: ``asked`` unless an event needs the other one."""
    names: set[str] = set().union(*(_names(e) for e in events)) if events else set()
    if names & PLD_ONLY and names & RDP_ONLY:
        raise ValueError("a mixture of Gaussians (PLD only) and sampling without replacement (RDP only) in one relation: "
                         "dp-accounting 0.6 composes them in no accountant")
    if names & PLD_ONLY:
        return "pld"
    if names & RDP_ONLY:
        return "rdp"
    return asked


def _pld(event: Event) -> Any:
    """The privacy-loss distribution of one event (sensitivity 1 in the event's units), built once per distinct
    event in a process (a run with permanent size reports repeats one q every round; a mixture of many
    Gaussians takes long to build)."""
    return _pld_of(json.dumps(event, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _pld_of(key: str) -> Any:
    event = json.loads(key)
    dpa = _dp_accounting()
    PLD = dpa.pld.privacy_loss_distribution
    name, d = event["class_name"], PLD_DISCRETIZATION
    if name == "GaussianDpEvent":
        return PLD.from_gaussian_mechanism(event["noise_multiplier"], value_discretization_interval=d)
    if name == "PoissonSampledDpEvent" and event["event"]["class_name"] == "GaussianDpEvent":
        q = event["sampling_probability"]
        return PLD.from_gaussian_mechanism(event["event"]["noise_multiplier"], sampling_prob=q, value_discretization_interval=d) if q > 0 else PLD.identity(d)
    if name == "MixtureOfGaussiansDpEvent":
        return PLD.from_mixture_gaussian_mechanism(event["standard_deviation"], event["sensitivities"], event["sampling_probs"],
                                                   value_discretization_interval=d)
    if name == "RandomizedResponseDpEvent":  # the change of one client's input bucket
        if event["num_buckets"] == 1:  # one possible answer: nothing is revealed
            return PLD.identity(d)
        return PLD.from_randomized_response(event["noise_parameter"], event["num_buckets"], value_discretization_interval=d,
                                            neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    raise ValueError(f"the PLD accountant has no {name} here")


def _dp_event(event: Event) -> Any:
    """The dp-accounting object of an event dict."""
    dpa = _dp_accounting()
    values = {k: (_dp_event(v) if k == "event" and isinstance(v, dict) else v) for k, v in event.items() if k != "class_name"}
    return getattr(dpa, str(event["class_name"]))(**values)


@contextmanager
def _quiet_absl() -> Iterator[None]:
    """dp-accounting logs (through absl) each fractional RDP order whose series does not converge, and leaves that
    order out of the conversion, as it should: the notices are kept off the user's terminal."""
    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _rdp(event: Event, relation: Relation) -> np.ndarray:
    """The RDP curve of one event at dp-accounting's default orders."""
    with _quiet_absl():
        return _rdp_curve(event, relation)


def _curve(rdp: object) -> np.ndarray:
    """dp-accounting's RDP curve (one value per order of its accountant), checked to be the array it is."""
    if not isinstance(rdp, np.ndarray):
        raise TypeError(f"dp-accounting gave an RDP curve of type {type(rdp).__name__}, not a numpy array")
    return rdp


def _rdp_curve(event: Event, relation: Relation) -> np.ndarray:
    dpa = _dp_accounting()
    rel = dpa.NeighboringRelation
    if event["class_name"] == "RandomizedResponseDpEvent" and event["num_buckets"] == 1:  # one possible answer
        return _curve(dpa.rdp.RdpAccountant().rdp * 0.0)
    if event["class_name"] == "RandomizedResponseDpEvent":
        accountant = dpa.rdp.RdpAccountant(neighboring_relation=rel.REPLACE_ONE)  # the change of one client's input bucket
    elif event["class_name"] == "SampledWithoutReplacementDpEvent":
        accountant = dpa.rdp.RdpAccountant(neighboring_relation=rel.REPLACE_ONE)
    else:
        accountant = dpa.rdp.RdpAccountant(neighboring_relation=rel.ADD_OR_REMOVE_ONE)  # z in the relation's sensitivity units
    return _curve(accountant.compose(_dp_event(event)).rdp)


def epsilon_of(events: Sequence[Event], delta: float, method: Method = "pld", relation: Relation = ADD_REMOVE) -> Spent:
    """epsilon at ``delta`` of the events composed in order: ``{"epsilon", "delta", "num_releases",
    "accounting_method", "optimal_order"}`` (Flower's ``PrivacySpent`` fields; the optimal order for RDP only)."""
    used = method_for(events, method)
    if not events:
        return _spent(0.0, delta, 0, used)
    if used == "pld":
        composed = _pld(events[0])
        for event in events[1:]:
            composed = composed.compose(_pld(event))
        return _spent(composed.get_epsilon_for_delta(delta), delta, len(events), used)
    return _rdp_spent(_curve(sum(_rdp(e, relation) for e in events)), delta, len(events))


def _spent(epsilon: float, delta: float, count: int, method: str, order: float | None = None) -> Spent:
    return {"epsilon": float(epsilon), "delta": float(delta), "num_releases": int(count), "accounting_method": method,
            "optimal_order": order}


def _rdp_spent(rdp: np.ndarray, delta: float, count: int) -> Spent:
    dpa = _dp_accounting()
    orders = dpa.rdp.RdpAccountant().orders
    epsilon, order = dpa.rdp.rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)
    return _spent(epsilon, delta, count, "rdp", float(order))


# --- the ledger ----------------------------------------------------------------------------------------------


class AccountingState(TypedDict):
    """:class:`Accounting`'s settings as :meth:`Ledger.state_dict` writes them (JSON)."""

    unit: Unit
    k: int | None
    delta: float
    method: Method
    threat: Threat
    max_epsilon: float | None


class LedgerState(TypedDict):
    """What :meth:`Ledger.state_dict` writes: the accounting settings and each release's record
    (:meth:`Release.record`, JSON)."""

    accounting: AccountingState
    releases: list[JSONObject]


class Pickled(TypedDict):
    """What a pickled :class:`Ledger` keeps (its PLD and RDP caches are rebuilt)."""

    accounting: Accounting
    releases: list[Release]


@dataclass
class Ledger:
    """The releases of a run so far (append-only) and what they cost; see the module docstring."""

    accounting: Accounting = field(default_factory=Accounting)
    releases: list[Release] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._cache: dict[tuple[Relation, bool, Method], tuple[int, Any]] = {}  # (relation, amplified, method) -> (events composed, their PLD or RDP curve): not saved
        self._seen = {key for r in self.releases for key in _keys(r)}  # once keys and calls already counted

    def __getstate__(self) -> Pickled:
        return {"accounting": self.accounting, "releases": self.releases}

    def __setstate__(self, state: Pickled) -> None:
        self.accounting, self.releases = state["accounting"], state["releases"]
        self.__post_init__()

    # --- recording ---

    def is_known(self, release: Release) -> bool:
        """A release already counted: the same ``once`` key (a permanent report) or the same call (a resumed run)."""
        return any(key in self._seen for key in _keys(release))

    def new(self, releases: Iterable[Release]) -> list[Release]:
        """The releases of ``releases`` not counted yet (each once)."""
        out: list[Release] = []
        for r in releases:
            if not self.is_known(r) and not any(r.once and o.once == r.once for o in out):
                out.append(r)
        return out

    def add(self, releases: Iterable[Release]) -> list[Release]:
        """Record the releases not counted yet; returns them."""
        fresh = self.new(releases)
        self.releases.extend(fresh)
        self._seen.update(key for r in fresh for key in _keys(r))
        return fresh

    def check(self, releases: Iterable[Release]) -> None:
        """Raise :class:`BudgetExceeded` if recording ``releases`` would take epsilon past ``max_epsilon``."""
        budget = self.accounting.max_epsilon
        fresh = self.new(releases)
        if budget is None or not fresh:
            return
        for relation, spent in self.spent(extra=fresh).items():
            if spent["epsilon"] > budget:
                what = ", ".join(sorted({r.what for r in fresh}))
                value = "unbounded (an unprotected release)" if math.isinf(spent["epsilon"]) else f"{spent['epsilon']:.4g}"
                raise BudgetExceeded(
                    f"privacy budget: round {fresh[0].round + 1}'s {what} would bring epsilon to {value} > max_epsilon = "
                    f"{budget:g} (delta = {self.accounting.delta:g}, {relation}); the run stops before it"
                )

    # --- epsilon ---

    def relations(self, extra: Sequence[Release] = ()) -> list[Relation]:
        """The neighbouring relations of the protected releases (add/remove when none names one)."""
        named = sorted({r.relation for r in [*self.releases, *extra] if r.protected and r.relation is not None})
        return named or [ADD_REMOVE]

    def unprotected(self, extra: Sequence[Release] = ()) -> list[str]:
        """What was released without protection (each name once, in order)."""
        return list(dict.fromkeys(r.what for r in [*self.releases, *extra] if not r.protected))

    def unprotected_reasons(self) -> dict[str, str]:
        """Why each unprotected release is unprotected (its first recorded reason): what it reveals, e.g. that one
        user's drawn records move FedSampling's count S by as many as it holds."""
        reasons: dict[str, str] = {}
        for r in self.releases:
            if not r.protected:
                reasons.setdefault(r.what, r.reason)
        return reasons

    def spent(self, amplified: bool = True, extra: Sequence[Release] = ()) -> dict[Relation, Spent]:
        """Per relation, Flower's ``PrivacySpent`` fields at the accounting's delta, over the recorded releases
        (plus ``extra``, not recorded): infinite epsilon when any release was unprotected."""
        delta = self.accounting.delta
        out: dict[Relation, Spent] = {}
        for relation in self.relations(extra):
            def events_of(releases: Sequence[Release], relation: Relation = relation) -> list[Event]:
                chosen = [(r.event if amplified else r.unamplified) for r in releases if r.protected and r.relation in (relation, None)]
                return [e for e in chosen if e is not None]

            recorded, added = events_of(self.releases), events_of(extra)
            if self.unprotected(extra):
                out[relation] = _spent(math.inf, delta, len(recorded) + len(added), method_for(recorded + added, self.accounting.method))
            else:
                out[relation] = self._composed(relation, amplified, recorded + added, len(recorded))
        return out

    def _composed(self, relation: Relation, amplified: bool, events: list[Event], recorded: int) -> Spent:
        """epsilon of ``events`` composed in order, reusing the composition of the first ``recorded`` (cached:
        one composition per new release, the same sequence of operations however often it is asked)."""
        method = method_for(events, self.accounting.method)
        delta = self.accounting.delta
        if not events:
            return _spent(0.0, delta, 0, method)
        key = (relation, amplified, method)
        count, state = self._cache.get(key, (0, None))
        if count > recorded:  # never happens for an append-only ledger; recompute to be safe
            count, state = 0, None
        for i in range(count, len(events)):
            one = _pld(events[i]) if method == "pld" else _rdp(events[i], relation)
            state = one if state is None else (state.compose(one) if method == "pld" else state + one)
            if i + 1 == recorded:
                self._cache[key] = (recorded, state)
        if method == "pld":
            return _spent(state.get_epsilon_for_delta(delta), delta, len(events), method)
        return _rdp_spent(state, delta, len(events))

    # --- reports ---

    def summary(self, releases: bool = False) -> Summary:
        """The ledger for a round log, ``results.json`` and ``privacy.json``: settings (unit, threat model, target
        delta, budget), per relation epsilon with and without amplification, the unprotected releases and why, and the
        latest amplification decision; with ``releases`` every release. Without the ``privacy`` extra an epsilon
        that needs the accountant is None, and ``accounting_method`` says why."""
        a = self.accounting
        groups = self._by_relation()
        sampling = list(dict.fromkeys(r.sampling for r in self.releases if r.protected and r.relation is not None))
        settings: Summary = {
            "unit": a.unit, "threat_model": a.threat, "threat": THREATS[a.threat], "target_delta": a.delta,
            "max_epsilon": a.max_epsilon, "k": a.k, "sampling_method": sampling[0] if len(sampling) == 1 else sampling,
            "unprotected": self.unprotected(), "unprotected_why": self.unprotected_reasons(), "amplification": self.latest_reason(),
        }
        if len(groups) == 1:
            (only,) = groups.values()
            out: Summary = {**settings, **only}
        else:
            out = {**settings, "epsilon": None, "by_relation": groups, "note": (
                "releases under different neighbouring relations are not composed together: each relation's epsilon covers "
                "only its own releases (and the size reports)")}
        if releases:
            out["releases"] = [r.record() for r in self.releases]
            out["by_release"] = self.spent_by_kind()
        return out

    def _by_relation(self) -> dict[Relation, RelationSpent]:
        """Per relation, epsilon with and without amplification (None without the ``privacy`` extra, and
        ``accounting_method`` says why)."""
        try:
            with_amp, without = self.spent(True), self.spent(False)
        except ImportError as missing:
            unknown = _spent(math.nan, self.accounting.delta, len(self.releases), f"unavailable: {missing}")
            return {rel: {**unknown, "epsilon": None, "epsilon_without_amplification": None, "neighboring_relation": rel}
                    for rel in self.relations()}
        return {rel: {**with_amp[rel], "epsilon_without_amplification": without[rel]["epsilon"], "neighboring_relation": rel}
                for rel in with_amp}

    def spent_by_kind(self) -> dict[str, KindSpent]:
        """Each kind of protected release on its own (e.g. the size reports, FedSampling's noised drawn count S):
        ``{what: {"epsilon", "epsilon_without_amplification", "num_releases"}}`` at the accounting's delta, its
        events composed in order under their relation (the size reports' under add/remove). What a release costs
        alone; the run's epsilon is the composition of all of them (None where a release is unprotected)."""
        a, out = self.accounting, dict[str, KindSpent]()
        for what in dict.fromkeys(r.what for r in self.releases if r.protected):
            chosen = [r for r in self.releases if r.protected and r.what == what]
            relation = next((r.relation for r in chosen if r.relation is not None), ADD_REMOVE)
            try:
                # a protected release carries both events
                with_amp = epsilon_of([r.event for r in chosen if r.event is not None], a.delta, a.method, relation)
                without = epsilon_of([r.unamplified for r in chosen if r.unamplified is not None], a.delta, a.method, relation)
            except ImportError:
                out[what] = {"epsilon": None, "epsilon_without_amplification": None, "num_releases": len(chosen)}
                continue
            out[what] = {"epsilon": with_amp["epsilon"], "epsilon_without_amplification": without["epsilon"],
                         "num_releases": len(chosen)}
        return out

    def latest_reason(self) -> str:
        """The amplification decision of the latest protected training release (why it applies, or why not)."""
        for r in reversed(self.releases):
            if r.reason and r.what.startswith(("update", "per-client update")):
                return r.reason
        return ""

    def round_figures(self) -> JSONObject:
        """The round log's keys: ``privacy_epsilon`` (None: unbounded, or given per relation), ``privacy_epsilon_no_amplification``,
        ``privacy_delta``, ``privacy_unit``, ``privacy_relation``, ``privacy_threat``, ``privacy_method``,
        ``privacy_amplification`` and, where something was released unprotected, ``privacy_unprotected``."""
        s = self.summary()
        out: JSONObject = {
            "privacy_epsilon": _bounded(s["epsilon"]), "privacy_epsilon_no_amplification": _bounded(s.get("epsilon_without_amplification")),
            "privacy_delta": s["target_delta"], "privacy_unit": s["unit"], "privacy_threat": s["threat_model"],
            "privacy_relation": s.get("neighboring_relation", "mixed"), "privacy_method": s.get("accounting_method", "mixed"),
            "privacy_amplification": s["amplification"],
        }
        if "by_relation" in s:
            out.update({f"privacy_epsilon[{rel}]": _bounded(g["epsilon"]) for rel, g in s["by_relation"].items()})
        if s["unprotected"]:
            out["privacy_unprotected"] = list[JSON](s["unprotected"])
        return out

    # --- checkpoints ---

    def state_dict(self) -> JSONObject:
        """JSON-able state: the settings and the releases."""
        return {"accounting": asdict(self.accounting), "releases": [r.record() for r in self.releases]}

    @classmethod
    def from_state_dict(cls, state: LedgerState) -> "Ledger":
        """The ledger :meth:`state_dict` wrote; each release keeps the fields :class:`Release` declares (a record
        is JSON read back: its values go to the fields by name, ``call`` back to a tuple)."""
        return cls(Accounting(**state["accounting"]), [Release.of_record(r) for r in state["releases"]])

    def continued_with(self, accounting: Accounting) -> "Ledger":
        """This ledger under ``accounting`` (a resumed run): the events must have been made under the same unit,
        k and threat model; delta, method and budget may change (they only change what is computed)."""
        if self.accounting.shaping() != accounting.shaping():
            changed = ", ".join(k for k, v in accounting.shaping().items() if self.accounting.shaping()[k] != v)
            raise ValueError(f"the saved privacy ledger was kept with other accounting settings ({changed} differ)")
        return Ledger(accounting, list(self.releases))


def _keys(release: Release) -> list[tuple[str, object]]:
    """What makes a release the same as one already counted: its ``once`` key, its call."""
    return ([("once", release.once)] if release.once else []) + ([("call", tuple(release.call))] if release.call is not None else [])


def _bounded(epsilon: float | None) -> float | None:
    """epsilon for a round log: None where it is unbounded (an unprotected release), so that logs stay finite."""
    return None if epsilon is None or math.isinf(epsilon) else epsilon


FLOWER_SPENT: tuple[Literal["epsilon", "delta", "num_releases", "accounting_method", "optimal_order"], ...] = (
    "epsilon", "delta", "num_releases", "accounting_method", "optimal_order")


def flower_spent(summary: Summary) -> dict[str, object]:
    """The arguments of Flower's ``PrivacySpent`` (``flwr.supercore.privacy_accounting``, flwr >= 1.41) from a
    one-relation summary: ``PrivacySpent(**flower_spent(summary))`` (flwr is imported only in fedsample.flower)."""
    return {name: summary[name] for name in FLOWER_SPENT}
