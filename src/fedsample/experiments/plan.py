"""A prepared experiment: every part the config names built and checked (``prepare``), and the runs it
holds: one per (strategy label, grid value, training seed)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from fedsample import checks
from fedsample.data import load_dataset, make_scheme, partition
from fedsample.data.partition import AssignsRows, BuildsPartition
from fedsample.data.types import Dataset, FederatedData
from fedsample.experiments import grid
from fedsample.experiments.config import ConfigError, DatasetConfig, ExperimentConfig, TableParams, PartitionConfig, StrategyConfig
from fedsample.experiments.validation import Validation, carve_validation
from fedsample.federation.faults import FaultModel
from fedsample.models import model_from_name
from fedsample.recipes import recipe
from fedsample.simulation import Model, SimulationResult
from fedsample.strategy import Strategy

__all__ = [
    "Failure", "Job", "Outcome", "Plan", "check_data_fits", "fault_model", "only_strategies", "prepare", "restricted",
]


@dataclass
class Plan:
    """An experiment with every part built: what will run. ``variants[label]`` are the strategies of one
    label, by grid value key ("" without a grid); ``strategies[label]`` is its first one."""

    config: ExperimentConfig
    dataset: Dataset
    scheme: AssignsRows | BuildsPartition
    model: Model
    strategies: dict[str, Strategy]
    faults: FaultModel | None = None
    federations: dict[int, FederatedData] = field(default_factory=dict)
    variants: dict[str, dict[str, Strategy]] = field(default_factory=dict)
    validations: dict[int, Validation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.variants:
            self.variants = {label: {"": strategy} for label, strategy in self.strategies.items()}

    def partition_seed(self, seed: int) -> int:
        """The seed that carves the validation split and partitions: ``partition_seed`` or the run's seed."""
        return seed if self.config.partition_seed is None else self.config.partition_seed

    def federation(self, seed: int) -> FederatedData:
        """The clients' data of training seed ``seed`` (the training data less the validation split). One seed's
        is kept at a time (the runs go seed by seed, :meth:`runs`): each seed's split is a copy of the training data
        (8 seeds of Fashion-MNIST: 1.5 GB), which every ``--jobs`` worker would otherwise hold for every seed, and
        which the plan would carry to each worker it is sent to. Another seed's is partitioned again (the same
        numbers: its split and partition follow from its seed)."""
        key = self.partition_seed(seed)
        if key not in self.federations:
            self.federations.clear()
            self.validations.clear()
            dataset = self.dataset
            if self.config.validation is not None:
                dataset, self.validations[key] = carve_validation(dataset, self.config.validation.fraction, key)
            self.federations[key] = partition(dataset, self.scheme, seed=key)
        return self.federations[key]

    def validation(self, seed: int) -> Validation | None:
        """The validation split of training seed ``seed`` (None without a [validation] table)."""
        self.federation(seed)
        return self.validations.get(self.partition_seed(seed))

    def runs(self) -> list[Job]:
        """Every (label, grid value, seed) run, seeds outermost (the order of a sequential run)."""
        return [Job(label, key, seed) for seed in self.config.seeds for label, by_key in self.variants.items() for key in by_key]


@dataclass(frozen=True)
class Job:
    """One run: a strategy label, a grid value key ("" without a grid) and a training seed."""

    label: str
    key: str
    seed: int


@dataclass
class Failure:
    """A strategy/seed run that stopped (diverged): the one-line reason."""

    seed: int
    reason: str


@dataclass
class Outcome:
    """What one run gives: the result (or why it stopped) and its final validation metrics (None without a split)."""

    result: SimulationResult | Failure
    validation: dict[str, float] | None = None


#: What building a part from the file's values raises for bad values. The dataset loaders and partition
#: schemes (fedsample.data) do not check every value's type with the toolkit yet: a list where a number belongs
#: fails in a comparison there, so a TypeError while building them from the file is the file's too.
T = TypeVar("T")
USER_ERRORS = (ValueError, FileNotFoundError, OverflowError)
DATA_ERRORS = (*USER_ERRORS, TypeError, ImportError)


def _built(what: str, build: Callable[[], T], errors: tuple[type[Exception], ...] = USER_ERRORS) -> T:
    try:
        return build()
    except errors as error:
        raise ConfigError(f"{what}: {error}") from None


def _built_strategy(config: ExperimentConfig, index: int, s: StrategyConfig, key: str, params: TableParams) -> Strategy:
    """:func:`build_strategy`, a refusal reported with the TOML key of the value (``strategies.0.epochs``, or
    ``strategies.0.grid.lr`` for a grid value) and the recipe's own message, the one the library gives."""
    label = grid.run_label(s.display, s, key)
    try:
        return build_strategy(config, s, params)
    except checks.ParameterError as error:
        if error.name in params:
            where = f"strategies.{index}.{'grid.' if error.name in (s.grid or {}) else ''}{error.name}"
            raise ConfigError(f"{where} (strategy {label!r}): {error}") from None
        raise ConfigError(f"strategy {label!r}: {error}") from None
    except USER_ERRORS as error:
        raise ConfigError(f"strategy {label!r}: {error}") from None


