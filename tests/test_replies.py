"""The reply-list protocol (fedsample.rounds.ReplyList), declared payloads (PerClient), the secure sum and any
other federation as wrappers applied by the layer that builds the federation, and federation factories.

An engine's fused reply list must answer every protocol question exactly as the plain per-reply arithmetic
does on the same replies (the engines' numbers equal the reference loop's within float32 tolerance)."""

import contextlib
import dataclasses

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.federation.base import FederationFactory, KeepsClientStates, client_states_of
from fedsample.federation.faults import FaultModel, Faulty
from fedsample.federation.secure_sum import SealedCohort, SecureSum, with_secure_sum
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import BatchedCohort, VectorizedSimulator
from fedsample.messages import HeldReport, PerClient, ProbeReport, SizeQuery, TrainPayload, TrainReport, payloads_for
from fedsample.models import initial_parameters
from fedsample.rounds import Failed, FusedReplies, NumberReplies, Replies, ReplyList, probe_reports, replies_of, reply_as, train_report
from fedsample.sampling.data import DRAWN, AllSamples, BernoulliSamples
from fedsample.training.local import LocalSGD, OneGradient
from helpers import blobs, federate
from fedsample.callbacks import Progress
from fedsample.simulation import Engine

SIZES = [5, 0, 7, 3, 9, 4, 6, 2, 8, 5]


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=100), SIZES)


@pytest.fixture(scope="module")
def module(fed):
    return fs.models.MLP(hidden=4).build(fed.dataset.input_shape, fed.dataset.num_classes)


def one_gradient_payload(module, counted=False):
    return TrainPayload(initial_parameters(module, 1), BernoulliSamples(0.6, report_count=counted), OneGradient(5), 2)


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_fused_cohort_reports_answer_like_the_plain_arithmetic(fed, module):
    """The vectorized engine's one-gradient cohort (one backward pass) against the same replies read one by one:
    received positions, a weighted sum, the summed loss and count, the drawn total."""
    ids = np.arange(fed.num_clients)
    fused = VectorizedSimulator(fed, module, seed=3).run(ids, one_gradient_payload(module, counted=True), 2)
    assert isinstance(fused, FusedReplies) and isinstance(fused.backing, BatchedCohort) and fused.fused and not fused.sealed
    plain = Replies(list(fused))
    assert not plain.fused
    received = plain.received_positions()
    assert 1 not in received.tolist() and len(received) >= 5  # client 1 holds no data: an empty reply
    np.testing.assert_array_equal(fused.received_positions(), received)
    weights = np.linspace(0.5, 2.0, len(received))
    assert_same_params(fused.weighted_update_sum(received, weights), plain.weighted_update_sum(received, weights))
    assert fused.summed_loss() == plain.summed_loss() and fused.summed_loss()[1] == len(received)
    assert fused.summed(DRAWN) == plain.summed(DRAWN) == sum(r.sums.get(DRAWN) for r in plain if r.steps)


def test_the_loop_engines_replies_are_a_plain_reply_list(fed, module):
    ids = np.array([4, 1, 7])
    got = Simulator(fed, module, seed=3).run(ids, one_gradient_payload(module), 2)
    assert type(got) is Replies and got.failed == {} and got.received_positions().tolist() == [0, 2]
    assert got.summed_loss() == (got[0].loss + got[2].loss, 2)
    with pytest.raises(ValueError, match="drawn-sample count"):  # the plan did not ask for it
        got.summed(DRAWN)


