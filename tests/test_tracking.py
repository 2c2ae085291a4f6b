"""Experiment tracking (fedsample.tracking, docs/tracking.md): what the trackers wrote is read back with each
tool's own reader (the jsonl file, TensorBoard's EventAccumulator, MLflow's MlflowClient on the local store,
the records of the W&B offline run) and compared with the run's history; a failing run closes its trackers as
failed; the round log's sampler figures are checked on hand-computed cohorts; the command line's ``--track``.
Nothing here connects to a network: MLflow's store is a local SQLite file, W&B runs offline."""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

import fedsample as fs
from fedsample.cli import main
from fedsample.client import TrainReport
from fedsample.rounds import Cohort, Failed, Replies, RoundContext
from fedsample.sampling.data import DRAWN
from fedsample.strategy import Strategy, cohort_figures, is_census
from fedsample.tracking.base import MissingExtra, Tracker, TrackerGroup, flat_config, numeric_metrics
from fedsample.tracking.jsonl import JsonlTracker, read_jsonl
from fedsample.tracking.setup import TrackingSpec, parse_backends
from fedsample.callbacks import Checkpoint, Progress, Tracking

SPEC = importlib.util.find_spec
INSTALLED = {name: SPEC(name) is not None for name in ("tensorboard", "mlflow", "wandb")}
AVAILABLE = ("jsonl", *(name for name, ok in INSTALLED.items() if ok))
ROUNDS = 3


def needs(extra: str):
    return pytest.mark.skipif(not INSTALLED[extra], reason=f"the {extra} tracker needs the extra: pip install 'fedsample[{extra}]'")


# --- the round log's sampler figures -----------------------------------------------------------------


def test_cohort_figures_on_a_hand_computed_cohort():
    # pi = (1/2, 1/4, 1), drawn (1, 2, 1) times: design weights 2, 4, 4, 1 over n = 4 draws
    cohort = Cohort(np.array([1, 4, 7]), np.array([0.5, 0.25, 1.0]), population=10, multiplicity=np.array([1, 2, 1]))
    figures = cohort_figures(cohort)
    assert figures["inclusion_min"] == 0.25 and figures["inclusion_max"] == 1.0
    assert figures["inclusion_mean"] == pytest.approx(1.75 / 3)
    assert figures["effective_cohort"] == pytest.approx(11**2 / 37)  # (2+4+4+1)^2 / (4+16+16+1)
    assert figures["weight_cv"] == pytest.approx(math.sqrt(27) / 11)  # sd 1.299 / mean 2.75 over the 4 draws
    assert figures["effective_cohort"] == pytest.approx(4 / (1 + figures["weight_cv"] ** 2))  # Kish: n / (1 + cv^2)
    assert cohort_figures(Cohort(np.zeros(0, np.int64), np.zeros(0), population=10)) == {}


def general_figures(cohort):
    """cohort_figures' formulas written out (the path every cohort that is not a census takes)."""
    pi, m = np.asarray(cohort.inclusion, dtype=np.float64), np.asarray(cohort.multiplicity, dtype=np.float64)
    w = 1.0 / pi
    total, squares, n = float(np.sum(m * w)), float(np.sum(m * (w * w))), float(m.sum())
    mean = total / n
    return {"inclusion_min": float(pi.min()), "inclusion_mean": float(pi.mean()), "inclusion_max": float(pi.max()),
            "effective_cohort": total * total / squares, "weight_cv": float(np.sqrt(max(squares / n - mean * mean, 0.0))) / mean,
            "design_weight_total": float(np.sum(cohort.design_weights()))}


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 30_000, 250_001])
def test_a_census_cohorts_figures_in_closed_form_are_the_formulas_floats(n):
    """AllClients' cohort (pi_k = 1, m_k = 1) takes the closed form (strategy.census_figures): the very floats the
    formulas give, so the round log does not change."""
    from fedsample.sampling.clients import AllClients

    cohort = AllClients().select(RoundContext(federation=type("F", (), {"num_clients": n})(), params=None, round=0, seed=0, state={}))
    assert is_census(cohort)
    figures, expected = cohort_figures(cohort), general_figures(cohort)
    assert figures == expected and all(type(figures[k]) is type(expected[k]) for k in expected)


