"""What a part declares, checked where it is declared or where the strategy is built: a capabilities record with a
misspelt or missing field is the dataclass's ``TypeError`` naming the field, one with a value of the wrong kind a
one-line ``ValueError`` (naming the part where the strategy builds it); a part declared the old way (separate class
attributes), one without a record, one with a record of another kind and one missing a method of its Protocol are
refused at construction in one line naming the part; a cohort whose ids or inclusion probabilities are out of range
is refused in the round, naming the sampler, instead of an ``IndexError`` (or a silent division) later."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import torch
import pytest

import fedsample as fs
from fedsample import parts
from fedsample.client import local_result
from fedsample.messages import LocalResult
from fedsample.parts import (
    AggregatorCapabilities, ClientSamplerCapabilities, CohortPlanCapabilities, DataSamplerCapabilities, InclusionKind, Learns, Limit,
    LocalSolverCapabilities, SizeNeed, UpdatePrivacyCapabilities,
)
from fedsample.rounds import Cohort, RoundContext
from fedsample.training.aggregate import WeightedMean
from helpers import blobs, federate


@dataclasses.dataclass(frozen=True)
class Fixed:
    """A user's client sampler returning the cohort it is given (ids, pi)."""

    ids: tuple = (0, 1)
    pi: tuple = (0.5, 0.5)
    capabilities = ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=())

    def select(self, ctx: RoundContext) -> Cohort:
        return Cohort(np.array(self.ids), np.array(self.pi), ctx.num_clients)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return float(len(self.ids))


class NoExpectedCohort:
    """A sampler missing ``expected_cohort`` (the Protocol's other method)."""

    capabilities = Fixed.capabilities

    def select(self, ctx: RoundContext) -> Cohort:
        return Cohort(np.array([0]), np.array([1.0]), ctx.num_clients)


def strategy(clients) -> fs.Strategy:
    return dataclasses.replace(fs.recipes.fedavg(clients_per_round=2, steps=1, batch_size=4), clients=clients,
                               aggregate=WeightedMean("uniform"), sizes=None)


@pytest.mark.parametrize("record, fields, message", [
    (ClientSamplerCapabilities, dict(inclusion_kinds=InclusionKind.DEGENERATE, server_learns=()),
     "ClientSamplerCapabilities.__init__() got an unexpected keyword argument 'inclusion_kinds'"),
    (ClientSamplerCapabilities, dict(server_learns=()),
     "ClientSamplerCapabilities.__init__() missing 1 required keyword-only argument: 'inclusion_kind'"),
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.EXACT),
     "ClientSamplerCapabilities.__init__() missing 1 required keyword-only argument: 'server_learns'"),
    (DataSamplerCapabilities, dict(needs_sizes=SizeNeed.COHORT),
     "DataSamplerCapabilities.__init__() missing 1 required keyword-only argument: 'weighs_by_inclusion'"),
    (AggregatorCapabilities, dict(linear=True),
     "AggregatorCapabilities.__init__() missing 1 required keyword-only argument: 'weighs_by_inclusion'"),
    (AggregatorCapabilities, dict(weighs_by_inclusion=False, lineaar=True),
     "AggregatorCapabilities.__init__() got an unexpected keyword argument 'lineaar'"),
    (LocalSolverCapabilities, dict(per_examples=True), "LocalSolverCapabilities.__init__() got an unexpected keyword argument 'per_examples'"),
    # an optional method's declaration, misspelt as the method (issue 39)
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.ESTIMATED, server_learns=(), estimate_inclusion=True),
     "ClientSamplerCapabilities.__init__() got an unexpected keyword argument 'estimate_inclusion'"),
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.EXACT, server_learns=(), expected_trainings=True),
     "ClientSamplerCapabilities.__init__() got an unexpected keyword argument 'expected_trainings'"),
    (LocalSolverCapabilities, dict(rows_trained=True), "LocalSolverCapabilities.__init__() got an unexpected keyword argument 'rows_trained'"),
    (UpdatePrivacyCapabilities, dict(hide_draw=True), "UpdatePrivacyCapabilities.__init__() got an unexpected keyword argument 'hide_draw'"),
    (UpdatePrivacyCapabilities, dict(shares=4), "UpdatePrivacyCapabilities.__init__() got an unexpected keyword argument 'shares'"),
    (CohortPlanCapabilities, dict(draw_blocks=True), "CohortPlanCapabilities.__init__() got an unexpected keyword argument 'draw_blocks'"),
    (CohortPlanCapabilities, dict(draws_on_gpu=True), "CohortPlanCapabilities.__init__() got an unexpected keyword argument 'draws_on_gpu'"),
])
def test_a_misspelt_or_missing_field_is_a_type_error_naming_it(record, fields, message):
    with pytest.raises(TypeError) as refused:
        record(**fields)
    assert str(refused.value) == message


