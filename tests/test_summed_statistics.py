"""Summed statistics as plug-ins (fedsample.messages.SummedStatistic): a data plan declares them in its capabilities'
``summed`` (FedSampling's drawn count, fedsample.sampling.data.DrawnCount, is the first); every engine adds each one's
value to each report's ``sums``; the server reads the cohort's sum by name (ReplyList.summed), and the secure sum
seals one more coordinate per statistic, with its own noise shares from its own cells."""

import dataclasses
import re

import numpy as np
import pytest
import torch

from fedsample.federation.secure_sum import SecureSum, count_shares, sealed_statistic
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.messages import SIZES, SummedStatistic, TrainPayload, TrainReport
from fedsample.rounds import Failed, NumberReplies
from fedsample.models import initial_parameters
from fedsample.parts import CohortPlanCapabilities, reports_rows, summed_noise, summed_of
from fedsample.sampling.data import DRAWN, BernoulliSamples, DrawnCount
from fedsample.training.local import LocalSGD, OneGradient
from helpers import blobs, federate

import fedsample as fs


@dataclasses.dataclass(frozen=True)
class Drew:
    """A user's summed statistic: 1 for a client that drew at least one sample (the server learns how many did)."""

    noise: float = 0.0
    name: str = "drew"
    purpose: str = "test: clients-that-drew noise"
    released: str = "clients that drew"
    symbol: str = "D"

    def of_cohort(self, counts):
        return (np.asarray(counts) > 0).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class TwoSums(BernoulliSamples):
    """Bernoulli sampling that declares the drawn count and :class:`Drew`, both with noise ``count_noise``."""

    def __post_init__(self):
        declared = dataclasses.replace(BernoulliSamples.capabilities, summed=(DrawnCount(self.count_noise), Drew(self.count_noise)))
        object.__setattr__(self, "capabilities", declared)


@pytest.fixture(scope="module")
def engines():
    """Ten clients (one without data) and a small MLP."""
    fed = federate(blobs(n=80), [6, 0, 9, 4, 7, 3, 8, 2, 5, 6])
    return fed, fs.models.MLP(hidden=4).build(fed.dataset.input_shape, fed.dataset.num_classes)


def payload(module, plan, solver=None):
    return TrainPayload(initial_parameters(module, 1), plan, solver or OneGradient(5), 2)


def test_the_drawn_count_is_declared_exactly_where_the_plan_reports_it():
    assert isinstance(DrawnCount(), SummedStatistic) and DrawnCount().name == DRAWN
    assert summed_of(BernoulliSamples(0.5)) == () and summed_of(BernoulliSamples(0.5, report_count=True)) == (DrawnCount(0.0),)
    assert summed_of(BernoulliSamples(0.5, report_count=True, count_noise=5.0)) == (DrawnCount(5.0),)
    assert summed_noise(BernoulliSamples(0.5, report_count=True, count_noise=5.0)) == 5.0 and summed_noise(BernoulliSamples(0.5)) == 0.0
    assert summed_of(None) == () and summed_of(fs.sampling.data.AllSamples()) == ()
    # FedSampling's draw is private: no rows trained leave a client unless the plan sums its count
    assert not reports_rows(BernoulliSamples(0.5)) and reports_rows(BernoulliSamples(0.5, report_count=True))
    assert reports_rows(fs.sampling.data.AllSamples())


def test_a_wrong_declaration_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"CohortPlanCapabilities\(summed=.*summed must be a tuple of summed statistics"):
        CohortPlanCapabilities(summed=("drawn",))
    with pytest.raises(ValueError, match="summed must be"):
        CohortPlanCapabilities(summed=DrawnCount())  # one statistic, not a tuple


def test_a_report_carries_its_drawn_count_among_its_sums():
    report = TrainReport({}, 1, 0.5, sums={DRAWN: 3})
    assert report.sums == {DRAWN: 3} and report.sums.get(DRAWN) == 3
    assert TrainReport({}, 1, 0.5).sums.get(DRAWN) is None and dict(TrainReport({}, 1, 0.5).sums) == {}
    assert "sums" not in vars(TrainReport({}, 1, 0.5))  # a report without sums holds nothing of them
    assert TrainReport({}, 1, 0.5, sums={"drew": 1, DRAWN: 2}).sums == {"drew": 1, DRAWN: 2}


