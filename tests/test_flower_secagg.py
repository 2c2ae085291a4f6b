"""SecAgg+ on Flower (fedsample.flower.secagg): a secure-sum strategy's ``train`` goes through Flower's own
SecAgg+ workflow and client mod, against an in-process Grid whose nodes run the whole ClientApp (mods
included) on copies of the messages rebuilt from their serialized objects.

- The sum equals the in-process ``SecureSum`` round (the reference) within SecAgg+'s quantization: each
  client's contribution to a coordinate is off by less than one quantum 2c/T (c = 8, T = 2**22: 3.8e-6), so
  the n-client sum by less than n quanta; the tally's integers (clients that stepped, drawn samples) exactly.
- FedSampling's default noise on the drawn count (sigma_S = 5): each client seals its count plus its share, so
  the noised count equals the in-process one within n count quanta 2 * 2**16 / 2**22 (0.031 samples each), with
  and without dropouts (the shares of exactly the clients in the sum); its noise has variance sigma_S^2 a / m
  (Monte Carlo through the clients' sealing, quantization and unpacking); the ledger records that variance.
- What the ServerApp received is masked: no array leaves a client in clear, and no client's masked vector is
  related to its vector (|correlation| < 0.1 with its quantized vector, where the vector itself has
  correlation 1).
- Dropouts inside the reconstruction threshold: a client lost at setup, share-keys or collect-masked-vectors
  is left out of the sum and named (the round equals the in-process round without it); one lost at unmask is
  recovered from its neighbours' shares (its vector stays in the sum). Past the threshold the round has no sum
  and keeps its parameters.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

from flwr.app import Context, RecordDict  # noqa: E402
from flwr.common import bytes_to_ndarray  # noqa: E402
from flwr.common.secure_aggregation.quantization import dequantize, quantize  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedsample.messages import payloads_for  # noqa: E402
import fedsample as fs  # noqa: E402
from fedsample.checks import ParameterError  # noqa: E402
from fedsample.federation.secure_sum import SIZE_NOISE_PURPOSE, count_shares, with_secure_sum  # noqa: E402
from fedsample.sampling.data import COUNT_NOISE_PURPOSE, DRAWN  # noqa: E402
from fedsample.federation.simulator import Simulator  # noqa: E402
from fedsample.flower import FlowerFederation  # noqa: E402
from fedsample.flower.codec import decode_request  # noqa: E402
from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.node import answer, scheme_for  # noqa: E402
from fedsample.flower import federation as flower_federation, secagg  # noqa: E402
from fedsample.flower.secagg import SEALED, TALLY, SecAggPlus, count_share_of, sealed_vector, unpack_sum  # noqa: E402
from fedsample.privacy.ledger import Accounting, Ledger, gaussian, poisson_sampled  # noqa: E402
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
    """The library protocol by default: the self-normalized update, noise sigma_S = 5 on the drawn count."""
    return fs.recipes.fedsampling(K=200, epsilon=8.0, M=400, server_lr=0.5, **kwargs)


class WithoutClients(Simulator):
    """The in-process federation in which ``gone`` fail their train reply (the reference for dropouts)."""

    def __init__(self, data, module, gone):
        super().__init__(data, module, 0)
        self.gone = set(gone)

    def run(self, client_ids, payload, round):
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        replies = super().run(client_ids, payload, round)
        return [Failed(k, "train", "gone") if procedure == "train" and k in self.gone else r for k, r in zip(client_ids, replies)]


def secagg_round(strategy, params, faults, setting=SETTING, ledger=None):
    grid = FakeGrid(faults, NODES)
    flower = FlowerFederation(grid, {k: k for k in range(NODES)}, NODES, seed=0, timeout=0.3, secure=setting)
    state = strategy.init_state(params)
    if ledger is not None:
        state["privacy"] = ledger
    got, log = strategy.round(flower, params, state, 0, seed=0)
    return got, log, flower, grid


def reference_round(strategy, params, data, module, gone=()):
    return strategy.round(with_secure_sum(WithoutClients(data, module, gone)), params, strategy.init_state(params), 0, seed=0)


def assert_within_secagg_tolerance(got, want, summed, server_lr, params=None, samples=None):
    """Parameters after one step of server_lr * (sum) / S: off by at most server_lr * summed quanta (and float32);
    with a noised count S (``samples``, the step's ``params`` before it), also by the step times the count's
    relative error, summed count quanta / S."""
    bound = server_lr * SETTING.tolerance(summed) + 1e-6
    if samples is not None:
        step = max(float(torch.max(torch.abs(want[k] - params[k]))) for k in want)
        bound += step * SETTING.count_tolerance(summed) / (samples - SETTING.count_tolerance(summed))
    for k in got:
        assert float(torch.max(torch.abs(got[k] - want[k]))) <= bound, (k, bound)


@pytest.mark.parametrize("kwargs", [{"normalize": "K"}, {"normalize": "drawn", "count_noise": 0.0}, {}],
                         ids=["K", "drawn-exact", "library-noised"])
def test_the_secagg_sum_equals_the_in_process_secure_sum(setup, kwargs):
    data, module, params = setup
    strategy = fedsampling(**kwargs)
    got, log, flower, _ = secagg_round(strategy, params, {})
    want, reference = reference_round(strategy, params, data, module)
    record = flower.secure_rounds[0]
    assert record["summed"] == NODES and record["dropped"] == {} and record["clipped"] == 0
    assert log["updates"] == reference["updates"]  # the clients that stepped: an exact integer of the sum
    assert log["train_loss"] == pytest.approx(reference["train_loss"], abs=NODES * SETTING.quantum * 16)  # loss / 16 in the tally
    noised = strategy.data.count_noise > 0
    if kwargs.get("normalize") == "drawn":
        assert log["samples"] == reference["samples"] and "count_tolerance" not in record  # the drawn count, exact
    if noised:  # the same shares, sealed on the clients: within 8 count quanta of the in-process noised count
        assert record["count_tolerance"] == SETTING.count_tolerance(NODES) == pytest.approx(8 * 2 * 2**16 / 2**22)
        assert log["samples"] == pytest.approx(reference["samples"], abs=record["count_tolerance"])
        _, exact = reference_round(fedsampling(count_noise=0.0), params, data, module)  # the same draws, S exact
        shares = count_shares(5.0, NODES, 0, 0, np.arange(NODES), COUNT_NOISE_PURPOSE)  # each client's, drawn here from its stream
        assert log["samples"] == pytest.approx(exact["samples"] + shares.sum(), abs=record["count_tolerance"])
        assert abs(shares.sum()) > 2 * record["count_tolerance"]  # leaving the shares out would fail the check
    assert_within_secagg_tolerance(got, want, NODES, 0.5, params, log["samples"] if noised else None)
    moved = max(float(torch.max(torch.abs(want[k] - params[k]))) for k in want)
    assert moved > 100 * SETTING.tolerance(NODES)  # the step is far larger than the tolerance


def test_the_summed_sizes_go_through_secagg_as_the_drawn_count_does(setup):
    """The default's count-only request (``sum_sizes``, before the first draw) inside SecAgg+: each client seals its
    size plus its share of N(0, 5^2 / 8) from the total-size cell (independent of the drawn count's), so the released
    total N^ equals the in-process secure sum's within 8 count quanta, and N plus the clients' shares; the request
    went to every node (no size report was asked) and the round draws with K / N^."""
    data, module, params = setup
    strategy = fs.recipes.fedsampling(K=200, server_lr=0.5)
    assert strategy.sizes is None
    got, log, flower, _ = secagg_round(strategy, params, {})
    want, reference = reference_round(strategy, params, data, module)
    tolerance = SETTING.count_tolerance(NODES)
    shares = count_shares(5.0, NODES, 0, 0, np.arange(NODES), SIZE_NOISE_PURPOSE)
    N = int(np.sum(np.diff(data.offsets)))
    assert log["summed_total"] == pytest.approx(reference["summed_total"], abs=tolerance)
    assert log["summed_total"] == pytest.approx(N + shares.sum(), abs=tolerance)  # the shares' sum here: -0.17 of N = 1,438
    assert not np.allclose(shares, count_shares(5.0, NODES, 0, 0, np.arange(NODES), COUNT_NOISE_PURPOSE))
    assert [p for p, _ in flower.asked[0]] == ["sum_sizes", "train"]
    assert log["ratio"] == pytest.approx(200 / log["summed_total"])
    assert_within_secagg_tolerance(got, want, NODES, 0.5, params, log["samples"])


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
    # the noised count: the shares of the 5 clients in the sum (3's included), as in-process without 1, 5 and 6
    assert log["samples"] == pytest.approx(reference["samples"], abs=SETTING.count_tolerance(5))
    assert_within_secagg_tolerance(got, want, 5, 0.5, params, log["samples"])


def test_a_nan_update_is_not_sent_and_counts_as_a_dropout(setup):
    data, module, params = setup
    strategy = fedsampling()
    got, log, flower, _ = secagg_round(strategy, params, {4: "nan"})
    want, reference = reference_round(strategy, params, data, module, gone={4})
    assert [f.client for f in flower.failures[0]] == [4] and "non-finite" in flower.failures[0][0].reason
    assert log["samples"] == pytest.approx(reference["samples"], abs=SETTING.count_tolerance(NODES - 1))
    assert_within_secagg_tolerance(got, want, NODES - 1, 0.5, params, log["samples"])


def test_the_ledger_records_the_noise_the_summed_clients_left(setup):
    """Record-level ledger on the Flower round: S is its own release, a Gaussian of multiplier sigma_S sqrt(a/m),
    Poisson-sampled at the round's keep probability: 5 sqrt(8/8) with every client in the sum, 5 sqrt(5/8) after
    three dropouts (the recovered client's share is in the sum)."""
    _, _, params = setup
    dropouts = {6: "silent@setup", 1: "silent@share_keys", 5: "silent@collect_masked_vectors", 3: "silent@unmask"}
    for faults, a in (({}, 8), (dropouts, 5)):
        ledger = Ledger(Accounting(unit="record"))
        _, log, flower, _ = secagg_round(fedsampling(), params, faults, ledger=ledger)
        assert flower.secure_rounds[0]["summed"] == a
        [count] = [r for r in ledger.releases if r.what == "drawn count S"]
        assert count.event == poisson_sampled(log["ratio"], gaussian(5.0 * np.sqrt(a / NODES))), (a, count.event)
        assert count.unamplified == gaussian(5.0 * np.sqrt(a / NODES)) and "drawn count S" not in log["privacy_unprotected"]
        assert f"the shares of {a} of {NODES} asked clients: multiplier {5.0 * np.sqrt(a / NODES):.4g}" in count.reason


def test_past_the_threshold_the_round_has_no_sum_and_keeps_its_parameters(setup):
    _, _, params = setup
    faults = {k: "silent@collect_masked_vectors" for k in range(5)}  # 3 left: each has 3 < 4 live neighbours
    got, log, flower, _ = secagg_round(fedsampling(), params, faults)
    assert log["params_unchanged"] == "no valid update arrived"
    assert all(torch.equal(got[k], params[k]) for k in params)
    assert len(flower.failures[0]) == NODES
    assert any("reconstruction threshold 4" in f.reason for f in flower.failures[0])


def warnings_logged(monkeypatch) -> list[str]:
    """The ServerApp's log lines from fedsample.flower.secagg, as they would print."""
    lines: list[str] = []
    for module in (secagg, flower_federation):
        monkeypatch.setattr(module, "flower_log", lambda level, message, *args: lines.append(message % args))
    return lines


def test_a_vector_outside_the_clipping_range_is_counted_and_said_on_the_console(setup, monkeypatch):
    _, _, params = setup
    lines = warnings_logged(monkeypatch)
    _, _, flower, _ = secagg_round(fedsampling(), params, {}, SecAggPlus(clipping_range=1e-4))
    clipped = flower.secure_rounds[0]["clipped"]
    assert clipped > 0
    assert f"round 1: SecAgg+ clipped the vectors of {clipped} of {flower.secure_rounds[0]['summed']} summed clients to +-0.0001" in lines[0]


def test_the_example_default_clipping_range_clips_nothing_and_says_nothing(setup, monkeypatch):
    """At examples/flower's secagg-clipping-range (also AppConfig's default) no vector is clipped, and the log is quiet."""
    import tomllib
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "flower" / "pyproject.toml"
    default = tomllib.loads(example.read_text())["tool"]["flwr"]["app"]["config"]["secagg-clipping-range"]
    assert default == AppConfig().secagg_clipping_range
    _, _, params = setup
    lines = warnings_logged(monkeypatch)
    _, _, flower, _ = secagg_round(fedsampling(), params, {}, SecAggPlus(clipping_range=default))
    assert flower.secure_rounds[0]["clipped"] == 0 and lines == []


def test_a_client_left_out_of_the_sum_is_said_on_the_console(setup, monkeypatch):
    _, _, params = setup
    lines = warnings_logged(monkeypatch)
    _, _, flower, _ = secagg_round(fedsampling(), params, {3: "silent@share_keys"})
    left = [f for f in flower.failures[0]]
    assert left and all(any(f"round 1: client {f.client} failed (train): {f.reason}" in line for line in lines) for f in left)
    lines.clear()  # and without SecAgg+: a plain round's silent client
    strategy = fs.recipes.fedavg(clients_per_round=NODES, epochs=1, batch_size=8, lr=0.1)
    flower = FlowerFederation(FakeGrid({2: "silent"}, NODES), {k: k for k in range(NODES)}, NODES, seed=0, timeout=0.3)
    strategy.round(flower, params, strategy.init_state(params), 0, seed=0)
    assert flower.failures[0] and {f.client for f in flower.failures[0]} == {2}
    assert lines == [f"fedsample: round 1: client 2 failed ({f.phase}): {f.reason}" for f in flower.failures[0]]


def test_weights_that_differ_between_clients_are_refused(setup):
    _, _, params = setup
    strategy = dataclasses.replace(fs.recipes.fedavg(clients_per_round=8, epochs=1, batch_size=8, lr=0.1), secure_sum=True)
    flower = FlowerFederation(FakeGrid({}, NODES), {k: k for k in range(NODES)}, NODES, seed=0, timeout=0.3, secure=SETTING)
    with pytest.raises(ValueError, match="weights must be the same for every client"):
        strategy.round(flower, params, strategy.init_state(params), 0, seed=0)


def test_the_tally_round_trips_its_integers_exactly():
    params = {"w": torch.zeros(3)}

    class Report:
        update, steps, loss, sums = {"w": torch.tensor([0.5, -0.25, 1e-3])}, 1, 2.5, {DRAWN: 1_234_567}

    vector = sealed_vector(Report(), params, 8.0)
    assert len(vector[-1]) == len(TALLY) and np.all(np.abs(np.concatenate(vector)) <= 8.0)
    total = [3 * a for a in vector]  # three such clients
    summed = unpack_sum(total, params, 8.0, 3)
    assert summed.drawn == 3 * 1_234_567 and summed.stepped == 3 and summed.clipped == 0
    assert summed.loss == pytest.approx(7.5) and torch.allclose(summed.update["w"], 3 * Report.update["w"])


def test_a_noised_count_is_sealed_whole_in_one_entry():
    """With a noise share the digits are zero (they would release parts of S exactly) and the noised entry holds
    count + share, scaled by count_range; three such clients unpack to 3 (count + share) as a float."""
    params = {"w": torch.zeros(3)}

    class Report:
        update, steps, loss, sums = {"w": torch.tensor([0.5, -0.25, 1e-3])}, 1, 2.5, {DRAWN: 37}

    vector = sealed_vector(Report(), params, 8.0, share=-1.75, count_range=64.0)
    tally = dict(zip(TALLY, vector[-1]))
    assert tally["drawn_0"] == tally["drawn_1"] == tally["drawn_2"] == 0.0 and tally["noised_drawn"] == (37 - 1.75) / 64.0 * 8.0
    summed = unpack_sum([3 * a for a in vector], params, 8.0, 3, noised=True, count_range=64.0)
    assert summed.drawn == pytest.approx(3 * (37 - 1.75), abs=1e-12) and summed.stepped == 3


def client_vectors(round, counts, sigma, asked, setting=SETTING):
    """The sealed vectors of clients 0..len(counts)-1 in ``round`` as the nodes build them (each share drawn by
    the client from the request's seed, round, id and the asked count the server names)."""
    params, vectors = {"w": torch.zeros(2)}, []
    message = argparse.Namespace(content=argparse.Namespace(config_records={SEALED: {
        "clipping_range": setting.clipping_range, "count_range": setting.count_range, "asked": asked}}))
    plan = fs.sampling.data.BernoulliSamples(0.5, report_count=True, count_noise=sigma)
    for k, count in enumerate(counts):
        request = argparse.Namespace(seed=11, round=round, client=k, payload=fs.messages.TrainPayload(params=params, plan=plan, solver=None, round=round))
        report = argparse.Namespace(update={"w": torch.ones(2)}, steps=1, loss=0.5, sums={DRAWN: count})
        vectors.append(sealed_vector(report, params, setting.clipping_range, count_share_of(message, request), setting.count_range))
    return vectors


def test_the_sealed_noise_has_variance_sigma_squared_a_over_m():
    """Monte Carlo through the clients' side (share, sealing, SecAgg+'s stochastic quantization) and the server's
    unpacking: 6 of m = 8 asked clients in the sum (2 dropped), sigma_S = 4, counts 3 each (S = 18), 3,000 rounds:
    the noise has mean 0 (4 standard errors) and sd sigma sqrt(6/8) within 5% (chi-square sd 1.3%). The masks
    cancel in the sum (the protocol's own tests), so the sum of the dequantized vectors is what the server gets."""
    sigma, rounds, asked = 4.0, 3000, 8
    noise = []
    for t in range(rounds):
        vectors = client_vectors(t, [3] * 6, sigma, asked)
        quantized = [dequantize(quantize(v, SETTING.clipping_range, SETTING.quantization_range), SETTING.clipping_range,
                                SETTING.quantization_range) for v in vectors]
        total = [sum(parts) for parts in zip(*quantized)]
        noise.append(unpack_sum(total, {"w": torch.zeros(2)}, SETTING.clipping_range, 6, True, SETTING.count_range).drawn - 18)
    noise_arr, scale = np.array(noise), sigma * np.sqrt(6 / 8)
    assert abs(noise_arr.mean()) <= 4 * scale / np.sqrt(rounds) and noise_arr.std(ddof=1) == pytest.approx(scale, rel=0.05)



@pytest.mark.parametrize("setting", [{"num_shares": 2}, {"reconstruction_threshold": 0}, {"clipping_range": -1.0},
                                     {"modulus_range": 3 * 2**20}, {"quantization_range": 2**32}])
def test_bad_settings_are_one_line(setting):
    with pytest.raises(ParameterError) as error:
        SecAggPlus(**setting)
    assert "\n" not in str(error.value) and next(iter(setting)) in str(error.value)
