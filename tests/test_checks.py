"""The shared parameter checks: accepted values pass, each rejection names the parameter and the range."""

import math

import pytest

from fedsample import checks


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, "x", None, True])
def test_positive_rejects(value):
    with pytest.raises(ValueError, match=r"^lr must be > 0"):
        checks.positive("lr", value)


def test_positive_accepts_and_optional():
    checks.positive("lr", 1e-9)
    checks.positive("batch", None, optional=True)


@pytest.mark.parametrize("value", [0, 1.5, -2, True, math.nan])
def test_count_rejects(value):
    with pytest.raises(ValueError, match=r"^m must be an integer >= 1"):
        checks.count("m", value)


@pytest.mark.parametrize(
    "value, closed, ok",
    [(0.0, "[)", True), (1.0, "[)", False), (0.0, "(]", False), (1.0, "(]", True), (0.5, "()", True), (-0.1, "[]", False)],
)
def test_in_interval_brackets(value, closed, ok):
    if ok:
        checks.in_interval("q", value, 0, 1, closed)
    else:
        with pytest.raises(ValueError, match=rf"^q must be in \{closed[0]}0, 1\{closed[1]}"):
            checks.in_interval("q", value, 0, 1, closed)


def test_non_negative():
    checks.non_negative("mu", 0)
    with pytest.raises(ValueError, match="mu must be >= 0"):
        checks.non_negative("mu", -1e-3)


# --- the toolkit: one test per constraint class, the template, the declarations -----------------------

from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedsample.checks import (
    BOOLEAN, COUNT, Options, Param, ParameterError, arguments, check, constrained, declared_values, inherited_rules, integers, reals, renames,
    requirement,
)


@pytest.mark.parametrize("value", [1, 7, np.int64(3), np.int32(1), np.uint8(2)])
def test_integers_accept_python_and_numpy_integers(value):
    assert check("k", value, COUNT) is value


@pytest.mark.parametrize("value", [1.5, 2.0, np.float64(3.0), "3", None, True, False, np.bool_(True), 0, -4])
def test_integers_refuse_reals_strings_bools_and_out_of_range(value):
    with pytest.raises(ParameterError, match=r"^k must be an integer >= 1, got "):
        check("k", value, COUNT)


@pytest.mark.parametrize(
    "interval, inside, outside, words",
    [
        (reals(0, 1, "[]"), [0, 1, 0.5, np.float32(0.25)], [-0.01, 1.01], "in [0, 1]"),
        (reals(0, 1, "()"), [1e-12, 0.999], [0, 1], "in (0, 1)"),
        (reals(0, None, "()"), [1e-300, 5], [0, -1], "> 0"),
        (reals(None, 2, "[)"), [-5, 1.99], [2, 3], "< 2"),
        (integers(1, 10, "[]"), [1, 10], [0, 11, 5.0], "an integer in [1, 10]"),
        (integers(0, None, "(]"), [1], [0], "an integer > 0"),
    ],
)
def test_intervals_open_and_closed_ends(interval, inside, outside, words):
    assert str(interval) == words
    for value in inside:
        assert interval.satisfied_by(value), value
    for value in outside:
        assert not interval.satisfied_by(value), value


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, np.bool_(False), "0.5", None, [0.5]])
def test_reals_are_finite_numbers_and_never_bools(value):
    assert not reals(None, None).satisfied_by(value)
    assert not reals(0, 1).satisfied_by(value)


def test_options_match_value_and_kind():
    opts = Options("uniform", "size", "inverse_inclusion")
    assert str(opts) == "one of 'uniform', 'size' or 'inverse_inclusion'"
    assert opts.satisfied_by("size") and opts.satisfied_by(np.str_("size"))
    assert not any(opts.satisfied_by(v) for v in ("Size", "sizes", None, 1, ["size"]))
    assert not Options(1, 2).satisfied_by(True) and Options(1, 2).satisfied_by(np.int64(2))
    assert str(Options("rmse")) == "'rmse'"