@pytest.mark.parametrize("solver", [OneGradient(5), LocalSGD(lr=0.1, epochs=None, steps=2, batch_size=2)], ids=["one-gradient", "stepped"])
def test_every_engine_sums_each_declared_statistic_by_name(engines, solver):
    """Loop and vectorized engines (the fused one-gradient cohort and the stepped one): each report carries both
    statistics, and the cohort's sums by name equal the hand sums over the received replies (the drawn count, how
    many drew at least one sample)."""
    fed, module = engines
    ids = np.arange(fed.num_clients)
    sent = payload(module, TwoSums(0.6, report_count=True), solver)
    for engine in (Simulator(fed, module, seed=3), VectorizedSimulator(fed, module, seed=3)):
        replies = engine.run(ids, sent, 2)
        received = replies.received_positions()
        counts = [replies[int(i)].sums.get(DRAWN) for i in received]
        assert all(c is not None and c > 0 for c in counts) and len(received) >= 5
        assert replies.summed(DRAWN) == sum(counts)
        assert replies.summed("drew") == len(received) == sum(replies[int(i)].sums["drew"] for i in received)
        with pytest.raises(ValueError, match="no summed statistic 'other'"):
            replies.summed("other")
    loop, batched = (e.run(ids, sent, 2) for e in (Simulator(fed, module, seed=3), VectorizedSimulator(fed, module, seed=3)))
    assert loop.summed(DRAWN) == batched.summed(DRAWN)  # the same draws: the same count


def test_the_secure_sum_seals_each_statistic_with_its_own_noise(engines):
    """Two noised statistics in one secure sum: each noised sum is its exact sum plus the answered clients' shares of
    its own cells (count_shares of its purpose), to the bit; the drawn count's shares are those of the drawn count's
    cell as before (FedSampling alone gives the same noised count)."""
    fed, module = engines
    ids, sigma, seed, round = np.arange(fed.num_clients), 4.0, 3, 2
    exact = Simulator(fed, module, seed=seed).run(ids, payload(module, TwoSums(0.6, report_count=True)), round)
    sealed = SecureSum(Simulator(fed, module, seed=seed)).run(ids, payload(module, TwoSums(0.6, report_count=True, count_noise=sigma)), round)
    sealed.weighted_update_sum(sealed.received_positions(), np.ones(len(sealed.received_positions())))
    for statistic in (DrawnCount(sigma), Drew(sigma)):
        shares = count_shares(sigma, len(ids), seed, round, ids, statistic.purpose)
        assert sealed.summed(statistic.name) == float(exact.summed(statistic.name)) + float(shares.sum())
    alone = SecureSum(Simulator(fed, module, seed=seed)).run(ids, payload(module, BernoulliSamples(0.6, report_count=True, count_noise=sigma)), round)
    alone.weighted_update_sum(alone.received_positions(), np.ones(len(alone.received_positions())))
    assert alone.summed(DRAWN) == sealed.summed(DRAWN)
    with pytest.raises(ValueError, match="no summed statistic 'other'"):
        sealed.summed("other")


def test_a_sealed_sum_is_read_only_after_the_update_sum(engines):
    fed, module = engines
    ids = np.arange(fed.num_clients)
    sealed = SecureSum(Simulator(fed, module, seed=3)).run(ids, payload(module, BernoulliSamples(0.6, report_count=True)), 2)
    with pytest.raises(RuntimeError, match="comes with the secure sum of the update"):
        sealed.summed(DRAWN)
    total = sealed.weighted_update_sum(sealed.received_positions(), np.ones(len(sealed.received_positions())))
    assert total is not None and all(isinstance(v, torch.Tensor) for v in total.values())
    assert sealed.summed(DRAWN) == Simulator(fed, module, seed=3).run(ids, payload(module, BernoulliSamples(0.6, report_count=True)), 2).summed(DRAWN)


def test_a_tally_of_one_count_refuses_a_plan_that_declares_two(engines):
    """Flower's SecAgg+ tally holds one count (sealed_statistic): a plan that declares two summed statistics is refused
    in one line naming them, one that declares the drawn count gets it back."""
    fed, module = engines
    assert sealed_statistic(payload(module, BernoulliSamples(0.5, report_count=True, count_noise=2.0))) == DrawnCount(2.0)
    assert sealed_statistic(payload(module, BernoulliSamples(0.5))) is None
    with pytest.raises(ValueError, match=r"seals one summed statistic; the plan declares 2: \['samples', 'drew'\]"):
        sealed_statistic(payload(module, TwoSums(0.5, report_count=True)))


