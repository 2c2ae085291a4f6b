"""ISFedAvg: importance sampling of agents and of their data (Rizk, Vlaski & Sayed, IEEE TSP 2022).

Two layers, both *without replacement* and both by systematic sampling on inclusion probabilities
(Madow 1949; the paper's §IV-C scheme [44]):

- **Agents** (Lemma 7, Eq. 43): L of K agents with normalized inclusion probabilities
  p_k ∝ sqrt(sigma^2_k + alpha_k * ||grad P_k(w)||^2), so pi_k = L * p_k (capped at 1 by
  :func:`design.inclusion_probabilities`, the rest rescaled).
- **Data** (Lemma 6, Eq. 44): in each of its E_k epochs, agent k draws B_k of its N_k points with
  p_n ∝ ||grad Q_k(w; x_n)||, so pi_n = B_k * p_n (capped likewise).

**Unbiased scaling (Eqs. 7-9).** The paper writes the estimator with *normalized* inclusion probabilities
p_n = pi_n / B_k and p_k = pi_k / L (its Eq. 5): the local step is

    w_{k,e} = w_{k,e-1} - mu / (K p_k E_k B_k) * sum_{b in batch} grad Q_k(w_{k,e-1}; x_b) / (N_k p_b)   (Eq. 8)

and the server averages w_i = (1/L) sum_{k in L_i} w_{k,E_k} (Eq. 9). Written with pi this is exactly the
Horvitz-Thompson estimator at both levels: (1/B_k) sum_b g_b / (N_k p_b) = (1/N_k) sum_b g_b / pi_b, whose
expectation is (1/N_k) sum_n g_n because P(n in batch) = pi_n, whatever the joint inclusion probabilities of
the design; likewise (1/L) sum_k v_k / (K p_k) = (1/K) sum_k v_k / pi_k. So the paper's Eq. 8, read with
normalized inclusion probabilities, *is* the correct without-replacement scaling; reading p_n as a
with-replacement "sampling probability" would not be (the two differ once any pi_n is capped at 1). Each
sampled gradient therefore gets the per-sample factor ``B_k / (N_k pi_n)`` computed from the design's actual
pi, and ``1 / (K p_k) = L / (K pi_k)`` is applied either inside the local steps (``scaling="step"``, the
paper's Eq. 8, with a plain mean at the server, Eq. 9) or at the server (``scaling="aggregate"``: local steps
use only 1/E_k and the server forms (1/K) sum_k Delta_k / pi_k). Both agree on the first local step.

**Probability updates (§IV-C)**, selectable by ``update``:

- ``"exact"``: Lemmas 6-7 at a given reference model (the paper uses the optimum w°, known in its
  simulation: pass ``reference=``); the agents' statistics are probed once and kept in ``ctx.state``.
- ``"approx"``: Eqs. 49-50, the same formulas at the current model w_{i-1}; every agent is probed every
  round (with the full local gradient, i.e. Eq. 50, not its minibatch variant Eq. 51).
- ``"cheap"``: Eqs. 52-53: p starts uniform; after round i only the participants' p_l are recomputed and
  rescaled to keep their total, p_l <- (sum_{m in L_i} p_m) * s_l / sum_{m in L_i} s_m (Eq. 52), and each
  participant updates only the points it sampled, the same way with s_n = ||grad Q(w_{i-1}; x_n)||
  (Eq. 53). The data weights stay on the client: :class:`ImportanceBatches` keeps them in the client-held
  ``ClientContext.state`` (under ``"isfedavg"``), so nothing of length N_k reaches the server.
- ``"uniform"``: p_k = 1/K, p_n = 1/N_k: the same machinery as FedAvg with Eq. 6's epoch correction (the
  paper's baseline draws uniform minibatches with replacement; this one draws without).

**The agent scores (Eqs. 21-23, 43).** sigma^2_{s,k} = 6 / (E_k B_k N_k^2) sum_n ||grad Q_k(w; x_n)||^2 / p_n^(k)
(Eq. 23, :func:`data_variability`): the agent reports only the sum (1/N_k^2) sum_n ||grad Q_k||^2 / p_n^(k)
(``ProbeRequest(data_weights=DataRule(...))``), computed with the data probabilities its plan draws with, and
the server applies its E_k and B_k; alpha_k = 3 + 6 / (E_k B_k) (:func:`paper_alpha`). **Garbled in our copy:**
Eq. 23's constant reads "_0" and Lemma 7's alpha_k only "(3 + ..."; both are read from Eq. 80 (the
data-level bound 6/(E_k B_k N_k^2) sum_n ||grad Q_k||^2 / p_n + 6/(E_k B_k) ||grad P_k||^2) and Eq. 21's
"(3 + 6/...)". ``alpha=`` overrides alpha_k. **The l2 term** rho ||w||^2 of the local risk (Eq. 55) is
:class:`~fedsample.training.local.EpochSGD`'s ``rho``, scaled in each local step as the data term is. The E_k and B_k of the
regression experiment are "chosen uniformly at random from [1, 10] and [1, 5]" (§V-A): we read that as fixed per
agent, batch sizes from [1, 10] and epochs from [1, 5] (:func:`paper_heterogeneity`). Not in the paper:
``floor`` mixes every probability vector with the uniform one, p <- (1 - floor) p + floor / n, so that no unit
gets probability 0 (a point whose gradient is 0 at w_{i-1} could never be drawn again under the stale
updates of Eq. 53, and the Horvitz-Thompson estimate would lose unbiasedness later); the default is
``DEFAULT_FLOOR`` = 1e-3, and ``floor=0`` is the paper's formulas, with a zero probability then an error. Units are put in a random order before systematic
sampling: first-order inclusion probabilities are unchanged and fixed joint-inclusion patterns are avoided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Sequence, TypedDict

import numpy as np
import torch

from fedsample import checks
from fedsample.messages import ClientContext, LocalSample, PerClient, ProbeReport, ProbeRequest
from fedsample.parts import ClientSamplerCapabilities, DataSamplerCapabilities, InclusionKind, Learns, Limit
from fedsample.sampling import adaptive, design
from fedsample.sampling.clamp import clamped
from fedsample.rounds import Cohort, probe_reports
from fedsample.training.aggregate import Scaling
from fedsample.training.functional import Params, per_sample_gradients, same_params
from fedsample.runtime.records import opened_state

if TYPE_CHECKING:
    from fedsample.rng import ClientRandom
    from fedsample.rounds import RoundContext

__all__ = [
    "ALPHA", "BATCHES", "DEFAULT_FLOOR", "DataRule", "EPOCHS", "FLOOR", "ISFedAvgHeld", "ImportanceAgents", "ImportanceBatches",
    "ImportanceData", "Update", "agent_scores", "data_scale", "data_variability", "gradient_norms",
    "normalized_probabilities", "paper_alpha", "paper_heterogeneity", "random_order_systematic", "rescale_subset",
]

Update = Literal["exact", "approx", "cheap", "uniform"]
"""ISFedAvg's probability updates: exact (Lemmas 6-7), approx (Eqs. 49-50), cheap (Eqs. 52-53), or uniform."""
STATE_KEY = "isfedavg"
#: Default mixing with the uniform distribution (not in the paper; see the module notes).
DEFAULT_FLOOR = 1e-3
#: The parameters' constraints, shared by the agent and the data sampler.
FLOOR = checks.reals(0, 1, "[)")
#: The agents' alpha_k: one real >= 0 or one per agent.
ALPHA = checks.Param(checks.Each(checks.NON_NEGATIVE), label="alpha_k")
#: The agents' local epochs E_k: one integer >= 1 or one per agent.
EPOCHS = checks.Param(checks.Each(checks.COUNT), label="epochs E_k")
#: The agents' batch sizes B_k: one integer >= 1 or one per agent.
BATCHES = checks.Param(checks.Each(checks.COUNT), label="batch sizes B_k")


