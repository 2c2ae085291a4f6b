"""DELTA: diverse client sampling (Wang, Guo, Lin & Tang, "DELTA: Diverse client sampling for fasting federated
learning", NeurIPS 2023; arXiv 2205.13925). Equation numbers are those of the paper's text we read (the ICLR 2023
submission of the same paper, arXiv 2205.13925); the authors' released code is github.com/L3030/DELTA_FL.

DELTA's sampling probability (Corollary 3.4, eq. (11)): p_i proportional to sqrt(alpha_1 zeta_i^2 + alpha_2
sigma_i^2), where zeta_i = ||grad F_i(x) - grad f(x)|| is client i's gradient diversity against the target's gradient
grad f = sum_j w_j grad F_j (eq. (1); :func:`gradient_diversity`), sigma_i^2 its local stochastic-gradient variance
(Assumption 2; :func:`local_variance`), and alpha_1 = 20 K^2 L eta_L, alpha_2 = 5 K L eta_L + eta / n the constants
of its bound (K local steps, L smoothness, eta_L and eta the local and server learning rates, n clients a round;
:func:`paper_alphas`). :func:`delta_scores` and :func:`delta_probabilities` compute them.

Client weights (:func:`objective_scores`). Eq. (11) minimizes sum_i a_i / p_i (a_i = alpha_1 zeta_i^2 + alpha_2
sigma_i^2), the variance of the surrogate (6) that weighs every client 1/(m p_i): the target with equal weights.
For the target sum_i w_i F_i of eq. (1), aggregated as sum_{i in S} (w_i / (|S| p_i)) Delta_i (Algorithm 1, line 12,
w_i = n_i / n), the same bound has sum_i w_i^2 a_i / p_i and its minimum (Cauchy-Schwarz) is p_i proportional to
w_i sqrt(a_i): eq. (11) with each score times w_i. The authors' code multiplies the scores by L_i / sum_j L_j (L_i
the client's sample count) likewise. :class:`DeltaClients` does so by default (``score_weights="objective"``);
``score_weights="none"`` keeps eq. (11)'s unweighted scores (this project's rule before), which for a size-weighted
target gives small clients far more draws than their weight and so a larger variance.

The estimator is unbiased only with a draw that matches its weights. Two such draws:

- ``with_replacement``: m independent draws with probabilities p (:func:`with_replacement_sample`), each draw
  of client i weighted w_i / (m p_i) (:func:`with_replacement_weights`, Hansen-Hurwitz): the paper's
  aggregation sum_{i in S} (1 / (m p_i)) w_i Delta_i with S a multiset;
- ``poisson``: client i independently with pi_i proportional to its (weighted) score, capped at 1, sum pi = m
  (:func:`poisson_sample`), weighted w_i / pi_i (Horvitz-Thompson, :func:`optimal.horvitz_thompson_weights`).

``reference``: the authors' code (``torch.multinomial(P, S, replacement=False)``) draws m clients *without*
replacement proportionally to p (:func:`reference_sample`). Its true inclusion probabilities pi_i
(:func:`reference_inclusion`: exact by enumeration for at most 20 clients, by replay otherwise) are not m p_i.
Weighted as if drawn with replacement, w_i / (m p_i), the estimate has E = sum_i (pi_i / (m p_i)) w_i Delta_i, off the
target by :func:`reference_bias`. The authors' code aggregates differently: sum_{i in S} (L_i / (N p_i)) Delta_i,
divided by the sampled clients' total sum_{i in S} L_i, then a server step with momentum 0.2
(:func:`reference_aggregate_weights`, :class:`ReferenceMean`; ``fedsample.recipes.delta(draw="reference")`` uses
both), a ratio estimator whose expectation (:func:`reference_aggregate_expectation`) is not the target either.

Where the authors' code departs from the paper in other ways, this module follows the paper: the code's score is
beta (L_i/sum L) ||g_i - g_bar|| + (1 - beta) sqrt(L_i/sum L) with g_bar the clients' unweighted mean and no
sigma_i^2 (``reweight_prac_theory``, beta = 0.5), its g_i the mean of the minibatch gradients of one local epoch;
here zeta_i is measured against the target's weighted mean gradient at the global model, and sigma_i^2 is estimated.
"""

from __future__ import annotations

import warnings

from dataclasses import dataclass
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypedDict

import numpy as np

