"""SecAgg+ on Flower (fedsample.flower.secagg): a secure-sum strategy's ``train`` goes through Flower's own
SecAgg+ workflow and client mod, against an in-process Grid whose nodes run the whole ClientApp (mods
included) on copies of the messages rebuilt from their serialized objects.

- The sum equals the in-process ``SecureSum`` round (the reference) within SecAgg+'s quantization: each
  client's contribution to a coordinate is off by less than one quantum 2c/T (c = 8, T = 2**22: 3.8e-6), so
  the n-client sum by less than n quanta; the tally's integers (clients that stepped, drawn samples) exactly.
- What the ServerApp received is masked: no array leaves a client in clear, and no client's masked vector is
  related to its vector (|correlation| < 0.1 with its quantized vector, where the vector itself has
  correlation 1).
- Dropouts inside the reconstruction threshold: a client lost at setup, share-keys or collect-masked-vectors
  is left out of the sum and named (the round equals the in-process round without it); one lost at unmask is
  recovered from its neighbours' shares (its vector stays in the sum). Past the threshold the round has no sum
  and keeps its parameters.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from flwr.app import Context, RecordDict  # noqa: E402
from flwr.common import bytes_to_ndarray  # noqa: E402
from flwr.common.secure_aggregation.quantization import quantize  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

import fedsample as fs  # noqa: E402
from fedsample.checks import ParameterError  # noqa: E402
from fedsample.federation.secure_sum import with_secure_sum  # noqa: E402
from fedsample.federation.simulator import Simulator  # noqa: E402
from fedsample.flower import FlowerFederation  # noqa: E402
from fedsample.flower.codec import decode_request  # noqa: E402
from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.node import answer, scheme_for  # noqa: E402
from fedsample.flower.secagg import TALLY, SecAggPlus, sealed_vector, unpack_sum  # noqa: E402
from fedsample.rounds import Failed  # noqa: E402
from flower_grid import SETTINGS, FakeGrid, stage_of, transported  # noqa: E402

NODES = 8
SETTING = SecAggPlus()  # Flower's quantization defaults; every client a neighbour; threshold half the shares (4)


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """What a running ServerApp has set before it creates messages (Flower internals, test-only)."""
    for name in ("_run_id", "_task_id", "_node_id"):
        if hasattr(TaskIdentity, name):
            monkeypatch.setattr(TaskIdentity, name, 0)


@pytest.fixture(scope="module")
def setup():
    config = AppConfig.from_run_config(SETTINGS)
    dataset = fs.data.load_dataset("digits")
    data = fs.data.partition(dataset, scheme_for(config, dataset.num_train), seed=0)
    module = fs.models.model_from_name("logreg").build(dataset.input_shape, dataset.num_classes)
    return data, module, fs.models.initial_parameters(module, 0)


def fedsampling(**kwargs):
    # count_noise=0: SecAgg+ here does not add the noise on the drawn count (sealed_train refuses it)
    return fs.recipes.fedsampling(K=200, epsilon=8.0, M=400, server_lr=0.5, count_noise=0.0, **kwargs)


class WithoutClients(Simulator):
    """The in-process federation in which ``gone`` fail their train reply (the reference for dropouts)."""

    def __init__(self, data, module, gone):
        super().__init__(data, module, 0)
        self.gone = set(gone)

    def run(self, procedure, client_ids, payload, round):
        replies = super().run(procedure, client_ids, payload, round)
        return [Failed(k, "train", "gone") if procedure == "train" and k in self.gone else r for k, r in zip(client_ids, replies)]


def secagg_round(strategy, params, faults, setting=SETTING):
    grid = FakeGrid(faults, NODES)
    flower = FlowerFederation(grid, {k: k for k in range(NODES)}, NODES, seed=0, timeout=0.3, secure=setting)
    got, log = strategy.round(flower, params, strategy.init_state(params), 0, seed=0)
    return got, log, flower, grid


def reference_round(strategy, params, data, module, gone=()):
    return strategy.round(with_secure_sum(WithoutClients(data, module, gone)), params, strategy.init_state(params), 0, seed=0)


def assert_within_secagg_tolerance(got, want, summed, server_lr):
    """Parameters after one step of server_lr * (sum): off by at most server_lr * summed quanta (and float32)."""
    bound = server_lr * SETTING.tolerance(summed) + 1e-6
    for k in got:
        assert float(torch.max(torch.abs(got[k] - want[k]))) <= bound, (k, bound)


@pytest.mark.parametrize("normalize", ["K", "drawn"])
def test_the_secagg_sum_equals_the_in_process_secure_sum(setup, normalize):
    data, module, params = setup
    strategy = fedsampling(normalize=normalize)
    got, log, flower, _ = secagg_round(strategy, params, {})
    want, reference = reference_round(strategy, params, data, module)
    record = flower.secure_rounds[0]
    assert record["summed"] == NODES and record["dropped"] == {} and record["clipped"] == 0
    assert log["updates"] == reference["updates"]  # the clients that stepped: an exact integer of the sum
    assert log["train_loss"] == pytest.approx(reference["train_loss"], abs=NODES * SETTING.quantum * 16)  # loss / 16 in the tally
    if normalize == "drawn":
        assert log["samples"] == reference["samples"]  # the drawn count, exact
    assert_within_secagg_tolerance(got, want, NODES, 0.5)
    moved = max(float(torch.max(torch.abs(want[k] - params[k]))) for k in want)
    assert moved > 100 * SETTING.tolerance(NODES)  # the step is far larger than the tolerance


def test_the_server_received_masked_vectors_only(setup):
    """Everything the ServerApp pulled during the round: no array record with content, and each client's
    masked vector bears no relation to its own vector (computed here on the client's side)."""
    data, module, params = setup
    strategy = fedsampling()
    _, _, flower, grid = secagg_round(strategy, params, {})
    collected = [m for m in grid.pulled if not m.has_error() and RECORD_KEY_CONFIGS in m.content.config_records
                 and Key.MASKED_PARAMETERS in m.content.config_records[RECORD_KEY_CONFIGS]]
    assert len(collected) == NODES
    assert all(len(a) == 0 for m in grid.pulled if not m.has_error() for a in m.content.array_records.values())
    requests = {m.metadata.dst_node_id: m for m in grid.sent_requests}
    for reply in collected:
        node = reply.metadata.src_node_id
        masked = np.concatenate([bytes_to_ndarray(b).ravel() for b in reply.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]][1:])
        request = transported(requests[node])
        _, report = answer(request, Context(0, node, {"partition-id": node}, RecordDict(), SETTINGS), {})
        own = sealed_vector(report, decode_request(request.content).payload.params, SETTING.clipping_range)
        quantized = np.concatenate([q.ravel() for q in quantize(own, SETTING.clipping_range, SETTING.quantization_range)]).astype(np.float64)
        assert abs(np.corrcoef(quantized, masked.astype(np.float64))[0, 1]) < 0.1
        assert np.corrcoef(quantized, np.concatenate([a.ravel() for a in own]))[0, 1] > 0.99  # the check can see a relation