def test_every_reply_kind_lists_its_sums_for_the_round_record(engines):
    """ReplyList.sums(), what the round's record logs: each statistic the replies carry, summed, by name, the same on
    the loop engine, the vectorized one and a secure sum (exact: no noise); {} for a plan that declares none."""
    fed, module = engines
    ids = np.arange(fed.num_clients)
    sent = payload(module, TwoSums(0.6, report_count=True))
    loop = Simulator(fed, module, seed=3).run(ids, sent, 2)
    expected = {DRAWN: loop.summed(DRAWN), "drew": loop.summed("drew")}
    assert loop.sums() == expected and expected["drew"] == len(loop.received_positions()) and expected[DRAWN] > expected["drew"]
    assert VectorizedSimulator(fed, module, seed=3).run(ids, sent, 2).sums() == expected
    sealed = SecureSum(Simulator(fed, module, seed=3)).run(ids, sent, 2)
    assert sealed.sums() == {}  # nothing is revealed before the update's sum
    sealed.weighted_update_sum(sealed.received_positions(), np.ones(len(sealed.received_positions())))
    assert sealed.sums() == expected
    assert Simulator(fed, module, seed=3).run(ids, payload(module, BernoulliSamples(0.6)), 2).sums() == {}


def test_the_record_sums_only_what_every_reply_carries_and_summed_refuses_the_rest():
    """ReplyList.summed_names names the statistics every received reply carries (a PerClient plan's members may declare
    different ones); sums() sums exactly those, and summed() of a name some reply lacks is refused (not_summed)."""
    update = {"w": torch.zeros(2)}
    both = TrainReport(update, 1, 0.5, sums={DRAWN: 3, "drew": 1})
    one = TrainReport(update, 1, 0.5, sums={"drew": 1, DRAWN: 2})
    mixed = fs.rounds.Replies([both, Failed(1, "train", "lost"), TrainReport(update, 1, 0.5, sums={"drew": 1})])
    assert mixed.summed_names() == ("drew",) and mixed.sums() == {"drew": 2}
    with pytest.raises(ValueError, match=f"no summed statistic {DRAWN!r}"):
        mixed.summed(DRAWN)
    assert fs.rounds.Replies([both, one]).summed_names() == (DRAWN, "drew")  # the first reply's order
    assert fs.rounds.Replies([both, one]).sums() == {DRAWN: 5, "drew": 2}
    assert fs.rounds.Replies([Failed(0, "train", "lost")]).sums() == {}  # none received


def test_a_one_gradient_cohort_names_its_sums_without_computing_an_update(engines):
    """The vectorized engine's one-gradient cohort answers summed_names (and sums) from its first received report and
    the counts it made, computing no update; the names and sums are the plain reply list's."""
    fed, module = engines
    ids = np.arange(fed.num_clients)
    sent = payload(module, TwoSums(0.6, report_count=True))
    replies = VectorizedSimulator(fed, module, seed=3).run(ids, sent, 2)
    assert replies.summed_names() == (DRAWN, "drew") and replies.sums() == Simulator(fed, module, seed=3).run(ids, sent, 2).sums()
    assert len(replies.backing._made) == 1 and replies.backing._source.updates is None  # one report read, no update computed
    none = VectorizedSimulator(fed, module, seed=3).run(ids, payload(module, BernoulliSamples(0.6)), 2)
    assert none.summed_names() == () and none.sums() == {} and none.backing._source.updates is None


def test_size_reports_sum_only_as_sizes():
    """NumberReplies hold size reports: their sum is the sizes' (SIZES); any other name is refused like the other kinds."""
    replies = NumberReplies(np.array([3, 4, 5]), {1: Failed(1, "sum_sizes", "lost")})
    assert replies.summed(SIZES) == 8 and replies.sums() == {SIZES: 8}
    with pytest.raises(ValueError, match=f"no summed statistic {DRAWN!r}"):
        replies.summed(DRAWN)


def test_the_flower_codec_carries_any_summed_statistic():
    """Every summed statistic crosses Flower's door under its name (the drawn count as ``"samples"``, as before); a
    name that would read as one of the report's own metrics is refused."""
    pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")
    from fedsample.flower.codec import REPORT, decode_report, encode_report

    sent = TrainPayload({"w": torch.zeros(2)}, None, None, 0)
    report = TrainReport({"w": torch.ones(2)}, 1, 0.5, sums={DRAWN: 7, "drew": 1})
    content = encode_report(sent, report)
    assert DRAWN == "samples" and content[REPORT]["samples"] == 7 and content[REPORT]["drew"] == 1
    assert dict(decode_report(content, sent).sums) == {DRAWN: 7, "drew": 1}
    for name in ("steps", "statistic.drew"):
        with pytest.raises(ValueError, match="cannot carry summed statistics named"):
            encode_report(sent, TrainReport({"w": torch.ones(2)}, 1, 0.5, sums={name: 1}))


