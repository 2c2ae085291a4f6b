"""The realised budget (issue 38): every round records the samples it trained on, a run summarizes them per arm,
says in one line when an arm left [0.67 K, 1.5 K] or kept every row, and a table claims "equal samples" only
when the arms' realised means agree within the stated tolerance."""

import math

import numpy as np
import pytest

from fedsample import recipes
from fedsample.budget import arm_budget, budget_summary, budget_warning, comparison_note, equal_budgets, realised_samples
from fedsample.experiments.report import summary_table
from fedsample.models import LogisticRegression
from fedsample.messages import TrainReport
from fedsample.rounds import Failed, Replies
from fedsample.simulation import simulate
from helpers import blobs, federate
from fedsample.simulation import Engine


def Reply(steps: int, rows_trained: int | None) -> TrainReport:
    """A train report that took ``steps`` steps over ``rows_trained`` rows (None: it does not say)."""
    return TrainReport({}, steps, 0.0, rows_trained=rows_trained)


def test_realised_samples_hand_computed():
    replies = Replies([Reply(5, 37), Reply(3, 24), Reply(4, 30)], failed={})
    assert realised_samples(None, replies) == 37 + 24 + 30  # the rows each client's steps read, summed over the cohort
    assert realised_samples(417.0, replies) == 417.0  # a drawn count wins
    assert realised_samples(None, Replies([Reply(5, 37), Reply(3, None)], failed={})) is None  # one reply does not say
    assert realised_samples(None, Replies([Reply(5, 37), Reply(0, 0), Reply(3, None)], failed={2: Failed(9, "train", "x")})) == 37


#: Three clients of 20, 13 and 5 rows (every client in every round), and FedAvg's local solver by hand:
#: - 2 epochs of batch 8: every row twice, the last batch of each epoch partial (8+8+4, 8+5, 5): 2 x 38 = 76 rows
#:   (local steps x batch would say (2x3 + 2x2 + 2x1) x 8 = 96);
#: - 3 steps of batch 8: min(8, n_k) rows per step, 3 x (8 + 8 + 5) = 63 (steps x batch: 72);
#: - one step on the whole sample (batch "all"): 20 + 13 + 5 = 38 (steps x batch: unknown before);
#: - 2 epochs on the whole sample: 2 x 38 = 76.
SIZES = [20, 13, 5]
SOLVERS = {
    "epochs, partial last batch": (dict(epochs=2, batch_size=8), 76.0),
    "steps, batch above a size": (dict(steps=3, batch_size=8), 63.0),
    "one whole-sample step": (dict(steps=1, batch_size="all"), 38.0),
    "epochs of the whole sample": (dict(epochs=2, batch_size="all"), 76.0),
}
ENGINES = {"loop": {"backend": "loop"}, "vectorized": {"backend": "vectorized"}, "pool": {"backend": "vectorized", "workers": 2}}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_a_client_sampler_records_the_rows_its_steps_read(solver, engine):
    local, rows = SOLVERS[solver]
    fed = federate(blobs(), SIZES)
    run = simulate(recipes.fedavg(clients_per_round=3, lr=0.1, **local), federated_data=fed, model=LogisticRegression(),
                   rounds=2, seed=1, engine=Engine(**ENGINES[engine]))
    assert [r["realised_samples"] for r in run.history] == [rows, rows]


def test_a_drawn_sample_smaller_than_the_batch_counts_what_was_drawn():
    """IWDS keeps a client's data with its own probabilities: the rows trained follow the drawn sample, not n_k, and
    the loop and the vectorized engine count the same rows."""
    fed = federate(blobs(), [40] * 6)
    runs = [simulate(
        recipes.iwds(clients_per_round=3, lr=0.1, steps=2, batch_size=64), federated_data=fed, model=LogisticRegression(), rounds=3, seed=2, engine=Engine(backend=b),
    ).history for b in ("loop", "vectorized")]
    assert [r["realised_samples"] for r in runs[0]] == [r["realised_samples"] for r in runs[1]]
    assert all(r["realised_samples"] <= 2 * 3 * 40 for r in runs[0])


