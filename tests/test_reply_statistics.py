"""Reply statistics are plug-ins (fedsample.messages.ReplyStatistic): a statistic written outside the library (here
the mean loss of what a client drew) is computed by every client from its drawn sample at the received parameters,
the same number on the loop engine and batched on the vectorized engine, carried by the worker pool and the Flower
codec as it is, refused where it is not a declared statistic, withheld by noised replies; a sampler that reads it
refuses a secure sum and noise, and the ledger names it as released in the clear."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample import parts
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.messages import ReplyStatistic, TrainPayload, TrainReport, reply_statistics
from fedsample.parts import ClientSamplerCapabilities, InclusionKind
from fedsample.privacy.noise import UpdateNoise
from fedsample.sampling.data import AllSamples, BernoulliSamples
from fedsample.sampling.oort import STATISTICAL_UTILITY, OortClients
from fedsample.training.functional import per_sample_losses
from fedsample.training.local import LocalSGD, OneGradient
from helpers import blobs, federate

SIZES = [5, 0, 9, 3, 12, 7, 1, 8]


@dataclass(frozen=True)
class MeanLoss:
    """A user's statistic: the mean per-sample loss of what the client drew (0 where it drew nothing)."""

    name: str = "mean_loss"
    released: str = "mean losses"

    def of_cohort(self, losses: np.ndarray, member: np.ndarray, clients: int) -> np.ndarray:
        counts = np.bincount(member, minlength=clients)
        return np.bincount(member, weights=losses, minlength=clients) / np.maximum(counts, 1)


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=60, d=6, classes=3, seed=2), SIZES)


@pytest.fixture(scope="module")
def module(fed):
    return fs.models.MLP(hidden=5).build(fed.dataset.input_shape, fed.dataset.num_classes)


def test_a_statistic_is_declared_by_its_protocol():
    assert isinstance(MeanLoss(), ReplyStatistic) and isinstance(STATISTICAL_UTILITY, ReplyStatistic)
    assert not isinstance("mean_loss", ReplyStatistic) and not isinstance(object(), ReplyStatistic)
    got = reply_statistics((MeanLoss(),), np.array([1.0, 3.0, 4.0]), np.array([0, 0, 2]), 3)
    np.testing.assert_array_equal(got["mean_loss"], [2.0, 0.0, 4.0])  # by hand: (1 + 3) / 2, nothing, 4


def test_a_sampler_declares_the_statistics_it_reads_and_a_wrong_entry_is_refused():
    capabilities = ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=(), reads_replies=("loss", MeanLoss()))

    class Reads:
        pass

    sampler = Reads()
    sampler.capabilities = capabilities  # type: ignore[attr-defined]
    assert parts.replies_read(sampler) == ("loss", "mean_loss") and parts.reply_statistics_read(sampler) == (MeanLoss(),)
    assert parts.replies_read(OortClients(m=2)) == ("utility",)
    with pytest.raises(ValueError, match="reads_replies must be a tuple of update, loss or reply statistics"):
        ClientSamplerCapabilities(inclusion_kind=InclusionKind.EXACT, server_learns=(), reads_replies=(object(),))


def expected_mean_losses(fed, module, payload) -> dict[int, float]:
    """Each client's mean loss at the sent parameters over the rows its plan drew, by hand (the loop's own draw)."""
    sim = Simulator(fed, module, 4)
    out = {}
    for k in range(len(SIZES)):
        ctx = sim.context(k)
        drawn = payload.plan.draw(ctx, fs.rng.client_rng(4, payload.round, k, "train"))
        if len(drawn):
            rows = torch.as_tensor(np.asarray(drawn.indices, dtype=np.int64))
            with torch.no_grad():
                losses = per_sample_losses(ctx.module, payload.params, ctx.x[rows], ctx.y[rows], ctx.task)
            out[k] = float(losses.double().mean())
    return out


@pytest.mark.parametrize("plan, solver", [(BernoulliSamples(0.5), OneGradient(K=10)),
                                          (AllSamples(), LocalSGD(lr=0.1, epochs=None, steps=3, batch_size=2))],
                         ids=["one-gradient", "stepped"])
def test_every_engine_adds_the_statistic_to_each_reply_that_stepped(fed, module, plan, solver):
    params = fs.models.initial_parameters(module, 0)
    payload = TrainPayload(params, plan, solver, round=1, statistics=(MeanLoss(),))
    ids = np.arange(len(SIZES))
    want = expected_mean_losses(fed, module, payload)
    for engine in (Simulator, VectorizedSimulator):
        replies = engine(fed, module, 4).run(ids, payload, 1)
        stepped = replies.received_positions().tolist()
        assert stepped == sorted(want)  # the clients that drew rows, and only they, carry it
        for k in stepped:
            assert replies[k].statistics.keys() == {"mean_loss"}
            assert replies[k].statistics["mean_loss"] == pytest.approx(want[k], rel=1e-6), (engine.__name__, k)
    plain = Simulator(fed, module, 4).run(ids, TrainPayload(params, plan, solver, round=1), 1)
    assert all(plain[k].statistics == {} for k in plain.received_positions().tolist())  # none asked, none sent


