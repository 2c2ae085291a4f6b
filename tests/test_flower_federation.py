"""FlowerFederation's handling of replies, against an in-process stand-in for Flower's Grid whose nodes run
fedsample's real ClientApp handler (``fedsample.flower.node.serve``): no reply in time, an error reply, a
malformed reply, a NaN update and a client without a node each become ``Failed`` in that client's slot and
in the round's log; a rejected NaN update is never averaged in (the round equals the in-process round in
which that client sent nothing)."""

import json

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from flwr.app import ConfigRecord, Context, Error, Message, RecordDict  # noqa: E402

import fedsample as fs  # noqa: E402
from fedsample.messages import ProbeRequest, SizeQuery  # noqa: E402
from fedsample.federation.secure_sum import with_secure_sum  # noqa: E402
from fedsample.federation.simulator import Simulator  # noqa: E402
from fedsample.rounds import Replies  # noqa: E402
from fedsample.flower import FlowerFederation  # noqa: E402
from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.node import scheme_for, serve  # noqa: E402
from fedsample.rounds import Failed  # noqa: E402

from flwr.supercore.task_identity import TaskIdentity  # noqa: E402


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """What a running ServerApp has set before it creates messages (Flower internals, test-only)."""
    for name in ("_run_id", "_task_id", "_node_id"):
        if hasattr(TaskIdentity, name):
            monkeypatch.setattr(TaskIdentity, name, 0)


SETTINGS = {"dataset": "digits", "partition-args": json.dumps({"sigma": 1.0}), "model": "logreg", "num-clients": 8}


def nan_update(reply: Message) -> Message:
    arrays = reply.content.array_records.get("arrays")
    if arrays is not None:
        for k in list(arrays):
            arrays[k] = type(arrays[k])(np.full_like(arrays[k].numpy(), np.nan))
    return reply


class FakeGrid:
    """Delivers each message to node ``n`` (serving client n) at once; ``faults`` maps a node to what it
    does instead of answering normally: "silent", "error", "malformed" or "nan"."""

    def __init__(self, faults: dict[int, str], num_nodes: int = 8) -> None:
        self.faults, self.replies = faults, {}
        self.contexts = {n: Context(0, n, {"partition-id": n}, RecordDict(), SETTINGS) for n in range(num_nodes)}

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = m.object_id  # what Flower's grids do on push
            reply = self.answer(m)
            if reply is not None:
                self.replies[m.metadata.message_id] = reply
            ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, ids):
        return [self.replies.pop(i) for i in ids if i in self.replies]

    def answer(self, m: Message) -> Message | None:
        fault = self.faults.get(m.metadata.dst_node_id)
        if fault == "silent":
            return None
        if fault == "error":
            return Message(Error(500, "out of memory"), reply_to=m)
        if fault == "malformed":
            return Message(RecordDict({"report": ConfigRecord({"size": "many"})}), reply_to=m)
        reply = serve(m, self.contexts[m.metadata.dst_node_id], {})
        return nan_update(reply) if fault == "nan" else reply


def federation(faults: dict[int, str], nodes: int = 8) -> FlowerFederation:
    return FlowerFederation(FakeGrid(faults, nodes), {k: k for k in range(nodes)}, 8, seed=0, timeout=0.3)


def local_data():
    config = AppConfig.from_run_config(SETTINGS)
    dataset = fs.data.load_dataset("digits")
    fed = fs.data.partition(dataset, scheme_for(config, dataset.num_train), seed=0)
    return fed, fs.models.model_from_name("logreg").build(dataset.input_shape, dataset.num_classes)