def test_sealed_and_noised_replies_leave_the_figure_unknown():
    """Under a secure sum the server reads no reply's rows (they are not summed either); a noised reply withholds
    them with its loss and steps: no figure, rather than a guess."""
    from dataclasses import replace

    from fedsample.privacy import UpdateNoise

    fed = federate(blobs(), SIZES)
    base = recipes.fedavg(clients_per_round=3, lr=0.1, epochs=1, batch_size=8)
    for strategy in (replace(base, secure_sum=True), replace(base, noise=UpdateNoise(clip=1.0, noise_multiplier=1.0))):
        run = simulate(strategy, federated_data=fed, model=LogisticRegression(), rounds=1, seed=1)
        assert "realised_samples" not in run.history[0]


@pytest.mark.parametrize("engine", ["loop", "vectorized"])
def test_a_sealed_arm_records_the_rows_the_simulation_measured(engine):
    """FedSampling's exact-sizes control keeps its drawn count private (no count, no rows in any reply): the server
    has no realised figure, and the in-process engine records what it saw its clients draw (``realised_measured``).
    The same arm with its count released draws the same rows (same seed; the count is not used by the K-normalized
    step): its released figure is the measured one, round by round, and the parameters are the same."""
    from dataclasses import replace

    fed = federate(blobs(), [40] * 6)
    sealed = recipes.fedsampling(K=60, epsilon=3.0, sizes="exact", normalize="K")
    released = replace(sealed, data=replace(sealed.data, count_drawn=True))
    runs = [simulate(s, federated_data=fed, model=LogisticRegression(), rounds=4, seed=3, engine=Engine(backend=engine)) for s in (sealed, released)]
    assert all("realised_samples" not in r for r in runs[0].history)
    assert [r["realised_measured"] for r in runs[0].history] == [r["realised_samples"] for r in runs[1].history]
    assert all("realised_measured" not in r for r in runs[1].history)  # the server knows it: nothing measured beside
    assert all(np.array_equal(runs[0].params[k], runs[1].params[k]) for k in runs[0].params)


def test_a_noised_client_sampler_records_the_rows_the_simulation_measured():
    """Noised replies withhold their rows trained; the loop engine measures the rows the local steps read, the figure
    the plain run releases (uniform sampling: the same cohorts; 3 clients of 20, 13, 5 rows, 2 epochs of 8: 76)."""
    from dataclasses import replace

    from fedsample.privacy import UpdateNoise

    fed = federate(blobs(), SIZES)
    base = recipes.fedavg(clients_per_round=3, lr=0.1, epochs=2, batch_size=8)
    noised = simulate(
        replace(base, noise=UpdateNoise(clip=1.0, noise_multiplier=1.0)), federated_data=fed, model=LogisticRegression(), rounds=2, seed=1, engine=Engine(backend="loop"),
    )
    assert [r.get("realised_samples") for r in noised.history] == [None, None]
    assert [r["realised_measured"] for r in noised.history] == [76.0, 76.0]


def test_an_engine_that_cannot_measure_says_so_and_no_part_reads_the_measure():
    """A worker pool's clients train in other processes: the sealed round's record says ``realised_measured: None``
    (not measured) rather than nothing. The strategy's own record of a round (what its parts, trackers' inputs and
    ledger are built from) never holds the measured figure: ``simulate`` adds it after the round."""
    from fedsample.federation.secure_sum import with_secure_sum
    from fedsample.federation.simulator import Simulator
    from fedsample.models import initial_parameters
    from fedsample.simulation import build_module

    fed = federate(blobs(), [40] * 6)
    sealed = recipes.fedsampling(K=60, epsilon=3.0, sizes="exact", normalize="K")
    pooled = simulate(sealed, federated_data=fed, model=LogisticRegression(), rounds=2, seed=3, engine=Engine(backend="vectorized", workers=2))
    assert [r["realised_measured"] for r in pooled.history] == [None, None]
    module = build_module(LogisticRegression(), fed)
    params, state = initial_parameters(module, 0), sealed.init_state(initial_parameters(module, 0))
    _, log = sealed.round(with_secure_sum(Simulator(fed, module, seed=3), sealed.secure_sum), params, state, 0, seed=3)
    assert log["updates"] > 0 and "realised_measured" not in log and "realised_samples" not in log


