"""Partitioners: each scheme is a frozen dataclass; ``partition`` turns it into a FederatedData.

Every scheme gives a partition in the strict sense, for any parameter it accepts: each training row goes to
at most one client, once, and no client is empty (:func:`~fedsample.data.checks.check_partition` checks the
result). Sizes are allocated by :func:`apportion`, exact in integers at any spread of the weights; a
parameter the data cannot honour (more clients than samples, a shard size larger than the data, a local
long tail that leaves a client empty) is refused with one ValueError line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from fedsample.data.checks import check_partition, listed
from fedsample.data.types import Dataset, FederatedData

__all__ = [
    "AssignsRows", "BuildsPartition", "Dirichlet", "IID", "LocalLongTail", "LogNormalSizes", "Natural", "Shards", "apportion", "capped_shares",
    "partition",
]


@runtime_checkable
class AssignsRows(Protocol):
    """A partition scheme that gives each client's row indices (:class:`IID`, :class:`Dirichlet`, ... or a user's own)."""

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> Sequence[np.ndarray]: ...


@runtime_checkable
class BuildsPartition(Protocol):
    """A partition scheme that builds the federated data itself (:class:`Natural`, a Flower Datasets partitioner)."""

    def build(self, dataset: Dataset, rng: np.random.Generator) -> FederatedData: ...


def apportion(weights: np.ndarray, total: int, minimum: int = 0) -> np.ndarray:
    """Hamilton's largest-remainder apportionment of ``total`` units among ``len(weights)`` parts, exact in
    integers: every part gets ``minimum``, the other ``total - minimum·k`` units go in proportion to the
    non-negative ``weights`` (each part its quota's floor, then one more to the largest remainders, ties to
    the lower index). The counts sum to ``total`` exactly and each differs from its quota by less than one;
    only the ratios of the weights matter, so log-normal weights can be passed as ``exp(z - max z)``."""
    w = np.asarray(weights, dtype=np.float64)
    k = len(w)
    if k == 0 or total < minimum * k:
        raise ValueError(f"apportion: {total} units cannot give {k} parts at least {minimum} each")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0) and w.max() > 0):
        raise ValueError(f"apportion: weights must be finite, non-negative and not all zero, got {w[:5]}")
    w = w / w.max()  # the sum is now at most k: no overflow
    spare = total - minimum * k
    quotas = w / w.sum() * spare
    counts = np.floor(quotas).astype(np.int64)
    short = spare - int(counts.sum())  # in [0, k), but for rounding in the quotas
    if short > 0:
        counts += short // k
        counts[np.argsort(counts - quotas, kind="stable")[: short % k]] += 1
    while short < 0:  # the quotas' rounding overshot: one fewer to the smallest remainders still above 0
        held = np.flatnonzero(counts > 0)
        take = held[np.argsort(quotas[held] - counts[held], kind="stable")[: -short]]
        counts[take] -= 1
        short += len(take)
    return np.asarray(counts + minimum, dtype=np.int64)


def _refuse_more_clients_than_samples(scheme: str, clients: int, n: int) -> None:
    if clients > n:
        raise ValueError(f"{scheme}: {clients} clients for {n} samples; expected at most one client per sample")


@dataclass(frozen=True)
class IID:
    """Shuffle and cut into ``num_clients`` near-equal parts."""

    num_clients: int

    def __post_init__(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"IID: num_clients must be >= 1, got {self.num_clients}")

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        _refuse_more_clients_than_samples("IID", self.num_clients, dataset.num_train)
        return np.array_split(rng.permutation(dataset.num_train), self.num_clients)


@dataclass(frozen=True)
class LogNormalSizes:
    """FedSampling's size-imbalanced partition (Qi et al. 2023, §4.1): client sizes drawn proportional to
    LogNormal(0, sigma) and rescaled to the given mean; the number of clients is n_train / mean.
    Every client holds at least one sample and every sample is assigned exactly once, at any sigma: the
    weights are handled as logarithms (exp(z − max z), z ~ N(0, sigma²)), so a wide spread never overflows,
    and :func:`apportion` gives one sample each plus the rest by largest remainder."""

    mean: float = 2.0
    sigma: float = 4.0

    def __post_init__(self) -> None:
        if not (self.mean >= 1 and math.isfinite(self.mean)):
            raise ValueError(f"LogNormalSizes: mean must be >= 1 and finite, got {self.mean}")
        if not (self.sigma >= 0 and math.isfinite(self.sigma)):
            raise ValueError(f"LogNormalSizes: sigma must be >= 0 and finite, got {self.sigma}")

    def num_clients(self, n: int) -> int:
        """n / mean clients, rounded (at least one; at most n, since mean >= 1)."""
        return max(1, int(round(n / self.mean)))

    def sizes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Client sizes summing to ``n``: one sample each, the rest in proportion to LogNormal(0, sigma)
        weights (the same draws as ``rng.lognormal(0, sigma)``, kept as their logarithms)."""
        clients = self.num_clients(n)
        _refuse_more_clients_than_samples("LogNormalSizes", clients, n)
        log_weights = rng.normal(0.0, self.sigma, size=clients)
        return apportion(np.exp(log_weights - log_weights.max()), n, minimum=1)

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        sizes = self.sizes(dataset.num_train, rng)
        return np.split(rng.permutation(dataset.num_train), np.cumsum(sizes)[:-1])


