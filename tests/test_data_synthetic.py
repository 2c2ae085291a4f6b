"""The papers' synthetic datasets: ISFedAvg's regression and FedProx's Synthetic(α, β)."""

import numpy as np
import pytest

from fedsample.data import Natural, load_dataset, msd_db, partition
from fedsample.data.synthetic import fedprox_synthetic, isfedavg_regression


def test_isfedavg_shapes_and_clients():
    ds = load_dataset("isfedavg-regression")
    assert ds.task == "regression" and ds.num_classes == 0
    assert ds.x_train.shape == (300 * 100, 2) and ds.y_train.dtype == np.float32
    np.testing.assert_array_equal(np.bincount(ds.meta["client_ids"]), [100] * 300)
    fed = partition(ds, Natural())
    assert fed.num_clients == 300 and set(fed.sizes()) == {100}


def test_isfedavg_closed_form_is_the_regularized_optimum():
    ds = isfedavg_regression(num_agents=7, points_per_agent=[5, 9, 20, 3, 11, 8, 40], rho=0.05, seed=3)
    u, d, ids = ds.x_train.astype(np.float64), ds.y_train.astype(np.float64), ds.meta["client_ids"]
    # gradient of (1/K) Σ_k [(1/N_k) Σ_n |d - u w|² + ρ|w|²] at w° must vanish (computed on the float64 draws)
    w = ds.meta["w_opt"]
    n_k = np.bincount(ids)[ids]
    grad = -2 * ((d - u @ w) / n_k) @ u / 7 + 2 * 0.05 * w
    np.testing.assert_allclose(grad, 0, atol=1e-5)
    assert np.linalg.norm(ds.meta["w_opt"] - ds.meta["w_star"]) < 0.5


def test_msd_db():
    assert msd_db(np.array([1.0, 0.0]), np.zeros(2)) == pytest.approx(0.0)
    np.testing.assert_allclose(msd_db(np.array([[0.1, 0.0], [0.0, 0.01]]), np.zeros(2)), [-20.0, -40.0])


def test_isfedavg_deterministic_and_validated():
    a, b = isfedavg_regression(num_agents=3, seed=1), isfedavg_regression(num_agents=3, seed=1)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.x_train, isfedavg_regression(num_agents=3, seed=2).x_train)
    with pytest.raises(ValueError, match="points_per_agent >= 1"):
        isfedavg_regression(num_agents=2, points_per_agent=[3, 0])


def test_fedprox_synthetic():
    ds = load_dataset("fedprox-synthetic", alpha=1, beta=1)
    assert ds.name == "fedprox-synthetic(1,1)" and ds.num_classes == 10 and ds.input_shape == (60,)
    sizes = ds.meta["device_sizes"]
    assert len(sizes) == 30 and sizes.min() >= 50
    train_per_device = np.bincount(ds.meta["client_ids"], minlength=30)
    np.testing.assert_array_equal(train_per_device, (0.9 * sizes).astype(int))
    assert len(ds.y_test) == sizes.sum() - train_per_device.sum()
    fed = partition(ds, Natural())
    assert fed.num_clients == 30


def test_fedprox_heterogeneity_grows_with_alpha_beta():
    """Local label mixes differ more between devices for Synthetic(1,1) than for Synthetic(0,0) and IID."""
    def mean_tv(ds):
        fed = partition(ds, Natural())
        return fed.stats()["label_mix"]["mean_tv_to_global"]
    iid = mean_tv(fedprox_synthetic(iid=True, seed=0))
    hetero = np.mean([mean_tv(fedprox_synthetic(1, 1, seed=s)) for s in range(3)])
    assert iid < hetero


def test_fedprox_validation():
    with pytest.raises(ValueError, match="alpha and beta must be >= 0"):
        fedprox_synthetic(alpha=-1)