from fedsample import checks
from fedsample.messages import ProbeReport, ProbeRequest
from fedsample.parts import AggregatorCapabilities, ClientSamplerCapabilities, InclusionKind, Learns, SizeNeed
from fedsample.rounds import Cohort, Failed
from fedsample.sampling import adaptive, design, optimal
from fedsample.runtime.records import held_state
from fedsample.sampling.design import Sample
from fedsample.training.aggregate import OBJECTIVE, Reports, linear_combination, reported_sizes
from fedsample.training.functional import Params

if TYPE_CHECKING:
    from fedsample.rounds import RoundContext

__all__ = [
    "DeltaHeld",
    "PROBABILITY_KIND",
    "SERVER_LEARNS",
    "gradient_diversity",
    "local_variance",
    "delta_scores",
    "paper_alphas",
    "objective_scores",
    "delta_probabilities",
    "with_replacement_sample",
    "with_replacement_weights",
    "poisson_sample",
    "reference_sample",
    "reference_inclusion",
    "reference_bias",
    "reference_aggregate_weights",
    "reference_aggregate_expectation",
    "REFERENCE_SERVER_MOMENTUM",
    "ReferenceMean",
    "eligible_scores",
    "note_zero_scores",
    "probed_gradients",
    "DeltaClients",
]

Draw = Literal["with_replacement", "poisson", "reference"]
ScoreWeights = Literal["objective", "none"]
#: The server momentum of the authors' code (v = 0.2 v + Delta; ``comm_helpers.IS_communicate``), which
#: ``fedsample.recipes.delta(draw="reference")`` uses with :class:`ReferenceMean`.
REFERENCE_SERVER_MOMENTUM = 0.2

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
    shares: np.ndarray = w / w.sum()
    return shares


