"""The paper methods and baselines as short recipes over the strategy parts.

Each recipe accepts ``clients=`` and ``data=`` overrides, so any client sampler composes with any data
sampler (FedSampling's data level under uniform client sampling, and so on).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Literal

from fedsample.parts import SizeNeed
from fedsample.sampling import cohort_size
from fedsample.sampling import importance as isx
from fedsample.sampling.clients import AllClients, SizeProportional, UniformClients
from fedsample.sampling.data import FedSamplingData, FixedRatio, FullData
from fedsample.sampling.iwds import IWDSData
from fedsample.sampling.participant_data import ParticipantData
from fedsample.sampling.stratify import StratifiedClients
from fedsample.privacy.sizes import ExactSizes, RandomizedSizes
from fedsample.strategy import Strategy
from fedsample.training.aggregate import DrawnNormalizedSum, FedNova, ISFedAvgAggregate, StratifiedMean, Sum, WeightedMean
from fedsample.training.local import EpochSGD, LocalSGD, OneGradient
from fedsample.training.server import FedAdagrad, FedAdam, FedYogi, ServerSGD


def _local_sgd(
    lr: float, epochs: int | None, steps: int | None, batch_size: int | None, momentum: float = 0.0,
    weight_decay: float = 0.0, prox_mu: float = 0.0, lr_decay: float = 1.0,
) -> LocalSGD:
    return LocalSGD(
        lr=lr, epochs=None if steps is not None else epochs, steps=steps, batch_size=batch_size, momentum=momentum,
        weight_decay=weight_decay, prox_mu=prox_mu, lr_decay=lr_decay,
    )


ClientSampling = Literal["uniform", "weighted"]


def _federated(
    name: str, local: LocalSGD, server: Any, client_sampling: ClientSampling, clients_per_round: int | None,
    clients: Any = None, data: Any = None, aggregate: Callable[[str], Any] = WeightedMean,
    samples_per_round: int | None = None,
) -> Strategy:
    """The FedAvg family's common construction (FedAvg, FedProx, FedNova, FedAvgM, FedAdam, FedYogi,
    FedAdagrad differ only in ``local``, ``aggregate`` and ``server``).

    ``client_sampling="uniform"``: m clients uniformly without replacement, updates weighted by the
    cohort's exact sizes n_k / sum_cohort n_j (McMahan et al. 2017). ``"weighted"``: m draws with
    replacement with p_k = n_k/n (Li et al. 2019, scheme I; the "weighted" baselines of Qi et al. 2023,
    Fig. 3), uniform average over the draws; the strategy is named ``weighted_<name>``. A ``clients=``
    override replaces the sampler; the weighting follows the sampler actually used: draw multiplicities
    for :class:`SizeProportional` (its draws already carry n_k/n), cohort sizes for every other sampler
    (right for equal-probability designs: uniform, all, Poisson). Sizes are asked of every client where
    the sampler needs them, otherwise of the cohort only.

    ``clients_per_round`` (m, default 10) or ``samples_per_round`` (K, not both): with K, m is derived
    each round from every client's exact reported size so that the cohort holds K samples in
    expectation (:mod:`fedsample.sampling.cohort_size`); the server then learns every client's size.
    """
    if client_sampling not in ("uniform", "weighted"):
        raise ValueError(f"client_sampling must be 'uniform' or 'weighted', got {client_sampling!r}")
    weighted = client_sampling == "weighted"
    m = cohort_size.one_of("clients_per_round", clients_per_round, samples_per_round, default=10)
    if clients is None:
        sampler = SizeProportional if weighted else UniformClients
        clients = sampler(m=m, samples_per_round=samples_per_round)
    by = "uniform" if isinstance(clients, SizeProportional) else "size"
    scope = "all" if getattr(clients, "needs_sizes", None) is SizeNeed.EXACT_ALL else "cohort"
    return Strategy(
        clients=clients, data=data or FullData(), local=local, aggregate=aggregate(by), server=server,
        sizes=ExactSizes(scope=scope), name=("weighted_" if weighted else "") + name,
    )


def fedavg(
    clients_per_round: int | None = None, lr: float = 0.05, epochs: int | None = 1, steps: int | None = None,
    batch_size: int | None = 32, server_lr: float = 1.0, clients: Any = None, data: Any = None,
    local_momentum: float = 0.0, weight_decay: float = 0.0, lr_decay: float = 1.0, client_sampling: ClientSampling = "uniform", samples_per_round: int | None = None,
) -> Strategy:
    """FedAvg (McMahan et al. 2017): m clients uniformly, local SGD, average weighted by the cohort's
    exact data sizes (collected from the cohort only). ``client_sampling="weighted"`` is
    :func:`weighted_fedavg`."""
    return _fedopt("fedavg", ServerSGD(server_lr), clients_per_round, lr, epochs, steps, batch_size, clients, data,
                   local_momentum, weight_decay, lr_decay, client_sampling, samples_per_round)


def weighted_fedavg(
    clients_per_round: int | None = None, lr: float = 0.05, epochs: int | None = 1, steps: int | None = None,
    batch_size: int | None = 32, server_lr: float = 1.0, clients: Any = None, data: Any = None,
    local_momentum: float = 0.0, weight_decay: float = 0.0, lr_decay: float = 1.0, samples_per_round: int | None = None,
) -> Strategy:
    """Size-weighted client sampling (Li et al. 2019): m draws with replacement with p_k = n_k/n
    (needs every client's exact size), uniform average over the draws. Same as
    ``fedavg(client_sampling="weighted")``."""
    return fedavg(
        clients_per_round, lr, epochs, steps, batch_size, server_lr, clients, data, local_momentum, weight_decay,
        lr_decay, client_sampling="weighted", samples_per_round=samples_per_round,
    )


def fedsampling(
    K: int = 2048, epsilon: float = 3.0, M: int | Literal["rmse"] = 300, lr: float = 0.05, clients: Any = None,
    data: Any = None, secure_sum: bool = True, permanent: bool = True, sizes: Literal["randomized", "exact"] = "randomized",
    reuse: int = 1, average: int = 1, normalize: Literal["K", "drawn"] = "K", size_prior: tuple[float, float] = (2.0, 4.0),
) -> Strategy:
    """FedSampling (Qi et al. 2023, Algorithm 1): all clients send epsilon-LDP size reports, the server
    estimates N~ (Eq. 2), each sample is kept with probability K/N~, each client sends
    G_c = (1/K) * sum g_s, and Theta <- Theta - eta * sum_c G_c. Paper defaults: K = 2048, eps = 3, M = 300,
    eta = 0.05. By default the size reports are permanent (a run costs epsilon) and the server learns only
    sum_c G_c (secure sum); ``permanent=False`` and ``secure_sum=False`` give the paper's literal protocol.

    The size estimate's remedies (docs/size-estimate.md; the defaults are the paper's method): ``sizes="exact"``
    the non-private control (true sizes, same K/N sampling); ``M="rmse"`` the M minimizing N~'s RMSE for
    |C| clients of the assumed ``size_prior = (mean size, log-normal sigma)``; ``reuse=R`` one estimate for R
    rounds; ``average=A`` the mean of the last A estimates (needs ``permanent=False``); ``normalize="drawn"``
    the self-normalized update (1/S) sum g_s, S the drawn count from the secure sum, instead of (1/K) sum g_s."""
    if sizes not in ("randomized", "exact"):
        raise ValueError(f"sizes must be 'randomized' or 'exact', got {sizes!r}")
    if normalize not in ("K", "drawn"):
        raise ValueError(f"normalize must be 'K' or 'drawn', got {normalize!r}")
    if M != "rmse" and isinstance(M, str):
        raise ValueError(f"M must be an integer >= 2 or 'rmse', got {M!r}")
    if sizes == "exact" and (M == "rmse" or reuse != 1 or average != 1):
        raise ValueError("M='rmse', reuse and average apply to randomized size reports, not to sizes='exact'")
    if normalize == "drawn" and not secure_sum:
        raise ValueError("normalize='drawn' needs secure_sum=True: the server may learn only the summed drawn count, not each client's")
    policy = (
        ExactSizes(scope="all") if sizes == "exact" else
        RandomizedSizes(epsilon, M, scope="all", permanent=permanent, reuse=reuse, average=average, size_prior=tuple(size_prior))
    )
    return Strategy(
        clients=clients or AllClients(), data=data or FedSamplingData(K, count_drawn=normalize == "drawn"),
        local=OneGradient(K), aggregate=DrawnNormalizedSum(K) if normalize == "drawn" else Sum(), server=ServerSGD(lr), sizes=policy,
        name="fedsampling", secure_sum=secure_sum,
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


def fedprox(
    mu: float = 0.01, clients_per_round: int | None = None, lr: float = 0.05, epochs: int | None = 1, steps: int | None = None,
    batch_size: int | None = 32, server_lr: float = 1.0, clients: Any = None, data: Any = None,
    local_momentum: float = 0.0, weight_decay: float = 0.0, lr_decay: float = 1.0, client_sampling: ClientSampling = "uniform", samples_per_round: int | None = None,
) -> Strategy:
    """FedProx (Li et al. 2020): FedAvg whose local objective adds mu/2 * ||w - w_global||^2 (gradient
    mu * (w - w_global) in every local step). mu = 0 is FedAvg; the paper tries mu in {0.001, 0.01, 0.1, 1}."""
    local = _local_sgd(lr, epochs, steps, batch_size, local_momentum, weight_decay, mu, lr_decay)
    return _federated("fedprox", local, ServerSGD(server_lr), client_sampling, clients_per_round, clients, data,
                      samples_per_round=samples_per_round)


def fednova(
    clients_per_round: int | None = None, lr: float = 0.05, epochs: int | None = 1, steps: int | None = None,
    batch_size: int | None = 32, server_lr: float = 1.0, clients: Any = None, data: Any = None,
    local_momentum: float = 0.0, weight_decay: float = 0.0, lr_decay: float = 1.0, mu: float = 0.0,
    client_sampling: ClientSampling = "uniform", samples_per_round: int | None = None,
) -> Strategy:
    """FedNova (Wang et al. 2020): each client's cumulative update divided by its effective number of
    steps a_k, weighted average, rescaled by tau_eff = sum p_k a_k (:class:`FedNova`). Works with local
    momentum (IWDS runs it with ``local_momentum=0.9``) and FedProx's ``mu``."""
    local = _local_sgd(lr, epochs, steps, batch_size, local_momentum, weight_decay, mu, lr_decay)
    return _federated("fednova", local, ServerSGD(server_lr), client_sampling, clients_per_round, clients, data, FedNova,
                      samples_per_round)


