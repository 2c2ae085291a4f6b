"""The paper methods and baselines as short recipes over the strategy parts.

Each recipe accepts ``clients=`` and ``data=`` overrides, so any client sampler composes with any data
sampler (FedSampling's data level under uniform client sampling, and so on).
"""

from __future__ import annotations

from typing import Any, Callable

from fedsample.sampling.clients import AllClients, SizeProportional, UniformClients
from fedsample.sampling.data import FedSamplingData, FixedRatio, FullData
from fedsample.sizes import ExactSizes, RandomizedSizes
from fedsample.strategy import Strategy
from fedsample.training.aggregate import Sum, WeightedMean
from fedsample.training.local import LocalSGD, OneGradient
from fedsample.training.server import ServerSGD


def _local_sgd(lr: float, epochs: int | None, steps: int | None, batch_size: int | None) -> LocalSGD:
    return LocalSGD(lr=lr, epochs=None if steps is not None else epochs, steps=steps, batch_size=batch_size)


def fedavg(
    clients_per_round: int = 10, lr: float = 0.05, epochs: int | None = 1, steps: int | None = None,
    batch_size: int | None = 32, server_lr: float = 1.0, clients: Any = None, data: Any = None,
) -> Strategy:
    """FedAvg (McMahan et al. 2017): m clients uniformly, local SGD, average weighted by the cohort's
    exact data sizes (collected from the cohort only)."""
    return Strategy(
        clients=clients or UniformClients(clients_per_round), data=data or FullData(),
        local=_local_sgd(lr, epochs, steps, batch_size), aggregate=WeightedMean("size"),
        server=ServerSGD(server_lr), sizes=ExactSizes(scope="cohort"), name="fedavg",
    )


def weighted_fedavg(
    clients_per_round: int = 10, lr: float = 0.05, epochs: int | None = 1, steps: int | None = None,
    batch_size: int | None = 32, server_lr: float = 1.0, clients: Any = None, data: Any = None,
) -> Strategy:
    """Size-weighted client sampling (Li et al. 2019): m draws with replacement with p_k = n_k/n
    (needs every client's exact size), uniform average over the draws."""
    return Strategy(
        clients=clients or SizeProportional(clients_per_round), data=data or FullData(),
        local=_local_sgd(lr, epochs, steps, batch_size), aggregate=WeightedMean("uniform"),
        server=ServerSGD(server_lr), sizes=ExactSizes(scope="all"), name="weighted_fedavg",
    )


def fedsampling(K: int = 2048, epsilon: float = 3.0, M: int = 300, lr: float = 0.05, clients: Any = None, data: Any = None) -> Strategy:
    """FedSampling (Qi et al. 2023, Algorithm 1): all clients send epsilon-LDP size reports, the server
    estimates N~ (Eq. 2), each sample is kept with probability K/N~, each client sends
    G_c = (1/K) * sum g_s, and Theta <- Theta - eta * sum_c G_c. Paper defaults: K = 2048, eps = 3, M = 300,
    eta = 0.05."""
    return Strategy(
        clients=clients or AllClients(), data=data or FedSamplingData(K), local=OneGradient(K),
        aggregate=Sum(), server=ServerSGD(lr), sizes=RandomizedSizes(epsilon, M, scope="all"), name="fedsampling",
    )


def fedsampling_naive(ratio: float = 0.01, lr: float = 0.05, clients: Any = None, data: Any = None) -> Strategy:
    """The naive fixed-ratio method of Qi et al. 2023, §3.3: each sample kept with probability r, each
    client sends its local mean gradient, the server averages them uniformly (biased on purpose: the
    unbiased weighting would need the sampled counts, which leak sizes)."""
    return Strategy(
        clients=clients or AllClients(), data=data or FixedRatio(ratio), local=OneGradient(None),
        aggregate=WeightedMean("uniform"), server=ServerSGD(lr), name="fedsampling_naive",
    )


def centralized(K: int = 2048, lr: float = 0.05, steps: int = 1) -> Strategy:
    """Centralized minibatch SGD on the union of all clients' data: ``steps`` steps of K samples per
    round (one step of K samples matches FedSampling's sample-gradients per round)."""
    return Strategy(
        clients=AllClients(), data=FullData(), local=LocalSGD(lr=lr, epochs=None, steps=steps, batch_size=K),
        aggregate=WeightedMean("uniform"), server=ServerSGD(1.0), name="centralized", pooled=True,
    )


RECIPES: dict[str, Callable[..., Strategy]] = {
    fn.__name__: fn for fn in (fedavg, weighted_fedavg, fedsampling, fedsampling_naive, centralized)
}