@pytest.mark.parametrize("record, fields, message", [
    (ClientSamplerCapabilities, dict(inclusion_kind="exact", server_learns=()),
     "ClientSamplerCapabilities(inclusion_kind='exact'): inclusion_kind must be InclusionKind.EXACT, InclusionKind.ESTIMATED or "
     "InclusionKind.DEGENERATE"),
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.EXACT, server_learns=("sizes",)),
     "ClientSamplerCapabilities(server_learns=('sizes',)): server_learns must be a tuple of Learns, () where the server learns "
     "nothing beyond the training replies"),
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.EXACT, server_learns=(), draws_carry_sizes="yes"),
     "ClientSamplerCapabilities(draws_carry_sizes='yes'): draws_carry_sizes must be True or False"),
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.EXACT, server_learns=(), reads_replies=("losses",)),
     "ClientSamplerCapabilities(reads_replies=('losses',)): reads_replies must be a tuple of update, loss or reply statistics "
     "(fedsample.messages.ReplyStatistic)"),
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.EXACT, server_learns=(), limits=(3,)),
     "ClientSamplerCapabilities(limits=(3,)): limits must be a tuple of Limit"),
    (DataSamplerCapabilities, dict(weighs_by_inclusion=False, needs_sizes="exact"),
     "DataSamplerCapabilities(needs_sizes='exact'): needs_sizes must be a SizeNeed"),
    (DataSamplerCapabilities, dict(weighs_by_inclusion=False, budget=0), "DataSamplerCapabilities(budget=0): budget must be a positive int or None"),
    (AggregatorCapabilities, dict(weighs_by_inclusion=1), "AggregatorCapabilities(weighs_by_inclusion=1): weighs_by_inclusion must be True or False"),
    (AggregatorCapabilities, dict(weighs_by_inclusion=False, linear="yes"),
     "AggregatorCapabilities(linear='yes'): linear must be True, False or None (not known)"),
    (AggregatorCapabilities, dict(weighs_by_inclusion=False, normalizes_steps="fednova"),
     "AggregatorCapabilities(normalizes_steps='fednova'): normalizes_steps must be True or False"),
    (AggregatorCapabilities, dict(weighs_by_inclusion=False, shared_settings=[("K", 3)]),
     "AggregatorCapabilities(shared_settings=[('K', 3)]): shared_settings must be a mapping of setting -> value"),
    (LocalSolverCapabilities, dict(minibatch=10**6 + 0.5), "LocalSolverCapabilities(minibatch=1000000.5): minibatch must be a positive int, "
     "or None for the whole drawn sample"),
    # an optional method's declaration, of the wrong kind (issue 39)
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.ESTIMATED, server_learns=(), estimates_inclusion="yes"),
     "ClientSamplerCapabilities(estimates_inclusion='yes'): estimates_inclusion must be True or False"),
    (ClientSamplerCapabilities, dict(inclusion_kind=InclusionKind.EXACT, server_learns=(), counts_trainings=1),
     "ClientSamplerCapabilities(counts_trainings=1): counts_trainings must be True or False"),
    (LocalSolverCapabilities, dict(counts_rows=None), "LocalSolverCapabilities(counts_rows=None): counts_rows must be True or False"),
    (UpdatePrivacyCapabilities, dict(hides_draw="always"), "UpdatePrivacyCapabilities(hides_draw='always'): hides_draw must be True or False"),
    (UpdatePrivacyCapabilities, dict(splits_among_cohort=4),
     "UpdatePrivacyCapabilities(splits_among_cohort=4): splits_among_cohort must be True or False"),
    (UpdatePrivacyCapabilities, dict(runs_solver="example"),
     "UpdatePrivacyCapabilities(runs_solver='example'): runs_solver must be True or False"),
    (CohortPlanCapabilities, dict(draws_blocks="yes"), "CohortPlanCapabilities(draws_blocks='yes'): draws_blocks must be True or False"),
    (CohortPlanCapabilities, dict(draws_on_device=0), "CohortPlanCapabilities(draws_on_device=0): draws_on_device must be True or False"),
])
def test_a_value_of_the_wrong_kind_is_refused_in_one_line_naming_the_field(record, fields, message):
    with pytest.raises(ValueError) as refused:
        record(**fields)
    assert str(refused.value) == message


