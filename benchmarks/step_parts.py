"""Where a PflCNN local step goes on one CPU thread, in thread CPU time (``time.thread_time``: the load of a
shared machine changes it far less than wall time): the second convolution's forward, input gradient and weight
gradient, the wide 12,544 x 128 layer's forward, input gradient and SGD step, and the fused layer's backward
(``fedsample.training.fused``) in blocks of ``FUSED_BLOCK_COLUMNS`` columns against one block, alternated
call by call; then whole clients (50 rows, 5 steps of 10: pfl-research's CIFAR-10 client), the engine's local
training (``run_schedule``) against a bare PyTorch loop over the same training module and the same dropout masks,
alternated client by client, with the minor page faults of each (``getrusage`` of the thread). Figures: the 10th
percentile and the median over the calls (ms; per local step for the clients), and the paired median ratios
(blocked backward ÷ one block, engine ÷ bare).
``--smoke``: 5 calls each.
Run: python benchmarks/step_parts.py [--smoke]
"""

from __future__ import annotations

import resource
import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from _common import arguments, emit, footer, header

from fedsample.messages import ClientContext, LocalSample
from fedsample.models import PflCNN
from fedsample.rng import ClientRandom
from fedsample.training import fused, random_layers
from fedsample.training.local import LocalSGD, run_schedule

BATCH = 10


def thread_ms(calls: dict[str, Callable[[], object]], n: int) -> dict[str, np.ndarray]:
    """Each call's thread CPU time (ms), the calls alternated ``n`` times."""
    out: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(n):
        for k, f in calls.items():
            start = time.thread_time()
            f()
            out[k].append((time.thread_time() - start) * 1e3)
    return {k: np.array(v) for k, v in out.items()}


def convolution_parts() -> dict[str, Callable[[], object]]:
    """The second convolution of PflCNN (32 -> 64 channels, 3x3, on 30x30) with channels-last tensors."""
    last = torch.channels_last
    x = torch.randn(BATCH, 32, 30, 30).contiguous(memory_format=last)
    w = torch.randn(64, 32, 3, 3)
    delta = torch.randn(BATCH, 64, 28, 28).contiguous(memory_format=last)

    def backward(mask: list[bool]) -> Callable[[], object]:
        return lambda: torch.ops.aten.convolution_backward(delta, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask)

    return {"conv2_forward": lambda: F.conv2d(x, w), "conv2_input_gradient": backward([True, False, False]),
            "conv2_weight_gradient": backward([False, True, False])}


def linear_parts() -> dict[str, Callable[[], object]]:
    """The wide layer: forward, input gradient, step (the unfused passes)."""
    w, b = torch.randn(128, 12544) * 0.01, torch.zeros(128)
    h, delta = torch.randn(BATCH, 12544), torch.randn(BATCH, 128)
    return {"linear_forward": lambda: torch.addmm(b, h, w.t()), "linear_input_gradient": lambda: delta @ w,
            "linear_step": lambda: w.addmm_(delta.t(), h, alpha=-1e-6)}


def fused_backward(columns: int) -> Callable[[], object]:
    """Forward and backward of the wide layer fused (its step inside the backward), in blocks of ``columns``."""
    layer = torch.nn.Linear(12544, 128)
    weights = {k: v.detach().clone().requires_grad_(True) for k, v in layer.named_parameters()}
    hooks = fused.FusedLinears(layer, weights, 1e-6, 0.0)
    h = torch.randn(BATCH, 12544, requires_grad=True)
    torch.func.functional_call(layer, weights, (h,))
    assert hooks.found() == ["weight", "bias"]  # fed h, which requires grad: an inner layer, fused from now on
    for v in weights.values():
        v.requires_grad_(False)

    def call() -> None:
        previous = fused.FUSED_BLOCK_COLUMNS
        fused.FUSED_BLOCK_COLUMNS = columns
        try:
            out = torch.func.functional_call(layer, weights, (h,))
            torch.autograd.grad(out.sum(), h)
            hooks.step_()
        finally:
            fused.FUSED_BLOCK_COLUMNS = previous

    return call


