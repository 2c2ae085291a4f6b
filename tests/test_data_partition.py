"""Partitioners: every sample assigned once (or as documented), sizes and label mixes as defined, seeds."""

import numpy as np
import pytest

from fedsample.data import (IID, Dataset, Dirichlet, LocalLongTail, LogNormalSizes, Natural, Shards, load_dataset,
                            partition)


def _toy(n_per_class=100, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), n_per_class)
    y = y[rng.permutation(len(y))]
    x = rng.standard_normal((len(y), 3)).astype(np.float32)
    return Dataset("toy", x, y.astype(np.int64), x[:5], y[:5].astype(np.int64), classes)


def _assert_exact_cover(fed):
    assert np.array_equal(np.sort(fed.order), np.arange(fed.dataset.num_train))


@pytest.mark.parametrize("scheme", [IID(7), Dirichlet(10, 0.3), Shards(50, 2), LogNormalSizes(5, 1.5), LocalLongTail(0.8)])
def test_every_sample_once_and_deterministic(scheme):
    ds = _toy()
    a, b, c = partition(ds, scheme, seed=1), partition(ds, scheme, seed=1), partition(ds, scheme, seed=2)
    _assert_exact_cover(a)
    np.testing.assert_array_equal(a.order, b.order)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    assert not np.array_equal(a.order, c.order)
    assert a.stats()["num_unassigned"] == 0


def test_iid():
    fed = partition(_toy(), IID(7))
    assert fed.num_clients == 7 and fed.sizes().max() - fed.sizes().min() <= 1
    with pytest.raises(ValueError, match="IID: 2000 clients for 1000 samples"):
        partition(_toy(), IID(2000))


def test_dirichlet_min_size_and_concentration_trend():
    ds = load_dataset("digits")
    shares = {}
    for alpha in (0.05, 0.5, 100.0):
        dom = []
        for seed in range(3):
            fed = partition(ds, Dirichlet(20, alpha, min_size=15), seed=seed)
            _assert_exact_cover(fed)
            assert fed.sizes().min() >= 15
            dom.append(fed.stats()["label_mix"]["mean_dominant_share"])
        shares[alpha] = np.mean(dom)
    assert shares[0.05] > shares[0.5] > shares[100.0]
    assert shares[100.0] < 0.2  # near the uniform 0.1 of 10 balanced classes


def test_dirichlet_repair_keeps_min_size():
    ds = _toy(n_per_class=30)
    fed = partition(ds, Dirichlet(30, 0.01, min_size=9, max_tries=1), seed=0)
    _assert_exact_cover(fed)
    assert fed.sizes().min() >= 9


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_clients=5, alpha=0), "alpha must be > 0"),
    (dict(num_clients=5, alpha=-1), "alpha must be > 0"),
    (dict(num_clients=0, alpha=1), "num_clients must be >= 1"),
])
def test_dirichlet_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Dirichlet(**kwargs)


def test_dirichlet_too_many_clients():
    with pytest.raises(ValueError, match="Dirichlet: 2000 clients for 1000 samples"):
        partition(_toy(), Dirichlet(2000, 1.0))
    with pytest.raises(ValueError, match="min_size 10 = 1000 exceeds 999"):
        ds = _toy()
        small = Dataset("s", ds.x_train[:999], ds.y_train[:999], ds.x_test, ds.y_test, 10)
        partition(small, Dirichlet(100, 1.0))


def test_shards_one_label_per_client():
    fed = partition(_toy(), Shards(shard_size=100, shards_per_client=1))
    assert fed.num_clients == 10
    counts = fed.label_counts()
    assert np.all((counts > 0).sum(axis=1) == 1) and np.all(counts.max(axis=1) == 100)


def test_shards_two_per_client():
    fed = partition(_toy(), Shards(shard_size=50, shards_per_client=2))
    assert fed.num_clients == 10 and np.all(fed.sizes() == 100)
    assert np.all((fed.label_counts() > 0).sum(axis=1) <= 2)


