"""Greedy decoding: what it returns, when it stops, and that padding does not change it."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.decoding.loop import length_limits
from tfattn.search import DecodeConfig, greedy
from tfattn.accel import decoding as fast_decoding
from tfattn.accel.seq2seq import Stepping
from tfattn.data.text import END_ID, PAD_ID, START_ID
from tfattn.decoding.strategies import BeamSearch, Greedy

def make_greedy_fn(model, config=None):
    """`greedy` as a `tf.function` over `source (batch, t_in)` that never retraces for new shapes."""
    return tf.function(lambda source: greedy(model, source, config),
                       input_signature=[tf.TensorSpec([None, None], tf.int32, name="source")])



def source_ids(translator, texts):
    return translator.source_tokenizer(tf.constant(texts))


def reference_greedy(model, source, limit):
    """Step-by-step argmax in plain Python for one sentence, for comparison: padding and [START] are
    never chosen, [END] ends the sentence, and the `limit`-th token is [END] whatever the scores."""
    memory, state = model.encode(source)
    token, out = tf.constant([START_ID]), []
    for step in range(limit):
        logits, _, state = model.decoder.step(token, state, memory)
        scores = logits[0].numpy()
        scores[[PAD_ID, START_ID]] = -np.inf
        token = tf.constant([END_ID if step == limit - 1 else int(np.argmax(scores))])
        out.append(int(token[0]))
        if out[-1] == END_ID:
            break
    return out


def test_greedy_matches_a_python_reference(dates_translator, dates_data):
    config = DecodeConfig(max_length=14)
    for source, _ in dates_data[1][:8]:
        ids = source_ids(dates_translator, [source])
        got = greedy(dates_translator.model, ids, config)
        limit = int(length_limits(ids, config)[0])
        expected = reference_greedy(dates_translator.model, ids, limit)
        # The whole output: the same length (greedy stops neither early nor late), the same tokens,
        # and only padding after them.
        assert int(got["length"][0]) == len(expected)
        row = got["ids"][0].numpy().tolist()
        assert row == expected + [PAD_ID] * (len(row) - len(expected))


def test_outputs_shapes_padding_and_attention_rows(dates_translator, dates_data):
    texts = [s for s, _ in dates_data[1][:16]]
    ids = source_ids(dates_translator, texts)
    out = make_greedy_fn(dates_translator.model, DecodeConfig(max_length=14))(ids)
    tokens, attention, length = out["ids"].numpy(), out["attention"].numpy(), out["length"].numpy()
    assert tokens.shape[0] == 16 and attention.shape == (16, tokens.shape[1], ids.shape[1])
    for row, att, n in zip(tokens, attention, length):
        assert (row[n:] == 0).all() and (row[:n] != 0).all()  # padding only after the end
        assert row[n - 1] == END_ID  # the last token is [END]: the limit forces it
        np.testing.assert_allclose(att[:n].sum(-1), 1.0, atol=1e-5)
        assert (att[n:] == 0).all()
    assert tokens.shape[1] == length.max()  # the loop stops as soon as every sentence has ended


def test_length_limit_ends_a_model_that_never_stops(dates_translator):
    ids = source_ids(dates_translator, ["5 march 2019", "tuesday, march 5, 2019"])
    out = greedy(dates_translator.model, ids, DecodeConfig(max_length=14, ratio=0.0, extra=3))
    assert out["length"].numpy().tolist() == [3, 3]  # two tokens, then the forced [END]
    assert (out["ids"].numpy()[:, 2] == END_ID).all()


def test_length_limits_grow_with_the_source():
    source = tf.constant([[2, 5, 3, 0, 0], [2, 5, 5, 5, 3]])  # 3 and 5 real tokens
    limits = length_limits(source, DecodeConfig(max_length=12, ratio=1.5, extra=2))
    assert limits.numpy().tolist() == [6, 9]  # int(1.5 * 3) + 2, int(1.5 * 5) + 2, both under 12


def test_greedy_fn_does_not_retrace(dates_translator):
    fn = make_greedy_fn(dates_translator.model)
    for texts in (["5 march 2019"], ["1.2.03", "tuesday, march 5, 2019", "2019 march 05"]):
        fn(source_ids(dates_translator, texts))
    assert fn.experimental_get_tracing_count() == 1


def test_empty_batch(dates_translator):
    out = greedy(dates_translator.model, tf.zeros([0, 2], tf.int32))
    assert out["ids"].shape == (0, 0) and out["attention"].shape == (0, 0, 2) and out["length"].shape == (0,)


@pytest.mark.parametrize("fixture", ["dates_translator", "bahdanau_translator"])
def test_padding_does_not_change_the_translation(fixture, dates_data, request):
    """Each sentence alone and inside a batch of longer sentences gives the same tokens."""
    translator = request.getfixturevalue(fixture)
    fn = make_greedy_fn(translator.model, DecodeConfig(max_length=14))
    short = [s for s, _ in dates_data[1] if len(s) <= 10][:20]
    assert short  # else the loop below checks nothing
    long = "wednesday, september 27, 2045"  # 29 characters: every short sentence gets padded
    for text in short:
        alone = fn(source_ids(translator, [text]))
        batched = fn(source_ids(translator, [long, text, long]))
        n = int(alone["length"][0])
        assert int(batched["length"][1]) == n
        assert batched["ids"][1, :n].numpy().tolist() == alone["ids"][0, :n].numpy().tolist()
        t_in = alone["attention"].shape[2]
        np.testing.assert_allclose(batched["attention"][1, :n, :t_in], alone["attention"][0, :n], atol=1e-5)
        assert (batched["attention"][1, :n, t_in:].numpy() == 0).all()


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.parametrize("attention", ["bahdanau", "luong"])
def test_an_empty_batch_decodes_to_empty_outputs_for_every_model_kind(rnn, attention):
    from tfattn.accel import seq2seq as fast
    from tfattn.search import beam_search
    from tfattn.model import ModelConfig, ensure_built, make_model

    model = ensure_built(make_model(ModelConfig(attention=attention, rnn=rnn, units=8, embedding_dim=4), 10, 12))
    source, target_in = np.zeros((0, 3), np.int32), np.zeros((0, 2), np.int32)
    logits, _ = fast.forward(model, source, target_in)
    assert logits.shape == (0, 2, 12)
    assert greedy(model, source)["ids"].shape == (0, 0)
    assert beam_search(model, source, beam_width=2)["ids"].shape == (0, 2, 0)
    # The reference tier too, but only with a GRU: Keras's own LSTM layer fails on a batch of 0 rows
    # (its cell's bias add raises "Biases must be 1D"), which the fast tier's written-out LSTM avoids.
    if rnn == "gru":
        logits, _ = model((source, target_in))
        assert logits.shape == (0, 2, 12)
        assert greedy(model, source, accel=False)["ids"].shape == (0, 0)
        assert beam_search(model, source, beam_width=2, accel=False)["ids"].shape == (0, 2, 0)


class CountdownModel:
    """Sentence `b` emits its tag `source[b, 1]` until its step `source[b, 2] - 1`, which is `[END]`;
    its attention is one-hot on position `t % t_in`. Records the rows of every step."""

    vocab = vocab_size = 16

    def __init__(self):
        self.rows_seen = []
        self.rows_encoded = []
        self.decoder = self

    def encode(self, source):
        self.rows_encoded.append(int(tf.shape(source)[0]))
        return {"tag": source[:, 1], "end_step": source[:, 2] - 1}, {"t": tf.zeros_like(source[:, 0])}

    def step(self, token, state, memory):
        self.rows_seen.append(int(tf.shape(token)[0]))
        t = state["t"]  # (rows,)
        out = tf.where(t == memory["end_step"], END_ID, memory["tag"])
        return tf.one_hot(out, self.vocab) * 10.0, tf.one_hot(t % 4, 4), {"t": t + 1}


def test_finished_sentences_leave_the_batch_and_outputs_keep_their_places():
    # Eight sentences that end after 1, 1, 2, 3, 5, 5, 5 and 6 tokens, with tags 4..11.
    lengths = [1, 1, 2, 3, 5, 5, 5, 6]
    source = tf.constant([[START_ID, 4 + b, n, END_ID] for b, n in enumerate(lengths)])
    model = CountdownModel()
    out = greedy(model, source, DecodeConfig(max_length=20, ratio=4.0, extra=10))
    # After step 0, 2 of 8 are done (a quarter): 6 rows go on. After step 2, 2 of 6: 4 rows. After
    # step 4, 3 of 4: 1 row, which ends at step 5. Step 1 has 1 of 6 done: not worth a gather yet.
    assert model.rows_seen == [8, 6, 6, 4, 4, 1]
    assert out["length"].numpy().tolist() == lengths
    ids, attention = out["ids"].numpy(), out["attention"].numpy()
    assert ids.shape == (8, 6) and attention.shape == (8, 6, 4)
    for b, n in enumerate(lengths):
        assert ids[b].tolist() == [4 + b] * (n - 1) + [END_ID] + [0] * (6 - n)
        np.testing.assert_array_equal(attention[b, :n], np.eye(4)[np.arange(n) % 4])
        assert (attention[b, n:] == 0).all()


def countdown_source(lengths):
    return tf.constant([[START_ID, 4 + b % 12, n, END_ID] for b, n in enumerate(lengths)])


@pytest.mark.parametrize("batch, slices, encoded", [(40, 2, [20, 20]), (31, 2, [31]), (50, 3, [16, 17, 17]),
                                                     (47, 3, [47]), (40, 1, [40])])
def test_large_batches_decode_in_row_slices_with_outputs_in_their_places(batch, slices, encoded):
    # Sentence b ends after 1 + b % 7 tokens: the slices' loops run different numbers of steps.
    lengths = [1 + b % 7 for b in range(batch)]
    model = CountdownModel()
    config = DecodeConfig(max_length=20, ratio=4.0, extra=10)
    out = fast_decoding.decode(model, countdown_source(lengths), Greedy(), config, slices=slices)
    assert model.rows_encoded == encoded  # `slices` slices when each gets 16 rows or more, else one
    ids, attention = out["ids"].numpy(), out["attention"].numpy()
    assert ids.shape == (batch, 7) and attention.shape == (batch, 7, 4)
    assert out["length"].numpy().tolist() == lengths
    for b, n in enumerate(lengths):
        assert ids[b].tolist() == [4 + b % 12] * (n - 1) + [END_ID] + [0] * (7 - n)
        np.testing.assert_array_equal(attention[b, :n], np.eye(4)[np.arange(n) % 4])
        assert (attention[b, n:] == 0).all()


def test_beam_search_in_row_slices_equals_one_loop(bahdanau_translator, dates_data):
    texts = [s for s, _ in dates_data[1][:40]]
    source = source_ids(bahdanau_translator, texts)
    model, strategy = Stepping(bahdanau_translator.model), BeamSearch(beam_width=3)
    outs = [fast_decoding.decode(model, source, strategy, DecodeConfig(max_length=14), slices=k) for k in (1, 2)]
    assert outs[0]["ids"].shape[:2] == (40, 3)
    for key in ("ids", "length"):
        np.testing.assert_array_equal(outs[1][key], outs[0][key], err_msg=key)
    for key in ("scores", "attention"):
        np.testing.assert_allclose(outs[1][key], outs[0][key], atol=1e-5, err_msg=key)


def test_greedy_in_row_slices_equals_one_loop(dates_translator, dates_data):
    texts = [s for s, _ in dates_data[1][:50]]
    source = source_ids(dates_translator, texts)
    model, config = Stepping(dates_translator.model), DecodeConfig(max_length=14)
    outs = [fast_decoding.decode(model, source, Greedy(), config, slices=k) for k in (1, 3)]
    for key in ("ids", "length"):
        np.testing.assert_array_equal(outs[1][key], outs[0][key], err_msg=key)
    np.testing.assert_allclose(outs[1]["attention"], outs[0]["attention"], atol=1e-5)


@pytest.mark.parametrize("end_after, extra, expected_length", [(3, 10, 3), (9, 0, 6)])
def test_one_sentence_takes_its_own_loop_and_stops_at_end_or_its_limit(end_after, extra, expected_length):
    # One sentence of 3 source tokens: limit = 2 * 3 + extra. It ends after `end_after` tokens, or at
    # its limit of 6 tokens (extra 0), whose last one is then [END].
    model = CountdownModel()
    out = greedy(model, tf.constant([[START_ID, 7, end_after]]), DecodeConfig(max_length=20, ratio=2.0, extra=extra))
    assert out["length"].numpy().tolist() == [expected_length]
    assert out["ids"].numpy().tolist() == [[7] * (expected_length - 1) + [END_ID]]
    np.testing.assert_array_equal(out["attention"].numpy()[0], np.eye(4)[np.arange(expected_length) % 4])
    assert model.rows_seen == [1] * expected_length  # one row a step, no step after [END]


def test_one_sentence_loop_gives_the_batch_loops_outputs(bahdanau_translator, dates_data):
    """`greedy` decodes a batch of one by the plain loop; the batch loop (finished sentences leave the
    batch) agrees with it."""
    config = DecodeConfig(max_length=14)
    one = make_greedy_fn(bahdanau_translator.model, config)
    model = Stepping(bahdanau_translator.model)
    batch_loop = tf.function(lambda source: fast_decoding.compacted_decode(model, source, Greedy(), config),
                             input_signature=[tf.TensorSpec([None, None], tf.int32)])  # traced once, as `one`
    for text, _ in dates_data[1][:12]:
        source = source_ids(bahdanau_translator, [text])
        got, expected = one(source), batch_loop(source)
        for key in ("ids", "length"):
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
        np.testing.assert_allclose(got["attention"], expected["attention"], atol=1e-6)