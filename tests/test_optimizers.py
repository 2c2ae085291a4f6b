"""Server optimizers (ServerSGD with momentum, FedAdagrad, FedAdam, FedYogi) against hand-computed rounds of
their papers' equations, and the local solver (momentum, weight decay, FedProx, lr decay, steps, FedNova's
effective steps) against torch.optim.SGD and closed forms."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from torch import nn

from fedsample.messages import ClientContext, LocalSample
from fedsample.training.local import LocalSGD, effective_steps, sgd_step
from fedsample.training.server import FedAdagrad, FedAdam, FedYogi, ServerSGD

W0 = [1.0, -2.0]
DELTAS = [[0.5, -1.0], [0.05, 0.4]]


def two_rounds(opt, w0=W0, deltas=DELTAS) -> list[list[float]]:
    params = {"w": torch.tensor(w0, dtype=torch.float64)}
    state = opt.init_state(params)
    out = []
    for d in deltas:
        params, state = opt.step(params, {"w": torch.tensor(d, dtype=torch.float64)}, state)
        out.append(params["w"].tolist())
    return out


# --- server optimizers: Reddi et al. 2021, Algorithm 2, with lr = 0.1, beta1 = 0.9, beta2 = 0.99, tau = 0.1 ---
# Round 1, coordinate 0 (Delta = 0.5, v_{-1} = tau^2 = 0.01, m_1 = 0.1 * 0.5 = 0.05), by hand:
#   Adagrad: v = 0.01 + 0.25 = 0.26,                w = 1 - 0.1 * 0.05 / (sqrt(0.26) + 0.1)   = 0.99180196
#   Adam:    v = 0.99 * 0.01 + 0.01 * 0.25 = 0.0124, w = 1 - 0.1 * 0.05 / (sqrt(0.0124) + 0.1) = 0.97634315
#   Yogi:    v = 0.01 + 0.01 * 0.25 (v < Delta^2)   = 0.0125, w = 0.97639320
# Round 2, coordinate 0 (Delta = 0.05, Delta^2 = 0.0025 < v): Yogi's v *decreases* to 0.0125 - 0.01 * 0.0025.
EXPECTED = {
    "adagrad": [[0.9918019609728145, -1.9909501243788792], [0.9836366631847356, -1.9867188080743998]],
    "adam": [[0.9763431515487491, -1.9585178183872134], [0.9526363429424081, -1.9381883691806814]],
    "yogi": [[0.976393202250021, -1.9585786437626904], [0.95277393049559, -1.9383332193803668]],
}


@pytest.mark.parametrize(
    "name, opt",
    [
        ("adagrad", FedAdagrad(lr=0.1, beta1=0.9, tau=0.1)),
        ("adam", FedAdam(lr=0.1, beta1=0.9, beta2=0.99, tau=0.1)),
        ("yogi", FedYogi(lr=0.1, beta1=0.9, beta2=0.99, tau=0.1)),
    ],
)
def test_adaptive_server_matches_algorithm_2_by_hand(name, opt):
    np.testing.assert_allclose(two_rounds(opt), EXPECTED[name], rtol=0, atol=1e-12)


def test_yogi_second_moment_moves_by_sign():
    """v_t = v - (1 - beta2) * d^2 * sign(v - d^2): grows when d^2 > v, shrinks when d^2 < v."""
    yogi = FedYogi(beta2=0.9)
    v = torch.tensor([1.0, 1.0, 1.0])
    d2 = torch.tensor([4.0, 0.25, 1.0])
    np.testing.assert_allclose(yogi.second_moment(v, d2).tolist(), [1.4, 0.975, 1.0])


def test_yogi_and_adam_differ_from_torch_adam():
    """Reddi's FedAdam has no bias correction and starts at v = tau^2, so torch.optim.Adam is a different
    update (the reason it is written out); FedAdagrad with beta1 = 0 is torch's Adagrad exactly."""
    w = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    adam = torch.optim.Adam([w], lr=0.1, betas=(0.9, 0.99), eps=0.1)
    w.grad = torch.tensor(DELTAS[0], dtype=torch.float64)
    adam.step()
    assert abs(w[0].item() - EXPECTED["adam"][0][0]) > 1e-2

    ours = two_rounds(FedAdagrad(lr=0.1, beta1=0.0, tau=0.1))
    w = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    ada = torch.optim.Adagrad([w], lr=0.1, initial_accumulator_value=0.01, eps=0.1)
    theirs = []
    for d in DELTAS:
        w.grad = torch.tensor(d, dtype=torch.float64)
        ada.step()
        theirs.append(w.tolist())
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


