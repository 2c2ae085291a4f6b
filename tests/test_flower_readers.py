"""The Flower package's readers narrow what crosses Flower's records to fedsample's own types and refuse the rest,
naming it: the requests a node answers, the size a node reports (a numpy integer narrowed to int), a report record
that holds arrays, a report that does not answer its request, a node's kept state, a run config's JSON arguments, a
sealed report; and SecAgg+'s stage grid is a Flower Grid that hands every call but its own on to the grid it wraps."""

import pickle
from types import SimpleNamespace

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict  # noqa: E402
from flwr.common import ndarray_to_bytes  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402

from fedsample.flower.codec import (  # noqa: E402
    HEADER, PAYLOAD, REPORT, MalformedReply, decode_report, decode_request, encode_report, encode_request, request_of, size_of,
)
from fedsample.flower.config import AppConfig  # noqa: E402
from fedsample.flower.node import STATE, load_state, save_state  # noqa: E402
from fedsample.flower.secagg import _StageGrid, sealed_report  # noqa: E402
from fedsample.messages import HeldReport, ProbeReport, ProbeRequest, SizeQuery, TrainPayload, TrainReport  # noqa: E402

PARAMS = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(3)}
TRAIN = TrainPayload(params=PARAMS, plan=None, solver=None, round=4)


def test_a_request_round_trips_with_its_parameters_as_arrays():
    request = decode_request(encode_request(7, 11, 4, TRAIN))
    assert (request.client, request.seed, request.round) == (7, 11, 4) and isinstance(request.payload, TrainPayload)
    assert request.payload.round == 4 and all(torch.equal(request.payload.params[k], PARAMS[k]) for k in PARAMS)
    sized = decode_request(encode_request(2, 0, 1, SizeQuery("exact")))
    assert sized.payload == SizeQuery("exact") and sized.client == 2


def test_a_payload_that_is_no_request_is_refused_naming_its_type():
    with pytest.raises(TypeError, match="not a dict"):
        request_of({"params": PARAMS})
    content = encode_request(0, 0, 0, SizeQuery("exact"))
    content.config_records[PAYLOAD] = ConfigRecord({"blob": pickle.dumps(["not", "a", "request"])})
    with pytest.raises(TypeError, match="not a list"):
        decode_request(content)
    content.config_records[PAYLOAD] = ConfigRecord({"blob": "text"})
    with pytest.raises(ValueError, match="payload is a str"):
        decode_request(content)
    content = encode_request(0, 0, 0, SizeQuery("exact"))
    content.config_records[HEADER]["round"] = "1"
    with pytest.raises(ValueError, match="'round' is '1', not an integer"):
        decode_request(content)


@pytest.mark.parametrize("size", [0, 12, np.int64(12), np.int32(5)])
def test_a_size_report_is_written_as_the_int_it_is(size):
    assert size_of(size) == int(size) and type(size_of(size)) is int
    got = decode_report(encode_report(SizeQuery("exact"), size), SizeQuery("exact"))
    assert got == int(size) and type(got) is int


@pytest.mark.parametrize("report", [True, 2.0, "3", None, HeldReport(1.0)])
def test_anything_but_an_integer_is_no_size_report(report):
    with pytest.raises(ValueError, match="a size report is an integer"):
        size_of(report)


def test_a_report_that_does_not_answer_its_request_is_refused():
    with pytest.raises(ValueError, match="no report encoding for a HeldReport answering a TrainPayload"):
        encode_report(TRAIN, HeldReport(1.0))
    with pytest.raises(ValueError, match="no report encoding for a TrainReport answering a ProbeRequest"):
        encode_report(ProbeRequest(PARAMS), TrainReport(PARAMS, 1, 0.5))


