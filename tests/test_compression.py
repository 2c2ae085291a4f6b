"""Client-side gradient compression for FedSTS/FedSTaS probes (fedsample.sampling.compression)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsample.sampling import compression as C
from fedsample.messages import ClientContext, ProbeRequest
from fedsample.client import probe
from fedsample.models import MLP, initial_parameters


def grad_dict(rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """A gradient shaped like an MLP's parameters (first layer "1.*", last layer "3.*")."""
    shapes = {"1.weight": (8, 5), "1.bias": (8,), "3.weight": (3, 8), "3.bias": (3,)}
    return {k: torch.as_tensor(rng.normal(size=s)) for k, s in shapes.items()}


# --- information squeeze --------------------------------------------------------------------------


def test_kmeans_1d_hand_case():
    values = np.array([10.0, 0.0, 1.0, 10.2, 0.2, 1.2, 9.8, 1.1])
    np.testing.assert_allclose(C.kmeans_1d(values, 3), [0.1, 1.1, 10.0], rtol=1e-12)


def test_kmeans_1d_is_a_fixed_point_of_lloyd():
    """Each centroid is the mean of the values nearest to it (a Lloyd fixed point), and sorted."""
    x = np.random.default_rng(0).standard_t(3, size=5000)
    c = C.kmeans_1d(x, 9)
    assert c.shape == (9,) and np.all(np.diff(c) > 0)
    nearest = np.argmin(np.abs(x[:, None] - c[None, :]), axis=1)
    for j in range(9):
        assert c[j] == pytest.approx(x[nearest == j].mean(), rel=1e-9, abs=1e-12)


def test_squeeze_is_sorted_and_permutation_invariant():
    rng = np.random.default_rng(1)
    g = rng.normal(size=400)
    a = C.information_squeeze(g, 9)
    b = C.information_squeeze(rng.permutation(g), 9)
    assert a.shape == (9,)
    assert np.all(np.diff(a) >= 0)
    np.testing.assert_array_equal(a, b)


def test_squeeze_of_a_parameter_dict_uses_every_coordinate():
    g = grad_dict(np.random.default_rng(2))
    flat = torch.cat([v.reshape(-1) for v in g.values()]).numpy()
    np.testing.assert_array_equal(C.information_squeeze(g, 4), C.kmeans_1d(flat, 4))


def test_squeeze_with_fewer_distinct_values_than_dim_repeats_centroids():
    c = C.information_squeeze(np.array([0.0, 0.0, 0.0, 2.0]), 3)
    assert c.shape == (3,)
    assert set(np.round(c, 12)) <= {0.0, 2.0}
    assert c[0] == 0.0 and c[-1] == 2.0


# --- random projection -----------------------------------------------------------------------------


def test_projection_is_deterministic_given_the_seed_and_uses_the_last_layer_only():
    rng = np.random.default_rng(3)
    g = grad_dict(rng)
    a = C.random_projection(g, 9, seed=42)
    assert a.shape == (9,)
    np.testing.assert_array_equal(a, C.random_projection(g, 9, seed=42))
    assert not np.allclose(a, C.random_projection(g, 9, seed=43))
    changed_first = dict(g, **{"1.weight": torch.zeros(8, 5)})
    np.testing.assert_array_equal(a, C.random_projection(changed_first, 9, seed=42))
    last = torch.cat([g["3.weight"].reshape(-1), g["3.bias"]]).numpy()
    np.testing.assert_allclose(a, C.projection_matrix(42, 9, last.size) @ last)


def test_last_layer_picks_the_last_module_prefix():
    g = {"0.0.weight": 1, "0.0.bias": 2, "1.weight": 3, "3.weight": 4, "3.bias": 5}
    assert list(C.last_layer(g)) == ["3.weight", "3.bias"]


def test_projection_preserves_squared_norm_in_expectation():
    """E||R g||^2 = ||g||^2 for R with N(0, 1/d') entries: over 400 seeds the mean is within 4 standard
    errors of ||g||^2 (d' = 9, so ||R g||^2 / ||g||^2 ~ chi^2_9 / 9 with sd sqrt(2/9))."""
    g = grad_dict(np.random.default_rng(4))
    target = float(sum((v**2).sum() for v in C.last_layer(g).values()))
    ratios = np.array([np.sum(C.random_projection(g, 9, seed=s) ** 2) / target for s in range(400)])
    se = np.sqrt(2 / 9) / np.sqrt(len(ratios))
    assert abs(ratios.mean() - 1) < 4 * se


# --- the probe procedure ---------------------------------------------------------------------------


def test_probe_returns_the_compressed_gradient_when_asked():
    module = MLP(hidden=4).build((5,), 3)
    params = initial_parameters(module, 0)
    rng = np.random.default_rng(5)
    ctx = ClientContext(0, torch.as_tensor(rng.normal(size=(20, 5)), dtype=torch.float32),
                        torch.as_tensor(rng.integers(0, 3, 20)), module, "classification", 3)
    plain = probe(ctx, ProbeRequest(params), rng)
    assert plain.compressed is None
    squeezed = probe(ctx, ProbeRequest(params, compression="squeeze", dim=5), rng)
    projected = probe(ctx, ProbeRequest(params, compression="projection", dim=7, projection_seed=11), rng)
    assert squeezed.compressed.shape == (5,) and np.all(np.diff(squeezed.compressed) >= 0)
    assert projected.compressed.shape == (7,)
    np.testing.assert_array_equal(projected.compressed, probe(ctx, ProbeRequest(params, compression="projection", dim=7, projection_seed=11), rng).compressed)


# --- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, -1, 1.5, True])
def test_bad_dimension(dim):
    with pytest.raises(ValueError, match="dimension d'"):
        C.compress(grad_dict(np.random.default_rng(0)), "squeeze", dim)


def test_bad_compression_name_and_values():
    g = grad_dict(np.random.default_rng(0))
    with pytest.raises(ValueError, match="compression must be one of"):
        C.compress(g, "zip", 9)
    with pytest.raises(ValueError, match="NaN"):
        C.information_squeeze(np.array([1.0, np.nan]), 2)
    with pytest.raises(ValueError, match="at least one value"):
        C.kmeans_1d(np.array([]), 2)
    with pytest.raises(ValueError, match="seed"):
        C.random_projection(g, 9, seed=-1)