def test_server_momentum_fedavgm_by_hand():
    """v_1 = D1, w_1 = w_0 - lr*D1; v_2 = beta*D1 + D2, w_2 = w_1 - lr*v_2 (Hsu et al. 2019)."""
    lr, beta = 0.5, 0.9
    w1 = [1.0 - 0.5 * 0.5, -2.0 - 0.5 * -1.0]
    w2 = [w1[0] - lr * (beta * 0.5 + 0.05), w1[1] - lr * (beta * -1.0 + 0.4)]
    np.testing.assert_allclose(two_rounds(ServerSGD(lr=lr, momentum=beta)), [w1, w2], atol=1e-12)
    # without momentum: plain steps and no state
    assert ServerSGD(lr=lr).init_state({"w": torch.zeros(2)}) == {}
    np.testing.assert_allclose(two_rounds(ServerSGD(lr=lr))[1], [1 - lr * 0.55, -2 - lr * -0.6], atol=1e-12)


@pytest.mark.parametrize("opt", [ServerSGD(0.5, 0.9), FedAdagrad(), FedAdam(), FedYogi()], ids=repr)
def test_server_state_survives_torch_save(opt):
    """A run interrupted after round 1 and resumed from a torch.save'd state ends where the whole run does."""
    params = {"w": torch.tensor(W0, dtype=torch.float64)}
    state = opt.init_state(params)
    p1, state = opt.step(params, {"w": torch.tensor(DELTAS[0], dtype=torch.float64)}, state)
    buf = io.BytesIO()
    torch.save({"params": p1, "state": state}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    p2, _ = opt.step(saved["params"], {"w": torch.tensor(DELTAS[1], dtype=torch.float64)}, saved["state"])
    assert p2["w"].tolist() == two_rounds(opt)[1]


def test_paper_defaults():
    for opt in (FedAdam(), FedYogi()):
        assert (opt.beta1, opt.beta2, opt.tau) == (0.9, 0.99, 1e-3)
    assert (FedAdagrad().beta1, FedAdagrad().tau) == (0.9, 1e-3)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ServerSGD(lr=0.0), "learning rate"),
        (lambda: ServerSGD(lr=-1.0), "learning rate"),
        (lambda: ServerSGD(momentum=1.0), "momentum"),
        (lambda: ServerSGD(momentum=-0.1), "momentum"),
        (lambda: FedAdam(beta1=1.0), "beta1"),
        (lambda: FedAdam(beta2=1.5), "beta2"),
        (lambda: FedYogi(beta1=-0.1), "beta1"),
        (lambda: FedYogi(beta2=1.0), "beta2"),
        (lambda: FedAdagrad(beta1=1.0), "beta1"),
        (lambda: FedAdam(tau=0.0), "tau"),
        (lambda: FedYogi(lr=-0.01), "learning rate"),
        (lambda: LocalSGD(prox_mu=-0.1), "mu"),
        (lambda: LocalSGD(momentum=1.0), "momentum"),
        (lambda: LocalSGD(lr=-0.1), "lr"),
        (lambda: LocalSGD(lr_decay=1.5), "lr_decay"),
    ],
)
def test_bad_input_is_a_clear_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# --- the local solver -------------------------------------------------------------------------------------


def client(n: int = 12, seed: int = 0) -> tuple[ClientContext, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    module = nn.Linear(3, 2).double()
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (n,), generator=g)
    params = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in module.named_parameters()}
    return ClientContext(0, x, y, module, "classification", 2), params


def torch_sgd(ctx, params, steps, lr, momentum, weight_decay, mu):
    """The same full-batch local training with torch.optim.SGD; FedProx's mu/2 ||w - w0||^2 added to the loss."""
    ws = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    opt = torch.optim.SGD(list(ws.values()), lr=lr, momentum=momentum, weight_decay=weight_decay)
    for _ in range(steps):
        opt.zero_grad()
        out = torch.func.functional_call(ctx.module, ws, (ctx.x,))
        loss = nn.functional.cross_entropy(out, ctx.y)
        loss = loss + mu / 2 * sum(((ws[k] - params[k]) ** 2).sum() for k in ws)
        loss.backward()
        opt.step()
    return {k: params[k] - ws[k].detach() for k in ws}