# --- probability formulas -------------------------------------------------------------------------


def agent_scores(sigma2: np.ndarray, grad_norm: np.ndarray, alpha: float | np.ndarray = 3.0) -> np.ndarray:
    """s_k = sqrt(sigma^2_{s,k} + alpha_k * ||grad P_k(w)||^2), the unnormalized optimal agent inclusion
    probabilities (Lemma 7, Eq. 43; Eq. 50 at the current model); ``sigma2`` is the data variability of
    :func:`data_variability`, ``alpha`` one value or one per agent (:func:`paper_alpha`)."""
    sigma2 = _finite_nonnegative(sigma2, "sigma^2_k")
    grad_norm = _finite_nonnegative(grad_norm, "||grad P_k||")
    alpha = np.asarray(checks.check("alpha", alpha, ALPHA, owner="ISFedAvg"), dtype=np.float64)
    scores: np.ndarray = np.sqrt(sigma2 + alpha * grad_norm**2)
    return scores


def data_variability(second_moment: np.ndarray, epochs: np.ndarray | int, batch: np.ndarray | int) -> np.ndarray:
    """sigma^2_{s,k} = 6 / (E_k B_k N_k^2) * sum_n ||grad Q_k(w; x_{k,n})||^2 / p_n^(k) (Eq. 23; also the first
    term of Eq. 80), from ``second_moment`` = (1/N_k^2) sum_n ||grad Q_k||^2 / p_n^(k) as the agent reports it
    (:func:`fedsample.client.weighted_second_moment` with its own data probabilities p_n^(k)). An agent that
    runs more epochs or larger batches averages more gradients per round, so its data variability and hence
    its inclusion probability are smaller. Eq. 23's constant is garbled in our copy ("_0"); Eq. 80 reads 6."""
    m = _finite_nonnegative(second_moment, "data second moment")
    return 6.0 * m / (np.asarray(epochs, dtype=np.float64) * np.asarray(batch, dtype=np.float64))