def fedavgm(
    momentum: float = 0.9, server_lr: float = 1.0, clients_per_round: int | None = None, lr: float = 0.05, epochs: int | None = 1,
    steps: int | None = None, batch_size: int | None = 32, clients: Any = None, data: Any = None,
    local_momentum: float = 0.0, weight_decay: float = 0.0, lr_decay: float = 1.0, client_sampling: ClientSampling = "uniform", samples_per_round: int | None = None,
) -> Strategy:
    """FedAvgM (Hsu et al. 2019): FedAvg with server momentum v <- momentum*v + Delta, w <- w - server_lr*v."""
    return _fedopt("fedavgm", ServerSGD(server_lr, momentum), clients_per_round, lr, epochs, steps, batch_size, clients,
                   data, local_momentum, weight_decay, lr_decay, client_sampling, samples_per_round)


def _fedopt(name: str, server: Any, clients_per_round: int | None, lr: float, epochs: int | None, steps: int | None,
            batch_size: int | None, clients: Any, data: Any, local_momentum: float, weight_decay: float,
            lr_decay: float, client_sampling: ClientSampling, samples_per_round: int | None = None) -> Strategy:
    """FedAvg's local SGD (no proximal term) under the server optimizer ``server``."""
    local = _local_sgd(lr, epochs, steps, batch_size, local_momentum, weight_decay, 0.0, lr_decay)
    return _federated(name, local, server, client_sampling, clients_per_round, clients, data,
                      samples_per_round=samples_per_round)


