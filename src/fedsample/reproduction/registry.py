"""The papers that can be reproduced: every module of :mod:`fedsample.reproduction.papers`, each of which declares
its ``PAPER`` (found with pkgutil, so a new paper is one new module), and what each names (presets, studies)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from fedsample.reproduction.spec import Paper

__all__ = ["PROFILES", "find_paper", "papers", "preset_key", "profile_of", "profile_presets", "sources"]

PACKAGE = "fedsample.reproduction.papers"
#: The profiles a reproduction runs under: small CPU stand-ins, or the papers' models on a GPU.
PROFILES = ("cpu", "cuda")


def papers(package: str | None = None) -> dict[str, Paper]:
    """``{paper name: Paper}`` of every module of ``package`` (default :data:`PACKAGE`): each module is one paper and
    declares it as ``PAPER`` (one that declares something else is refused in one line naming it)."""
    root = importlib.import_module(package or PACKAGE)
    found = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{root.__name__}.{info.name}")
        paper = module.PAPER
        if not isinstance(paper, Paper):
            raise TypeError(f"{module.__name__}.PAPER is a {type(paper).__name__}: a paper module declares a "
                            "fedsample.reproduction.spec.Paper")
        found[paper.name] = paper
    return found


def find_paper(name: str, package: str | None = None) -> Paper:
    """The paper called ``name``; a ValueError line naming the known papers otherwise."""
    known = papers(package)
    if name not in known:
        listed = ", ".join(sorted(known)) or "none registered"
        raise ValueError(f"unknown paper {name!r}; known: {listed}")
    return known[name]


def preset_key(entry: str) -> str:
    """The name a preset entry goes by in Figures, Comparisons and output folders: a preset's name, or a
    TOML file's stem (a paper may name a file instead of a packaged preset)."""
    return Path(entry).stem if entry.endswith(".toml") else entry


def profile_presets(paper: Paper, profile: str) -> dict[str, str]:
    """``{key: entry}`` of the paper's presets for ``profile`` ("cpu" or "cuda")."""
    return {preset_key(entry): entry for entry in paper.presets.get(profile, ())}


def sources(paper: Paper) -> set[str]:
    """Every name a Figure or Comparison may cite: the presets of every profile and the studies."""
    keys = {preset_key(entry) for entries in paper.presets.values() for entry in entries}
    return keys | {study.name for study in paper.studies}


def profile_of(device: str) -> str:
    """"cuda" for a CUDA device, else "cpu"."""
    return "cuda" if device.startswith("cuda") else "cpu"
