"""The Flower codec carries a training report's fields as typed records (the rows it trained among them): the drawn-sample count travels only
when the client reports it (the self-normalized FedSampling update), and a malformed count is refused."""

import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")

import torch  # noqa: E402

from fedsample.messages import TrainPayload, TrainReport  # noqa: E402
from fedsample.sampling.data import DRAWN  # noqa: E402
from fedsample.flower.codec import REPORT, MalformedReply, decode_report, encode_report  # noqa: E402

SENT = TrainPayload(params={"w": torch.zeros(2, 3), "b": torch.zeros(3)}, plan=None, solver=None, round=0)  # the train request


def _report(samples):
    return TrainReport(update={"w": torch.ones(2, 3), "b": torch.full((3,), 0.5)}, steps=2, loss=0.25, sums=None if samples is None else {DRAWN: samples})


@pytest.mark.parametrize("samples", [None, 0, 7])
def test_a_train_report_round_trips_with_or_without_its_drawn_count(samples):
    got = decode_report(encode_report(SENT, _report(samples)), SENT)
    assert got.sums.get(DRAWN) == samples and got.steps == 2 and got.loss == 0.25
    assert torch.equal(got.update["w"], torch.ones(2, 3))
    assert ("samples" in encode_report(SENT, _report(samples))[REPORT]) == (samples is not None)


def test_a_negative_drawn_count_is_refused():
    content = encode_report(SENT, _report(3))
    content[REPORT]["samples"] = -1
    with pytest.raises(MalformedReply, match="negative drawn-sample count"):
        decode_report(content, SENT)


@pytest.mark.parametrize("rows", [None, 0, 37])
def test_a_train_report_carries_the_rows_it_trained(rows):
    """The realised budget's unit (fedsample.budget.realised_samples) crosses Flower's door as it left the client."""
    report = _report(None)
    report.rows_trained = rows
    content = encode_report(SENT, report)
    assert decode_report(content, SENT).rows_trained == rows
    if rows:
        content[REPORT]["rows_trained"] = -rows
        with pytest.raises(MalformedReply, match="negative count of rows trained"):
            decode_report(content, SENT)
