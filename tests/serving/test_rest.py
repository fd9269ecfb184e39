"""docs/serving.md's REST requests and responses are what `tfattn.serving.rest` builds and what a
real export answers, converted as TensorFlow Serving's REST API converts tensors."""

import json
import os
import re

import numpy as np
import pytest

from conftest import shared_export
from tfattn.serving import rest

PAGE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "serving.md")
DIGITS = 2  # the page rounds floats to this many decimals


def page_blocks():
    """`<!-- rest: NAME -->` followed by a ```json block on the page -> {NAME: parsed JSON}."""
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"<!-- rest: ([\w-]+) -->\s*```json\n(.*?)```", text, flags=re.S)
    return {name: json.loads(block) for name, block in found}


def examples(loaded):
    """The page's examples, produced: {NAME: JSON}."""
    greedy = rest.rest_request(["5.3.19", "1 may 2020"])
    beam = rest.rest_request(["5.3.19"], beam_width=2, length_penalty=0.6)
    text = rest.rest_request(["5.3.19", "1 may 2020"], signature="translate_text")
    return {"translate-request": greedy, "translate-response": rest.predict_locally(loaded, greedy),
            "text-request": text, "text-response": rest.predict_locally(loaded, text),
            "beam-request": beam, "beam-response": rest.predict_locally(loaded, beam)}


# What a trained model answers depends on the CPU kind the test runs on (its float rounding steers
# training), so a response's translations, scores and attention are compared by form (keys, lengths,
# JSON types; a translation's length too depends on it); its `input_tokens`, which only the tokenizer
# makes, and the requests are compared whole.
EXACT = ("input_tokens",)


def assert_same_json(shown, produced, where, values=True):
    """Equal JSON: the same keys, lists and strings, floats within the page's rounding; with `values`
    False, the same keys, lengths and JSON types only (but for the keys in `EXACT`)."""
    if isinstance(produced, dict):
        assert isinstance(shown, dict) and list(shown) == list(produced), f"{where}: keys"
        for key in produced:
            assert_same_json(shown[key], produced[key], f"{where}.{key}", values or key in EXACT)
    elif isinstance(produced, list):
        assert isinstance(shown, list) and (not values or len(shown) == len(produced)), f"{where}: length"
        for i, (a, b) in enumerate(zip(shown, produced)):
            assert_same_json(a, b, f"{where}[{i}]", values)
    elif isinstance(produced, float):
        assert isinstance(shown, float) and (not values or abs(shown - produced) <= 0.6 * 10**-DIGITS), \
            f"{where}: {shown} against {produced}"
    else:
        assert type(shown) is type(produced) and (not values or shown == produced), \
            f"{where}: {shown!r} against {produced!r}"


@pytest.fixture(scope="module")
def versioned(exported_dates):
    """The session's dates export (its translator trained for two epochs from seed 0, the same weights
    in every session), as the page's MODEL_BASE/NAME/VERSION folder holds it: the folder is only where
    a server looks, what it answers is the export's."""
    return shared_export(exported_dates)


def test_the_page_shows_what_the_export_answers(versioned):
    shown, produced = page_blocks(), examples(versioned)
    try:
        assert set(shown) == set(produced), sorted(shown)
        for name, value in produced.items():
            assert_same_json(shown[name], value, name, values=name.endswith("request"))
    except AssertionError:
        for name, value in produced.items():  # what the page should show, to paste
            print(f"<!-- rest: {name} -->\n```json\n{rest.json_text(value, DIGITS)}\n```\n")
        raise


def test_row_form_is_one_object_per_sentence_and_columnar_form_is_whole_outputs(versioned):
    rows = rest.predict_locally(versioned, rest.rest_request(["5.3.19", "tue 5 march 2019"]))["predictions"]
    whole = versioned.signatures["translate"](text=np.array(["5.3.19", "tue 5 march 2019"], dtype=object))
    assert [r["text"] for r in rows] == [t.decode() for t in whole["text"].numpy()]
    assert [len(r["attention"]) for r in rows] == [whole["attention"].shape[1]] * 2
    columns = rest.predict_locally(versioned, {"signature_name": "translate",
                                               "inputs": {"text": ["5.3.19", "tue 5 march 2019"]}})["outputs"]
    assert columns["text"] == [r["text"] for r in rows] and columns["length"] == [r["length"] for r in rows]