def test_only_a_census_takes_the_closed_form():
    """A probability below 1, a NaN (estimated), a member drawn twice or expected draws (Hansen-Hurwitz weights) each
    leave the closed form: the figures come from the formulas."""
    ones = np.ones(4)
    for cohort in (Cohort(np.arange(4), np.array([1.0, 1.0, 0.5, 1.0]), population=9),
                   Cohort(np.arange(4), np.array([1.0, np.nan, 1.0, 1.0]), population=4),
                   Cohort(np.arange(4), ones, population=4, multiplicity=np.array([1, 2, 1, 1])),
                   Cohort(np.arange(4), ones, population=4, expected_draws=np.full(4, 0.8))):
        assert not is_census(cohort)
        assert str(cohort_figures(cohort)) == str(general_figures(cohort))
    assert cohort_figures(Cohort(np.arange(4), np.array([1.0, 1.0, 0.5, 1.0]), population=9))["inclusion_min"] == 0.5


def test_describe_round_counts_asked_answered_and_drawn_samples():
    cohort = Cohort(np.array([1, 4, 7]), np.array([0.5, 0.25, 1.0]), population=10, multiplicity=np.array([1, 2, 1]))
    replies = Replies([TrainReport({}, steps=2, loss=0.5, sums={DRAWN: 3}), TrainReport({}, steps=1, loss=1.5, sums={DRAWN: 5}),
                       Failed(7, "train", "timed out")])
    ctx = RoundContext(federation=None, params=None, round=0, seed=0, state={})
    described = Strategy().describe_round(ctx, cohort, replies)
    log = {**ctx.log, **described}  # failures go to the round's log (dropped)
    assert (log["cohort"], log["answered"], log["updates"], log["dropped"], log["samples"]) == (3, 2, 2, 1, 8)
    assert log["train_loss"] == pytest.approx(1.0) and log["effective_cohort"] == pytest.approx(121 / 37)
    unknown = Replies([TrainReport({}, steps=1, loss=1.0), TrainReport({}, steps=1, loss=1.0, sums={DRAWN: 4})])
    assert "samples" not in Strategy().describe_round(RoundContext(None, None, 0, 0, {}), Cohort(np.array([0, 1]), np.ones(2), 2), unknown)


@pytest.fixture(scope="module")
def digits():
    ds = fs.data.load_dataset("digits")
    return fs.data.partition(ds, fs.data.IID(num_clients=12), seed=0)


def test_uniform_cohorts_log_equal_inclusion_and_full_effective_size(digits):
    result = fs.simulate(fs.recipes.fedavg(clients_per_round=4, steps=1), digits, fs.models.LogisticRegression(), rounds=2, seed=0)
    for record in result.history:
        assert (record["cohort"], record["answered"]) == (4, 4)
        assert record["inclusion_min"] == record["inclusion_max"] == pytest.approx(4 / 12)
        assert record["effective_cohort"] == pytest.approx(4) and record["weight_cv"] == pytest.approx(0, abs=1e-12)


def test_the_drawn_count_of_a_secure_sum_is_logged_and_averages_K(digits):
    """FedSampling with exact sizes keeps each sample with probability K/N, so the logged drawn count S has mean
    K; over 40 rounds its mean is within 5 standard errors (sd of S: sqrt(N p (1-p)))."""
    K, rounds = 60, 40
    strategy = fs.recipes.fedsampling(K=K, sizes="exact", normalize="drawn", server_lr=0.1)
    history = fs.simulate(strategy, digits, fs.models.LogisticRegression(), rounds=rounds, seed=1, eval_every=rounds).history
    drawn = np.array([r["samples"] for r in history], dtype=float)
    N = digits.sizes().sum()
    se = math.sqrt(N * (K / N) * (1 - K / N) / rounds)
    assert abs(drawn.mean() - K) < 5 * se


# --- the interface ---------------------------------------------------------------------------------


