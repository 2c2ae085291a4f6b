"""The experiment file: dataset, partition, model, rounds, seeds and strategies. pydantic checks the types and
the keys (strict: no coercion, no unknown key); the values are checked by the parts they configure, with the
same constraints as the library (:mod:`fedsample.checks`): a ``[faults]`` table builds its
:class:`~fedsample.federation.faults.FaultModel`, a ``lr_schedule`` its
:class:`~fedsample.training.schedule.Schedule`, ``rounds``/``eval_every``/seeds meet ``simulate``'s constraints,
and a strategy's parameters meet its recipe's when the plan builds it. Every error is one line naming the key."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fedsample import checks
from fedsample.tracking.setup import BACKENDS

if TYPE_CHECKING:
    from fedsample.federation.faults import FaultModel, Straggler
    from fedsample.training.schedule import Schedule

__all__ = [
    "ConfigError", "DatasetConfig", "ExperimentConfig", "FaultsConfig", "HFDatasetOptions", "MlflowConfig",
    "ModelConfig", "PartitionConfig", "PrivacyConfig", "ScheduleConfig", "StragglerConfig", "StrategyConfig",
    "TableParams", "TrackingConfig", "ValidationConfig", "WandbConfig", "load_config", "parse_config",
]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    """A bad experiment file or preset; the message is one line naming the field."""


class _Strict(BaseModel):
    """Strict by type: a string where a number belongs is an error (no coercion), unknown keys too."""

    model_config = ConfigDict(extra="forbid", strict=True)


#: A table's free values: a recipe's keyword arguments, a loader's or partitioner's options, read from TOML and passed on
#: with ``**`` to functions of different signatures, each of which checks its own (fedsample.checks). Any, not JSON: a
#: value's type is that of the parameter it goes to, known only there.
TableParams = dict[str, Any]


class _WithParams(BaseModel):
    """A named thing with free parameters (validated by the thing itself)."""

    model_config = ConfigDict(extra="allow")

    @property
    def params(self) -> TableParams:  # the table's values, checked by the loader or partitioner they go to
        return dict(self.model_extra or {})


class HFDatasetOptions(_Strict):
    """``[dataset] source = "hf"``: the keys of ``fedsample.data.hf.load_hf`` (read offline)."""

    path: str | None = None
    format: Literal["csv", "parquet", "json", "imagefolder"] | None = None
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    subset: str | None = None
    split: str = "train"
    test: str | None = None
    test_fraction: float = Field(default=0.2, gt=0, lt=1)
    features: str | list[str] | None = None
    label: str = "label"
    task: Literal["classification", "regression"] = "classification"

    @model_validator(mode="after")
    def _source(self) -> "HFDatasetOptions":
        if self.path is None and self.format is None:
            raise ValueError("needs path (a local dataset directory or a cached Hub name) or format with data_files")
        if self.format is not None and self.path is None and self.data_files is None:
            raise ValueError(f"format {self.format!r} needs data_files (or path, a directory)")
        return self


class DatasetConfig(_WithParams):
    """A dataset by name (``source = "builtin"``, fedsample.data.load_dataset) or read with Hugging Face
    ``datasets`` (``source = "hf"``: the keys of :class:`HFDatasetOptions`; ``name`` is then optional, the
    dataset's display name)."""

    name: str | None = None
    source: Literal["builtin", "hf"] = "builtin"

    @model_validator(mode="after")
    def _named(self) -> "DatasetConfig":
        if self.source == "builtin" and self.name is None:
            raise ValueError('needs a name (or source = "hf" with its keys)')
        if self.source == "hf":
            try:
                HFDatasetOptions.model_validate(self.params)
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"].splitlines()[0]
                raise ValueError(f"{where + ': ' if where else ''}{message}") from None
        return self

    @property
    def display(self) -> str:
        return self.name or str(self.params.get("path") or self.params.get("data_files") or self.source)


class PartitionConfig(_WithParams):
    """An experiment file's ``[partition]`` table: the scheme's name and its parameters."""
    scheme: str


class ModelConfig(_WithParams):
    """An experiment file's ``[model]`` table: the model's name and its parameters (docs/models.md)."""
    name: str


def plain_label(label: str) -> str:
    """A label is one line of printable text (it names files and table rows; never markup or a path)."""
    if not label.strip() or len(label) > 100 or not label.isprintable():
        raise ValueError("a label must be 1 to 100 printable characters on one line")
    return label


class ScheduleConfig(_Strict):
    """``[strategies.lr_schedule]``: the server learning rate's factor per round (fedsample.training.schedule);
    ``rounds`` of a cosine schedule defaults to the experiment's rounds. Its values are checked by the
    :class:`~fedsample.training.schedule.Schedule` it builds."""

    kind: str
    every: int = 1
    gamma: float = 1.0
    rounds: int | None = None

    def build(self, rounds: int = 1) -> Schedule:
        """The :class:`~fedsample.training.schedule.Schedule` (``rounds``: the cosine's length when not given)."""
        from fedsample.training.schedule import Kind, Schedule

        kind = cast(Kind, self.kind)  # checked by Schedule
        return Schedule(kind, self.every, self.gamma, self.rounds if self.rounds is not None else rounds)

    @model_validator(mode="after")
    def _needed(self) -> "ScheduleConfig":
        self.build()
        if self.kind in ("step", "exponential") and "gamma" not in self.model_fields_set:
            raise ValueError(f"a {self.kind} schedule needs gamma (the factor per {'step' if self.kind == 'step' else 'round'})")
        if self.kind == "step" and "every" not in self.model_fields_set:
            raise ValueError("a step schedule needs every (rounds between steps)")
        return self


GridValue = int | float | str | bool


class StrategyConfig(_WithParams):
    """One ``[[strategies]]`` table: the recipe, its keyword arguments, a label, an optional ``grid`` of one
    parameter and an optional ``lr_schedule``."""
    model_config = ConfigDict(extra="allow", strict=True)

    recipe: str
    label: str | None = None
    grid: dict[str, list[GridValue]] | None = None
    lr_schedule: ScheduleConfig | None = None

    @field_validator("label")
    @classmethod
    def _plain(cls, label: str | None) -> str | None:
        return None if label is None else plain_label(label)

    @field_validator("grid")
    @classmethod
    def _one_parameter(cls, grid: dict[str, list[GridValue]] | None) -> dict[str, list[GridValue]] | None:
        """A grid names one recipe parameter and at least two distinct values (a list of one is not a search)."""
        if grid is None:
            return None
        if len(grid) != 1:
            raise ValueError(f"a grid takes exactly one parameter, got {len(grid)} ({', '.join(grid) or 'none'})")
        (name, values), = grid.items()
        if len(values) < 2 or len({repr(v) for v in values}) != len(values):
            raise ValueError(f"grid {name}: needs at least two distinct values, got {values}")
        return grid

    @model_validator(mode="after")
    def _grid_not_fixed(self) -> "StrategyConfig":
        fixed = sorted(set(self.grid or {}) & set(self.params))
        if fixed:
            raise ValueError(f"{fixed[0]!r} is both a parameter and a grid of strategy {self.display!r}: keep one")
        return self

    @property
    def display(self) -> str:
        return self.label or self.recipe


class StragglerConfig(_Strict):
    """``[faults.straggler]``: clients whose reply comes after ``deadline`` (exponential delays of mean ``mean``) are
    left out of the round."""
    deadline: float
    mean: float = 1.0

    def build(self) -> Straggler:
        from fedsample.federation.faults import Straggler

        return Straggler(self.deadline, self.mean)

    @model_validator(mode="after")
    def _built(self) -> "StragglerConfig":
        self.build()
        return self


class FaultsConfig(_Strict):
    """The failure model (fedsample.federation.faults): per-phase dropout probabilities and stragglers, checked
    by the :class:`~fedsample.federation.faults.FaultModel` it builds."""

    dropout: dict[str, float] = Field(default_factory=dict)
    straggler: StragglerConfig | None = None

    def build(self) -> FaultModel:
        from fedsample.federation.faults import FaultModel

        return FaultModel(dropout=dict(self.dropout), straggler=self.straggler.build() if self.straggler else None)

    @model_validator(mode="after")
    def _built(self) -> "FaultsConfig":
        self.build()
        return self


class ValidationConfig(_Strict):
    """``[validation]``: ``fraction`` of the training data carved off (stratified by label, with the partition
    seed) before partitioning; every run is also scored on it, and grids select on it."""

    fraction: float

    @model_validator(mode="after")
    def _fraction(self) -> "ValidationConfig":
        from fedsample.experiments.validation import FRACTION

        checks.check("fraction", self.fraction, FRACTION, owner="validation")
        return self


class MlflowConfig(_Strict):
    """``[tracking.mlflow]``: ``tracking_uri`` replaces the local store (OUT/tracking/mlflow/mlflow.db)."""

    tracking_uri: str | None = None


class WandbConfig(_Strict):
    """``[tracking.wandb]``: the project (default: the experiment's name), the mode (offline unless set here),
    and the entity of an online run."""

    project: str | None = None
    mode: Literal["offline", "online", "disabled"] = "offline"
    entity: str | None = None


class PrivacyConfig(_Strict):
    """``[privacy]``: how every run's privacy ledger accounts (:class:`fedsample.privacy.ledger.Accounting`;
    docs/privacy.md): ``unit`` (record or user), ``k`` (records per user), ``delta``, ``method`` (pld or rdp),
    ``threat`` (server or released) and the budget ``max_epsilon``, checked before every release."""

    unit: Literal["record", "user"] = "user"
    k: int | None = Field(default=None, gt=0)
    delta: float = Field(default=1e-5, gt=0, lt=1)
    method: Literal["pld", "rdp"] = "pld"
    threat: Literal["server", "released"] = "server"
    max_epsilon: float | None = Field(default=None, gt=0)


class TrackingConfig(_Strict):
    """``[tracking]``: the trackers every run is logged to (fedsample.tracking; docs/tracking.md), and their
    options. ``backends = []`` turns tracking off; ``fedsample run --track`` replaces the list."""

    backends: list[str] = Field(default_factory=lambda: ["jsonl"])
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)

    @field_validator("backends")
    @classmethod
    def _known(cls, backends: list[str]) -> list[str]:
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown:
            raise ValueError(f"unknown backend {unknown[0]!r}; known: {', '.join(BACKENDS)}")
        if len(set(backends)) != len(backends):
            raise ValueError("a backend is named twice")
        return backends