def paper_alpha(epochs: np.ndarray | int, batch: np.ndarray | int) -> np.ndarray:
    """alpha_k = 3 + 6 / (E_k B_k), the model-variability weight of Lemma 7 (Eq. 43) and Eq. 21. Our copy
    keeps only "(3 + ..." of it; the 6 / (E_k B_k) is the ||grad P_k(w°)||^2 term of Eq. 80, the data-level
    share of the bound that Eq. 21 adds to the agent-level 3 ||grad P_k(w°)||^2."""
    return 3.0 + 6.0 / (np.asarray(epochs, dtype=np.float64) * np.asarray(batch, dtype=np.float64))


def normalized_probabilities(scores: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """p = scores / sum(scores), mixed with the uniform distribution by ``floor`` (see the module notes).

    Raises ``ValueError`` for NaN, infinite or negative scores, for all-zero scores, and for a zero
    probability when ``floor == 0`` (that unit could never be drawn, so no estimate would be unbiased).
    """
    s = _finite_nonnegative(scores, "importance scores")
    checks.check("floor", floor, FLOOR, owner="ISFedAvg")
    if s.size == 0 or s.sum() <= 0:
        raise ValueError("ISFedAvg: importance scores are all zero; no sampling distribution can be formed")
    p: np.ndarray = (1.0 - floor) * s / s.sum() + floor / s.size
    if np.any(p <= 0):
        raise ValueError(
            f"ISFedAvg: probability 0 for unit {int(np.flatnonzero(p <= 0)[0])}: it could never be sampled, so "
            "the importance-weighted estimate would be biased; use floor > 0"
        )
    return p


def rescale_subset(p: np.ndarray, ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The cheap update of Eqs. 52-53: the units in ``ids`` share their current total mass in proportion to
    their new ``scores``; the others keep their probabilities (so the vector still sums to 1)."""
    p = np.asarray(p, dtype=np.float64).copy()
    ids = np.asarray(ids, dtype=np.int64)
    scores = _finite_nonnegative(scores, "importance scores")
    if scores.sum() > 0:
        p[ids] = p[ids].sum() * scores / scores.sum()
    return p


def random_order_systematic(probs: np.ndarray, n: int, rng: np.random.Generator | ClientRandom) -> design.Sample:
    """n units without replacement with inclusion probabilities pi = n * probs (capped at 1, the rest rescaled:
    :func:`design.inclusion_probabilities`), by Madow's systematic sampling (:func:`design.systematic_sample`)
    on a random order of the units. Returns sorted ids and their pi."""
    probs = np.asarray(probs, dtype=np.float64)
    order = rng.permutation(probs.size)
    drawn = design.systematic_sample(probs[order], n, rng)
    ids = order[drawn.ids]
    sort = np.argsort(ids)
    return design.Sample(ids[sort], drawn.inclusion[sort], drawn.multiplicity[sort])


def data_scale(inclusion: np.ndarray, num_points: int, batch: int) -> np.ndarray:
    """The per-sample factor 1 / (N_k p_n) of Eq. 8 with the normalized inclusion probability p_n = pi_n / B_k,
    i.e. B_k / (N_k pi_n): the minibatch mean of scaled gradients is then the Horvitz-Thompson estimate of
    grad P_k."""
    return batch / (num_points * np.asarray(inclusion, dtype=np.float64))


def paper_heterogeneity(num_agents: int, rng: np.random.Generator, batch_range: tuple[int, int] = (1, 10), epoch_range: tuple[int, int] = (1, 5)) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-agent epochs E_k and batch sizes B_k uniform on the given integer ranges (§V-A: B_k in [1, 10],
    E_k in [1, 5]); returns ``(epochs, batch_sizes)`` to pass to :func:`fedsample.recipes.isfedavg`."""
    epochs = rng.integers(epoch_range[0], epoch_range[1] + 1, size=num_agents)
    batches = rng.integers(batch_range[0], batch_range[1] + 1, size=num_agents)
    return tuple(int(e) for e in epochs), tuple(int(b) for b in batches)


def _finite_nonnegative(values: object, name: str) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"ISFedAvg: {name} contains NaN or infinite values")
    if np.any(arr < 0):
        raise ValueError(f"ISFedAvg: {name} must be >= 0")
    return arr


class ISFedAvgHeld(TypedDict, total=False):
    """What ISFedAvg's server holds between rounds (under :data:`STATE_KEY`): the agents' probabilities p_k
    (``update="cheap"``, Eq. 52) or their scores at the reference model (``update="exact"``; NaN until an agent's
    probe arrives). The data weights stay on the clients."""

    agent_p: np.ndarray
    agent_scores_exact: np.ndarray


def _state(ctx: "RoundContext") -> ISFedAvgHeld:
    return opened_state(ctx.state, STATE_KEY, ISFedAvgHeld)


# --- the data plan (runs on the client) -----------------------------------------------------------


@dataclass(frozen=True)
class DataRule:
    """The data probabilities p_n^(k) an agent uses, as a rule it applies to its own data
    (:class:`fedsample.messages.DataWeights`): ``"gradient"`` p_n ∝ ||grad Q_k(w; x_n)|| at the probed model
    (Lemma 6 at w°, Eq. 49 at w_{i-1}), ``"held"`` the Eq. 53 weights it keeps (uniform before its first
    round); both mixed with the uniform distribution by ``floor`` as the data plan draws them."""

    rule: Literal["gradient", "held"]
    floor: float = 0.0

    def probabilities(self, ctx: ClientContext, grad_norms: np.ndarray) -> np.ndarray:
        raw = grad_norms if self.rule == "gradient" else stored_data_weights(ctx)
        if np.sum(raw) <= 0:  # every gradient is 0: no variability whatever p_n is
            return np.full(len(raw), 1.0 / max(len(raw), 1))
        probs: np.ndarray = (1.0 - self.floor) * raw / np.sum(raw) + self.floor / len(raw)
        return probs


def gradient_norms(ctx: ClientContext, params: Params, rows: np.ndarray | None = None) -> np.ndarray:
    """||grad Q_k(w; x_n)|| for the client's samples (all, or ``rows``), from per-sample gradients. Those of all
    its samples are computed once per model where the federation keeps them (``ctx.kept``: the diagnosis, whose
    model does not move; read-only, the same numbers as computed afresh)."""
    if rows is not None or ctx.kept is None:
        return _gradient_norms(ctx, params, rows)
    found = ctx.kept.get("gradient_norms")  # (the model, its norms)
    if isinstance(found, tuple) and same_params(found[0], params):
        kept: np.ndarray = found[1]
        return kept
    norms = _gradient_norms(ctx, params, None)
    norms.setflags(write=False)
    ctx.kept["gradient_norms"] = (params, norms)
    return norms


def _gradient_norms(ctx: ClientContext, params: Params, rows: np.ndarray | None) -> np.ndarray:
    x, y = (ctx.x, ctx.y) if rows is None else (ctx.x[rows], ctx.y[rows])
    per_sample = per_sample_gradients(ctx.module, ctx.task, params, x, y)
    norms: np.ndarray = torch.linalg.vector_norm(per_sample, dim=1).cpu().numpy().astype(np.float64)
    return norms


@dataclass(frozen=True)
class ImportanceBatches:
    """Client k's instruction (Algorithm 1, inner loop): in each of ``epochs`` epochs draw ``batch_size``
    points without replacement with p_n ∝ ||grad Q_k(params; x_n)|| (``params`` None: uniform), and scale
    each by ``agent_scale / epochs * B_k / (N_k pi_n)`` (Eq. 8). With ``refresh`` (Eq. 53) the client draws
    from the probabilities it keeps in its own ``ctx.state`` (uniform the first time) and stores them back
    with the drawn points' probabilities recomputed at ``params``; they never leave the client."""

    epochs: int
    batch_size: int
    agent_scale: float = 1.0
    params: Params | None = field(default=None, repr=False)
    refresh: bool = False
    floor: float = 0.0

    def raw_weights(self, ctx: ClientContext) -> np.ndarray:
        """The unmixed p_n: client-held (Eq. 53; uniform at its start), uniform (no ``params``), or Lemma 6 /
        Eq. 49."""
        if self.refresh:
            return stored_data_weights(ctx)
        if self.params is None:
            return np.full(ctx.size, 1.0 / ctx.size)
        return gradient_norms(ctx, self.params)

    def draw(self, ctx: ClientContext, rng: ClientRandom) -> LocalSample:
        if ctx.size == 0:
            return LocalSample(np.zeros(0, dtype=np.int64))
        raw = self.raw_weights(ctx)
        p = normalized_probabilities(raw, self.floor)
        batch = min(self.batch_size, ctx.size)
        draws = [random_order_systematic(p, batch, rng) for _ in range(self.epochs)]
        indices = np.concatenate([d.ids for d in draws])
        inclusion = np.concatenate([d.inclusion for d in draws])
        scale = self.agent_scale / self.epochs * data_scale(inclusion, ctx.size, batch)
        if self.refresh:
            _kept_table(ctx)["data_weights"] = self.refreshed(ctx, raw / raw.sum(), np.unique(indices))
        return LocalSample(indices, scale=scale, block=batch, step_scale=self.agent_scale / self.epochs)

    def refreshed(self, ctx: ClientContext, p: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Eq. 53: the drawn points share their probability mass by their gradient norms at ``params``."""
        assert self.params is not None  # a refreshing plan ("cheap") carries the global model
        return rescale_subset(p, rows, gradient_norms(ctx, self.params, rows))


def _kept_table(ctx: ClientContext) -> dict[str, np.ndarray]:
    """What ISFedAvg keeps in client k's own ``ctx.state`` (under :data:`STATE_KEY`), made empty on first use."""
    table = ctx.state.setdefault(STATE_KEY, {})
    if not isinstance(table, dict):
        raise TypeError(f"client {ctx.client_id}'s state keeps a {type(table).__name__} under {STATE_KEY!r}, not a dict")
    return table


def stored_data_weights(ctx: ClientContext) -> np.ndarray:
    """The Eq. 53 data weights client k keeps in its own ``ctx.state`` (uniform 1/N_k before its first round)."""
    table = ctx.state.get(STATE_KEY)
    weights = table.get("data_weights") if isinstance(table, dict) else None
    if weights is None:
        return np.full(ctx.size, 1.0 / ctx.size)
    if len(weights) != ctx.size:
        raise ValueError(f"ISFedAvg: {len(weights)} stored data weights for a client with {ctx.size} samples")
    return np.asarray(weights, dtype=np.float64)


# --- the samplers (run on the server) -------------------------------------------------------------


def _per_agent(value: int | Sequence[int]) -> int | tuple[int, ...]:
    """One value for every agent (an int), or one per agent (a tuple of ints); already checked (:data:`EPOCHS`)."""
    values = np.asarray(value)
    return int(values) if values.ndim == 0 else tuple(int(v) for v in values)


def _for_agent(value: int | tuple[int, ...], k: int, name: str) -> int:
    if isinstance(value, int):
        return value
    if k >= len(value):
        raise ValueError(f"ISFedAvg: {name} has {len(value)} entries, but agent {k} was chosen")
    return value[k]


def _agent_values(value: int | tuple[int, ...], ids: np.ndarray, name: str) -> np.ndarray:
    return np.array([_for_agent(value, int(k), name) for k in ids], dtype=np.float64)


def _probe(ctx: "RoundContext", ids: np.ndarray, params: Params, rule: DataRule, needs_one: bool) -> tuple[np.ndarray, np.ndarray]:
    """(1/N_k^2) sum_n ||grad Q_k||^2 / p_n^(k) (under the agents' data ``rule``) and ||grad P_k(params)||
    reported by the agents ``ids``, NaN for an agent whose probe the failure model lost (named in the round record,
    :func:`~fedsample.sampling.adaptive.arrived_or_failed`; every probe lost fails the round where the sampler
    ``needs_one``)."""
    request = ProbeRequest(params=params, per_sample=True, data_weights=rule, partial=True)
    reports = probe_reports(ctx.federation.run(ids, request, ctx.round))
    adaptive.arrived_or_failed(ctx, reports, adaptive.NOT_DRAWN, needs_one)  # arrived: the ProbeReports
    moments = [r.extra["weighted_second_moment"] if isinstance(r, ProbeReport) else np.nan for r in reports]
    return np.array(moments, dtype=np.float64), np.array([r.grad_norm if isinstance(r, ProbeReport) else np.nan for r in reports])


def over_probed(scores: np.ndarray, floor: float) -> tuple[np.ndarray, float]:
    """p_k over the agents whose score is known (:func:`normalized_probabilities` over them; 0 for an agent whose
    probe was lost, NaN: it cannot be drawn) and the share r of agents known
    (:func:`~fedsample.sampling.adaptive.probe_rate`), by which their pi_k are multiplied: unbiased for the plain
    mean over every agent given that share, as the probes are lost at random (docs/reliability.md)."""
    known = ~np.isnan(scores)
    p = np.zeros(len(scores))
    p[known] = normalized_probabilities(scores[known], floor)
    return p, adaptive.probe_rate(np.ones(len(scores)), known)


@dataclass(frozen=True)
@checks.constrained(
    L=checks.Param(checks.COUNT, label="L (agents per round)"), alpha=checks.Param(*ALPHA.constraints, None, label=ALPHA.label), floor=FLOOR,
    epochs=EPOCHS, batch_size=BATCHES,
)
class ImportanceAgents:
    """ISFedAvg's agent sampler: L of K agents without replacement by systematic sampling on pi_k = L p_k,
    p_k from Lemma 7 under the chosen ``update`` rule (see the module notes), with each agent's
    sigma^2_{s,k} (:func:`data_variability`) from its ``epochs`` E_k and ``batch_size`` B_k (one value or one
    per agent, as :class:`ImportanceData`). ``alpha`` is alpha_k of Lemma 7 (one value or one per agent;
    None: :func:`paper_alpha`, 3 + 6 / (E_k B_k)).

    Under faults (docs/reliability.md): an agent whose probe was lost is not drawn, and the others' pi_k are times
    the share of agents whose probe arrived (:func:`over_probed`): the plain mean over every agent stays the
    target. Under ``update="cheap"`` a participant whose probe was lost keeps its p_k."""

    L: int = 6
    alpha: float | tuple[float, ...] | None = None
    update: Update = "approx"
    reference: Params | None = field(default=None, compare=False, repr=False)
    floor: float = DEFAULT_FLOOR
    epochs: int | tuple[int, ...] = 1
    batch_size: int | tuple[int, ...] = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "epochs", _per_agent(self.epochs))
        object.__setattr__(self, "batch_size", _per_agent(self.batch_size))
        _check_reference(self.update, self.reference)

    @property
    def capabilities(self) -> ClientSamplerCapabilities:
        """Exact pi; the server learns the probed agents' loss, gradient norm and gradient variances (sigma^2_k and
        Eq. 23's sum), nothing with ``update="uniform"``; L at most the agents."""
        learns = () if self.update == "uniform" else (Learns.LOSSES, Learns.GRADIENT_NORMS, Learns.LOCAL_VARIANCES)
        return ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=learns,
                                         limits=(Limit("clients_per_round (L)", self.L, "clients"),))

    def expected_cohort(self, num_clients: int, sizes: np.ndarray | None = None) -> float:
        """L agents (at most N): systematic sampling draws exactly L."""
        return float(min(self.L, num_clients))

    def scores(self, ctx: "RoundContext", ids: np.ndarray, params: Params, needs_one: bool = True) -> np.ndarray:
        """sqrt(sigma^2_{s,k} + alpha_k ||grad P_k(params)||^2) of the agents ``ids`` (Lemma 7 / Eqs. 50, 52),
        each agent using the data probabilities its own plan draws with (Lemma 6 / Eq. 49, or Eq. 53's); NaN for
        an agent whose probe was lost."""
        rule = DataRule("held" if self.update == "cheap" else "gradient", self.floor)
        second_moment, grad_norm = _probe(ctx, ids, params, rule, needs_one)
        got = ~np.isnan(grad_norm)
        scores = np.full(len(ids), np.nan)
        if got.any():
            scores[got] = self.agent_scores(ids[got], second_moment[got], grad_norm[got])
        return scores

    def agent_scores(self, ids: np.ndarray, second_moment: np.ndarray, grad_norm: np.ndarray) -> np.ndarray:
        """Lemma 7's scores of the agents ``ids`` from what they reported, with their E_k, B_k and alpha_k."""
        epochs, batch = _agent_values(self.epochs, ids, "epochs"), _agent_values(self.batch_size, ids, "batch_size")
        alpha: float | np.ndarray
        if self.alpha is None:
            alpha = paper_alpha(epochs, batch)
        else:
            given = np.asarray(self.alpha, dtype=np.float64)
            alpha = float(given) if given.ndim == 0 else given[ids]
        return agent_scores(data_variability(second_moment, epochs, batch), grad_norm, alpha)

    def probabilities(self, ctx: "RoundContext") -> tuple[np.ndarray, float]:
        """The normalized inclusion probabilities p_k (sum 1) used to choose this round's agents, and the share of
        agents whose probe arrived (:func:`over_probed`; 1 without lost probes). Under ``update="exact"`` an agent
        whose probe was lost is probed again the next round."""
        K, state = ctx.num_clients, _state(ctx)
        everyone = np.arange(K)
        if self.update == "uniform":
            return np.full(K, 1.0 / K), 1.0
        if self.update == "exact":
            assert self.reference is not None  # checked at construction for update="exact"
            scores = state.setdefault("agent_scores_exact", np.full(K, np.nan))
            lost = np.flatnonzero(np.isnan(scores))
            if lost.size:
                scores[lost] = self.scores(ctx, lost, self.reference, needs_one=lost.size == K)
            return over_probed(scores, self.floor)
        if self.update == "approx":
            return over_probed(self.scores(ctx, everyone, ctx.params), self.floor)
        return normalized_probabilities(state.setdefault("agent_p", np.full(K, 1.0 / K)), self.floor), 1.0

    def select(self, ctx: "RoundContext") -> Cohort:
        p, rate = self.probabilities(ctx)
        L = int(clamped(ctx.log, "clients_per_round", self.L, 0, int(np.count_nonzero(p))))
        sample = random_order_systematic(p, L, ctx.rng("clients"))
        if self.update == "cheap":  # Eq. 52: the participants report at w_{i-1}; used from the next round on
            scores = self.scores(ctx, sample.ids, ctx.params, needs_one=False)
            known = ~np.isnan(scores)  # a participant whose probe was lost keeps its p_k
            if known.any():
                _state(ctx)["agent_p"] = rescale_subset(_state(ctx)["agent_p"], sample.ids[known], scores[known])
        ctx.log["agent_p_max"] = float(p.max())
        return Cohort.from_sample(adaptive.with_probe_rate(sample, rate), ctx.num_clients)