def fedadam(
    server_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3, clients_per_round: int | None = None,
    lr: float = 0.05, epochs: int | None = 1, steps: int | None = None, batch_size: int | None = 32,
    clients: Any = None, data: Any = None, local_momentum: float = 0.0, weight_decay: float = 0.0,
    lr_decay: float = 1.0, client_sampling: ClientSampling = "uniform", samples_per_round: int | None = None,
) -> Strategy:
    """FedAdam (Reddi et al. 2021, Algorithm 2): FedAvg's local training, Adam on the server without bias
    correction (:class:`~fedsample.training.server.FedAdam`)."""
    return _fedopt("fedadam", FedAdam(server_lr, beta1, beta2, tau), clients_per_round, lr, epochs, steps, batch_size,
                   clients, data, local_momentum, weight_decay, lr_decay, client_sampling, samples_per_round)


def fedyogi(
    server_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3, clients_per_round: int | None = None,
    lr: float = 0.05, epochs: int | None = 1, steps: int | None = None, batch_size: int | None = 32,
    clients: Any = None, data: Any = None, local_momentum: float = 0.0, weight_decay: float = 0.0,
    lr_decay: float = 1.0, client_sampling: ClientSampling = "uniform", samples_per_round: int | None = None,
) -> Strategy:
    """FedYogi (Reddi et al. 2021, Algorithm 2): FedAvg's local training, Yogi on the server."""
    return _fedopt("fedyogi", FedYogi(server_lr, beta1, beta2, tau), clients_per_round, lr, epochs, steps, batch_size,
                   clients, data, local_momentum, weight_decay, lr_decay, client_sampling, samples_per_round)


