"""Published client samplers under faults, through ``Strategy.round`` (docs/reliability.md, "Samplers under faults").

A federation whose client k holds n_k samples and the fixed update U_k (a 2-vector) answers every procedure
(size reports, probes, training, train-then-send); a :class:`~fedsample.federation.faults.Faulty` wrapper loses
clients. With lr 1 from w = 0 the new parameters are -Delta, so the Monte Carlo mean of -w over independent seeds
is E[Delta]. The declared target under missing-at-random faults is the size-weighted mean of the updates,
sum_k n_k U_k / sum_k n_k (of all clients: every client fails with the same probability, and a sampler that leaves
out a client whose size report was lost targets the reporting clients' size-weighted mean, whose expectation over
the fault draws is the same to within the tolerance here). Tolerance: 4 standard errors of the Monte Carlo mean
per coordinate (a false alarm about once in 15,000 runs per coordinate), plus a check that the uncorrected
estimate (biased by the response rate) would have failed it."""

from __future__ import annotations

import itertools
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsample.federation.faults import FaultModel, Faulty, Straggler
from fedsample.messages import HeldReport, ProbeReport, TrainReport, payloads_for
from fedsample.privacy.sizes import SizeInfo
from fedsample.recipes import recipe
from fedsample.rounds import Replies, RoundContext
from fedsample.sampling.delta import DeltaClients
from fedsample.strategy import Strategy, _CheckedProbes

N = 12
SIZES = np.array([5, 40, 12, 8, 30, 22, 3, 17, 26, 9, 14, 35])
# updates: two groups and a spread, so that size-weighting, probabilities and norms all matter
UPDATES = np.stack([1.0 + 0.3 * np.arange(N), np.where(np.arange(N) % 3 == 0, 4.0, -1.0)], axis=1)
TARGET = SIZES @ UPDATES / SIZES.sum()
LOSSES = 1.0 + np.arange(N) % 5  # each client's loss (power-of-d, FedCor) and, times its size, Oort's utility
LABELS = np.stack([np.bincount([k % 3, 7 * k % 3, 1], minlength=3) for k in range(N)]) * SIZES[:, None]  # Fed-CBS
REPS = 800
Z = 4.0


class Fixed:
    """Client k: n_k samples, update U_k (times ISFedAvg's agent factor where its plan carries one), gradient U_k at
    the global model (or ``gradients[k]``, also its compressed gradient) with per-sample variance 0.1 (k + 1) (or ``sigma2[k]``), loss
    ``LOSSES[k]`` and label histogram ``LABELS[k]``."""

    num_clients = N

    def __init__(self, updates: np.ndarray = UPDATES, sigma2: np.ndarray | None = None,
                 gradients: np.ndarray | None = None) -> None:
        self.updates = updates
        self.gradients = updates if gradients is None else gradients
        self.sigma2 = 0.1 * (1.0 + np.arange(N)) if sigma2 is None else sigma2

    def update(self, k: int, scale: float = 1.0) -> TrainReport:
        return TrainReport({"w": torch.tensor(scale * self.updates[k], dtype=torch.float64)}, steps=1,
                           loss=float(LOSSES[k]), statistics={"utility": float(LOSSES[k] * SIZES[k])})

    def run(self, ids, payload, round):
        procedure = payloads_for(payload, len(ids)).procedure.name  # the name the request's type declares
        ids = np.asarray(ids, dtype=np.int64).tolist()
        if procedure == "report_size":
            return Replies([int(SIZES[k]) for k in ids])
        if procedure == "train":
            sent = payloads_for(payload, len(ids))
            return Replies([self.update(k, getattr(sent.at(i).plan, "agent_scale", 1.0)) for i, k in enumerate(ids)])
        if procedure == "send_held":
            return Replies([self.update(k) for k in ids])
        if procedure == "train_held":
            return Replies([HeldReport(float(np.linalg.norm(self.updates[k]))) for k in ids])
        if procedure == "probe":
            return Replies([ProbeReport(float(LOSSES[k]), float(np.linalg.norm(self.updates[k])), gradient=self.gradients[k].copy(),
                                        extra={"sigma2": float(self.sigma2[k]), "weighted_second_moment": float(self.sigma2[k])},
                                        label_counts=LABELS[k].copy(), compressed=self.gradients[k].copy()) for k in ids])
        raise AssertionError(f"unexpected procedure {procedure}")