def test_none_is_allowed_only_where_listed():
    check("batch_size", None, COUNT, None)
    with pytest.raises(ParameterError, match=r"^batch_size must be an integer >= 1, got None$"):
        check("batch_size", None, COUNT)
    assert requirement([COUNT, None]) == "an integer >= 1 or None"
    assert requirement([integers(2), Options("rmse")]) == "an integer >= 2 or 'rmse'"
    check("flag", True, BOOLEAN)
    with pytest.raises(ParameterError, match="flag must be True or False, got 1"):
        check("flag", 1, BOOLEAN)


def test_one_message_template_with_and_without_owner():
    with pytest.raises(ParameterError) as error:
        check("epochs", 1.5, COUNT, owner="LocalSGD")
    assert str(error.value) == "LocalSGD: epochs must be an integer >= 1, got 1.5"
    assert (error.value.owner, error.value.name, error.value.value) == ("LocalSGD", "epochs", 1.5)
    assert isinstance(error.value, ValueError) and isinstance(error.value, TypeError)
    with pytest.raises(ParameterError) as error:
        check("H", 0, COUNT, owner="StratifiedClients", label="number of strata H")
    assert str(error.value) == "StratifiedClients: number of strata H must be an integer >= 1, got 0"


@dataclass(frozen=True)
@constrained(k=COUNT, rate=Param(reals(0, 1, "(]"), label="keep rate"))
class _Part:
    k: int = 1
    rate: float = 1.0
    by: Literal["uniform", "size"] = "uniform"

    def __post_init__(self) -> None:
        if self.k > 5 and self.by == "size":
            raise ValueError("own rule")


@dataclass(frozen=True)
@constrained(extra=reals(0))
class _Child(_Part):
    extra: float = 0.0


def test_constrained_checks_fields_literals_then_the_own_rules():
    _Part(np.int64(3), 0.5, "size")
    for kwargs, words in [
        (dict(k=2.5), "_Part: k must be an integer >= 1, got 2.5"),
        (dict(rate=0), "_Part: keep rate must be in (0, 1], got 0"),
        (dict(by="sizes"), "_Part: by must be one of 'uniform' or 'size', got 'sizes'"),
        (dict(k=6, by="size"), "own rule"),
    ]:
        with pytest.raises(ValueError) as error:
            _Part(**kwargs)
        assert str(error.value) == words
    assert set(inherited_rules(_Child)) == {"k", "rate", "extra"}
    with pytest.raises(ParameterError, match="_Child: k must be"):
        _Child(k=0)
    with pytest.raises(ParameterError, match="_Child: extra must be >= 0, got -1"):
        _Child(extra=-1)
    with pytest.raises(ValueError, match="own rule"):  # the parent's own rule runs for the child too
        _Child(k=6, by="size")


def test_declared_values_reads_a_dataclass_fields_in_order_or_by_name_and_rules_are_inherited_from_a_registry():
    child = _Child(k=2, rate=0.5, by="size", extra=3.0)
    assert declared_values(child) == {"k": 2, "rate": 0.5, "by": "size", "extra": 3.0}
    assert list(declared_values(child)) == ["k", "rate", "by", "extra"]  # the declared order
    assert declared_values(child, ("extra", "k")) == {"extra": 3.0, "k": 2}
    with pytest.raises(TypeError):  # not a dataclass: no declared fields
        declared_values(object())
    assert set(inherited_rules(_Child)) == {"k", "rate", "extra"} and set(inherited_rules(_Part)) == {"k", "rate"}
    assert inherited_rules(int) == {}


@arguments(aliases={"K": "samples_per_round"}, renamed={"lr": "server_lr"}, samples_per_round=COUNT)
def _recipe(*, samples_per_round: int = 8, how: Literal["a", "b"] = "a", server_lr: float = 1.0) -> tuple:
    return samples_per_round, how, server_lr


