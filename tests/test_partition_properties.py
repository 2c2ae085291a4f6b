"""Partitions are always partitions (hypothesis), at the extremes of every parameter.

For every scheme, every dataset size and label mix, and every parameter it accepts — log-normal sigma up to
1e6, Dirichlet alpha from 1e-6 to 1e6, from one client to one client per sample — each sample is assigned at
most once, no client is empty, and the sizes sum to what the scheme promises, with numpy warnings and
floating-point errors turned into errors. Beyond what the data allow (more clients than samples, shards
larger than the data, a long tail that rounds a client to nothing) the scheme refuses with one line.
"""

import warnings
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fedsample.data import IID, Dataset, Dirichlet, LocalLongTail, LogNormalSizes, Natural, Shards, partition
from fedsample.data.partition import apportion

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEEDS = st.integers(0, 2**32 - 1)


@contextmanager
def strict():
    """Any numpy warning, overflow, invalid operation or division by zero is an error (underflow to 0 is exact
    enough for weights and stays allowed)."""
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        yield


@st.composite
def datasets(draw, max_n=150, max_classes=6):
    """A small classification dataset: n rows, labels drawn from C classes (some classes may be absent)."""
    n = draw(st.integers(1, max_n))
    classes = draw(st.integers(1, max_classes))
    y = np.array(draw(st.lists(st.integers(0, classes - 1), min_size=n, max_size=n)), dtype=np.int64)
    x = np.arange(n, dtype=np.float32)[:, None]
    return Dataset("prop", x, y, x[:1], y[:1], classes)


def partitioned(ds, scheme, seed):
    with strict():
        return partition(ds, scheme, seed=seed)


def assert_partition(fed, clients: int, total: int):
    """Every row at most once, no empty client, ``clients`` clients holding ``total`` rows."""
    assert fed.num_clients == clients
    assert len(fed.order) == total == int(fed.sizes().sum())
    assert len(np.unique(fed.order)) == total
    assert fed.order.min() >= 0 and fed.order.max() < fed.dataset.num_train
    assert fed.sizes().min() >= 1


def assert_refused(error: ValueError, *words: str):
    message = str(error)
    assert message and "\n" not in message and all(w in message for w in words), message


# --- the allocation every partitioner uses ----------------------------------------------------------

finite_weights = st.lists(st.floats(0, 1e308, allow_subnormal=True), min_size=1, max_size=80).filter(lambda w: max(w) > 0)


@PROPS
@given(w=finite_weights, total=st.integers(0, 10**7), minimum=st.integers(0, 3))
@example(w=[1.0, 1.0, 1.0], total=10, minimum=0)
@example(w=[1e308, 1e308, 5e-324], total=7, minimum=1)
def test_apportion_is_exact_in_integers(w, total, minimum):
    """Largest remainder: counts sum to the total exactly, every part its minimum, each within one of its
    quota, at any spread of the weights (from subnormal to the largest float)."""
    w = np.array(w)
    if total < minimum * len(w):
        with pytest.raises(ValueError, match="cannot give"):
            apportion(w, total, minimum)
        return
    with strict():
        counts = apportion(w, total, minimum)
    assert counts.dtype == np.int64 and int(counts.sum()) == total and counts.min() >= minimum
    scaled = w / w.max()
    quota = scaled / scaled.sum() * (total - minimum * len(w))
    assert np.all(np.abs(counts - minimum - quota) < 1 + 1e-9 * max(1, total))


def test_apportion_ties_go_to_the_lower_index_and_bad_weights_are_refused():
    assert apportion(np.ones(3), 10).tolist() == [4, 3, 3]
    assert apportion(np.array([0.0, 1.0]), 5, minimum=1).tolist() == [1, 4]
    for bad in ([np.nan, 1.0], [np.inf, 1.0], [-1.0, 2.0], [0.0, 0.0]):
        with pytest.raises(ValueError, match="weights must be finite, non-negative and not all zero"):
            apportion(np.array(bad), 5)


# --- IID -----------------------------------------------------------------------------------------------

@PROPS
@given(ds=datasets(), data=st.data(), seed=SEEDS)
def test_iid_from_one_client_to_one_per_sample_and_beyond(ds, data, seed):
    n = ds.num_train
    k = data.draw(st.integers(1, 2 * n + 2))
    if k > n:
        with pytest.raises(ValueError) as err:
            partitioned(ds, IID(k), seed)
        assert_refused(err.value, "IID", f"{k} clients for {n} samples")
        return
    fed = partitioned(ds, IID(k), seed)
    assert_partition(fed, k, n)
    assert fed.sizes().max() - fed.sizes().min() <= 1


# --- log-normal sizes ------------------------------------------------------------------------------------

sigmas = st.one_of(st.sampled_from([0.0, 5e-324, 1.0, 4.0, 30.0, 300.0, 1e3, 1e6, 1e300]), st.floats(0, 1e6))
means = st.one_of(st.sampled_from([1.0, 1.5, 2.0, 1e6, 1e300]), st.floats(1, 200))


@PROPS
@given(ds=datasets(), mean=means, sigma=sigmas, seed=SEEDS)
@example(ds=Dataset("d", np.zeros((1438, 1), np.float32), np.zeros(1438, np.int64), np.zeros((1, 1), np.float32),
                    np.zeros(1, np.int64), 1), mean=2.0, sigma=300.0, seed=0)