def fedadagrad(
    server_lr: float = 0.01, beta1: float = 0.9, tau: float = 1e-3, clients_per_round: int | None = None,
    lr: float = 0.05, epochs: int | None = 1, steps: int | None = None, batch_size: int | None = 32,
    clients: Any = None, data: Any = None, local_momentum: float = 0.0, weight_decay: float = 0.0,
    lr_decay: float = 1.0, client_sampling: ClientSampling = "uniform", samples_per_round: int | None = None,
) -> Strategy:
    """FedAdagrad (Reddi et al. 2021, Algorithm 2): FedAvg's local training, Adagrad with first moment on
    the server."""
    return _fedopt("fedadagrad", FedAdagrad(server_lr, beta1, tau), clients_per_round, lr, epochs, steps, batch_size,
                   clients, data, local_momentum, weight_decay, lr_decay, client_sampling, samples_per_round)


def fedsts(
    H: int = 10, m: int | None = None, dim: int = 9, compression: str = "squeeze", lr: float = 0.01, steps: int = 3,
    batch_size: int = 128, aggregation: str = "unbiased", spread: str = "std", within: str = "norm",
    recompute_every: int = 1, server_lr: float = 1.0, clients: Any = None, data: Any = None,
    samples_per_round: int | None = None,
) -> Strategy:
    """FedSTS (Gao et al. 2024, as in Slessor et al. 2025, Algorithms 1-2): strata from k-means of the
    clients' compressed gradients, Neyman allocation, within-stratum sampling with pi proportional to
    ||compressed gradient||, local SGD on all local data, stratified aggregation (``aggregation="paper"``
    for the paper's (1/N) sum_h N_h mean_h, biased under importance sampling; default: unbiased
    Horvitz-Thompson of the client mean; ``aggregation="size"``: the size-weighted ratio estimator of FedAvg's
    objective, with exact sizes from the cohort, see :class:`StratifiedMean`). Paper defaults: H = 10, m = 10,
    d' = 9, 3 local SGD steps, lr 0.01, batch 128. ``samples_per_round=K`` instead of m derives m each round
    from every client's exact size."""
    m = cohort_size.one_of("m", m, samples_per_round, default=10, check=False)
    clients = clients or StratifiedClients(H, m, dim, compression, recompute_every, spread, within, samples_per_round)
    if clients.needs_sizes is SizeNeed.EXACT_ALL:
        sizes = ExactSizes(scope="all")
    else:
        sizes = ExactSizes(scope="cohort") if aggregation == "size" else None
    return Strategy(
        clients=clients, sizes=sizes, data=data or FullData(), local=LocalSGD(lr=lr, epochs=None, steps=steps, batch_size=batch_size),
        aggregate=StratifiedMean(aggregation), server=ServerSGD(server_lr), name="fedsts",  # type: ignore[arg-type]
    )