def test_size_reports_of_a_million_clients_stay_one_array():
    """The vectorized engine answers size reports as NumberReplies over one int array (no Python object per
    client), and the failure model keeps it so: widening maps positions, numbers() is one array."""
    sizes = np.full(10**6, 2)
    values = NumberReplies(sizes)
    assert values.numbers().dtype == np.float64 and np.asarray(values) is sizes
    dropped = {0: Failed(0, "report_size", "dropped out"), 5: Failed(5, "report_size", "dropped out")}
    live = np.setdiff1d(np.arange(10**6 + 2), [0, 5])
    wide = values.widened(live, 10**6 + 2, dropped)
    assert type(wide) is NumberReplies and len(wide) == 10**6 + 2
    numbers = wide.numbers()
    assert np.isnan(numbers[[0, 5]]).all() and np.count_nonzero(np.isnan(numbers)) == 2 and numbers[1] == 2.0
    assert wide[0] is dropped[0] and wide[1] == 2 and wide.failures() == [dropped[0], dropped[5]]
    ids, reports, failed = fs.validate.screen_sizes(wide, np.arange(10**6 + 2), None)
    assert len(ids) == 10**6 and reports.dtype == np.int64 and failed == [dropped[0], dropped[5]]


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_size_reports_through_the_failure_model_are_validated_alike(fed, module, backend):
    sim = fs.simulation.make_federation(backend, fed, module, seed=3)
    faulty = Faulty(sim, FaultModel(dropout={"report_size": 0.3}), seed=1)
    ids = np.arange(fed.num_clients)
    got = faulty.run(ids, SizeQuery("exact"), 0)
    assert isinstance(got, ReplyList) and got.failed
    kept, reports, failed = fs.validate.screen_sizes(got, ids, None)
    assert sorted(kept.tolist() + [f.client for f in failed]) == ids.tolist()
    assert reports.tolist() == [SIZES[k] for k in kept]


def test_the_failure_model_keeps_a_fused_sum_fused_with_its_positions_mapped(fed, module):
    """Faulty(vectorized): the surviving clients' replies come back widened over the engine's batched cohort;
    the fused sum over cohort positions equals the plain sum of the same replies."""
    ids = np.arange(fed.num_clients)
    faulty = Faulty(VectorizedSimulator(fed, module, seed=3), FaultModel(dropout={"train": 0.4}), seed=2)
    got = faulty.run(ids, one_gradient_payload(module), 2)
    assert type(got) is FusedReplies and type(got.backing) is BatchedCohort and got.live is not None and got.fused and got.failed
    plain = Replies(list(got))
    received = got.received_positions()
    np.testing.assert_array_equal(received, plain.received_positions())
    assert not set(received.tolist()) & set(got.failed)
    weights = np.arange(1.0, len(received) + 1)
    assert_same_params(got.weighted_update_sum(received, weights), plain.weighted_update_sum(received, weights))
    assert got.summed_loss() == plain.summed_loss()


def test_rejecting_keeps_the_fused_abilities_and_leaves_the_rejected_out(fed, module):
    ids = np.arange(fed.num_clients)
    fused = VectorizedSimulator(fed, module, seed=3).run(ids, one_gradient_payload(module), 2)
    victim = int(fused.received_positions()[0])
    rejected = fused.rejecting({victim: Failed(victim, "train", "test")})
    assert type(rejected) is FusedReplies and type(rejected.backing) is BatchedCohort and rejected.fused and fused.failed == {}  # the original is untouched
    assert is_failed_at(rejected, victim) and victim not in rejected.received_positions().tolist()
    others = rejected.received_positions()
    assert_same_params(rejected.weighted_update_sum(others, np.ones(len(others))),
                       Replies(list(rejected)).weighted_update_sum(others, np.ones(len(others))))
    loss, count = rejected.summed_loss()
    assert count == len(fused.received_positions()) - 1 and loss == pytest.approx(fused.summed_loss()[0] - fused[victim].loss)


def test_a_one_gradient_cohort_builds_a_report_only_when_one_is_read(fed, module):
    """The engine's fused cohort answers every protocol question from its arrays (30,000 clients cost no Python
    object each): after the received positions, the summed loss, the drawn total and the shallow screen no report
    object exists; a report read is built once (the same object every time) with the numbers the arrays hold."""
    ids = np.arange(fed.num_clients)
    payload = one_gradient_payload(module, counted=True)
    fused = VectorizedSimulator(fed, module, seed=3).run(ids, payload, 2)
    received = fused.received_positions()
    loss, count = fused.summed_loss()
    drawn = fused.summed(DRAWN)
    assert fs.validate.screen_updates(fused, ids, payload.params) is fused and fused.suspect_positions().size == 0
    assert fused.backing._made == {}  # nothing read one by one so far
    first = int(received[0])
    assert fused[first] is fused[first] and len(fused.backing._made) == 1 and fused[-len(fused) + first] is fused[first]
    plain = Replies(list(fused))
    assert (loss, count) == plain.summed_loss() and drawn == plain.summed(DRAWN) and count == len(received)
    assert all(plain[int(i)] is fused[int(i)] for i in received)  # the list copy holds the same report objects


