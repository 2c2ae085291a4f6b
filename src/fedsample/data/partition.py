"""Partitioners: each scheme is a frozen dataclass; ``partition`` turns it into a FederatedData."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsample.data.types import Dataset, FederatedData


@dataclass(frozen=True)
class IID:
    """Shuffle and cut into ``num_clients`` near-equal parts."""

    num_clients: int

    def __post_init__(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"IID: num_clients must be >= 1, got {self.num_clients}")

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        if self.num_clients > dataset.num_train:
            raise ValueError(f"IID: {self.num_clients} clients for {dataset.num_train} samples")
        return np.array_split(rng.permutation(dataset.num_train), self.num_clients)


@dataclass(frozen=True)
class LogNormalSizes:
    """FedSampling's size-imbalanced partition (Qi et al. 2023, §4.1): client sizes drawn proportional to
    LogNormal(0, sigma) and rescaled to the given mean; the number of clients is n_train / mean.
    Every client holds at least one sample and every sample is assigned exactly once."""

    mean: float = 2.0
    sigma: float = 4.0

    def __post_init__(self) -> None:
        if self.mean < 1:
            raise ValueError(f"LogNormalSizes: mean must be >= 1, got {self.mean}")
        if self.sigma < 0:
            raise ValueError(f"LogNormalSizes: sigma must be >= 0, got {self.sigma}")

    def sizes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        clients = max(1, int(round(n / self.mean)))
        weights = rng.lognormal(0.0, self.sigma, size=clients)
        spare = n - clients  # one sample each, the rest proportional to the log-normal weights
        shares = weights / weights.sum() * spare
        sizes = 1 + np.floor(shares).astype(np.int64)
        remainder = n - sizes.sum()
        sizes[np.argsort(shares - np.floor(shares))[::-1][:remainder]] += 1
        return sizes

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        sizes = self.sizes(dataset.num_train, rng)
        return np.split(rng.permutation(dataset.num_train), np.cumsum(sizes)[:-1])


def _check_classification(scheme: str, dataset: Dataset) -> np.ndarray:
    if dataset.task != "classification" or dataset.num_classes < 1:
        raise ValueError(f"{scheme}: needs class labels; dataset {dataset.name!r} is a {dataset.task} dataset")
    return np.asarray(dataset.y_train, dtype=np.int64)


def _largest_remainder(quotas: np.ndarray, total: int) -> np.ndarray:
    """Integers that sum to ``total`` and differ from the real ``quotas`` (which sum to ``total``) by < 1."""
    base = np.floor(quotas).astype(np.int64)
    short = total - int(base.sum())
    if short > 0:
        base[np.argsort(-(quotas - base), kind="stable")[:short]] += 1
    return base


@dataclass(frozen=True)
class Dirichlet:
    """Label-based Dirichlet partition ("LDA", Hsu et al. 2019, as used by FedMA, FedML and IWDS):
    for every class, the shares of its samples going to the ``num_clients`` clients are drawn from
    Dir(alpha·1); small alpha gives clients few dominant labels, large alpha near-IID label mixes.

    Every client is guaranteed ``min_size`` samples: the draw is repeated (up to ``max_tries`` times, as in
    FedML's implementation) and, if still short, the missing samples are moved from the largest clients
    (random rows of theirs), which keeps every sample assigned exactly once.

    ``cap=True`` adds the balance rule of the FedMA/FedML implementation that IWDS and most FL papers ran:
    classes are dealt in label order, and a client already holding n/K samples or more gets no share of the
    next classes (the other clients' shares are renormalized), so no client ends above n/K plus one class.
    ``cap=False`` (the default) is the plain per-class Dirichlet split.
    """

    num_clients: int
    alpha: float
    min_size: int = 10
    max_tries: int = 100
    cap: bool = False

    def __post_init__(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"Dirichlet: num_clients must be >= 1, got {self.num_clients}")
        if not self.alpha > 0:
            raise ValueError(f"Dirichlet: alpha must be > 0, got {self.alpha}")
        if self.min_size < 0:
            raise ValueError(f"Dirichlet: min_size must be >= 0, got {self.min_size}")
        if self.max_tries < 1:
            raise ValueError(f"Dirichlet: max_tries must be >= 1, got {self.max_tries}")

    def assign(self, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
        y = _check_classification("Dirichlet", dataset)
        n, k = len(y), self.num_clients
        if k > n:
            raise ValueError(f"Dirichlet: {k} clients for {n} samples")
        if k * self.min_size > n:
            raise ValueError(f"Dirichlet: {k} clients x min_size {self.min_size} = {k * self.min_size} exceeds {n} samples")
        by_class = [np.flatnonzero(y == c) for c in range(dataset.num_classes)]
        owner = np.empty(n, dtype=np.int64)
        for _ in range(self.max_tries):
            sizes = np.zeros(k, dtype=np.int64)
            for rows in by_class:
                if len(rows) == 0:
                    continue
                rows = rng.permutation(rows)
                shares = rng.dirichlet(np.full(k, self.alpha))
                if self.cap:
                    shares = capped_shares(shares, sizes, n / k)
                counts = _largest_remainder(shares * len(rows), len(rows))
                owner[rows] = np.repeat(np.arange(k), counts)
                sizes += counts
            if sizes.min() >= self.min_size:
                break
        else:
            self._repair(owner, sizes, rng)
        return _groups(owner, k)

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
    so that every sample is assigned exactly once."""

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
            owner[rows] = np.repeat(np.arange(c), _largest_remainder(shares * len(rows), len(rows)))
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


def partition(dataset: Dataset, scheme, seed: int = 0) -> FederatedData:
    """Divide ``dataset``'s training split among clients according to ``scheme``."""
    if not (hasattr(scheme, "assign") or hasattr(scheme, "build")):
        raise TypeError(f"unknown partition scheme {scheme!r}; expected IID, Dirichlet, Shards, LogNormalSizes, LocalLongTail or Natural")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9A27]))
    if hasattr(scheme, "build"):
        return scheme.build(dataset, rng)
    indices = scheme.assign(dataset, rng)
    return FederatedData.from_client_indices(dataset, indices, scheme=repr(scheme))