@pytest.fixture(autouse=True)
def keep_requests(monkeypatch):
    """FakeGrid keeps the collect-masked-vectors requests it delivered (what each client trained on)."""
    original = FakeGrid.answer

    def answer_and_keep(self, m):
        if stage_of(m) == "collect_masked_vectors":
            self.__dict__.setdefault("sent_requests", []).append(m)
        return original(self, m)

    monkeypatch.setattr(FakeGrid, "answer", answer_and_keep)


def test_dropouts_inside_the_threshold_are_left_out_or_recovered(setup):
    """8 clients, threshold 4: client 6 lost at setup, 1 at share-keys, 5 at collect-masked-vectors (left out
    and named), 3 at unmask (its vector is in the sum, its masks removed from its neighbours' shares)."""
    data, module, params = setup
    strategy = fedsampling()
    faults = {6: "silent@setup", 1: "silent@share_keys", 5: "silent@collect_masked_vectors", 3: "silent@unmask"}
    got, log, flower, _ = secagg_round(strategy, params, faults)
    want, reference = reference_round(strategy, params, data, module, gone={1, 5, 6})
    record = flower.secure_rounds[0]
    assert record["summed"] == 5 and sorted(record["dropped"]) == [1, 5, 6] and sorted(record["recovered"]) == [3]
    assert "share-keys stage" in record["dropped"][1] and "setup stage" in record["dropped"][6]
    assert "collect-masked-vectors stage" in record["dropped"][5]
    assert sorted((f.client, f.phase) for f in flower.failures[0]) == [(1, "train"), (5, "train"), (6, "train")]
    assert log["updates"] == reference["updates"] == 5
    assert_within_secagg_tolerance(got, want, 5, 0.5)


