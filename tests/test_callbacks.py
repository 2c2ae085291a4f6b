"""simulate as an engine run plus callbacks: at most 10 parameters, the earlier keywords refused in one line naming
the option objects' spelling, each callback told of every round in order, and a failed run ending every begun
callback as failed."""

import inspect

import pytest

import fedsample as fs
from fedsample.callbacks import Callback, Checkpoint, Diverged, Progress
from fedsample.simulation import Engine, simulate
from helpers import blobs, federate

SIZES = [3, 5, 8, 2, 6, 4]


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=120), SIZES)


def fedavg(lr=0.1):
    return fs.recipes.fedavg(clients_per_round=3, lr=lr, batch_size=4)


class Journal(Callback):
    """Every call a callback gets, in order."""

    def __init__(self):
        self.calls = []

    def begin(self, run):
        self.calls.append(("begin", run.state.round))

    def on_record(self, run, record):
        self.calls.append(("record", record["round"], run.state.round))  # before it is kept: state.round is the last kept

    def after_round(self, run):
        self.calls.append(("kept", run.state.round, len(run.state.history)))

    def end(self, run, failed):
        self.calls.append(("end", failed))


def test_simulate_takes_at_most_ten_parameters():
    assert len(inspect.signature(simulate).parameters) <= 10


EARLIER = {  # an earlier keyword, its value, and what the refusal names
    "backend": ("loop", r"engine=Engine\(backend=\.\.\.\)"), "federation": (None, r"engine=Engine\(federation=\.\.\.\)"),
    "device": ("cpu", r"engine=Engine\(device=\.\.\.\)"), "workers": (2, r"engine=Engine\(workers=\.\.\.\)"),
    "client_threads": (2, r"engine=Engine\(client_threads=\.\.\.\)"),
    "memory_budget": (10**6, r"engine=Engine\(memory_budget=\.\.\.\)"),
    "trackers": ([], r"callbacks=\[Tracking\(trackers\)\]"), "checkpoint": ("x.pt", r"callbacks=\[Checkpoint\(path\)\]"),
    "checkpoint_every": (2, r"callbacks=\[Checkpoint\(path, every=\.\.\.\)\]"),
    "resume": (True, r"callbacks=\[Checkpoint\(path, resume=True\)\]"), "progress": (print, r"callbacks=\[Progress\(report\)\]"),
}


@pytest.mark.parametrize("keyword", sorted(EARLIER))
def test_an_earlier_keyword_is_refused_in_one_line_naming_its_spelling_now(fed, keyword, tmp_path):
    value, spelling = EARLIER[keyword]
    with pytest.raises(TypeError, match=f"^simulate: {keyword} was renamed {spelling}$") as refused:
        simulate(fedavg(), fed, fs.models.LogisticRegression(), rounds=1, **{keyword: value})
    assert "\n" not in str(refusal := refused.value) and refusal.name == keyword
    assert not (tmp_path / "x.pt").exists()


def test_data_is_refused_naming_federated_data(fed):
    with pytest.raises(TypeError, match="^simulate: data was renamed federated_data$"):
        simulate(fedavg(), data=fed, model=fs.models.LogisticRegression(), rounds=1)


def test_the_option_objects_are_the_one_way_in(fed, tmp_path):
    seen = []
    run = simulate(fedavg(), fed, fs.models.LogisticRegression(), rounds=3, seed=4, engine=Engine(backend="loop", memory_budget=10**6),
                   callbacks=[Checkpoint(tmp_path / "run.pt", every=2), Progress(seen.append)])
    assert run.backend == "loop" and seen == [1, 2, 3] and (tmp_path / "run.pt").exists()


def test_each_callback_sees_every_record_before_it_is_kept_then_the_kept_round(fed):
    journal = Journal()
    simulate(fedavg(), fed, fs.models.LogisticRegression(), rounds=2, seed=0, callbacks=[journal])
    assert journal.calls == [("begin", 0), ("record", 1, 0), ("kept", 1, 1), ("record", 2, 1), ("kept", 2, 2), ("end", False)]


def test_a_diverged_run_ends_every_callback_as_failed_after_its_record_was_seen(fed, tmp_path):
    journal = Journal()
    with pytest.raises(Diverged, match="round 1"):
        simulate(fedavg(lr=1e30), fed, fs.models.MLP(hidden=8), rounds=3, seed=0,
                 callbacks=[journal, Checkpoint(tmp_path / "c.pt")])
    assert journal.calls == [("begin", 0), ("record", 1, 0), ("end", True)]
    assert not (tmp_path / "c.pt").exists()  # a failed run saves nothing at its end


@pytest.mark.parametrize("options, name", [({"workers": 0}, "workers"), ({"client_threads": 0}, "client_threads"),
                                           ({"memory_budget": -1}, "memory_budget"), ({"backend": "gpu"}, "backend"),
                                           ({"federation": "ray"}, "federation")])
def test_an_engine_refuses_a_bad_setting_in_one_line_naming_it(options, name):
    with pytest.raises(ValueError, match=name) as refused:
        Engine(**options)
    assert "\n" not in str(refused.value)


def test_a_checkpoint_refuses_a_negative_period():
    with pytest.raises(ValueError, match="checkpoint_every"):
        Checkpoint("c.pt", every=-1)
