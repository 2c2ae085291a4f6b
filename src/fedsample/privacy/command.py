"""``fedsample privacy``: what FedSampling's size reports cost and reveal, for given epsilon, M, rounds and sizes.

Prints alpha (Eq. 21), the standard error of the total-size estimate (Eq. 2) for the population, the total
epsilon one client spends over the run with permanent and with per-round reports (basic and advanced
composition), and an empirical audit: the largest observed probability ratio of one report against e^epsilon,
and the most-frequent-report attack after 1 round and after the run under each option.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Callable

import numpy as np

from fedsample.memory import check_fits, check_int64
from fedsample.privacy import accounting, attacks
from fedsample.privacy.reports import alpha_for, clip_size, estimator_variance, privacy_audit


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``privacy`` subcommand's arguments."""
    p = sub.add_parser("privacy", help="alpha, estimator error, total epsilon over a run and an attack audit")
    p.add_argument("--epsilon", type=float, required=True, help="epsilon of one size report")
    p.add_argument("--M", type=int, required=True, help="size threshold M (reports lie in 1..M-1)")
    p.add_argument("--rounds", type=int, required=True, help="rounds of the run")
    p.add_argument("--sizes", type=str, default=None,
                   help="client sizes: comma-separated integers, or a file of integers (default: the quickstart-lognormal partition)")
    p.add_argument("--delta", type=float, default=accounting.DEFAULT_DELTA, help="delta of advanced composition")
    p.add_argument("--draws", type=int, default=200_000, help="Monte Carlo draws per size in the audit")
    p.add_argument("--seed", type=int, default=0)


def sizes_text(spec: str) -> str:
    """The text of ``--sizes``: the file's when ``spec`` names one (a folder or an unreadable file is one line
    with the reason), else ``spec`` itself."""
    path = Path(spec)
    try:
        exists = path.exists()
    except OSError:  # a long list of numbers is too long for a file name
        exists = False
    if not exists:
        return spec
    if path.is_dir():
        raise ValueError(f"--sizes {spec}: is a folder; expected integers or a file of integers")
    try:
        return path.read_text()
    except OSError as error:
        raise ValueError(f"--sizes {spec}: cannot read it: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ValueError(f"--sizes {spec}: not a text file of integers") from None


def read_sizes(spec: str | None, default: Callable[[], np.ndarray]) -> np.ndarray:
    """Sizes from a comma list or a file of whitespace/comma-separated integers; ``default()`` when ``spec`` is None
    (the command line passes the quickstart-lognormal partition's sizes, seed 0). Every size and their total must
    fit numpy's int64."""
    if spec is None:
        return default()
    text = sizes_text(spec)
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"--sizes: expected integers or a file of integers, got {spec[:40]!r}") from None
    if len(values) == 0 or min(values) < 1:
        raise ValueError("--sizes: every client must hold at least one sample")
    check_int64("--sizes: a size", max(values))
    check_int64("--sizes: the total", sum(values))
    return np.array(values, dtype=np.int64)


AUDIT_BYTES = 48  # per audit draw and per size value 1..M-1: the reports and their temporaries, the count arrays
ATTACK_BYTES = 24  # per (round, client): the reports, their column index, np.add.at's temporary
COUNT_BYTES = 16  # per (size value, client): the attack's counts and argmax's transposed copy


def report_memory(M: int, rounds: int, clients: int, draws: int) -> int:
    """Bytes :func:`report` needs at its peak (an estimate): the audit's ``draws`` reports per size and its
    per-value counts, or the attack's ``rounds x clients`` reports and its ``M x clients`` counts, whichever is larger."""
    audit = AUDIT_BYTES * (draws + M)
    attack = ATTACK_BYTES * rounds * clients + COUNT_BYTES * M * clients
    return max(audit, attack)


def report(epsilon: float, M: int, rounds: int, sizes: np.ndarray, delta: float, draws: int, seed: int) -> list[str]:
    """The lines ``fedsample privacy`` prints."""
    if rounds < 1 or draws < 1:
        raise ValueError(f"--rounds and --draws must be >= 1, got {rounds} and {draws}")
    check_int64("--M", M)
    check_fits(f"privacy: --M {M}, --rounds {rounds}, --draws {draws} over {len(sizes)} clients",
               report_memory(M, rounds, len(sizes), draws))
    alpha = alpha_for(epsilon, M)
    clipped = float(clip_size(sizes, M).sum())
    se = math.sqrt(estimator_variance(sizes, epsilon, M))
    permanent = accounting.size_report_spend(epsilon, rounds, True, delta)
    fresh = accounting.size_report_spend(epsilon, rounds, False, delta)
    audit = privacy_audit(epsilon, M, draws, np.random.default_rng(seed))
    lines = [
        f"alpha = {alpha:.6f}  (P(true clipped size is reported), Eq. 21)",
        f"population: {len(sizes)} clients, total {int(sizes.sum())}, clipped total {clipped:.0f} "
        f"({int(np.sum(sizes >= M))} clients hold >= M = {M})",
        f"standard error of the total estimate: {se:.1f}  ({100 * se / clipped:.1f}% of the clipped total)",
        f"total epsilon per client over {rounds} rounds:",
        f"  permanent reports (default): {permanent['size_epsilon']:.4g}  (one report, repeated)",
        f"  per-round reports: basic {fresh['size_epsilon']:.4g}, at delta={delta:g} "
        f"{fresh['size_epsilon_advanced']:.4g} (the smaller of basic and advanced composition)",
        f"audit of one report ({draws} draws per size): max ratio {audit['max_ratio']:.4g} vs e^epsilon = {audit['bound']:.4g}",
        f"most-frequent-report attack (right guesses of the clipped size; one report: {attacks.one_report_guess(epsilon, M):.3f}):",
    ]
    for label, permanent_reports in (("permanent", True), ("per-round", False)):
        first = attacks.most_frequent_report_attack(sizes, epsilon, M, 1, permanent_reports, seed)
        last = attacks.most_frequent_report_attack(sizes, epsilon, M, rounds, permanent_reports, seed)
        lines.append(f"  {label}: {first:.3f} after 1 round, {last:.3f} after {rounds}")
    return lines


def command_privacy(args: argparse.Namespace, default_sizes: Callable[[], np.ndarray]) -> None:
    """Print :func:`report` for the command's arguments (``default_sizes``: the population without ``--sizes``)."""
    for line in report(args.epsilon, args.M, args.rounds, read_sizes(args.sizes, default_sizes), args.delta, args.draws, args.seed):
        print(line)
