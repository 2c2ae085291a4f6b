"""Presets: experiment files shipped with the package (``fedsample presets`` lists them)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fedsample.experiments.config import ConfigError, ExperimentConfig, load_config, parse_config

__all__ = ["ConfigError", "describe_presets", "load_preset", "parse_config", "preset_names", "resolve"]


def _preset_files() -> dict[str, Path]:
    folder = resources.files("fedsample.experiments") / "presets"
    return {Path(f.name).stem: Path(str(f)) for f in folder.iterdir() if f.name.endswith(".toml")}


def preset_names() -> list[str]:
    """The names of the bundled presets, sorted."""
    return sorted(_preset_files())


def load_preset(name: str) -> ExperimentConfig:
    """The bundled preset ``name``; an unknown name is one ``ValueError`` line listing the known ones."""
    files = _preset_files()
    if name not in files:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(sorted(files))}")
    return load_config(files[name])


def resolve(target: str) -> ExperimentConfig:
    """A preset name or the path of a TOML experiment file."""
    if target.endswith(".toml") or Path(target).is_file():
        return load_config(target)
    return load_preset(target)


def describe_presets() -> list[tuple[str, str]]:
    """``(name, description)`` of every preset (``fedsample presets``)."""
    return [(name, load_preset(name).description) for name in preset_names()]
