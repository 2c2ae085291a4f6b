"""Every reply is validated before aggregation: non-finite or wrong-shape updates, bad size reports and
duplicates are rejected with a reason in the round's record and never averaged in."""

import numpy as np
import pytest
import torch

from fedsample.messages import payloads_for
from fedsample import privacy, recipes, validate
from fedsample.messages import TrainReport
from fedsample.federation.simulator import Simulator
from fedsample.models import LogisticRegression, initial_parameters
from fedsample.rounds import Failed, is_failed
from fedsample.simulation import simulate
from helpers import blobs, federate
from fedsample.simulation import Engine

PARAMS = {"w": torch.zeros(3, 2), "b": torch.zeros(3)}


def report(value=0.5, **changes):
    update = {"w": torch.full((3, 2), value), "b": torch.full((3,), value)}
    update.update(changes)
    return TrainReport(update=update, steps=1, loss=0.1)


@pytest.mark.parametrize(
    "bad, reason",
    [
        (report(float("nan")), "non-finite update"),
        (report(float("inf")), "non-finite update"),
        (report(w=torch.zeros(2, 3)), "has shape"),
        (TrainReport(update={"w": torch.zeros(3, 2)}, steps=1, loss=0.1), "model's parameters"),
        (TrainReport(update=report().update, steps=-1, loss=0.1), "step count"),
        (TrainReport(update=report().update, steps=1, loss=float("nan")), "non-finite loss"),
    ],
)
def test_bad_updates_are_rejected_with_a_reason(bad, reason):
    replies = validate.screen_updates([report(), bad, None], np.array([4, 5, 6]), PARAMS)
    assert not is_failed(replies[0]) and replies[2] is None
    assert is_failed(replies[1]) and replies[1].client == 5 and reason in replies[1].reason
    assert replies.received_positions().tolist() == [0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_finiteness_on_the_host_path_agrees_with_torch(dtype):
    """tensor_finite (numpy on float32/float64 host tensors, torch otherwise) answers as torch.isfinite: a NaN, an
    inf or a -inf anywhere (also in a non-contiguous view or a tensor that requires grad) makes it False."""
    base = torch.randn(7, 5, dtype=torch.float64).to(dtype)
    cases = [base, base.T, base[:, ::2], torch.zeros(0, dtype=dtype), base.clone().requires_grad_(True)]
    for bad in (float("nan"), float("inf"), float("-inf")):
        for where in ((0, 0), (6, 4), (3, 2)):
            t = base.clone()
            t[where] = bad
            cases += [t, t.T, t[:, ::2]]
    for t in cases:
        assert validate.tensor_finite(t) == bool(torch.isfinite(t).all())
    assert validate.params_finite({"a": base, "b": base * 2}) and not validate.params_finite({"a": base, "b": cases[-3]})


def test_update_problem_names_the_first_bad_key_in_order():
    """An update with a non-finite tensor and a misshapen one is rejected for whichever comes first in its key
    order (finiteness is read once for the keys before the first misshapen one)."""
    params = {"a": torch.zeros(2), "b": torch.zeros(3), "c": torch.zeros(4)}
    nan_then_shape = {"a": torch.tensor([0.0, float("nan")]), "b": torch.zeros(5), "c": torch.zeros(4)}
    shape_then_nan = {"a": torch.zeros(2), "b": torch.zeros(5), "c": torch.full((4,), float("inf"))}
    assert validate.update_problem(nan_then_shape, params) == "non-finite update of 'a'"
    assert validate.update_problem(shape_then_nan, params) == "update of 'b' has shape (5,), expected (3,)"
    assert validate.update_problem({"a": torch.zeros(2), "b": [0.0] * 3, "c": torch.zeros(4)}, params) == "update of 'b' has shape (), expected (3,)"
    late = {"a": torch.zeros(2), "b": torch.zeros(3), "c": torch.tensor([0.0, 0.0, float("-inf"), 0.0], dtype=torch.float16)}
    assert validate.update_problem(late, params) == "non-finite update of 'c'"
    assert validate.update_problem({k: v + 1 for k, v in params.items()}, params) is None


def test_params_finite_answers_as_every_tensor_alone():
    """params_finite folds the torch-checked tensors into one flag per device: it answers as tensor_finite over
    every tensor, wherever the bad entry is, with host (numpy) and torch-checked tensors mixed in one dict."""
    good = {"w": torch.randn(4, 3), "b": torch.randn(3, dtype=torch.float16), "h": torch.randn(2, dtype=torch.bfloat16),
            "e": torch.zeros(0, dtype=torch.float16), "d": torch.randn(5, dtype=torch.float64)}
    assert validate.params_finite(good) and validate.params_finite({})
    for key in good:
        for bad in (float("nan"), float("inf")):
            if good[key].numel() == 0:
                continue
            params = {k: v.clone() for k, v in good.items()}
            params[key].view(-1)[-1] = bad
            assert not validate.params_finite(params), (key, bad)
            assert validate.params_finite(params) == all(validate.tensor_finite(v) for v in params.values())


@pytest.mark.parametrize("M", [None, 10])
def test_integer_size_reports_screen_as_their_floats(M):
    """An engine's integer reports (NumberReplies) are screened as the same numbers one by one: all valid, the
    integer shortcut; one out of range or failed, each failure named as before."""
    from fedsample.rounds import NumberReplies, Replies

    ids = np.array([3, 8, 20, 21])
    for values, failed in (([1, 9, 4, 2], {}), ([1, 10, 4, 0], {}), ([1, 9, 4, 2], {2: Failed(20, "report_size", "dropped out")})):
        fast = validate.screen_sizes(NumberReplies(np.array(values, dtype=np.int64), failed), ids, M)
        plain = validate.screen_sizes(Replies([failed.get(i, v) for i, v in enumerate(values)], failed), ids, M)
        assert fast[0].tolist() == plain[0].tolist() and fast[1].tolist() == plain[1].tolist() and fast[2] == plain[2]
        assert fast[1].dtype == np.int64


def test_a_duplicate_reply_is_rejected():
    one = report()
    replies = validate.screen_updates([one, one], np.array([0, 1]), PARAMS)
    assert replies[0] is one and replies[1] == Failed(1, "train", "duplicate reply")


def test_wrong_number_of_replies_is_an_error():
    with pytest.raises(RuntimeError, match="2 training replies for 3 clients"):
        validate.screen_updates([report(), report()], np.arange(3), PARAMS)


@pytest.mark.parametrize(
    "value, M, reason",
    [(3.5, 10, "not an integer"), (0, 10, "outside"), (10, 10, "outside"), (-1, None, "outside"),
     (float("nan"), None, "not an integer"), ("7", None, "not a number"), (True, None, "not a number")],
)
def test_bad_size_reports_are_left_out(value, M, reason):
    ids, reports, failed = validate.screen_sizes([4, value, 2], np.array([0, 1, 2]), M)
    assert ids.tolist() == [0, 2] and reports.tolist() == [4, 2]
    assert failed[0].client == 1 and reason in failed[0].reason


def test_estimate_total_rejects_a_2d_array_of_reports():
    with pytest.raises(ValueError, match="1-D"):
        privacy.estimate_total(np.ones((4, 2), dtype=int), 3.0, 10)


def poisoned(client: int):
    """Blobs whose client ``client`` holds NaN features (its gradients are NaN)."""
    ds = blobs()
    fed = federate(ds, [40] * 6)
    ds.x_train[fed.client_indices(client)] = np.nan
    return fed


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
@pytest.mark.parametrize("name", ["fedsampling", "fedavg"])
def test_a_nan_client_never_poisons_the_model(backend, name):
    """FedSampling on the vectorized engine forms the aggregate without per-client updates (fused sum): the
    non-finite aggregate triggers the per-client check, which rejects the poisoned client."""
    strategy = recipes.fedsampling(K=60, epsilon=3.0, M=50, server_lr=0.5) if name == "fedsampling" else recipes.fedavg(
        clients_per_round=6, lr=0.1, batch_size=8)
    result = simulate(strategy, federated_data=poisoned(3), model=LogisticRegression(), rounds=3, seed=0, engine=Engine(backend=backend))
    assert all(torch.isfinite(v).all() for v in result.params.values())
    for record in result.history:
        bad = [f for f in record["failed"] if f["phase"] == "train"]
        assert [f["client"] for f in bad] == [3] and bad[0]["reason"].startswith("non-finite")
    assert result.final["accuracy"] > 0.5  # the other clients still train the model


def test_fused_and_loop_paths_reject_the_same_client_and_agree():
    strategy = recipes.fedsampling(K=60, epsilon=3.0, M=50, server_lr=0.5)
    runs = [simulate(strategy, federated_data=poisoned(1), model=LogisticRegression(), rounds=2, seed=1, engine=Engine(backend=b)) for b in ("loop", "vectorized")]
    for k, v in runs[0].params.items():
        torch.testing.assert_close(v, runs[1].params[k], rtol=1e-4, atol=1e-5)


def test_a_non_finite_probe_names_strategy_seed_and_round():
    fed = poisoned(2)
    strategy = recipes.fedsts(H=2, m=4, dim=3, lr=0.1)
    from fedsample.simulation import Diverged

    with pytest.raises(Diverged, match=r"fedsts.*seed 0, round 1: client 2's probe is unusable"):
        simulate(strategy, federated_data=fed, model=LogisticRegression(), rounds=1, seed=0)


def test_a_probe_problem_says_whether_the_client_holds_no_samples():
    from fedsample.messages import ProbeReport

    lost = validate.probe_problem(Failed(3, "probe", "no reply within 5 s"))
    assert lost == validate.ProbeProblem("no reply within 5 s", no_samples=False)
    empty = validate.probe_problem(Failed(3, "probe", "raised NoSamples: ...", no_samples=True))
    assert empty is not None and empty.no_samples
    nan = validate.probe_problem(ProbeReport(loss=float("nan"), grad_norm=1.0))
    assert nan is not None and not nan.no_samples and nan.reason.startswith("non-finite probe (loss nan")
    assert validate.probe_problem(ProbeReport(loss=0.5, grad_norm=1.0)) is None


def test_an_empty_client_under_a_sampler_that_probes_is_named_without_the_divergence_hint():
    """A client without samples has no loss or gradient to probe (fedsample.client.probe raises, the reply is a
    Failed one): the error names it and why, and does not blame the learning rate, which a non-finite probe does."""
    fed = federate(blobs(), [40, 40, 0, 40, 40, 40])
    strategy = recipes.fedsts(H=2, m=6, dim=3, lr=0.1)
    with pytest.raises(ValueError, match=r"client 2's probe is unusable \(.*the client holds no samples") as refused:
        simulate(strategy, federated_data=fed, model=LogisticRegression(), rounds=1, seed=0)
    assert "diverged" not in str(refused.value)
    with pytest.raises(Exception, match="a non-finite probe usually means the model diverged"):
        simulate(strategy, federated_data=poisoned(2), model=LogisticRegression(), rounds=1, seed=0)


def test_params_unchanged_when_every_update_is_invalid():
    fed = federate(blobs(), [40] * 3)
    module = LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)

    class AllNaN(Simulator):
        def run(self, ids, payload, round):
            procedure = payloads_for(payload, len(ids)).procedure.name  # the name the request's type declares
            got = super().run(ids, payload, round)
            if procedure != "train":
                return got
            return [TrainReport({k: v * np.nan for k, v in r.update.items()}, r.steps, r.loss) for r in got]

    strategy = recipes.fedavg(clients_per_round=3, lr=0.1, batch_size=8)
    params = initial_parameters(module, 0)
    new, log = strategy.round(AllNaN(fed, module, 0), params, strategy.init_state(params), 0, 0)
    assert all(torch.equal(new[k], params[k]) for k in params)
    assert log["params_unchanged"] == "no valid update arrived" and log["dropped"] == 3


def test_a_reply_of_another_type_is_refused_by_name_not_probed():
    """Each screen reads the declared fields of its procedure's report type: a reply of any other type (here one
    that has every field a train report has, but is not one) is rejected, naming both types, and an update list
    keeps the valid replies beside it."""
    from dataclasses import dataclass

    from fedsample.messages import HeldReport, ProbeReport

    @dataclass
    class LookAlike:
        update: dict
        steps: int = 1
        loss: float = 0.1
        norm: float = 1.0

    fake = LookAlike(report().update)
    assert validate.report_problem(fake, PARAMS, deep=True) == "a reply of type LookAlike where a TrainReport is expected"
    assert validate.probe_problem(fake) == validate.ProbeProblem("a reply of type LookAlike where a ProbeReport is expected")
    assert validate.held_problem(fake) == "a reply of type LookAlike where a HeldReport is expected"
    assert validate.held_problem(HeldReport(2.0)) is None and validate.probe_problem(ProbeReport(loss=None, grad_norm=None)) is None
    screened = validate.screen_updates([report(), fake], np.array([4, 7]), PARAMS)
    assert not is_failed(screened[0]) and screened[1] == Failed(7, "train", "a reply of type LookAlike where a TrainReport is expected")
