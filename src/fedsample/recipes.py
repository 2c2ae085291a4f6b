"""The paper methods and baselines as short recipes over the strategy parts.

Every recipe takes keyword arguments only, named as in the table of docs/parameters.md: one name per concept
(``clients_per_round``, ``samples_per_round``, ``lr`` for the clients' local rate and ``server_lr`` for the
server's step, ``local_momentum``/``server_momentum``, ``prox_mu``, ...). A paper's own symbol is kept as a
documented alias where that paper's recipe used it (``fedsampling(K=...)``, ``fedstas(m=..., eta=...)``,
``isfedavg(L=..., rho=...)``, ``fedprox(mu=...)``, ``iwds(rho=...)``); giving an alias and its name at once
is one error line, and an old name that is no paper's symbol is refused with a line naming the new one. Each
argument is checked against the table's constraint (:mod:`fedsample.checks`) before any part is built, so an
error names what the caller wrote.

Every federated recipe accepts ``clients=`` and ``data=`` overrides (IWDS only ``clients=``: its data level is
the method), so any client sampler composes with any data sampler; ``centralized`` pools the data into one
client and takes neither.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Callable, Literal, Mapping, TypedDict, cast

from fedsample import checks
from fedsample.checks import BOOLEAN, COUNT, NON_NEGATIVE, POSITIVE, Options, Param, reals
from fedsample.privacy.reports import EPSILON, THRESHOLD
from fedsample.parts import Aggregator, ClientSampler, DataSampler, ServerOptimizer, SizeNeed, unsent_statistics
from fedsample.sampling import cohort_size
from fedsample.sampling import importance as isx
from fedsample.sampling.clients import AllClients, SizeProportional, UniformClients
from fedsample.sampling.compression import DIM, Compression
from fedsample.sampling.data import COUNT_NOISE, FedSamplingData, FixedRatio, FullData, TotalFrom
from fedsample.sampling.iwds import BETA, DECAY, IWDSData
from fedsample.sampling.participant_data import ParticipantData
from fedsample.sampling.clustered import Algorithm, ClusteredClients, LinkageInput, Similarity
from fedsample.sampling.delta import REFERENCE_SERVER_MOMENTUM, DeltaClients, Draw, ReferenceMean, ScoreWeights
from fedsample.sampling.divfl import DivFLClients, Metric
from fedsample.sampling.fedcbs import CountRule, FedCBSClients
from fedsample.sampling.fedcor import FedCorClients
from fedsample.sampling.oort import OortClients
from fedsample.sampling.power_of_choice import PowerOfChoiceClients
from fedsample.sampling.power_of_choice import Variant as PowerOfChoiceVariant
from fedsample.sampling.optimal import DEFAULT_J_MAX, Objective, OptimalClients, Rule
from fedsample.sampling.stratify import STRATA, Spread, StratifiedClients, Within
from fedsample.privacy.sizes import ExactSizes, RandomizedSizes
from fedsample.strategy import Strategy
from fedsample.messages import Params
from fedsample.training.aggregate import DrawnNormalizedSum, FedNova, ISFedAvgAggregate, Scaling, StratifiedMean, Sum, WeightedMean
from fedsample.training.local import LR_DECAY, MOMENTUM, EpochSGD, LocalSGD, OneGradient
from fedsample.training.local_training import BATCH, FLAT, LocalTraining, fields_of, fold
from fedsample.training.server import SERVER_LR, FedAdagrad, FedAdam, FedYogi, ServerSGD

__all__ = [
    "KEYWORDS", "Keywords", "PARAMETERS", "PROTOCOLS", "ProtocolChoices", "RECIPES", "centralized", "fedadagrad", "fedadam", "fedavg", "fedavgm", "fednova", "fedprox",
    "fedsampling", "fedsampling_naive", "fedstas", "fedsts", "fedyogi", "isfedavg", "iwds", "recipe", "weighted_fedavg",
]

#: FedAvg's local training (McMahan et al. 2017): one epoch of minibatches of 32 at lr 0.05, the default of every
#: recipe of the FedAvg family and of the published client samplers'.
FEDAVG_LOCAL = LocalTraining()

#: The recipes' parameter names, one per concept, and what each admits (docs/parameters.md lists them with
#: their old names and the papers' symbols). A recipe checks every argument it was given against this table.
PARAMETERS: dict[str, checks.Spec] = {
    "clients_per_round": [COUNT, None],
    "samples_per_round": [COUNT, None],
    "lr": POSITIVE,
    "server_lr": Param(*SERVER_LR.constraints, label="server_lr (the server's learning rate)"),
    "epochs": [COUNT, None],
    "steps": [COUNT, None],
    "batch_size": BATCH,
    "local_momentum": MOMENTUM,
    "server_momentum": MOMENTUM,
    "weight_decay": NON_NEGATIVE,
    "lr_decay": LR_DECAY,
    "prox_mu": NON_NEGATIVE,
    "beta1": MOMENTUM,
    "beta2": MOMENTUM,
    "tau": POSITIVE,
    "epsilon": EPSILON,
    "M": [THRESHOLD, Options("rmse")],
    "secure_sum": BOOLEAN,
    "permanent": BOOLEAN,
    "reuse": COUNT,
    "average": COUNT,
    "ratio": reals(0, 1, "(]"),
    "samples_fraction": [reals(0, 1, "(]"), None],
    "H": STRATA,
    "dim": DIM,
    "recompute_every": COUNT,
    "beta_m": BETA,
    "beta_0": BETA,
    "beta_decay": DECAY,
    "l2": NON_NEGATIVE,
    "floor": [isx.FLOOR, None],
    "alpha": isx.ALPHA,
    "j_max": COUNT,
    "alpha1": NON_NEGATIVE,
    "alpha2": NON_NEGATIVE,
}


@dataclasses.dataclass(frozen=True)
class Keywords:
    """The keywords a recipe takes beyond its signature's parameters: those its argument handling declares
    (``declared``: the aliases, a paper's symbol -> its parameter, and the renamed names, an old name -> its new
    name, refused naming it; :func:`fedsample.checks.renames`) and ``folded`` (the flat keywords of :data:`FLAT` it
    folds into ``local``, :func:`_folding`; () for a recipe without ``local``)."""

    declared: checks.Renames
    folded: tuple[str, ...]


KEYWORDS: dict[Callable[..., Strategy], Keywords] = {}
"""Every recipe's :class:`Keywords`, registered by :func:`_recipe`."""