class Recording(Tracker):
    backend = "recording"

    def __init__(self, fail_on_close: bool = False) -> None:
        super().__init__()
        self.events: list[tuple] = []
        self.fail_on_close = fail_on_close

    def _open(self, config, resumed_at):
        self.events.append(("start", config, resumed_at))

    def _write(self, metrics, step):
        self.events.append(("metrics", metrics, step))

    def _artifact(self, path):
        self.events.append(("artifact", path))

    def _close(self, failed):
        self.events.append(("close", failed))
        if self.fail_on_close:
            raise OSError("disk full")


def test_a_tracker_is_started_logged_and_closed_once(tmp_path):
    tracker = Recording()
    with pytest.raises(RuntimeError, match="start it first"):
        tracker.log("x", 1.0, step=1)
    with tracker:
        tracker.start({"lr": 0.1})
        tracker.log("x", 1, step=1)
        tracker.log_dict({"y": np.float32(2.5), "ok": True}, step=2)
        with pytest.raises(ValueError, match="'z' must be a number"):
            tracker.log_dict({"z": "text"}, step=3)
        with pytest.raises(FileNotFoundError):
            tracker.log_artifact(tmp_path / "missing.png")
    tracker.close()
    assert tracker.events == [
        ("start", {"lr": 0.1}, 0), ("metrics", {"x": 1.0}, 1), ("metrics", {"y": 2.5, "ok": 1.0}, 2), ("close", False)
    ]


def test_a_block_that_raises_closes_every_member_as_failed():
    first, broken, last = Recording(), Recording(fail_on_close=True), Recording()
    group = TrackerGroup([first, broken, last], config={"experiment": "e"})
    with pytest.raises(KeyError), pytest.warns(RuntimeWarning, match="closing the recording tracker failed: disk full"):
        with group:
            group.start({"seed": 0})
            raise KeyError("the run broke")
    assert [t.events[-1] for t in (first, broken, last)] == [("close", True)] * 3
    assert first.events[0] == ("start", {"experiment": "e", "seed": 0}, 0)
    ok = TrackerGroup([Recording(fail_on_close=True), Recording()])
    ok.start({})
    with pytest.raises(OSError, match="disk full"):  # a clean close reports the member that failed, after closing all
        ok.close()
    assert ok.trackers[1].events[-1] == ("close", False)


class FailsToStart(Recording):
    def _open(self, config, resumed_at):
        self.events.append(("half open",))
        raise ConnectionError("no store")


def test_a_tracker_that_fails_to_start_is_closed_and_so_are_the_started_ones():
    started, broken, never = Recording(), FailsToStart(), Recording()
    with pytest.raises(ConnectionError):
        with TrackerGroup([started, broken, never]) as group:
            group.start({})
    assert started.events[-1] == ("close", True) and broken.events == [("half open",), ("close", True)] and never.events == []


def test_numeric_metrics_keeps_numbers_and_flattens_dicts():
    record = {"round": 3, "loss": 0.5, "cohort": np.int64(4), "ok": True, "failed": [{"client": 1}], "why": "text",
              "size": {"total": 10.0, "asked": [1, 2]}, "nan": float("nan"), "none": None}
    metrics = numeric_metrics(record)
    assert set(metrics) == {"loss", "cohort", "ok", "size/total", "nan"} and metrics["cohort"] == 4.0 and math.isnan(metrics["nan"])
    assert flat_config({"a": {"b": [1, {"c": 2}]}, "e": []}) == {"a.b.0": 1, "a.b.1.c": 2, "e": []}


def test_parse_backends_and_missing_extras(monkeypatch):
    assert parse_backends(" tensorboard, mlflow ") == ("tensorboard", "mlflow") and parse_backends("none") == ()
    for bad in ("", "tensorbored", "jsonl,jsonl"):
        with pytest.raises(ValueError, match="--track"):
            parse_backends(bad)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(MissingExtra, match=r"pip install 'fedsample\[wandb\]'"):
        TrackingSpec(("jsonl", "wandb"), Path("unused")).check()


# --- one tiny run into every installed tracker, and one that fails --------------------------------------


class Stop(RuntimeError):
    pass


