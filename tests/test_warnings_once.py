"""Each warning once per run (fedsample.runtime.warned): a warning that repeats every round is shown once, counted, said at
the end and kept in the run's record; different kinds are each shown; warnings outside a run are untouched."""

import threading
import warnings

import pytest

import fedsample as fs
from fedsample.privacy.amplification import PrivacyWarning
from fedsample.runtime.warned import once_per_kind
from helpers import blobs, federate
from fedsample.callbacks import Progress

ROUNDS = 7


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=120), [5, 8, 13, 21, 34, 9, 30])


def run(fed, progress):
    return fs.simulate(
        fs.recipes.fedavg(clients_per_round=3, lr=0.1, batch_size=8), federated_data=fed, model=fs.models.LogisticRegression(), rounds=ROUNDS, seed=0, callbacks=[Progress(progress)],
    )


def test_a_warning_every_round_is_shown_once_counted_and_recorded(fed, capsys):
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")  # without the run, every round's warning would be printed
        result = run(fed, lambda t: warnings.warn("privacy: probes without noise", PrivacyWarning, stacklevel=2))
    assert [(w.category, str(w.message)) for w in shown] == [(PrivacyWarning, "privacy: probes without noise")]
    assert result.warnings == [{"kind": "PrivacyWarning", "message": "privacy: probes without noise", "count": ROUNDS}]
    assert capsys.readouterr().err.splitlines() == [f"PrivacyWarning shown once, repeated {ROUNDS - 1} more times: privacy: probes without noise"]


def test_two_kinds_are_both_shown_and_counted_apart(fed, capsys):
    def two(t):
        warnings.warn("a", UserWarning, stacklevel=2)
        warnings.warn("a", RuntimeWarning, stacklevel=2)  # same text, another category: another kind
        if t == 3:
            warnings.warn("only once", UserWarning, stacklevel=2)

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        result = run(fed, two)
    assert [(w.category, str(w.message)) for w in shown] == [(UserWarning, "a"), (RuntimeWarning, "a"), (UserWarning, "only once")]
    assert result.warnings == [{"kind": "UserWarning", "message": "a", "count": ROUNDS},
                               {"kind": "RuntimeWarning", "message": "a", "count": ROUNDS},
                               {"kind": "UserWarning", "message": "only once", "count": 1}]
    assert capsys.readouterr().err.splitlines() == [f"UserWarning shown once, repeated {ROUNDS - 1} more times: a",
                                                    f"RuntimeWarning shown once, repeated {ROUNDS - 1} more times: a"]


def test_warnings_outside_a_run_are_untouched(fed):
    before = warnings.showwarning
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        run(fed, lambda t: warnings.warn("inside", UserWarning, stacklevel=2))
        for _ in range(3):
            warnings.warn("outside", UserWarning, stacklevel=2)
    assert warnings.showwarning is before
    assert [str(w.message) for w in shown] == ["inside", "outside", "outside", "outside"]


def test_pytest_warns_around_a_run_still_sees_its_warning(fed):
    with pytest.warns(PrivacyWarning, match="probes"):
        run(fed, lambda t: warnings.warn("probes", PrivacyWarning, stacklevel=2))


def test_an_error_filter_still_raises_inside_a_run(fed):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        with pytest.raises(PrivacyWarning):
            run(fed, lambda t: warnings.warn("probes", PrivacyWarning, stacklevel=2))


def test_runs_inside_a_run_are_counted_by_the_outer_one_which_alone_says_the_repeats(fed, capsys):
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with once_per_kind() as outer:
            inner = [run(fed, lambda t: warnings.warn("again", UserWarning, stacklevel=2)) for _ in range(2)]
    assert len(shown) == 1
    assert [r.warnings for r in inner] == [[{"kind": "UserWarning", "message": "again", "count": ROUNDS}]] * 2
    assert outer.record() == [{"kind": "UserWarning", "message": "again", "count": 2 * ROUNDS}]
    assert capsys.readouterr().err.splitlines() == [f"UserWarning shown once, repeated {2 * ROUNDS - 1} more times: again"]


def test_warnings_from_other_threads_are_all_counted(capsys):
    threads, each = 4, 250
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with once_per_kind() as warned:
            workers = [threading.Thread(target=lambda: [warnings.warn("busy", UserWarning, stacklevel=2) for _ in range(each)]) for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    assert len(shown) == 1
    assert warned.record() == [{"kind": "UserWarning", "message": "busy", "count": threads * each}]
    assert capsys.readouterr().err.strip() == f"UserWarning shown once, repeated {threads * each - 1:,} more times: busy"


def test_fedsample_run_keeps_the_warnings_in_results_json(tmp_path, monkeypatch, capsys):
    import json

    from fedsample.cli import main
    from fedsample.strategy import Strategy

    plain = Strategy.round

    def warning_round(self, *args, **kwargs):
        warnings.warn("every round", UserWarning, stacklevel=2)
        return plain(self, *args, **kwargs)

    monkeypatch.setattr(Strategy, "round", warning_round)
    path = tmp_path / "e.toml"
    path.write_text('name = "w"\nrounds = 3\nseeds = [0, 1]\n[dataset]\nname = "digits"\n[partition]\nscheme = "iid"\n'
                    'num_clients = 6\n[model]\nname = "logreg"\n[[strategies]]\nrecipe = "fedavg"\nclients_per_round = 3\nlr = 0.1\n')
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["warnings"] == [{"kind": "UserWarning", "message": "every round", "count": 6}]  # 3 rounds x 2 seeds
    assert "UserWarning shown once, repeated 5 more times: every round" in capsys.readouterr().err.splitlines()
