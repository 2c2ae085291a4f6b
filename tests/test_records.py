"""The readers of a JSON document read back: each returns the value its field holds, unchanged, and refuses a
value of another type with one line naming the field; the round record's own keys (ROUND_KEYS) are every key a
recipe's round writes but its summed statistics."""

import json

import pytest

from fedsample.runtime.records import ROUND_KEYS, as_int, as_list, as_number, as_object, as_optional_number, as_text, is_round_key
from fedsample.runtime.records import as_entries, as_table, count_in, entries_in, table_in


def test_a_well_formed_document_reads_back_unchanged():
    document = json.loads('{"n": 3, "mean": 0.25, "sd": null, "ci": [1, 2.5], "test": "paired", "how": {"better": "released"}}')
    assert as_int(document["n"], "n") == 3
    n = as_number(document["n"], "n")
    assert type(n) is int and f"{n}" == "3"  # an integer stays one: it prints as it was written
    assert as_number(document["mean"], "mean") == 0.25
    assert as_optional_number(document["sd"], "sd") is None
    assert as_optional_number(document["mean"], "mean") == 0.25
    assert as_list(document["ci"], "ci") == [1, 2.5]
    assert as_text(document["test"], "test") == "paired"
    assert as_object(document["how"], "how") == {"better": "released"}


@pytest.mark.parametrize("read, value, kind", [
    (as_number, "0.5", "a number"), (as_number, True, "a number"), (as_number, None, "a number"),
    (as_optional_number, [1], "a number"), (as_int, 2.0, "an integer"), (as_int, False, "an integer"),
    (as_text, 3, "a string"), (as_list, {"a": 1}, "an array"), (as_object, [1, 2], "an object"),
])
def test_a_malformed_field_is_one_line_naming_it(read, value, kind):
    with pytest.raises(ValueError) as error:
        read(value, "wall_s")
    message = str(error.value)
    assert message.startswith(f"wall_s: expected {kind}, the document holds {type(value).__name__}") and "\n" not in message


def test_finite_or_none_writes_strict_json_and_refuses_what_json_cannot_hold():
    from fedsample.experiments.runner import finite_or_none

    value = {"a": float("nan"), "b": (1, float("inf"), "x"), 3: [None, True, 0.5]}
    assert finite_or_none(value) == {"a": None, "b": [1, None, "x"], "3": [None, True, 0.5]}
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        json.dumps({"a": {1}})
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        finite_or_none({"a": {1}})


def test_every_key_a_recipes_round_writes_is_a_declared_record_key_or_a_summed_statistic(one_torch_thread):
    """Each recipe of the fingerprint test (every sampler, aggregator and privacy setting of the library), 2 rounds
    on the loop engine: a key of its records that is not in ROUND_KEYS is one of the summed statistics its data
    sampler declares (FedSampling's drawn count, "samples"), and none of those is a record key, so the registry
    the summed statistics are checked against holds every figure they could overwrite."""
    import fedsample as fs
    from fedsample.simulation import Engine
    from helpers import blobs, federate
    from test_fingerprint_recipes import OPTIONS, RUNS, SIZES

    fed = federate(blobs(n=240, d=6, classes=3, seed=0), SIZES)
    seen: set[str] = set()
    for name, recipe in RUNS.items():
        strategy = recipe()
        summed = {statistic.name for statistic in strategy.data.capabilities.summed}
        history = fs.simulate(strategy, federated_data=fed, model=fs.models.LogisticRegression(), rounds=2, seed=3,
                              engine=Engine(backend="loop"), **OPTIONS.get(name, {})).history
        keys = {key for record in history for key in record}
        assert {key for key in keys if not is_round_key(key)} <= summed, name
        assert not any(is_round_key(key) for key in summed), name
        seen |= keys
    assert "samples" in seen and len(seen & ROUND_KEYS) >= 50  # FedSampling's drawn count logged; most keys written


def test_a_round_records_readers_give_its_figures_and_refuse_a_wrong_one_naming_the_key():
    """A counter not started is 0; a list or table not started is started empty in the record, and what the caller
    adds lands there; a figure of another kind (a string counter, a table for a list, SecAgg+'s table by client id
    where one by name belongs) is one line naming the key."""
    record = {"sampler_probes": 3, "dropped_by_client": {4: "timed out"}, "failed": "none", "round": True}
    assert count_in(record, "sampler_probes") == 3 and count_in(record, "sampler_lost_probes") == 0
    entries_in(record, "updates_failed").append({"client": 2})
    table_in(record, "clamped")["ratio"] = 1.5
    assert record["updates_failed"] == [{"client": 2}] and record["clamped"] == {"ratio": 1.5}
    assert table_in(record, "clamped") is record["clamped"] and as_table(record["clamped"], "clamped") == {"ratio": 1.5}
    assert as_entries([1, "a"], "failed") == [1, "a"]
    for call, match in [(lambda: count_in(record, "round"), "round: expected an integer"),
                        (lambda: entries_in(record, "failed"), "failed: expected a list"),
                        (lambda: as_entries("none", "failed"), "failed: expected a list"),
                        (lambda: table_in(record, "dropped_by_client"), "dropped_by_client: expected a table of figures by name"),
                        (lambda: as_table([("ratio", 1.5)], "clamped"), "clamped: expected a table of figures by name")]:
        with pytest.raises(ValueError, match=f"^{match}"):
            call()