def test_shards_must_divide():
    with pytest.raises(ValueError, match="shard_size 300 does not divide the 1000 training samples \\(remainder 100\\)"):
        partition(_toy(), Shards(300))
    with pytest.raises(ValueError, match="10 shards do not divide among clients of 3 shards"):
        partition(_toy(), Shards(100, 3))
    fed = partition(_toy(), Shards(300, drop_remainder=True))
    assert fed.num_clients == 3 and len(fed.order) == 900 and len(np.unique(fed.order)) == 900
    assert fed.stats()["num_unassigned"] == 100
    with pytest.raises(ValueError, match="needs 3000 samples; the dataset has 1000"):
        partition(_toy(), Shards(1000, 3, drop_remainder=True))


def test_lognormal_sizes_mean_and_spread():
    ds = _toy(n_per_class=2000)  # 20,000 samples
    fed = partition(ds, LogNormalSizes(mean=50, sigma=1.0), seed=0)
    _assert_exact_cover(fed)
    sizes = fed.sizes()
    assert fed.num_clients == 400 and sizes.min() >= 1
    assert sizes.mean() == pytest.approx(50)
    assert 0.8 < np.log(sizes).std() < 1.2  # close to sigma
    wide = partition(ds, LogNormalSizes(mean=50, sigma=2.0), seed=0).stats()["imbalance"]["gini"]
    assert wide > fed.stats()["imbalance"]["gini"]


def test_lognormal_paper_setting():
    fed = partition(_toy(), LogNormalSizes(), seed=0)  # mean 2, sigma 4
    assert fed.num_clients == 500 and fed.sizes().min() == 1 and fed.sizes().sum() == 1000


@pytest.mark.parametrize("alpha_l", [0.1, 0.5, 0.9, 0.99, 1.0])
def test_llt_dominant_share(alpha_l):
    ds = _toy(n_per_class=200)
    fed = partition(ds, LocalLongTail(alpha_l))
    _assert_exact_cover(fed)
    counts = fed.label_counts()
    assert counts.shape == (10, 10)
    np.testing.assert_allclose(np.diag(counts), alpha_l * 200, atol=1)
    off = counts[~np.eye(10, dtype=bool)]
    np.testing.assert_allclose(off, (1 - alpha_l) / 9 * 200, atol=1)


def test_llt_validation():
    for bad in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match="alpha_l must be in \\(0, 1\\]"):
            LocalLongTail(bad)
    reg = load_dataset("isfedavg-regression", num_agents=3)
    with pytest.raises(ValueError, match="needs class labels"):
        partition(reg, LocalLongTail(0.9))


def test_natural_with_ids_and_errors():
    ds = _toy(n_per_class=3, classes=2)
    ids = np.array(["bob", "amy", "bob", "cy", "amy", "amy"])
    fed = partition(ds, Natural(ids=ids))
    assert list(fed.user_ids) == ["amy", "bob", "cy"]
    np.testing.assert_array_equal(fed.sizes(), [3, 2, 1])
    np.testing.assert_array_equal(fed.client_indices(0), [1, 4, 5])
    with pytest.raises(ValueError, match="has no meta\\['client_ids'\\]"):
        partition(ds, Natural())
    with pytest.raises(ValueError, match="expected one id per training row \\(6,\\)"):
        partition(ds, Natural(ids=ids[:4]))


def test_unknown_scheme():
    with pytest.raises(TypeError, match="unknown partition scheme"):
        partition(_toy(), "dirichlet")


def test_label_counts_and_client_of_row():
    fed = partition(_toy(), Dirichlet(5, 1.0))
    counts = fed.label_counts()
    np.testing.assert_array_equal(counts.sum(axis=1), fed.sizes())
    np.testing.assert_array_equal(counts.sum(axis=0), np.bincount(fed.dataset.y_train))
    owner = fed.client_of_row()
    for k in range(5):
        np.testing.assert_array_equal(np.flatnonzero(owner == k), np.sort(fed.client_indices(k)))


