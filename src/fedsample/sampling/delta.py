"""DELTA: diverse client sampling (Wang, Ji, et al., "DELTA: Diverse client sampling for fasting federated
learning", NeurIPS 2023; arXiv 2205.13925).

DELTA's sampling probability (its optimal unbiased sampling, as we recall the paper's Theorem/Corollary):
p_i proportional to sqrt(alpha_1 zeta_i^2 + alpha_2 sigma_i^2), where zeta_i = ||grad F_i(x) - grad f(x)|| is
client i's gradient diversity (:func:`gradient_diversity`) and sigma_i^2 its local stochastic-gradient
variance (:func:`local_variance`); alpha_1, alpha_2 are constants of the bound (hyperparameters of the
practical algorithm). :func:`delta_scores` and :func:`delta_probabilities` compute them.

The estimator is unbiased only with a draw that matches its weights. Two such draws:

- ``with_replacement``: m independent draws with probabilities p (:func:`with_replacement_sample`), each draw
  of client i weighted w_i / (m p_i) (:func:`with_replacement_weights`, Hansen-Hurwitz): the paper's
  aggregation sum_{i in S} (1 / (m p_i)) w_i Delta_i with S a multiset;
- ``poisson``: client i independently with pi_i proportional to the score, capped at 1, sum pi = m
  (:func:`poisson_sample`), weighted w_i / pi_i (Horvitz-Thompson, :func:`optimal.horvitz_thompson_weights`).

``reference``: the public reference implementation draws m clients *without* replacement proportionally to
p (numpy's ``choice(replace=False, p=p)``, :func:`reference_sample`) but weights them as if with replacement,
w_i / (m p_i). Its true inclusion probabilities pi_i (:func:`reference_inclusion`: exact by enumeration for at
most 20 clients, by replay otherwise) are not m p_i, so E[estimate] = sum_i (pi_i / (m p_i)) w_i Delta_i
differs from the target by :func:`reference_bias`. (The description of the reference code is the project
issue's; a public re-implementation we read draws the same way. We have not read the authors' code.)
"""

from __future__ import annotations

import warnings

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping

import numpy as np

from fedsample import checks
from fedsample.messages import ProbeRequest
from fedsample.parts import InclusionKind, Learns, SizeNeed
from fedsample.rounds import Cohort, is_failed
from fedsample.sampling import adaptive, design, optimal
from fedsample.sampling.design import Sample
from fedsample.training.aggregate import OBJECTIVE

if TYPE_CHECKING:
    from fedsample.rounds import RoundContext

__all__ = [
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "gradient_diversity",
    "local_variance",
    "delta_scores",
    "delta_probabilities",
    "with_replacement_sample",
    "with_replacement_weights",
    "poisson_sample",
    "reference_sample",
    "reference_inclusion",
    "reference_bias",
    "eligible_scores",
    "note_zero_scores",
    "probes_arrived",
    "probed_gradients",
    "probe_rate",
    "with_probe_rate",
    "DeltaClients",
]

Draw = Literal["with_replacement", "poisson", "reference"]

#: Kind of inclusion probabilities of each draw (the reference draw's are exact by enumeration up to
#: ``design.SUCCESSIVE_EXACT_LIMIT`` clients and estimated by replay above).
PROBABILITY_KIND = {"with_replacement": "exact", "poisson": "exact", "reference": "estimated"}
#: What the server must learn: every client's gradient (for zeta_i, against the weighted mean gradient) and
#: local gradient variance sigma_i^2.
SERVER_LEARNS = {draw: ("gradients", "local_variances") for draw in ("with_replacement", "poisson", "reference")}


def _shares(weights: object, n: int, where: str) -> np.ndarray:
    w = design.nonnegative_vector(weights, "weights", where)
    if w.size != n:
        raise ValueError(f"{where}: weights has {w.size} entries, expected {n}")
    if w.sum() <= 0:
        raise ValueError(f"{where}: weights are all zero")
    return w / w.sum()