def _recipe(
    aliases: Mapping[str, str] | None = None, renamed: Mapping[str, str] | None = None, **spec: checks.Spec
) -> Callable[[Callable[..., Strategy]], Callable[..., Strategy]]:
    """A recipe's argument handling (:func:`fedsample.checks.arguments`): ``aliases`` (the papers' symbols) and
    ``renamed`` (old names, refused naming the new one), and every argument checked against :data:`PARAMETERS`
    (``spec`` overrides an entry for this recipe) and its ``Literal`` annotation. A recipe that takes
    ``local: LocalTraining`` also takes the flat keywords of its settings (:data:`FLAT`, checked against
    :data:`PARAMETERS`), folded into ``local`` over the signature's default (:func:`_folding`). The recipe's
    :class:`Keywords` are registered in :data:`KEYWORDS`."""

    def decorate(fn: Callable[..., Strategy]) -> Callable[..., Strategy]:
        names = inspect.signature(fn).parameters
        rules = {name: PARAMETERS[name] for name in names if name in PARAMETERS}
        checked = checks.arguments(None, aliases=aliases, renamed=renamed, **{**rules, **spec})(fn)
        folds = "local" in names
        built = _folding(checked, names["local"].default) if folds else checked
        KEYWORDS[built] = Keywords(checks.renames(checked), tuple(FLAT) if folds else ())
        return built

    return decorate


def _folding(fn: Callable[..., Strategy], default: LocalTraining) -> Callable[..., Strategy]:
    """``fn`` taking, besides ``local``, the flat keywords of :data:`FLAT`: each checked against
    :data:`PARAMETERS`, then folded with ``local`` into one :class:`LocalTraining` over ``default``
    (:func:`fedsample.training.local_training.fold`: a setting given both ways is refused in one line)."""

    @functools.wraps(fn)
    def wrapper(**kwargs: object) -> Strategy:
        flat = {name: kwargs.pop(name) for name in FLAT if name in kwargs}
        checks.validate(fn.__name__, flat, {name: PARAMETERS[name] for name in flat})
        kwargs["local"] = fold(fn.__name__, default, kwargs.get("local"), flat)
        return fn(**kwargs)

    return wrapper


ClientSampling = Literal["uniform", "weighted"]


def _federated(
    name: str, local: LocalSGD, server: ServerOptimizer, client_sampling: ClientSampling, clients_per_round: int | None,
    clients: ClientSampler | None = None, data: DataSampler | None = None, aggregate: Callable[..., Aggregator] = WeightedMean,
    samples_per_round: int | None = None,
) -> Strategy:
    """The FedAvg family's common construction (FedAvg, FedProx, FedNova, FedAvgM, FedAdam, FedYogi,
    FedAdagrad differ only in ``local``, ``aggregate`` and ``server``).

    ``client_sampling="uniform"``: m clients uniformly without replacement, updates weighted by the
    cohort's exact sizes n_k / sum_cohort n_j (McMahan et al. 2017). ``"weighted"``: m draws with
    replacement with p_k = n_k/n (Li et al. 2019, scheme I; the "weighted" baselines of Qi et al. 2023,
    Fig. 3), uniform average over the draws; the strategy is named ``weighted_<name>``. A ``clients=``
    override replaces the sampler; the weighting follows the sampler actually used: draw multiplicities
    for a sampler whose draws already carry n_k/n (declared ``draws_carry_sizes``: :class:`SizeProportional`,
    clustered sampling), cohort sizes for every other sampler
    (right for equal-probability designs: uniform, all, Poisson). Sizes are asked of every client where
    the sampler needs them, otherwise of the cohort only.

    ``clients_per_round`` (m, default 10) or ``samples_per_round`` (K, not both): with K, m is derived
    each round from every client's exact reported size so that the cohort holds K samples in
    expectation (:mod:`fedsample.sampling.cohort_size`); the server then learns every client's size.
    """
    weighted = client_sampling == "weighted"
    m = cohort_size.one_of("clients_per_round", clients_per_round, samples_per_round, 10, name)
    if clients is None:
        sampler = SizeProportional if weighted else UniformClients
        clients = sampler(m=m, samples_per_round=samples_per_round)
    by = "uniform" if clients.capabilities.draws_carry_sizes else "size"
    scope: Literal["all", "cohort"] = "all" if clients.capabilities.needs_sizes is SizeNeed.EXACT_ALL else "cohort"
    return Strategy(
        clients=clients, data=data or FullData(), local=local, aggregate=aggregate(by), server=server,
        sizes=ExactSizes(scope=scope), name=("weighted_" if weighted else "") + name,
    )


def _fedopt(
    name: str, server: ServerOptimizer, *, clients_per_round: int | None, samples_per_round: int | None, local: LocalTraining,
    client_sampling: ClientSampling, clients: ClientSampler | None, data: DataSampler | None, prox_mu: float = 0.0, aggregate: Callable[..., Aggregator] = WeightedMean,
) -> Strategy:
    """FedAvg's local SGD ``local`` (with FedProx's ``prox_mu``) under the server optimizer ``server``."""
    return _federated(name, local.solver(prox_mu), server, client_sampling, clients_per_round, clients, data, aggregate, samples_per_round)