def stop_after_round_2(t: int) -> None:
    if t == 2:
        raise Stop("stopped after round 2")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, digits):
    """A 3-round FedAvg run (evaluated at rounds 2 and 3), a run stopped after round 2, and a run holding two
    files, into every installed tracker."""
    folder = tmp_path_factory.mktemp("tracking")
    spec = TrackingSpec(AVAILABLE, folder)
    strategy = fs.recipes.fedavg(clients_per_round=4, steps=1)
    run = dict(federated_data=digits, model=fs.models.LogisticRegression(), rounds=ROUNDS, seed=0, eval_every=2)
    ok = fs.simulate(strategy, **run, callbacks=[Tracking([spec.open("tiny", "ok", "tiny/ok")])])  # one group of every tracker
    with pytest.raises(Stop):  # the trackers one by one
        fs.simulate(strategy, **run, callbacks=[Tracking(spec.trackers("tiny", "failed", "tiny/failed")), Progress(stop_after_round_2)])
    files = [folder / "table.md", folder / "picture.png"]
    files[0].write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    import matplotlib.pyplot as plt

    plt.imsave(files[1], np.arange(12.0).reshape(3, 4))
    spec.log_files("tiny", "files", "tiny/files", files)
    expected = {record["round"]: numeric_metrics(record) for record in ok.history}
    return folder, expected, files


def test_the_round_records_hold_the_sampler_figures(tracked):
    _, expected, _ = tracked
    for step, metrics in expected.items():
        assert {"cohort", "answered", "updates", "train_loss", "inclusion_mean", "effective_cohort", "weight_cv"} <= set(metrics)
        assert ("accuracy" in metrics) == (step in (2, 3))


def test_jsonl_holds_config_every_round_and_the_end(tracked):
    folder, expected, files = tracked
    lines = read_jsonl(folder / "jsonl" / "tiny" / "ok.jsonl")
    assert [e["event"] for e in lines] == ["start", "metrics", "metrics", "metrics", "end"]
    config = lines[0]["config"]
    assert (config["experiment"], config["run"], config["seed"], config["rounds"], config["dataset"]) == ("tiny", "ok", 0, ROUNDS, "digits")
    assert {e["step"]: e["metrics"] for e in lines[1:-1]} == expected
    assert lines[-1]["status"] == "finished"
    failed = read_jsonl(folder / "jsonl" / "tiny" / "failed.jsonl")
    assert [e.get("step") for e in failed if e["event"] == "metrics"] == [1, 2] and failed[-1]["status"] == "failed"
    artifacts = [e["path"] for e in read_jsonl(folder / "jsonl" / "tiny" / "files.jsonl") if e["event"] == "artifact"]
    assert artifacts == [str(f.resolve()) for f in files]


def stopped_then_resumed(tmp_path, digits, make_trackers) -> list[dict]:
    """4 rounds checkpointed every 2, stopped after round 3 (logged), resumed: the history of the whole run."""
    strategy = fs.recipes.fedavg(clients_per_round=4, steps=1)
    run = dict(federated_data=digits, model=fs.models.LogisticRegression(), rounds=4, seed=0)
    path = tmp_path / "state.pt"
    with pytest.raises(Stop):
        fs.simulate(strategy, **run, callbacks=[Tracking(make_trackers()), Checkpoint(path, every=2), Progress(lambda t: stop_after_round_2(t - 1))])
    return fs.simulate(strategy, **run, callbacks=[Tracking(make_trackers()), Checkpoint(path, every=2, resume=True)]).history


