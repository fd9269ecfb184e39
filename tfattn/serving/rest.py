"""TensorFlow Serving's REST API for an export: request bodies, and the responses the server gives.

TensorFlow Serving's `POST /v1/models/NAME:predict` takes a JSON body in one of two forms:

- row form, `{"signature_name": ..., "instances": [{"text": "..."}, ...]}`: one object per sentence,
  every input batched. The response is `{"predictions": [...]}`, one object per sentence holding
  every output's row. `translate` and `translate_text` take this form.
- columnar form, `{"signature_name": ..., "inputs": {"text": [...], "beam_width": 4, ...}}`: one
  value per input, so an input may be a scalar. The response is `{"outputs": {...}}`, every output
  whole. `translate_beam`, whose `beam_width` and `length_penalty` are scalars, needs this form.

JSON numbers are read as the signature's dtype (so `4` serves an int32 `beam_width`); string
outputs are written as UTF-8 strings. `predict_locally` does the same with a loaded export in
Python, so that `docs/serving.md` shows responses produced from a real export
(`tests/serving/test_rest.py` checks them).

Example:

>>> rest_request(["5.3.19"])
{'signature_name': 'translate', 'instances': [{'text': '5.3.19'}]}
>>> rest_request(["5.3.19"], beam_width=4, length_penalty=0.6)["inputs"]
{'text': ['5.3.19'], 'beam_width': 4, 'length_penalty': 0.6}
"""

import json
import math
import numbers
from collections.abc import Iterable

import numpy as np
import tensorflow as tf

GREEDY_SIGNATURES = ("translate", "translate_text")


def rest_request(texts, beam_width=None, length_penalty=None, signature="translate"):
    """The JSON body (a dict) of a `:predict` request: greedy `translate` (or `translate_text`) in row
    form, or, with `beam_width` (and `length_penalty`, default 0.6), `translate_beam` in columnar form.

    Args:
        texts: iterable of str (a list, a tuple, a generator: read once, into a list). The sentences.
        beam_width: int >= 1 or None. `None` for greedy decoding.
        length_penalty: float or None. The GNMT alpha of `translate_beam`, a finite number.
        signature: str. The greedy signature, `"translate"` or `"translate_text"` (the text alone).
            Defaults to `"translate"`.
    """
    texts = _texts(texts)
    if signature not in GREEDY_SIGNATURES:
        raise ValueError(f"signature must be one of {GREEDY_SIGNATURES}. Received: signature={signature!r}")
    if beam_width is None:
        if length_penalty is not None:
            raise ValueError(f"length_penalty needs a beam_width. Received: length_penalty={length_penalty!r}")
        return {"signature_name": signature, "instances": [{"text": t} for t in texts]}
    if isinstance(beam_width, bool) or not isinstance(beam_width, numbers.Integral) or beam_width < 1:
        raise ValueError(f"beam_width must be an int >= 1. Received: beam_width={beam_width!r}")
    alpha = 0.6 if length_penalty is None else length_penalty
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha):
        raise ValueError(f"length_penalty must be a finite number. Received: length_penalty={length_penalty!r}")
    return {"signature_name": "translate_beam",
            "inputs": {"text": texts, "beam_width": int(beam_width), "length_penalty": float(alpha)}}