@pytest.mark.parametrize(
    "momentum, weight_decay, mu", [(0.0, 0.0, 0.0), (0.9, 0.0, 0.0), (0.5, 0.01, 0.0), (0.9, 0.01, 0.1), (0.0, 0.0, 1.0)]
)
def test_local_sgd_matches_torch_sgd(momentum, weight_decay, mu):
    ctx, params = client()
    solver = LocalSGD(lr=0.1, epochs=None, steps=5, batch_size=None, momentum=momentum, weight_decay=weight_decay, prox_mu=mu)
    result = solver.run(ctx, LocalSample(np.arange(ctx.size)), params, 0, np.random.default_rng(0))
    expected = torch_sgd(ctx, params, 5, 0.1, momentum, weight_decay, mu)
    for k in expected:
        torch.testing.assert_close(result.update[k], expected[k], rtol=1e-10, atol=1e-12)
    assert result.steps == 5


def test_lr_decay_per_round():
    """Round t uses lr * decay^t: round 3 of LocalSGD(lr, decay) equals round 0 of LocalSGD(lr * decay^3)."""
    ctx, params = client()
    sample = LocalSample(np.arange(ctx.size))
    late = LocalSGD(lr=0.1, steps=3, epochs=None, batch_size=4, lr_decay=0.992).run(ctx, sample, params, 3, np.random.default_rng(1))
    early = LocalSGD(lr=0.1 * 0.992**3, steps=3, epochs=None, batch_size=4).run(ctx, sample, params, 0, np.random.default_rng(1))
    for k in params:
        torch.testing.assert_close(late.update[k], early.update[k], rtol=1e-12, atol=1e-14)
    assert LocalSGD(lr=0.1, lr_decay=0.5).learning_rate(2) == pytest.approx(0.025)


@pytest.mark.parametrize(
    "kwargs, n, steps",
    [({"epochs": 2, "batch_size": 4}, 10, 6), ({"epochs": None, "steps": 7, "batch_size": 4}, 10, 7), ({"epochs": 1, "batch_size": None}, 10, 1)],
)
def test_steps_reported_are_steps_taken(kwargs, n, steps):
    ctx, params = client(n)
    result = LocalSGD(**kwargs).run(ctx, LocalSample(np.arange(n)), params, 0, np.random.default_rng(0))
    assert result.steps == steps


def test_effective_steps_closed_forms():
    """Wang et al. 2020: ||a||_1 = tau (SGD); (tau - rho(1 - rho^tau)/(1 - rho))/(1 - rho) (momentum);
    (1 - (1 - lr*mu)^tau)/(lr*mu) (proximal)."""
    assert effective_steps(7) == 7
    rho, tau = 0.9, 12
    assert effective_steps(tau, rho) == pytest.approx((tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho), rel=1e-12)
    assert effective_steps(tau, rho) == pytest.approx(sum((1 - rho ** (tau - t)) / (1 - rho) for t in range(tau)), rel=1e-12)
    lm = 0.05
    assert effective_steps(tau, 0.0, lm) == pytest.approx((1 - (1 - lm) ** tau) / lm, rel=1e-12)
    assert effective_steps(0) == 0


@pytest.mark.parametrize("momentum, mu", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.3), (0.7, 0.3)])
def test_effective_steps_is_the_solver_response_to_a_unit_gradient(momentum, mu):
    """w_global - w_local = lr * ||a||_1 * g when every step sees the same gradient g (the definition of a_k)."""
    lr, tau = 0.1, 9
    w0 = {"w": torch.zeros(2, dtype=torch.float64)}
    g = {"w": torch.tensor([1.0, -3.0], dtype=torch.float64)}
    w, buf = dict(w0), ({"w": torch.zeros(2, dtype=torch.float64)} if momentum else None)
    for _ in range(tau):
        w, buf = sgd_step(w, g, buf, w0, lr, momentum, 0.0, mu)
    a = effective_steps(tau, momentum, lr * mu)
    torch.testing.assert_close(w0["w"] - w["w"], lr * a * g["w"], rtol=1e-12, atol=1e-14)
    assert not math.isclose(a, tau) or (momentum == 0 and mu == 0)


def test_local_sgd_reports_norm_steps():
    ctx, params = client()
    solver = LocalSGD(lr=0.1, epochs=None, steps=4, batch_size=5, momentum=0.9, prox_mu=0.2, lr_decay=0.5)
    result = solver.run(ctx, LocalSample(np.arange(ctx.size)), params, 1, np.random.default_rng(0))
    assert result.norm_steps == pytest.approx(effective_steps(4, 0.9, 0.05 * 0.2))