def aggregates(strategy: Strategy, faults: FaultModel, reps: int = REPS, federation: Fixed | None = None,
               unless: str = "params_unchanged", rare: float = 0.05) -> np.ndarray:
    """-w after one round from w = 0 (server lr 1: the aggregate Delta) for seeds 0..reps-1; rounds that changed
    nothing (every reply lost), or whose record holds ``unless``, are left out, and must be rare (``rare``)."""
    out = []
    for seed in range(reps):
        params = {"w": torch.zeros(2, dtype=torch.float64)}
        new, log = strategy.round(Faulty(federation or Fixed(), faults, seed), params, strategy.init_state(params), 0, seed)
        if "params_unchanged" not in log and unless not in log:
            out.append(-new["w"].numpy())
    assert len(out) > (1 - rare) * reps
    return np.array(out)


def off_by(draws: np.ndarray, target: np.ndarray) -> np.ndarray:
    """|mean - target| in standard errors of the Monte Carlo mean, per coordinate."""
    se = draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
    return np.abs(draws.mean(axis=0) - target) / se


TRAINING_DROPOUT = FaultModel(dropout={"train": 0.2})
LOST_SIZE_REPORTS = FaultModel(dropout={"report_size": 0.2})


@pytest.mark.parametrize("rule", ["exact", "aocs"])
def test_optimal_sampling_divides_by_the_share_that_trained(rule):
    """20% training dropout: clients that fail cannot send (p = 0), so the estimate of the trained clients' sum is
    divided by the share that trained (before the fix: mean/target 0.80)."""
    draws = aggregates(recipe("optimal_sampling", clients_per_round=4, rule=rule, j_max=50), TRAINING_DROPOUT)
    assert np.all(off_by(draws, TARGET) < Z), (draws.mean(axis=0), TARGET)
    assert np.any(off_by(0.8 * draws, TARGET) > Z)  # the uncorrected estimate is detected at this REPS (about 20 se)


def test_optimal_sampling_without_faults_is_unchanged_by_the_correction():
    """No fault: the response rate is exactly 1 and the numbers are those of the fault-free round."""
    strategy = recipe("optimal_sampling", clients_per_round=4)
    draws = aggregates(strategy, FaultModel(), reps=200)
    assert np.all(off_by(draws, TARGET) < Z)


@pytest.mark.parametrize("draw", ["with_replacement", "poisson"])
@pytest.mark.parametrize("faults", [TRAINING_DROPOUT, LOST_SIZE_REPORTS], ids=["training", "size_reports"])
def test_delta_keeps_its_target_under_faults(draw, faults):
    """DELTA's default objective ("size") under lost training replies and lost size reports: a client whose size
    report was lost is not drawn (before the fix it was drawn, dropped, and counted as a non-responder: 21.6 se)."""
    draws = aggregates(recipe("delta", clients_per_round=4, draw=draw), faults)
    assert np.all(off_by(draws, TARGET) < Z), (draws.mean(axis=0), TARGET)


@pytest.mark.parametrize("draw", ["with_replacement", "poisson", "reference"])
def test_delta_never_draws_a_client_whose_size_report_was_lost(draw):
    """Clients 2 and 7 sent no size report: over 300 rounds neither is drawn (before: drawn like the others)."""
    reported = np.setdiff1d(np.arange(N), [2, 7])
    sampler = DeltaClients(m=6, draw=draw)
    for t in range(300):
        ctx = RoundContext(Fixed(), None, t, 7, {})
        ctx.sizes = SizeInfo(reported, SIZES[reported], float(SIZES[reported].sum()), True)
        assert not np.isin([2, 7], sampler.select(ctx).ids).any()