def test_each_kind_of_bad_reply_is_a_named_failure_in_the_round_log():
    fed = FlowerFederation(FakeGrid({0: "silent", 1: "error", 2: "malformed"}, 7), {k: k for k in range(7)}, 8, 0, 0.3)
    replies = fed.run("report_size", np.arange(8), SizeQuery("exact"), round=0)
    data, _ = local_data()
    assert replies[3:7] == [len(data.client_indices(k)) for k in range(3, 7)]
    reasons = {f.client: f.reason for f in replies if isinstance(f, Failed)}
    assert set(reasons) == {0, 1, 2, 7}
    assert reasons[0].startswith("no reply within") and "out of memory" in reasons[1]
    assert reasons[2].startswith("rejected: field 'size'") and reasons[7] == "no node serves this client"
    assert [f.client for f in fed.failures[0]] == [0, 1, 2, 7]
    # the silent client is left out of the rest of the round without another wait
    again = fed.run("report_size", np.array([0, 3]), SizeQuery("exact"), round=0)
    assert again[0].reason.startswith("left out of this round") and again[1] == replies[3]


def test_flower_replies_are_a_plain_reply_list_naming_the_failed():
    replies = federation({0: "silent"}).run("report_size", np.arange(4), SizeQuery("exact"), round=0)
    assert type(replies) is Replies and list(replies.failed) == [0] and replies.failures() == [replies[0]]
    numbers = replies.numbers()
    assert np.isnan(numbers[0]) and numbers[1:].tolist() == list(replies[1:])


def test_a_nan_update_is_rejected_and_never_averaged_in():
    data, module = local_data()
    strategy = fs.recipes.fedsampling(K=200, epsilon=8.0, M=400, server_lr=0.5)
    params = fs.models.initial_parameters(module, 0)
    flower = federation({4: "nan"})
    got, log = strategy.round(with_secure_sum(flower), params, strategy.init_state(params), 0, seed=0)

    class WithoutClient4(Simulator):
        def run(self, procedure, client_ids, payload, round):
            replies = super().run(procedure, client_ids, payload, round)
            return [Failed(4, "train", "rejected") if (procedure == "train" and k == 4) else r for k, r in zip(client_ids, replies)]

    expected, reference_log = strategy.round(with_secure_sum(WithoutClient4(data, module, 0)), params, strategy.init_state(params), 0, seed=0)
    assert [(f.client, f.phase) for f in flower.failures[0]] == [(4, "train")]
    assert "non-finite" in flower.failures[0][0].reason
    assert log["updates"] == reference_log["updates"] == 7
    for k in got:
        assert torch.isfinite(got[k]).all()
        torch.testing.assert_close(got[k], expected[k], rtol=1e-5, atol=1e-6)


def test_a_silent_node_is_left_out_of_sizes_and_a_lost_probe_names_it():
    """What the strategy does with a node that never answers: its size report is a Failed reply (left out;
    the estimate is scaled by asked/answered), and a probe it misses is an error naming the client (the
    samplers that probe need every probed client's statistics)."""
    _, module = local_data()
    params = fs.models.initial_parameters(module, 0)
    sizes = federation({0: "silent"}).run("report_size", np.arange(4), SizeQuery("exact"), round=0)
    assert isinstance(sizes[0], Failed) and not any(isinstance(r, Failed) for r in sizes[1:])
    strategy = fs.recipes.fedsts(H=2, m=3, dim=3, lr=0.1)
    with pytest.raises(ValueError, match="client 0's probe is unusable"):
        strategy.round(federation({0: "silent"}), params, strategy.init_state(params), 1, seed=0)


def test_run_config_errors_are_one_line_naming_the_key():
    with pytest.raises(ValueError, match=r"unknown fedsample run-config keys \['rounds'\]"):
        AppConfig.from_run_config({"rounds": 3})
    with pytest.raises(ValueError, match=r"'recipe-args' must be a JSON object"):
        AppConfig.from_run_config({"recipe-args": "K=3"})
    assert AppConfig.from_run_config({"recipe-args": '{"K": 3}'}).recipe_args == {"K": 3}


def test_a_client_asked_twice_in_one_call_is_refused():
    with pytest.raises(ValueError, match="repeats"):
        federation({}).run("report_size", np.array([1, 1]), SizeQuery("exact"), round=0)
