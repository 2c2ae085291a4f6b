"""The strategy state's readers (issue 39): a part's table is checked against its TypedDict when read back (keys and
each value's outer type), refused in one line naming the key; the server optimizer's buffers and the ledger likewise;
a table survives a checkpoint's save and load as the plain dict it is."""

import pickle
from typing import TypedDict

import numpy as np
import pytest
import torch

import fedsample as fs
from fedsample.callbacks import Checkpoint, CheckpointError, SimulationState
from fedsample.privacy.ledger import Accounting, Ledger
from fedsample.simulation import _attach_ledger
from fedsample.runtime.memo import LastOf
from fedsample.runtime.records import held_state, opened_state, part_state
from fedsample.sampling.delta import DeltaHeld
from fedsample.sampling import adaptive
from fedsample.sampling.divfl import DivFLHeld
from fedsample.sampling.oort import OortHeld
from fedsample.sampling.stratify import StrataHeld
from fedsample.strategy.round import SCREENED, ScreenedSizes, SizeEstimates
from fedsample.training.server import SERVER_KEY, FedAdam, server_state
from helpers import blobs, federate


class Counted(TypedDict):
    rounds: int
    total: float
    last: np.ndarray | None


def test_a_table_is_read_back_as_written():
    table = Counted(rounds=3, total=2.5, last=None)
    state: dict[str, object] = {"counted": table}
    assert part_state(state, "counted", Counted) is table
    assert held_state(state, "counted", Counted) is table
    assert part_state({}, "counted", Counted) is None


def test_numbers_of_the_numeric_tower_are_read_as_declared():
    """numpy integers where int is declared, ints and numpy floats where float is (what a part writes)."""
    state: dict[str, object] = {"counted": {"rounds": np.int64(3), "total": 2, "last": np.zeros(2)}}
    assert part_state(state, "counted", Counted)["total"] == 2
    state["counted"] = {"rounds": 3, "total": np.float32(0.5), "last": None}
    assert part_state(state, "counted", Counted)["total"] == 0.5


@pytest.mark.parametrize("value, says", [
    ([1, 2], "expected a Counted table, the state holds list"),
    ({"rounds": 3, "total": 1.0}, "missing last"),
    ({"rounds": 3.5, "total": 1.0, "last": None}, "unexpected rounds"),
    ({"rounds": 3, "total": "1", "last": None}, "unexpected total"),
    ({"rounds": 3, "total": 1.0, "last": [0.0]}, "unexpected last"),
    ({"rounds": 3, "total": 1.0, "last": None, "typo": 1}, "unexpected typo"),
])
def test_a_table_not_of_its_kind_is_refused_in_one_line_naming_the_key(value, says):
    with pytest.raises(TypeError, match=r"^state\['counted'\]: .*" + says) as error:
        part_state({"counted": value}, "counted", Counted)
    assert "\n" not in str(error.value)


def test_a_table_not_written_yet_is_refused_where_it_must_be_there():
    with pytest.raises(KeyError, match=r"state\['delta'\]: no DeltaHeld table kept yet"):
        held_state({}, "delta", DeltaHeld)


def test_an_opened_table_starts_empty_in_the_state_and_is_the_one_kept():
    state: dict[str, object] = {}
    table = opened_state(state, "clients", DivFLHeld)
    assert table == {} and state["clients"] is table
    table["known"] = np.zeros(3, dtype=bool)
    assert opened_state(state, "clients", DivFLHeld) is table
    with pytest.raises(TypeError, match=r"state\['strata'\]: a StrataHeld table starts with its required keys"):
        opened_state({}, "strata", StrataHeld)
    first = StrataHeld(labels=np.zeros(3, dtype=np.int64), round=0)
    assert opened_state(state, "strata", StrataHeld, first) is first and state["strata"] is first
    assert opened_state(state, "strata", StrataHeld, StrataHeld(labels=np.ones(3), round=1)) is first  # kept: not replaced