@pytest.mark.parametrize("draw", ["with_replacement", "poisson", "reference"])
def test_delta_with_every_score_zero_draws_uniformly(draw):
    """Identical clients without noise: every score is 0 and every draw falls back to the uniform one (Poisson
    drew nobody before)."""
    same = Fixed(np.tile(UPDATES[:1], (N, 1)), np.zeros(N), np.zeros((N, 2)))
    sampler = DeltaClients(m=4, draw=draw, objective="uniform")
    strategy = recipe("delta", clients_per_round=4, draw=draw, objective="uniform")
    assert strategy.clients == sampler
    draws = aggregates(strategy, FaultModel(), reps=300, federation=same)
    if draw != "reference":  # the reference draw's weights are the with-replacement ones: exact here too
        np.testing.assert_allclose(draws.mean(axis=0), UPDATES[0], rtol=0.2)


@pytest.mark.parametrize("draw", ["with_replacement", "poisson", "reference"])
def test_delta_does_without_a_lost_probe(draw):
    """A client whose probe was lost is never drawn, is named in the round record (``failed``, phase ``probe``) and
    counted (``sampler_lost_probes``); the others' pi_k (and expected draws) are times the share whose probe arrived,
    except under the reference draw (the authors' weights) (before: the round stopped). Every probe lost: the round leaves the parameters unchanged and says why."""
    strategy = recipe("delta", clients_per_round=4, draw=draw)
    params = {"w": torch.zeros(2, dtype=torch.float64)}
    seen_lost = 0
    for seed in range(30):
        ctx = RoundContext(_CheckedProbes(Faulty(Fixed(), FAULTS["lost probe"], seed)), params, 0, seed, {})
        ctx.sizes = SizeInfo(np.arange(N), SIZES, float(SIZES.sum()), True)
        cohort = strategy.clients.select(ctx)
        lost = [f["client"] for f in ctx.log.get("failed", []) if f["phase"] == "probe"]
        assert ctx.log.get("sampler_lost_probes", 0) == len(lost) and not np.isin(cohort.ids, lost).any()
        # the reference draw keeps the authors' weights (ReferenceMean): no probe rate
        assert ctx.state["delta"]["probe_rate"] == ((N - len(lost)) / N if draw != "reference" else 1.0)
        seen_lost += len(lost)
    assert seen_lost > 0
    _, logs = rounds_of(strategy, FaultModel(dropout={"probe": 0.9999}), 0, 1)
    assert logs[0]["params_unchanged"] == "every probe was lost"