def test_a_record_of_the_right_kind_is_built_and_frozen():
    record = ClientSamplerCapabilities(inclusion_kind=InclusionKind.ESTIMATED, server_learns=(Learns.SIZES,),
                                       limits=(Limit("m", 3, "clients"),), reads_replies=("loss",))
    assert record.needs_sizes is SizeNeed.NONE and not record.assumed_weights and record.shared_settings == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.inclusion_kind = InclusionKind.EXACT  # type: ignore[misc]
    assert LocalSolverCapabilities(minibatch=np.int64(4)).minibatch == 4  # a numpy count is a count


def test_a_record_in_a_class_body_is_refused_when_the_class_is_defined():
    with pytest.raises(ValueError, match=r"ClientSamplerCapabilities\(inclusion_kind='degenerate'\)"):
        class Deterministic:  # noqa: F841
            capabilities = ClientSamplerCapabilities(inclusion_kind="degenerate", server_learns=())


@dataclasses.dataclass(frozen=True)
class WrongInProperty(Fixed):
    """A record built by a property: its refusal comes where the strategy reads it, naming the part."""

    @property
    def capabilities(self) -> ClientSamplerCapabilities:  # type: ignore[override]
        return ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=(), needs_sizes="exact")


@dataclasses.dataclass(frozen=True)
class OldStyle:
    """A user's sampler declared the old way: separate class attributes, which nothing reads any more."""

    needs_sizes = SizeNeed.NONE
    inclusion_kind = InclusionKind.DEGENERATE
    server_learns = ()
    select = Fixed.select
    expected_cohort = Fixed.expected_cohort
    ids, pi = (0, 1), (1.0, 1.0)


@dataclasses.dataclass(frozen=True)
class OldAttributeBesideTheRecord(Fixed):
    """A subclass that overrides one declaration with a class attribute: silently ignored, were it accepted."""

    inclusion_kind = InclusionKind.DEGENERATE


class NoRecord:
    """A sampler that declares nothing at all."""

    select = Fixed.select
    expected_cohort = Fixed.expected_cohort


class RecordOfAnotherKind(Fixed):
    capabilities = DataSamplerCapabilities(weighs_by_inclusion=False)  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class ClaimsReplay(Fixed):
    """Declares estimate_inclusion, but the method is misspelt."""

    capabilities = ClientSamplerCapabilities(inclusion_kind=InclusionKind.ESTIMATED, server_learns=(), estimates_inclusion=True)

    def estimate_inclusions(self, ctx, draws):
        return np.ones(ctx.num_clients)


@dataclasses.dataclass(frozen=True)
class ReplaysUnsaid(Fixed):
    """Has estimate_inclusion but leaves the declaration out (nothing would read the method)."""

    capabilities = ClientSamplerCapabilities(inclusion_kind=InclusionKind.ESTIMATED, server_learns=())

    def estimate_inclusion(self, ctx, draws):
        return np.ones(ctx.num_clients)