def test_the_secagg_tally_seals_the_one_summed_statistic_whatever_its_name():
    """A client's sealed count is the one summed statistic its report carries (Drew's here), none where it carries
    none; a report that carries two is refused."""
    pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'fedsample[flower]'")
    from fedsample.flower.secagg import sealed_samples

    assert sealed_samples(TrainReport({}, 1, 0.5, sums={"drew": 1})) == 1 and sealed_samples(TrainReport({}, 1, 0.5)) is None
    assert sealed_samples(12) == 12  # a size report
    with pytest.raises(ValueError, match="seals one summed statistic"):
        sealed_samples(TrainReport({}, 1, 0.5, sums={DRAWN: 3, "drew": 1}))


# --- the declaration and privacy side: any summed statistic, by its own declaration -------------------------------


@dataclasses.dataclass(frozen=True)
class CountsBoth:
    """A user's data sampler whose plans sum the drawn count and Drew, with noise ``sigma``."""

    sigma: float = 0.0
    capabilities = fs.parts.DataSamplerCapabilities(weighs_by_inclusion=False)

    def plan(self, ctx, cohort):
        return TwoSums(0.5, report_count=True, count_noise=self.sigma)


@dataclasses.dataclass(frozen=True)
class DeclaresBoth(CountsBoth):
    @property
    def capabilities(self):
        return fs.parts.DataSamplerCapabilities(weighs_by_inclusion=False, summed=(DrawnCount(self.sigma), Drew(self.sigma)))


@dataclasses.dataclass(frozen=True)
class NeedsDrew(fs.training.aggregate.Sum):
    """A user's aggregator that reads the cohort's summed Drew."""

    @property
    def capabilities(self):
        return dataclasses.replace(super().capabilities, needs_summed=("drew",))


def test_an_aggregator_gets_the_summed_statistics_it_needs_by_name_and_they_are_sealed():
    """The rules read the declarations, whatever the statistic: a need the data sampler does not declare is refused
    naming both parts and the statistic; a declared one without a secure sum is refused naming the data sampler
    and the statistic's wording; declared and sealed, the strategy is built."""
    from fedsample.strategy import Strategy

    kw = dict(clients=fs.sampling.clients.AllClients(), local=OneGradient(5), aggregate=NeedsDrew())
    with pytest.raises(ValueError, match=r"^NeedsDrew\(\) needs the cohort's summed 'drew', but CountsBoth\(\) does not ask"):
        Strategy(data=CountsBoth(), secure_sum=True, **kw)
    with pytest.raises(ValueError, match=r"^DeclaresBoth\(\) has every client send its drawn count, .* pass secure_sum=True$"):
        Strategy(data=DeclaresBoth(), **kw)
    assert Strategy(data=DeclaresBoth(), secure_sum=True, **kw).aggregate.capabilities.needs_summed == ("drew",)


def test_the_ledger_releases_each_summed_statistic_in_its_own_words():
    """Two statistics of noise sigma = 4, q = 0.5, 6 of 8 clients answer, no noise on the update: one release each,
    named "{released} {symbol}" with its own key, a record Poisson-sampled at q into a Gaussian of multiplier
    4 sqrt(6/8) (by hand); with PerExampleNoise (sigma 2, 8 shares) both are coordinates of the update's release,
    whose multiplier is 1/sqrt(1/z_u^2 + 2/z_S^2)."""
    import argparse

    from fedsample.privacy import amplification
    from fedsample.privacy.ledger import Accounting, gaussian, poisson_sampled
    from fedsample.privacy.noise import PerExampleNoise

    plans, call = [TwoSums(0.5, report_count=True, count_noise=4.0)], (0, "train", 0)
    strategy = argparse.Namespace(clients=fs.sampling.clients.AllClients(), secure_sum=True)
    z = 4.0 * np.sqrt(6 / 8)
    count, drew = amplification.summed_releases(plans, 8, 6, strategy, Accounting(unit="record"), 0, call)
    assert (count.what, count.call, drew.what, drew.call) == ("drawn count S", (*call, "drawn count"), "clients that drew D", (*call, "clients that drew"))
    assert count.event == drew.event == poisson_sampled(0.5, gaussian(z)) and drew.reason.startswith("Gaussian noise sigma_D = 4 on D")
    joint = amplification.train_release(PerExampleNoise(1.0, 2.0, shares=8), plans, 8, 6, strategy, Accounting(unit="record"), 8, 0, call)
    assert joint.what == "update sum and drawn count and clients that drew"
    assert joint.unamplified["noise_multiplier"] == pytest.approx(1 / np.sqrt(1 / (2.0 * np.sqrt(6 / 8)) ** 2 + 2 / z**2), rel=1e-12)


