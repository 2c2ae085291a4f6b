"""The door: with randomized-response reporting, no server-side object ever holds a true client size.

Everything the strategy receives from the federation, its persistent state, its per-round context and the
history are scanned for the vector of true sizes. The same scan finds it when the strategy asks for exact
sizes, so the test can fail.
"""

import dataclasses

import numpy as np
import pytest
import torch

from fedsample.messages import payloads_for
import fedsample as fs
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.federation.simulator import Simulator
from fedsample.simulation import make_federation
from helpers import blobs, federate

SIZES = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7])


class RecordingFederation:
    """Wraps a federation and keeps everything it hands back to the server."""

    def __init__(self, inner):
        self.inner = inner
        self.returned = []
        self.queries = []

    @property
    def num_clients(self):
        return self.inner.num_clients

    def run(self, client_ids, payload, round):
        procedure = payloads_for(payload, len(client_ids)).procedure.name  # the name the request's type declares
        reports = self.inner.run(client_ids, payload, round)
        self.queries.append((procedure, payload))
        self.returned.append((np.asarray(client_ids), reports))
        return reports


@dataclasses.dataclass(frozen=True)
class SpyAggregator:
    """Delegates, and keeps the round contexts and cohorts it is shown."""

    inner: object
    seen: list

    @property
    def capabilities(self):
        return self.inner.capabilities

    def combine(self, reports, cohort, ctx):
        self.seen.append((ctx, cohort))
        return self.inner.combine(reports, cohort, ctx)


def holds_true_sizes(obj, true_sizes: np.ndarray, depth: int = 0) -> bool:
    """Whether an integer sequence equal to the true sizes of some clients (all, or the cohort) is reachable.
    The federation itself (the client side of the door, which a round context legitimately refers to) is not
    entered; everything it returned is scanned separately."""
    if depth > 12 or obj is None or isinstance(obj, (str, bytes, float, bool, RecordingFederation, Simulator)):
        return False
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().numpy()
    if isinstance(obj, np.ndarray):
        if obj.ndim == 1 and len(obj) >= 5 and np.issubdtype(obj.dtype, np.integer):
            return len(obj) == len(true_sizes) and np.array_equal(obj, true_sizes)
        return False
    if isinstance(obj, (list, tuple)):
        if len(obj) >= 5 and all(isinstance(v, (int, np.integer)) for v in obj):
            return holds_true_sizes(np.asarray(obj, dtype=np.int64), true_sizes, depth + 1)
        extra = list(vars(obj).values()) if hasattr(obj, "__dict__") else []  # e.g. the engine's fused reports
        return any(holds_true_sizes(v, true_sizes, depth + 1) for v in list(obj) + extra)
    if isinstance(obj, dict):
        return any(holds_true_sizes(v, true_sizes, depth + 1) for v in obj.values())
    if dataclasses.is_dataclass(obj):
        return any(holds_true_sizes(getattr(obj, f.name), true_sizes, depth + 1) for f in dataclasses.fields(obj))
    if hasattr(obj, "__dict__"):
        return any(holds_true_sizes(v, true_sizes, depth + 1) for v in vars(obj).values())
    return False


def run_rounds(strategy, rounds=4, backend="loop"):
    fed = federate(blobs(n=200), list(SIZES))
    model = fs.models.LogisticRegression()
    module = model.build(fed.dataset.input_shape, fed.dataset.num_classes)
    seen = []
    strategy = dataclasses.replace(strategy, aggregate=SpyAggregator(strategy.aggregate, seen))
    federation = RecordingFederation(make_federation(backend, fed, module, 0))
    params = fs.models.initial_parameters(module, 0)
    state = strategy.init_state(params)
    history = []
    for t in range(rounds):
        params, log = strategy.round(with_secure_sum(federation, strategy.secure_sum, seed=0), params, state, t, seed=0)
        history.append(log)
    server_side = [strategy, state, history, federation.returned, federation.queries, seen]
    return server_side, seen


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_randomized_reports_never_reveal_true_sizes(backend):
    server_side, seen = run_rounds(fs.recipes.fedsampling(K=30, epsilon=3.0, M=10, server_lr=0.1), backend=backend)
    assert not holds_true_sizes(server_side, SIZES)
    # the server did hold size reports, just not the true ones
    assert all(ctx.sizes is not None and not ctx.sizes.exact for ctx, _ in seen)
    for ctx, cohort in seen:
        assert not holds_true_sizes(ctx.sizes.reports, SIZES)


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_the_scan_finds_sizes_when_the_strategy_asks_for_exact_ones(backend):
    """Same recipe, but the strategy explicitly asks for exact sizes: the scan must find them."""
    strategy = dataclasses.replace(fs.recipes.fedsampling(K=30, server_lr=0.1), sizes=fs.privacy.ExactSizes())
    server_side, _ = run_rounds(strategy, backend=backend)
    assert holds_true_sizes(server_side, SIZES)


