"""IWDS (Tang et al. 2021): Eq. 2-4 probabilities, the beta_t schedule of Eq. 6 through the plans actually
sent, Monte Carlo label frequencies of the drawn minibatches, and the recipe over base recipes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from helpers import blobs, federate

from fedsample.messages import payloads_for
from fedsample import models, recipes
from fedsample.messages import ClientContext
from fedsample.data.types import Dataset, FederatedData
from fedsample.federation.simulator import Simulator
from fedsample.sampling import iwds
from fedsample.simulation import simulate
from fedsample.training.local import LocalSGD
from fedsample.simulation import Engine


def test_class_weights_are_inverse_effective_numbers():
    counts = np.array([5, 0, 4950, 1])
    beta = 0.999
    expected = [(1 - beta) / (1 - beta**5), 0.0, (1 - beta) / (1 - beta**4950), 1.0]
    np.testing.assert_allclose(iwds.class_weights(counts, beta), expected, rtol=1e-10)
    np.testing.assert_allclose(iwds.class_weights(counts, 0.0), [1, 0, 1, 1])


def test_label_ratio_matches_paper_example_eq4():
    """Tang et al. §3.1: tail 5 vs dominant 4950 at beta = 0.9999 gives q ratio ~ 0.7889 (Eq. 4)."""
    q = iwds.label_probabilities(np.array([5, 4950]), 0.9999)
    ratio = q[0] / q[1]
    assert ratio == pytest.approx(5 * (1 - 0.9999**4950) / (4950 * (1 - 0.9999**5)), rel=1e-10)
    assert ratio == pytest.approx(0.7889, abs=5e-4)
    # uniform sampling (beta = 0): q is proportional to the counts
    np.testing.assert_allclose(iwds.label_probabilities(np.array([5, 4950]), 0.0), [5 / 4955, 4950 / 4955])


def test_sample_probabilities_eq3():
    labels = np.array([0, 0, 0, 1, 2, 2])
    p = iwds.sample_probabilities(labels, 4, 0.9)
    w = {0: 0.1 / (1 - 0.9**3), 1: 0.1 / 0.1, 2: 0.1 / (1 - 0.9**2)}
    raw = np.array([w[c] for c in labels])
    np.testing.assert_allclose(p, raw / raw.sum(), rtol=1e-12)
    assert p.sum() == pytest.approx(1.0)


def _context(labels: np.ndarray, classes: int) -> ClientContext:
    x = torch.zeros(len(labels), 2)
    return ClientContext(0, x, torch.as_tensor(labels), torch.nn.Linear(2, classes), "classification", classes)


def test_minibatch_label_frequencies_match_q_monte_carlo():
    """Batches LocalSGD draws from the plan's distribution hit each label with frequency q(k, c); tolerance
    4 standard errors of a binomial proportion."""
    labels = np.repeat([0, 1, 2], [200, 20, 3])
    ctx = _context(labels, 3)
    beta = 0.99
    sample = iwds.LabelWeightedSamples(beta).draw(ctx, np.random.default_rng(0))
    assert len(sample) == len(labels) and sample.probs is not None
    solver = LocalSGD(lr=0.1, epochs=None, steps=400, batch_size=50)
    drawn = np.concatenate(solver.batches(sample, np.random.default_rng(1)))
    freq = np.bincount(labels[sample.indices[drawn]], minlength=3) / drawn.size
    q = iwds.label_probabilities(np.bincount(labels), beta)
    se = np.sqrt(q * (1 - q) / drawn.size)
    assert np.all(np.abs(freq - q) < 4 * se), (freq, q)
    # and the resampling really rebalances: the rare label is far above its uniform share 3/223
    assert q[2] > 5 * 3 / 223


def test_schedule_eq6_values():
    assert iwds.beta_schedule(0, 0.9999, 0.98, 0.992) == pytest.approx(0.9999)
    assert iwds.beta_schedule(10, 0.9999, 0.98, 0.992) == pytest.approx(0.98 + 0.0199 * 0.992**10)
    assert iwds.beta_schedule(10_000, 0.9999, 0.98, 0.992) == pytest.approx(0.98)


class RecordingSimulator(Simulator):
    """The reference simulator, remembering every train payload's plan."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plans: list[tuple[int, object]] = []

    def run(self, client_ids, payload, round):
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        if procedure == "train":
            self.plans.append((round, payload.plan))
        return super().run(client_ids, payload, round)


def _skewed_federation() -> FederatedData:
    ds = blobs(n=240, classes=3)
    order = np.argsort(ds.y_train, kind="stable")  # label-sorted blocks: every client is imbalanced
    ds = Dataset(ds.name, ds.x_train[order], ds.y_train[order], ds.x_test, ds.y_test, ds.num_classes)
    return federate(ds, [60] * 4)


