"""Local rules as chains of transformations: SGD's chain is its update equation, Adam's chain is Adam, and a local
Adam runs on the loop and on the vectorized engine's stacked clients with the same numbers (within float
rounding: the engines form the gradients with differently shaped products)."""

import dataclasses

import numpy as np
import pytest
import torch

from fedsample import checks, recipes
from fedsample.federation.simulator import Simulator
from fedsample.federation.vectorized import VectorizedSimulator
from fedsample.messages import TrainPayload
from fedsample.models import MLP, initial_parameters
from fedsample.sampling.data import AllSamples
from fedsample.simulation import simulate
from fedsample.training.local import LocalOptimizer, LocalSGD, SGDStep
from fedsample.training.rules import add_decayed_weights, chain, scale_by_adam, trace
from helpers import blobs, federate
from fedsample.simulation import Engine

SIZES = [1, 3, 7, 12, 2, 9, 0, 5, 4, 6, 2, 2]  # 0 to 6 steps at batch 2: the stack shrinks step by step


def tensors(seed: int, shapes=((3, 4), (4,))) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]


def test_sgds_chain_is_its_update_equation():
    """d = g + wd w + mu (w - w0); b = m b + d; w = w - lr b, step by step against the equation in float64."""
    lr, m, wd, mu = 0.1, 0.9, 0.01, 0.3
    rule = SGDStep(lr, m, wd, mu)
    w0 = tensors(0)
    w, state = [v.clone() for v in w0], rule.init(w0)
    ref_w, ref_b = [v.clone() for v in w0], [torch.zeros_like(v) for v in w0]
    for step in range(1, 5):
        g = tensors(step)
        rule.apply_(w, g, state, w0, step)
        for i in range(len(w)):
            ref_b[i] = m * ref_b[i] + (g[i] + wd * ref_w[i] + mu * (ref_w[i] - w0[i]))
            ref_w[i] = ref_w[i] - lr * ref_b[i]
    for a, b in zip(w, ref_w):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)
    assert rule.slots == 1 and SGDStep(lr).slots == 0 and SGDStep(lr).transforms == ()


def test_adams_chain_is_torch_adam():
    """chain(add_decayed_weights(wd), scale_by_adam(b1, b2, eps)) against torch.optim.Adam (its L2 weight decay),
    five steps in float64: equal up to the order of a square root and a division."""
    lr, wd, b1, b2, eps = 0.01, 0.05, 0.8, 0.95, 1e-8
    rule = chain(add_decayed_weights(wd), scale_by_adam(b1, b2, eps), lr=lr)
    w = tensors(0)
    ref = [v.clone().requires_grad_(True) for v in w]
    adam = torch.optim.Adam(ref, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    state = rule.init(w)
    assert len(state) == 2 * len(w)
    for step in range(1, 6):
        g = tensors(10 + step)
        rule.apply_(w, g, state, w, step)
        for p, gi in zip(ref, g):
            p.grad = gi.clone()
        adam.step()
    for a, b in zip(w, ref):
        torch.testing.assert_close(a, b.detach(), rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def fed():
    return federate(blobs(n=400, d=6, classes=3), SIZES)


ADAM = LocalOptimizer(lr=0.01, epochs=None, steps=4, batch_size=2, transforms=(scale_by_adam(0.9, 0.99, 1e-6),))


def test_a_local_adam_gives_the_same_updates_on_the_loop_and_stacked(fed, monkeypatch):
    """Every client's update from four local Adam steps, client by client on the loop and stacked on the
    vectorized engine (not in low-rank form: Adam is not linear in the gradients): equal within 1e-5, and not
    SGD's updates."""
    module = MLP(hidden=8).build(fed.dataset.input_shape, fed.dataset.num_classes)
    params = initial_parameters(module, 0)
    payload = TrainPayload(params=params, plan=AllSamples(), solver=ADAM, round=1)
    ids = np.arange(len(SIZES))
    stacked = []
    chunk = VectorizedSimulator._stacked_chunk
    monkeypatch.setattr(VectorizedSimulator, "_stacked_chunk", lambda self, *a, **k: stacked.append(a[3]) or chunk(self, *a, **k))
    loop = Simulator(fed, module, seed=5).run(ids, payload, 1)
    vec = VectorizedSimulator(fed, module, seed=5).run(ids, payload, 1)
    sgd = Simulator(fed, module, seed=5).run(ids, dataclasses.replace(payload, solver=LocalSGD(lr=0.01, epochs=None, steps=4, batch_size=2)), 1)
    assert stacked and all(rule.slots == 2 for rule in stacked)  # Adam's rule, on stacked parameters
    for r, v, s in zip(loop, vec, sgd):
        assert r.steps == v.steps == s.steps == (4 if r.steps else 0)
        if r.steps:
            assert v.loss == pytest.approx(r.loss, rel=1e-5, abs=1e-6)
            for k in r.update:
                torch.testing.assert_close(v.update[k], r.update[k], rtol=1e-5, atol=1e-6)
            assert not all(torch.allclose(r.update[k], s.update[k], rtol=1e-2) for k in r.update)


@pytest.mark.parametrize("steps", [1, 4])
def test_a_local_adam_fedavg_runs_alike_on_the_loop_and_the_vectorized_engine(fed, steps):
    """FedAvg with a local Adam, 3 rounds: the same history and model on both engines within 1e-5 (steps=1: a one-step
    cohort, which the vectorized engine stacks, as Adam's step is not linear in the gradient)."""
    strategy = dataclasses.replace(recipes.fedavg(clients_per_round=6), local=dataclasses.replace(ADAM, steps=steps))
    model = MLP(hidden=8)
    runs = {b: simulate(strategy, fed, model, rounds=3, seed=2, engine=Engine(backend=b)) for b in ("loop", "vectorized")}
    loop, vec = runs["loop"], runs["vectorized"]
    assert len(loop.history) == len(vec.history) == 3
    for a, b in zip(loop.history, vec.history):
        for key, value in a.items():
            assert b[key] == (pytest.approx(value, rel=1e-5, abs=1e-6) if isinstance(value, float) else value), key
    for k in loop.params:
        torch.testing.assert_close(vec.params[k], loop.params[k], rtol=1e-5, atol=1e-6)


def test_a_chained_solver_refuses_sgds_own_terms_in_one_line():
    with pytest.raises(checks.ParameterError, match=r"^LocalOptimizer: momentum must be 0 beside transforms: give it as a transformation"):
        LocalOptimizer(momentum=0.9, transforms=(trace(0.9),))
    assert LocalOptimizer(transforms=(trace(0.9),)).step_rule(0).slots == 1


def test_diagnose_refuses_a_local_adam_in_one_line(fed):
    """diagnose measures updates linear in the per-sample gradients: a local Adam is refused by name, not an
    AttributeError from deep inside the linearised engine."""
    import fedsample as fs

    strategy = dataclasses.replace(recipes.fedavg(clients_per_round=6), local=ADAM)
    with pytest.raises(ValueError, match="linear in the per-sample gradients"):
        fs.diagnose({"adam": strategy}, fed, MLP(hidden=8), rounds=4, seed=1)