class _Sqrt(torch.nn.Module):
    def forward(self, x):
        return x.sqrt()  # NaN on negative features


def test_the_shallow_screen_reads_the_one_gradient_reports_it_cannot_vouch_for():
    """A client whose features the model maps to NaN reports a NaN loss: the fused cohort names it among its
    suspects and the screen rejects it with the reason the per-reply screen gives, the other clients as they were."""
    ds = blobs(n=100)
    x = np.abs(ds.x_train)
    x[5:12] = -1.0  # client 1 holds no rows; client 2's rows are 5..11
    bad = federate(dataclasses.replace(ds, x_train=x), SIZES)
    module = torch.nn.Sequential(_Sqrt(), torch.nn.Linear(x.shape[1], ds.num_classes))
    ids = np.arange(bad.num_clients)
    payload = TrainPayload(initial_parameters(module, 1), AllSamples(), OneGradient(5), 2)
    fused = VectorizedSimulator(bad, module, seed=3).run(ids, payload, 2)
    assert type(fused) is FusedReplies and type(fused.backing) is BatchedCohort and fused.suspect_positions().tolist() == [2]
    screened = fs.validate.screen_updates(fused, ids, payload.params)
    plain = fs.validate.screen_updates(Replies(list(fused)), ids, payload.params, deep=False)
    assert type(screened) is FusedReplies and type(screened.backing) is BatchedCohort and screened.failed == plain.failed and list(screened.failed) == [2]
    assert screened.failed[2].reason == "non-finite loss nan"
    np.testing.assert_array_equal(screened.received_positions(), plain.received_positions())
    assert screened.summed_loss() == plain.summed_loss()


def is_failed_at(replies, position):
    return isinstance(replies[position], Failed) and position in replies.failed


def test_a_plain_list_from_another_federation_is_read_as_replies():
    reports = [TrainReport({"w": torch.ones(2)}, 1, 0.5), None, Failed(3, "train", "lost")]
    replies = replies_of(reports)
    assert type(replies) is Replies and replies.failed == {2: reports[2]} and replies.received_positions().tolist() == [0]
    assert replies_of(replies) is replies
    assert isinstance(replies_of(np.array([3, 4])), NumberReplies)
    assert fs.training.aggregate.Sum().combine(reports, fs.rounds.Cohort(np.arange(3), np.ones(3), 3), None)["w"].tolist() == [1.0, 1.0]


def test_the_typed_readers_return_the_replies_and_refuse_a_wrong_one_naming_it():
    report, lost = TrainReport({"w": torch.ones(2)}, 1, 0.5), Failed(1, "probe", "lost")
    replies = Replies([report, {"w": 1.0}, lost])
    assert replies.report(0) is report and train_report(report) is report
    with pytest.raises(TypeError, match="a train call's reply is a dict, not a TrainReport"):
        replies.report(1)
    with pytest.raises(TypeError, match="a train call's reply is a dict"):  # a sum reads each received reply through it
        Replies([report, {"w": 1.0}]).summed_loss()
    probes = [ProbeReport(loss=0.25, grad_norm=None), lost]
    assert probe_reports(Replies(probes)) == probes
    with pytest.raises(TypeError, match="a probe's reply is a TrainReport, not a ProbeReport"):
        probe_reports(Replies([probes[0], report]))
    assert reply_as(HeldReport(2.0), HeldReport, "train_held").norm == 2.0
    with pytest.raises(TypeError, match="a train_held call's reply is a float, not a HeldReport"):
        reply_as(2.0, HeldReport, "train_held")


# --- payloads ---------------------------------------------------------------------------------------------


