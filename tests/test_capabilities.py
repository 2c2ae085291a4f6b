"""What a part declares, checked where the strategy is built or the cohort is chosen: a part missing a method of its
Protocol, a misspelt declaration and a declaration of the wrong kind are refused at construction in one line naming
the part; a cohort whose ids or inclusion probabilities are out of range is refused in the round, naming the sampler,
instead of an ``IndexError`` (or a silent division) later."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fedsample as fs
from fedsample.parts import InclusionKind, SizeNeed
from fedsample.rounds import Cohort, RoundContext
from fedsample.training.aggregate import WeightedMean
from helpers import blobs, federate


@dataclasses.dataclass(frozen=True)
class Fixed:
    """A user's client sampler returning the cohort it is given (ids, pi)."""

    ids: tuple = (0, 1)
    pi: tuple = (0.5, 0.5)
    needs_sizes = SizeNeed.NONE
    inclusion_kind = InclusionKind.EXACT
    server_learns = ()

    def select(self, ctx: RoundContext) -> Cohort:
        return Cohort(np.array(self.ids), np.array(self.pi), ctx.num_clients)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return float(len(self.ids))


class NoExpectedCohort:
    """A sampler missing ``expected_cohort`` (the Protocol's other method)."""

    def select(self, ctx: RoundContext) -> Cohort:
        return Cohort(np.array([0]), np.array([1.0]), ctx.num_clients)


@dataclasses.dataclass(frozen=True)
class Misspelt(Fixed):
    inclusion_kinds: InclusionKind = InclusionKind.DEGENERATE  # meant inclusion_kind: it would claim exact pi


@dataclasses.dataclass(frozen=True)
class WrongKind(Fixed):
    inclusion_kind: str = "deterministic"  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class WrongFlag(Fixed):
    draws_carry_sizes: str = "yes"


def strategy(clients) -> fs.Strategy:
    return dataclasses.replace(fs.recipes.fedavg(clients_per_round=2, steps=1, batch_size=4), clients=clients,
                               aggregate=WeightedMean("uniform"), sizes=None)


@pytest.mark.parametrize("part, message", [
    (NoExpectedCohort(), "clients=NoExpectedCohort is not a client sampler: it has no expected_cohort() method"),
    (Misspelt(), "clients=Misspelt() declares 'inclusion_kinds', which no part of fedsample reads: did you mean 'inclusion_kind'?"),
    (WrongKind(), "clients=WrongKind() declares inclusion_kind='deterministic': it must be an InclusionKind"),
    (WrongFlag(), "clients=WrongFlag() declares draws_carry_sizes='yes': it must be True or False"),
])
def test_a_wrong_declaration_is_refused_at_construction_naming_the_part(part, message):
    with pytest.raises(ValueError) as refused:
        strategy(part)
    assert str(refused.value) == message


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
        fs.simulate(strategy(part), federated_data=fed, model=fs.models.LogisticRegression(), rounds=1, backend="loop")


@dataclasses.dataclass(frozen=True)
class Estimated(Fixed):
    inclusion_kind = InclusionKind.ESTIMATED


def test_estimated_probabilities_may_be_nan():
    fed = federate(blobs(n=60, d=4, classes=2), [10] * 6)
    run = fs.simulate(strategy(Estimated(pi=(np.nan, np.nan))), federated_data=fed, model=fs.models.LogisticRegression(),
                      rounds=1, backend="loop")
    assert run.history[0]["cohort"] == 2 and run.history[0]["inclusion"] == "estimated"


@dataclasses.dataclass(frozen=True)
class SaysNothing:
    """A user's sampler that never says how its inclusion probabilities are known (it would be taken as exact)."""

    needs_sizes = SizeNeed.NONE
    server_learns = ()

    def select(self, ctx: RoundContext) -> Cohort:
        return Cohort(np.array([0, 1]), np.ones(2), ctx.num_clients)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        return 2.0


@dataclasses.dataclass(frozen=True)
class SaysNotWhatItLearns(Fixed):
    server_learns = property(lambda self: ())  # declared (a property counts) ...


class LearnsUnsaid:
    """... and one that leaves ``server_learns`` out (it would be reported as learning nothing)."""

    needs_sizes = SizeNeed.NONE
    inclusion_kind = InclusionKind.DEGENERATE
    select = Fixed.select
    expected_cohort = Fixed.expected_cohort
    ids, pi = (0, 1), (1.0, 1.0)


@dataclasses.dataclass(frozen=True)
class DividesUnsaid:
    """A user's aggregator that never says whether it divides by pi (it would escape the inclusion rule)."""

    needs_sizes = SizeNeed.NONE
    linear = True

    def combine(self, reports, cohort, ctx):
        return None


@pytest.mark.parametrize("field, part, message", [
    ("clients", SaysNothing(), "clients=SaysNothing() does not declare inclusion_kind: declare it, "
                               "InclusionKind.EXACT, InclusionKind.ESTIMATED or InclusionKind.DEGENERATE"),
    ("clients", LearnsUnsaid(), "clients=LearnsUnsaid does not declare server_learns: declare it, a tuple of Learns, "
                                "() where the server learns nothing beyond the training replies"),
    ("aggregate", DividesUnsaid(), "aggregate=DividesUnsaid() does not declare weighs_by_inclusion: declare it, True or "
                                   "False (whether its weights divide by the inclusion probabilities)"),
])
def test_a_missing_declaration_is_refused_at_construction_with_the_choices(field, part, message):
    with pytest.raises(ValueError) as refused:
        dataclasses.replace(strategy(Fixed()), **{field: part})
    assert str(refused.value) == message


def test_a_sampler_that_declares_them_runs():
    fed = federate(blobs(n=60, d=4, classes=2), [10] * 6)
    for sampler, kind in ((SaysNotWhatItLearns(pi=(1.0, 1.0)), "exact"), (dataclasses.replace(Estimated(), pi=(np.nan, np.nan)), "estimated")):
        run = fs.simulate(strategy(sampler), federated_data=fed, model=fs.models.LogisticRegression(), rounds=1, backend="loop")
        assert run.history[0]["cohort"] == 2 and run.history[0].get("inclusion", "exact") == kind


def _library_parts(field: str) -> list[type]:
    """Every class of fedsample that is a part of the Strategy field ``field`` (it has the field's methods)."""
    import importlib
    import inspect
    import pkgutil

    from fedsample import parts

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
def test_every_library_part_makes_every_required_declaration(field):
    from fedsample import parts

    found = _library_parts(field)
    assert len(found) >= {"clients": 14, "data": 7, "aggregate": 6}[field]  # the walk found the library's parts
    assert {c.__name__: parts.undeclared(c, field) for c in found if parts.undeclared(c, field)} == {}