@dataclasses.dataclass(frozen=True)
class BlocksClaimed(BernoulliSamples):
    """Bernoulli sampling whose record claims a draw it does not offer (its draw_blocks misspelt)."""

    capabilities = CohortPlanCapabilities(draws_blocks=True, draws_on_device=True, private_draw=True)
    draw_blocks = None  # type: ignore[assignment]

    def draw_block(self, blocks, rng):
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class PlansClaimed:
    capabilities = fs.parts.DataSamplerCapabilities(weighs_by_inclusion=False)
    plan_class: type = BlocksClaimed

    def plan(self, ctx, cohort):
        return self.plan_class(0.5)


def test_a_plan_that_declares_a_draw_it_lacks_is_refused_on_the_loop_engine(engines):
    """The loop engine never takes a plan's cohort draws, so it never compared the plan's record with its methods:
    the strategy now does, where the data sampler makes the plan, naming both; the same sampler with a plan that
    agrees trains on the loop engine."""
    from fedsample.strategy import Strategy

    fed, module = engines
    params = initial_parameters(module, 0)

    def round_of(data):
        strategy = Strategy(clients=fs.sampling.clients.AllClients(), data=data, local=OneGradient(5), aggregate=fs.training.aggregate.Sum())
        return strategy.round(Simulator(fed, module, seed=0), params, strategy.init_state(params), 0, seed=0)

    with pytest.raises(ValueError) as refused:
        round_of(PlansClaimed())
    assert str(refused.value) == ("data=PlansClaimed() makes plans whose declaration disagrees with their methods: BlocksClaimed(p=0.5) "
                                  "declares draws_blocks=True in its CohortPlanCapabilities but has no draw_blocks() method")
    _, log = round_of(PlansClaimed(BernoulliSamples))
    assert log["updates"] > 0


# --- the round record: each statistic under its own name, none a record key; the drawn count by its declaration ---


@dataclasses.dataclass(frozen=True)
class DeclaresClash(CountsBoth):
    """A user's data sampler whose summed statistic (:class:`Drew`, renamed) is named like one of the round record's
    own figures."""

    name: str = "cohort"

    @property
    def capabilities(self):
        return fs.parts.DataSamplerCapabilities(weighs_by_inclusion=False, summed=(Drew(name=self.name),))


@pytest.mark.parametrize("name", ["cohort", "updates", "realised_samples", "ratio", "privacy_epsilon[add/remove]"])
def test_a_summed_statistic_named_like_a_record_key_is_refused_naming_the_part_and_the_key(name):
    from fedsample.strategy import Strategy

    kw = dict(clients=fs.sampling.clients.AllClients(), local=OneGradient(5), aggregate=fs.training.aggregate.Sum(), secure_sum=True)
    with pytest.raises(ValueError, match=rf"^data=DeclaresClash\(.*\) declares a summed statistic named '{re.escape(name)}'"
                                         r".*round record's own.*give the statistic another name$"):
        Strategy(data=DeclaresClash(name=name), **kw)
    # the drawn count's name is the statistic's, not a record key: FedSampling's own declaration is built
    from fedsample.runtime.records import is_round_key

    assert not is_round_key(DRAWN) and not is_round_key("drew")
    assert Strategy(data=DeclaresBoth(), **kw).data.capabilities.summed[0].name == DRAWN


def test_the_drawn_count_a_data_sampler_names_must_be_one_it_declares():
    with pytest.raises(ValueError, match=r"^DataSamplerCapabilities\(drawn_count='drew'\): drawn_count must name one of its "
                                         r"summed statistics \('samples'\)$"):
        fs.parts.DataSamplerCapabilities(weighs_by_inclusion=False, summed=(DrawnCount(),), drawn_count="drew")
    with pytest.raises(ValueError, match=r"drawn_count must be the name of the summed statistic"):
        fs.parts.DataSamplerCapabilities(weighs_by_inclusion=False, summed=(DrawnCount(),), drawn_count=3)
    assert fs.recipes.fedsampling(samples_per_round=40).data.capabilities.drawn_count == DRAWN
    assert fs.sampling.data.FedSamplingData(K=40, count_drawn=False).capabilities.drawn_count is None