def test_lognormal_at_any_sigma_is_a_partition_of_every_sample(ds, mean, sigma, seed):
    n = ds.num_train
    fed = partitioned(ds, LogNormalSizes(mean, sigma), seed)
    assert_partition(fed, max(1, round(n / mean)), n)


@pytest.mark.parametrize("mean, sigma", [(0.5, 1.0), (float("nan"), 1.0), (float("inf"), 1.0), (2.0, -1.0),
                                         (2.0, float("nan")), (2.0, float("inf"))])
def test_lognormal_refuses_illegal_parameters(mean, sigma):
    with pytest.raises(ValueError) as err:
        LogNormalSizes(mean, sigma)
    assert_refused(err.value, "LogNormalSizes")


# --- Dirichlet -------------------------------------------------------------------------------------------

alphas = st.one_of(st.sampled_from([1e-6, 1e-3, 1.0, 1e3, 1e6]), st.floats(-6, 6).map(lambda e: 10.0**e))


@PROPS
@given(ds=datasets(), data=st.data(), alpha=alphas, cap=st.booleans(), seed=SEEDS)
def test_dirichlet_at_any_alpha_and_number_of_clients(ds, data, alpha, cap, seed):
    n = ds.num_train
    k = data.draw(st.integers(1, n + 3), label="clients")
    min_size = data.draw(st.integers(1, 4), label="min_size")
    scheme = Dirichlet(k, alpha, min_size=min_size, max_tries=data.draw(st.integers(1, 20), label="max_tries"), cap=cap)
    if k * min_size > n:
        with pytest.raises(ValueError) as err:
            partitioned(ds, scheme, seed)
        assert_refused(err.value, "Dirichlet", f"{n}")
        return
    fed = partitioned(ds, scheme, seed)
    assert_partition(fed, k, n)
    assert fed.sizes().min() >= min_size


@pytest.mark.parametrize("kwargs", [dict(alpha=0.0), dict(alpha=-1.0), dict(alpha=float("nan")), dict(alpha=float("inf")),
                                    dict(alpha=1.0, min_size=0), dict(alpha=1.0, max_tries=0)])
def test_dirichlet_refuses_illegal_parameters(kwargs):
    with pytest.raises(ValueError) as err:
        Dirichlet(5, **kwargs)
    assert_refused(err.value, "Dirichlet")


# --- shards ----------------------------------------------------------------------------------------------

@PROPS
@given(ds=datasets(), data=st.data(), per=st.integers(1, 6), drop=st.booleans(), seed=SEEDS)
def test_shards_give_whole_clients_or_refuse(ds, data, per, drop, seed):
    n = ds.num_train
    shard = data.draw(st.integers(1, n + 5), label="shard_size")
    try:
        fed = partitioned(ds, Shards(shard, per, drop_remainder=drop), seed)
    except ValueError as error:
        divides = n % shard == 0 and (n // shard) % per == 0
        assert (not drop and not divides) or n // (shard * per) == 0, str(error)
        assert_refused(error, "Shards")
        return
    clients = n // (shard * per)
    assert_partition(fed, clients, clients * shard * per)
    assert np.all(fed.sizes() == shard * per)


# --- local long tail -------------------------------------------------------------------------------------

alpha_ls = st.one_of(st.sampled_from([5e-324, 1e-6, 0.5, 1 - 1e-12, 1.0]), st.floats(0, 1, exclude_min=True))


@PROPS
@given(ds=datasets(max_classes=8), alpha_l=alpha_ls, seed=SEEDS)
def test_local_long_tail_gives_every_class_client_samples_or_refuses(ds, alpha_l, seed):
    n, c = ds.num_train, ds.num_classes
    try:
        fed = partitioned(ds, LocalLongTail(alpha_l), seed)
    except ValueError as error:
        assert_refused(error, "LocalLongTail")
        assert c < 2 or "without samples" in str(error)
        return
    assert_partition(fed, c, n)


def test_local_long_tail_with_enough_samples_per_class_is_never_refused():
    """Every class present with at least C rows: each client's own class gives it at least one row at
    alpha_l >= 1/C, and the others' shares at alpha_l < 1/C."""
    rng = np.random.default_rng(0)
    for c in (2, 3, 10):
        y = np.repeat(np.arange(c), c)
        ds = Dataset("d", np.zeros((len(y), 1), np.float32), y, np.zeros((1, 1), np.float32), y[:1], c)
        for alpha_l in (1e-9, 0.5 / c, 1.0 / c, 0.5, 0.999, 1.0):
            with strict():
                fed = partition(ds, LocalLongTail(alpha_l), seed=int(rng.integers(1 << 30)))
            assert_partition(fed, c, len(y))


# --- natural ---------------------------------------------------------------------------------------------

@PROPS
@given(ds=datasets(), data=st.data(), seed=SEEDS)
def test_natural_has_one_nonempty_client_per_distinct_id(ds, data, seed):
    n = ds.num_train
    ids = np.array(data.draw(st.lists(st.one_of(st.integers(-3, 3), st.just(10**18)), min_size=n, max_size=n)))
    fed = partitioned(ds, Natural(ids=ids), seed)
    assert_partition(fed, len(np.unique(ids)), n)