def gradient_diversity(gradients: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """zeta_i = ||grad F_i - grad f|| with grad f = sum_j w_j grad F_j (``weights`` normalized to sum 1),
    one row of ``gradients`` per client."""
    where = "gradient_diversity"
    G = design.finite_matrix(gradients, "gradients", where)
    w = _shares(weights, G.shape[0], where)
    return np.linalg.norm(G - w @ G, axis=1)


def local_variance(minibatch_gradients: np.ndarray) -> float:
    """sigma_i^2 as a client estimates it: the mean squared distance of its minibatch gradients (one per row)
    to their mean."""
    G = design.finite_matrix(minibatch_gradients, "minibatch_gradients", "local_variance")
    if G.shape[0] == 0:
        raise ValueError("local_variance: minibatch_gradients is empty")
    return float(np.mean(np.sum((G - G.mean(axis=0)) ** 2, axis=1)))


def delta_scores(diversity: np.ndarray, variance: np.ndarray, alpha1: float = 1.0, alpha2: float = 1.0) -> np.ndarray:
    """sqrt(alpha_1 zeta_i^2 + alpha_2 sigma_i^2), DELTA's unnormalized sampling probabilities."""
    where = "delta_scores"
    zeta = design.nonnegative_vector(diversity, "diversity", where)
    sigma2 = design.nonnegative_vector(variance, "variance", where)
    if zeta.shape != sigma2.shape:
        raise ValueError(f"{where}: diversity and variance differ in length ({zeta.size} vs {sigma2.size})")
    for name, value in (("alpha1", alpha1), ("alpha2", alpha2)):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{where}: {name} must be finite and >= 0, got {value!r}")
    return np.sqrt(alpha1 * zeta**2 + alpha2 * sigma2)


def delta_probabilities(scores: np.ndarray) -> np.ndarray:
    """p_i = score_i / sum_j score_j. All-zero scores (identical clients without noise) give the uniform p."""
    s = design.nonnegative_vector(scores, "scores", "delta_probabilities")
    if s.size == 0:
        raise ValueError("delta_probabilities: scores is empty")
    return s / s.sum() if s.sum() > 0 else np.full(s.size, 1.0 / s.size)


def with_replacement_sample(p: np.ndarray, m: int, rng: np.random.Generator) -> Sample:
    """m independent draws with probabilities p (:func:`design.pps_with_replacement`): distinct ids, their
    draw counts, and their exact inclusion probabilities 1 - (1 - p_i)^m."""
    return design.pps_with_replacement(p, m, rng)


def with_replacement_weights(sample: Sample, p: np.ndarray, m: int, weights: np.ndarray) -> np.ndarray:
    """Per chosen client, multiplicity * w_i / (m p_i): sum_{i in S} of these times Delta_i is unbiased for
    sum_i w_i Delta_i under :func:`with_replacement_sample` (Hansen & Hurwitz 1943). Applied to a
    without-replacement sample (multiplicity 1) these are the reference implementation's weights."""
    where = "with_replacement_weights"
    q = delta_probabilities(p)
    w = _shares(weights, q.size, where)
    m = design.check_count(m, "m", where, minimum=1)
    if np.any(q[sample.ids] <= 0):
        raise ValueError(f"{where}: a chosen client has p_i = 0")
    return sample.multiplicity * w[sample.ids] / (m * q[sample.ids])


def poisson_sample(scores: np.ndarray, m: int, rng: np.random.Generator) -> Sample:
    """Client i independently with pi_i proportional to its score, capped at 1 and summing to m
    (:func:`optimal.optimal_sample`); weight w_i / pi_i (:func:`optimal.horvitz_thompson_weights`)."""
    return optimal.optimal_sample(scores, m, rng)


def reference_sample(p: np.ndarray, m: int, rng: np.random.Generator) -> Sample:
    """The reference implementation's draw: m distinct clients, successively with probabilities p
    (``rng.choice(N, m, replace=False, p=p)``). ``inclusion`` is NaN (see :func:`reference_inclusion`)."""
    where = "reference_sample"
    rng = design.check_rng(rng, where)
    q = delta_probabilities(p)
    m = design.check_count(m, "m", where, minimum=1)
    if m > np.count_nonzero(q):
        raise ValueError(f"{where}: m = {m} exceeds the number of clients with positive p ({np.count_nonzero(q)})")
    ids = np.sort(rng.choice(q.size, size=m, replace=False, p=q)).astype(np.int64)
    return Sample(ids, np.full(m, np.nan), np.ones(m, dtype=np.int64))


def reference_inclusion(
    p: np.ndarray, m: int, draws: int | None = None, rng: np.random.Generator | None = None
) -> np.ndarray:
    """The true P(i in S) of :func:`reference_sample`: exact (:func:`design.successive_sampling_inclusion`)
    for at most ``design.SUCCESSIVE_EXACT_LIMIT`` clients when ``draws`` is None, else the replayed frequencies
    over ``draws`` draws from ``rng``."""
    q = delta_probabilities(p)
    if draws is None:
        return design.successive_sampling_inclusion(q, m)
    if rng is None:
        raise ValueError("reference_inclusion: draws given without rng")
    return design.replay_inclusion(lambda g: reference_sample(q, m, g), q.size, draws, rng)


def reference_bias(p: np.ndarray, m: int, weights: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """E[reference estimate] - target = sum_i (pi_i / (m p_i) - 1) w_i Delta_i, with pi_i the reference
    draw's exact inclusion probabilities (at most 20 clients) and ``updates`` one row Delta_i per client.
    Zero only when pi_i = m p_i for every client with w_i Delta_i != 0."""
    where = "reference_bias"
    q = delta_probabilities(p)
    w = _shares(weights, q.size, where)
    U = design.finite_matrix(updates, "updates", where)
    if U.shape[0] != q.size:
        raise ValueError(f"{where}: updates has {U.shape[0]} rows, expected {q.size}")
    pi = reference_inclusion(q, m)
    factor = np.divide(pi, m * q, out=np.ones_like(pi), where=q > 0) - 1.0
    return (factor * w) @ U


def eligible_scores(scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The scores of the clients the target weighs (w_k > 0; under ``objective="size"`` a client whose size report
    was lost has w_k = 0 and is not drawn, as under the clustered, MD, optimal and power-of-d samplers: the target
    is then the reporting clients' size-weighted mean, docs/reliability.md), the others' set to 0. When every
    eligible score is 0 (identical clients without noise) each eligible client gets score 1: the uniform draw
    among them, for every draw (Poisson included)."""
    eligible = np.asarray(weights) > 0
    kept = np.where(eligible, scores, 0.0)
    return kept if kept.sum() > 0 else eligible.astype(np.float64)


def note_zero_scores(ctx: "RoundContext", zero: int) -> None:
    """Say, in the round record (``sampler_zero_score_clients``) and on the terminal, that ``zero`` clients of the
    target have score 0 and cannot be drawn: the estimate leaves out their updates, unbiased only if those are 0
    (a zero score says their gradient at the global model is the mean one without noise, not that local training
    leaves them unchanged)."""
    if zero:
        ctx.log["sampler_zero_score_clients"] = zero
        # one text for every round (the count is in the record), so a run shows it once (fedsample.warned)
        warnings.warn("DELTA: clients with score 0 cannot be drawn (how many, per round: the record's "
                      "sampler_zero_score_clients); the aggregate leaves their updates out (biased unless those are zero)",
                      RuntimeWarning, stacklevel=3)


def probes_arrived(ctx: "RoundContext", reports: Any) -> np.ndarray:
    """Which clients' probes arrived (a probe the failure model lost is a ``Failed`` reply); the round record names
    the lost ones (``failed``, with phase ``probe``) and counts them (``sampler_lost_probes``)."""
    arrived = np.array([not is_failed(r) for r in reports], dtype=bool)
    if not arrived.all():
        ctx.log.setdefault("failed", []).extend(reports[int(i)].record() for i in np.flatnonzero(~arrived))
        ctx.log["sampler_lost_probes"] = int(np.count_nonzero(~arrived))
    return arrived


def probed_gradients(reports: Any, arrived: np.ndarray) -> np.ndarray:
    """The probed gradients, one row per client, zeros where the probe was lost (weight 0 in the mean gradient)."""
    dim = len(np.asarray(reports[int(np.flatnonzero(arrived)[0])].gradient))
    return np.stack([np.asarray(r.gradient, dtype=np.float64) if got else np.zeros(dim) for r, got in zip(reports, arrived)])


def probe_rate(weights: np.ndarray, arrived: np.ndarray) -> float:
    """r = the share of the target's clients (w_k > 0) whose probe arrived. Probes lost at random leave a uniform
    subset P of them, of which the draw picks; an estimator sum_{k in S} w_k U_k / (pi_k r) with pi_k the draw's
    probability given P is unbiased for sum_k w_k U_k given |P| (E over P of sum_{k in P} w_k U_k is r sum_k w_k U_k):
    the response-rate adjustment (fedsample.missing), applied through the cohort's pi_k (:func:`with_probe_rate`)."""
    target = np.asarray(weights) > 0
    return float(np.count_nonzero(target & arrived)) / float(np.count_nonzero(target))


def with_probe_rate(sample: Sample, rate: float) -> Sample:
    """``sample`` with its inclusion probabilities times the probe rate r (:func:`probe_rate`; r = 1: unchanged)."""
    return sample if rate == 1.0 else Sample(sample.ids, sample.inclusion * rate, sample.multiplicity)


# --- the client sampler ------------------------------------------------------------------------------------------

STATE_KEY = "delta"


@dataclass(frozen=True)
@checks.constrained(
    m=checks.Param(checks.COUNT, label="m (draws per round)"), alpha1=checks.NON_NEGATIVE, alpha2=checks.NON_NEGATIVE,
)
class DeltaClients:
    """DELTA's client sampler (Wang et al., NeurIPS 2023). Every round each client is probed at the global model
    (``ProbeRequest(gradient=True, per_sample=True)``: its full-data gradient grad F_k and its per-sample gradient
    variance sigma_k^2, :func:`fedsample.client.probe`); the server forms zeta_k = ||grad F_k - sum_j w_j grad F_j||
    (:func:`gradient_diversity`) and p_k proportional to sqrt(alpha1 zeta_k^2 + alpha2 sigma_k^2), with w_k = n_k/n
    (``objective="size"``) or 1/N. The draw (``draw``):

    - ``"with_replacement"``: m draws with probabilities p (exact pi_k = 1 - (1 - p_k)^m; the cohort carries the
      multiplicities and E[draws] = m p_k, so the Horvitz-Thompson aggregators weigh m_k w_k / (m p_k), the paper's);
    - ``"poisson"``: client k independently with pi_k proportional to its score, capped at 1, sum pi = m (exact);
    - ``"reference"``: the reference implementation's draw, m distinct clients successively proportional to p
      (:func:`reference_sample`), weighted as if drawn with replacement, w_k / (m p_k) (the cohort's
      ``expected_draws`` m p_k, which are not its true pi_k): its probabilities are estimated
      (:meth:`estimate_inclusion` replays the round's draw) and its aggregate is biased, which ``fedsample.diagnose``
      shows. The round record names the probes it cost (``sampler_probes``: every client, and their bytes).

    Under faults (docs/reliability.md): a client whose size report was lost has w_k = 0 and is not drawn
    (:func:`eligible_scores`); a client whose probe was lost is not drawn either, but stays in the target: the others'
    pi_k are times the share whose probe arrived (:func:`probe_rate`); every score 0 gives the uniform draw over the others; a client with score 0 among
    positive ones cannot be drawn, which the round record and a warning say (:func:`note_zero_scores`).

    sigma_k^2 here is the per-sample gradient variance at the global model (a minibatch of B has sigma_k^2 / B);
    alpha1 = alpha2 = 1 by default (the bound's constants are hyperparameters of the practical algorithm)."""

    m: int = 10
    draw: Draw = "with_replacement"
    alpha1: float = 1.0
    alpha2: float = 1.0
    objective: optimal.Objective = "size"

    @property
    def inclusion_kind(self) -> InclusionKind:
        return InclusionKind.ESTIMATED if self.draw == "reference" else InclusionKind.EXACT

    @property
    def assumed_weights(self) -> bool:
        """The reference draw's cohorts carry the weights it assumes (m p_k), which an aggregator may divide by."""
        return self.draw == "reference"

    @property
    def needs_sizes(self) -> SizeNeed:
        """Every client's exact size for ``objective="size"`` (the mean gradient of zeta_k, and w_k)."""
        return SizeNeed.EXACT_ALL if self.objective == "size" else SizeNeed.NONE

    @property
    def server_learns(self) -> tuple[Learns, ...]:
        probed = (Learns.LOSSES, Learns.GRADIENT_NORMS, Learns.GRADIENTS, Learns.LOCAL_VARIANCES)
        return probed + ((Learns.SIZES,) if self.objective == "size" else ())

    @property
    def shared_settings(self) -> Mapping[str, Any]:
        """The w_k of its target, which the Horvitz-Thompson aggregator must share."""
        return {OBJECTIVE: self.objective}

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """At most m distinct clients (m draws; sum pi = m for Poisson)."""
        return float(min(self.m, num_clients))

    def probabilities(self, ctx: "RoundContext") -> np.ndarray:
        """p_k from every client's probe at the global model (kept in ``ctx.state`` for :meth:`estimate_inclusion`,
        with the share of the target's clients whose probe arrived, :func:`probe_rate`)."""
        N = ctx.num_clients
        request = ProbeRequest(params=ctx.params, gradient=True, per_sample=True, partial=True)
        reports = adaptive.probe(ctx, np.arange(N), request)  # the round record states them (sampler_probes, bytes)
        arrived = probes_arrived(ctx, reports)
        gradients = probed_gradients(reports, arrived)
        variance = np.array([r.extra["sigma2"] if got else 0.0 for r, got in zip(reports, arrived)], dtype=np.float64)
        w = np.where(arrived, optimal.objective_weights(ctx, self.objective), 0.0)  # a lost probe: not drawn
        scores = eligible_scores(delta_scores(gradient_diversity(gradients, w), variance, self.alpha1, self.alpha2), w)
        note_zero_scores(ctx, int(np.count_nonzero((scores == 0) & (w > 0))))
        rate = probe_rate(optimal.objective_weights(ctx, self.objective), arrived)
        ctx.state[STATE_KEY] = {"round": ctx.round, "scores": scores, "probe_rate": rate}
        return delta_probabilities(scores)

    def select(self, ctx: "RoundContext") -> Cohort:
        N = ctx.num_clients
        p = self.probabilities(ctx)
        rate = ctx.state[STATE_KEY]["probe_rate"]  # 1 unless probes were lost: pi_k = P(probe arrives) P(drawn | probes)
        rng = ctx.rng("clients")
        if self.draw == "poisson":
            return Cohort.from_sample(with_probe_rate(poisson_sample(ctx.state[STATE_KEY]["scores"], min(self.m, N), rng), rate), N)
        if self.draw == "with_replacement":
            sample = with_replacement_sample(p, self.m, rng)
        else:
            sample = reference_sample(p, min(self.m, int(np.count_nonzero(p))), rng)
        return Cohort.from_sample(with_probe_rate(sample, rate), N, expected_draws=self.m * p[sample.ids] * rate)

    def estimate_inclusion(self, ctx: "RoundContext", draws: int) -> np.ndarray:
        """Every client's inclusion frequency over ``draws`` replays of the round's draw from the probabilities its
        ``select`` kept in ``ctx.state``, with the round's replay stream (standard error sqrt(pi(1 - pi)/draws)), times
        the share whose probe arrived (1 without lost probes; the probes' losses are not replayed); the exact draws
        replay too (their closed form is the cohort's ``inclusion``)."""
        scores = ctx.state[STATE_KEY]["scores"]
        p = delta_probabilities(scores)
        m = min(self.m, int(np.count_nonzero(p)))
        draw = {
            "with_replacement": lambda g: with_replacement_sample(p, self.m, g),
            "poisson": lambda g: poisson_sample(scores, min(self.m, len(p)), g),
            "reference": lambda g: reference_sample(p, m, g),
        }[self.draw]
        return design.replay_inclusion(draw, len(p), draws, ctx.rng("replay")) * ctx.state[STATE_KEY].get("probe_rate", 1.0)