def recipe(name: str, **params: Any) -> Strategy:
    """Build a recipe by name; unknown names and parameters give one clear error."""
    import inspect

    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(sorted(RECIPES))}")
    fn = RECIPES[name]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(fn).parameters.values()):
        return fn(**params)  # a recipe over a base recipe checks the base's parameters itself
    accepted = set(inspect.signature(fn).parameters) - {"clients", "data"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ValueError(f"recipe {name!r} has no parameter {unknown[0]!r}; it takes: {', '.join(sorted(accepted))}")
    return fn(**params)


# --- recipes over a base recipe -------------------------------------------------------------------


def _check_base_params(base: str, params: dict) -> Callable[..., Strategy]:
    """The base recipe ``base``, after checking that it takes every parameter in ``params``."""
    import inspect

    if base not in RECIPES:
        raise ValueError(f"unknown base recipe {base!r}; known: {', '.join(sorted(RECIPES))}")
    fn = RECIPES[base]
    accepted = set(inspect.signature(fn).parameters) - {"clients", "data"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ValueError(f"base recipe {base!r} has no parameter {unknown[0]!r}; it takes: {', '.join(sorted(accepted))}")
    if "data" not in inspect.signature(fn).parameters:
        raise ValueError(f"base recipe {base!r} does not accept a data sampler (data=)")
    return fn


def _set_local_options(strategy: Strategy, options: dict) -> Strategy:
    """``strategy`` with ``options`` (e.g. momentum, prox_mu) set on its local solver."""
    import dataclasses

    missing = [k for k in options if not hasattr(strategy.local, k)]
    if missing:
        raise ValueError(f"the local solver {type(strategy.local).__name__} has no option {missing[0]!r}")
    return dataclasses.replace(strategy, local=dataclasses.replace(strategy.local, **options)) if options else strategy


def iwds(
    beta_m: float = 0.98, beta_0: float = 0.9999, rho: float = 0.992, schedule: str = "decay", base: str = "fedavg",
    momentum: float | None = None, lr_decay: float | None = 0.992, prox_mu: float | None = None, **base_params: Any,
) -> Strategy:
    """IWDS (Tang et al. 2021): the base recipe ``base`` (fedavg, fedprox, fednova, ... any recipe taking
    ``data=``) with IWDS's label-weighted data sampler (:class:`fedsample.sampling.iwds.IWDSData`).

    Paper settings (§4, "Hyper-parameters"): 5 of 10 clients uniformly per round (``clients_per_round=5``
    when the base takes it), batch 32, local learning-rate decay 0.992 per round, momentum 0 for
    FedAvg/FedProx and 0.9 for FedNova (``momentum=None`` picks that). ``momentum``, ``lr_decay`` and
    ``prox_mu`` go to the base recipe when it takes them, otherwise onto its local solver; ``None`` leaves
    the base's value. ``schedule="fixed"`` keeps beta = beta_0 (Imb-Samp; beta_0 = 0 is Uni-Samp).
    """
    import dataclasses
    import inspect

    from fedsample.sampling.iwds import IWDSData

    fn = _check_base_params(base, base_params)
    takes = set(inspect.signature(fn).parameters)
    if momentum is None and base == "fednova":
        momentum = 0.9
    options = {k: v for k, v in {"momentum": momentum, "lr_decay": lr_decay, "prox_mu": prox_mu}.items() if v is not None}
    params = {"clients_per_round": 5} if "clients_per_round" in takes else {}
    params.update(base_params)
    params.update({k: v for k, v in options.items() if k in takes})
    data = IWDSData(beta_m=beta_m, beta_0=beta_0, rho=rho, schedule=schedule)  # type: ignore[arg-type]
    strategy = _set_local_options(fn(data=data, **params), {k: v for k, v in options.items() if k not in takes})
    return dataclasses.replace(strategy, name=f"iwds[{base}]")


RECIPES["iwds"] = iwds


def isfedavg(
    L: int = 6, lr: float = 0.01, epochs: int | tuple[int, ...] = 1, batch_size: int | tuple[int, ...] = 1,
    alpha: float | tuple[float, ...] = 3.0, update: str = "approx", reference: Any = None, scaling: str = "step",
    floor: float | None = None, server_lr: float = 1.0, clients: Any = None, data: Any = None,
) -> Strategy:
    """ISFedAvg (Rizk, Vlaski & Sayed 2022, Algorithm 1): L of K agents by systematic sampling with
    p_k ∝ sqrt(sigma^2_k + alpha_k ||grad P_k||^2) (Lemma 7), B_k points per epoch with p_n ∝ ||grad Q_k||
    (Lemma 6), E_k epochs, unbiased 1/(K p_k) and 1/(N_k p_n) scaling (Eq. 8) and the mean of Eq. 9.
    ``epochs``/``batch_size`` may be one value or one per agent (see
    :func:`fedsample.sampling.importance.paper_heterogeneity`). ``update``: "exact" (Lemmas 6-7 at
    ``reference``, the paper's w°), "approx" (Eqs. 49-50), "cheap" (Eqs. 52-53) or "uniform" (FedAvg with
    Eq. 6's epoch correction). Paper (§V-A): L = 6 of K = 300, mu = 0.01, B_k in [1, 10], E_k in [1, 5]."""
    from fedsample.sampling import importance as isx

    floor = isx.DEFAULT_FLOOR if floor is None else floor
    return Strategy(
        clients=clients or isx.ImportanceAgents(L=L, alpha=alpha, update=update, reference=reference, floor=floor),  # type: ignore[arg-type]
        data=data or isx.ImportanceData(epochs, batch_size, update, reference, scaling, floor),  # type: ignore[arg-type]
        local=isx.EpochSGD(lr=lr), aggregate=isx.ISFedAvgAggregate(scaling),  # type: ignore[arg-type]
        server=ServerSGD(server_lr), name="isfedavg" if update != "uniform" else "isfedavg_uniform",
    )


RECIPES["isfedavg"] = isfedavg
