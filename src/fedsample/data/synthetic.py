"""Synthetic datasets exactly as the papers generate them, with their natural clients in ``meta``.

* :func:`isfedavg_regression` — ISFedAvg's linear regression (Rizk et al. 2022, §V-A): K agents with
  N_k points each, 2-D regressors u ~ N(0, R_u,k), d = u·w* + v, the closed-form optimum w° of the
  ρ-regularized empirical risk, and the MSD metric in dB (:func:`msd_db`).
* :func:`fedprox_synthetic` — FedProx's Synthetic(α, β) (Li et al. 2020, §5.1).

Both put a client id per training row in ``meta["client_ids"]`` (and per test row in
``meta["client_ids_test"]``) so that ``Natural()`` partitions them along their generating agents.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from fedsample.data.types import Dataset, Meta

__all__ = ["fedprox_synthetic", "isfedavg_regression", "msd_db"]


def isfedavg_regression(
    num_agents: int = 300,
    points_per_agent: int | Sequence[int] = 100,
    dim: int = 2,
    rho: float = 0.001,
    regressor_var: tuple[float, float] = (0.5, 2.0),
    noise_var: tuple[float, float] = (0.01, 0.1),
    test_points_per_agent: int = 20,
    seed: int = 0,
) -> Dataset:
    """ISFedAvg §V-A: agent k draws N_k regressors u_{k,n} ~ N(0, R_u,k) and targets
    d_k(n) = u_{k,n}·w* + v_k(n) with white noise v_k(n) ~ N(0, σ²_v,k); w* ~ N(0, I) is drawn once.

    The paper does not state R_u,k or σ²_v,k; here R_u,k = diag(r_k) with r_k's entries uniform on
    ``regressor_var`` and σ²_v,k uniform on ``noise_var`` (one draw per agent), which makes the agents
    heterogeneous as importance sampling assumes. The local risk is
    J_k(w) = (1/N_k) Σ_n |d_k(n) − u_{k,n} w|² + ρ‖w‖², the global risk their average over agents, and its
    minimizer (eqs. 57–59) is w° = (R̂_u + ρI)⁻¹ r̂_du with R̂_u = (1/K) Σ_k (1/N_k) Σ_n u_{k,n}ᵀu_{k,n}
    and r̂_du = (1/K) Σ_k (1/N_k) Σ_n d_k(n) u_{k,n}ᵀ, computed on the training points and stored in
    ``meta["w_opt"]`` (``meta["w_star"]`` holds w*). Test points are fresh draws from the same agents.
    Non-finite parameters are refused; parameters so large that the data overflow float32 give data that the
    dataset's own check refuses, naming the rows.
    """
    if num_agents < 1:
        raise ValueError(f"isfedavg_regression: num_agents must be >= 1, got {num_agents}")
    sizes = np.broadcast_to(np.asarray(points_per_agent, dtype=np.int64), (num_agents,)).copy()
    if np.any(sizes < 1):
        raise ValueError("isfedavg_regression: every agent needs points_per_agent >= 1")
    _refuse_non_finite("isfedavg_regression", rho=rho, regressor_var=regressor_var, noise_var=noise_var)
    if rho < 0 or dim < 1 or test_points_per_agent < 0:
        raise ValueError(f"isfedavg_regression: need rho >= 0, dim >= 1, test_points_per_agent >= 0 (got {rho}, {dim}, {test_points_per_agent})")
    for name, (lo, hi) in (("regressor_var", regressor_var), ("noise_var", noise_var)):
        if not 0 <= lo <= hi:
            raise ValueError(f"isfedavg_regression: {name} must be a range 0 <= low <= high, got {(lo, hi)}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x15FEDA]))
    w_star = rng.standard_normal(dim)
    r_var = rng.uniform(*regressor_var, size=(num_agents, dim))
    v_var = rng.uniform(*noise_var, size=num_agents)

    def draw(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.repeat(np.arange(num_agents), counts)
        u = rng.standard_normal((len(ids), dim)) * np.sqrt(r_var[ids])
        d = u @ w_star + rng.standard_normal(len(ids)) * np.sqrt(v_var[ids])
        return u, d, ids

    with np.errstate(over="ignore", invalid="ignore"):  # overflowing data are named by the Dataset's check
        u, d, ids = draw(sizes)
        u_test, d_test, ids_test = draw(np.full(num_agents, test_points_per_agent, dtype=np.int64))
        weight = 1.0 / (num_agents * sizes[ids])  # (1/K)(1/N_k) for each row
        r_u = (u * weight[:, None]).T @ u
        r_du = (u * weight[:, None]).T @ d
        w_opt = np.linalg.solve(r_u + rho * np.eye(dim), r_du) if np.all(np.isfinite(r_u)) else np.full(dim, np.nan)
        u, d, u_test, d_test = (a.astype(np.float32) for a in (u, d, u_test, d_test))
    meta = {
        "client_ids": ids,
        "client_ids_test": ids_test,
        "w_star": w_star,
        "w_opt": w_opt,
        "rho": rho,
        "R_u_hat": r_u,
        "r_du_hat": r_du,
        "regressor_var": r_var,
        "noise_var": v_var,
        "source": "ISFedAvg (Rizk et al. 2022) §V-A",
    }
    return Dataset("isfedavg-regression", u, d, u_test, d_test, 0, task="regression", meta=meta)


def msd_db(w: np.ndarray, w_opt: np.ndarray) -> np.ndarray:
    """Mean-square deviation in dB, 10·log10 ‖w − w°‖² (ISFedAvg eq. 56); ``w`` may carry leading batch axes."""
    dev = np.sum((np.asarray(w, dtype=np.float64) - np.asarray(w_opt, dtype=np.float64)) ** 2, axis=-1)
    with np.errstate(divide="ignore"):
        decibels: np.ndarray = 10.0 * np.log10(dev)  # a float64 scalar for a single w
    return decibels


def fedprox_synthetic(
    alpha: float = 1.0,
    beta: float = 1.0,
    num_devices: int = 30,
    dim: int = 60,
    num_classes: int = 10,
    iid: bool = False,
    train_fraction: float = 0.9,
    seed: int = 0,
) -> Dataset:
    """FedProx's Synthetic(α, β): device k has y = argmax softmax(W_k x + b_k) with x ∈ R^60,
    W_k ∈ R^{10×60}, b_k ∈ R^10; W_k, b_k ~ N(u_k, 1) with u_k ~ N(0, α); x_k ~ N(v_k, Σ) with Σ
    diagonal, Σ_jj = j^{-1.2}, and v_k's entries ~ N(B_k, 1) with B_k ~ N(0, β). α controls how much local
    models differ, β how much local data differ. As in FedProx's generator, α and β are used as
    standard deviations of the normal draws and device sizes are ⌊LogNormal(4, 2)⌋ + 50 (a power law).
    ``iid=True`` gives Synthetic-IID: one W, b ~ N(0, 1) for all devices and v_k = 0.
    Each device's first ⌊train_fraction·n_k⌋ samples are training rows, the rest test rows.
    Non-finite α or β are refused; values so large that x overflows float32 give data that the dataset's
    own check refuses, naming the rows.
    """
    _refuse_non_finite("fedprox_synthetic", alpha=alpha, beta=beta, train_fraction=train_fraction)
    if alpha < 0 or beta < 0:
        raise ValueError(f"fedprox_synthetic: alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
    if num_devices < 1 or dim < 1 or num_classes < 2:
        raise ValueError(f"fedprox_synthetic: need num_devices >= 1, dim >= 1, num_classes >= 2 (got {num_devices}, {dim}, {num_classes})")
    if not 0 < train_fraction < 1:
        raise ValueError(f"fedprox_synthetic: train_fraction must be in (0, 1), got {train_fraction}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xFED905]))
    sizes = rng.lognormal(4, 2, num_devices).astype(np.int64) + 50
    cov_diag = np.arange(1, dim + 1, dtype=np.float64) ** -1.2
    u = rng.normal(0, alpha, num_devices)
    b_mean = rng.normal(0, beta, num_devices)
    w_global = rng.normal(0, 1, (num_classes, dim))
    b_global = rng.normal(0, 1, num_classes)
    xs_tr, ys_tr, ids_tr, xs_te, ys_te, ids_te = [], [], [], [], [], []
    with np.errstate(over="ignore", invalid="ignore"):  # overflowing data are named by the Dataset's check
        for k in range(num_devices):
            if iid:
                w, b, v = w_global, b_global, np.zeros(dim)
            else:
                w = rng.normal(u[k], 1, (num_classes, dim))
                b = rng.normal(u[k], 1, num_classes)
                v = rng.normal(b_mean[k], 1, dim)
            x = v + rng.standard_normal((sizes[k], dim)) * np.sqrt(cov_diag)
            y = np.argmax(x @ w.T + b, axis=1)  # softmax is monotone: argmax of the logits
            n_train = int(train_fraction * sizes[k])
            xs_tr.append(x[:n_train])
            ys_tr.append(y[:n_train])
            ids_tr.append(np.full(n_train, k))
            xs_te.append(x[n_train:])
            ys_te.append(y[n_train:])
            ids_te.append(np.full(sizes[k] - n_train, k))
        x_tr, x_te = np.concatenate(xs_tr).astype(np.float32), np.concatenate(xs_te).astype(np.float32)
    name = "fedprox-synthetic-iid" if iid else f"fedprox-synthetic({alpha:g},{beta:g})"
    meta: Meta = {
        "client_ids": np.concatenate(ids_tr).astype(np.int64),
        "client_ids_test": np.concatenate(ids_te).astype(np.int64),
        "device_sizes": sizes,
        "alpha": alpha,
        "beta": beta,
        "iid": iid,
        "source": "FedProx (Li et al. 2020) §5.1",
    }
    return Dataset(name, x_tr, np.concatenate(ys_tr).astype(np.int64), x_te, np.concatenate(ys_te).astype(np.int64),
                   num_classes, meta=meta)


def _refuse_non_finite(generator: str, **params: float | tuple[float, ...]) -> None:
    """One ValueError naming the first parameter that is (or holds) a NaN or an infinity."""
    for name, value in params.items():
        if not all(math.isfinite(v) for v in np.atleast_1d(np.asarray(value, dtype=np.float64))):
            raise ValueError(f"{generator}: {name} must be finite, got {value}")
