"""FederatedData stays one index array plus offsets and round-trips through its other forms."""

from __future__ import annotations

import numpy as np

from fedsample.data.types import FederatedData
from helpers import blobs


def test_round_trips_through_client_lists_and_assignment():
    ds = blobs(n=100)
    rng = np.random.default_rng(0)
    owner = rng.integers(-1, 7, ds.num_train)  # some rows held by nobody
    fed = FederatedData.from_assignment(ds, owner, 7)
    back = FederatedData.from_client_indices(ds, fed.to_client_indices())
    np.testing.assert_array_equal(back.order, fed.order)
    np.testing.assert_array_equal(back.offsets, fed.offsets)
    np.testing.assert_array_equal(fed.client_of_row(), np.where(owner >= 0, owner, -1))
    for k in range(7):
        np.testing.assert_array_equal(np.sort(fed.client_indices(k)), np.flatnonzero(owner == k))


def test_a_million_clients_is_two_arrays():
    ds = blobs(n=50)
    owner = np.random.default_rng(1).integers(0, 1_000_000, 2_000_000) % ds.num_train
    sizes = np.random.default_rng(2).integers(0, 4, 1_000_000)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    fed = FederatedData(ds, owner[: offsets[-1]], offsets)
    assert fed.num_clients == 1_000_000
    assert fed.order.nbytes + fed.offsets.nbytes <= 8 * (offsets[-1] + 1_000_001)
    np.testing.assert_array_equal(fed.sizes(), sizes)
    np.testing.assert_array_equal(fed.client_indices(123_456), owner[offsets[123_456] : offsets[123_457]])
