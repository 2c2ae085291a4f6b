"""Experiments: TOML configs, presets, the runner and its reports."""

from fedsample.runtime import lazy

__all__ = ["config", "execute", "grid", "plan", "presets", "report", "runner", "stats", "timing", "validation"]

__getattr__, __dir__ = lazy.submodules(__name__, __path__)
