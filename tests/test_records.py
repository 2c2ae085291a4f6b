"""The readers of a JSON document read back: each returns the value its field holds, unchanged, and refuses a
value of another type with one line naming the field."""

import json

import pytest

from fedsample.runtime.records import as_int, as_list, as_number, as_object, as_optional_number, as_text


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
