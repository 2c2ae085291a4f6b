"""The experiment file: dataset, partition, model, rounds, seeds and strategies, validated with pydantic.
Every error is one line that names the bad field."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    """A bad experiment file or preset; the message is one line naming the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _WithParams(BaseModel):
    """A named thing with free parameters (validated by the thing itself)."""

    model_config = ConfigDict(extra="allow")

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class DatasetConfig(_WithParams):
    name: str


class PartitionConfig(_WithParams):
    scheme: str


class ModelConfig(_WithParams):
    name: str


class StrategyConfig(_WithParams):
    recipe: str
    label: str | None = None

    @property
    def display(self) -> str:
        return self.label or self.recipe


class ExperimentConfig(_Strict):
    name: str
    description: str = ""
    dataset: DatasetConfig
    partition: PartitionConfig
    model: ModelConfig
    rounds: int = Field(gt=0)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    eval_every: int = Field(default=1, gt=0)
    device: str = "cpu"
    strategies: list[StrategyConfig] = Field(min_length=1)

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
    def _distinct_labels(self) -> "ExperimentConfig":
        labels = [s.display for s in self.strategies]
        duplicate = next((label for label in labels if labels.count(label) > 1), None)
        if duplicate:
            raise ValueError(f"two strategies share the label {duplicate!r}: give each a distinct 'label'")
        return self


def _one_line(error: ValidationError, source: str) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{source}: {where}: {message}"


def parse_config(data: dict, source: str = "config") -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_one_line(error, source)) from None


def load_config(path: str | Path) -> ExperimentConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such experiment file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return parse_config(data, str(path))