@pytest.mark.parametrize("backend", ["loop", "vectorized"])
def test_train_reports_carry_no_sample_counts(backend):
    """FedSampling's clients (the paper's update, divided by K) send G_c and one step (none when they drew nothing),
    nothing that counts their samples; every asked client replies, with the same fields and shapes. (The library
    default's clients add their drawn count, which reaches the server only inside the secure sum:
    ``summed_statistics_are_sealed``.)"""
    server_side, _ = run_rounds(fs.recipes.fedsampling(K=30, epsilon=3.0, M=10, server_lr=0.1, normalize="K"), backend=backend)
    federation_returns = server_side[3]
    trains = [(ids, reports) for (procedure, _), (ids, reports) in zip(server_side[4], federation_returns) if procedure == "train"]
    assert trains and any(r.steps == 0 for _, reports in trains for r in reports)  # some clients drew nothing
    for ids, reports in trains:
        assert len(reports) == len(ids) and all(isinstance(r, fs.messages.TrainReport) for r in reports)
        shapes = {tuple((k, tuple(v.shape)) for k, v in r.update.items()) for r in reports}
        assert len(shapes) == 1
        for r in reports:
            assert r.steps in (0, 1)
            message = [getattr(r, f.name) for f in dataclasses.fields(fs.messages.TrainReport)]
            assert not any(isinstance(v, (int, np.integer)) and v > 1 for v in message)


# --- client-held state: ISFedAvg's Eq. 53 data weights stay on the clients ---------------------------

ISFEDAVG_SIZES = [11, 13, 17, 19, 23, 14, 16, 21]  # none equals another array length in the run (K=8, d=6, 3 classes)


def per_client_arrays(obj, sizes: set[int], skip: tuple = (), depth: int = 0) -> list[int]:
    """Lengths of every array (or tensor) reachable from ``obj`` whose first dimension is some client's size;
    objects of the ``skip`` types (the federation: the client side of the door) are not entered."""
    if depth > 12 or obj is None or isinstance(obj, (str, bytes, float, int, bool) + skip):
        return []
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().numpy()
    if isinstance(obj, np.ndarray):
        return [obj.shape[0]] if obj.ndim >= 1 and obj.shape[0] in sizes else []
    if isinstance(obj, dict):
        obj = list(obj.values())
    elif dataclasses.is_dataclass(obj):
        obj = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__dict__"):
        obj = list(vars(obj).values())
    if isinstance(obj, (list, tuple)):
        return [n for v in obj for n in per_client_arrays(v, sizes, skip, depth + 1)]
    return []


def test_isfedavg_cheap_data_weights_never_reach_the_server():
    """Eq. 53's per-sample weights (length N_k) live in the clients' own state: the scan finds none in any
    server-side object (strategy, its state, plans, reports, round contexts, history), while the same scan
    finds one of length N_k in the state of every client that trained."""
    fed = federate(blobs(n=200), ISFEDAVG_SIZES)
    module = fs.models.LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)
    seen = []
    strategy = fs.recipes.isfedavg(L=3, batch_size=4, epochs=2, update="cheap", lr=0.1)
    strategy = dataclasses.replace(strategy, aggregate=SpyAggregator(strategy.aggregate, seen))
    simulator = Simulator(fed, module, seed=0)
    federation = RecordingFederation(simulator)
    params = fs.models.initial_parameters(module, 0)
    state, history = strategy.init_state(params), []
    for t in range(4):
        params, log = strategy.round(federation, params, state, t, seed=0)
        history.append(log)
    sizes = set(ISFEDAVG_SIZES)
    server_side = [strategy, state, history, federation.returned, federation.queries, seen]
    assert per_client_arrays(server_side, sizes, skip=(RecordingFederation, Simulator)) == []
    trained = {int(k) for (procedure, _), (ids, _) in zip(federation.queries, federation.returned) if procedure == "train" for k in ids}
    held = simulator.client_states()
    assert set(held) == trained and len(trained) >= 3
    for k, client_state in held.items():
        assert per_client_arrays(client_state, sizes) == [ISFEDAVG_SIZES[k]]