def test_delta_says_when_a_client_cannot_be_drawn():
    """A client with score 0 among positive ones is never drawn, though its update need not be 0: the round record
    says how many, and a warning says that it happens."""
    sigma2 = 0.1 * (1.0 + np.arange(N))
    sigma2[3] = 0.0  # equal gradients (zeta_k = 0) and no noise: score 0, but the update U_3 is not 0
    strategy = recipe("delta", clients_per_round=4)
    params = {"w": torch.zeros(2, dtype=torch.float64)}
    with pytest.warns(RuntimeWarning, match="clients with score 0 cannot be drawn"):
        _, log = strategy.round(Faulty(Fixed(UPDATES, sigma2, np.zeros((N, 2))), FaultModel(), 0), params, strategy.init_state(params), 0, 0)
    assert log["sampler_zero_score_clients"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _, log = strategy.round(Faulty(Fixed(), FaultModel(), 0), params, strategy.init_state(params), 0, 0)
    assert "sampler_zero_score_clients" not in log


# --- the grid: every client sampler x every fault ------------------------------------------------------------------
#
# Each cell is one of four verdicts, and docs/reliability.md's table is this grid (test_the_docs_table_is_the_grid):
# - KEEPS: the Monte Carlo mean of the aggregate over GRID_REPS seeds is within Z standard errors of the declared
#   target, coordinate by coordinate (the size-weighted mean; ISFedAvg's: the plain mean; FedAvg's ratio estimator: its
#   exact expectation over the cohorts that survive, below);
# - SAYS: the sampler's inclusion probabilities are estimated or degenerate, so no unbiased target exists with or without
#   faults: every round's record says so (``inclusion``, ``bias``) and names the lost clients and their phase
#   (``failed``); a round that lost clients says that no correction applies (``faults_uncorrected``, and a warning);
# - ANSWERED: as KEEPS over the rounds in which every stratum of the cohort answered; a round in which a stratum lost
#   every member says so (``strata_unanswered``, and a warning): no adjustment restores a stratum without answers;
# - UNASKED: the sampler asks nobody in that phase: the round is the fault-free one, to the bit.

KEEPS, SAYS, UNASKED = "keeps its target", "biased by design, says so", "not asked"
ANSWERED = "keeps its target while every stratum answers, says when one does not"
MISSED = 0.2  # every fault loses a client with this probability in its phase
FAULTS = {
    "lost size report": FaultModel(dropout={"report_size": MISSED}),
    "lost probe": FaultModel(dropout={"probe": MISSED}),
    "failed training": FaultModel(dropout={"train": MISSED}),
    "straggler": FaultModel(straggler=Straggler(deadline=-math.log(MISSED))),  # exp(-deadline) = MISSED, in every phase
}
SAMPLERS = {
    "uniform, size-weighted mean (`fedavg`)": lambda: recipe("fedavg", clients_per_round=4),
    "MD, size-proportional (`weighted_fedavg`)": lambda: recipe("weighted_fedavg", clients_per_round=4),
    "clustered, Algorithm 1": lambda: recipe("clustered_sampling", clients_per_round=4),
    "clustered, Algorithm 2": lambda: recipe("clustered_sampling", clients_per_round=4, algorithm="similarity"),
    "optimal (`optimal_sampling`)": lambda: recipe("optimal_sampling", clients_per_round=4),
    "DELTA, with replacement": lambda: recipe("delta", clients_per_round=4),
    "DELTA, Poisson": lambda: recipe("delta", clients_per_round=4, draw="poisson"),
    "importance (`isfedavg`)": lambda: recipe("isfedavg", clients_per_round=4),
    "stratified (`fedsts`)": lambda: recipe("fedsts", H=2, clients_per_round=4),
    "power-of-d": lambda: recipe("power_of_choice", clients_per_round=4, candidates=6),
    "Fed-CBS": lambda: recipe("fedcbs", clients_per_round=4),
    "FedCor": lambda: recipe("fedcor", clients_per_round=4, warmup=2),
    "DivFL": lambda: recipe("divfl", clients_per_round=4),
    "Oort": lambda: recipe("oort", clients_per_round=4),
}
_EXACT = (KEEPS, UNASKED, KEEPS, KEEPS)
_PROBED = (KEEPS, KEEPS, KEEPS, KEEPS)  # DELTA: a lost probe is not drawn, the others' pi_k carry the probe rate
_UNSIZED = (UNASKED, KEEPS, KEEPS, KEEPS)  # ISFedAvg: likewise, and no size is asked
_BIASED = (SAYS, SAYS, SAYS, SAYS)  # a lost probe: the sampler does without it and says what it did instead
GRID = {name: dict(zip(FAULTS, verdicts)) for name, verdicts in {
    "uniform, size-weighted mean (`fedavg`)": _EXACT, "MD, size-proportional (`weighted_fedavg`)": _EXACT,
    "clustered, Algorithm 1": _EXACT, "clustered, Algorithm 2": _EXACT, "optimal (`optimal_sampling`)": _EXACT,
    "DELTA, with replacement": _PROBED, "DELTA, Poisson": _PROBED,
    "importance (`isfedavg`)": _UNSIZED, "stratified (`fedsts`)": (UNASKED, KEEPS, ANSWERED, ANSWERED),
    "power-of-d": _BIASED, "Fed-CBS": _BIASED, "FedCor": _BIASED, "DivFL": _BIASED,
    "Oort": (SAYS, UNASKED, SAYS, SAYS),
}.items()}
CELLS = [(s, f) for s in SAMPLERS for f in FAULTS]
GRID_REPS = 400


def survival(fault: str) -> float:
    """The chance that a chosen client's update arrives under FedAvg (its size report, then its training)."""
    return {"lost size report": 1 - MISSED, "lost probe": 1.0, "failed training": 1 - MISSED, "straggler": (1 - MISSED) ** 2}[fault]


def ratio_expectation(m: int, survive: float) -> np.ndarray:
    """FedAvg's declared target under faults: sum_{k in A} n_k U_k / sum_{k in A} n_k is a ratio estimator (biased by
    O(1/m) with or without faults); missing at random, the survivors A of a uniform cohort of m are a uniform sample
    of their number j ~ Binomial(m, survive), so its expectation, given an update arrives (j >= 1), is
    sum_j P(j | j >= 1) mean_{|A| = j} ratio(A), by enumeration of every A."""
    total, mass = np.zeros(2), 0.0
    for j in range(1, m + 1):
        weight = math.comb(m, j) * survive**j * (1 - survive) ** (m - j)
        subsets = [list(a) for a in itertools.combinations(range(N), j)]
        ratios = [SIZES[a] @ UPDATES[a] / SIZES[a].sum() for a in subsets]
        total, mass = total + weight * np.mean(ratios, axis=0), mass + weight
    return total / mass


def declared_target(sampler: str, fault: str) -> np.ndarray:
    if sampler.startswith("uniform"):
        return ratio_expectation(4, survival(fault))
    if sampler.startswith(("importance", "stratified")):
        return UPDATES.mean(axis=0)  # ISFedAvg's objective and FedSTS's unbiased aggregation's: every client alike
    return TARGET


def rounds_of(strategy: Strategy, faults: FaultModel, seed: int, rounds: int) -> tuple[dict, list[dict]]:
    """The parameters and the records of ``rounds`` rounds of one run (the sampler's state carried)."""
    params = {"w": torch.zeros(2, dtype=torch.float64)}
    state, logs = strategy.init_state(params), []
    for t in range(rounds):
        params, log = strategy.round(Faulty(Fixed(), faults, seed), params, state, t, seed)
        logs.append(log)
    return params, logs


@pytest.mark.filterwarnings("ignore::fedsample.privacy.amplification.PrivacyWarning")
@pytest.mark.parametrize("sampler,fault", CELLS, ids=[f"{s}|{f}" for s, f in CELLS])
def test_every_sampler_under_every_fault(sampler, fault):
    """One cell of the grid: the sampler keeps its declared target under the fault (Z standard errors over
    GRID_REPS seeds), says that it has none, or never asks that phase."""
    verdict, strategy, faults = GRID[sampler][fault], SAMPLERS[sampler](), FAULTS[fault]
    if verdict == KEEPS:
        draws = aggregates(strategy, faults, reps=GRID_REPS)
        target = declared_target(sampler, fault)
        assert np.all(off_by(draws, target) < Z), (draws.mean(axis=0), target, off_by(draws, target))
    elif verdict == ANSWERED:  # with H = 2 and m = 4 a stratum of one member loses it about one round in five
        with pytest.warns(RuntimeWarning, match="a stratum lost every member"):
            draws = aggregates(strategy, faults, reps=GRID_REPS, unless="strata_unanswered", rare=0.5)
        assert len(draws) < GRID_REPS - 10, "no stratum ever went unanswered: the cell tests nothing"
        target = declared_target(sampler, fault)
        assert np.all(off_by(draws, target) < Z), (draws.mean(axis=0), target, off_by(draws, target))
    elif verdict == UNASKED:
        for seed in range(5):
            faulty, clean = rounds_of(strategy, faults, seed, 1), rounds_of(strategy, FaultModel(), seed, 1)
            assert torch.equal(faulty[0]["w"], clean[0]["w"]) and not faulty[1][0]["failed"]
    else:
        assert verdict == SAYS
        phases = set()
        with pytest.warns(RuntimeWarning, match="lost clients this round .* no correction makes its aggregate unbiased"):
            for seed in range(10):
                _, logs = rounds_of(strategy, faults, seed, 3)  # FedCor chooses by its model after 2 random rounds
                assert logs[-1]["inclusion"] in ("estimated", "degenerate") and logs[-1]["bias"], logs[-1]
                phases |= {f["phase"] for log in logs for f in log["failed"]}
                assert all(("faults_uncorrected" in log) == bool(log["failed"] and log.get("bias")) for log in logs)
        assert phases, "the fault never struck: the cell tests nothing"


@pytest.mark.parametrize("update", ["approx", "exact"])
def test_isfedavg_does_without_a_lost_probe(update):
    """ISFedAvg with 20% of the probes lost (before: the round stopped): a lost agent is not drawn and the others'
    pi_k are times the share probed, so the plain mean stays the target (Z se over REPS seeds); leaving the share
    out (mean times about 0.8) is detected at this REPS (about 25 se measured for ``approx``)."""
    reference = {"w": torch.zeros(2, dtype=torch.float64)} if update == "exact" else None
    draws = aggregates(recipe("isfedavg", clients_per_round=4, update=update, reference=reference), FAULTS["lost probe"])
    target = UPDATES.mean(axis=0)
    assert np.all(off_by(draws, target) < Z), (draws.mean(axis=0), target)
    assert np.any(off_by(0.8 * draws, target) > Z)


@pytest.mark.filterwarnings("ignore::fedsample.privacy.amplification.PrivacyWarning")
@pytest.mark.parametrize("sampler", ["power-of-d", "Fed-CBS", "FedCor", "DivFL"])
def test_a_lost_probe_is_done_without_and_the_record_says_what_instead(sampler):
    """A biased sampler that lost probes goes on (before: the round stopped) and each round that lost one says what
    the sampler did instead, in the record (``sampler_lost_probes_instead``, within ``faults_uncorrected``) and the
    warning; a round without a lost probe says nothing of it."""
    said = 0
    with pytest.warns(RuntimeWarning, match="for its lost probes it "):
        for seed in range(10):
            _, logs = rounds_of(SAMPLERS[sampler](), FAULTS["lost probe"], seed, 3)
            for log in logs:
                lost = [f["client"] for f in log.get("failed", []) if f["phase"] == "probe"]
                assert ("sampler_lost_probes_instead" in log) == bool(lost) == (log.get("sampler_lost_probes", 0) == len(lost) > 0)
                if lost and log.get("bias"):
                    assert log["sampler_lost_probes_instead"] in log["faults_uncorrected"]
                    said += 1
    assert said > 0


def grid_table() -> str:
    """The grid as docs/reliability.md shows it."""
    rows = ["| sampler | " + " | ".join(FAULTS) + " |", "|---" * (len(FAULTS) + 1) + "|"]
    rows += [f"| {name} | " + " | ".join(GRID[name].values()) + " |" for name in GRID]
    return "\n".join(rows)


def test_the_docs_table_is_the_grid():
    """docs/reliability.md's table of samplers under faults is the grid these tests check."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text()
    assert grid_table() in docs, "regenerate the table: python tests/test_samplers_under_faults.py"
    assert re.search(r"GRID_REPS|400 seeds", docs)


if __name__ == "__main__":
    print(grid_table())
