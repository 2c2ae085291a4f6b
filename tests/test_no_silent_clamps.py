"""No silent clamps (issue 27, class 7): a count the data cannot hold is refused where the strategy meets the data,
and a count that only a round's reports push out of range is clamped with the round's record saying so."""

import json

import numpy as np
import pytest

import fedsample as fs
from fedsample import recipes
from fedsample.checks import ParameterError
from fedsample.cli import main
from fedsample.federation.faults import FaultModel
from fedsample.models import LogisticRegression
from fedsample.privacy.sizes import ExactSizes
from fedsample.sampling.clients import PoissonClients
from fedsample.simulation import simulate
from fedsample.strategy import Strategy
from fedsample.training.aggregate import WeightedMean
from fedsample.training.local import LocalSGD
from helpers import blobs, federate

DIGITS_TRAIN = 1438  # the digits dataset's training split
HEAD = ('name = "t"\nrounds = 2\nseeds = [0]\n[dataset]\nname = "digits"\n[partition]\nscheme = "iid"\nnum_clients = 5\n'
        '[model]\nname = "logreg"\n')


def strategy_toml(recipe: str, **values) -> str:
    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
    return HEAD + f'[[strategies]]\nrecipe = "{recipe}"\n' + body


REFUSED = {
    "fedsampling K": (strategy_toml("fedsampling", K=5000, M=20), "samples_per_round (K) must be at most the data's 1438 training samples, got 5000"),
    "centralized K": (strategy_toml("centralized", K=2048), "samples_per_round (K) must be at most the data's 1438 training samples, got 2048"),
    "centralized K/steps": (strategy_toml("centralized", K=4000, steps=2), "samples_per_round / steps (the minibatch) must be at most the data's 1438"),
    "fedavg samples_per_round": (strategy_toml("fedavg", samples_per_round=1439), "samples_per_round must be at most the data's 1438 training samples, got 1439"),
    "weighted samples_per_round": (strategy_toml("weighted_fedavg", samples_per_round=1500), "samples_per_round must be at most the data's 1438"),
    "fedstas eta": (strategy_toml("fedstas", H=2, m=4, dim=3, M=20), "samples_per_round (eta) must be at most the data's 1438 training samples, got 2048"),
    "fedsts H": (strategy_toml("fedsts", H=6, m=6), "H (strata) must be at most the number of clients, 5, got 6"),
    "isfedavg L": (strategy_toml("isfedavg", L=6), "clients_per_round (L) must be at most the number of clients, 5, got 6"),
    "iwds default m": (strategy_toml("iwds").replace("num_clients = 5", "num_clients = 4"), "clients_per_round (m) must be at most the number of clients, 4, got 5"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_run_refuses_a_count_the_data_cannot_hold_in_one_line_and_writes_nothing(tmp_path, capsys, name):
    text, words = REFUSED[name]
    path = tmp_path / "e.toml"
    path.write_text(text)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.toml"]


def test_diagnose_refuses_it_too_before_any_file(tmp_path, capsys):
    path = tmp_path / "e.toml"
    path.write_text(REFUSED["fedsampling K"][0])
    assert main(["diagnose", str(path), "--out", str(tmp_path / "out"), "--draws", "20", "--check-rounds", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "samples_per_round (K) must be at most" in err, err
    assert not (tmp_path / "out").exists()


def test_the_python_api_refuses_at_simulate_and_diagnose():
    fed = federate(blobs(n=240), [40] * 6)
    with pytest.raises(ParameterError, match=r"fedsampling: samples_per_round \(K\) must be at most the data's 240 training samples, got 241"):
        simulate(recipes.fedsampling(K=241, M=20), fed, LogisticRegression(), rounds=1)
    with pytest.raises(ParameterError, match=r"fedavg: clients_per_round \(m\) must be at most the number of clients, 6, got 7"):
        simulate(recipes.fedavg(clients_per_round=7), fed, LogisticRegression(), rounds=1)
    with pytest.raises(ParameterError, match=r"centralized: samples_per_round \(K\) must be at most the data's 240"):
        fs.diagnose({"C": recipes.centralized(K=256)}, fed, LogisticRegression(), rounds=20)
    # at the bound itself nothing is refused: K = N keeps every sample (exact sizes)
    simulate(recipes.fedsampling(K=240, sizes="exact"), fed, LogisticRegression(), rounds=1)


def test_fedsampling_records_every_round_whose_estimate_falls_below_K():
    """K/N~ > 1 (a noisy N~ below K) is capped at 1 and the round's record keeps the value asked; a round whose
    ratio is below 1 records nothing."""
    fed = federate(blobs(n=240), [12] * 20)
    strategy = recipes.fedsampling(K=200, epsilon=1.0, M=13, permanent=False, secure_sum=False, server_lr=0.1)
    history = simulate(strategy, fed, LogisticRegression(), rounds=30, seed=3).history
    capped = [r for r in history if "clamped" in r]
    assert 0 < len(capped) < len(history)  # both kinds of round occur at this noise
    for r in history:
        asked = 200 / r["size_estimate"]
        if asked > 1:
            assert r["ratio"] == 1.0 and r["clamped"] == {"ratio": pytest.approx(asked)}
        else:
            assert r["ratio"] == pytest.approx(asked) and "clamped" not in r


def test_a_cohort_target_below_one_client_is_raised_to_one_and_recorded(tmp_path):
    """samples_per_round below one client's mean size: m = K / mean(n_k) < 1 becomes 1 (an empty cohort would train
    nothing), and the run log states it, in results.json too."""
    fed = federate(blobs(n=240), [40] * 6)
    history = simulate(recipes.fedavg(samples_per_round=10), fed, LogisticRegression(), rounds=2).history
    assert all(r["clamped"] == {"clients_per_round": pytest.approx(0.25)} and r["cohort"] == 1 for r in history)
    path = tmp_path / "e.toml"
    path.write_text(strategy_toml("fedavg", samples_per_round=100))  # 5 clients of about 288 samples
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    rounds = json.loads((tmp_path / "out" / "results.json").read_text())["strategies"]["fedavg"]["history"][0]
    assert all(0.3 < r["clamped"]["clients_per_round"] < 0.4 for r in rounds)


def test_poisson_q_pushed_above_one_by_lost_size_reports_is_capped_and_recorded():
    """With K = N every report must arrive for q = K / sum n_k <= 1; a round that loses some reports asks q > 1."""
    fed = federate(blobs(n=240), [40] * 6)
    strategy = Strategy(clients=PoissonClients(samples_per_round=240), local=LocalSGD(lr=0.1), aggregate=WeightedMean("inverse_inclusion"),
                        sizes=ExactSizes())
    history = simulate(strategy, fed, LogisticRegression(), rounds=6, seed=0, faults=FaultModel(dropout={"report_size": 0.4})).history
    lost = [r for r in history if any(f["phase"] == "report_size" for f in r["failed"])]
    assert lost and all(r["clamped"]["q"] > 1 for r in lost)
    assert all("clamped" not in r for r in history if r not in lost)