def test_payloads_are_shared_or_declared_per_client():
    assert payloads_for("q", 3).at(2) == "q" and payloads_for("q", 3).shared == "q"
    each = payloads_for(PerClient(["a", "b", "c"]), 3)
    assert each.shared is None and each.at(1) == "b" and list(each.take([2, 0])) == ["c", "a"]
    with pytest.raises(ValueError, match="2 payloads for 3 clients"):
        payloads_for(PerClient(["a", "b"]), 3)
    with pytest.raises(TypeError, match="PerClient"):
        payloads_for(["a", "b", "c"], 3)


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_per_client_payloads_reach_their_clients_through_the_failure_model(fed, module, backend):
    """One solver per client (client k takes k+1 steps of batch 1): the clients the failure model keeps get
    their own payloads, whatever was dropped before them."""
    ids = np.arange(2, 9)
    params = initial_parameters(module, 0)
    payloads = PerClient([TrainPayload(params, AllSamples(), LocalSGD(lr=0.1, epochs=None, steps=k + 1, batch_size=1), 0)
                          for k in ids.tolist()])
    sim = fs.simulation.make_federation(backend, fed, module, seed=3)
    got = Faulty(sim, FaultModel(dropout={"train": 0.5}), seed=4).run(ids, payloads, 0)
    assert got.failed and len(got.failed) < len(ids)
    for position in got.received_positions().tolist():
        assert got[position].steps == ids[position] + 1


# --- secure sum and federation wrappers ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SeenReplies:
    """An aggregator that records the reply lists it is handed."""

    inner: object
    seen: list

    @property
    def capabilities(self):
        return self.inner.capabilities

    def combine(self, reports, cohort, ctx):
        self.seen.append(reports)
        return self.inner.combine(reports, cohort, ctx)


def test_simulate_seals_the_replies_of_a_strategy_that_declares_a_secure_sum():
    fed = federate(blobs(n=100), [6] * 10)
    for secure in (True, False):
        seen = []
        strategy = fs.recipes.fedsampling(K=20, epsilon=3.0, M=10, server_lr=0.1, secure_sum=secure)
        strategy = dataclasses.replace(strategy, aggregate=SeenReplies(strategy.aggregate, seen))
        fs.simulate(strategy, federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=0)
        assert len(seen) == 2 and all(r.sealed == secure and (isinstance(r, FusedReplies) and isinstance(r.backing, SealedCohort)) == secure for r in seen)


def test_a_round_refuses_readable_replies_when_the_strategy_declares_a_secure_sum(module):
    fed = federate(blobs(n=100), [6] * 10)  # randomized size reports need at least one sample per client
    strategy = fs.recipes.fedsampling(K=20, epsilon=3.0, M=10, server_lr=0.1)
    params = initial_parameters(module, 0)
    with pytest.raises(ValueError, match="declares secure_sum.*with_secure_sum"):
        strategy.round(Simulator(fed, module, 0), params, strategy.init_state(params), 0, seed=0)
    sealed = with_secure_sum(Simulator(fed, module, 0))
    assert isinstance(sealed, SecureSum) and with_secure_sum(sealed) is sealed
    assert with_secure_sum(sealed.inner, on=False) is sealed.inner
    strategy.round(sealed, params, strategy.init_state(params), 0, seed=0)


def test_wrappers_declare_the_client_states_of_what_they_wrap(fed, module):
    sim = Simulator(fed, module, 0)
    sim.context(3).state["w"] = 1
    wrapped = with_secure_sum(Faulty(sim))
    assert isinstance(wrapped, KeepsClientStates) and client_states_of(wrapped) == {3: {"w": 1}}
    wrapped.load_client_states({4: {"w": 2}})
    assert sim.client_states() == {4: {"w": 2}}

    class Stateless:
        num_clients = 3

        def run(self, ids, payload, round):
            return [0] * len(ids)

    assert not isinstance(Stateless(), KeepsClientStates) and client_states_of(Faulty(Stateless())) == {}


# --- federation factories ---------------------------------------------------------------------------------


class LoopFactory(FederationFactory):
    """A factory that opens the reference loop and records its life."""

    def __init__(self):
        self.events = []

    @contextlib.contextmanager
    def open(self, data, module, seed, *, memory_budget=None, device="cpu"):
        self.events.append("open")
        try:
            yield Simulator(data, module, seed, device=device)
        finally:
            self.events.append("close")