def _check_classification(scheme: str, dataset: Dataset) -> np.ndarray:
    if dataset.task != "classification" or dataset.num_classes < 1:
        raise ValueError(f"{scheme}: needs class labels; dataset {dataset.name!r} is a {dataset.task} dataset")
    return np.asarray(dataset.y_train, dtype=np.int64)


@dataclass(frozen=True)
class Dirichlet:
    """Label-based Dirichlet partition ("LDA", Hsu et al. 2019, as used by FedMA, FedML and IWDS):
    for every class, the shares of its samples going to the ``num_clients`` clients are drawn from
    Dir(alpha·1); small alpha gives clients few dominant labels, large alpha near-IID label mixes.

    Every client is guaranteed ``min_size`` (at least 1) samples: the draw is repeated (up to ``max_tries``
    times, as in FedML's implementation) and, if still short, the missing samples are moved from the largest
    clients (random rows of theirs), which keeps every sample assigned exactly once.

    ``cap=True`` adds the balance rule of the FedMA/FedML implementation that IWDS and most FL papers ran:
    classes are dealt in label order, and a client already holding n/K samples or more gets no share of the
    next classes (the other clients' shares are renormalized), so no client ends above n/K plus one class.
    ``cap=False`` (the default) is the plain per-class Dirichlet split.

    ``size_sigma`` > 0 also makes the clients' sizes log-normal (FedSampling's size imbalance, Qi et al. 2023, with
    the label skew above): each client gets one weight exp(sigma z_k), z_k ~ N(0, 1), drawn once, which multiplies
    its share of every class (renormalised per class), so E[n_k] is proportional to the weight while each
    client's label mix stays Dirichlet. 0 (the default) is the plain split.
    """

    num_clients: int
    alpha: float
    min_size: int = 10
    max_tries: int = 100
    cap: bool = False
    size_sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"Dirichlet: num_clients must be >= 1, got {self.num_clients}")
        if not (self.size_sigma >= 0 and math.isfinite(self.size_sigma)):
            raise ValueError(f"Dirichlet: size_sigma must be >= 0 and finite, got {self.size_sigma}")
        if not (self.alpha > 0 and math.isfinite(self.alpha)):
            raise ValueError(f"Dirichlet: alpha must be > 0 and finite, got {self.alpha}")
        if self.min_size < 1:
            raise ValueError(f"Dirichlet: min_size must be >= 1 (a client without samples cannot train), got {self.min_size}")
        if self.max_tries < 1:
            raise ValueError(f"Dirichlet: max_tries must be >= 1, got {self.max_tries}")

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        y = _check_classification("Dirichlet", dataset)
        n, k = len(y), self.num_clients
        _refuse_more_clients_than_samples("Dirichlet", k, n)
        if k * self.min_size > n:
            raise ValueError(f"Dirichlet: {k} clients x min_size {self.min_size} = {k * self.min_size} exceeds {n} samples")
        by_class = [np.flatnonzero(y == c) for c in range(dataset.num_classes)]
        owner = np.empty(n, dtype=np.int64)
        weight = self.size_weights(rng)
        for _ in range(self.max_tries):
            sizes = np.zeros(k, dtype=np.int64)
            for rows in by_class:
                if len(rows) == 0:
                    continue
                rows = rng.permutation(rows)
                shares = rng.dirichlet(np.full(k, self.alpha))
                if weight is not None:
                    shares = shares * weight / np.sum(shares * weight)
                if self.cap:
                    shares = capped_shares(shares, sizes, n / k)
                counts = apportion(shares, len(rows))
                owner[rows] = np.repeat(np.arange(k), counts)
                sizes += counts
            if sizes.min() >= self.min_size:
                break
        else:
            self._repair(owner, sizes, rng)
        return _groups(owner, k)

    def size_weights(self, rng: np.random.Generator) -> np.ndarray | None:
        """The clients' log-normal size weights exp(sigma z - max), or None for the plain split (no draw then, so a
        plain split's partition is unchanged)."""
        if self.size_sigma == 0:
            return None
        z = self.size_sigma * rng.standard_normal(self.num_clients)
        return np.asarray(np.exp(z - z.max()), dtype=np.float64)

    def _repair(self, owner: np.ndarray, sizes: np.ndarray, rng: np.random.Generator) -> None:
        for client in np.flatnonzero(sizes < self.min_size):
            while sizes[client] < self.min_size:
                donor = int(np.argmax(sizes))
                take = min(self.min_size - sizes[client], sizes[donor] - self.min_size)
                moved = rng.choice(np.flatnonzero(owner == donor), size=take, replace=False)
                owner[moved] = client
                sizes[donor] -= take
                sizes[client] += take