def test_a_report_record_of_arrays_or_of_wrong_fields_is_malformed():
    with pytest.raises(MalformedReply, match="holds arrays"):
        decode_report(RecordDict({REPORT: ArrayRecord({"size": torch.zeros(1)})}), SizeQuery("exact"))
    probe = encode_report(ProbeRequest(PARAMS), ProbeReport(loss=0.5, grad_norm=1.0, extra={"sigma2": 2.0}))
    assert decode_report(probe, ProbeRequest(PARAMS)) == ProbeReport(0.5, 1.0, extra={"sigma2": 2.0})
    probe[REPORT]["extra.sigma2"] = [1.0, 2.0]
    with pytest.raises(MalformedReply, match="field 'extra.sigma2' is \\[1.0, 2.0\\], expected a number"):
        decode_report(probe, ProbeRequest(PARAMS))
    trained = encode_report(TRAIN, TrainReport({k: v + 1 for k, v in PARAMS.items()}, 2, 0.25, rows_trained=8))
    trained[REPORT]["steps"] = 2.0
    with pytest.raises(MalformedReply, match="field 'steps' is 2.0, expected int"):
        decode_report(trained, TRAIN)


def test_the_client_state_round_trips_and_a_foreign_one_is_refused():
    context = Context(0, 1, {"partition-id": 1}, RecordDict(), {})
    assert load_state(context) == {}
    save_state(context, {"permanent_reports": {(1.0, 100): 42}})
    assert load_state(context) == {"permanent_reports": {(1.0, 100): 42}}
    context.state.config_records[STATE] = ConfigRecord({"blob": pickle.dumps([1, 2])})
    with pytest.raises(ValueError, match="keeps a list as 'fedsample-state'"):
        load_state(context)


@pytest.mark.parametrize("value, parsed", [({"K": 3}, {"K": 3}), ('{"K": 3}', {"K": 3}), ("", {}), (0, {})])
def test_run_config_arguments_are_json_objects(value, parsed):
    assert AppConfig.from_run_config({"recipe-args": value}).recipe_args == parsed


@pytest.mark.parametrize("value", [5, 2.5, True, "[1, 2]", "{K: 3}"])
def test_run_config_arguments_that_are_no_json_object_are_refused(value):
    with pytest.raises(ValueError, match="'recipe-args' must be a JSON object"):
        AppConfig.from_run_config({"recipe-args": value})


def test_a_sealed_report_is_a_training_report_or_a_size():
    report = TrainReport(PARAMS, 1, 0.5)
    assert sealed_report(report) is report
    assert sealed_report(np.int64(9)) == 9 and type(sealed_report(np.int64(9))) is int
    with pytest.raises(ValueError, match="a size report is an integer, not a ProbeReport"):
        sealed_report(ProbeReport(0.5, None))


class Nodes(Grid):
    """A grid of nodes 3 and 5 that sends nothing."""
    set_run = create_message = push_messages = pull_messages = send_and_receive = None  # not called here

    @property
    def run(self):
        return "the run"

    def get_node_ids(self):
        return [3, 5]


def test_the_stage_grid_is_a_grid_over_the_one_it_wraps():
    stage = _StageGrid(Nodes(), [(1,)])
    assert isinstance(stage, Grid) and list(stage.get_node_ids()) == [3, 5] and stage.run == "the run"
    assert stage.send_and_receive([]) == []


def test_a_masked_vector_is_well_shaped_only_as_arrays_of_the_shapes_sent():
    stage = _StageGrid(Nodes(), [(2,), (3,)])

    def reply(masked):
        content = RecordDict({RECORD_KEY_CONFIGS: ConfigRecord({Key.MASKED_PARAMETERS: masked})})
        return SimpleNamespace(content=content)  # the reply's content is all the check reads

    arrays = [ndarray_to_bytes(np.zeros(2)), ndarray_to_bytes(np.zeros(3))]
    assert stage._well_shaped(reply(arrays))
    assert not stage._well_shaped(reply(arrays[::-1])) and not stage._well_shaped(reply(arrays[:1]))
    assert not stage._well_shaped(reply([2, 3])) and not stage._well_shaped(reply(arrays[0]))