def test_json_numbers_serve_the_typed_scalars(versioned):
    """`beam_width` written as 4 (a JSON number) serves the int32 input, as the server converts it."""
    body = rest.rest_request(["5.3.19"], beam_width=4, length_penalty=1)
    assert json.loads(json.dumps(body))["inputs"]["length_penalty"] == 1.0
    out = rest.predict_locally(versioned, body)["outputs"]
    assert np.shape(out["nbest_text"]) == (1, 4)


@pytest.mark.parametrize("args,message", [
    (("5.3.19",), "list of str"), (([b"5.3.19"],), "list of str"), ((["x"], None, 0.6), "needs a beam_width"),
    ((["x"], None, None, "translate_beam"), "signature must be one of")])
def test_bad_requests_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        rest.rest_request(*args)


def test_a_generator_of_texts_is_read_into_the_request():
    assert rest.rest_request(t for t in ["5.3.19", "1 may 2020"]) == rest.rest_request(["5.3.19", "1 may 2020"])
    beam = rest.rest_request((t for t in ["5.3.19"]), beam_width=2)
    assert beam["inputs"]["text"] == ["5.3.19"]
    with pytest.raises(ValueError, match=r"texts must be a list of str \(or another iterable of str\); one is a int"):
        rest.rest_request(iter(["a", 3]))


@pytest.mark.parametrize("beam_width", [4.7, 4.0, float("nan"), float("inf"), 0, -2, True, [4], np.array([4]), "4"])
def test_beam_width_must_be_an_int_of_at_least_one(beam_width):
    with pytest.raises(ValueError, match=r"^beam_width must be an int >= 1\. Received: beam_width="):
        rest.rest_request(["x"], beam_width=beam_width)


@pytest.mark.parametrize("length_penalty", [float("nan"), float("inf"), -float("inf"), "0.6", [0.6], True])
def test_length_penalty_must_be_a_finite_number(length_penalty):
    with pytest.raises(ValueError, match=r"^length_penalty must be a finite number\. Received: length_penalty="):
        rest.rest_request(["x"], beam_width=2, length_penalty=length_penalty)


def test_numpy_scalars_are_written_as_json_numbers():
    body = rest.rest_request(["x"], beam_width=np.int64(3), length_penalty=np.float32(0.5))
    assert json.dumps(body["inputs"], allow_nan=False) == '{"text": ["x"], "beam_width": 3, "length_penalty": 0.5}'


def test_a_row_form_response_needs_outputs_with_one_batch():
    with pytest.raises(ValueError, match=r"outputs must hold at least one output.*Received: outputs with first "
                                         r"axes \{\}"):
        rest.rest_response({}, row_form=True)
    with pytest.raises(ValueError, match=r"Received: outputs with first axes \{'a': 2, 'b': 3\}"):
        rest.rest_response({"a": np.zeros(2), "b": np.zeros(3)}, row_form=True)
    assert rest.rest_response({}, row_form=False) == {"outputs": {}}


@pytest.mark.parametrize("body, message", [
    ({}, r"body must hold either \"instances\" \(row form\) or \"inputs\" \(columnar form\)"),
    ({"instances": [{"text": "x"}], "inputs": {"text": ["x"]}}, r"body must hold either \"instances\""),
    ({"instances": [{"txt": "x"}]}, r"body's instances must give every input of the signature \(text\); "
                                    r"missing: text"),
    ({"signature_name": "translate_beam", "inputs": {"text": ["x"]}},
     r"body's inputs must give every input of the signature \(.*\); missing: beam_width, length_penalty"),
    ({"signature_name": "nope", "inputs": {"text": ["x"]}}, r"body must be a request dict naming a signature"),
    ("not a dict", r"body must be a request dict"),
])
def test_a_body_that_is_not_a_request_is_named(versioned, body, message):
    with pytest.raises(ValueError, match=message):
        rest.predict_locally(versioned, body)
