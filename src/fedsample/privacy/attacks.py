"""Attacks on a FedSampling run, measured as an attacker holding the server's view would run them.

- :func:`most_frequent_report_attack`: guess each client's clipped size as its most frequent size report
  over the rounds (ties: the smallest). One report is right with probability alpha + (1 - alpha)/(M - 1);
  fresh reports every round drive this towards 1, permanent reports keep it at the one-report value.
- :func:`presence_epsilon`: the privacy loss of the bit "a reply arrived" when a client that drew nothing
  stays silent: P(silent | n) = (1 - p)^n under Bernoulli(p) data sampling, so two sizes n, n' are told apart
  with ratio max over both outcomes of the probability ratio. With fixed-shape replies the bit is constant.
- :func:`spearman`: rank correlation, for the update norm against the number of drawn samples.
- :func:`membership_audit`: a distinguishing attack's true- and false-positive rates over many runs with and
  without one record, and the epsilon they prove at least (to compare with a ledger's epsilon).

The draws are the ones the engines make (:func:`fedsample.privacy.reports.report_cell` streams, the Bernoulli plan's
cohort draw), so the figures describe the library's own behaviour.
"""

from __future__ import annotations

import math
from typing import Sequence, TypedDict

import numpy as np

from fedsample.messages import SizeQuery
from fedsample.privacy.reports import alpha_for, clip_size, randomized_response, report_cell
from fedsample.rng import CohortRandom

__all__ = [
    "MembershipAudit", "ThresholdAudit", "membership_audit", "most_frequent_report_attack", "one_report_guess",
    "presence_epsilon", "size_reports_over_rounds", "spearman",
]


class ThresholdAudit(TypedDict):
    """One threshold tau of :func:`membership_audit`: the attack's rates and the epsilon they prove."""

    threshold: float
    tpr: float
    fpr: float
    epsilon: float


class MembershipAudit(TypedDict):
    """What :func:`membership_audit` returns: the largest epsilon proved, and each threshold's rates."""

    epsilon_lower_bound: float
    thresholds: list[ThresholdAudit]


def size_reports_over_rounds(sizes: np.ndarray, epsilon: float, M: int, rounds: int, permanent: bool, seed: int = 0) -> np.ndarray:
    """``(rounds, clients)`` randomized size reports of clients holding ``sizes``, as the engines draw them."""
    sizes = np.asarray(sizes, dtype=np.int64)
    ids = np.arange(len(sizes))
    query = SizeQuery("randomized", epsilon, M, permanent)
    out = np.empty((rounds, len(sizes)), dtype=np.int64)
    for t in range(rounds):
        cell_round, purpose = report_cell(query, t)
        out[t] = randomized_response(sizes, epsilon, M, CohortRandom(seed, cell_round, ids, purpose))
    return out


def most_frequent(reports: np.ndarray, M: int) -> np.ndarray:
    """Per client (column), the most frequent value in {1, ..., M-1} (the smallest on ties)."""
    counts = np.zeros((M, reports.shape[1]), dtype=np.int64)
    np.add.at(counts, (reports, np.arange(reports.shape[1])[None, :].repeat(reports.shape[0], 0)), 1)
    modes: np.ndarray = np.argmax(counts[1:], axis=0) + 1
    return modes


def most_frequent_report_attack(sizes: np.ndarray, epsilon: float, M: int, rounds: int, permanent: bool, seed: int = 0) -> float:
    """Fraction of clients whose most frequent report over ``rounds`` rounds is their true clipped size."""
    reports = size_reports_over_rounds(sizes, epsilon, M, rounds, permanent, seed)
    return float(np.mean(most_frequent(reports, M) == clip_size(sizes, M)))


def one_report_guess(epsilon: float, M: int) -> float:
    """P(report = true clipped size) for one report: alpha + (1 - alpha)/(M - 1) (Eq. 1)."""
    alpha = alpha_for(epsilon, M)
    return alpha + (1 - alpha) / (M - 1)


def presence_epsilon(n: int, n_other: int, p: float) -> float:
    """Privacy loss of the reply-presence bit between sizes n and n' when a client that drew nothing under
    Bernoulli(p) sampling sends nothing: max |log ratio| of P(silent) = (1-p)^n and P(reply) = 1 - (1-p)^n."""
    silent = [(1 - p) ** n, (1 - p) ** n_other]
    reply = [1 - silent[0], 1 - silent[1]]
    return max(abs(math.log(silent[0] / silent[1])), abs(math.log(reply[0] / reply[1])))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def membership_audit(with_record: np.ndarray, without: np.ndarray, delta: float, thresholds: Sequence[float], level: float = 1e-4) -> MembershipAudit:
    """A membership-inference audit of an (epsilon, delta)-DP release (Jagielski, Ullman & Oprea 2020): the
    attack says "the record is in" when its score exceeds a threshold tau. DP bounds every such test:
    TPR <= e^epsilon FPR + delta and 1 - FPR <= e^epsilon (1 - TPR) + delta (Kairouz, Oh & Viswanath 2015).
    From ``with_record`` and ``without`` (the scores over independent runs of each world), each threshold's
    Clopper-Pearson bounds at one-sided ``level`` (TPR from below, FPR from above, and the reverse for the
    second inequality) give the epsilon the runs prove at least; the largest over thresholds is
    ``epsilon_lower_bound`` (0 where nothing is proved). Returns it with each threshold's rates."""
    from scipy.stats import beta

    with_record, without = np.asarray(with_record, dtype=np.float64), np.asarray(without, dtype=np.float64)

    def lower(hits: int, n: int) -> float:
        return float(beta.ppf(level, hits, n - hits + 1)) if hits > 0 else 0.0

    def upper(hits: int, n: int) -> float:
        return float(beta.ppf(1 - level, hits + 1, n - hits)) if hits < n else 1.0

    def proved(numerator: float, denominator: float) -> float:
        return math.log((numerator - delta) / denominator) if numerator - delta > 0 and denominator > 0 else 0.0

    rows: list[ThresholdAudit] = []
    best = 0.0
    n1, n0 = len(with_record), len(without)
    for tau in thresholds:
        tp, fp = int(np.sum(with_record > tau)), int(np.sum(without > tau))
        eps = max(proved(lower(tp, n1), upper(fp, n0)), proved(lower(n0 - fp, n0), upper(n1 - tp, n1)), 0.0)
        rows.append({"threshold": float(tau), "tpr": tp / n1, "fpr": fp / n0, "epsilon": eps})
        best = max(best, eps)
    return {"epsilon_lower_bound": best, "thresholds": rows}
