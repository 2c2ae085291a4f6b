"""Client-held state (ClientContext.state): it stays with its client across rounds in both in-process
federations, is exported and restored as copies, and a fresh run starts with empty client states."""

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from helpers import blobs, federate
from fedsample.simulation import Engine

SIZES = [5, 9, 4, 12, 7, 3]


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=60), SIZES)


def module_for(fed):
    return fs.models.LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)


@pytest.mark.parametrize("backend", [Simulator, VectorizedSimulator])
def test_state_stays_with_its_client(fed, backend):
    sim = backend(fed, module_for(fed), seed=0)
    sim.context(2).state["count"] = 1
    sim.context(4).state["count"] = 7
    sim.context(2).state["count"] += 1  # the same dict on every call
    assert sim.client_states() == {2: {"count": 2}, 4: {"count": 7}}
    assert sim.context(0).state == {} and 0 not in sim.client_states()  # empty states are not exported


def test_export_and_load_are_copies_and_load_replaces(fed):
    sim = Simulator(fed, module_for(fed), seed=0)
    sim.context(1).state["w"] = np.ones(3)
    exported = sim.client_states()
    exported[1]["w"][0] = 5.0
    assert sim.context(1).state["w"][0] == 1.0
    sim.load_client_states({3: {"w": np.zeros(2)}})
    assert sim.context(1).state == {}  # replaced, not merged
    other = Simulator(fed, module_for(fed), seed=0)
    other.load_client_states(sim.client_states())  # before the context exists: it gets the state when built
    np.testing.assert_array_equal(other.context(3).state["w"], np.zeros(2))


def test_a_reused_federation_starts_a_fresh_run_with_empty_client_states(fed):
    strategy = lambda: fs.recipes.isfedavg(L=3, batch_size=2, epochs=2, update="cheap", lr=0.1)  # noqa: E731
    model = fs.models.LogisticRegression()
    module = model.build(fed.dataset.input_shape, fed.dataset.num_classes)
    reused = Simulator(fed, module, seed=1)
    fs.simulate(strategy(), federated_data=fed, model=module, rounds=3, seed=1, engine=Engine(federation=reused))
    assert reused.client_states()  # the first run left client states behind
    again = fs.simulate(strategy(), federated_data=fed, model=module, rounds=3, seed=1, engine=Engine(federation=reused))
    fresh = fs.simulate(strategy(), federated_data=fed, model=module, rounds=3, seed=1, engine=Engine(backend="loop"))
    assert again.history == fresh.history
    for k in fresh.params:
        assert torch.equal(again.params[k], fresh.params[k])