def test_the_server_optimizers_buffers_are_read_back_checked():
    params = {"w": torch.zeros(2)}
    state: dict[str, object] = {SERVER_KEY: FedAdam().init_state(params)}
    assert set(server_state(state)) == {"m", "v"}
    assert server_state({SERVER_KEY: {}}) == {}
    for wrong in (None, {"m": [0.0]}, {"m": {"w": np.zeros(2)}}):
        with pytest.raises(TypeError, match=r"^state\['server'\]: expected the server optimizer's buffers"):
            server_state({SERVER_KEY: wrong})


def test_the_state_with_its_tables_survives_a_checkpoint(tmp_path):
    """A checkpoint pickles the state: the tables come back as the dicts they are (read back by their readers), the
    screened-sizes memo as an empty one of its class."""
    memo = ScreenedSizes()
    memo.get((np.zeros(2),), None, lambda: ([], None))
    state: dict[str, object] = {
        "delta": DeltaHeld(round=2, scores=np.arange(3.0), probe_rate=1.0),
        "size_estimates": SizeEstimates(asked=1, totals=[4.0, 5.0], info=None),
        "screened_sizes": memo,
    }
    path = tmp_path / "run.pt"
    SimulationState(key="k", seed=0, round=2, params={"w": torch.zeros(1)}, state=state).save(path)
    back = SimulationState.load(path).state
    np.testing.assert_array_equal(held_state(back, "delta", DeltaHeld)["scores"], np.arange(3.0))
    assert held_state(back, "size_estimates", SizeEstimates)["totals"] == [4.0, 5.0]
    assert isinstance(back["screened_sizes"], ScreenedSizes)
    assert pickle.loads(pickle.dumps(memo))._last is None  # a saving of time only: never saved


def test_a_checkpoints_ledger_that_is_no_ledger_is_refused_naming_the_checkpoint():
    saved = SimulationState(key="k", seed=0, round=1, params={}, state={"privacy": {"releases": []}})
    with pytest.raises(CheckpointError, match=r"checkpoint run\.pt: its privacy ledger is a dict, not a Ledger"):
        _attach_ledger(saved, Accounting(unit="record"), None, "run.pt")
    saved.state["privacy"] = Ledger(Accounting(unit="record"))
    assert isinstance(_attach_ledger(saved, Accounting(unit="record"), None, "run.pt"), Ledger)


def test_a_checkpoint_whose_size_memo_is_an_older_lastof_resumes_to_the_same_numbers(tmp_path):
    """A checkpoint written before the memo had its own class holds an empty ``LastOf`` under ``screened_sizes``: the
    round puts a fresh memo in its place (a saving of time only), and the run ends as an uninterrupted one."""
    fed = federate(blobs(n=200), [1, 1, 2, 3, 5, 8, 13, 21, 34, 2, 1, 4, 6, 9, 30])
    run = dict(federated_data=fed, model=fs.models.MLP(hidden=8), rounds=4, seed=4)
    full = fs.simulate(fs.recipes.fedsampling(K=40, epsilon=3.0, M=20, server_lr=0.2), **run)
    path = tmp_path / "state.pt"
    fs.simulate(fs.recipes.fedsampling(K=40, epsilon=3.0, M=20, server_lr=0.2), **{**run, "rounds": 2}, callbacks=[Checkpoint(path)])
    saved = SimulationState.load(path)
    assert isinstance(saved.state[SCREENED], ScreenedSizes)
    saved.state[SCREENED] = LastOf()
    saved.save(path)
    resumed = fs.simulate(fs.recipes.fedsampling(K=40, epsilon=3.0, M=20, server_lr=0.2), **run, callbacks=[Checkpoint(path, resume=True)])
    assert resumed.history == full.history


def test_an_adaptive_samplers_table_is_not_read_as_anothers():
    """The adaptive samplers share one key (``adaptive.STATE_KEY``): Oort's table read as DivFL's is refused, naming
    the key and Oort's keys, rather than read as gradients."""
    state: dict[str, object] = {adaptive.STATE_KEY: OortHeld(utility=np.zeros(3), explored=np.zeros(3, dtype=bool), last=np.zeros(3))}
    with pytest.raises(TypeError, match=r"state\['clients'\]: not a DivFLHeld table \(unexpected utility, explored, last\)"):
        part_state(state, adaptive.STATE_KEY, DivFLHeld)
    assert part_state(state, adaptive.STATE_KEY, OortHeld)["utility"].shape == (3,)