def test_fedsampling_with_exact_sizes_realises_K_on_average():
    """S ~ Binomial(N, K/N) + N(0, 5^2) per round: mean K, sd sqrt(K (1 - K/N) + 25) = 8.4 for K = 60, N = 240;
    over 40 rounds the mean's sd is 1.3, and the test allows 4 of them (5.3 samples)."""
    fed = federate(blobs(), [40] * 6)
    run = simulate(recipes.fedsampling(K=60, sizes="exact"), federated_data=fed, model=LogisticRegression(), rounds=40, seed=3)
    realised = np.array([r["realised_samples"] for r in run.history])
    assert all(r["target_samples"] == 60 for r in run.history)
    assert abs(realised.mean() - 60) < 4 * math.sqrt(60 * (1 - 60 / 240) + 25) / math.sqrt(40)
    assert budget_warning("fedsampling", arm_budget([run.history]), 60) is None


@pytest.mark.parametrize("protocol, warns", [("exact sizes", False), ("paper, M = 5", True)])
def test_a_sealed_arm_outside_the_band_warns_with_its_measured_figure(protocol, warns):
    """Sealed FedSampling arms keep their drawn count private, yet K is a public setting: every round records
    ``target_samples``, so the warning reads the figure the simulation measured, labelled so, in the terminal's and
    summary.md's lines (:func:`~fedsample.experiments.report.budget_lines`). 6 clients of 40 rows (N = 240), K = 60:
    the exact-sizes control draws about 60 (inside [0.67 K, 1.5 K]: no line); the paper protocol with reports clipped
    at M = 5 estimates N~ near 30, so K/N~ > 1 keeps all 240 rows (4.00 K) and says so."""
    from fedsample.experiments.report import budget_lines

    fed = federate(blobs(), [40] * 6)
    sealed = recipes.fedsampling(K=60, protocol="paper", M=5) if warns else recipes.fedsampling(K=60, epsilon=3.0, sizes="exact", normalize="K")
    run = simulate(sealed, federated_data=fed, model=LogisticRegression(), rounds=4, seed=3)
    assert all(r["target_samples"] == 60 and "realised_samples" not in r for r in run.history)
    arm = arm_budget([run.history])
    assert arm["source"] == "measured" and arm["K"] == 60
    document = {"config": {"name": "t", "rounds": 4, "seeds": [0]},
                "strategies": {"sealed": {"final": {}, "best": {}, "budget": arm}}}
    lines, text = budget_lines(document), summary_table(document).replace("\\", "")
    if not warns:
        assert 0.67 * 60 <= arm["mean"] <= 1.5 * 60 and budget_warning("sealed", arm, 60) is None and lines == []
        return
    line = budget_warning("sealed", arm, 60)
    assert line.startswith("sealed: realised 240 samples per round (sealed: measured in simulation, not released to the server) (4.00 K")
    assert "K/N~ >= 1 in 4 of 4 rounds" in line and lines == [line] and line in text


def test_the_warning_says_when_K_is_not_sampled():
    inside = {"mean": 1.2 * 2048, "min": 2000, "max": 2600, "rounds": 10, "clamped_rounds": 0}
    assert budget_warning("a", inside, 2048) is None
    low = {**inside, "mean": 0.6 * 2048}
    assert "outside [0.67 K, 1.5 K]" in budget_warning("a", low, 2048)
    clamped = {**inside, "mean": 60000.0, "min": 59800, "max": 60100, "clamped_rounds": 10}
    line = budget_warning("FedSampling", clamped, 2048)
    assert line.startswith("FedSampling: realised 60000 samples per round (29.30 K") and "K/N~ >= 1 in 10 of 10 rounds" in line


def test_equal_budgets_within_the_stated_tolerance():
    assert equal_budgets({"a": 2048, "b": 2100}) and equal_budgets({"a": 100, "b": 119}, tolerance=0.10)
    assert not equal_budgets({"a": 100, "b": 125}, tolerance=0.10)  # 11% from their average 112.5
    assert not equal_budgets({"a": 100})  # one arm: nothing to compare
    assert comparison_note({"a": {"mean": 2048.0}, "b": {"mean": 60000.0}}).startswith("Unequal budgets")
    assert comparison_note({"a": {"mean": 2048.0}, "b": {"mean": 2000.0}}).startswith("Equal samples")


