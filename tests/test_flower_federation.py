"""FlowerFederation's handling of replies, against an in-process stand-in for Flower's Grid whose nodes run
fedsample's real ClientApp handler (``fedsample.flower.node.serve``): no reply in time, an error reply, a
malformed reply, a NaN update and a client without a node each become ``Failed`` in that client's slot and
in the round's log; a rejected NaN update is never averaged in (the round equals the in-process round in
which that client sent nothing); a healthy reply is never called missing because a pull blocked past the
deadline (the last pull after the deadline collects it)."""

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from flwr.app import Error, Message  # noqa: E402

from fedsample.messages import payloads_for  # noqa: E402
import fedsample as fs  # noqa: E402
from fedsample.messages import ProbeRequest, SizeQuery  # noqa: E402
from fedsample.federation.secure_sum import with_secure_sum  # noqa: E402
from fedsample.federation.simulator import Simulator  # noqa: E402
from fedsample.rounds import Replies  # noqa: E402
from fedsample.flower import FlowerFederation  # noqa: E402
from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower import federation as flower_federation  # noqa: E402
from fedsample.flower.node import scheme_for  # noqa: E402
from fedsample.rounds import Failed  # noqa: E402
from flower_grid import SETTINGS, FakeGrid  # noqa: E402

from flwr.supercore.task_identity import TaskIdentity  # noqa: E402


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """What a running ServerApp has set before it creates messages (Flower internals, test-only)."""
    for name in ("_run_id", "_task_id", "_node_id"):
        if hasattr(TaskIdentity, name):
            monkeypatch.setattr(TaskIdentity, name, 0)


def federation(faults: dict[int, str], nodes: int = 8) -> FlowerFederation:
    return FlowerFederation(FakeGrid(faults, nodes), {k: k for k in range(nodes)}, 8, seed=0, timeout=0.3)


def local_data(num_clients: int = 8):
    config = AppConfig.from_run_config({**SETTINGS, "num-clients": num_clients})
    dataset = fs.data.load_dataset("digits")
    fed = fs.data.partition(dataset, scheme_for(config, dataset.num_train), seed=0)
    return fed, fs.models.model_from_name("logreg").build(dataset.input_shape, dataset.num_classes)


def test_each_kind_of_bad_reply_is_a_named_failure_in_the_round_log():
    fed = FlowerFederation(FakeGrid({0: "silent", 1: "error", 2: "malformed"}, 7), {k: k for k in range(7)}, 8, 0, 0.3)
    replies = fed.run(np.arange(8), SizeQuery("exact"), round=0)
    data, _ = local_data()
    assert replies[3:7] == [len(data.client_indices(k)) for k in range(3, 7)]
    reasons = {f.client: f.reason for f in replies if isinstance(f, Failed)}
    assert set(reasons) == {0, 1, 2, 7}
    assert reasons[0].startswith("no reply within") and "out of memory" in reasons[1]
    assert reasons[2].startswith("rejected: field 'size'") and reasons[7] == "no node serves this client"
    assert [f.client for f in fed.failures[0]] == [0, 1, 2, 7]
    # the silent client is left out of the rest of the round without another wait
    again = fed.run(np.array([0, 3]), SizeQuery("exact"), round=0)
    assert again[0].reason.startswith("left out of this round") and again[1] == replies[3]


def test_flower_replies_are_a_plain_reply_list_naming_the_failed():
    replies = federation({0: "silent"}).run(np.arange(4), SizeQuery("exact"), round=0)
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
        def run(self, client_ids, payload, round):
            procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
            replies = super().run(client_ids, payload, round)
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
    sizes = federation({0: "silent"}).run(np.arange(4), SizeQuery("exact"), round=0)
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
        federation({}).run(np.array([1, 1]), SizeQuery("exact"), round=0)


class Clock:
    """Fake time for the federation's waits (no timed assertion: the test says what happens when)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class CutUploadGrid(FakeGrid):
    """A SuperNode killed while uploading its reply (node 0) and a healthy one (node 1) that answers 28 s after
    the request. The killed node's message reached the SuperLink at 5 s but its objects never complete: the pull
    that first meets it blocks until the SuperLink's object-push session expires (180 s), then returns Flower's
    error reply for it. The healthy reply is at the SuperLink from 28 s on."""

    def __init__(self, clock: Clock) -> None:
        super().__init__({}, num_nodes=2, settings={**SETTINGS, "num-clients": 2})
        self.clock = clock
        self.cut: Message | None = None

    def answer(self, m):
        if m.metadata.dst_node_id == 0:
            self.cut = m
            return None
        self.healthy = (m.metadata.message_id, super().answer(m))
        return None

    def pull_messages(self, ids):
        now, got = self.clock.now, []
        if self.cut is not None and now >= 5.0:
            self.clock.now = 5.0 + 180.0  # blocked in Flower's pull of the missing objects
            got.append(Message(Error(3, "Reply message objects are unavailable."), reply_to=self.cut))
            self.cut = None
        mid, reply = self.healthy
        if mid in ids and now >= 28.0:
            got.append(reply)
        return got


def test_a_reply_that_arrived_while_a_pull_blocked_past_the_deadline_is_not_called_missing(monkeypatch):
    """The deployment's "no reply within 60 s" for a client that replied at 28 s: a pull blocked on a killed
    node's cut-off upload ran past the deadline, and no pull followed. The last pull after the deadline finds
    the healthy reply; the killed node is named with Flower's error."""
    clock = Clock()
    monkeypatch.setattr(flower_federation, "time", clock)
    fed = FlowerFederation(CutUploadGrid(clock), {0: 0, 1: 1}, 2, seed=0, timeout=60.0)
    replies = fed.run(np.array([0, 1]), SizeQuery("exact"), round=0)
    assert replies[1] == len(local_data(num_clients=2)[0].client_indices(1))
    assert isinstance(replies[0], Failed) and "objects are unavailable" in replies[0].reason
    assert clock.now >= 185.0  # the pull did block past the 60 s deadline

