"""`translate_beam`'s n-best list: each hypothesis with its own tokens (`nbest_tokens`) and attention
(`nbest_attention`), the attention the model gives when it is teacher-forced on those tokens."""

import numpy as np
import tensorflow as tf

from tfattn.data.text import START_ID
from tfattn.serving.translator import load

TEXTS = ["5.3.19", "", "tue 5 march 2019"]


def test_each_hypothesis_has_the_attention_of_its_own_tokens(dates_translator):
    out = dates_translator.beam(TEXTS, beam_width=3)
    vocabulary = dates_translator.target_tokenizer.vocabulary
    source = dates_translator.source_tokenizer(tf.constant(TEXTS))  # (batch, t_in) ids
    different = 0
    for i in (0, 2):
        for k in range(3):
            tokens = [t.decode() for t in out["nbest_tokens"][i, k] if t]
            assert "".join(tokens).removesuffix("[END]") == out["nbest_text"][i, k].decode()  # characters
            # The oracle: the model teacher-forced on [START] and the hypothesis' tokens (the decoder's
            # stepped and teacher-forced calls are one code path), row t the attention of token t.
            target_in = [[START_ID] + [vocabulary.index(t) for t in tokens[:-1]]]
            _, attention = dates_translator.model((source[i:i + 1], tf.constant(target_in)))
            t_in = attention.shape[-1]
            np.testing.assert_allclose(out["nbest_attention"][i, k, :len(tokens), :t_in], attention[0], atol=1e-5)
            assert not out["nbest_attention"][i, k, len(tokens):].any()  # no rows after [END]
            different += k > 0 and not np.allclose(out["nbest_attention"][i, k], out["nbest_attention"][i, 0])
    assert different >= 2  # hypotheses that differ, so a beam that gave the best's attention to all would fail
    assert not out["nbest_tokens"][1].any() and not out["nbest_attention"][1].any()  # an empty text: nothing


def test_the_best_hypothesis_is_the_first_in_the_export_too(exported_dates):
    beam = load(exported_dates).signatures["translate_beam"]
    out = {key: value.numpy() for key, value in beam(text=tf.constant(TEXTS), beam_width=tf.constant(3),
                                                     length_penalty=tf.constant(0.6)).items()}
    assert out["nbest_tokens"].shape == (3, 3, out["tokens"].shape[1])
    assert out["nbest_attention"].shape == (3, 3, *out["attention"].shape[1:])
    np.testing.assert_array_equal(out["nbest_tokens"][:, 0], out["tokens"])
    np.testing.assert_array_equal(out["nbest_attention"][:, 0], out["attention"])