@pytest.fixture
def document():
    fed = federate(blobs(), [37] * 6)  # 3 clients of 37 rows, batch 8: 111 rows per round (5 steps x 8 would say 120)
    runs = {"fedavg": recipes.fedavg(clients_per_round=3, lr=0.1, batch_size=8), "fedsampling": recipes.fedsampling(K=60, total_from="reports")}
    histories = {label: simulate(s, federated_data=fed, model=LogisticRegression(), rounds=2, seed=0).history for label, s in runs.items()}
    stats = {"accuracy": {"mean": 0.5, "sd": None, "n": 1}}
    return {"config": {"name": "t", "rounds": 2, "seeds": [0]},
            "strategies": {label: {"final": stats, "best": stats, "budget": arm_budget([h])} for label, h in histories.items()}}


def test_summary_carries_the_budget_column_and_lines(document):
    text = summary_table(document).replace("\\", "")
    assert "Samples/round (realised)" in text and "| fedavg | 50.00 | 50.00 | 111 [111–111] |" in text
    assert "- fedsampling: realised" in text and "K/N~ >= 1 in 1 of 2 rounds" in text  # round 1 follows N~: every row kept
    assert "- Unequal budgets: realised means differ by more than 10%" in text


@pytest.mark.parametrize("mean, low, high", [(20, 0.110, 0.130), (64, 0.0055, 0.0075), (2048, -1e-4, 1e-4)])
def test_the_count_noise_biases_the_step_by_about_sigma2_over_ES2(mean, low, high):
    """The self-normalized step divides by S~ = S + N(0, 5^2) read as >= 1 (drawn_divisor): E[S / S~] - 1 is about
    sigma_S^2 / E[S]^2 (first order; 12% at E[S] = 20 with the higher terms), the figures the docs quote. 400,000
    draws of S ~ Poisson(E[S]) (S >= 1): the mean's sd is below 2e-4 at E[S] = 20, 1.3e-4 at 64."""
    from fedsample.training.aggregate import drawn_divisor

    rng = np.random.default_rng(5)
    S = rng.poisson(mean, 400_000).astype(np.float64)
    S = S[S >= 1]
    noised = S + rng.normal(0.0, 5.0, len(S))
    bias = float(np.mean(S / np.vectorize(drawn_divisor)(noised)) - 1)
    assert low < bias < high


def test_a_reproduction_row_states_its_realised_budgets():
    """The comparison row carries both sides' realised means from results.json's ``budget`` and says "unequal
    budgets" where they differ by more than the tolerance, "equal samples" where they agree."""
    from fedsample.reproduction.collect import experiment_values
    from fedsample.reproduction.rows import comparison_row
    from fedsample.reproduction.spec import Comparison
    from fedsample.reproduction.table import claim_text

    def result(accuracy, samples):
        per_seed = [{"mean": s} for s in samples]
        return {"final": {"accuracy": {"per_seed": accuracy}}, "best": {}, "budget": {"per_seed": per_seed}}

    document = {"strategies": {"FedSampling": result([0.80, 0.81, 0.82], [60000.0, 59990.0, 60010.0]),
                               "FedAvg": result([0.70, 0.71, 0.72], [2048.0, 2050.0, 2046.0]),
                               "Centralized": result([0.79, 0.80, 0.81], [2048.0, 2048.0, 2048.0])}}
    values = {"run": experiment_values(document)}
    unequal = comparison_row(Comparison(claim="FedSampling > FedAvg", source="run", better="FedSampling", worse="FedAvg"), values)
    assert unequal["realised"] == {"better": 60000.0, "worse": 2048.0, "tolerance": 0.10, "equal": False,
                                   "how": {"better": "released", "worse": "released"}}
    assert "realised: FedSampling 60000, FedAvg 2048 samples per round: unequal budgets" in claim_text(unequal)
    equal = comparison_row(Comparison(claim="Centralized > FedAvg", source="run", better="Centralized", worse="FedAvg"), values)
    assert equal["realised"]["equal"] and "equal samples (within 10%)" in claim_text(equal)
    del document["strategies"]["FedAvg"]["budget"]  # a run without the record: it says it predates the record
    old = comparison_row(Comparison(claim="x", source="run", better="FedSampling", worse="FedAvg"), {"run": experiment_values(document)})
    assert old["realised"] is None and "realised budgets: not recorded (a run older than the record)" in claim_text(old)