def test_simulate_opens_a_federation_factory_for_the_run_and_closes_it_also_on_error(fed):
    strategy = fs.recipes.fedavg(clients_per_round=4, lr=0.1, batch_size=4)
    factory = LoopFactory()
    got = fs.simulate(strategy, federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=1, engine=Engine(federation=factory))
    want = fs.simulate(strategy, federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=1, engine=Engine(backend="loop"))
    assert factory.events == ["open", "close"] and got.history == want.history
    assert (got.backend, got.backend_reason) == ("given", "a federation was passed")

    def stop(_round):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fs.simulate(strategy, federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=1, engine=Engine(federation=factory), callbacks=[Progress(stop)])
    assert factory.events == ["open", "close"] * 2


def test_a_backend_name_as_federation_is_one_line_naming_the_factory(fed):
    with pytest.raises(ValueError, match=r"federation must be a federation or a federation factory .*ray_federation.*'ray'"):
        fs.simulate(
            fs.recipes.fedavg(clients_per_round=2), federated_data=fed, model=fs.models.LogisticRegression(), rounds=1, engine=Engine(federation="ray"),
        )


def test_there_are_three_reply_list_kinds():
    """Every engine's answer is one of three kinds (issue 39): the plain list, numbers as one array, and a fused list
    over an engine's backing; no other class in fedsample implements the reply-list protocol."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(fs.__path__, "fedsample."):
        with contextlib.suppress(ImportError):  # an optional extra not installed
            importlib.import_module(info.name)

    def below(cls):
        return {cls} | {d for sub in cls.__subclasses__() for d in below(sub)}

    kinds = {c for c in below(ReplyList) if c.__module__.startswith("fedsample.") and c is not ReplyList}
    assert kinds == {Replies, NumberReplies, FusedReplies}


class _Listed(fs.rounds.ReplyObjects):
    def __init__(self, replies):
        self.replies = replies


def test_widening_twice_and_rejecting_map_positions_like_the_plain_list():
    """A fused list widened into a cohort, then into a larger one, and a rejection made at an outer position: each
    answer equals the plain list's holding the same replies at the same positions."""
    reports = [TrainReport({"w": torch.tensor([float(k + 1)])}, 1, 0.25 * k, sums={DRAWN: k + 2}) for k in range(4)]
    reports[2] = TrainReport({"w": torch.zeros(1)}, 0, 0.0)  # an empty reply: no step
    first = FusedReplies(_Listed(reports)).widened(np.array([0, 2, 3, 5]), 6, {1: Failed(1, "train", "a"), 4: Failed(4, "train", "b")})
    twice = first.widened(np.array([1, 2, 3, 4, 6, 7]), 8, {0: Failed(10, "train", "c"), 5: Failed(15, "train", "d")})
    # the backing's reply j sits at positions [0, 2, 3, 5] of the first cohort, [1, 3, 4, 7] of the second
    rejected = twice.rejecting({3: Failed(1, "train", "screened")})
    items = [Failed(10, "train", "c"), reports[0], Failed(1, "train", "a"), Failed(1, "train", "screened"), reports[2],
             Failed(15, "train", "d"), Failed(4, "train", "b"), reports[3]]
    plain = Replies(items)
    assert type(rejected) is FusedReplies and rejected.backing is twice.backing and len(rejected) == 8
    assert list(rejected) == items and rejected.failures() == plain.failures() and sorted(rejected.failed) == [0, 2, 3, 5, 6]
    np.testing.assert_array_equal(rejected.received_positions(), plain.received_positions())
    assert rejected.received_positions().tolist() == [1, 7]
    weights = np.array([0.5, 3.0])
    assert rejected.weighted_update_sum(np.array([1, 7]), weights)["w"].tolist() == plain.weighted_update_sum(np.array([1, 7]), weights)["w"].tolist() == [0.5 + 12.0]
    assert rejected.summed_loss() == plain.summed_loss() == (0.75, 2) and rejected.summed(DRAWN) == plain.summed(DRAWN) == 7
    assert twice.received_positions().tolist() == [1, 3, 7] and twice.failed.keys() == {0, 2, 5, 6}  # the original is untouched
    with pytest.raises(ValueError, match="arrived"):
        twice.rejecting({2: Failed(1, "train", "x")})  # position 2 was never asked
