"""A paper module checked against its presets: every profile has presets that load, every Figure and
Comparison cites a preset or study of the paper, a label that preset defines, and a metric it reports; every
tie claim states its equivalence margin and why."""

from __future__ import annotations

from fedsample.experiments.config import ConfigError
from fedsample.experiments.presets import resolve
from fedsample.experiments.runner import METRICS
from fedsample.reproduction.registry import PROFILES, preset_key, sources
from fedsample.reproduction.spec import Paper
from fedsample.reproduction.verdict import PERCENT_METRICS

__all__ = ["check_paper"]


def preset_labels(paper: Paper) -> tuple[dict[str, set[str]], list[str]]:
    """``{preset key: its strategy labels}`` for every preset the paper names, and the presets that do not load."""
    labels, problems = {}, []
    for profile, entries in paper.presets.items():
        for entry in entries:
            try:
                config = resolve(entry)
            except ConfigError as error:
                problems.append(f"{paper.name}: {profile} preset {entry!r}: {error}")
                continue
            labels[preset_key(entry)] = {s.display for s in config.strategies}
    return labels, problems


def row_problems(paper: Paper, what: str, source: str, names: tuple[str, ...], metric: str, labels: dict[str, set[str]]) -> list[str]:
    """What is wrong with one Figure or Comparison row: unknown source, label or metric."""
    studies = {study.name for study in paper.studies}
    if source in studies:
        return [] if metric else [f"{paper.name}: {what}: empty metric"]
    if source not in sources(paper):
        return [f"{paper.name}: {what}: source {source!r} is neither a preset nor a study of the paper"]
    if source not in labels:  # a preset that does not load: reported once, by preset_labels
        return []
    problems = [f"{paper.name}: {what}: label {name!r} is not a strategy of preset {source!r}" for name in names if name not in labels[source]]
    if metric not in METRICS:
        problems.append(f"{paper.name}: {what}: metric {metric!r} is not one of {', '.join(METRICS)}")
    return problems


def check_paper(paper: Paper) -> list[str]:
    """Every problem of ``paper`` as one line (empty: the paper is consistent)."""
    problems = [f"{paper.name}: no presets for profile {p!r}" for p in PROFILES if not paper.presets.get(p)]
    problems += [f"{paper.name}: unknown profile {p!r} (profiles: {', '.join(PROFILES)})" for p in paper.presets if p not in PROFILES]
    labels, load_problems = preset_labels(paper)
    problems += load_problems
    for figure in paper.figures:
        problems += row_problems(paper, f"figure {figure.claim!r}", figure.source, (figure.label,), figure.metric, labels)
        if figure.unit == "%" and figure.metric not in PERCENT_METRICS:
            problems.append(f"{paper.name}: figure {figure.claim!r}: unit '%' for metric {figure.metric!r}, which is not a fraction")
    for comparison in paper.comparisons:
        names = (comparison.better, comparison.worse) + ((comparison.premise,) if comparison.premise else ())
        problems += row_problems(paper, f"comparison {comparison.claim!r}", comparison.source, names, comparison.metric, labels)
        if comparison.tie and (comparison.margin is None or not comparison.margin_reason):
            problems.append(f"{paper.name}: comparison {comparison.claim!r}: a tie claim needs a margin and its reason (margin=, margin_reason=)")
    return problems
