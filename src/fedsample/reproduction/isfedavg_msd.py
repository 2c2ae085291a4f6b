"""ISFedAvg's regression study (Rizk, Vlaski & Sayed 2022, §V-A, Fig. 1): MSD in dB against iterations for
uniform sampling and the three importance-sampling variants, and the IS gain in dB at steady state.

The paper's generator (:func:`fedsample.data.synthetic.isfedavg_regression`: K = 300 agents, N_k = 100
points, 2-D, rho = 0.001, closed-form w° of Eq. 57), L = 6 agents per round, mu = 0.01, B_k uniform on
[1, 10] and E_k on [1, 5] (:func:`fedsample.sampling.importance.paper_heterogeneity`). For a linear model
every per-sample gradient has a closed form, grad Q_k(w; x_n) = 2 u_n (u_n w - d_n) + 2 rho w (Eq. 55's
Q_k, rho inside as the paper writes it), so Algorithm 1 runs here on numpy arrays, batched over independent
repetitions (the paper averages 100), instead of through the federation (whose per-agent probes make the
"approx" rule probe all 300 agents every round). The formulas are the library's:
:func:`~fedsample.sampling.importance.data_variability`, :func:`~fedsample.sampling.importance.paper_alpha`,
:func:`~fedsample.sampling.importance.agent_scores`, the inclusion probabilities capped at 1 as
:func:`fedsample.sampling.design.inclusion_probabilities` caps them, and Madow's systematic sampling on a
random order as :func:`~fedsample.sampling.importance.random_order_systematic` draws it. The paper's
baseline draws uniform minibatches *with* replacement (§V-A); so does ``uniform`` here. No floor (the
paper's formulas).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from fedsample.budget import ArmBudget, arm_budget
from fedsample.data.synthetic import isfedavg_regression
from fedsample.reproduction.spec import StudyMeasures
from fedsample.sampling.importance import agent_scores, data_variability, paper_alpha, paper_heterogeneity

__all__ = [
    "BOUND", "Problem", "VARIANTS", "bound_gain_db", "capped_inclusion", "importance_probabilities", "local_training",
    "msd_study", "normalize_rows", "paper_problem", "rows_trained", "run_study", "run_variant", "sample_gradients", "systematic_rows",
]

VARIANTS = {
    "uniform": "Uniform sampling (FedAvg)",
    "exact": "IS, optimal probabilities (Lemmas 6-7)",
    "approx": "IS, approx (49)-(50)",
    "cheap": "IS, approx (52)-(53)",
}
"""The sampling variants of the MSD study, with their labels in the tables."""

#: The label of the row holding Eq. 21's bound on the gain.
BOUND = "Eq. 21 bound, uniform over optimal"


@dataclass(frozen=True)
class Problem:
    """The agents' data u (K, N, d), d (K, N), rho, w°, and per-agent epochs E_k and batch sizes B_k."""

    u: np.ndarray
    d: np.ndarray
    rho: float
    w_opt: np.ndarray
    epochs: np.ndarray
    batch: np.ndarray

    @property
    def K(self) -> int:
        return int(self.u.shape[0])

    @property
    def N(self) -> int:
        return int(self.u.shape[1])


def paper_problem(seed: int, num_agents: int = 300, points: int = 100, rho: float = 0.001) -> Problem:
    """§V-A's data (equal N_k) and heterogeneity (E_k, B_k), both drawn from ``seed``."""
    ds = isfedavg_regression(num_agents=num_agents, points_per_agent=points, rho=rho, test_points_per_agent=0, seed=seed)
    order = np.argsort(np.asarray(ds.meta["client_ids"]), kind="stable")
    u = ds.x_train[order].astype(np.float64).reshape(num_agents, points, -1)
    d = ds.y_train[order].astype(np.float64).reshape(num_agents, points)
    epochs, batch = paper_heterogeneity(num_agents, np.random.default_rng([seed, 0x15]))
    batch = np.minimum(np.array(batch), points)  # B_k <= N_k (the paper's N_k = 100 >= 10 never clips)
    return Problem(u, d, rho, np.asarray(ds.meta["w_opt"], dtype=np.float64), np.array(epochs), batch)