def test_jsonl_resume_drops_the_rounds_after_the_checkpoint(tmp_path, digits):
    path = tmp_path / "run.jsonl"
    attempts = []

    def make():
        if attempts:  # the stopped attempt logged round 3; its checkpoint holds round 2
            assert [e["step"] for e in read_jsonl(path) if e["event"] == "metrics"] == [1, 2, 3]
        attempts.append(JsonlTracker(path))
        return attempts[-1:]

    history = stopped_then_resumed(tmp_path, digits, make)
    lines = read_jsonl(path)
    metrics = [e for e in lines if e["event"] == "metrics"]
    assert [e["step"] for e in metrics] == [1, 2, 3, 4] and [e["status"] for e in lines if e["event"] == "end"] == ["failed", "finished"]
    assert {"event": "resume", "step": 2} == {k: v for k, v in lines[-4].items() if k != "time"}
    assert [e["metrics"] for e in metrics] == [numeric_metrics(r) for r in history]
    again = fs.simulate(
        fs.recipes.fedavg(clients_per_round=4, steps=1), digits, fs.models.LogisticRegression(), rounds=4, seed=0, callbacks=[Tracking([JsonlTracker(path)]), Checkpoint(tmp_path / "state.pt", resume=True)],
    )
    assert len(again.history) == 4 and read_jsonl(path) == lines  # a finished run resumed: no round to track, no new run


@needs("tensorboard")
@needs("mlflow")
def test_a_resumed_run_continues_its_tensorboard_and_mlflow_runs(tmp_path, digits):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fedsample.tracking import MlflowTracker, TensorBoardTracker

    make = lambda: [TensorBoardTracker(tmp_path / "tb"), MlflowTracker("resumed", "run", folder=tmp_path / "mlflow")]  # noqa: E731
    history = stopped_then_resumed(tmp_path, digits, make)
    expected = {r["round"]: r["train_loss"] for r in history}
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert {e.step: e.value for e in events.Scalars("train_loss")} == pytest.approx(expected, rel=1e-6)
    assert len(events.Scalars("train_loss")) == 4  # round 3 of the stopped attempt purged
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("resumed").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["fedsample.resumed_at"] == "2"
    logged = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train_loss")]
    assert sorted(set(logged)) == sorted(expected.items())  # round 3 logged twice, with the same value


