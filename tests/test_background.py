"""The background thread (fedsample.background): what a round computes there is what it computes in line (the
round's record and parameters, key for key and bit for bit), and a forked child gets a worker of its own."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from concurrent.futures import Future

import numpy as np
import pytest
import torch

import fedsample as fs
import fedsample.strategy as strategy_module
from fedsample.background import in_background
from fedsample.federation.secure_sum import with_secure_sum
from fedsample.privacy.noise import UpdateNoise
from fedsample.simulation import make_federation
from helpers import blobs, federate

SIZES = [3, 1, 7, 2, 12, 5, 1, 9, 4, 6] * 3


def in_line(compute, *args) -> Future:
    """in_background's contract, computed before it returns."""
    done: Future = Future()
    done.set_result(compute(*args))
    return done


def rounds(strategy, backend: str, count: int = 3) -> list[tuple[dict, dict]]:
    fed = federate(blobs(n=int(np.sum(SIZES)) + 10), list(SIZES))
    module = fs.models.LogisticRegression().build(fed.dataset.input_shape, fed.dataset.num_classes)
    federation = with_secure_sum(make_federation(backend, fed, module, 0), strategy.secure_sum)
    params = fs.models.initial_parameters(module, 0)
    state, out = strategy.init_state(params), []
    for r in range(count):
        params, log = strategy.round(federation, params, state, r, 0)
        out.append((dict(params), dict(log)))
    return out


@pytest.mark.parametrize("recipe, backend", [
    (lambda: fs.recipes.fedsampling(K=40), "vectorized"),  # secure sum, noised count, size reports: the benchmark's round
    (lambda: fs.recipes.fedsampling(K=40, protocol="paper"), "loop"),
    (lambda: fs.recipes.fedavg(clients_per_round=6), "loop"),
    (lambda: dataclasses.replace(fs.recipes.fedavg(clients_per_round=6), noise=UpdateNoise(clip=1.0, noise_multiplier=1.0)), "vectorized"),  # RDP spend
])
def test_a_round_record_computed_in_the_background_is_the_one_computed_in_line(monkeypatch, recipe, backend):
    background = rounds(recipe(), backend)
    monkeypatch.setattr(strategy_module, "in_background", in_line)
    inline = rounds(recipe(), backend)
    for (p_bg, log_bg), (p_in, log_in) in zip(background, inline):
        assert list(log_bg) == list(log_in)  # the same keys in the same order
        assert log_bg == log_in
        assert all(torch.equal(p_bg[k], p_in[k]) for k in p_in)
    assert "clients_contacted" in background[0][1] and "privacy_delta" in background[0][1]


def test_a_fault_in_the_background_reaches_the_round(monkeypatch):
    def broken(self, ctx, cohort):
        raise RuntimeError("cohort facts failed")

    monkeypatch.setattr(strategy_module.Strategy, "cohort_facts", broken)
    with pytest.raises(RuntimeError, match="cohort facts failed"):
        rounds(fs.recipes.fedavg(clients_per_round=6), "loop", count=1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Python 3.12 warns on fork in a process with threads
def test_a_forked_child_starts_its_own_worker():
    assert in_background(int, "7").result() == 7  # the parent's worker exists before the fork
    pid = os.fork()
    if pid == 0:  # the child: without a worker of its own, the result never comes
        code = 3
        try:
            signal.alarm(20)
            code = 0 if in_background(int, "42").result(timeout=10) == 42 else 1
        except BaseException:
            code = 2
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_queued_work_waits_for_start_queued_and_gives_its_value():
    import fedsample.background as background

    background.start_queued()  # nothing left from earlier tests
    first, second = in_background(sum, [1, 2]), in_background(max, 4, 9)
    assert not first.started and not second.started  # queued: the caller's next short steps keep the GIL
    background.start_queued()
    assert first.started and second.started
    assert (first.result(timeout=10), second.result(timeout=10)) == (3, 9)


def test_work_nobody_starts_starts_when_its_result_is_asked():
    pending = in_background(divmod, 17, 5)
    assert not pending.started
    assert pending.result(timeout=10) == (3, 2)
    assert pending.started
    with pytest.raises(ZeroDivisionError):  # what the work raised reaches the caller
        in_background(divmod, 1, 0).result(timeout=10)


def test_queued_work_never_piles_up():
    import fedsample.background as background

    background.start_queued()
    pendings = [in_background(abs, -i) for i in range(background.MAX_QUEUED + 1)]
    assert all(p.started for p in pendings)  # one more than the bound started them all
    assert [p.result(timeout=10) for p in pendings] == list(range(background.MAX_QUEUED + 1))


@pytest.mark.parametrize("backend", ["vectorized", "loop"])
def test_a_round_starts_its_background_work_before_the_aggregate_is_read(monkeypatch, backend):
    """The round's queued work (the cohort facts, the count shares) is started by the engine's sum, where the main
    thread runs torch's kernels without the GIL, not left for the round's end."""
    import fedsample.background as background

    started_by_sum = []
    real_start = background.Pending.start

    def start(self):
        if not self.started:
            started_by_sum.append(any(f.f_code.co_name == "start_queued" for f in _frames()))
        real_start(self)

    monkeypatch.setattr(background.Pending, "start", start)
    rounds(fs.recipes.fedsampling(K=40), backend, count=1)
    assert started_by_sum and all(started_by_sum)


def _frames():
    frame = sys._getframe(1)
    while frame is not None:
        yield frame
        frame = frame.f_back