def client_steps() -> dict[str, Callable[[int], object]]:
    """One client of 50 CIFAR-shaped rows, 5 steps of 10 at lr 0.1 from the same global model: the engine's local
    training (``run_schedule``: masks from the client's stream, the wide layer fused, the update formed in its
    working copy), and a bare loop over the same training module (its parameters copied in, the same masks drawn,
    ``loss.backward()``, an in-place SGD step, the gradients dropped)."""
    torch.manual_seed(0)
    rows = 5 * BATCH
    x, y = torch.randn(rows, 3, 32, 32), torch.randint(0, 10, (rows,))
    model = PflCNN().build((3, 32, 32), 10)
    layers = random_layers.prepare(model, x[:1])
    module = random_layers.attach(layers)
    start = {k: v.detach().clone() for k, v in model.named_parameters()}
    ctx, sample, solver = ClientContext(0, x, y, module, "classification", 10), LocalSample(np.arange(rows)), LocalSGD(lr=0.1, batch_size=BATCH)
    trained = list(module.parameters())

    def engine(client: int) -> object:
        return run_schedule(solver, ctx, sample, start, 1, ClientRandom(0, 1, client, "train")).update

    def bare(client: int) -> object:
        generator = random_layers.client_generator(0, 1, client)
        with torch.no_grad():
            torch._foreach_copy_(trained, list(start.values()))
        for step in range(5):
            batch = slice(step * BATCH, (step + 1) * BATCH)
            with random_layers.injected(layers.draw(generator, BATCH)):
                F.cross_entropy(module(x[batch]), y[batch]).backward()
            with torch.no_grad():
                torch._foreach_add_(trained, [p.grad for p in trained], alpha=-0.1)
            for p in trained:
                p.grad = None
        return None

    return {"engine_client": engine, "bare_client": bare}


def clients_ms_and_faults(calls: dict[str, Callable[[int], object]], n: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Thread CPU time (ms) and minor page faults per local step of each call, alternated client by client ``n``
    times after 3 warm-up clients; each call's result (the update) is dropped before the next, as an aggregate does."""
    ms: dict[str, list[float]] = {k: [] for k in calls}
    faults: dict[str, list[float]] = {k: [] for k in calls}
    for client in range(n + 3):
        for k, f in calls.items():
            before, start = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt, time.thread_time()
            f(client)
            if client >= 3:
                ms[k].append((time.thread_time() - start) * 1e3 / 5)
                faults[k].append((resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before) / 5)
    return {k: np.array(v) for k, v in ms.items()}, {k: np.array(v) for k, v in faults.items()}


def main() -> None:
    args = arguments(__doc__).parse_args()
    torch.set_num_threads(1)
    header(args.smoke)
    n = 5 if args.smoke else 60
    times = thread_ms({**convolution_parts(), **linear_parts()}, n)
    times.update(thread_ms({"fused_blocks": fused_backward(fused.FUSED_BLOCK_COLUMNS), "fused_one_block": fused_backward(10**9)}, n))
    for k, v in times.items():
        emit(f"{k}_ms_p10", float(np.percentile(v, 10)))
        emit(f"{k}_ms_median", float(np.median(v)))
    emit("fused_blocks_over_one_block_paired_median", float(np.median(times["fused_blocks"] / times["fused_one_block"])))
    per_step, faults = clients_ms_and_faults(client_steps(), 5 if args.smoke else 30)
    for k, v in per_step.items():
        emit(f"{k}_ms_per_step_p10", float(np.percentile(v, 10)))
        emit(f"{k}_ms_per_step_median", float(np.median(v)))
        emit(f"{k}_minor_faults_per_step_median", float(np.median(faults[k])))
    emit("engine_over_bare_paired_median", float(np.median(per_step["engine_client"] / per_step["bare_client"])))
    footer()


if __name__ == "__main__":
    main()