def sample_gradients(problem: Problem, w: np.ndarray, agents: np.ndarray | None = None) -> np.ndarray:
    """grad Q_k(w; x_{k,n}) = 2 u (u w - d) + 2 rho w for every point of ``agents`` (all: None); ``w`` is
    (R, d) and the result (R, A, N, d)."""
    if agents is None:
        u, residual = problem.u, np.moveaxis(problem.u @ w.T, -1, 0) - problem.d  # (K, N, d), (R, K, N)
    else:
        u = problem.u[agents]  # (R, A, N, d)
        residual = np.matmul(u, w[:, None, :, None])[..., 0] - problem.d[agents]
    gradients: np.ndarray = 2.0 * residual[..., None] * u + 2.0 * problem.rho * w[:, None, None, :]
    return gradients


def capped_inclusion(p: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Rows of inclusion probabilities pi = n p with every pi <= 1 (the capped units taken with certainty, the
    others rescaled to sum to n), as :func:`fedsample.sampling.design.inclusion_probabilities`, batched."""
    n = np.asarray(n, dtype=np.float64)[:, None]
    capped = np.zeros(p.shape, dtype=bool)
    pi: np.ndarray = n * p
    for _ in range(int(n.max()) + 1):
        capped |= pi >= 1.0
        free = np.where(capped, 0.0, p)
        mass = free.sum(axis=1, keepdims=True)
        room = n - capped.sum(axis=1, keepdims=True)
        pi = np.where(capped, 1.0, free * np.divide(room, mass, out=np.zeros_like(mass), where=mass > 0))
        if not np.any(pi > 1.0 + 1e-12):
            break
    return pi


def systematic_rows(pi: np.ndarray, n: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Madow's systematic sample of each row (n_r units with inclusion probabilities pi_r, summing to n_r) on a
    random order of the units: (ids (M, max n), valid (M, max n)); ids past n_r are padding."""
    M, N = pi.shape
    order = np.argsort(rng.random((M, N)), axis=1)
    cum = np.cumsum(np.take_along_axis(pi, order, axis=1), axis=1)
    width = int(np.max(n))
    points = np.asarray(rng.random(M))[:, None] + np.arange(width)[None, :]
    pos = np.minimum((cum[:, :, None] <= points[:, None, :]).sum(axis=1), N - 1)
    return np.take_along_axis(order, pos, axis=1), np.arange(width)[None, :] < np.asarray(n)[:, None]


def normalize_rows(s: np.ndarray) -> np.ndarray:
    """``s`` divided by its sum along the last axis: scores to probabilities."""
    probabilities: np.ndarray = s / s.sum(axis=-1, keepdims=True)
    return probabilities


def importance_probabilities(problem: Problem, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lemmas 6-7 at ``w`` (R, d) for every agent and repetition (Eqs. 49-50 at w = w_{i-1}): the data
    probabilities p_n^(k) ∝ ||grad Q_k(w; x_n)|| (R, K, N) and the agent probabilities p_k ∝ sqrt(sigma^2_{s,k} +
    alpha_k ||grad P_k(w)||^2) (R, K), sigma^2_{s,k} of Eq. 23 under those data probabilities."""
    uw = np.moveaxis(problem.u @ w.T, -1, 0)  # (R, K, N)
    residual, rho = uw - problem.d, problem.rho
    # ||2 r u + 2 rho w||^2 without forming the (R, K, N, d) gradients
    norms2 = 4 * residual**2 * np.sum(problem.u**2, axis=-1) + 8 * rho * residual * uw + 4 * rho**2 * np.sum(w**2, axis=-1)[:, None, None]
    norms = np.sqrt(np.maximum(norms2, 0.0))
    second = np.sum(norms, axis=-1) ** 2 / problem.N**2  # sum_n g_n^2 / p_n with p_n = g_n / sum g
    mean_gradient = 2 * np.einsum("rkn,knd->rkd", residual, problem.u, optimize=True) / problem.N + 2 * rho * w[:, None, :]
    grad_norm = np.linalg.norm(mean_gradient, axis=-1)
    E, B = problem.epochs[None, :], problem.batch[None, :]
    scores = agent_scores(data_variability(second, E, B).ravel(), grad_norm.ravel(), np.broadcast_to(paper_alpha(E, B), second.shape).ravel())
    return normalize_rows(norms), normalize_rows(scores.reshape(second.shape))


@dataclass
class State:
    """Per-repetition state: the model (R, d) and, for the cheap rule, the agent (R, K) and data (R, K, N) weights."""

    w: np.ndarray
    agent_p: np.ndarray
    data_p: np.ndarray


def round_probabilities(problem: Problem, variant: str, state: State, exact: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """This round's agent probabilities (R, K) and data probabilities (R, K, N) under ``variant``."""
    R, K, N = state.w.shape[0], problem.K, problem.N
    if variant == "uniform":
        return np.full((R, K), 1.0 / K), np.full((R, K, N), 1.0 / N)
    if variant == "exact":
        return np.broadcast_to(exact[0], (R, K)), np.broadcast_to(exact[1], (R, K, N))
    if variant == "approx":
        data_p, agent_p = importance_probabilities(problem, state.w)
        return agent_p, data_p
    return state.agent_p, state.data_p


def local_training(problem: Problem, w: np.ndarray, agents: np.ndarray, agent_pi: np.ndarray, data_p: np.ndarray,
                   mu: float, uniform_with_replacement: bool, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 8 for the chosen agents (R, L): E_k epochs of B_k points each, step mu / (K p_k E_k B_k) *
    sum_b grad Q / (N_k p_b); returns the local models (R, L, d) and the drawn points (R, L, E_max, B_max)
    (-1: none)."""
    R, L = agents.shape
    E, B = problem.epochs[agents], problem.batch[agents]
    wk = np.repeat(w[:, None, :], L, axis=1)
    agent_factor = L / (problem.K * agent_pi)  # 1 / (K p_k), p_k = pi_k / L
    drawn = np.full((R, L, int(E.max()), int(B.max())), -1)
    p = data_p.reshape(R * L, -1)
    for e in range(int(E.max())):
        active = e < E  # (R, L)
        if uniform_with_replacement:
            ids = rng.integers(0, problem.N, size=(R * L, int(B.max())))  # uniform p_b = 1/N_k
            valid = np.arange(ids.shape[1])[None, :] < B.reshape(-1, 1)
            pi_b = B.reshape(-1, 1) * np.take_along_axis(p, ids, axis=1)  # B_k p_b: the estimate's normalization
        else:
            pi = capped_inclusion(p, B.ravel())
            ids, valid = systematic_rows(pi, B.ravel(), rng)
            pi_b = np.take_along_axis(pi, ids, axis=1)
        ids, valid, pi_b = ids.reshape(R, L, -1), valid.reshape(R, L, -1), pi_b.reshape(R, L, -1)
        u = np.take_along_axis(problem.u[agents], ids[..., None], axis=2)  # (R, L, B, d)
        dd = np.take_along_axis(problem.d[agents], ids, axis=2)
        residual = np.einsum("rlbd,rld->rlb", u, wk) - dd
        g = 2.0 * residual[..., None] * u + 2.0 * problem.rho * wk[:, :, None, :]
        estimate = np.sum(np.where(valid[..., None], g / (problem.N * pi_b[..., None]), 0.0), axis=2)  # (1/B) sum g / (N p_b)
        step = mu * (agent_factor / E)[..., None] * estimate
        wk = np.where(active[..., None], wk - step, wk)
        drawn[:, :, e, : ids.shape[2]] = np.where(valid & active[..., None], ids, -1)
    return wk, drawn


def refresh_cheap(problem: Problem, state: State, w_prev: np.ndarray, agents: np.ndarray, drawn: np.ndarray) -> None:
    """Eqs. 52-53 after a round: the participants share their agent mass by their scores at w_{i-1}, and the
    points each drew share their data mass by their gradient norms at w_{i-1}."""
    R = agents.shape[0]
    rows = np.arange(R)[:, None]
    g = sample_gradients(problem, w_prev, agents)  # (R, L, N, d)
    norms = np.linalg.norm(g, axis=-1)
    data_p = state.data_p[rows, agents]  # (R, L, N), this round's held weights
    E, B = problem.epochs[agents], problem.batch[agents]
    second = np.sum(norms**2 / data_p, axis=-1) / problem.N**2
    scores = agent_scores(data_variability(second, E, B).ravel(), np.linalg.norm(g.mean(axis=2), axis=-1).ravel(), paper_alpha(E, B).ravel()).reshape(E.shape)
    old = state.agent_p[rows, agents]
    state.agent_p[rows, agents] = old.sum(axis=1, keepdims=True) * scores / scores.sum(axis=1, keepdims=True)
    hit = np.zeros(data_p.shape, dtype=bool)
    r_idx, l_idx, _, _ = np.nonzero(drawn >= 0)
    hit[r_idx, l_idx, drawn[drawn >= 0]] = True
    mass = np.sum(np.where(hit, data_p, 0.0), axis=-1, keepdims=True)
    share = np.sum(np.where(hit, norms, 0.0), axis=-1, keepdims=True)
    state.data_p[rows, agents] = np.where(hit, mass * norms / np.where(share > 0, share, 1.0), data_p)


def rows_trained(drawn: np.ndarray) -> np.ndarray:
    """The rows each repetition's agents trained this round, with repeats (sum over the chosen agents of
    E_k B_k), from :func:`local_training`'s drawn points (R, L, E_max, B_max; -1: none): (R,)."""
    counts: np.ndarray = np.sum(drawn >= 0, axis=(1, 2, 3))
    return counts


def run_variant(problem: Problem, variant: str, rounds: int, reps: int, L: int, mu: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 for ``reps`` independent repetitions, from w_0 = 0; returns the MSD ||w_i - w°||^2 and the
    rows trained (:func:`rows_trained`), each per round and repetition (rounds, reps)."""
    rng = np.random.default_rng([seed, list(VARIANTS).index(variant)])
    K, N = problem.K, problem.N
    state = State(np.zeros((reps, problem.w_opt.size)), np.full((reps, K), 1.0 / K), np.full((reps, K, N), 1.0 / N))
    exact = (np.zeros(0), np.zeros(0))
    if variant == "exact":
        data_opt, agent_opt = importance_probabilities(problem, problem.w_opt[None, :])
        exact = (agent_opt[0], data_opt[0])
    msd, samples = np.empty((rounds, reps)), np.empty((rounds, reps))
    rows = np.arange(reps)[:, None]
    for i in range(rounds):
        agent_p, data_p = round_probabilities(problem, variant, state, exact)
        pi = capped_inclusion(agent_p, np.full(reps, L))
        agents, _ = systematic_rows(pi, np.full(reps, L), rng)
        local, drawn = local_training(problem, state.w, agents, pi[rows, agents], data_p[rows, agents], mu, variant == "uniform", rng)
        if variant == "cheap":
            refresh_cheap(problem, state, state.w, agents, drawn)
        state.w = local.mean(axis=1)  # Eq. 9
        msd[i] = np.sum((state.w - problem.w_opt) ** 2, axis=1)
        samples[i] = rows_trained(drawn)
    return msd, samples


def bound_gain_db(problem: Problem) -> float:
    """How much importance sampling can shrink the gradient-noise bound sigma_s^2 of Eq. 21 on this problem,
    in dB: sum_k c_k / p_k at uniform p_k = 1/K and p_n = 1/N_k over its minimum (sum_k sqrt(c_k))^2 at Lemma 7's
    p_k with Lemma 6's p_n, c_k = sigma^2_{s,k} + alpha_k ||grad P_k(w°)||^2. The MSD at steady state is
    O(mu) sigma_s^2 (Theorem 1), so this is the gain the optimal probabilities can be expected to reach."""
    g = sample_gradients(problem, problem.w_opt[None, :])[0]  # (K, N, d)
    norms, E, B = np.linalg.norm(g, axis=-1), problem.epochs, problem.batch
    model = paper_alpha(E, B) * np.sum(g.mean(axis=1) ** 2, axis=-1)
    uniform = problem.K * np.sum(data_variability(np.mean(norms**2, axis=1), E, B) + model)
    optimal = np.sum(np.sqrt(data_variability(np.mean(norms, axis=1) ** 2, E, B) + model)) ** 2
    return float(10.0 * np.log10(uniform / optimal))


def to_db(msd: np.ndarray) -> np.ndarray:
    decibels: np.ndarray = 10.0 * np.log10(msd)
    return decibels


def round_records(samples: np.ndarray) -> list[dict[str, float]]:
    """One seed's rows trained (rounds, reps) as the round records :func:`fedsample.budget.arm_budget` reads, each
    repetition's iteration one round: ``{"realised_samples": rows}``."""
    return [{"realised_samples": float(x)} for x in samples.T.ravel()]


def msd_study(seeds: Sequence[int], rounds: int = 600, steady: int = 300, reps: int = 10, L: int = 6, mu: float = 0.01,
              num_agents: int = 300, points: int = 100, out: Path | None = None) -> dict[str, dict[str, list[float] | ArmBudget | None]]:
    """Per seed (a fresh problem and ``reps`` repetitions): the steady-state MSD in dB (the mean MSD over the
    last ``steady`` rounds and the repetitions) per variant, each variant's gain over uniform sampling
    in dB, and under ``BOUND`` the gain the variance bound allows (:func:`bound_gain_db`); each variant's realised
    budget under ``"budget"`` (:func:`fedsample.budget.arm_budget` of its rows trained per round, :func:`rows_trained`).
    With ``out``, the mean MSD curve per variant (dB per round, averaged over repetitions and seeds)
    goes to ``out/isfedavg-regression.json``."""
    results: dict[str, dict[str, list[float]]] = {label: {"msd_db": [], "gain_db": []} for label in VARIANTS.values()}
    results[BOUND] = {"gain_db": []}
    curves: dict[str, list[np.ndarray]] = {label: [] for label in VARIANTS.values()}
    histories: dict[str, list[list[dict[str, float]]]] = {label: [] for label in VARIANTS.values()}
    for seed in seeds:
        problem = paper_problem(int(seed), num_agents, points)
        steady_db = {}
        for variant, label in VARIANTS.items():
            msd, samples = run_variant(problem, variant, rounds, reps, L, mu, int(seed))
            steady_db[label] = float(to_db(msd[-steady:].mean()))
            curves[label].append(msd.mean(axis=1))
            histories[label].append(round_records(samples))
        results[BOUND]["gain_db"].append(bound_gain_db(problem))
        for label, value in steady_db.items():
            results[label]["msd_db"].append(value)
            results[label]["gain_db"].append(steady_db[VARIANTS["uniform"]] - value)
    measured: dict[str, dict[str, list[float] | ArmBudget | None]] = {label: {**values} for label, values in results.items()}
    for label, seed_histories in histories.items():
        measured[label]["budget"] = arm_budget(seed_histories)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        curve = {label: to_db(np.mean(c, axis=0)).round(3).tolist() for label, c in curves.items()}
        (out / "isfedavg-regression.json").write_text(json.dumps({"rounds": rounds, "steady": steady, "reps_per_seed": reps,
                                                                   "seeds": list(map(int, seeds)), "msd_db": curve, "results": measured}))
    return measured


def run_study(device: str, seeds: Sequence[int], out: Path) -> Mapping[str, StudyMeasures]:
    """The :class:`fedsample.reproduction.spec.Study` entry point (numpy on the CPU whatever ``device``)."""
    return msd_study(seeds, out=Path(out))
