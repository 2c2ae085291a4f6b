"""Attacks on a FedSampling run, measured as an attacker holding the server's view would run them.

- :func:`most_frequent_report_attack`: guess each client's clipped size as its most frequent size report
  over the rounds (ties: the smallest). One report is right with probability alpha + (1 - alpha)/(M - 1);
  fresh reports every round drive this towards 1, permanent reports keep it at the one-report value.
- :func:`presence_epsilon`: the privacy loss of the bit "a reply arrived" when a client that drew nothing
  stays silent: P(silent | n) = (1 - p)^n under Bernoulli(p) data sampling, so two sizes n, n' are told apart
  with ratio max over both outcomes of the probability ratio. With fixed-shape replies the bit is constant.
- :func:`spearman`: rank correlation, for the update norm against the number of drawn samples.

The draws are the ones the engines make (:func:`fedsample.privacy.reports.report_cell` streams, the Bernoulli plan's
cohort draw), so the figures describe the library's own behaviour.
"""

from __future__ import annotations

import math

import numpy as np

from fedsample.messages import SizeQuery
from fedsample.privacy.reports import alpha_for, clip_size, randomized_response, report_cell
from fedsample.rng import CohortRandom


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
    return np.argmax(counts[1:], axis=0) + 1


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
