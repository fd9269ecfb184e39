"""Alignments from attention: Pharaoh pairs, and `[UNK]` replaced by the source token attended to most."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tfattn.serving.alignments import (alignment_pairs, attended_source_tokens, pharaoh, real_lengths,
                                       replace_unknown, sentence_alignment)

from conftest import assert_same_outputs, run_main

# One sentence: [START] a b c [END] "" (t_in = 6); output x y [END] "" (t_out = 4).
ATTENTION = [
    [0.1, 0.1, 0.7, 0.1, 0.0, 0.0],  # x -> b (source 1)
    [0.0, 0.4, 0.1, 0.4, 0.1, 0.0],  # y -> a and c tie: the lower, a (source 0)
    [0.0, 0.1, 0.1, 0.2, 0.6, 0.0],  # [END]: not an output token
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # padding row after [END]
]
INPUT_TOKENS = [b"[START]", b"a", b"b", b"c", b"[END]", b""]
TOKENS = [b"x", b"y", b"[END]", b""]


@pytest.mark.parametrize("attention, source_length, target_length, expected", [
    (ATTENTION, 3, 2, [(1, 0), (0, 1)]),
    # The markers' and padding columns never align, however large their weight.
    ([[0.5, 0.1, 0.2, 0.2], [0.0, 0.3, 0.2, 0.5]], 2, 2, [(1, 0), (0, 1)]),
    ([[0.1, 0.2, 0.3, 0.3, 0.1]], 2, 1, [(1, 0)]),  # [END] at column 3 beats both: ignored
    ([[0.2, 0.2, 0.2, 0.2, 0.2]], 3, 1, [(0, 0)]),  # a three-way tie: the lowest
    ([[0.0, 0.0, 0.0, 0.0]], 2, 1, [(0, 0)]),  # an all-zero row inside the output: every source ties
    ([[0.0, 0.9, 0.1], [0.0, 0.0, 0.0]], 1, 1, [(0, 0)]),  # the all-zero row after [END] is not counted
    (ATTENTION, 3, 0, []),  # no output token
    ([[0.5, 0.5]], 0, 1, []),  # no source token: nothing to align to
])
def test_alignment_pairs_of_hand_made_attention(attention, source_length, target_length, expected):
    assert alignment_pairs(np.array(attention, np.float32), source_length, target_length) == expected


@pytest.mark.parametrize("args, message", [
    ((np.zeros([2, 2, 6]), 3, 2), r"attention must be \(t_out, t_in\).*Received: shape \(2, 2, 6\)"),
    ((np.zeros([4, 6]), 5, 2), r"source_length must be in \[0, t_in - 2\].*t_in = 6. Received: source_length=5"),
    ((np.zeros([4, 6]), 3, 5), r"target_length must be in \[0, t_out\], t_out = 4. Received: target_length=5"),
])
def test_alignment_pairs_names_what_does_not_fit(args, message):
    with pytest.raises(ValueError, match=message):
        alignment_pairs(*args)


def test_the_pharaoh_string_is_source_dash_target_in_target_order():
    assert pharaoh([(1, 0), (0, 1), (2, 2)]) == "1-0 0-1 2-2"
    assert pharaoh([]) == ""
    assert sentence_alignment(np.array(ATTENTION), INPUT_TOKENS, TOKENS) == "1-0 0-1"


@pytest.mark.parametrize("input_tokens, tokens, expected", [
    (INPUT_TOKENS, TOKENS, (3, 2)),
    (INPUT_TOKENS, [b"x", b"y", b"z", b"w"], (3, 4)),  # stopped by the length limit: no [END]
    (["[START]", "[END]", ""], ["[END]", ""], (0, 0)),  # an empty sentence; str works as bytes do
])
def test_real_lengths_leave_out_markers_and_padding(input_tokens, tokens, expected):
    assert real_lengths(np.array(input_tokens), np.array(tokens)) == expected


# Two sentences, t_in = 5, t_out = 3: "[START] p q [END]" + padding, and an empty source.
BATCH_INPUT = tf.constant([["[START]", "p", "q", "[END]", ""], ["[START]", "[END]", "", "", ""]])
BATCH_ATTENTION = tf.constant([
    [[0.9, 0.0, 0.1, 0.0, 0.0],  # [START] is the largest: ignored -> q
     [0.0, 0.5, 0.5, 0.0, 0.0],  # tie -> p
     [0.0, 0.2, 0.1, 0.7, 0.0]],  # [END] is the largest: ignored -> p
    [[0.5, 0.5, 0.0, 0.0, 0.0]] * 3,  # no real source token
])


def test_attended_source_tokens_skip_markers_and_padding():
    got = attended_source_tokens(BATCH_ATTENTION, BATCH_INPUT).numpy().tolist()
    assert got == [[b"q", b"p", b"p"], [b"", b"", b""]]


def test_attended_source_tokens_agree_with_the_pharaoh_pairs():
    rng = np.random.default_rng(0)
    attention = rng.integers(0, 3, size=[1, 6, 5]).astype(np.float32)  # many ties
    got = attended_source_tokens(tf.constant(attention), BATCH_INPUT[:1]).numpy()[0]
    pairs = alignment_pairs(attention[0], 2, 6)
    assert got.tolist() == [[b"p", b"q"][i] for i, _ in pairs]


def test_replace_unknown_replaces_only_unk_and_only_with_a_source_token():
    tokens = tf.constant([["[UNK]", "x", "[UNK]"], ["[UNK]", "[END]", ""]])
    got = replace_unknown(tokens, BATCH_ATTENTION, BATCH_INPUT).numpy().tolist()
    assert got == [[b"q", b"x", b"p"], [b"[UNK]", b"[END]", b""]]  # an empty source keeps [UNK]


@pytest.mark.parametrize("level", ["word", "char"])
def test_detokenize_tokens_is_detokenize_of_the_ids_tokens(level):
    from tfattn.data.text import Tokenizer

    tokenizer = Tokenizer(["hello", ",", "world", "!", "h", "e"], level=level)  # ids 4 to 9
    ids = tf.constant([[2, 4, 5, 1, 6, 7, 3, 0], [4, 2, 8, 9, 12, 0, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0]])
    assert (tokenizer.detokenize_tokens(tokenizer.ids_to_tokens(ids)).numpy().tolist()
            == tokenizer.detokenize(ids).numpy().tolist())


# -- end to end: a translator whose every output token is [UNK] ------------------------------------

def unknown_translators(dates_data):
    """Two translators, `replace_unknown` False and True, of one untrained tiny dates model whose
    output layer always chooses `[UNK]` (so decoding runs to the length limit)."""
    import tfattn
    from tfattn.data.text import UNK_ID
    from tfattn.model import ensure_built

    _, _, source, target = dates_data
    model = ensure_built(tfattn.make_model(tfattn.ModelConfig(attention="luong", embedding_dim=8, units=8),
                                           source.vocab_size, target.vocab_size))
    bias = model.decoder.logits_dense.bias
    bias.assign(tf.tensor_scatter_nd_update(bias, [[UNK_ID]], [100.0]))
    return tuple(tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=8), replace_unknown=replace)
                 for replace in (False, True))


TEXTS = ["5 march 2019", "tue 5 mar 19", ""]


def expected_replacement(plain):
    """`plain` outputs (replace_unknown=False) with [UNK] replaced as `alignment_pairs` aligns."""
    tokens = plain["tokens"].copy()
    for row, (attention, source) in enumerate(zip(plain["attention"], plain["input_tokens"])):
        source_length, _ = real_lengths(source, tokens[row])
        for i, j in alignment_pairs(attention, source_length, tokens.shape[1]):
            tokens[row, j] = source[i + 1] if tokens[row, j] == b"[UNK]" else tokens[row, j]
    return tokens


@pytest.fixture(scope="module")
def translators(dates_data):
    return unknown_translators(dates_data)


@pytest.mark.parametrize("beam", [False, True])
def test_the_translator_replaces_unk_in_tokens_and_text(translators, beam):
    plain, replacing = (t.beam(TEXTS, beam_width=3) if beam else t(TEXTS) for t in translators)
    assert (plain["tokens"][:2, :4] == b"[UNK]").all()  # not a vacuous test
    tokens = expected_replacement(plain)
    np.testing.assert_array_equal(replacing["tokens"], tokens)
    assert b"[UNK]" not in replacing["tokens"][:2].tolist()  # sentences with a source: all replaced
    assert (replacing["tokens"][2] == b"").all()  # "" has no source token: an empty translation
    # Character level: the text is the replaced tokens joined, [END] and padding left out.
    joined = [b"".join(t for t in row if t not in (b"", b"[END]")).decode() for row in tokens[:2]]
    assert [t.decode() for t in replacing["text"][:2]] == joined
    assert all(set(text) <= set(source) for text, source in zip(joined, TEXTS))
    for key in ("attention", "length", "input_tokens"):
        np.testing.assert_array_equal(replacing[key], plain[key])
    if beam:
        assert (replacing["nbest_text"][:, 0] == replacing["text"]).all()
        assert b"[UNK]" not in b"".join(replacing["nbest_text"][:2].ravel())


@pytest.fixture(scope="module")
def exports(translators, tmp_path_factory):
    """The two translators exported: `(plain, replacing)` paths."""
    from tfattn.serving.translator import export

    tmp = tmp_path_factory.mktemp("export")
    return tuple(export(translator, str(tmp / name)) for translator, name in zip(translators, ("plain", "replacing")))


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_replace_unknown_round_trips_through_the_export(translators, exports):
    from tfattn.serving.translator import CONFIG_FILE, load

    for translator, path in zip(translators, exports):
        with open(os.path.join(path, CONFIG_FILE), encoding="utf-8") as f:
            assert json.load(f)["replace_unknown"] is translator.replace_unknown
        signatures = load(path).signatures
        greedy = signatures["translate"](text=tf.constant(TEXTS))
        assert_same_outputs({k: v.numpy() for k, v in greedy.items()}, translator(TEXTS))
        beam = signatures["translate_beam"](text=tf.constant(TEXTS), beam_width=tf.constant(3),
                                            length_penalty=tf.constant(0.6))
        assert_same_outputs({k: v.numpy() for k, v in beam.items()}, translator.beam(TEXTS, 3))
    assert b"[UNK]" not in greedy["tokens"].numpy()[:2].tolist()  # the replacing export, last


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_translate_replace_unknown_on_an_export_that_does_not(exports, capsys):
    from tfattn.serving.translator import load

    plain_export = exports[0]
    plain = {k: v.numpy() for k, v in load(plain_export).signatures["translate"](text=tf.constant(TEXTS)).items()}
    tokens = expected_replacement(plain)
    status, out, err = run_main(capsys, "translate", "--model", plain_export, "--replace-unknown",
                                "--alignments", *TEXTS)
    assert status == 0, err
    lines = [line.split("\t") for line in out.splitlines()]
    assert [text for text, _ in lines[:2]] == [b"".join(t for t in row if t not in (b"", b"[END]")).decode()
                                               for row in tokens[:2]]
    assert lines[2][0] == "[UNK]" * (plain["length"][2] - (plain["tokens"][2, -1] == b"[END]"))  # kept
    assert [pairs for _, pairs in lines] == [sentence_alignment(*(plain[k][i] for k in
                                             ("attention", "input_tokens", "tokens"))) for i in range(3)]
    status, out, err = run_main(capsys, "translate", "--model", plain_export, *TEXTS)
    assert "[UNK]" in out.splitlines()[0]  # without the flag


def test_export_replace_unknown_goes_to_export_run(monkeypatch, capsys):
    from tfattn.runs import export as runs_export

    calls = []
    monkeypatch.setattr(runs_export, "export_run", lambda *args, **kwargs: calls.append(kwargs) or "out")
    for flags in ([], ["--replace-unknown"]):
        assert run_main(capsys, "export", "--model", "run", "--out", "out", *flags)[0] == 0
    assert [call["replace_unknown"] for call in calls] == [False, True]