def _check_reference(update: str, reference: Params | None) -> None:
    if update == "exact" and reference is None:
        raise ValueError("ISFedAvg: update='exact' needs reference= (the model the paper evaluates Lemmas 6-7 at, w°)")


@dataclass(frozen=True)
@checks.constrained(epochs=EPOCHS, batch_size=BATCHES, floor=FLOOR)
class ImportanceData:
    """ISFedAvg's data sampler: one :class:`ImportanceBatches` plan per chosen agent, with its E_k and B_k
    (``epochs``, ``batch_size``: one value, or one per agent id) and, for ``scaling="step"``, the agent
    factor 1 / (K p_k) = L / (K pi_k) from the cohort's inclusion probabilities (fixed-size cohorts)."""

    epochs: int | tuple[int, ...] = 1
    batch_size: int | tuple[int, ...] = 1
    update: Update = "approx"
    reference: Params | None = field(default=None, compare=False, repr=False)
    scaling: Scaling = "step"
    floor: float = DEFAULT_FLOOR

    def __post_init__(self) -> None:
        object.__setattr__(self, "epochs", _per_agent(self.epochs))
        object.__setattr__(self, "batch_size", _per_agent(self.batch_size))
        _check_reference(self.update, self.reference)

    @property
    def capabilities(self) -> DataSamplerCapabilities:
        """``step``: the agent factor L / (K pi_k) divides by the cohort's inclusion probabilities; where the agent
        factor 1/(K p_k) goes, which the aggregator must agree with."""
        return DataSamplerCapabilities(weighs_by_inclusion=self.scaling == "step",
                                       shared_settings={"scaling (where ISFedAvg's 1/(K p_k) is applied)": self.scaling})

    def agent_factors(self, cohort: Cohort) -> np.ndarray:
        if self.scaling == "aggregate":
            return np.ones(len(cohort))
        return len(cohort) / (cohort.population * cohort.inclusion)

    def plan(self, ctx: "RoundContext", cohort: Cohort) -> PerClient[ImportanceBatches]:
        """One plan per agent (its E_k, B_k and 1/(K p_k) factor)."""
        params = {"exact": self.reference, "approx": ctx.params, "cheap": ctx.params, "uniform": None}[self.update]
        return PerClient(tuple(
            ImportanceBatches(
                epochs=_for_agent(self.epochs, int(k), "epochs"), batch_size=_for_agent(self.batch_size, int(k), "batch_size"),
                agent_scale=float(factor), params=params, floor=self.floor, refresh=self.update == "cheap",
            )
            for k, factor in zip(cohort.ids, self.agent_factors(cohort))
        ))
