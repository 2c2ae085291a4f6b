"""Splitting clients over workers (no Ray needed): a shard holds exactly its clients' rows under the global
client numbering, and a cohort splits into every position once."""

import numpy as np
import torch

import fedsample as fs
from fedsample.federation.shards import as_range, assign_clients, positions_by_worker, shard_of
from fedsample.messages import TrainPayload
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.models import initial_parameters
from fedsample.sampling.data import AllSamples
from helpers import blobs, federate

SIZES = [5, 0, 9, 4, 12, 7, 3]


def test_a_shard_holds_its_clients_rows_and_nothing_else():
    fed = federate(blobs(n=60), SIZES)
    owner = assign_clients(fed.num_clients, 3)
    held = 0
    for w in range(3):
        shard = shard_of(fed, owner, w)
        assert shard.num_clients == fed.num_clients
        for k in range(fed.num_clients):
            x, y = shard.client_arrays(k)
            if owner[k] == w:
                want_x, want_y = fed.client_arrays(k)
                np.testing.assert_array_equal(x, want_x)
                np.testing.assert_array_equal(y, want_y)
            else:
                assert len(y) == 0
        held += shard.dataset.num_train
    assert held == sum(SIZES)  # every row held once


def test_cohort_positions_split_once_each_in_cohort_order():
    owner = assign_clients(10, 3)
    ids = np.array([7, 3, 3, 0, 9, 4, 1])  # repeated ids (with-replacement cohorts) keep their positions
    parts = positions_by_worker(ids, owner, 3)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(ids)))
    for w, part in enumerate(parts):
        assert np.all(owner[ids[part]] == w) and np.all(np.diff(part) > 0)


def test_the_engine_on_shards_reproduces_every_client_report():
    """Each client's report from its worker's shard equals the whole federation's (same streams)."""
    fed = federate(blobs(n=60), SIZES)
    module = fs.models.LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)
    whole = VectorizedSimulator(fed, module, seed=3)
    owner = assign_clients(fed.num_clients, 2)
    shards = [VectorizedSimulator(shard_of(fed, owner, w), module, seed=3) for w in range(2)]
    params = initial_parameters(module, 0)
    st = fs.recipes.fedavg(clients_per_round=7, epochs=2, batch_size=2, lr=0.1)
    payload = TrainPayload(params=params, plan=AllSamples(), solver=st.local, round=2)
    ids = np.arange(fed.num_clients)
    want = whole.run(ids, payload, 2)
    for k in ids:
        got = shards[owner[k]].run(np.array([k]), payload, 2)[0]
        if want[k] is None:
            assert got is None
            continue
        assert got.steps == want[k].steps and abs(got.loss - want[k].loss) < 1e-6
        for name in got.update:
            torch.testing.assert_close(got.update[name], want[k].update[name], rtol=1e-5, atol=1e-7)


def test_client_ids_travel_as_a_range_where_they_are_one():
    assert as_range(np.arange(3, 1_000_000, 4)) == range(3, 1_000_000, 4)
    ids = np.array([1, 2, 4])
    assert as_range(ids) is ids
    assert as_range(np.array([5, 5])) is not None and not isinstance(as_range(np.array([5, 5])), range)
    np.testing.assert_array_equal(np.asarray(as_range(np.arange(0, 10, 2)), dtype=np.int64), np.arange(0, 10, 2))


def test_the_server_reads_each_workers_answer_as_what_its_call_answers_and_refuses_another():
    """A worker's answers arrive unpickled (no declared type): the server reads a train call's as summaries, a partial
    sum as parameters or None, fetched updates as a list of them, held states by client id and other calls' as reply
    lists, each as it is; anything else is refused in one line naming the worker and the call."""
    import pytest

    from fedsample.federation import sharded
    from fedsample.rounds import NumberReplies

    summary = sharded.NO_SUMMARY
    assert sharded.answers_as({0: summary, 2: summary}, sharded.TrainSummary, "train") == {0: summary, 2: summary}
    with pytest.raises(TypeError, match="^worker 2's answer to train is a tuple, not a TrainSummary$"):
        sharded.answers_as({0: summary, 2: (np.zeros(0), np.zeros((0, 4)), [], [])}, sharded.TrainSummary, "train")
    update = {"w": torch.ones(2)}
    assert sharded.partial_sum(update, 0) is update and sharded.partial_sum(None, 0) is None
    with pytest.raises(TypeError, match="^worker 1's answer to weighted_update_sum is a dict, not parameters by name$"):
        sharded.partial_sum({"w": np.ones(2)}, 1)
    assert sharded.updates_of([update, update], 0) == [update, update]
    with pytest.raises(TypeError, match="^worker 0's answer to updates is a list, not a list of updates$"):
        sharded.updates_of([update, None], 0)
    states = {3: {"isfedavg": {"data_weights": np.ones(2)}}}
    assert sharded.states_of(states, 0) is states
    with pytest.raises(TypeError, match="^worker 1's answer to client_states is a dict, not states by client id$"):
        sharded.states_of({"3": {}}, 1)
    ordered = sharded.in_cohort_order({0: NumberReplies(np.array([4, 6])), 1: NumberReplies(np.array([5]))},
                                      [np.array([0, 2]), np.array([1])], 3, "report_size")
    assert isinstance(ordered, NumberReplies) and ordered.values.tolist() == [4, 5, 6]
    with pytest.raises(TypeError, match="^worker 1's answer to report_size is a list, not a reply list$"):
        sharded.in_cohort_order({0: NumberReplies(np.array([4, 6])), 1: [5]}, [np.array([0, 2]), np.array([1])], 3, "report_size")