def fedstas(
    H: int = 10, m: int = 10, dim: int = 9, compression: str = "squeeze", eta: int = 2048, epsilon: float | str | None = 3.0,
    M: int = 100, draw: str = "bernoulli", lr: float = 0.01, steps: int = 3, batch_size: int = 128,
    aggregation: str = "unbiased", spread: str = "std", within: str = "norm", recompute_every: int = 1,
    server_lr: float = 1.0, clients: Any = None, data: Any = None,
) -> Strategy:
    """FedSTaS (Slessor et al. 2025, Algorithm 2): FedSTS's client level, then the participants send
    epsilon-LDP size reports (Eq. 7), the server estimates their total n~ (Eq. 8) and each participant
    keeps each sample with probability eta/n~ (``draw="fixed"``: the authors' fixed-size variant).
    Paper defaults: H = 10, m = 10, d' = 9, eta = K_desired = 2048, eps = 3, M = 100 (alpha = 0.1616),
    3 local SGD steps, lr 0.01, batch 128. ``epsilon=None``: FedSTaS without the DP data level (the
    participants report their exact sizes, n~ = n, the paper's non-private p = eta/n of §2.4; M is unused);
    an experiment file, which has no null, writes ``epsilon = "none"``."""
    base = fedsts(H, m, dim, compression, lr, steps, batch_size, aggregation, spread, within, recompute_every, server_lr, clients)
    sizes = _participant_sizes(epsilon, M)
    if aggregation == "size" and not isinstance(sizes, ExactSizes):
        raise ValueError("fedstas: aggregation='size' weights each participant by its exact size; use epsilon=None")
    return dataclasses.replace(base, data=data or ParticipantData(eta, draw), sizes=sizes, name="fedstas")


def _participant_sizes(epsilon: float | str | None, M: int) -> ExactSizes | RandomizedSizes:
    """The cohort's size reports: exact for ``epsilon`` None (or "none"), else epsilon-LDP with threshold M."""
    if epsilon is None or epsilon == "none":
        return ExactSizes(scope="cohort")
    if isinstance(epsilon, str):
        raise ValueError(f"epsilon must be a number > 0 or 'none' (exact sizes), got {epsilon!r}")
    return RandomizedSizes(epsilon, M, scope="cohort")