@dataclasses.dataclass(frozen=True)
class ClaimsTrainings(Fixed):
    capabilities = ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=(), counts_trainings=True)


@dataclasses.dataclass(frozen=True)
class TrainsUnsaid(Fixed):
    def expected_trainings(self, num_clients, sizes=None):
        return float(num_clients)


@pytest.mark.parametrize("part, message", [
    (NoExpectedCohort(), "clients=NoExpectedCohort is not a client sampler: it has no expected_cohort() method"),
    (WrongInProperty(), "clients=WrongInProperty(): ClientSamplerCapabilities(needs_sizes='exact'): needs_sizes must be a SizeNeed"),
    (OldStyle(), "clients=OldStyle() declares inclusion_kind, needs_sizes, server_learns as separate attributes, which fedsample "
                 "no longer reads: declare them in one record, capabilities = fedsample.parts.ClientSamplerCapabilities("
                 "inclusion_kind=<InclusionKind.EXACT, InclusionKind.ESTIMATED or InclusionKind.DEGENERATE>, server_learns=<a tuple "
                 "of Learns, () where the server learns nothing beyond the training replies>, needs_sizes=<a SizeNeed>)"),
    (OldAttributeBesideTheRecord(), "clients=OldAttributeBesideTheRecord() declares inclusion_kind as separate attributes"),
    (NoRecord(), "clients=NoRecord does not declare its capabilities: declare capabilities = fedsample.parts.ClientSamplerCapabilities("
                 "inclusion_kind=<InclusionKind.EXACT, InclusionKind.ESTIMATED or InclusionKind.DEGENERATE>, server_learns=<a tuple "
                 "of Learns, () where the server learns nothing beyond the training replies>)"),
    (RecordOfAnotherKind(), "clients=RecordOfAnotherKind() declares capabilities of type DataSamplerCapabilities: a clients part "
                            "declares a ClientSamplerCapabilities"),
    # an optional method and its declaration disagree (issue 39)
    (ClaimsReplay(), "clients=ClaimsReplay() declares estimates_inclusion=True in its ClientSamplerCapabilities but has no "
                     "estimate_inclusion() method"),
    (ReplaysUnsaid(), "clients=ReplaysUnsaid() has estimate_inclusion() but its ClientSamplerCapabilities does not declare it: "
                      "declare estimates_inclusion=True"),
    (ClaimsTrainings(), "clients=ClaimsTrainings() declares counts_trainings=True in its ClientSamplerCapabilities but has no "
                        "expected_trainings() method"),
    (TrainsUnsaid(), "clients=TrainsUnsaid() has expected_trainings() but its ClientSamplerCapabilities does not "
                     "declare it: declare counts_trainings=True"),
])
def test_a_wrong_declaration_is_refused_at_construction_naming_the_part(part, message):
    with pytest.raises(ValueError) as refused:
        strategy(part)
    assert str(refused.value).startswith(message)


@dataclasses.dataclass(frozen=True)
class DividesUnsaid:
    """A user's aggregator written the old way, without saying whether it divides by pi (it would escape the
    inclusion rule)."""

    needs_sizes = SizeNeed.NONE
    linear = True

    def combine(self, reports, cohort, ctx):
        return None


def test_an_old_style_aggregator_is_told_the_record_with_its_required_field():
    with pytest.raises(ValueError) as refused:
        dataclasses.replace(strategy(Fixed()), aggregate=DividesUnsaid())
    assert str(refused.value) == (
        "aggregate=DividesUnsaid() declares linear, needs_sizes as separate attributes, which fedsample no longer reads: declare "
        "them in one record, capabilities = fedsample.parts.AggregatorCapabilities(weighs_by_inclusion=<True or False>, "
        "linear=<True, False or None (not known)>, needs_sizes=<a SizeNeed>)")


def test_a_right_declaration_is_accepted():
    assert strategy(Fixed()).clients == Fixed()