@needs("tensorboard")
def test_tensorboard_event_files_hold_every_scalar(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder, expected, _ = tracked
    events = EventAccumulator(str(folder / "tensorboard" / "tiny" / "ok"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    names = {name for metrics in expected.values() for name in metrics}
    assert set(events.Tags()["scalars"]) == names
    for name in names:
        logged = {e.step: e.value for e in events.Scalars(name)}
        assert logged == pytest.approx({s: m[name] for s, m in expected.items() if name in m}, rel=1e-6)  # float32
    text = {tag: events.Tensors(tag)[-1].tensor_proto.string_val[0].decode() for tag in events.Tags()["tensors"]}
    assert json.loads(text["config/text_summary"].strip("`").removeprefix("json"))["seed"] == 0
    assert text["status/text_summary"] == "finished"
    failed = EventAccumulator(str(folder / "tensorboard" / "tiny" / "failed"))
    failed.Reload()
    assert [e.step for e in failed.Scalars("train_loss")] == [1, 2]
    assert failed.Tensors("status/text_summary")[-1].tensor_proto.string_val[0] == b"failed"
    files = EventAccumulator(str(folder / "tensorboard" / "tiny" / "files"), size_guidance={"images": 0})
    files.Reload()
    image = files.Images("artifacts/picture.png")[0]
    assert (image.width, image.height) == (4, 3)
    assert "artifacts/table.md/text_summary" in files.Tags()["tensors"]


@needs("mlflow")
def test_mlflow_store_holds_runs_metrics_params_and_artifacts(tracked):
    from mlflow.tracking import MlflowClient

    folder, expected, _ = tracked
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"ok", "failed", "files"}
    assert (runs["ok"].info.status, runs["failed"].info.status, runs["files"].info.status) == ("FINISHED", "FAILED", "FINISHED")
    ok = runs["ok"]
    assert ok.data.params["seed"] == "0" and ok.data.params["experiment"] == "tiny" and ok.data.params["dataset"] == "digits"
    for name in {name for metrics in expected.values() for name in metrics}:
        history = {m.step: m.value for m in client.get_metric_history(ok.info.run_id, name)}
        assert history == {s: m[name] for s, m in expected.items() if name in m}
    assert [m.step for m in client.get_metric_history(runs["failed"].info.run_id, "train_loss")] == [1, 2]
    assert "config.json" in {a.path for a in client.list_artifacts(ok.info.run_id)}
    assert {a.path for a in client.list_artifacts(runs["files"].info.run_id)} >= {"table.md", "picture.png"}
    assert experiment.artifact_location.startswith((folder / "mlflow" / "artifacts").as_uri())  # inside the run's folder


def wandb_records(path: Path) -> list:
    """The records of a W&B transaction log (.wandb): a 7-byte header (':W&B', 0xBEE1, version), then LevelDB-log
    chunks (crc32, length, type) in 32 KiB blocks, each record a protobuf ``Record``. wandb 0.31 ships no Python
    reader of its own (its core is in Go), so the format is read here."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1)
    records, chunks, pos = [], [], 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunks.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            records.append(record)
            chunks = []
    return records


def wandb_runs(folder: Path) -> dict[str, list]:
    runs = {}
    for log in folder.glob("wandb/offline-run-*/run-*.wandb"):
        records = wandb_records(log)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        runs[run.display_name] = records
        assert run.project == "tiny" and run.run_group == "tiny"
    return runs


@needs("wandb")
def test_wandb_offline_runs_hold_config_history_files_and_exit_codes(tracked):
    folder, expected, _ = tracked
    runs = wandb_runs(folder)
    assert set(runs) == {"ok", "failed", "files"}
    of = lambda records, kind: [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]  # noqa: E731
    config = {item.key: json.loads(item.value_json) for item in of(runs["ok"], "run")[0].config.update}
    assert (config["seed"], config["experiment"], config["rounds"]) == (0, "tiny", ROUNDS)
    key = lambda item: item.key or "/".join(item.nested_key)  # noqa: E731
    history = {
        h.step.num: {key(i): json.loads(i.value_json) for i in h.item if not key(i).startswith("_")} for h in of(runs["ok"], "history")
    }
    assert history == {s: pytest.approx(m) for s, m in expected.items()}
    assert [e.exit_code for e in of(runs["ok"], "exit")] == [0] and [e.exit_code for e in of(runs["failed"], "exit")] == [1]
    assert sorted(h.step.num for h in of(runs["failed"], "history")) == [1, 2]
    saved = {f.path for files in of(runs["files"], "files") for f in files.files}
    assert {"table.md", "picture.png"} <= saved
    run_dir = next(folder.glob("wandb/offline-run-*/files/table.md")).parent
    assert (run_dir / "table.md").read_text().startswith("| a | b |")


# --- the command line ------------------------------------------------------------------------------

CONFIG = """
name = "tiny-tracked"
rounds = 2
seeds = [0]
[dataset]
name = "digits"
[partition]
scheme = "iid"
num_clients = 6
[model]
name = "logreg"
[[strategies]]
recipe = "fedsampling"
label = "FedSampling (eps=3)"
K = 30
M = 20
server_lr = 0.5
[[strategies]]
recipe = "fedavg"
label = "FedAvg"
clients_per_round = 3
steps = 1
"""


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    return path


def test_run_with_track_logs_each_strategy_and_seed_as_a_run(config_file, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(config_file), "--out", str(out), "--quiet", "--track", ",".join(AVAILABLE)]) == 0
    results = json.loads((out / "results.json").read_text())
    folder = out / "tracking"
    logs = sorted((folder / "jsonl" / "tiny-tracked").glob("*.jsonl"))
    assert len(logs) == 3  # two (strategy, seed) runs and the summary
    for label, result in results["strategies"].items():
        log = next(read_jsonl(p) for p in logs if read_jsonl(p)[0]["config"]["run"] == f"{label} / seed 0")
        assert log[0]["config"]["label"] == label and log[0]["config"]["experiment_config"]["name"] == "tiny-tracked"
        history = [numeric_metrics(r) for r in result["history"][0]]
        assert [e["metrics"] for e in log if e["event"] == "metrics"] == history
    summary = read_jsonl(folder / "jsonl" / "tiny-tracked" / "summary.jsonl")
    artifacts = {Path(e["path"]).name for e in summary if e["event"] == "artifact"}
    assert artifacts == {"results.json", "summary.md", "curves.png", "partition.png"}
    names = {"FedSampling (eps=3) / seed 0", "FedAvg / seed 0", "summary"}
    if INSTALLED["tensorboard"]:
        assert len(list((folder / "tensorboard" / "tiny-tracked").iterdir())) == 3
    if INSTALLED["mlflow"]:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow' / 'mlflow.db'}")
        runs = client.search_runs([client.get_experiment_by_name("tiny-tracked").experiment_id])
        assert {r.info.run_name for r in runs} == names and {r.info.status for r in runs} == {"FINISHED"}
    if INSTALLED["wandb"]:
        logs = folder.glob("wandb/offline-run-*/run-*.wandb")
        runs = [next(r.run for r in wandb_records(log) if r.WhichOneof("record_type") == "run") for log in logs]
        assert {run.display_name for run in runs} == names and {(run.run_group, run.project) for run in runs} == {("tiny-tracked",) * 2}


def test_the_tracking_table_of_an_experiment_file(config_file, tmp_path):
    config_file.write_text(CONFIG + '[tracking]\nbackends = ["jsonl"]\n')
    out = tmp_path / "out"
    assert main(["run", str(config_file), "--out", str(out), "--quiet"]) == 0
    assert len(list((out / "tracking" / "jsonl" / "tiny-tracked").glob("*.jsonl"))) == 3
    quiet = tmp_path / "quiet"
    assert main(["run", str(config_file), "--out", str(quiet), "--quiet", "--track", "none"]) == 0
    assert not (quiet / "tracking").exists()


def test_run_without_tracking_writes_no_tracking_folder(config_file, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(config_file), "--out", str(out), "--quiet"]) == 0
    assert not (out / "tracking").exists()


@pytest.mark.parametrize("args, table, message", [
    (["--track", "tensorbored"], "", "--track 'tensorbored': expected a comma list of jsonl, tensorboard, mlflow, wandb"),
    (["--track", "wandb"], "", "the wandb tracker needs the 'wandb' extra: pip install 'fedsample[wandb]'"),
    ([], '[tracking]\nbackends = ["neptune"]\n', "tracking.backends: unknown backend 'neptune'"),
    ([], '[tracking]\nbackends = ["wandb"]\n[tracking.wandb]\nmode = "loud"\n', "tracking.wandb.mode"),
])
def test_bad_tracking_is_one_line_exit_2_nothing_written(args, table, message, config_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else SPEC(name))
    config_file.write_text(CONFIG + table)
    out = tmp_path / "out"
    assert main(["run", str(config_file), "--out", str(out), "--quiet", *args]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and message in error
    assert not out.exists()


def test_diagnose_logs_its_tables_and_pictures(config_file, tmp_path):
    out = tmp_path / "diag"
    assert main(["diagnose", str(config_file), "--draws", "8", "--out", str(out), "--track", "jsonl"]) == 0
    log = read_jsonl(out / "tracking" / "jsonl" / "tiny-tracked" / "diagnose.jsonl")
    written = {"diagnostics.json", "summary.md", "exploitation.png", "estimator.png", "labels.png"}
    assert {Path(e["path"]).name for e in log if e["event"] == "artifact"} == written
    assert log[0]["config"]["draws"] == 8 and log[-1]["status"] == "finished"


def test_reproduce_tracks_its_presets_and_logs_its_tables(tmp_path, monkeypatch):
    from test_reproduce_command import fake_package

    from fedsample.reproduction import registry

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "PACKAGE", fake_package(tmp_path, f"fakepapers_tracked_{tmp_path.name}"))
    out = tmp_path / "out"
    assert main(["reproduce", "fake", "--out", str(out), "--quiet", "--seeds", "0", "--track", "jsonl"]) == 0
    folder = out / "tracking" / "jsonl"
    assert len(list((folder / "fake-digits").glob("*.jsonl"))) == 3  # Centralized, FedAvg (seed 0) and the summary
    log = read_jsonl(folder / "reproduce-fake-cpu" / "reproduction.jsonl")
    assert {Path(e["path"]).name for e in log if e["event"] == "artifact"} == {"REPRODUCTION.md", "reproduction.json"}
