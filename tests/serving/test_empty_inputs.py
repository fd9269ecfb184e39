"""An empty or whitespace-only text gets an empty translation, not one the decoder invents from
[START] [END] alone: every model kind, greedy and beam, in Python and in the exported graph.

The models are untrained (random weights): with nothing to translate, any model emits tokens."""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.serving.translator import export, load

BLANK = ["", "   ", "\t \u00a0 "]
KINDS = [("luong", "word", False), ("bahdanau", "word", False), ("luong", "char", True), ("bahdanau", "char", True)]


def translator(attention, level, accel):
    texts = ["tue 5 march 2019", "5 march", "march 2019 5"]
    source = tfattn.Tokenizer.adapt(texts, level=level, max_length=20)
    target = tfattn.Tokenizer.adapt(["2019-03-05"], level=level, max_length=12)
    model = tfattn.make_model(tfattn.ModelConfig(attention=attention, embedding_dim=8, units=8),
                              source.vocab_size, target.vocab_size)
    return tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=12), accel=accel)


def check_blank(out, rows, mixed):
    for i in rows:
        assert out["text"][i] == b"", out["text"]
        assert out["length"][i] == 0
        assert not np.any(out["tokens"][i] != b"")
        assert not np.any(out["attention"][i])
        if "score" in out:
            assert out["score"][i] == 0.0 and not np.any(out["nbest_text"][i] != b"")
    if not mixed:  # nothing but blanks: no attention rows at all
        assert out["tokens"].shape[1] == 0 and out["attention"].shape[1] == 0


@pytest.mark.parametrize("attention,level,accel", KINDS)
def test_python_calls(attention, level, accel):
    t = translator(attention, level, accel)
    check_blank(t(BLANK), range(3), mixed=False)
    check_blank(t.beam(BLANK, beam_width=3), range(3), mixed=False)
    mixed = t(["", "tue 5 march 2019", "  "])
    check_blank(mixed, [0, 2], mixed=True)
    assert mixed["length"][1] > 0  # a real sentence is still translated
    check_blank(t.beam(["", "tue 5 march 2019", "  "], beam_width=2), [0, 2], mixed=True)


@pytest.mark.parametrize("attention,level,accel", KINDS[:2])
def test_exported_signatures(attention, level, accel, tmp_path):
    loaded = load(export(translator(attention, level, accel), str(tmp_path / "export")))
    for name in ("translate", "serving_default"):
        out = loaded.signatures[name](text=tf.constant(BLANK))
        check_blank({k: v.numpy() for k, v in out.items()}, range(3), mixed=False)
    out = loaded.signatures["translate_beam"](text=tf.constant(["", "tue 5 march 2019"]),
                                              beam_width=tf.constant(3), length_penalty=tf.constant(0.6))
    check_blank({k: v.numpy() for k, v in out.items()}, [0], mixed=True)
