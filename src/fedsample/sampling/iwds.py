"""Imbalanced Weight Decay Sampling (IWDS; Tang et al., FTL-IJCAI 2021, §3).

Each client resamples its own data by the inverse *effective number* of samples of each label
(Cui et al. 2019): sample i of client k, with label y, gets the weight

    w_{k,i,t} = (1 - beta_t) / (1 - beta_t ** N_{k,y})                      (Eq. 2, with beta -> beta_t)

where N_{k,y} is the number of samples of label y held by client k, and is drawn with probability
p(k, i) = w_{k,i,t} / sum_j w_{k,j,t} (Eq. 3). Minibatches are drawn *with replacement* from p for the usual
number of local steps (``LocalSGD`` draws batches from ``LocalSample.probs``). The label sampling
probability is q(k, c) = N_{k,c} * p(k, i) for any i of label c (the ratio of two of them is Eq. 4).

The server only sends beta_t, decayed per global round t (Eq. 6):

    beta_t = beta_m + (beta_0 - beta_m) * rho ** t.

Paper settings (§4): beta_0 = 0.9999, beta_m in {0.95, 0.98, 0.99}, rho = 0.992. The authors' code defined
the decay but never called its update hook, so their runs used beta_0 throughout; here the plan of round t
carries beta_t. Imb-Samp is beta fixed at 0.9999 (``schedule="fixed"``). The paper's Uni-Samp is the base
algorithm's ordinary shuffled epochs (plain FedAvg, ``FullData``: every sample once per epoch, the
``iwds-fmnist-*`` presets' Uni-Samp rows); :meth:`IWDSData.uniform` (beta = 0, every weight 1) is the same
distribution drawn with replacement, like the two resampled rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from fedsample import checks
from fedsample.messages import ClientContext, LocalSample
from fedsample.parts import DataSamplerCapabilities

if TYPE_CHECKING:
    from fedsample.rng import ClientRandom
    from fedsample.rounds import Cohort
    from fedsample.rounds import RoundContext

__all__ = [
    "BETA", "DECAY", "IWDSData", "LabelWeightedSamples", "beta_schedule", "class_weights", "label_probabilities",
    "sample_probabilities",
]

Schedule = Literal["decay", "fixed"]
#: beta of the effective number (1 - beta^N) / (1 - beta), defined for beta in [0, 1).
BETA = checks.reals(0, 1, "[)")
#: rho, the decay rate of beta_t (Eq. 6).
DECAY = checks.Param(checks.PROBABILITY, label="decay rate rho")


def check_beta(beta: float, name: str = "beta") -> float:
    """``beta`` as a float in [0, 1) (the effective number is defined for beta in [0, 1))."""
    return float(checks.check(name, beta, BETA, owner="IWDS"))


def beta_schedule(round: int, beta_0: float = 0.9999, beta_m: float = 0.98, rho: float = 0.992) -> float:
    """beta_t = beta_m + (beta_0 - beta_m) * rho ** t (Tang et al. 2021, Eq. 6); t counts global rounds from 0."""
    checks.validate("IWDS", {"round": round, "rho": rho}, {"round": checks.integers(0), "rho": DECAY})
    return float(beta_m + (beta_0 - beta_m) * float(rho) ** int(round))


def class_weights(label_counts: np.ndarray, beta: float) -> np.ndarray:
    """Per-label weight (1 - beta) / (1 - beta ** N_c), the inverse effective number (Eq. 2).

    Computed as expm1(log beta) / expm1(N_c log beta), stable for beta close to 1. beta = 0 gives 1 for every
    present label (uniform sampling). Labels with N_c = 0 get weight 0 (no sample carries them).
    """
    beta = check_beta(beta)
    counts = np.asarray(label_counts, dtype=np.float64)
    if counts.ndim != 1 or np.any(counts < 0) or not np.all(np.isfinite(counts)):
        raise ValueError(f"IWDS: label counts must be a 1-D array of non-negative numbers, got {label_counts!r}")
    present = counts > 0
    weights = np.zeros_like(counts)
    if beta == 0.0:
        weights[present] = 1.0
    else:
        log_beta = np.log(beta)
        weights[present] = np.expm1(log_beta) / np.expm1(counts[present] * log_beta)
    return weights


def sample_probabilities(labels: np.ndarray, num_classes: int, beta: float) -> np.ndarray:
    """p(k, i) = w_{k,i} / sum_j w_{k,j} for each local sample (Eqs. 2-3), from the client's own labels only."""
    labels = np.asarray(labels, dtype=np.int64)
    if labels.size == 0:
        raise ValueError("IWDS: a client without samples has no sampling distribution")
    counts = np.bincount(labels, minlength=num_classes)
    w = class_weights(counts, beta)[labels]
    probs: np.ndarray = w / w.sum()
    return probs