@pytest.mark.parametrize("part, message", [
    (Fixed(ids=(0, 12)), "Fixed(ids=(0, 12)) chose client ids outside 0..5: [0, 12]"),
    (Fixed(ids=(-1, 2)), "chose client ids outside 0..5"),
    (Fixed(ids=(2, 1)), "Fixed(ids=(2, 1)) returned cohort ids that are not unique and ascending: [2, 1]"),
    (Fixed(ids=(1, 1)), "not unique and ascending"),
    (Fixed(pi=(0.5, 1.5)), "Fixed(pi=(0.5, 1.5)) returned inclusion probabilities outside (0, 1] or not one per member"),
    (Fixed(pi=(0.0, 0.5)), "inclusion probabilities outside (0, 1]"),
    (Fixed(pi=(0.5,)), "not one per member"),
])
def test_a_cohort_out_of_range_is_refused_naming_the_sampler(part, message):
    fed = federate(blobs(n=60, d=4, classes=2), [10] * 6)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        fs.simulate(strategy(part), federated_data=fed, model=fs.models.LogisticRegression(), rounds=1, engine=Engine(backend="loop"))


@dataclasses.dataclass(frozen=True)
class Estimated(Fixed):
    capabilities = ClientSamplerCapabilities(inclusion_kind=InclusionKind.ESTIMATED, server_learns=())


def test_estimated_probabilities_may_be_nan():
    fed = federate(blobs(n=60, d=4, classes=2), [10] * 6)
    run = fs.simulate(
        strategy(Estimated(pi=(np.nan, np.nan))), federated_data=fed, model=fs.models.LogisticRegression(), rounds=1, engine=Engine(backend="loop"),
    )
    assert run.history[0]["cohort"] == 2 and run.history[0]["inclusion"] == "estimated"


@dataclasses.dataclass(frozen=True)
class DeclaredByProperty(Fixed):
    @property
    def capabilities(self) -> ClientSamplerCapabilities:  # type: ignore[override]  # a property counts
        return ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=())


def test_a_sampler_that_declares_them_runs():
    fed = federate(blobs(n=60, d=4, classes=2), [10] * 6)
    for sampler, kind in ((DeclaredByProperty(pi=(1.0, 1.0)), "exact"), (dataclasses.replace(Estimated(), pi=(np.nan, np.nan)), "estimated")):
        run = fs.simulate(strategy(sampler), federated_data=fed, model=fs.models.LogisticRegression(), rounds=1, engine=Engine(backend="loop"))
        assert run.history[0]["cohort"] == 2 and run.history[0].get("inclusion", "exact") == kind