def capped_shares(shares: np.ndarray, sizes: np.ndarray, limit: float) -> np.ndarray:
    """The FedMA/FedML balance rule: clients holding ``limit`` (n/K) samples or more get share 0, the others'
    shares renormalized to sum to 1 (unchanged shares if every eligible share is 0)."""
    kept = shares * (sizes < limit)
    total = kept.sum()
    return kept / total if total > 0 else shares


def _groups(owner: np.ndarray, k: int) -> list[np.ndarray]:
    """Row indices per client from a client id per row (each client's rows in increasing order)."""
    order = np.argsort(owner, kind="stable")
    return np.split(order, np.cumsum(np.bincount(owner, minlength=k))[:-1])


@dataclass(frozen=True)
class Shards:
    """McMahan et al.'s pathological non-IID split: sort the training rows by label, cut them into shards of
    ``shard_size`` consecutive rows and give each client ``shards_per_client`` random shards. The number of
    clients is n / (shard_size · shards_per_client). FedSampling's non-IID set-up is ``Shards(300, 1)``
    (MIND) and ``Shards(6000, 1)`` (EMNIST).

    The shard size must divide the number of training rows and the shards must divide among clients;
    otherwise it is an error, unless ``drop_remainder=True``, which leaves out the rows (chosen at random)
    that do not fill a whole client.
    """

    shard_size: int
    shards_per_client: int = 1
    drop_remainder: bool = False

    def __post_init__(self) -> None:
        if self.shard_size < 1:
            raise ValueError(f"Shards: shard_size must be >= 1, got {self.shard_size}")
        if self.shards_per_client < 1:
            raise ValueError(f"Shards: shards_per_client must be >= 1, got {self.shards_per_client}")

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        y = _check_classification("Shards", dataset)
        n, per_client = len(y), self.shard_size * self.shards_per_client
        if not self.drop_remainder:
            if n % self.shard_size:
                raise ValueError(f"Shards: shard_size {self.shard_size} does not divide the {n} training samples "
                                 f"(remainder {n % self.shard_size}); pass drop_remainder=True to leave those out")
            if (n // self.shard_size) % self.shards_per_client:
                raise ValueError(f"Shards: {n // self.shard_size} shards do not divide among clients of "
                                 f"{self.shards_per_client} shards; pass drop_remainder=True to leave the rest out")
        clients = n // per_client
        if clients < 1:
            raise ValueError(f"Shards: one client needs {per_client} samples; the dataset has {n}")
        kept = np.sort(rng.choice(n, size=clients * per_client, replace=False)) if clients * per_client < n else np.arange(n)
        kept = kept[rng.permutation(len(kept))]
        ordered = kept[np.argsort(y[kept], kind="stable")]  # by label, random order within a label
        shards = ordered.reshape(-1, self.shard_size)
        pick = rng.permutation(len(shards)).reshape(clients, self.shards_per_client)
        return [shards[row].reshape(-1) for row in pick]


@dataclass(frozen=True)
class LocalLongTail:
    """IWDS's local long-tail partition (Tang et al. 2021, §3.1): C clients for C classes; of every class c,
    client c gets the share ``alpha_l`` and each other client (1 − alpha_l)/(C − 1). alpha_l = 1/C is
    label-balanced; alpha_l = 1 gives each client a single class. Shares are rounded by largest remainder
    (:func:`apportion`) so that every sample is assigned exactly once. Where the rounding leaves a client
    without samples (tiny classes, or a class with no training rows) the partition is refused."""

    alpha_l: float

    def __post_init__(self) -> None:
        if not 0 < self.alpha_l <= 1:
            raise ValueError(f"LocalLongTail: alpha_l must be in (0, 1], got {self.alpha_l}")

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        y = _check_classification("LocalLongTail", dataset)
        c = dataset.num_classes
        if c < 2:
            raise ValueError(f"LocalLongTail: needs at least 2 classes, dataset {dataset.name!r} has {c}")
        owner = np.empty(len(y), dtype=np.int64)
        for label in range(c):
            rows = rng.permutation(np.flatnonzero(y == label))
            shares = np.full(c, (1.0 - self.alpha_l) / (c - 1))
            shares[label] = self.alpha_l
            owner[rows] = np.repeat(np.arange(c), apportion(shares, len(rows)))
        empty = np.flatnonzero(np.bincount(owner, minlength=c) == 0)
        if len(empty):
            raise ValueError(f"LocalLongTail: alpha_l={self.alpha_l} leaves {listed(empty, 'client')} without samples "
                             f"(class sizes {', '.join(str(v) for v in np.bincount(y, minlength=c)[:8])}"
                             f"{', ...' if c > 8 else ''}); expected enough samples per class for every client")
        return _groups(owner, c)


@dataclass(frozen=True, eq=False)
class Natural:
    """One client per user id: ``ids`` (one per training row) or, by default, the dataset's own
    ``meta[key]`` (Shakespeare's (play, speaker), the synthetic generators' agents). Clients are ordered by
    sorted id; ``FederatedData.user_ids`` holds the ids."""

    ids: np.ndarray | None = None
    key: str = "client_ids"

    def __repr__(self) -> str:
        return f"Natural(key={self.key!r})" if self.ids is None else f"Natural(ids=<{len(self.ids)} ids>)"

    def build(self, dataset: Dataset, rng: np.random.Generator) -> FederatedData:
        if self.ids is not None:
            ids, where = np.asarray(self.ids), "ids"
        elif self.key in dataset.meta:
            ids, where = np.asarray(dataset.meta[self.key]), f"meta[{self.key!r}]"
        else:
            raise ValueError(f"Natural: dataset {dataset.name!r} has no meta[{self.key!r}]; pass ids= (one user id per training row)")
        if ids.shape != (dataset.num_train,):
            raise ValueError(f"Natural: {where} has shape {ids.shape}; expected one id per training row ({dataset.num_train},)")
        users, codes = np.unique(ids, return_inverse=True)
        fed = FederatedData.from_assignment(dataset, codes.reshape(-1), len(users), scheme=repr(self))
        return FederatedData(dataset, fed.order, fed.offsets, scheme=fed.scheme, user_ids=users)


def partition(dataset: Dataset, scheme: AssignsRows | BuildsPartition, seed: int = 0) -> FederatedData:
    """Divide ``dataset``'s training split among clients according to ``scheme``.

    The result is checked (:func:`~fedsample.data.checks.check_partition`): every row at most once, no
    client without samples; a scheme that breaks this (a user's own ``assign``) is one ValueError naming
    the rows or clients."""
    if not isinstance(scheme, (AssignsRows, BuildsPartition)):  # a user's own scheme declares one of the two
        raise TypeError(f"unknown partition scheme {scheme!r}; expected IID, Dirichlet, Shards, LogNormalSizes, LocalLongTail or Natural")
    if dataset.num_train == 0:
        raise ValueError(f"partition {scheme!r}: dataset {dataset.name!r} has no training samples")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9A27]))
    if isinstance(scheme, BuildsPartition):
        fed = scheme.build(dataset, rng)
    else:
        fed = FederatedData.from_client_indices(dataset, scheme.assign(dataset, rng), scheme=repr(scheme))
    check_partition(f"partition {fed.scheme} of dataset {dataset.name!r}", fed.order, fed.offsets, dataset.num_train)
    return fed