def test_the_worker_pool_carries_the_statistics_as_they_are(fed, module):
    from fedsample.federation.pool import PoolFederation

    params = fs.models.initial_parameters(module, 0)
    payload = TrainPayload(params, AllSamples(), OneGradient(K=10), round=0, statistics=(MeanLoss(), STATISTICAL_UTILITY))
    ids = np.array([2, 1, 5, 7])  # client 1 holds nothing; the others sit on both workers
    alone = VectorizedSimulator(fed, module, 4).run(ids, payload, 0)
    with PoolFederation(fed, module, 4, workers=2) as pool:
        pooled = pool.run(ids, payload, 0)
        assert pooled.received_positions().tolist() == alone.received_positions().tolist() == [0, 2, 3]
        for i in pooled.received_positions().tolist():  # a worker's forward over its own shard: float32 rounding apart
            assert pooled[i].statistics.keys() == alone[i].statistics.keys() == {"mean_loss", "utility"}
            assert pooled[i].statistics == pytest.approx(alone[i].statistics, rel=1e-6)


def test_noised_replies_withhold_the_statistics(fed, module):
    params = fs.models.initial_parameters(module, 0)
    payload = TrainPayload(params, AllSamples(), OneGradient(K=10), round=0, noise=UpdateNoise(1.0, 0.5), statistics=(MeanLoss(),))
    replies = Simulator(fed, module, 4).run(np.arange(len(SIZES)), payload, 0)
    assert all(replies[i].statistics == {} for i in range(len(SIZES)))


def test_flower_carries_a_statistic_as_a_checked_metric():
    pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")
    from fedsample.flower.codec import REPORT, MalformedReply, decode_report, encode_report

    sent = TrainPayload(params={"w": torch.zeros(2)}, plan=None, solver=None, round=0, statistics=(MeanLoss(),))
    report = TrainReport(update={"w": torch.ones(2)}, steps=1, loss=0.5, statistics={"mean_loss": 0.75})
    content = encode_report(sent, report)
    assert content[REPORT]["statistic.mean_loss"] == 0.75
    assert decode_report(content, sent).statistics == {"mean_loss": 0.75}
    content[REPORT]["statistic.mean_loss"] = math.nan
    with pytest.raises(MalformedReply, match="non-finite statistic.mean_loss"):
        decode_report(content, sent)


@dataclass(frozen=True)
class MeanLossOort(OortClients):
    """Oort's selection reading a user's statistic beside its utility (as a researcher's variant would declare it)."""

    capabilities = dataclasses.replace(OortClients.capabilities, reads_replies=(STATISTICAL_UTILITY, MeanLoss()))


@dataclass(frozen=True)
class ReadsMeanLossOnly(OortClients):
    """A sampler whose only read of the replies is the user's statistic."""

    capabilities = dataclasses.replace(OortClients.capabilities, reads_replies=(MeanLoss(),))


def test_a_secure_sum_and_noised_replies_refuse_a_sampler_that_reads_a_statistic():
    from fedsample.privacy.sizes import ExactSizes
    from fedsample.strategy import Strategy
    from fedsample.training.aggregate import WeightedMean

    for settings, names in ((dict(sizes=ExactSizes(), secure_sum=True), ("mean_loss", "secure_sum=True")),
                            (dict(noise=UpdateNoise(1.0, 1.0)), ("mean_loss", "UpdateNoise"))):
        with pytest.raises(ValueError) as refused:
            Strategy(clients=ReadsMeanLossOnly(m=3), aggregate=WeightedMean("uniform"), **settings)
        assert all(name in str(refused.value) for name in ("ReadsMeanLossOnly(m=3", *names)), str(refused.value)
    Strategy(clients=ReadsMeanLossOnly(m=3), aggregate=WeightedMean("uniform"))  # readable replies: accepted


def test_the_ledger_names_each_statistic_released_in_the_clear(fed, module):
    from fedsample.privacy.amplification import releases
    from fedsample.privacy.ledger import Accounting
    from fedsample.strategy import Strategy
    from fedsample.training.aggregate import WeightedMean

    strategy = Strategy(clients=MeanLossOort(m=3), aggregate=WeightedMean("uniform"))
    params = fs.models.initial_parameters(module, 0)
    payload = TrainPayload(params, AllSamples(), OneGradient(K=10), round=0, statistics=(STATISTICAL_UTILITY, MeanLoss()))
    (release,) = releases(np.arange(3), payload, 0, 0, strategy, Accounting(), len(SIZES))
    assert release.what.endswith(", statistical utilities, mean losses")