class ExperimentConfig(_Strict):
    """A whole experiment file (README: *An experiment file*), checked on load: every key known, every value of
    its type."""
    name: str
    description: str = ""
    dataset: DatasetConfig
    partition: PartitionConfig
    model: ModelConfig
    rounds: int
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    partition_seed: int | None = None
    validation: ValidationConfig | None = None
    eval_every: int = 1
    device: str = "cpu"
    strategies: list[StrategyConfig] = Field(min_length=1)
    faults: FaultsConfig | None = None
    tracking: TrackingConfig | None = None
    privacy: PrivacyConfig | None = None

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        return plain_label(name)

    @field_validator("device")
    @classmethod
    def _device_name(cls, device: str) -> str:
        """The spelling only (auto, cpu, cuda, cuda:N); whether the machine has it is checked when the run starts."""
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device.strip().lower()):
            raise ValueError(f"must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        return device.strip().lower()

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError("seeds must be distinct")
        return seeds

    @model_validator(mode="after")
    def _run_settings(self) -> "ExperimentConfig":
        """rounds, eval_every and every seed meet ``simulate``'s constraints (the partition seed: the same as a seed)."""
        checks.validate("simulate", {"rounds": self.rounds, "eval_every": self.eval_every},
                        {"rounds": checks.COUNT, "eval_every": checks.COUNT})
        for seed in self.seeds:
            checks.check("seeds", seed, checks.SEED, owner="simulate", label="seed")
        if self.partition_seed is not None:
            checks.check("partition_seed", self.partition_seed, checks.SEED, owner="partition", label="seed")
        return self

    @model_validator(mode="after")
    def _distinct_labels(self) -> "ExperimentConfig":
        labels = [s.display for s in self.strategies]
        duplicate = next((label for label in labels if labels.count(label) > 1), None)
        if duplicate:
            raise ValueError(f"two strategies share the label {duplicate!r}: give each a distinct 'label'")
        gridded = next((s.display for s in self.strategies if s.grid), None)
        if gridded and self.validation is None:
            raise ValueError(f"strategy {gridded!r} has a grid: add a [validation] table (fraction = 0.1) to select on")
        return self


def _one_line(error: ValidationError, source: str) -> str:
    """``source: key: message``: the key where the value sits (a part's refusal adds the parameter's name to
    the table holding it), and the part's own message where a part refused it (the library's message)."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    message = first["msg"].splitlines()[0].removeprefix("Value error, ")
    refusal = (first.get("ctx") or {}).get("error")
    if isinstance(refusal, checks.ParameterError):
        if refusal.name and (not loc or loc[-1] != refusal.name):
            loc.append(refusal.name)
        message = str(refusal)
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{source}: {'.'.join(loc) or '(top level)'}: {message}"


def parse_config(data: object, source: str = "config") -> ExperimentConfig:
    """The experiment in ``data`` (a parsed TOML table); a ``ConfigError`` line naming ``source`` and the key otherwise."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a table of settings, got {type(data).__name__}")
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_one_line(error, source)) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as error:  # a value pydantic cannot even compare
        raise ConfigError(f"{source}: {str(error).splitlines()[0] if str(error) else type(error).__name__}") from None


def load_config(path: str | Path) -> ExperimentConfig:
    """The experiment in the TOML file ``path`` (:func:`parse_config`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such experiment file")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid TOML: {str(error).splitlines()[0]}") from None
    return parse_config(data, str(path))