def test_capped_shares_zero_the_full_clients_and_renormalize():
    from fedsample.data.partition import capped_shares
    shares = np.array([0.5, 0.3, 0.2])
    np.testing.assert_allclose(capped_shares(shares, np.array([10, 0, 3]), limit=10), [0.0, 0.6, 0.4])
    np.testing.assert_allclose(capped_shares(shares, np.array([0, 0, 0]), limit=10), shares)
    # every eligible share 0: the draw is kept as it was rather than divided by zero
    np.testing.assert_allclose(capped_shares(np.array([1.0, 0.0]), np.array([10, 0]), limit=10), [1.0, 0.0])


def test_dirichlet_cap_bounds_client_sizes_like_fedml():
    """FedML's LDA (cap=True): a client stops receiving classes once it holds n/K, so none ends above
    n/K + one class (200); the plain split at alpha 0.1 exceeds that bound for some seed."""
    ds = _toy(n_per_class=200)
    limit = ds.num_train / 10 + 200
    capped = [partition(ds, Dirichlet(10, 0.1, cap=True), seed=s) for s in range(8)]
    plain = [partition(ds, Dirichlet(10, 0.1), seed=s) for s in range(8)]
    for fed in capped:
        _assert_exact_cover(fed)
        assert fed.sizes().max() <= limit and fed.sizes().min() >= 10
    assert max(fed.sizes().max() for fed in plain) > limit
    assert np.mean([f.stats()["label_mix"]["mean_dominant_share"] for f in capped]) > 0.5  # still label-skewed


def test_dirichlet_without_cap_keeps_its_numbers():
    """The sizes and first rows the plain split gave before ``cap`` existed (same seed, same draws)."""
    fed = partition(_toy(), Dirichlet(10, 0.3), seed=3)
    assert fed.sizes().tolist() == [159, 67, 93, 83, 92, 82, 73, 77, 170, 104]
    assert int(fed.order[:50].sum()) == 6505


def test_lognormal_sizes_use_the_lognormal_draws_as_logarithms():
    """The weights are rng.lognormal(0, sigma)'s draws, kept as logarithms: at an ordinary sigma the sizes
    are the largest-remainder apportionment of the plain log-normal weights (one sample each)."""
    from fedsample.data.partition import apportion

    for sigma in (0.5, 1.5, 4.0):
        sizes = LogNormalSizes(5, sigma).sizes(1000, np.random.default_rng(7))
        weights = np.random.default_rng(7).lognormal(0.0, sigma, 200)
        np.testing.assert_array_equal(sizes, apportion(weights, 1000, minimum=1))
        assert sizes.sum() == 1000 and sizes.min() >= 1


def test_dirichlet_with_log_normal_sizes_keeps_the_label_skew_and_spreads_the_sizes():
    """size_sigma > 0: each client's share of every class is scaled by one log-normal weight, so the sizes spread
    (a larger coefficient of variation than the plain split's, over seeds) while every sample is assigned once and
    every client keeps min_size; size_sigma = 0 draws nothing extra (the plain partition is unchanged)."""
    ds = _toy()
    n = len(ds.y_train)
    cv = lambda fed: float(np.std(fed.sizes()) / np.mean(fed.sizes()))  # noqa: E731
    plain = [partition(ds, Dirichlet(20, 1.0, min_size=5), seed=s) for s in range(6)]
    spread = [partition(ds, Dirichlet(20, 1.0, min_size=5, size_sigma=2.0), seed=s) for s in range(6)]
    for fed in spread:
        assert int(fed.sizes().sum()) == n and fed.sizes().min() >= 5
    assert np.mean([cv(f) for f in spread]) > 2 * np.mean([cv(f) for f in plain])
    again = partition(ds, Dirichlet(20, 1.0, min_size=5, size_sigma=0.0), seed=0)
    assert np.array_equal(again.sizes(), plain[0].sizes())
    with pytest.raises(ValueError, match="size_sigma"):
        Dirichlet(20, 1.0, size_sigma=-1.0)
