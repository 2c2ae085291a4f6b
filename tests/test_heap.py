"""fedsample.runtime.heap: the objects alive when a run starts are left out of the collector's scans for the run."""

from __future__ import annotations

import gc

import fedsample as fs
import fedsample.simulation as simulation
from fedsample.runtime import heap
from fedsample.runtime.heap import heap_frozen


def test_a_frozen_block_freezes_what_is_alive_and_gives_it_back_at_the_outermost_end(monkeypatch):
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    calls = []
    for name in ("freeze", "unfreeze"):
        real = getattr(gc, name)
        monkeypatch.setattr(heap.gc, name, lambda real=real, name=name: (calls.append(name), real())[1])
    with heap_frozen():
        assert gc.get_freeze_count() > 1000  # this test process holds torch's and numpy's objects
        with heap_frozen():  # nested (a run inside a run): nothing frozen again, nothing given back at its end
            pass
        assert calls == ["freeze"] and gc.get_freeze_count() > 1000
    assert calls == ["freeze", "unfreeze"] and gc.get_freeze_count() == 0


def test_a_frozen_block_gives_the_objects_back_when_it_raises():
    gc.unfreeze()
    try:
        with heap_frozen():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.get_freeze_count() == 0


def test_simulate_runs_its_rounds_on_a_frozen_heap_and_gives_it_back(monkeypatch):
    gc.unfreeze()
    seen = []
    inner = simulation._run_rounds
    monkeypatch.setattr(simulation, "_run_rounds", lambda *a, **k: (seen.append(gc.get_freeze_count()), inner(*a, **k))[1])
    ds = fs.data.load_dataset("digits")
    fed = fs.data.partition(ds, fs.data.LogNormalSizes(mean=3, sigma=1), seed=0)
    fs.simulate(fs.recipes.fedavg(clients_per_round=4, epochs=1, batch_size=8, lr=0.1), federated_data=fed,
                model=fs.models.LogisticRegression(), rounds=1, seed=0)
    assert seen and seen[0] > 1000
    assert gc.get_freeze_count() == 0