@_recipe()
def fedavg(
    *, clients_per_round: int | None = None, samples_per_round: int | None = None, local: LocalTraining = FEDAVG_LOCAL, client_sampling: ClientSampling = "uniform",
    server_lr: float = 1.0, clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedAvg (McMahan et al. 2017): m clients uniformly, local SGD, average weighted by the cohort's
    exact data sizes (collected from the cohort only). ``client_sampling="weighted"`` is
    :func:`weighted_fedavg`."""
    return _fedopt(
        "fedavg", ServerSGD(server_lr), clients_per_round=clients_per_round, samples_per_round=samples_per_round, local=local, client_sampling=client_sampling, clients=clients, data=data,
    )


@_recipe()
def weighted_fedavg(
    *, clients_per_round: int | None = None, samples_per_round: int | None = None, local: LocalTraining = FEDAVG_LOCAL, server_lr: float = 1.0, clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """Size-weighted client sampling (Li et al. 2019): m draws with replacement with p_k = n_k/n
    (needs every client's exact size), uniform average over the draws. Same as
    ``fedavg(client_sampling="weighted")``."""
    return fedavg(
        clients_per_round=clients_per_round, samples_per_round=samples_per_round, local=local,
        client_sampling="weighted", server_lr=server_lr, clients=clients, data=data,
    )


def _samples_per_round(owner: str, given: int | None, data: DataSampler | None, default: int, symbol: str) -> int:
    """K, given once: the recipe's ``samples_per_round``, or the K that a ``data=`` sampler already carries
    (FedSampling's K, FedSTaS's eta), or ``default``; a given value that disagrees with the sampler's is one
    error line (the recipe never builds parts that disagree on K)."""
    carried = data.K if isinstance(data, FedSamplingData) else data.eta if isinstance(data, ParticipantData) else None
    if given is not None and carried is not None and given != carried:
        checks.fail("samples_per_round", given, f"{carried} (the K of data={data!r}) or left out: give K once", owner,
                    label=f"samples_per_round ({symbol})")
    return int(given if given is not None else carried if carried is not None else default)


Protocol = Literal["library", "paper"]

#: The size reports' epsilon where FedSampling asks for reports without naming it (the paper's eps = 3, Qi et al. 2023 §4.1).
REPORT_EPSILON = 3.0

class ProtocolChoices(TypedDict):
    """What a FedSampling protocol sets when the caller leaves the option out (``fedsampling``'s options of these names)."""

    total_from: TotalFrom
    permanent: bool
    normalize: Literal["K", "drawn"]
    M: int | Literal["rmse"]
    count_noise: float
    steer: bool


#: What each FedSampling protocol sets when the caller leaves the option out (``fedsampling(protocol=...)``).
PROTOCOLS: dict[Protocol, ProtocolChoices] = {
    # the total N from the clients' sizes summed inside the secure sum with Gaussian noise (no size reports), the
    # self-normalized update (the step no longer scales with N/N~), the summed drawn count noised; with size reports
    # (an option of them given): permanent ones (a run costs epsilon once), M minimizing the estimate's RMSE, and the
    # ratio steered by the drawn count from the second round on (docs/size-estimate.md)
    "library": {"total_from": "secure_sum", "permanent": True, "normalize": "drawn", "M": "rmse", "count_noise": COUNT_NOISE,
                "steer": True},
    # Qi et al. 2023, Algorithm 1: fresh reports every round, G_c divided by K, the user's M (default 300)
    "paper": {"total_from": "reports", "permanent": False, "normalize": "K", "M": 300, "count_noise": 0.0, "steer": False},
}


@_recipe(aliases={"K": "samples_per_round"}, renamed={"lr": "server_lr"}, count_noise=[NON_NEGATIVE, None], steer=[BOOLEAN, None],
         epsilon=[EPSILON, None],
         total_from=[Options("secure_sum", "reports"), None])
def fedsampling(
    *, samples_per_round: int | None = None, epsilon: float | None = None, M: int | Literal["rmse"] | None = None,
    server_lr: float = 0.05, protocol: Protocol = "library", sizes: Literal["randomized", "exact"] = "randomized",
    permanent: bool | None = None, secure_sum: bool = True, reuse: int = 1, average: int = 1,
    normalize: Literal["K", "drawn"] | None = None, count_noise: float | None = None,
    size_prior: tuple[float, float] = (2.0, 4.0), steer: bool | None = None, total_from: TotalFrom | None = None,
    clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedSampling (Qi et al. 2023, Algorithm 1): all clients send epsilon-LDP size reports, the server
    estimates N~ (Eq. 2), each sample is kept with probability K/N~, each client sends
    G_c = (1/K) * sum g_s, and the server steps by eta * sum_c G_c. ``samples_per_round`` is the paper's K
    (alias ``K``; default 2048, or the K of a ``data=FedSamplingData(K)``), ``server_lr`` its eta. Paper
    defaults: K = 2048, eps = 3, M = 300, eta = 0.05. The server learns only sum_c G_c (secure sum;
    ``secure_sum=False`` shows it every G_c, with the paper's update only).

    ``protocol`` (:data:`PROTOCOLS`) decides what the options left out are:

    - ``"library"`` (default): ``total_from="secure_sum"``, a departure from the paper: no size reports; before
      the first draw every client's size goes into the secure sum with Gaussian noise of standard deviation
      ``count_noise`` (default 5 samples) added in shares, and the ratio is K / N^ with N^ that noised total
      (:class:`~fedsample.sampling.data.FedSamplingData`; one Gaussian release in the privacy ledger, docs/privacy.md),
      so the realised count is near K from the first round on every partition (docs/size-estimate.md); the
      self-normalized update ``normalize="drawn"`` (divide by the drawn count S instead of K) with the same noise on S,
      added in shares inside the secure sum and accounted by the ledger. ``total_from="reports"`` (implied where a
      size-report option, ``epsilon``, ``M``, ``permanent``, ``reuse``, ``average`` or ``sizes="exact"``, is given)
      keeps the paper's size estimate (Eq. 2, the reports at ``epsilon``, default 3) with the library's remedies: permanent reports (a run costs epsilon once),
      ``M="rmse"`` (the M minimizing N~'s RMSE for |C| clients of the stated ``size_prior = (mean size, log-normal
      sigma)``) and ``steer=True``: from the second round on the ratio is K / N^, N^ the mean of the past rounds'
      released S~ / p, so the realised count approaches K even where N~ is far off.
    - ``"paper"``: the paper's protocol: fresh size reports every round (``permanent=False``), G_c divided by K
      (``normalize="K"``, the :class:`Sum` of Algorithm 1) and the user's M (default 300).

    An option given explicitly wins over the protocol's choice; without a secure sum (``secure_sum=False``: the
    server may not learn a count per client) or with a ``data=`` sampler that does not send the drawn counts
    (its capabilities' ``summed`` lacks what :class:`DrawnNormalizedSum` needs) the update divides by K. The other remedies (docs/size-estimate.md):
    ``sizes="exact"`` the non-private control (true sizes, same K/N sampling); ``reuse=R`` one estimate for R
    rounds; ``average=A`` the mean of the last A estimates (needs fresh reports)."""
    if sizes == "exact" and (M == "rmse" or reuse != 1 or average != 1):
        raise ValueError("fedsampling: M='rmse', reuse and average apply to randomized size reports, not to sizes='exact'")
    chosen = PROTOCOLS[protocol]
    reported = sizes == "exact" or epsilon is not None or M is not None or permanent is not None or reuse != 1 or average != 1
    permanent = chosen["permanent"] if permanent is None else permanent
    K = _samples_per_round("fedsampling", samples_per_round, data, 2048, "K")
    if normalize is None:  # without a secure sum, or with a data= sampler that does not send what the update divides by: by K
        counts = data is None or not unsent_statistics(DrawnNormalizedSum(K), data)
        normalize = chosen["normalize"] if secure_sum and counts else "K"
    M = chosen["M"] if M is None else M
    if count_noise is None:
        count_noise = chosen["count_noise"] if normalize == "drawn" else 0.0
    if normalize == "drawn" and not secure_sum:
        raise ValueError("fedsampling: normalize='drawn' (the library protocol's update) needs secure_sum=True: the server may "
                         "learn only the summed drawn count, not each client's; with secure_sum=False use normalize='K' "
                         "or protocol='paper'")
    if total_from is None:  # a data= sampler keeps its own; a size-report option asks for the reports
        total_from = (data.total_from if isinstance(data, FedSamplingData) else "reports" if data is not None else
                      chosen["total_from"] if normalize == "drawn" and not reported else "reports")
    if total_from == "secure_sum" and (reported or normalize != "drawn"):
        raise ValueError("fedsampling: total_from='secure_sum' sums the clients' sizes inside the secure sum beside the drawn count "
                         "(normalize='drawn'); it asks no size reports, so epsilon, M, permanent, reuse, average and sizes='exact' "
                         "do not apply")
    steer = (chosen["steer"] and normalize == "drawn" and sizes == "randomized" and total_from == "reports") if steer is None else steer
    if steer and normalize != "drawn":
        checks.fail("steer", steer, "False or left out unless normalize='drawn' (it steers by the drawn count)", "fedsampling")
    if count_noise > 0 and normalize != "drawn":
        checks.fail("count_noise", count_noise, "0 or left out unless normalize='drawn' (it is noise on the drawn count)", "fedsampling")
    prior = cast("tuple[float, float]", tuple(size_prior))  # a list from a config: RandomizedSizes checks it
    policy = (
        None if total_from == "secure_sum" else ExactSizes(scope="all") if sizes == "exact" else
        RandomizedSizes(REPORT_EPSILON if epsilon is None else epsilon, M, scope="all", permanent=permanent, reuse=reuse, average=average, size_prior=prior)
    )
    drawn = normalize == "drawn"
    return Strategy(
        clients=clients or AllClients(),
        data=data or FedSamplingData(K, count_drawn=drawn, count_noise=count_noise, steer=steer, total_from=total_from),
        local=OneGradient(K), aggregate=DrawnNormalizedSum(K) if drawn else Sum(), server=ServerSGD(server_lr),
        sizes=policy, name="fedsampling", secure_sum=secure_sum,
    )


@_recipe(renamed={"lr": "server_lr"})
def fedsampling_naive(*, ratio: float = 0.01, server_lr: float = 0.05, clients: ClientSampler | None = None, data: DataSampler | None = None) -> Strategy:
    """The naive fixed-ratio method of Qi et al. 2023, §3.3: each sample kept with probability r, each
    client sends its local mean gradient, the server averages them uniformly and steps by ``server_lr`` (biased
    on purpose: the unbiased weighting would need the sampled counts, which leak sizes)."""
    return Strategy(
        clients=clients or AllClients(), data=data or FixedRatio(ratio), local=OneGradient(None),
        aggregate=WeightedMean("uniform"), server=ServerSGD(server_lr), name="fedsampling_naive",
    )


@_recipe(aliases={"K": "samples_per_round"}, samples_per_round=COUNT)
def centralized(*, samples_per_round: int = 2048, lr: float = 0.05, steps: int = 1) -> Strategy:
    """Centralized minibatch SGD on the union of all clients' data (pooled into one client, so there is no
    ``clients=``/``data=``): each round takes ``steps`` steps whose minibatches together hold
    ``samples_per_round`` samples (``steps`` must divide it). One step of K samples (alias ``K``, the
    FedSampling budget it is matched to) uses as many sample gradients per round as FedSampling."""
    if samples_per_round % steps:
        checks.fail("steps", steps, f"a divisor of samples_per_round = {samples_per_round} (equal minibatches)", "centralized")
    return Strategy(
        clients=AllClients(), data=FullData(),
        local=LocalSGD(lr=lr, epochs=None, steps=steps, batch_size=samples_per_round // steps),
        aggregate=WeightedMean("uniform"), server=ServerSGD(1.0), name="centralized", pooled=True,
    )


@_recipe(aliases={"mu": "prox_mu"})
def fedprox(
    *, prox_mu: float = 0.01, clients_per_round: int | None = None, samples_per_round: int | None = None, local: LocalTraining = FEDAVG_LOCAL, client_sampling: ClientSampling = "uniform",
    server_lr: float = 1.0, clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedProx (Li et al. 2020): FedAvg whose local objective adds mu/2 * ||w - w_global||^2 (gradient
    mu * (w - w_global) in every local step); ``prox_mu`` is the paper's mu (alias ``mu``). mu = 0 is FedAvg;
    the paper tries mu in {0.001, 0.01, 0.1, 1}."""
    return _fedopt(
        "fedprox", ServerSGD(server_lr), clients_per_round=clients_per_round, samples_per_round=samples_per_round, local=local, client_sampling=client_sampling, clients=clients, data=data, prox_mu=prox_mu,
    )


@_recipe(aliases={"mu": "prox_mu"})
def fednova(
    *, clients_per_round: int | None = None, samples_per_round: int | None = None, local: LocalTraining = FEDAVG_LOCAL, prox_mu: float = 0.0, client_sampling: ClientSampling = "uniform",
    server_lr: float = 1.0, clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedNova (Wang et al. 2020): each client's cumulative update divided by its effective number of
    steps a_k, weighted average, rescaled by tau_eff = sum p_k a_k (:class:`FedNova`). Works with local
    momentum (IWDS runs it with ``local_momentum=0.9``) and FedProx's ``prox_mu`` (alias ``mu``)."""
    return _fedopt(
        "fednova", ServerSGD(server_lr), clients_per_round=clients_per_round, samples_per_round=samples_per_round, local=local, client_sampling=client_sampling, clients=clients, data=data, prox_mu=prox_mu, aggregate=FedNova,
    )


@_recipe(renamed={"momentum": "server_momentum"})
def fedavgm(
    *, server_momentum: float = 0.9, server_lr: float = 1.0, clients_per_round: int | None = None,
    samples_per_round: int | None = None, local: LocalTraining = FEDAVG_LOCAL,
    client_sampling: ClientSampling = "uniform", clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedAvgM (Hsu et al. 2019): FedAvg with server momentum v <- beta*v + Delta, w <- w - server_lr*v
    (``server_momentum`` is beta)."""
    return _fedopt(
        "fedavgm", ServerSGD(server_lr, server_momentum), clients_per_round=clients_per_round,
        samples_per_round=samples_per_round, local=local, client_sampling=client_sampling,
        clients=clients, data=data,
    )


@_recipe()
def fedadam(
    *, server_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3,
    clients_per_round: int | None = None, samples_per_round: int | None = None, local: LocalTraining = FEDAVG_LOCAL, client_sampling: ClientSampling = "uniform",
    clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedAdam (Reddi et al. 2021, Algorithm 2): FedAvg's local training, Adam on the server without bias
    correction (:class:`~fedsample.training.server.FedAdam`)."""
    return _fedopt(
        "fedadam", FedAdam(server_lr, beta1, beta2, tau), clients_per_round=clients_per_round,
        samples_per_round=samples_per_round, local=local, client_sampling=client_sampling,
        clients=clients, data=data,
    )


@_recipe()
def fedyogi(
    *, server_lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3,
    clients_per_round: int | None = None, samples_per_round: int | None = None, local: LocalTraining = FEDAVG_LOCAL, client_sampling: ClientSampling = "uniform",
    clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedYogi (Reddi et al. 2021, Algorithm 2): FedAvg's local training, Yogi on the server."""
    return _fedopt(
        "fedyogi", FedYogi(server_lr, beta1, beta2, tau), clients_per_round=clients_per_round,
        samples_per_round=samples_per_round, local=local, client_sampling=client_sampling,
        clients=clients, data=data,
    )


@_recipe()
def fedadagrad(
    *, server_lr: float = 0.01, beta1: float = 0.9, tau: float = 1e-3, clients_per_round: int | None = None,
    samples_per_round: int | None = None, local: LocalTraining = FEDAVG_LOCAL,
    client_sampling: ClientSampling = "uniform", clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedAdagrad (Reddi et al. 2021, Algorithm 2): FedAvg's local training, Adagrad with first moment on
    the server."""
    return _fedopt(
        "fedadagrad", FedAdagrad(server_lr, beta1, tau), clients_per_round=clients_per_round,
        samples_per_round=samples_per_round, local=local, client_sampling=client_sampling,
        clients=clients, data=data,
    )


Aggregation = Literal["unbiased", "paper", "size"]

#: FedSTS's and FedSTaS's local training (Slessor et al. 2025, §3.1): 3 local SGD steps of 128 rows at lr 0.01.
FEDSTS_LOCAL = LocalTraining(lr=0.01, steps=3, batch_size=128)


@_recipe(aliases={"m": "clients_per_round"})
def fedsts(
    *, H: int = 10, clients_per_round: int | None = None, samples_per_round: int | None = None, dim: int = 9,
    compression: Compression = "squeeze", local: LocalTraining = FEDSTS_LOCAL, aggregation: Aggregation = "unbiased",
    spread: Spread = "std", within: Within = "norm", recompute_every: int = 1, server_lr: float = 1.0, clients: ClientSampler | None = None,
    data: DataSampler | None = None,
) -> Strategy:
    """FedSTS (Gao et al. 2024, as in Slessor et al. 2025, Algorithms 1-2): strata from k-means of the
    clients' compressed gradients, Neyman allocation, within-stratum sampling with pi proportional to
    ||compressed gradient||, local SGD on all local data, stratified aggregation (``aggregation="paper"``
    for the paper's (1/N) sum_h N_h mean_h, biased under importance sampling; default: unbiased
    Horvitz-Thompson of the client mean; ``aggregation="size"``: the size-weighted ratio estimator of FedAvg's
    objective, with exact sizes from the cohort, see :class:`StratifiedMean`). ``clients_per_round`` is the
    paper's m (alias ``m``). Paper defaults: H = 10, m = 10, d' = 9, 3 local SGD steps, lr 0.01, batch 128.
    ``samples_per_round=K`` instead of m derives m each round from every client's exact size."""
    m = cohort_size.one_of("clients_per_round", clients_per_round, samples_per_round, 10, "fedsts")
    clients = clients or StratifiedClients(H, m, dim, compression, recompute_every, spread, within, samples_per_round)
    sizes: ExactSizes | None
    if clients.capabilities.needs_sizes is SizeNeed.EXACT_ALL:
        sizes = ExactSizes(scope="all")
    else:
        sizes = ExactSizes(scope="cohort") if aggregation == "size" else None
    return Strategy(
        clients=clients, sizes=sizes, data=data or FullData(), local=local.solver(),
        aggregate=StratifiedMean(aggregation), server=ServerSGD(server_lr), name="fedsts",
    )


@_recipe(
    aliases={"m": "clients_per_round", "eta": "samples_per_round", "q": "samples_fraction"},
    epsilon=Param(EPSILON, Options("none"), None, words="a number > 0 or 'none' (None from Python: exact sizes, no DP)"),
    M=THRESHOLD,
)
def fedstas(
    *, H: int = 10, clients_per_round: int = 10, samples_per_round: int | None = None,
    samples_fraction: float | None = None, dim: int = 9,
    compression: Compression = "squeeze", epsilon: float | Literal["none"] | None = 3.0, M: int = 100,
    draw: Literal["bernoulli", "fixed"] = "bernoulli", local: LocalTraining = FEDSTS_LOCAL,
    aggregation: Aggregation = "unbiased", spread: Spread = "std", within: Within = "norm", recompute_every: int = 1,
    server_lr: float = 1.0, clients: ClientSampler | None = None, data: DataSampler | None = None,
) -> Strategy:
    """FedSTaS (Slessor et al. 2025, Algorithm 2): FedSTS's client level, then the participants send
    epsilon-LDP size reports (Eq. 7), the server estimates their total n~ (Eq. 8) and each participant
    keeps each sample with probability eta/n~ (``draw="fixed"``: the authors' fixed-size variant).
    ``clients_per_round`` is the paper's m and ``samples_per_round`` its eta (aliases ``m``, ``eta``; default
    2048, or the eta of a ``data=ParticipantData(eta)``). The paper's §3.1 gives eta twice: K_desired = 2048 (the
    default reading) and "the sampling ratio q = 0.1, determining the requested sample size": ``samples_fraction=q``
    (alias ``q``) reads eta_t = q * n~_t, the fraction q of the participants' estimated total, so each keeps each
    sample with probability q (:class:`~fedsample.sampling.participant_data.ParticipantData`); give one of the two.
    Paper defaults: H = 10, m = 10, d' = 9, eta = K_desired = 2048, eps = 3, M = 100 (alpha = 0.1616), 3 local SGD
    steps, lr 0.01, batch 128.
    ``epsilon=None``: FedSTaS without the DP data level (the participants report their exact sizes, n~ = n,
    the paper's non-private p = eta/n of §2.4; M is unused); an experiment file, which has no null, writes
    ``epsilon = "none"``."""
    if samples_fraction is not None and (samples_per_round is not None or data is not None):
        checks.fail("samples_fraction", samples_fraction, "left out when samples_per_round (eta) or data= is given: "
                    "the two readings of the paper's eta exclude each other", "fedstas", label="samples_fraction (q)")
    eta = _samples_per_round("fedstas", samples_per_round, data, 2048, "eta")
    base = fedsts(
        H=H, clients_per_round=clients_per_round, dim=dim, compression=compression, local=local, aggregation=aggregation, spread=spread, within=within, recompute_every=recompute_every,
        server_lr=server_lr, clients=clients,
    )
    sizes = _participant_sizes(epsilon, M)
    if aggregation == "size" and not isinstance(sizes, ExactSizes):
        raise ValueError("fedstas: aggregation='size' weights each participant by its exact size; use epsilon=None")
    data = data or ParticipantData(eta, draw, fraction=samples_fraction)
    return dataclasses.replace(base, data=data, sizes=sizes, name="fedstas")


def _participant_sizes(epsilon: float | Literal["none"] | None, M: int) -> ExactSizes | RandomizedSizes:
    """The cohort's size reports: exact for ``epsilon`` None (or "none"), else epsilon-LDP with threshold M."""
    if epsilon is None or epsilon == "none":
        return ExactSizes(scope="cohort")
    return RandomizedSizes(epsilon, M, scope="cohort")


def _takes(fn: Callable[..., Strategy]) -> set[str]:
    """The keywords ``fn`` binds: its parameters and the flat keywords it folds into ``local`` (:func:`_folding`)."""
    return set(inspect.signature(fn).parameters) | set(KEYWORDS[fn].folded)


def _accepted(fn: Callable[..., Strategy]) -> set[str]:
    """The keywords ``fn`` takes: :func:`_takes` and its aliases (``clients``/``data`` overrides are objects,
    not configuration, and are not listed)."""
    return (_takes(fn) | set(KEYWORDS[fn].declared.aliases)) - {"clients", "data"}


def _checked(name: str, params: Mapping[str, object], what: str = "recipe") -> Callable[..., Strategy]:
    """The registered recipe ``name``, after checking that it takes every parameter in ``params`` (a renamed
    one is refused by the recipe itself, naming its new name)."""
    if name not in RECIPES:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(sorted(RECIPES))}")
    fn = RECIPES[name]
    accepted = _accepted(fn) | set(KEYWORDS[fn].declared.renamed)
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ValueError(f"{what} {name!r} has no parameter {unknown[0]!r}; it takes: {', '.join(sorted(_accepted(fn)))}")
    return fn


def recipe(name: str, **params: object) -> Strategy:
    """Build a recipe by name; unknown names and parameters give one clear error (a recipe over a base
    recipe, which takes ``**base_params``, checks the base's parameters itself)."""
    fn = RECIPES.get(name)
    takes_any = fn is not None and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    return fn(**params) if fn is not None and takes_any else _checked(name, params)(**params)


# --- recipes over a base recipe -------------------------------------------------------------------


#: The recipes' local-solver options and the solver's field for each.
LOCAL_OPTIONS = {"local_momentum": "momentum", "lr_decay": "lr_decay", "prox_mu": "prox_mu"}


def _set_local_options(strategy: Strategy, options: Mapping[str, float]) -> Strategy:
    """``strategy`` with ``options`` (recipe names: local_momentum, lr_decay, prox_mu) set on its local solver."""
    fields = {LOCAL_OPTIONS[k]: v for k, v in options.items()}
    missing = [k for k, f in zip(options, fields) if not hasattr(strategy.local, f)]
    if missing:
        raise ValueError(f"the local solver {type(strategy.local).__name__} has no option {missing[0]!r}")
    local = strategy.local
    if not fields:
        return strategy
    if not dataclasses.is_dataclass(local) or isinstance(local, type):
        raise TypeError(f"the local solver {type(local).__name__} is not a dataclass: its options cannot be set")
    return dataclasses.replace(strategy, local=dataclasses.replace(local, **fields))


def _with_options(local: object, options: Mapping[str, float]) -> dict[str, object]:
    """The settings of ``local`` (given to IWDS for its base recipe) with IWDS's ``options`` (flat keywords:
    ``local_momentum``, ``lr_decay``) folded in; an option that ``local`` sets to another value is refused in one
    line (IWDS's paper default lr_decay = 0.992 too: give it in ``local`` or ``lr_decay=None``)."""
    settings = fields_of(local, "iwds")
    for name, value in options.items():
        field = FLAT[name]
        if field in settings and settings[field] != value:
            checks.fail(name, value, f"{settings[field]!r} (the {field} of local=) or None: give it once", "iwds")
        settings[field] = value
    return settings


@_recipe(
    aliases={"rho": "beta_decay"}, renamed={"momentum": "local_momentum"},  # None: the base recipe's value
    local_momentum=[MOMENTUM, None], lr_decay=[LR_DECAY, None], prox_mu=[NON_NEGATIVE, None],
)
def iwds(
    *, beta_m: float = 0.98, beta_0: float = 0.9999, beta_decay: float = 0.992, schedule: Literal["decay", "fixed"] = "decay",
    base: str = "fedavg", local_momentum: float | None = None, lr_decay: float | None = 0.992, prox_mu: float | None = None,
    clients: ClientSampler | None = None, **base_params: object,
) -> Strategy:
    """IWDS (Tang et al. 2021): the base recipe ``base`` (fedavg, fedprox, fednova, ... any recipe taking
    ``data=``) with IWDS's label-weighted data sampler (:class:`fedsample.sampling.iwds.IWDSData`);
    ``beta_decay`` is the paper's decay rate rho of beta_t (Eq. 6; alias ``rho``).

    Paper settings (§4, "Hyper-parameters"): 5 of 10 clients uniformly per round (``clients_per_round=5``
    when the base takes it), batch 32, local learning-rate decay 0.992 per round, momentum 0 for
    FedAvg/FedProx and 0.9 for FedNova (``local_momentum=None`` picks that). ``local_momentum``, ``lr_decay``
    and ``prox_mu`` go to the base recipe when it takes them, otherwise onto its local solver; ``None`` leaves
    the base's value. ``clients=`` overrides the base's client sampler; the data level is IWDS itself, so there
    is no ``data=``. ``schedule="fixed"`` keeps beta = beta_0 (Imb-Samp; beta_0 = 0 is Uni-Samp).
    """
    fn = _checked(base, base_params, what="base recipe")
    takes = _takes(fn)
    if "data" not in takes:
        raise ValueError(f"base recipe {base!r} does not accept a data sampler (data=)")
    if local_momentum is None and base == "fednova":
        local_momentum = 0.9
    options = {k: v for k, v in {"local_momentum": local_momentum, "lr_decay": lr_decay, "prox_mu": prox_mu}.items() if v is not None}
    params: dict[str, object] = {"clients_per_round": 5} if "clients_per_round" in takes and not {"samples_per_round", "m", "L"} & set(base_params) else {}
    params.update(base_params)
    given = {k: v for k, v in options.items() if k in takes}
    if "local" in base_params:  # the options go into the base's local= (where they agree with it)
        params["local"] = _with_options(base_params["local"], {k: v for k, v in given.items() if k in FLAT})
        given = {k: v for k, v in given.items() if k not in FLAT}
    params.update(given)
    data = IWDSData(beta_m=beta_m, beta_0=beta_0, rho=beta_decay, schedule=schedule)
    if clients is not None:
        params["clients"] = clients
    strategy = _set_local_options(fn(data=data, **params), {k: v for k, v in options.items() if k not in takes})
    return dataclasses.replace(strategy, name=f"iwds[{base}]")


@_recipe(
    aliases={"L": "clients_per_round", "rho": "l2"},
    clients_per_round=COUNT, epochs=isx.EPOCHS, batch_size=isx.BATCHES, alpha=Param(*isx.ALPHA.constraints, None, label="alpha_k"),
)
def isfedavg(
    *, clients_per_round: int = 6, lr: float = 0.01, epochs: int | tuple[int, ...] = 1, batch_size: int | tuple[int, ...] = 1,
    alpha: float | tuple[float, ...] | None = None, update: isx.Update = "approx", reference: Params | None = None,
    scaling: Scaling = "step", floor: float | None = None, l2: float = 0.0, server_lr: float = 1.0, clients: ClientSampler | None = None,
    data: DataSampler | None = None,
) -> Strategy:
    """ISFedAvg (Rizk, Vlaski & Sayed 2022, Algorithm 1): L of K agents (``clients_per_round``, alias ``L``) by
    systematic sampling with p_k ∝ sqrt(sigma^2_{s,k} + alpha_k ||grad P_k||^2) (Lemma 7; sigma^2_{s,k} of Eq. 23
    carries E_k and B_k, alpha_k = 3 + 6/(E_k B_k) unless ``alpha`` is given), B_k points per epoch with
    p_n ∝ ||grad Q_k|| (Lemma 6), E_k epochs, unbiased 1/(K p_k) and 1/(N_k p_n) scaling (Eq. 8) and the mean of
    Eq. 9. ``l2`` is the paper's rho (alias ``rho``): the l2 term rho ||w||^2 of the local risk (Eqs. 2, 55), in
    every local step with the step's 1/(K p_k E_k) factor. ``epochs``/``batch_size`` may be one value or one per
    agent (see :func:`fedsample.sampling.importance.paper_heterogeneity`). ``update``: "exact" (Lemmas 6-7 at
    ``reference``, the paper's w°), "approx" (Eqs. 49-50), "cheap" (Eqs. 52-53) or "uniform" (FedAvg with
    Eq. 6's epoch correction). Paper (§V-A): L = 6 of K = 300, mu = 0.01, B_k in [1, 10], E_k in [1, 5]."""
    floor = isx.DEFAULT_FLOOR if floor is None else floor
    return Strategy(
        clients=clients or isx.ImportanceAgents(
            L=clients_per_round, alpha=alpha, update=update, reference=reference, floor=floor, epochs=epochs, batch_size=batch_size,
        ),
        data=data or isx.ImportanceData(epochs, batch_size, update, reference, scaling, floor),
        local=EpochSGD(lr=lr, rho=l2), aggregate=ISFedAvgAggregate(scaling),
        server=ServerSGD(server_lr), name="isfedavg" if update != "uniform" else "isfedavg_uniform",
    )


# --- the published client samplers with the methods their papers define -----------------------------------------


def _fedavg_choosing(name: str, clients: ClientSampler, *, local: LocalTraining, server_lr: float, data: DataSampler | None) -> Strategy:
    """FedAvg (local SGD, the size-weighted mean or the mean over draws, :func:`fedavg`) with the client sampler
    ``clients``: how the published client samplers' papers train and aggregate."""
    strategy = fedavg(clients=clients, data=data, local=local, server_lr=server_lr)
    return dataclasses.replace(strategy, name=name)


@_recipe(aliases={"m": "clients_per_round"}, clients_per_round=COUNT)
def clustered_sampling(
    *, clients_per_round: int = 10, algorithm: Algorithm = "size", similarity: Similarity = "arccos",
    linkage_input: LinkageInput = "embedded", local: LocalTraining = FEDAVG_LOCAL,
    server_lr: float = 1.0, data: DataSampler | None = None,
) -> Strategy:
    """FedAvg with clustered sampling (Fraboni et al., ICML 2021): ``clients_per_round`` (the paper's m, alias ``m``)
    draws, one from each of m distributions built from every client's exact size (``algorithm="size"``: Algorithm 1)
    or from the clients' latest updates (``"similarity"``: Algorithm 2, with ``similarity`` "arccos", "L2" or "L1"),
    local SGD, and the paper's aggregation omega_i = draws_i / m (:class:`~fedsample.sampling.clustered.ClusteredClients`;
    the same as ``fedavg(clients=ClusteredClients(...))``)."""
    clients = ClusteredClients(clients_per_round, algorithm, similarity, linkage_input)
    return _fedavg_choosing("clustered_sampling", clients, local=local, server_lr=server_lr, data=data)


def _horvitz_thompson(objective: str) -> tuple[WeightedMean, ExactSizes | None]:
    """The Horvitz-Thompson aggregator of sum_k w_k Delta_k and the sizes it needs (w_k = n_k/n, or 1/N)."""
    if objective == "size":
        return WeightedMean("size_inverse_inclusion"), ExactSizes(scope="all")
    return WeightedMean("inverse_inclusion"), None


@_recipe(aliases={"m": "clients_per_round"}, clients_per_round=COUNT)
def optimal_sampling(
    *, clients_per_round: int = 10, rule: Rule = "exact", j_max: int = DEFAULT_J_MAX, objective: Objective = "size",
    local: LocalTraining = FEDAVG_LOCAL, server_lr: float = 1.0, data: DataSampler | None = None,
) -> Strategy:
    """Optimal client sampling (Chen, Horvath & Richtarik, TMLR 2022): every client trains (local SGD) and keeps its
    update U_k; client k sends it with probability p_k proportional to w_k ||U_k|| capped at 1, sum p = m
    (``clients_per_round``, alias ``m``; ``rule="exact"`` the sorted rule, ``"aocs"`` the AOCS iteration with
    ``j_max`` rounds), and the server steps by sum_{k in S} w_k U_k / p_k (w_k = n_k/n for ``objective="size"``,
    1/N for ``"uniform"``). A round costs every client's training for about m uploads."""
    aggregate, sizes = _horvitz_thompson(objective)
    return Strategy(
        clients=OptimalClients(clients_per_round, rule, j_max, objective), data=data or FullData(),
        local=local.solver(), aggregate=aggregate,
        server=ServerSGD(server_lr), sizes=sizes, name="optimal_sampling",
    )


@_recipe(aliases={"m": "clients_per_round"}, clients_per_round=COUNT)
def delta(
    *, clients_per_round: int = 10, draw: Draw = "with_replacement", alpha1: float = 1.0, alpha2: float = 1.0,
    objective: Objective = "size", score_weights: ScoreWeights = "objective", local: LocalTraining = FEDAVG_LOCAL, server_lr: float = 1.0, server_momentum: float | None = None, data: DataSampler | None = None,
) -> Strategy:
    """DELTA (Wang et al., NeurIPS 2023): every client is probed at the global model (its gradient and gradient
    variance), m (``clients_per_round``, alias ``m``) clients are drawn with p_k proportional to
    w_k sqrt(alpha1 zeta_k^2 + alpha2 sigma_k^2) (``score_weights="none"``: without w_k, eq. (11) as printed), local
    SGD, and the server steps by the weighted sum (w_k = n_k/n for ``objective="size"``, 1/N for ``"uniform"``).
    ``draw="with_replacement"``: the paper's unbiased weights w_k m_k / (m p_k); ``"poisson"``: pi_k capped, w_k / pi_k;
    ``"reference"``: the authors' code, its draw without replacement and its aggregation
    (:class:`~fedsample.sampling.delta.ReferenceMean`: sum n_k Delta_k / (N p_k) over the sampled total sum n_k) with
    server momentum 0.2 (``server_momentum``; 0 for the other draws), biased (docs/samplers.md)."""
    name = "delta" if draw == "with_replacement" else f"delta_{draw}"
    if draw == "reference":
        aggregate: Aggregator = ReferenceMean(clients_per_round)
        sizes: ExactSizes | None = ExactSizes(scope="all")
        momentum = REFERENCE_SERVER_MOMENTUM if server_momentum is None else server_momentum
    else:
        aggregate, sizes = _horvitz_thompson(objective)
        momentum = server_momentum or 0.0
    return Strategy(
        clients=DeltaClients(clients_per_round, draw, alpha1, alpha2, objective, score_weights), data=data or FullData(),
        local=local.solver(), aggregate=aggregate,
        server=ServerSGD(server_lr, momentum), sizes=sizes, name=name,
    )


@_recipe(aliases={"m": "clients_per_round", "d": "candidates", "b": "minibatch"}, clients_per_round=COUNT)
def power_of_choice(
    *, clients_per_round: int = 10, candidates: int = 20, variant: PowerOfChoiceVariant = "pow-d", minibatch: int | None = None,
    local: LocalTraining = FEDAVG_LOCAL, server_lr: float = 1.0, data: DataSampler | None = None,
) -> Strategy:
    """FedAvg with power-of-choice selection (Cho, Wang & Joshi, AISTATS 2022): ``candidates`` (d) clients drawn
    proportionally to their sizes without replacement, the ``clients_per_round`` (m) with the highest loss kept
    (``variant`` "pow-d": probed on all their data; "cpow-d": on a minibatch of ``minibatch`` (b); "rpow-d": their
    stale training losses), and the paper's plain mean of the m updates; inclusion probabilities estimated, the
    aggregate biased by design (:class:`~fedsample.sampling.power_of_choice.PowerOfChoiceClients`)."""
    clients = PowerOfChoiceClients(clients_per_round, candidates, variant, minibatch)
    strategy = _fedavg_choosing(variant.replace("-", "_"), clients, local=local, server_lr=server_lr, data=data)
    return dataclasses.replace(strategy, aggregate=WeightedMean("uniform"))


@_recipe(aliases={"m": "clients_per_round"}, clients_per_round=COUNT)
def fedcbs(
    *, clients_per_round: int = 10, lam: float = 1.0, beta: float | None = None, count_rule: CountRule = "selections",
    local: LocalTraining = FEDAVG_LOCAL, server_lr: float = 1.0, data: DataSampler | None = None,
) -> Strategy:
    """FedAvg with Fed-CBS selection (Zhang et al., ICML 2023): m clients drawn one at a time to lower the cohort's
    class imbalance QCID, the first with the exploration bonus ``lam`` sqrt(3 ln t / (2 T_i)) (T_i by ``count_rule``:
    the number of selections, infinite bonus for a never-selected client; :class:`~fedsample.sampling.fedcbs.FedCBSClients`;
    the label histograms are sent in the clear)."""
    return _fedavg_choosing("fedcbs", FedCBSClients(clients_per_round, lam, beta, count_rule), local=local, server_lr=server_lr, data=data)


@_recipe(aliases={"m": "clients_per_round"}, clients_per_round=COUNT)
def fedcor(
    *, clients_per_round: int = 10, warmup: int = 10, rank: int = 5, discount: float = 0.9, refit_every: int | None = None,
    forget: float = 1.0, objective: Objective = "size", local: LocalTraining = FEDAVG_LOCAL,
    server_lr: float = 1.0, data: DataSampler | None = None,
) -> Strategy:
    """FedAvg with FedCor selection (Tang et al., CVPR 2022): ``warmup`` rounds of m clients at random, then m chosen
    by a Gaussian-process model of the loss changes (``objective`` weights its clients by size or uniformly;
    :class:`~fedsample.sampling.fedcor.FedCorClients`)."""
    clients = FedCorClients(clients_per_round, warmup, rank, discount, refit_every, forget, objective)
    return _fedavg_choosing("fedcor", clients, local=local, server_lr=server_lr, data=data)


@_recipe(aliases={"m": "clients_per_round"}, clients_per_round=COUNT)
def divfl(
    *, clients_per_round: int = 10, metric: Metric = "l2", local: LocalTraining = FEDAVG_LOCAL,
    server_lr: float = 1.0, data: DataSampler | None = None,
) -> Strategy:
    """FedAvg with DivFL selection (Balakrishnan et al., ICLR 2022): the m clients of greedy facility location on the
    clients' gradients (:class:`~fedsample.sampling.divfl.DivFLClients`; deterministic: no unbiased estimator)."""
    return _fedavg_choosing("divfl", DivFLClients(clients_per_round, metric), local=local, server_lr=server_lr, data=data)


@_recipe(aliases={"m": "clients_per_round"}, clients_per_round=COUNT)
def oort(
    *, clients_per_round: int = 10, exploration: float = 0.9, exploration_decay: float = 0.98, exploration_floor: float = 0.2,
    cutoff: float = 0.95, staleness: bool = True, local: LocalTraining = FEDAVG_LOCAL,
    server_lr: float = 1.0, data: DataSampler | None = None,
) -> Strategy:
    """FedAvg with Oort's selection by statistical utility (Lai et al., OSDI 2021; no system-time model): a fraction
    ``exploration`` (Oort's epsilon, times ``exploration_decay`` each round, at least ``exploration_floor``) of the m
    slots explores, the rest exploit utilities at least ``cutoff`` times the k-th best
    (:class:`~fedsample.sampling.oort.OortClients`)."""
    clients = OortClients(clients_per_round, exploration, exploration_decay, exploration_floor, cutoff, staleness)
    return _fedavg_choosing("oort", clients, local=local, server_lr=server_lr, data=data)


#: Every recipe by its name (the ``recipe`` of an experiment file's strategy).
RECIPES: dict[str, Callable[..., Strategy]] = {
    fn.__name__: fn
    for fn in (
        fedavg, weighted_fedavg, fedprox, fednova, fedavgm, fedadam, fedyogi, fedadagrad, fedsampling,
        fedsampling_naive, centralized, fedsts, fedstas, iwds, isfedavg, clustered_sampling, optimal_sampling, delta,
        power_of_choice, fedcbs, fedcor, divfl, oort,
    )
}