def gradient_diversity(gradients: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """zeta_i = ||grad F_i - grad f|| with grad f = sum_j w_j grad F_j (``weights`` normalized to sum 1),
    one row of ``gradients`` per client."""
    where = "gradient_diversity"
    G = design.finite_matrix(gradients, "gradients", where)
    w = _shares(weights, G.shape[0], where)
    diversity: np.ndarray = np.linalg.norm(G - w @ G, axis=1)
    return diversity


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


def paper_alphas(local_steps: int, smoothness: float, local_lr: float, server_lr: float, cohort: int) -> tuple[float, float]:
    """The constants of Corollary 3.4: alpha_1 = 20 K^2 L eta_L and alpha_2 = 5 K L eta_L + eta / n (K local steps, L the
    smoothness constant of Assumption 1, eta_L and eta the local and server learning rates, n clients a round). Only
    their ratio alpha_2 / alpha_1 = 1/(4K) + eta / (20 n K^2 L eta_L) changes p. L is rarely known, which is why
    :class:`DeltaClients` takes alpha1 and alpha2 as hyperparameters (1 and 1 by default)."""
    where = "paper_alphas"
    K = design.check_count(local_steps, "local_steps", where, minimum=1)
    n = design.check_count(cohort, "cohort", where, minimum=1)
    for name, value in (("smoothness", smoothness), ("local_lr", local_lr), ("server_lr", server_lr)):
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{where}: {name} must be finite and > 0, got {value!r}")
    return 20.0 * K**2 * smoothness * local_lr, 5.0 * K * smoothness * local_lr + server_lr / n


def objective_scores(scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """w_i times score_i: the variance-minimizing p_i proportional to w_i sqrt(alpha_1 zeta_i^2 + alpha_2 sigma_i^2)
    for the target sum_i w_i Delta_i (eq. (11) is the case of equal w_i; the authors' code multiplies by L_i / sum L).
    ``weights`` need not sum to 1 (p is normalized afterwards)."""
    where = "objective_scores"
    s = design.nonnegative_vector(scores, "scores", where)
    w = design.nonnegative_vector(weights, "weights", where)
    if w.shape != s.shape:
        raise ValueError(f"{where}: scores and weights differ in length ({s.size} vs {w.size})")
    weighted: np.ndarray = w * s
    return weighted


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
    hansen_hurwitz: np.ndarray = sample.multiplicity * w[sample.ids] / (m * q[sample.ids])
    return hansen_hurwitz


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
    bias: np.ndarray = (factor * w) @ U
    return bias


def reference_aggregate_weights(p_chosen: np.ndarray, sizes_chosen: np.ndarray, num_clients: int) -> np.ndarray:
    """The authors' aggregation weights (their ``IS_communicate``) of the chosen clients: L_i / (N p_i), divided by the
    chosen clients' total sum_{j in S} L_j (L_i the client's sample count, p_i its draw probability, N the number of
    clients), so the step is sum_{i in S} L_i Delta_i / (N p_i) / sum_{j in S} L_j. A ratio estimator: with equal
    sizes and p_i = 1/N it is FedAvg's mean (1/m) sum_{i in S} Delta_i; in general it is unbiased neither for
    sum_i w_i Delta_i nor for the plain mean (:func:`reference_aggregate_expectation`)."""
    where = "reference_aggregate_weights"
    p = design.nonnegative_vector(p_chosen, "p_chosen", where)
    L = design.nonnegative_vector(sizes_chosen, "sizes_chosen", where)
    N = design.check_count(num_clients, "num_clients", where, minimum=1)
    if p.shape != L.shape:
        raise ValueError(f"{where}: p_chosen and sizes_chosen differ in length ({p.size} vs {L.size})")
    if np.any(p <= 0):
        raise ValueError(f"{where}: a chosen client has p_i = 0")
    if L.sum() <= 0:
        raise ValueError(f"{where}: the chosen clients' sizes are all zero")
    weights: np.ndarray = L / (N * p) / L.sum()
    return weights


def reference_aggregate_expectation(p: np.ndarray, m: int, sizes: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """E[step] of the authors' aggregation (:func:`reference_aggregate_weights`) under their draw of m distinct
    clients successively proportional to p (:func:`reference_sample`), exactly: the sum over every possible cohort
    S of P(S) sum_{i in S} weight_i(S) Delta_i (:func:`design.successive_sampling_sets`; at most 20 clients),
    ``updates`` one row Delta_i per client."""
    where = "reference_aggregate_expectation"
    q = delta_probabilities(p)
    L = design.nonnegative_vector(sizes, "sizes", where)
    U = design.finite_matrix(updates, "updates", where)
    if L.size != q.size or U.shape[0] != q.size:
        raise ValueError(f"{where}: sizes ({L.size}) and updates ({U.shape[0]} rows) must have one entry per client ({q.size})")
    members, probs = design.successive_sampling_sets(q, m)
    ratio = np.divide(L, q.size * q, out=np.zeros_like(L), where=q > 0)
    weights = members * ratio / (members @ L)[:, None]
    expectation: np.ndarray = (probs @ weights) @ U
    return expectation


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
        # one text for every round (the count is in the record), so a run shows it once (fedsample.runtime.warned)
        warnings.warn("DELTA: clients with score 0 cannot be drawn (how many, per round: the record's "
                      "sampler_zero_score_clients); the aggregate leaves their updates out (biased unless those are zero)",
                      RuntimeWarning, stacklevel=3)


def probed_gradients(reports: Sequence[ProbeReport | Failed], arrived: np.ndarray) -> np.ndarray:
    """The probed gradients, one row per client, zeros where the probe was lost (weight 0 in the mean gradient)."""
    rows = [np.asarray(r.gradient, dtype=np.float64) if got and isinstance(r, ProbeReport) else None for r, got in zip(reports, arrived)]
    dim = len(next(row for row in rows if row is not None))
    return np.stack([np.zeros(dim) if row is None else row for row in rows])


@dataclass(frozen=True)
@checks.constrained(m=checks.Param(checks.COUNT, label="m (draws per round)"))
class ReferenceMean:
    """The authors' aggregation (:func:`reference_aggregate_weights`) as an aggregator: sum_{k in S} n_k Delta_k /
    (N p_k) over the received updates, divided by their total sum n_k (reported sizes), p_k read from the cohort's
    expected draws m p_k (:class:`DeltaClients`' ``reference`` draw: ``m`` must be its m). The weights are known
    before the updates (a secure sum can form it); the ratio normalizes over whoever answered, so it needs no
    response-rate adjustment. Biased for sum_k w_k Delta_k, as :func:`reference_aggregate_expectation` computes."""

    m: int = 10

    @property
    def capabilities(self) -> AggregatorCapabilities:
        """Linear; it divides by p_k = E[draws]/m and needs the cohort's size reports; m, which the sampler's
        expected draws m p_k carry and this aggregator divides out."""
        return AggregatorCapabilities(weighs_by_inclusion=True, linear=True, needs_sizes=SizeNeed.COHORT,
                                      shared_settings={M_SETTING: self.m})

    def weights(self, positions: np.ndarray, cohort: "Cohort", ctx: "RoundContext | None") -> np.ndarray:
        """The weights of the updates at ``positions`` of the cohort (:func:`reference_aggregate_weights`)."""
        if cohort.expected_draws is None:
            raise ValueError("ReferenceMean needs cohorts that carry their expected draws m p_k (DeltaClients(draw='reference'))")
        p = np.asarray(cohort.expected_draws, dtype=np.float64)[positions] / self.m
        sizes = reported_sizes(ctx, cohort.ids[positions])
        return reference_aggregate_weights(p, sizes, cohort.population)

    def planned_weights(self, cohort: "Cohort", ctx: "RoundContext") -> np.ndarray:
        """The weights :meth:`combine` gives the cohort if every client's update arrives."""
        return self.weights(np.arange(len(cohort)), cohort, ctx)

    def combine(self, reports: Reports, cohort: "Cohort", ctx: "RoundContext") -> Params | None:
        """The weighted sum of the received updates (None when nothing arrived)."""
        return linear_combination(reports, lambda positions, _: self.weights(positions, cohort, ctx))


# --- the client sampler ------------------------------------------------------------------------------------------

STATE_KEY = "delta"


class DeltaHeld(TypedDict):
    """What DELTA's round keeps (under :data:`STATE_KEY`) for its draw and its replay: the round, every client's
    score from its probe, and the share of the target's clients whose probe arrived."""

    round: int
    scores: np.ndarray
    probe_rate: float
#: The shared setting of the reference draw and :class:`ReferenceMean`: both must mean the same m.
M_SETTING = "m (DELTA's draws per round, which the reference aggregation divides out)"


@dataclass(frozen=True)
@checks.constrained(
    m=checks.Param(checks.COUNT, label="m (draws per round)"), alpha1=checks.NON_NEGATIVE, alpha2=checks.NON_NEGATIVE,
)
class DeltaClients:
    """DELTA's client sampler (Wang et al., NeurIPS 2023). Every round each client is probed at the global model
    (``ProbeRequest(gradient=True, per_sample=True)``: its full-data gradient grad F_k and its per-sample gradient
    variance sigma_k^2, :func:`fedsample.client.probe`); the server forms zeta_k = ||grad F_k - sum_j w_j grad F_j||
    (:func:`gradient_diversity`) and p_k proportional to w_k sqrt(alpha1 zeta_k^2 + alpha2 sigma_k^2)
    (``score_weights="objective"``, the bound's optimum for the target, :func:`objective_scores`; ``"none"``: without
    w_k, eq. (11) as printed), with w_k = n_k/n (``objective="size"``) or 1/N. The draw (``draw``):

    - ``"with_replacement"``: m draws with probabilities p (exact pi_k = 1 - (1 - p_k)^m; the cohort carries the
      multiplicities and E[draws] = m p_k, so the Horvitz-Thompson aggregators weigh m_k w_k / (m p_k), the paper's);
    - ``"poisson"``: client k independently with pi_k proportional to its score, capped at 1, sum pi = m (exact);
    - ``"reference"``: the authors' code's draw, m distinct clients successively proportional to p
      (:func:`reference_sample`); the cohort carries the ``expected_draws`` m p_k the code's weights divide by
      (:class:`ReferenceMean`, or w_k / (m p_k) under a Horvitz-Thompson aggregator), which are not its true pi_k:
      its probabilities are estimated (:meth:`estimate_inclusion` replays the round's draw) and its aggregate is
      biased, which ``fedsample.diagnose`` shows.

    The round record names the probes it cost (``sampler_probes``: every client, and their bytes).

    Under faults (docs/reliability.md): a client whose size report was lost has w_k = 0 and is not drawn
    (:func:`eligible_scores`); a client whose probe was lost is not drawn either, but stays in the target: the others'
    pi_k are times the share whose probe arrived (:func:`~fedsample.sampling.adaptive.probe_rate`); every score 0 gives the uniform draw over the others; a client with score 0 among
    positive ones cannot be drawn, which the round record and a warning say (:func:`note_zero_scores`).

    sigma_k^2 here is the per-sample gradient variance at the global model (a minibatch of B has sigma_k^2 / B);
    alpha1 = alpha2 = 1 by default (the bound's constants need the smoothness constant L: :func:`paper_alphas`)."""

    m: int = 10
    draw: Draw = "with_replacement"
    alpha1: float = 1.0
    alpha2: float = 1.0
    objective: optimal.Objective = "size"
    score_weights: ScoreWeights = "objective"

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Exact pi, or estimated for the reference draw, whose cohorts carry the weights it assumes (m p_k, which an
        aggregator may divide by); every client's exact size for ``objective="size"`` (the mean gradient of zeta_k,
        and w_k); the w_k of its target, which the Horvitz-Thompson aggregator must share (and, for the reference
        draw, m, which :class:`ReferenceMean` divides out of the expected draws m p_k)."""
        reference, sized = self.draw == "reference", self.objective == "size"
        probed = (Learns.LOSSES, Learns.GRADIENT_NORMS, Learns.GRADIENTS, Learns.LOCAL_VARIANCES)
        return ClientSamplerCapabilities(
            inclusion_kind=InclusionKind.ESTIMATED if reference else InclusionKind.EXACT, assumed_weights=reference,
            server_learns=probed + ((Learns.SIZES,) if sized else ()), needs_sizes=SizeNeed.EXACT_ALL if sized else SizeNeed.NONE,
            shared_settings={OBJECTIVE: self.objective} | ({M_SETTING: self.m} if reference else {}), estimates_inclusion=True)

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """At most m distinct clients (m draws; sum pi = m for Poisson)."""
        return float(min(self.m, num_clients))

    def probabilities(self, ctx: "RoundContext") -> np.ndarray:
        """p_k from every client's probe at the global model (kept in ``ctx.state`` for :meth:`estimate_inclusion`,
        with the share of the target's clients whose probe arrived, :func:`~fedsample.sampling.adaptive.probe_rate`)."""
        N = ctx.num_clients
        request = ProbeRequest(params=ctx.params, gradient=True, per_sample=True)
        # the round record states them (sampler_probes, bytes) and names the lost ones
        reports, arrived = adaptive.probe_partial(ctx, np.arange(N), request, adaptive.NOT_DRAWN)
        gradients = probed_gradients(reports, arrived)
        variance = np.array([r.extra["sigma2"] if isinstance(r, ProbeReport) else 0.0 for r in reports], dtype=np.float64)  # arrived: the ProbeReports
        w = np.where(arrived, optimal.objective_weights(ctx, self.objective), 0.0)  # a lost probe: not drawn
        scores = delta_scores(gradient_diversity(gradients, w), variance, self.alpha1, self.alpha2)
        if self.score_weights == "objective":
            scores = objective_scores(scores, w)
        scores = eligible_scores(scores, w)
        note_zero_scores(ctx, int(np.count_nonzero((scores == 0) & (w > 0))))
        # the exact draws' pi_k carry the probe rate; the reference draw keeps the authors' weights (biased, says so)
        rate = adaptive.probe_rate(optimal.objective_weights(ctx, self.objective), arrived) if self.draw != "reference" else 1.0
        ctx.state[STATE_KEY] = DeltaHeld(round=ctx.round, scores=scores, probe_rate=rate)
        return delta_probabilities(scores)

    def select(self, ctx: "RoundContext") -> Cohort:
        N = ctx.num_clients
        p = self.probabilities(ctx)
        held = held_state(ctx.state, STATE_KEY, DeltaHeld)
        rate = held["probe_rate"]  # 1 unless probes were lost: pi_k = P(probe arrives) P(drawn | probes)
        rng = ctx.rng("clients")
        if self.draw == "poisson":
            return Cohort.from_sample(adaptive.with_probe_rate(poisson_sample(held["scores"], min(self.m, N), rng), rate), N)
        if self.draw == "with_replacement":
            sample = with_replacement_sample(p, self.m, rng)
        else:
            sample = reference_sample(p, min(self.m, int(np.count_nonzero(p))), rng)
        return Cohort.from_sample(adaptive.with_probe_rate(sample, rate), N, expected_draws=self.m * p[sample.ids] * rate)

    def estimate_inclusion(self, ctx: "RoundContext", draws: int) -> np.ndarray:
        """Every client's inclusion frequency over ``draws`` replays of the round's draw from the probabilities its
        ``select`` kept in ``ctx.state``, with the round's replay stream (standard error sqrt(pi(1 - pi)/draws)), times
        the share whose probe arrived (1 without lost probes; the probes' losses are not replayed); the exact draws
        replay too (their closed form is the cohort's ``inclusion``)."""
        held = held_state(ctx.state, STATE_KEY, DeltaHeld)
        scores = held["scores"]
        p = delta_probabilities(scores)
        m = min(self.m, int(np.count_nonzero(p)))
        draw = {
            "with_replacement": lambda g: with_replacement_sample(p, self.m, g),
            "poisson": lambda g: poisson_sample(scores, min(self.m, len(p)), g),
            "reference": lambda g: reference_sample(p, m, g),
        }[self.draw]
        frequency = design.replay_inclusion(draw, len(p), draws, ctx.rng("replay"))
        inclusion: np.ndarray = frequency * held["probe_rate"]
        return inclusion