def label_probabilities(label_counts: np.ndarray, beta: float) -> np.ndarray:
    """The label sampling probability q(k, c) = N_{k,c} * p(k, i), Y(k, i) = c (Tang et al. 2021, §3.1);
    the ratio of two of them is Eq. 4."""
    counts = np.asarray(label_counts, dtype=np.float64)
    mass = counts * class_weights(counts, beta)
    if mass.sum() <= 0:
        raise ValueError("IWDS: label counts are all zero")
    probs: np.ndarray = mass / mass.sum()
    return probs


# --- the plan (runs on the client) ----------------------------------------------------------------


@dataclass(frozen=True)
@checks.constrained(beta=BETA)
class LabelWeightedSamples:
    """Every local sample, with minibatches drawn with replacement from p(k, i) at ``beta`` (Eqs. 2-3)."""

    beta: float

    def draw(self, ctx: ClientContext, rng: ClientRandom) -> LocalSample:
        if ctx.task == "regression":
            raise ValueError("IWDS resamples by label counts: it needs a classification task")
        if ctx.size == 0:
            return LocalSample(np.zeros(0, dtype=np.int64))
        probs = sample_probabilities(ctx.y.cpu().numpy(), ctx.num_classes, self.beta)
        return LocalSample(np.arange(ctx.size), probs=probs)


# --- the sampler (runs on the server) -------------------------------------------------------------


@dataclass(frozen=True)
@checks.constrained(beta_m=BETA, beta_0=BETA, rho=DECAY)
class IWDSData:
    """IWDS's data sampler: the plan of round t carries beta_t (Eq. 6, ``schedule="decay"``) or beta_0
    throughout (``schedule="fixed"``). See :meth:`uniform` (Uni-Samp) and :meth:`imbalanced` (Imb-Samp)."""

    beta_m: float = 0.98
    beta_0: float = 0.9999
    rho: float = 0.992
    schedule: Schedule = "decay"
    capabilities: ClassVar[DataSamplerCapabilities] = DataSamplerCapabilities(weighs_by_inclusion=False)

    @classmethod
    def uniform(cls) -> "IWDSData":
        """Uni-Samp: every sample equally likely (beta = 0 makes every weight 1)."""
        return cls(beta_m=0.0, beta_0=0.0, schedule="fixed")

    @classmethod
    def imbalanced(cls, beta: float = 0.9999) -> "IWDSData":
        """Imb-Samp: beta fixed (0.9999 in the paper)."""
        return cls(beta_m=beta, beta_0=beta, schedule="fixed")

    def beta(self, round: int) -> float:
        if self.schedule == "fixed":
            return float(self.beta_0)
        return beta_schedule(round, self.beta_0, self.beta_m, self.rho)

    def plan(self, ctx: "RoundContext", cohort: "Cohort") -> LabelWeightedSamples:
        beta = self.beta(ctx.round)
        ctx.log["beta"] = beta
        return LabelWeightedSamples(beta)