def _checked(name: str, params: dict, what: str = "recipe") -> Callable[..., Strategy]:
    """The registered recipe ``name``, after checking that it takes every parameter in ``params``
    (``clients``/``data`` overrides are objects, not configuration, and are not listed)."""
    if name not in RECIPES:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(sorted(RECIPES))}")
    fn = RECIPES[name]
    accepted = set(inspect.signature(fn).parameters) - {"clients", "data"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ValueError(f"{what} {name!r} has no parameter {unknown[0]!r}; it takes: {', '.join(sorted(accepted))}")
    return fn


def recipe(name: str, **params: Any) -> Strategy:
    """Build a recipe by name; unknown names and parameters give one clear error (a recipe over a base
    recipe, which takes ``**base_params``, checks the base's parameters itself)."""
    fn = RECIPES.get(name)
    takes_any = fn is not None and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    return fn(**params) if takes_any else _checked(name, params)(**params)


# --- recipes over a base recipe -------------------------------------------------------------------


def _set_local_options(strategy: Strategy, options: dict) -> Strategy:
    """``strategy`` with ``options`` (e.g. momentum, prox_mu) set on its local solver."""
    missing = [k for k in options if not hasattr(strategy.local, k)]
    if missing:
        raise ValueError(f"the local solver {type(strategy.local).__name__} has no option {missing[0]!r}")
    return dataclasses.replace(strategy, local=dataclasses.replace(strategy.local, **options)) if options else strategy


# IWDS's local-solver options and the parameter names the FedAvg-family recipes give them
# (``momentum`` of fedavgm is *server* momentum, so local momentum is ``local_momentum`` there).
BASE_NAMES = {"momentum": "local_momentum", "lr_decay": "lr_decay", "prox_mu": "mu"}


def iwds(
    beta_m: float = 0.98, beta_0: float = 0.9999, rho: float = 0.992, schedule: str = "decay", base: str = "fedavg",
    momentum: float | None = None, lr_decay: float | None = 0.992, prox_mu: float | None = None, clients: Any = None,
    **base_params: Any,
) -> Strategy:
    """IWDS (Tang et al. 2021): the base recipe ``base`` (fedavg, fedprox, fednova, ... any recipe taking
    ``data=``) with IWDS's label-weighted data sampler (:class:`fedsample.sampling.iwds.IWDSData`).

    Paper settings (§4, "Hyper-parameters"): 5 of 10 clients uniformly per round (``clients_per_round=5``
    when the base takes it), batch 32, local learning-rate decay 0.992 per round, momentum 0 for
    FedAvg/FedProx and 0.9 for FedNova (``momentum=None`` picks that). ``momentum``, ``lr_decay`` and
    ``prox_mu`` go to the base recipe when it takes them (as ``local_momentum``, ``lr_decay``, ``mu``),
    otherwise onto its local solver; ``None`` leaves the base's value. ``clients=`` overrides the base's
    client sampler; the data level is IWDS itself, so there is no ``data=``. ``schedule="fixed"`` keeps
    beta = beta_0 (Imb-Samp; beta_0 = 0 is Uni-Samp).
    """
    fn = _checked(base, base_params, what="base recipe")
    if "data" not in inspect.signature(fn).parameters:
        raise ValueError(f"base recipe {base!r} does not accept a data sampler (data=)")
    takes = set(inspect.signature(fn).parameters)
    if momentum is None and base == "fednova":
        momentum = 0.9
    options = {k: v for k, v in {"momentum": momentum, "lr_decay": lr_decay, "prox_mu": prox_mu}.items() if v is not None}
    params = {"clients_per_round": 5} if "clients_per_round" in takes and "samples_per_round" not in base_params else {}
    params.update(base_params)
    passed = {name: BASE_NAMES[name] for name in options if BASE_NAMES[name] in takes}
    params.update({base_name: options[name] for name, base_name in passed.items()})
    data = IWDSData(beta_m=beta_m, beta_0=beta_0, rho=rho, schedule=schedule)  # type: ignore[arg-type]
    if clients is not None:
        params["clients"] = clients
    strategy = _set_local_options(fn(data=data, **params), {k: v for k, v in options.items() if k not in passed})
    return dataclasses.replace(strategy, name=f"iwds[{base}]")


def isfedavg(
    L: int = 6, lr: float = 0.01, epochs: int | tuple[int, ...] = 1, batch_size: int | tuple[int, ...] = 1,
    alpha: float | tuple[float, ...] | None = None, update: str = "approx", reference: Any = None, scaling: str = "step",
    floor: float | None = None, server_lr: float = 1.0, clients: Any = None, data: Any = None, rho: float = 0.0,
) -> Strategy:
    """ISFedAvg (Rizk, Vlaski & Sayed 2022, Algorithm 1): L of K agents by systematic sampling with
    p_k ∝ sqrt(sigma^2_{s,k} + alpha_k ||grad P_k||^2) (Lemma 7; sigma^2_{s,k} of Eq. 23 carries E_k and B_k,
    alpha_k = 3 + 6/(E_k B_k) unless ``alpha`` is given), B_k points per epoch with p_n ∝ ||grad Q_k|| (Lemma 6),
    E_k epochs, unbiased 1/(K p_k) and 1/(N_k p_n) scaling (Eq. 8) and the mean of Eq. 9. ``rho``: the l2 term
    rho ||w||^2 of the local risk (Eqs. 2, 55), in every local step with the step's 1/(K p_k E_k) factor.
    ``epochs``/``batch_size`` may be one value or one per agent (see
    :func:`fedsample.sampling.importance.paper_heterogeneity`). ``update``: "exact" (Lemmas 6-7 at
    ``reference``, the paper's w°), "approx" (Eqs. 49-50), "cheap" (Eqs. 52-53) or "uniform" (FedAvg with
    Eq. 6's epoch correction). Paper (§V-A): L = 6 of K = 300, mu = 0.01, B_k in [1, 10], E_k in [1, 5]."""
    floor = isx.DEFAULT_FLOOR if floor is None else floor
    return Strategy(
        clients=clients or isx.ImportanceAgents(  # type: ignore[arg-type]
            L=L, alpha=alpha, update=update, reference=reference, floor=floor, epochs=epochs, batch_size=batch_size,  # type: ignore[arg-type]
        ),
        data=data or isx.ImportanceData(epochs, batch_size, update, reference, scaling, floor),  # type: ignore[arg-type]
        local=EpochSGD(lr=lr, rho=rho), aggregate=ISFedAvgAggregate(scaling),  # type: ignore[arg-type]
        server=ServerSGD(server_lr), name="isfedavg" if update != "uniform" else "isfedavg_uniform",
    )



RECIPES: dict[str, Callable[..., Strategy]] = {
    fn.__name__: fn
    for fn in (
        fedavg, weighted_fedavg, fedprox, fednova, fedavgm, fedadam, fedyogi, fedadagrad, fedsampling,
        fedsampling_naive, centralized, fedsts, fedstas, iwds, isfedavg,
    )
}