@dataclasses.dataclass(frozen=True)
class CountsDrawnAs(DeclaresBoth):
    """:class:`DeclaresBoth`, naming ``drawn`` as the statistic that counts the drawn samples."""

    drawn: str | None = None

    @property
    def capabilities(self):
        return dataclasses.replace(super().capabilities, drawn_count=self.drawn)


def test_the_realised_budget_reads_the_statistic_declared_as_the_drawn_count(engines):
    """One round of every client (all ten asked, one without data), exact sums: the record logs both statistics by
    name, and its ``realised_samples`` is the one ``drawn_count`` names: the drawn count, or the user's Drew (the
    clients that drew at least one sample, fewer than the samples); where none is named, no released figure (the
    sealed replies carry no rows), and the rows the simulation saw the clients train (``realised_measured``:
    OneGradient's one step over each client's drawn samples, the drawn count again)."""
    fed, _ = engines
    from fedsample.strategy import Strategy

    def record(drawn):
        strategy = Strategy(clients=fs.sampling.clients.AllClients(), data=CountsDrawnAs(drawn=drawn), local=OneGradient(5),
                            aggregate=fs.training.aggregate.Sum(), secure_sum=True)
        return fs.simulate(strategy, federated_data=fed, model=fs.models.MLP(hidden=4), rounds=1, seed=0).history[0]

    by_count, by_drew, by_rows = record(DRAWN), record("drew"), record(None)
    assert by_count[DRAWN] == by_drew[DRAWN] > by_drew["drew"] > 0
    assert by_count["realised_samples"] == by_count[DRAWN] and by_drew["realised_samples"] == by_drew["drew"]
    assert "realised_samples" not in by_rows and by_rows["realised_measured"] == by_rows[DRAWN]


def test_a_wrong_plan_is_refused_on_the_vectorized_engine_and_a_round_checks_its_plan_once(engines, monkeypatch):
    """The round checks the plan it made (parts.check_plan) before any engine reads it: the vectorized engine, which
    takes the plan's cohort draws, refuses the loop engine's wrong declaration in the same line, and in a round that
    trains the plan is compared with its methods once (the engine reads the declaration as the round checked it)."""
    fed, module = engines
    strategy = fs.Strategy(clients=fs.sampling.clients.AllClients(), data=PlansClaimed(), local=OneGradient(5), aggregate=fs.training.aggregate.Sum())
    params = initial_parameters(module, 0)
    with pytest.raises(ValueError, match=r"^data=PlansClaimed\(\) makes plans whose declaration disagrees with their methods: "
                                         r"BlocksClaimed\(p=0\.5\) declares draws_blocks=True in its CohortPlanCapabilities but has no"):
        strategy.round(VectorizedSimulator(fed, module, seed=0), params, strategy.init_state(params), 0, seed=0)
    checks, compare = [], fs.parts.plan_capabilities
    monkeypatch.setattr(fs.parts, "plan_capabilities", lambda plan: checks.append(plan) or compare(plan))
    strategy = dataclasses.replace(strategy, data=PlansClaimed(BernoulliSamples))
    _, log = strategy.round(VectorizedSimulator(fed, module, seed=0), params, strategy.init_state(params), 0, seed=0)
    assert log["updates"] > 0 and checks == [BernoulliSamples(0.5)]


class NoSymbol:
    """A summed statistic written before ``symbol`` joined the Protocol: :class:`Drew` without it."""

    noise, name, purpose, released = 0.0, "drew", "test: clients-that-drew noise", "clients that drew"
    of_cohort = Drew.of_cohort


def test_a_summed_statistic_without_its_symbol_is_refused_naming_the_members():
    """symbol is a required member of SummedStatistic (docs/samplers.md's changed note): a statistic without one is no
    SummedStatistic, and a plan that declares it is refused in one line that lists what a summed statistic has."""
    assert not isinstance(NoSymbol(), SummedStatistic) and isinstance(Drew(), SummedStatistic)
    with pytest.raises(ValueError, match=r"summed=\(<.*NoSymbol object .*summed must be a tuple of summed statistics \(fedsample"
                                         r"\.messages\.SummedStatistic: name, noise, purpose, released, symbol and of_cohort\(counts\)\)"):
        CohortPlanCapabilities(summed=(NoSymbol(),))