def build_dataset(config: DatasetConfig) -> Dataset:
    """The dataset by name, or (``source = "hf"``) read with Hugging Face ``datasets``, offline."""
    if config.source == "hf":
        from fedsample.data.hf import load_hf

        return load_hf(name=config.name, **config.params)
    assert config.name is not None  # a builtin dataset is named (DatasetConfig)
    return load_dataset(config.name, **config.params)


def build_scheme(config: PartitionConfig) -> AssignsRows | BuildsPartition:
    """A fedsample partition scheme by name, or ``flwr:NAME``: a Flower Datasets partitioner."""
    if config.scheme.startswith("flwr:"):
        from fedsample.data.flower_partitions import FlowerScheme

        return FlowerScheme(config.scheme.removeprefix("flwr:"), config.params)
    return make_scheme(config.scheme, **config.params)


def build_strategy(config: ExperimentConfig, s: StrategyConfig, params: TableParams) -> Strategy:
    """A strategy from its recipe and parameters, with its ``[strategies.lr_schedule]`` attached."""
    strategy = recipe(s.recipe, **params)
    if s.lr_schedule is None:
        return strategy
    # only a cosine schedule depends on the length of the run (the others resume into more rounds unchanged)
    schedule = s.lr_schedule.build(config.rounds)
    if schedule.kind != "cosine":
        schedule = dataclasses.replace(schedule, rounds=1)
    return dataclasses.replace(strategy, schedule=schedule)


def prepare(config: ExperimentConfig) -> Plan:
    """Build dataset, partition scheme, model, strategies (every grid value) and the failure model, carve
    the validation split and partition every seed, and check what each strategy asks of the data (clients and
    samples per round) against every seed's partition; any problem is one ConfigError line."""
    dataset = _built(f"dataset {config.dataset.display!r}", lambda: build_dataset(config.dataset), DATA_ERRORS)
    scheme = _built("partition", lambda: build_scheme(config.partition), DATA_ERRORS)
    model = _built("model", lambda: model_from_name(config.model.name, **config.model.params))
    variants = {
        s.display: {key: _built_strategy(config, index, s, key, params) for key, params in grid.variants(s).items()}
        for index, s in enumerate(config.strategies)
    }
    strategies = {label: next(iter(by_key.values())) for label, by_key in variants.items()}
    plan = Plan(config, dataset, scheme, model, strategies, fault_model(config), variants=variants)
    for seed in config.seeds:
        fed = _built(f"partition (seed {plan.partition_seed(seed)})", functools.partial(plan.federation, seed), DATA_ERRORS)
        for label, by_key in variants.items():
            for strategy in by_key.values():
                check_data_fits(label, strategy, fed)
    return plan


def only_strategies(config: ExperimentConfig, only: list[str] | None) -> ExperimentConfig:
    """The experiment with only the strategies labelled in ``only`` (None: all); an unknown label is one
    ConfigError line listing the labels."""
    if not only:
        return config
    labels = [s.display for s in config.strategies]
    unknown = [label for label in only if label not in labels]
    if unknown:
        raise ConfigError(f"--only {unknown[0]!r}: no such strategy in {config.name!r}; its labels: {', '.join(labels)}")
    return config.model_copy(update={"strategies": [s for s in config.strategies if s.display in only]})


def restricted(plan: Plan, only: list[str] | None) -> Plan:
    """The plan with only the strategies labelled in ``only`` (None: all), sharing its data and partitions."""
    if not only:
        return plan
    config = only_strategies(plan.config, only)
    keep = [s.display for s in config.strategies]
    return dataclasses.replace(
        plan, config=config, strategies={k: plan.strategies[k] for k in keep}, variants={k: plan.variants[k] for k in keep}
    )


def fault_model(config: ExperimentConfig) -> FaultModel | None:
    """The experiment's failure model (None without a [faults] table)."""
    return None if config.faults is None else config.faults.build()


def check_data_fits(label: str, strategy: Strategy, fed: FederatedData) -> None:
    """Clients per round (``m``, ISFedAvg's ``L``, FedSTS's ``H``) at most the number of clients, samples per round
    (``samples_per_round``, FedSampling's and centralized training's ``K``, FedSTaS's ``eta``) at most the training
    samples (:meth:`~fedsample.strategy.Strategy.check_data`: no silent clamp); one ConfigError line."""
    try:
        strategy.check_data(fed.num_clients, int(fed.sizes().sum()))
    except checks.ParameterError as error:
        raise ConfigError(f"strategy {label!r}: {error}") from None