def _library_parts(field: str) -> list[type]:
    """Every class of fedsample that is a part of the Strategy field ``field`` (it has the field's methods)."""
    import importlib
    import inspect
    import pkgutil

    found = []
    for info in pkgutil.walk_packages(fs.__path__, "fedsample."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue
        found += [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == module.__name__
                  and not getattr(c, "_is_protocol", False) and not parts.missing_methods(c, field)]
    return found


@pytest.mark.parametrize("field", ["clients", "data", "aggregate"])
def test_every_library_part_declares_a_record_of_its_kind(field):
    found = _library_parts(field)
    assert len(found) >= {"clients": 14, "data": 7, "aggregate": 6}[field]  # the walk found the library's parts
    record = parts.RECORDS[field]
    for cls in found:
        # a record in the class body, or a property that builds it from the part's fields (read on a default instance)
        declared = cls().capabilities if _defaults_suffice(cls) else inspect.getattr_static(cls, "capabilities")
        assert isinstance(declared, (record, property)), cls
        assert not [n for n in parts.OLD_DECLARATIONS if inspect.getattr_static(cls, n, None) is not None], cls


def _defaults_suffice(cls: type) -> bool:
    """Whether ``cls()`` can be built from defaults alone."""
    try:
        cls()
    except TypeError:
        return False
    return True


def test_conforms_answers_as_isinstance_for_every_protocol_and_library_part():
    """parts.conforms (looked up once per class) gives isinstance's answer for each runtime-checkable Protocol of
    fedsample.parts, on a default instance of every library part, and sees attributes an instance sets itself."""
    protocols = [p for p in vars(parts).values() if inspect.isclass(p) and getattr(p, "_is_runtime_protocol", False)]
    assert len(protocols) >= 12
    objects = [cls() for field in ("clients", "data", "aggregate") for cls in _library_parts(field) if _defaults_suffice(cls)]
    assert len(objects) >= 15
    assert [(type(o).__name__, p.__name__) for o in objects for p in protocols if parts.conforms(o, p) != isinstance(o, p)] == []

    class SetsItsOwn:
        def __init__(self):
            self.sampling_design = lambda population: parts.Census()

    assert parts.conforms(SetsItsOwn(), parts.DesignedClients) and isinstance(SetsItsOwn(), parts.DesignedClients)
    assert not parts.conforms(object(), parts.DesignedClients)


# --- optional methods are declared: a record field says a part offers each one (issue 39) ----------------------

from fedsample.privacy import amplification, noise as privacy_noise  # noqa: E402
from fedsample.training.local import LocalSGD  # noqa: E402
from fedsample.simulation import Engine  # noqa: E402


@dataclasses.dataclass(frozen=True)
class RowsUnsaid(LocalSGD):
    """A solver with rows_trained whose record (the parent's, rebuilt) leaves counts_rows out."""

    @property
    def capabilities(self) -> LocalSolverCapabilities:
        return LocalSolverCapabilities(minibatch=self.batch_size, steps=self.steps)


class OldStyleNoise:
    """An update privacy declared the old way: a hides_draw class attribute, which nothing reads any more."""

    noise_multiplier, clipping, hides_draw = 1.0, "client", True

    def private_reply(self, report, payload, rng):
        return report


class SplitsUnsaid(OldStyleNoise):
    """Has for_cohort and declares nothing: its split would never be asked for."""

    hides_draw = None

    def for_cohort(self, size):
        return self


class ClaimsSplit(SplitsUnsaid):
    """Declares the split but has no for_cohort: misspelt as for_cohorts."""

    capabilities = UpdatePrivacyCapabilities(hides_draw=True, splits_among_cohort=True)
    for_cohort = None  # type: ignore[assignment]

    def for_cohorts(self, size):
        return self


class SolvesUnsaid(OldStyleNoise):
    """Computes the update itself (run_solver) and declares nothing: the client would run the solver instead."""

    hides_draw = None

    def run_solver(self, solver, ctx, sample, params, round, rng):
        return solver.run(ctx, sample, params, round, rng)


class ClaimsSolver(OldStyleNoise):
    """Declares runs_solver but has no run_solver: misspelt as solve."""

    hides_draw = None
    capabilities = UpdatePrivacyCapabilities(runs_solver=True)

    def solve(self, solver, ctx, sample, params, round, rng):
        return solver.run(ctx, sample, params, round, rng)


@pytest.mark.parametrize("field, part, message", [
    ("local", RowsUnsaid(lr=0.1, epochs=None, steps=1, batch_size=4), "local=RowsUnsaid(lr=0.1, epochs=None, steps=1, batch_size=4) has rows_trained() "
                                                          "but its LocalSolverCapabilities does not declare it: declare counts_rows=True"),
    ("noise", OldStyleNoise(), "noise=OldStyleNoise declares hides_draw as separate attributes, which fedsample no longer reads: "
                               "declare them in one record, capabilities = fedsample.parts.UpdatePrivacyCapabilities(hides_draw=<True or False>)"),
    ("noise", SplitsUnsaid(), "noise=SplitsUnsaid has for_cohort() but its UpdatePrivacyCapabilities does not declare it: "
                              "declare splits_among_cohort=True"),
    ("noise", ClaimsSplit(), "noise=ClaimsSplit declares splits_among_cohort=True in its UpdatePrivacyCapabilities but has no "
                             "for_cohort() method"),
    ("noise", SolvesUnsaid(), "noise=SolvesUnsaid has run_solver() but its UpdatePrivacyCapabilities does not declare it: "
                              "declare runs_solver=True"),
    ("noise", ClaimsSolver(), "noise=ClaimsSolver declares runs_solver=True in its UpdatePrivacyCapabilities but has no "
                              "run_solver() method"),
])
def test_a_solver_or_noise_whose_offers_and_methods_disagree_is_refused(field, part, message):
    assert parts.capabilities_problem(part, field) == message.split("=", 1)[1]
    with pytest.raises(ValueError) as refused:
        dataclasses.replace(strategy(Fixed()), **{field: part})
    assert str(refused.value) == message


class TupleSolver:
    """A user's solver whose run returns a tuple instead of a LocalResult."""

    def run(self, ctx, sample, params, round, rng):
        return ({}, 1, 0.0)


class DeclaredSolverNoise(OldStyleNoise):
    """A user's update privacy declaring it computes the update itself: its run_solver runs, the solver's run does not."""

    hides_draw = None
    capabilities = UpdatePrivacyCapabilities(runs_solver=True)

    def run_solver(self, solver, ctx, sample, params, round, rng):
        return LocalResult(update=params, steps=3, loss=0.5, norm_steps=2.5, rows_trained=7)


def test_the_client_runs_what_the_noise_declares_and_refuses_a_result_that_is_not_a_local_result():
    """run_solver runs only where runs_solver is declared; a run that returns anything but a LocalResult is refused
    in one line naming the part (its rows and FedNova's a_k are read from the declared fields, never probed)."""
    params = {"w": torch.ones(2)}
    got = local_result(DeclaredSolverNoise(), TupleSolver(), None, None, params, 0, None)
    assert (got.steps, got.norm_steps, got.rows_trained) == (3, 2.5, 7)
    with pytest.raises(TypeError) as refused:
        local_result(PlainNoise(), TupleSolver(), None, None, params, 0, None)  # declares nothing: the solver runs
    assert str(refused.value) == "TupleSolver.run returned a tuple: a local solver returns a fedsample.messages.LocalResult"
    with pytest.raises(TypeError) as refused:
        local_result(None, TupleSolver(), None, None, params, 0, None)
    assert "TupleSolver.run returned a tuple" in str(refused.value)


class DeclaredNoise(OldStyleNoise):
    """A user's update privacy declaring its reply hides the draw and its noise is split."""

    hides_draw = None
    capabilities = UpdatePrivacyCapabilities(hides_draw=True, splits_among_cohort=True)

    def __init__(self, shares=1):
        self.shares = shares

    def for_cohort(self, size):
        return DeclaredNoise(shares=size)


class PlainNoise(SplitsUnsaid):
    for_cohort = None  # type: ignore[assignment]


def test_what_a_noise_declares_is_what_the_ledger_and_the_round_read():
    """hides_draw and the split are read from the declaration, for a user's noise as for the library's: a noise that
    declares nothing shows the draw and is sent whole; one that declares both is split among the cohort."""
    assert parts.capabilities_problem(DeclaredNoise(), "noise") is None and parts.capabilities_problem(PlainNoise(), "noise") is None
    assert amplification.hides_draw(DeclaredNoise()) == (True, "")
    assert amplification.hides_draw(PlainNoise())[0] is False and amplification.hides_draw(None)[0] is False
    assert privacy_noise.for_cohort(DeclaredNoise(), 7).shares == 7
    plain = PlainNoise()
    assert privacy_noise.for_cohort(plain, 7) is plain and privacy_noise.for_cohort(None, 7) is None
    library = privacy_noise.PerExampleNoise(1.0, 1.0)
    assert privacy_noise.for_cohort(library, 5).shares == 5 and amplification.hides_draw(library)[0]
    assert privacy_noise.for_cohort(privacy_noise.UpdateNoise(1.0, 1.0), 5) == privacy_noise.UpdateNoise(1.0, 1.0)


def test_what_a_sampler_or_solver_declares_is_what_the_engine_choice_reads():
    from fedsample.federation.choose import round_work
    from fedsample.sampling.optimal import OptimalClients

    assert parts.expected_trainings(OptimalClients(m=3), 40) == 40.0 and parts.expected_trainings(Fixed(), 40) == 2.0
    sizes = np.array([10, 30])
    assert parts.rows_trained(LocalSGD(lr=0.1, epochs=None, steps=2, batch_size=4), sizes).tolist() == [8.0, 8.0]  # 2 steps of 4 rows
    assert parts.rows_trained(LocalSGD(lr=0.1, epochs=3), sizes).tolist() == [30.0, 90.0]  # 3 passes
    assert parts.rows_trained(RunOnly(), sizes).tolist() == [10.0, 30.0]  # declares nothing: one pass
    row, mlp = torch.zeros(1, 4), torch.nn.Linear(4, 2)  # 8 multiply-adds a row, 3 for forward and backward
    assert round_work(LocalSGD(lr=0.1, epochs=None, steps=2, batch_size=4), sizes, 5.0, mlp, row) == 3 * 8 * 8.0 * 5
    assert round_work(RunOnly(), sizes, 5.0, mlp, row) == 3 * 8 * 20.0 * 5


class RunOnly:
    """A user's solver with only run."""

    def run(self, ctx, sample, params, round, rng):
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class BlocksUnsaid:
    def draw_cohort(self, sizes, rng):
        raise NotImplementedError

    def draw_blocks(self, blocks, rng):
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class ClaimsDevice(BlocksUnsaid):
    capabilities = CohortPlanCapabilities(draws_blocks=True, draws_on_device=True)


def test_a_plan_offers_the_draws_it_declares_and_is_refused_where_they_disagree():
    from fedsample.sampling.data import AllSamples, BernoulliSamples

    bernoulli, every = BernoulliSamples(0.5), AllSamples()
    assert parts.offered_draws(bernoulli) == (bernoulli.draw_cohort_on_device, bernoulli.draw_blocks)
    assert parts.offered_draws(every) == (None, every.draw_blocks)
    assert parts.plan_capabilities(object()) == CohortPlanCapabilities()  # declares nothing: draw_cohort only
    with pytest.raises(ValueError) as refused:
        parts.offered_draws(BlocksUnsaid())
    assert str(refused.value) == "BlocksUnsaid() has draw_blocks() but its CohortPlanCapabilities does not declare it: declare draws_blocks=True"
    with pytest.raises(ValueError) as refused:
        parts.offered_draws(ClaimsDevice())
    assert str(refused.value) == ("ClaimsDevice() declares draws_on_device=True in its CohortPlanCapabilities but has no "
                                  "draw_cohort_on_device() method")


@pytest.mark.parametrize("field", ["clients", "data", "aggregate", "local", "noise"])
def test_every_library_part_declares_the_methods_it_offers(field):
    """Every part of the library, built from its defaults, agrees with its record (none is refused at construction)."""
    found = [cls() for cls in _library_parts(field) if _defaults_suffice(cls)]
    if field == "noise":  # no defaults: built with a clip and a multiplier
        found = [privacy_noise.UpdateNoise(1.0, 1.0), privacy_noise.PerExampleNoise(1.0, 1.0)]
    assert found
    assert [(type(p).__name__, parts.capabilities_problem(p, field)) for p in found if parts.capabilities_problem(p, field)] == []


def test_every_library_plan_agrees_with_its_declaration():
    import fedsample.sampling.data as data

    plans = [c for c in vars(data).values() if inspect.isclass(c) and c.__module__ == data.__name__ and hasattr(c, "draw_cohort")]
    assert len(plans) >= 2
    for cls in plans:
        declared = inspect.getattr_static(cls, "capabilities", CohortPlanCapabilities())
        assert parts.offers_problem(cls, declared) is None, cls
