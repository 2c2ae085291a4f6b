"""``fedsample privacy``: what FedSampling's size reports and noised updates cost and reveal over a run.

With ``--epsilon`` and ``--M`` (the size reports): alpha (Eq. 21), the standard error of the total-size estimate
(Eq. 2) for the population, the total epsilon one client spends over the run with permanent and with per-round
reports (basic and advanced composition), and an empirical audit: the largest observed probability ratio of one
report against e^epsilon, and the most-frequent-report attack after 1 round and after the run under each option.

With ``--sigma`` (Gaussian noise of that multiplier on the updates, ``--sample-rate`` q the records' keep
probability): the privacy ledger's epsilon at ``--delta`` (``--method`` pld or rdp) over ``--rounds`` rounds,
with and without amplification side by side, for each clipping mode at ``--unit`` record or user (``--k``
records per user), the permanent size report included when ``--epsilon`` and ``--M`` are given. The releases
are made by the library's own accounting (:mod:`fedsample.privacy.amplification`, :mod:`fedsample.privacy.ledger`)
for FedSampling's setting: every client asked, a secure sum, the noise calibrated for the sum.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from fedsample.runtime.memory import check_fits, check_int64
from fedsample.privacy import accounting, attacks
from fedsample.privacy.reports import alpha_for, clip_size, estimator_variance, privacy_audit

if TYPE_CHECKING:
    from fedsample.parts import UpdatePrivacy
    from fedsample.privacy.ledger import Method, Summary, Unit

__all__ = ["add_parser", "command_privacy", "ledger_epsilons", "report", "report_memory"]

UNITS = ("record", "user")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``privacy`` subcommand's arguments."""
    p = sub.add_parser("privacy", help="size reports (alpha, estimator error, epsilon, audit) and the ledger's epsilon with and without amplification")
    p.add_argument("--epsilon", type=float, default=None, help="epsilon of one size report (with --M)")
    p.add_argument("--M", type=int, default=None, help="size threshold M (reports lie in 1..M-1)")
    p.add_argument("--rounds", type=int, required=True, help="rounds of the run")
    p.add_argument("--sigma", type=float, default=None, help="noise multiplier of the Gaussian noise on the updates (the ledger's part)")
    p.add_argument("--sample-rate", type=float, default=1.0, help="q: each record kept with probability q per round (FedSampling's K/N)")
    p.add_argument("--unit", choices=UNITS, default="record", help="whose privacy: one record or one user")
    p.add_argument("--k", type=int, default=None, help="at most k records per user (--unit user)")
    p.add_argument("--method", choices=("pld", "rdp"), default="pld", help="the ledger's accountant")
    p.add_argument("--clipping", choices=("both", "example", "client"), default="both",
                   help="per-example clipping (noise on the sum), per-client update clipping, or both")
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
    """The lines ``fedsample privacy`` prints about the size reports."""
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


def ledger_epsilons(
    rounds: int, sigma: float, rate: float, unit: Unit, k: int | None, delta: float, method: Method,
    size_report: tuple[float, int] | None = None, clipping: str = "both",
) -> list[tuple[str, Summary]]:
    """Per clipping mode (``clipping``: ``"example"``, ``"client"`` or ``"both"``), the ledger's summary after
    ``rounds`` rounds of FedSampling's training release (every client asked, secure sum, noise of multiplier
    ``sigma`` on the sum, records kept with probability ``rate``), after one permanent size report
    ``(epsilon, M)`` where given. (The user-level per-example mixture grows with k: minutes to build at k ~ 100.)"""
    from fedsample.privacy.amplification import train_release
    from fedsample.privacy.ledger import Accounting, Ledger
    from fedsample.privacy.noise import PerExampleNoise, UpdateNoise
    from fedsample.privacy.amplification import size_report_release
    from fedsample.messages import SizeQuery, TrainPayload
    from fedsample.sampling.clients import AllClients
    from fedsample.sampling.data import AllSamples, BernoulliSamples

    if rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {rounds}")
    if not 0 < rate <= 1:
        raise ValueError(f"--sample-rate must be in (0, 1], got {rate}")
    if not sigma > 0:
        raise ValueError(f"--sigma must be > 0, got {sigma}")
    if unit == "user" and k is None:
        raise ValueError("--unit user needs --k (at most k records per user)")
    accounting = Accounting(unit=unit, k=k, delta=delta, method=method)
    strategy = argparse.Namespace(clients=AllClients(), secure_sum=True)
    plan = BernoulliSamples(rate) if rate < 1 else AllSamples()
    modes: dict[str, tuple[str, UpdatePrivacy]] = {"example": ("per-example clipping, noise on the sum", PerExampleNoise(1.0, sigma)),
             "client": ("per-client update clipping", UpdateNoise(1.0, sigma))}
    out = []
    for label, noise in (modes.values() if clipping == "both" else [modes[clipping]]):
        ledger = Ledger(accounting)
        if size_report is not None:
            ledger.add([size_report_release(SizeQuery("randomized", size_report[0], size_report[1]), 0, (0, SizeQuery.procedure.name, 0))])
        ledger.add([train_release(noise, [plan], 1, 1, strategy, accounting, 1, t, (t, TrainPayload.procedure.name, 1)) for t in range(rounds)])
        out.append((label, ledger.summary()))
    return out


def ledger_report(
    rounds: int, sigma: float, rate: float, unit: Unit, k: int | None, delta: float, method: Method, size_report: tuple[float, int] | None = None,
    clipping: str = "both",
) -> list[str]:
    """The lines of the ledger's part: epsilon with and without amplification, per clipping mode."""
    who = f"one user (at most k = {k} records)" if unit == "user" else "one record"
    lines = [
        f"privacy ledger: {rounds} rounds, sigma = {sigma:g}, records kept with q = {rate:.4g}, unit: {who}, "
        f"{method.upper()} at delta = {delta:g}" + (f", plus one permanent size report (epsilon = {size_report[0]:g})" if size_report else ""),
        f"  {'mode':<42} {'with amplification':>20} {'without':>10}",
    ]
    for label, summary in ledger_epsilons(rounds, sigma, rate, unit, k, delta, method, size_report, clipping):
        lines.append(f"  {label:<42} {summary['epsilon']:>20.4g} {summary['epsilon_without_amplification']:>10.4g}")
        lines.append(f"    ({summary['accounting_method']}; {summary['amplification']})")
    return lines


def command_privacy(args: argparse.Namespace, default_sizes: Callable[[], np.ndarray]) -> None:
    """Print :func:`report` (with ``--epsilon`` and ``--M``; ``default_sizes``: the population without ``--sizes``)
    and :func:`ledger_report` (with ``--sigma``)."""
    sizes_given = args.epsilon is not None or args.M is not None
    if sizes_given and (args.epsilon is None or args.M is None):
        raise ValueError("--epsilon and --M go together (the size reports)")
    if not sizes_given and args.sigma is None:
        raise ValueError("give --epsilon and --M (size reports), --sigma (noised updates), or both")
    lines = []
    if sizes_given:
        lines += report(args.epsilon, args.M, args.rounds, read_sizes(args.sizes, default_sizes), args.delta, args.draws, args.seed)
    if args.sigma is not None:
        size_report = (args.epsilon, args.M) if sizes_given else None
        lines += ledger_report(args.rounds, args.sigma, args.sample_rate, args.unit, args.k, args.delta, args.method, size_report, args.clipping)
    for line in lines:
        print(line)