def test_a_nan_update_is_not_sent_and_counts_as_a_dropout(setup):
    data, module, params = setup
    strategy = fedsampling()
    got, log, flower, _ = secagg_round(strategy, params, {4: "nan"})
    want, _ = reference_round(strategy, params, data, module, gone={4})
    assert [f.client for f in flower.failures[0]] == [4] and "non-finite" in flower.failures[0][0].reason
    assert_within_secagg_tolerance(got, want, NODES - 1, 0.5)


def test_past_the_threshold_the_round_has_no_sum_and_keeps_its_parameters(setup):
    _, _, params = setup
    faults = {k: "silent@collect_masked_vectors" for k in range(5)}  # 3 left: each has 3 < 4 live neighbours
    got, log, flower, _ = secagg_round(fedsampling(), params, faults)
    assert log["params_unchanged"] == "no valid update arrived"
    assert all(torch.equal(got[k], params[k]) for k in params)
    assert len(flower.failures[0]) == NODES
    assert any("reconstruction threshold 4" in f.reason for f in flower.failures[0])


def test_a_vector_outside_the_clipping_range_is_counted(setup):
    _, _, params = setup
    _, _, flower, _ = secagg_round(fedsampling(), params, {}, SecAggPlus(clipping_range=1e-4))
    assert flower.secure_rounds[0]["clipped"] > 0


def test_weights_that_differ_between_clients_are_refused(setup):
    _, _, params = setup
    strategy = dataclasses.replace(fs.recipes.fedavg(clients_per_round=8, epochs=1, batch_size=8, lr=0.1), secure_sum=True)
    flower = FlowerFederation(FakeGrid({}, NODES), {k: k for k in range(NODES)}, NODES, seed=0, timeout=0.3, secure=SETTING)
    with pytest.raises(ValueError, match="weights must be the same for every client"):
        strategy.round(flower, params, strategy.init_state(params), 0, seed=0)


def test_the_tally_round_trips_its_integers_exactly():
    params = {"w": torch.zeros(3)}

    class Report:
        update, steps, loss, samples = {"w": torch.tensor([0.5, -0.25, 1e-3])}, 1, 2.5, 1_234_567

    vector = sealed_vector(Report(), params, 8.0)
    assert len(vector[-1]) == len(TALLY) and np.all(np.abs(np.concatenate(vector)) <= 8.0)
    total = [3 * a for a in vector]  # three such clients
    summed = unpack_sum(total, params, 8.0, 3)
    assert summed.drawn == 3 * 1_234_567 and summed.stepped == 3 and summed.clipped == 0
    assert summed.loss == pytest.approx(7.5) and torch.allclose(summed.update["w"], 3 * Report.update["w"])


@pytest.mark.parametrize("setting", [{"num_shares": 2}, {"reconstruction_threshold": 0}, {"clipping_range": -1.0},
                                     {"modulus_range": 3 * 2**20}, {"quantization_range": 2**32}])
def test_bad_settings_are_one_line(setting):
    with pytest.raises(ParameterError) as error:
        SecAggPlus(**setting)
    assert "\n" not in str(error.value) and next(iter(setting)) in str(error.value)