def test_arguments_aliases_renamed_and_literals():
    assert _recipe(K=3) == (3, "a", 1.0) and _recipe(samples_per_round=3, how="b") == (3, "b", 1.0)
    cases = [
        (dict(K=2, samples_per_round=2), "_recipe: K and samples_per_round name the same parameter; give one"),
        (dict(lr=0.1), "_recipe: lr was renamed server_lr"),
        (dict(K=2.5), "_recipe: K must be an integer >= 1, got 2.5"),  # named as given
        (dict(samples_per_round=0), "_recipe: samples_per_round must be an integer >= 1, got 0"),
        (dict(how="c"), "_recipe: how must be one of 'a' or 'b', got 'c'"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ParameterError) as error:
            _recipe(**kwargs)
        assert str(error.value) == words
    assert renames(_recipe).aliases == {"K": "samples_per_round"} and renames(_recipe).renamed == {"lr": "server_lr"}
    with pytest.raises(TypeError, match="positional"):
        _recipe(3)


# --- the parts declare their constraints with the toolkit ----------------------------------------------


def test_parts_refuse_what_they_used_to_accept():
    from fedsample.sampling.clients import UniformClients
    from fedsample.sampling.data import FedSamplingData
    from fedsample.training.aggregate import DrawnNormalizedSum, StratifiedMean
    from fedsample.training.local import LocalSGD, OneGradient

    cases = [
        (lambda: OneGradient(K=2.5), "OneGradient: K must be an integer >= 1 or None, got 2.5"),
        (lambda: DrawnNormalizedSum(K=-64), "DrawnNormalizedSum: K must be an integer >= 1, got -64"),
        (lambda: LocalSGD(epochs=1.5), "LocalSGD: epochs must be an integer >= 1 or None, got 1.5"),
        (lambda: LocalSGD(batch_size=3.5), "LocalSGD: batch_size must be an integer >= 1 or None, got 3.5"),
        (lambda: FedSamplingData(True), "FedSamplingData: K must be an integer >= 1, got True"),
        (lambda: StratifiedMean("mean"), "StratifiedMean: by must be one of 'unbiased', 'paper' or 'size', got 'mean'"),
    ]
    for build, words in cases:
        with pytest.raises(ParameterError) as error:
            build()
        assert str(error.value) == words
    assert UniformClients(m=np.int64(3)).m == 3 and OneGradient(K=np.int32(8)).K == 8


# --- the examples of the issue, and the config loader saying what the library says ---------------------


def test_recipes_refuse_the_issues_examples_naming_what_the_caller_wrote():
    from fedsample import recipes
    from fedsample.sampling.data import FedSamplingData

    cases = [
        (lambda: recipes.fedavg(epochs=1.5, batch_size=3.5), "fedavg: epochs must be an integer >= 1 or None, got 1.5"),
        (lambda: recipes.fedavg(batch_size=3.5), "fedavg: batch_size must be an integer >= 1, or 'all' (each client's whole drawn sample; None from Python), got 3.5"),
        (lambda: recipes.centralized(K=0), "centralized: K must be an integer >= 1, got 0"),
        (lambda: recipes.centralized(samples_per_round=0), "centralized: samples_per_round must be an integer >= 1, got 0"),
        (lambda: recipes.fedsampling(K=64, data=FedSamplingData(128)),
         "fedsampling: samples_per_round (K) must be 128 (the K of data=FedSamplingData(K=128, count_drawn=False, count_noise=0.0, steer=False, "
         "total_from='reports')) or "
         "left out: give K once, got 64"),
        (lambda: recipes.fedsampling(K=64, samples_per_round=64), "fedsampling: K and samples_per_round name the same parameter; give one"),
        (lambda: recipes.fedsampling(lr=0.5), "fedsampling: lr was renamed server_lr"),
        (lambda: recipes.fedavg(client_sampling="size"), "fedavg: client_sampling must be one of 'uniform' or 'weighted', got 'size'"),
    ]
    for build, words in cases:
        with pytest.raises(ParameterError) as error:
            build()
        assert str(error.value) == words
    one = recipes.fedsampling(data=FedSamplingData(128))  # K given once, by the data sampler: every part uses it
    assert one.local.K == one.data.K == 128
    with pytest.raises(TypeError, match="positional"):
        recipes.fedavg(10)


def _experiment(**changes) -> dict:
    base = {"name": "x", "rounds": 2, "dataset": {"name": "digits"}, "partition": {"scheme": "iid", "num_clients": 4},
            "model": {"name": "logreg"}, "strategies": [{"recipe": "fedavg", "label": "A"}]}
    return {**base, **changes}


def _library_refusals() -> dict:
    from fedsample.federation.faults import FaultModel, Straggler
    from fedsample.simulation import simulate
    from fedsample.training.schedule import Schedule

    return {
        "dropout": (dict(faults={"dropout": {"train": 1.5}}), "faults.dropout", lambda: FaultModel(dropout={"train": 1.5})),
        "straggler": (dict(faults={"straggler": {"deadline": 0.0}}), "faults.straggler.deadline", lambda: Straggler(0.0)),
        "schedule": (dict(strategies=[{"recipe": "fedavg", "lr_schedule": {"kind": "step", "every": 0, "gamma": 0.5}}]),
                     "strategies.0.lr_schedule.every", lambda: Schedule("step", every=0, gamma=0.5)),
        "rounds": (dict(rounds=0), "rounds", lambda: simulate(None, None, None, 0)),
    }


@pytest.mark.parametrize("case", ["dropout", "straggler", "schedule", "rounds"])
def test_the_config_loader_reports_the_librarys_message_under_the_toml_key(case):
    from fedsample.experiments.config import ConfigError, parse_config

    changes, key, library = _library_refusals()[case]
    with pytest.raises(ParameterError) as api:
        library()
    with pytest.raises(ConfigError) as loaded:
        parse_config(_experiment(**changes), "e.toml")
    assert str(loaded.value) == f"e.toml: {key}: {api.value}"


def test_the_plan_reports_a_recipes_message_under_the_toml_key():
    from fedsample import recipes
    from fedsample.experiments.config import ConfigError, parse_config
    from fedsample.experiments.plan import prepare

    with pytest.raises(ParameterError) as api:
        recipes.fedsampling(K=2.5)
    config = parse_config(_experiment(strategies=[{"recipe": "fedsampling", "label": "FS", "K": 2.5}]), "e.toml")
    with pytest.raises(ConfigError) as planned:
        prepare(config)
    assert str(planned.value) == f"strategies.0.K (strategy 'FS'): {api.value}"


def test_the_docs_table_lists_every_alias_and_renamed_name():
    """docs/parameters.md: each recipe's alias (a paper's symbol) and renamed name sits in the row of its new name,
    with the recipe named beside it."""
    from pathlib import Path

    from fedsample import recipes

    rows = [line.split("|")[1:-1] for line in (Path(__file__).parents[1] / "docs" / "parameters.md").read_text().splitlines()
            if line.startswith("| ") and "`" in line]
    for name, fn in recipes.RECIPES.items():
        declared = recipes.KEYWORDS[fn].declared
        for old, new in {**declared.aliases, **declared.renamed}.items():
            assert any(f"`{new}`" in row[1] and f"`{old}`" in row[3] and f"`{name}`" in row[3] for row in rows), (name, old, new)


def test_a_subclass_that_is_not_constrained_has_its_literal_fields_checked_whichever_class_comes_first():
    """The Literal constraints are looked up per class: building the constrained parent first does not leave a
    subclass's own Literal field unchecked (it was, when the first instance's class was cached for every class)."""

    @dataclass(frozen=True)
    @constrained(k=COUNT)
    class Parent:
        k: int = 1

    @dataclass(frozen=True)
    class Child(Parent):
        mode: Literal["a", "b"] = "a"

    Parent()
    with pytest.raises(ParameterError, match="Child: mode must be one of 'a' or 'b', got 'c'"):
        Child(mode="c")
    with pytest.raises(ParameterError, match="Child: k must be"):
        Child(k=0)
    assert Child(mode="b").mode == "b" and Parent(k=2).k == 2