def _texts(texts):
    """`texts` as a list of str: any iterable of str but a str or bytes itself (a generator is read)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise ValueError(f"texts must be a list of str (or another iterable of str). Received: texts={texts!r}")
    listed = list(texts)
    wrong = [t for t in listed if not isinstance(t, str)]
    if wrong:
        raise ValueError(f"texts must be a list of str (or another iterable of str); one is a "
                         f"{type(wrong[0]).__name__}. Received: texts={listed!r}")
    return listed


def predict_locally(loaded, body):
    """The response TensorFlow Serving gives to `body` (a request dict) with the export `loaded`
    (`tf.saved_model.load`): the signature called with the inputs in its dtypes, the outputs as JSON.

    Raises:
        ValueError: `body` is not a request: no "instances" (row form) or "inputs" (columnar form),
            an input of the signature missing, or a signature the export does not have.
    """
    name = body.get("signature_name", "serving_default") if isinstance(body, dict) else None
    if name not in loaded.signatures:
        raise ValueError(f"body must be a request dict naming a signature of the export ({sorted(loaded.signatures)}"
                         f"), or none for serving_default. Received: body={body!r}")
    signature = loaded.signatures[name]
    specs = signature.structured_input_signature[1]  # name -> TensorSpec
    columns = _columns(body, specs)
    out = signature(**{name: tf.constant(columns[name], spec.dtype) for name, spec in specs.items()})
    return rest_response(out, row_form="instances" in body)


def _columns(body, specs):
    """The request's inputs by name, from its row form or its columnar form."""
    if ("instances" in body) == ("inputs" in body):
        raise ValueError(f"body must hold either \"instances\" (row form) or \"inputs\" (columnar form), as "
                         f"TensorFlow Serving's :predict takes. Received: body={body!r}")
    if "instances" in body:
        rows = body["instances"]
        missing = sorted({name for row in rows for name in specs if not isinstance(row, dict) or name not in row})
        columns = {name: [row[name] for row in rows] for name in specs} if not missing else {}
    else:
        columns = body["inputs"] if isinstance(body["inputs"], dict) else {}
        missing = sorted(name for name in specs if name not in columns)
    if missing:
        raise ValueError(f"body's {'instances' if 'instances' in body else 'inputs'} must give every input of "
                         f"the signature ({', '.join(specs)}); missing: {', '.join(missing)}. Received: body={body!r}")
    return columns


def rest_response(outputs, row_form):
    """Signature outputs (a dict of tensors) -> the response dict: row form `{"predictions": [one
    dict per sentence]}`, columnar form `{"outputs": {name: value}}`; strings as UTF-8 text.

    Raises:
        ValueError: `outputs` empty in row form (there is no batch to read), or its outputs' first
            axes differ.
    """
    values = {name: _json_value(np.asarray(v)) for name, v in sorted(outputs.items())}
    if not row_form:
        return {"outputs": values}
    sizes = {name: len(value) if isinstance(value, list) else None for name, value in values.items()}
    if not sizes or len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError(f"outputs must hold at least one output, each with the same first (batch) axis, for the "
                         f"row form. Received: outputs with first axes {sizes}")
    batch = next(iter(sizes.values()))
    return {"predictions": [{name: value[i] for name, value in values.items()} for i in range(batch)]}


def _json_value(array):
    if array.dtype.kind in "OSU":
        return np.vectorize(lambda s: s.decode("utf-8") if isinstance(s, bytes) else s, otypes=[object])(
            array).tolist() if array.size else array.tolist()
    return array.tolist()


def json_text(value, digits=None):
    """`value` as indented JSON text, each list of numbers or strings on one line; floats rounded to
    `digits` decimals if given (for a page; the server writes them whole)."""
    if isinstance(value, dict):
        items = [f"{json.dumps(k)}: {json_text(v, digits)}" for k, v in value.items()]
        one_line = "{" + ", ".join(items) + "}"
        if len(one_line) <= 80 and "\n" not in one_line:
            return one_line
        return "{\n" + ",\n".join(_indent(i) for i in items) + "\n}"
    if isinstance(value, list):
        if all(not isinstance(v, (list, dict)) for v in value):
            return "[" + ", ".join(json_text(v, digits) for v in value) + "]"
        return "[\n" + ",\n".join(_indent(json_text(v, digits)) for v in value) + "\n]"
    if isinstance(value, float) and digits is not None:
        return json.dumps(round(value, digits))
    return json.dumps(value, ensure_ascii=False)


def _indent(text):
    return "\n".join("  " + line for line in text.splitlines())