def test_beta_follows_schedule_through_sent_plans():
    """The decay the authors' code never applied: the plan of round t carries beta_t (Eq. 6)."""
    fed = _skewed_federation()
    st = recipes.iwds(beta_m=0.9, beta_0=0.999, rho=0.5, clients_per_round=2, lr=0.05, batch_size=16)
    module = models.LogisticRegression().build(fed.dataset.input_shape, 3)
    sim = RecordingSimulator(fed, module, seed=0)
    res = simulate(st, fed, module, rounds=5, seed=0, engine=Engine(federation=sim))
    rounds = [r for r, _ in sim.plans]
    assert rounds == [0, 1, 2, 3, 4]
    for t, plan in sim.plans:
        assert isinstance(plan, iwds.LabelWeightedSamples)
        assert plan.beta == pytest.approx(0.9 + (0.999 - 0.9) * 0.5**t, rel=1e-12)
    assert [h["beta"] for h in res.history] == [plan.beta for _, plan in sim.plans]
    assert len({plan.beta for _, plan in sim.plans}) == 5  # it really moves


def test_uni_and_imb_samp_are_settings_of_the_same_sampler():
    uni, imb = iwds.IWDSData.uniform(), iwds.IWDSData.imbalanced()
    assert {uni.beta(t) for t in (0, 7, 500)} == {0.0}
    assert {imb.beta(t) for t in (0, 7, 500)} == {0.9999}
    labels = np.repeat([0, 1], [30, 2])
    sample = iwds.LabelWeightedSamples(uni.beta(3)).draw(_context(labels, 2), np.random.default_rng(0))
    np.testing.assert_allclose(sample.probs, np.full(32, 1 / 32))


def test_recipe_composes_with_fedavg_and_local_options():
    st = recipes.recipe("iwds", beta_m=0.95, lr=0.1, batch_size=16, prox_mu=0.01, local_momentum=0.5)
    assert isinstance(st.data, iwds.IWDSData) and st.data.beta_m == 0.95
    assert st.clients.m == 5  # the paper's 5 of 10 clients
    assert (st.local.lr, st.local.prox_mu, st.local.momentum, st.local.lr_decay) == (0.1, 0.01, 0.5, 0.992)
    assert st.name == "iwds[fedavg]"
    fed = federate(_skewed_federation().dataset, [48] * 5)  # five clients: m = 5 takes them all
    res = simulate(st, fed, models.LogisticRegression(), rounds=4, seed=1, eval_every=4)
    assert res.history[-1]["accuracy"] > 0.6
    assert all(math.isfinite(h["train_loss"]) for h in res.history)


def test_recipe_passes_local_options_to_the_fedavg_family_by_their_names():
    """fedprox takes mu, fednova local_momentum: IWDS's prox_mu and momentum reach them under those names
    (fednova's paper setting is momentum 0.9), and fedavgm's *server* momentum is left alone."""
    prox = recipes.iwds(base="fedprox", prox_mu=0.1)
    assert prox.local.prox_mu == 0.1 and prox.name == "iwds[fedprox]"
    nova = recipes.iwds(base="fednova")
    assert nova.local.momentum == 0.9 and nova.local.lr_decay == 0.992
    avgm = recipes.iwds(base="fedavgm", local_momentum=0.5)
    assert avgm.local.momentum == 0.5 and avgm.server == recipes.fedavgm().server



def test_recipe_errors():
    with pytest.raises(ValueError, match="unknown base recipe"):
        recipes.iwds(base="nope")
    with pytest.raises(ValueError, match="has no parameter 'bogus'"):
        recipes.recipe("iwds", bogus=1)
    with pytest.raises(ValueError, match="does not accept a data sampler"):
        recipes.iwds(base="centralized")


@pytest.mark.parametrize("bad", [1.0, -0.1, float("nan"), 1.5])
def test_beta_outside_unit_interval_is_an_error(bad):
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        iwds.IWDSData(beta_m=bad)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        iwds.IWDSData(beta_0=bad)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        iwds.class_weights(np.array([1, 2]), bad)


def test_other_bad_input():
    with pytest.raises(ValueError, match="rho"):
        iwds.IWDSData(rho=1.2)
    with pytest.raises(ValueError, match="schedule"):
        iwds.IWDSData(schedule="linear")
    with pytest.raises(ValueError, match="non-negative"):
        iwds.class_weights(np.array([1, -2]), 0.5)
    ctx = ClientContext(0, torch.zeros(3, 2), torch.zeros(3), torch.nn.Linear(2, 1), "regression", 0)
    with pytest.raises(ValueError, match="classification"):
        iwds.LabelWeightedSamples(0.5).draw(ctx, np.random.default_rng(0))