def test_a_sealed_side_is_compared_on_its_measured_figure_and_the_table_says_so():
    """A side whose rounds were sealed (no figure released to the server) is compared on the figure the simulation
    measured, labelled as such; where its engine could not measure it, the label says so and no equality is claimed.
    The arms' ``budget`` as results.json writes it (:func:`fedsample.budget.arm_budget` of the round records)."""
    from fedsample.reproduction.claims import UNEQUAL, UNRECORDED, EQUAL, budget_of
    from fedsample.reproduction.collect import experiment_values
    from fedsample.reproduction.rows import comparison_row
    from fedsample.reproduction.spec import Comparison
    from fedsample.reproduction.table import claim_text

    def result(accuracy, rounds):
        return {"final": {"accuracy": {"per_seed": accuracy}}, "best": {}, "budget": arm_budget(rounds)}

    released = [[{"updates": 3, "realised_samples": s} for s in (2040.0, 2056.0)] for _ in range(3)]
    measured = [[{"updates": 3, "realised_measured": s} for s in (2000.0, 2100.0)] for _ in range(3)]
    far = [[{"updates": 3, "realised_measured": s} for s in (2900.0, 3100.0)] for _ in range(3)]
    unmeasured = [[{"updates": 3, "realised_measured": None}] * 2 for _ in range(3)]
    document = {"strategies": {"Default": result([0.80, 0.81, 0.82], released), "Exact": result([0.79, 0.80, 0.81], measured),
                               "Far": result([0.70, 0.71, 0.72], far), "Pool": result([0.70, 0.71, 0.72], unmeasured)}}
    assert document["strategies"]["Exact"]["budget"]["source"] == "measured"
    assert document["strategies"]["Pool"]["budget"] == {"mean": None, "min": None, "max": None, "rounds": 0, "clamped_rounds": 0, "K": None,
                                                        "source": "not measured", "per_seed": [budget_summary(r) for r in unmeasured]}
    values = {"run": experiment_values(document)}

    def row(worse):
        return comparison_row(Comparison(claim=f"Default > {worse}", source="run", better="Default", worse=worse), values)

    equal = row("Exact")
    assert equal["realised"] == {"better": 2048.0, "worse": 2050.0, "tolerance": 0.10, "equal": True,
                                 "how": {"better": "released", "worse": "measured"}}
    text = claim_text(equal)
    assert ("realised: Default 2048, Exact not released (sealed; measured in simulation: 2050) samples per round: "
            "equal samples (within 10%, on the figure measured in simulation)") in text
    assert budget_of(text) == EQUAL
    unequal = claim_text(row("Far"))  # 3000 against 2048: 19% from their average
    assert "Far not released (sealed; measured in simulation: 3000)" in unequal and budget_of(unequal) == UNEQUAL
    blind = row("Pool")
    assert blind["realised"]["equal"] is False and blind["realised"]["how"]["worse"] == "not measured"
    assert "Pool not released (sealed; not measured): budgets not compared" in claim_text(blind)
    assert budget_of(claim_text(blind)) == UNRECORDED
    from fedsample.experiments.report import budget_cell

    assert budget_cell(document["strategies"]["Exact"]["budget"]) == "2050 [2000–2100] (sealed; measured in simulation)"
    assert budget_cell(document["strategies"]["Pool"]["budget"]) == "not released (sealed; not measured)"
    assert comparison_note({"a": document["strategies"]["Default"]["budget"], "b": document["strategies"]["Exact"]["budget"]}) == (
        "Equal samples: realised means within 10% of their average (a 2048, b 2050 (measured in simulation) samples per round; "
        "1 sealed arm(s): not released to the server, measured in simulation).")


def test_the_presets_spell_a_whole_sample_step_as_all():
    """The presets' one-step arms train on each client's whole sample with ``batch_size = "all"`` (the solver's None),
    not a sentinel count: the recipe builds LocalSGD(batch_size=None)."""
    assert recipes.fedavg(steps=1, batch_size="all").local.batch_size is None
    assert recipes.fedsts(steps=1, batch_size="all").local.batch_size is None
    with pytest.raises(ValueError, match="'all'"):
        recipes.fedavg(batch_size="some")
