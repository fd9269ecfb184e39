"""The benchmark scripts' helpers (bench/): batching, timing arithmetic, paired ratios, the corpus split.

No model is loaded: fake translate functions stand in for the SavedModel signatures (they take a `text`
string tensor and return `{"text": bytes tensor}`), and a fake clock replaces `time.perf_counter` in the
module under test, advanced by the fake functions by known amounts, so every timed figure is exact.
"""

import argparse
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))  # the scripts import each other as `spa`, `machine`, `decode`

import decode  # noqa: E402
import paired  # noqa: E402
import quality  # noqa: E402
import spa  # noqa: E402
import train_pair  # noqa: E402
import train_throughput  # noqa: E402

from tfattn.model import ModelConfig  # noqa: E402


class FakeClock:
    """`perf_counter` that only moves when a fake translate function says its call took some time."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """A fake clock in place of `time` in decode.py and paired.py (nothing else sees it)."""
    fake = FakeClock()
    for module in (decode, paired):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


def upper_signature(clock=None, per_call=0.0, per_char=0.0, calls=None):
    """A fake translate signature: upper-cases each sentence; records `(texts, inputs)` in `calls`; each
    call takes `per_call` seconds plus `per_char` seconds per character of the batch on `clock`."""

    def translate(text, **inputs):
        texts = [t.decode("utf-8") for t in text.numpy()]
        if calls is not None:
            calls.append((texts, inputs))
        if clock is not None:
            clock.now += per_call + per_char * sum(len(t) for t in texts)
        return {"text": tf.constant([t.upper() for t in texts])}

    return translate


# --- bench/decode.py ------------------------------------------------------------------------------


def test_translate_all_batches_in_order_and_passes_inputs_as_tensors():
    calls = []
    texts = ["uno", "dos", "tres", "¿dónde?", "cinco", "seis", "siete"]
    hyps = decode.translate_all(upper_signature(calls=calls), texts, 3, beam_width=4, length_penalty=0.6)
    assert hyps == ["UNO", "DOS", "TRES", "¿DÓNDE?", "CINCO", "SEIS", "SIETE"]  # decoded to str, in order
    assert [batch for batch, _ in calls] == [texts[0:3], texts[3:6], texts[6:7]]  # 7 = 3 + 3 + 1
    for _, inputs in calls:
        assert set(inputs) == {"beam_width", "length_penalty"}
        assert all(isinstance(v, tf.Tensor) for v in inputs.values())
        assert int(inputs["beam_width"]) == 4
        assert float(inputs["length_penalty"]) == pytest.approx(0.6)


def test_percentiles_ms_interpolates_and_rounds_to_two_places():
    times = [i / 1000 for i in range(100, 0, -1)]  # 0.100 .. 0.001 s, out of order
    # Sorted, p50 sits at index 0.5 * 99 = 49.5: between 0.050 and 0.051 -> 50.5 ms;
    # p99 at index 0.99 * 99 = 98.01: 0.099 + 0.01 * 0.001 = 0.09901 s -> 99.01 ms.
    assert decode.percentiles_ms(times) == {"p50_ms": 50.5, "p99_ms": 99.01}
    # 1/3 s -> 333.333... ms -> 333.33
    assert decode.percentiles_ms([1 / 3]) == {"p50_ms": 333.33, "p99_ms": 333.33}


def test_single_sentence_times_are_the_time_of_each_call_alone(clock):
    calls = []
    fn = upper_signature(clock, per_char=0.125, calls=calls)
    texts = ["ab", "abcd", "a"]
    assert decode.single_sentence_times(fn, texts) == [0.25, 0.5, 0.125]  # 2, 4, 1 chars * 0.125 s
    assert [batch for batch, _ in calls] == [["ab"], ["abcd"], ["a"]]  # one sentence per call


def test_latency_takes_n_sentences_spread_over_the_texts(clock):
    fn = upper_signature(clock, per_char=0.125)
    # Two of four, at indices 0 and 2: 0.25 and 1 s. p50 = 0.625 s; p99 = 0.25 + 0.99 * 0.75 = 0.9925 s.
    assert decode.latency(fn, ["ab", "abcd", "abcdefgh", "a"], n=2) == {"p50_ms": 625.0, "p99_ms": 992.5}


@pytest.mark.parametrize("n, expected", [(1, [0]), (3, [0, 3, 6]), (4, [0, 2, 5, 7]), (10, list(range(10))),
                                         (12, list(range(10)))])
def test_spread_takes_items_at_even_intervals_over_the_whole_list(n, expected):
    # Index i * 10 // n for i < n: for n = 4, 0, 2.5 -> 2, 5, 7.5 -> 7.
    assert spa.spread(list(range(10)), n) == expected


def test_throughput_times_batches_of_64_after_an_untimed_warm_up(clock):
    calls = []
    texts = [f"s{i}" for i in range(200)]
    rate, hyps = decode.throughput(upper_signature(clock, per_call=0.25, calls=calls), texts)
    # Timed: 200 sentences = 64 + 64 + 64 + 8, 4 calls * 0.25 s = 1 s -> 200 sentences/s. (Timing the two
    # warm-up calls too would give 200 / 1.5; batches of 32 would give 200 / 1.75.)
    assert rate == 200.0
    assert hyps == [t.upper() for t in texts]
    assert [len(batch) for batch, _ in calls] == [64, 64, 64, 64, 64, 8]  # warm-up: the first 128
    assert [batch for batch, _ in calls[:2]] == [texts[:64], texts[64:128]]


def test_greedy_and_beam_alternate_and_take_medians(clock):
    w = 9.0  # each warm-up call: untimed
    per_call = iter([w, w, 0.25, 0.25, w, w, 1.0, 1.0,  # round 1: greedy's pass (2 calls), then beam's
                     w, w, 0.125, 0.125, w, w, 0.25, 0.25,  # round 2
                     w, w, 0.5, 0.5, w, w, 1.0, 1.0])  # round 3
    calls = []

    def signature(name):
        def translate(text, **inputs):
            calls.append((name, inputs))
            clock.now += next(per_call)
            return {"text": tf.constant([f"{name}:{t.decode()}" for t in text.numpy()])}
        return translate

    texts = [f"s{i}" for i in range(128)]  # two batches of 64: warm-up 2 calls, timed 2 calls
    rates, greedy_hyps, beam_hyps = decode.greedy_and_beam(signature("g"), signature("b"), texts)
    # Timed passes: greedy 0.5, 0.25, 1.0 s, so 256, 512, 128 sentences/s; beam 2.0, 0.5, 2.0 s, so 64,
    # 256, 64. Beam's shares by round: 0.25, 0.5, 0.5, median 0.5 (the ratio of the medians would be 0.25).
    assert rates == {"greedy_sentences_per_s": 256.0, "beam4_sentences_per_s": 64.0, "beam4_share_of_greedy": 0.5,
                     "speed_rounds": 3}
    assert [name for name, _ in calls] == (["g"] * 4 + ["b"] * 4) * 3
    assert all(inputs == {} for name, inputs in calls if name == "g")
    assert all(sorted(inputs) == ["beam_width", "length_penalty"] for name, inputs in calls if name == "b")
    assert greedy_hyps == [f"g:{t}" for t in texts] and beam_hyps == [f"b:{t}" for t in texts]


def test_padding_differences_counts_sentences_that_change_inside_the_batch():
    def pads_leak(text, **inputs):
        """Translation shows how much padding a sentence got: the batch's longest minus its own length."""
        assert int(inputs["beam_width"]) == 4  # passed on, as a tensor
        texts = [t.decode("utf-8") for t in text.numpy()]
        longest = max(len(t) for t in texts)
        return {"text": tf.constant([f"{t}|{longest - len(t)}" for t in texts])}

    texts = ["dddd", "eeee", "ccc", "a", "bb"]
    # The 3 longest: ccc, dddd, eeee, so each batch's longest has 4 characters. Alone every sentence gets
    # padding 0; in the batch, a, bb and ccc get 3, 2, 1: three differ. (The last 3 instead, ccc a bb,
    # would give 2; reading another position than the sentence's own, index 1, would give 5.)
    assert decode.padding_differences(pads_leak, texts, beam_width=4) == 3
    # A translation that does not depend on the batch: none differ.
    assert decode.padding_differences(upper_signature(), texts) == 0


def test_size_mb_sums_files_in_nested_folders(tmp_path):
    sizes = {"saved_model.pb": 1_000_000, "variables/variables.index": 200_000,
             "variables/shards/data-0": 60_000, "assets/empty.txt": 0}
    for name, size in sizes.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)  # a file of `size` bytes (sparse: nothing written)
    # 1,000,000 + 200,000 + 60,000 = 1,260,000 bytes = 1.26 MB -> 1.3
    assert decode.size_mb(str(tmp_path)) == 1.3


def test_against_peer_compares_rates_and_latency_of_alternating_calls(clock):
    ours_calls, peer_calls = [], []
    ours = upper_signature(clock, per_call=0.25, calls=ours_calls)
    peer = upper_signature(clock, per_call=0.5, calls=peer_calls)
    texts = [f"s{i}" for i in range(128)]
    out = decode.against_peer(ours, peer, texts, rounds=3, singles=2)
    # A pass over 128 sentences: 2 batches of 64. Ours: 2 * 0.25 = 0.5 s -> 256/s; peer: 1 s -> 128/s.
    # Single sentences: 0.25 s (250 ms) and 0.5 s (500 ms) each, so p50 = p99.
    assert out == {"ours": {"greedy_sentences_per_s": 256.0, "greedy_latency": {"p50_ms": 250.0, "p99_ms": 250.0}},
                   "peer": {"greedy_sentences_per_s": 128.0, "greedy_latency": {"p50_ms": 500.0, "p99_ms": 500.0}},
                   "greedy_ratio": 2.0, "rounds": 3}
    singles = [batch for batch, _ in ours_calls if len(batch) == 1]
    # 3 rounds of 2 different sentences, 6 spread over the 128: indices i * 128 // 6 = 0, 21, 42, 64, 85, 106.
    assert singles == [[f"s{i}"] for i in (0, 21, 42, 64, 85, 106)]
    assert [batch for batch, _ in peer_calls if len(batch) == 1] == singles


# --- bench/paired.py ------------------------------------------------------------------------------


def test_paired_times_times_every_input_for_every_function_each_round(clock):
    seen, order = {}, []

    def export(name, seconds):
        """Each call takes `seconds` * batch size * (how many times this export has had this input), so
        in round r (from 0) input x takes seconds * len(x) * (r + 1)."""

        def fn(text):
            batch = tuple(t.decode("utf-8") for t in text.numpy())
            seen.setdefault(name, []).append(list(batch))
            order.append(name)
            clock.now += seconds * len(batch) * seen[name].count(list(batch))
            return {"text": text}

        return fn

    fns = {"a": export("a", 0.25), "b": export("b", 0.5), "c": export("c", 0.125)}
    inputs = [["x"], ["y", "z"], ["w"], ["v"]]
    times = paired.paired_times(fns, inputs, rounds=3)
    rounds = np.array([[1], [2], [3]])  # r + 1
    sizes = np.array([[1, 2, 1, 1]])
    for name, seconds in [("a", 0.25), ("b", 0.5), ("c", 0.125)]:
        assert seen[name] == inputs * 3  # every input, in order, every round
        np.testing.assert_array_equal(times[name], seconds * sizes * rounds)  # e.g. a, round 2, y z: 0.25*2*3
    # The three exports are called back to back for each input, in an order shuffled each time.
    groups = [tuple(order[i : i + 3]) for i in range(0, len(order), 3)]
    assert all(sorted(group) == ["a", "b", "c"] for group in groups) and len(groups) == 12
    assert len(set(groups)) > 1
    # The same seed gives the same order.
    order.clear()
    seen.clear()
    paired.paired_times(fns, inputs, rounds=3)
    assert [tuple(order[i : i + 3]) for i in range(0, len(order), 3)] == groups


@pytest.mark.parametrize("spec, expected", [
    ("runs/x/export", ("runs/x/export", "serving_default")),
    ("runs/x/export@translate_text", ("runs/x/export", "translate_text")),
    ("/a@b/export", ("/a@b/export", "serving_default")),  # an @ inside the path is no signature
])
def test_an_export_may_name_its_signature(spec, expected):
    assert paired.export_and_signature(spec) == expected


def test_summary_takes_the_fastest_round_and_the_median_ratio_to_the_first_export():
    times = {"first": np.array([[2.0, 4.0], [1.0, 8.0]]),  # (rounds, inputs)
             "other": np.array([[1.0, 3.0], [3.0, 2.0]]),
             "slow": np.array([[4.0, 8.0], [2.0, 16.0]])}  # twice "first" everywhere
    out = paired.summary(times, lambda best: {"best": best.tolist()})
    # other / first: 1/2, 3/4, 3/1, 2/8 -> sorted 0.25, 0.5, 0.75, 3 -> median (0.5 + 0.75) / 2 = 0.625
    # (a ratio of medians would be 2.5 / 3; of the fastest rounds' sums, 3 / 5).
    assert out == {"first": {"best": [1.0, 4.0], "time_ratio_to_first": 1.0},
                   "other": {"best": [1.0, 2.0], "time_ratio_to_first": 0.625},
                   "slow": {"best": [2.0, 8.0], "time_ratio_to_first": 2.0}}  # to the first, not the previous


# --- bench/spa.py ---------------------------------------------------------------------------------


@pytest.fixture
def fresh_spa(monkeypatch):
    """spa.py with empty caches before and after, so a fake corpus never leaks into another test."""
    spa.splits.cache_clear()
    spa.tokenizers.cache_clear()
    yield monkeypatch
    spa.splits.cache_clear()
    spa.tokenizers.cache_clear()


def write_small_corpus(path):
    """102 Anki lines `hello i<TAB>hola i`; line 0 has words of its own (`only test` / `solo prueba`)."""
    lines = ["only test\tsolo prueba\tCC-BY"] + [f"hello {i}\thola {i}\tCC-BY" for i in range(1, 102)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_splits_exits_naming_the_missing_corpus(fresh_spa, tmp_path):
    missing = tmp_path / "nowhere" / "spa.txt"
    fresh_spa.setattr(spa, "SPA", missing)
    with pytest.raises(SystemExit) as exit_info:
        spa.splits()
    assert str(missing) in str(exit_info.value.code)


def test_splits_of_a_small_corpus_follow_the_fixed_rule(fresh_spa, tmp_path):
    fresh_spa.setattr(spa, "SPA", tmp_path / "spa.txt")
    write_small_corpus(spa.SPA)
    parts = spa.splits()
    # Lines 0..101: TEST i % 50 == 0 (0, 50, 100), VALIDATION i % 50 == 1 (1, 51, 101), TRAIN the other 96.
    assert parts["test"] == [("solo prueba", "only test"), ("hola 50", "hello 50"), ("hola 100", "hello 100")]
    assert parts["validation"] == [("hola 1", "hello 1"), ("hola 51", "hello 51"), ("hola 101", "hello 101")]
    assert len(parts["train"]) == 96 and parts["train"][0] == ("hola 2", "hello 2")
    assert spa.splits() is parts  # cached per process


def test_tokenizers_learn_each_side_from_the_training_split(fresh_spa, tmp_path):
    fresh_spa.setattr(spa, "SPA", tmp_path / "spa.txt")
    write_small_corpus(spa.SPA)
    source, target = spa.tokenizers(vocab_size=None, max_length=12)
    assert "hola" in source.vocabulary and "hello" not in source.vocabulary  # Spanish -> English
    assert "hello" in target.vocabulary and "hola" not in target.vocabulary
    assert "prueba" not in source.vocabulary and "test" not in target.vocabulary  # line 0 is TEST
    assert "2" in source.vocabulary and "50" not in source.vocabulary  # 50 is TEST too
    assert source.max_length == 12 and source.level == "word"
    # 4 reserved ids + "hola" + the 96 TRAIN numbers
    assert source.vocab_size == target.vocab_size == 101
    small, _ = spa.tokenizers(vocab_size=6, max_length=12)
    assert small.vocab_size == 6  # reserved ids included


@pytest.mark.data
@pytest.mark.skipif(not spa.SPA.is_file(), reason=f"real corpus not found: {spa.SPA}")
def test_splits_of_the_real_corpus(fresh_spa):
    parts = spa.splits()
    # 118,964 lines = 50 * 2,379 + 14: remainders 0 and 1 both occur 2,380 times (see test_corpora).
    assert [len(parts[name]) for name in ("test", "validation", "train")] == [2_380, 2_380, 114_204]
    assert parts["test"][0] == ("Ve.", "Go.")  # line 0


# --- bench/quality.py and bench/train_throughput.py ----------------------------------------------


def test_quality_run_config_ends_the_decay_when_the_time_does():
    args = argparse.Namespace(minutes=1.5, step_seconds=0.5, vocab_size=300, attention="luong", score="dot",
                              input_feeding=True, dropout=0.1, learning_rate=1e-3, model=None,
                              max_steps=None)
    config = quality.run_config(args)
    assert config.train.time_budget == 90.0  # 1.5 minutes
    assert config.train.decay_steps == 180  # 90 s / 0.5 s per step
    assert config.train.learning_rate == 1e-3
    assert config.corpus.corpus == str(spa.SPA)
    for tokenizer in (config.source_tokenizer, config.target_tokenizer):
        assert (tokenizer.level, tokenizer.max_tokens, tokenizer.max_length) == ("word", 300, 40)
    model = config.model
    assert (model.attention, model.score, model.input_feeding, model.dropout) == ("luong", "dot", True, 0.1)
    assert config.data.batch_size == 64


def test_quality_score_gives_bleu_overall_by_length_with_counts_and_for_16_words_and_more(monkeypatch):
    # The fake export upper-cases each source; BLEU is lowercased, so a pair whose reference is its
    # source scores 100 and the 17-word pair, with an unrelated reference, scores 0.
    long_source = " ".join(f"w{i}" for i in range(17))
    pairs = [("el gato come pescado", "el gato come pescado"), (long_source, "nothing alike here at all")]
    calls = []
    export = types.SimpleNamespace(signatures={"translate": upper_signature(calls=calls)})
    monkeypatch.setattr(quality, "load", lambda path: export)
    result = quality.score("export-dir", pairs, beam=1)
    assert calls == [([p[0] for p in pairs], {})]  # one batch, no beam inputs
    # Corpus BLEU: 21 hypothesis words against 9 reference words (brevity penalty 1); matching 1- to
    # 4-grams 4/21, 3/19, 2/17, 1/15: (24 / 101,745) ** (1/4) = 0.12393.
    assert result["bleu"] == 12.39
    assert result["bleu_by_length"] == {"1-5": {"bleu": 100.0, "n": 1}, "6-10": {"bleu": None, "n": 0},
                                        "11-15": {"bleu": None, "n": 0}, "16-20": {"bleu": 0.0, "n": 1},
                                        "21+": {"bleu": None, "n": 0}}
    assert (result["bleu_16_plus"], result["n_16_plus"]) == (0.0, 1)
    assert result["examples"] == [(pairs[0][0], pairs[0][0].upper()), (long_source, long_source.upper())]


def test_forward_flops_counts_every_matmul_of_a_small_model():
    # embedding e = 4, units u = 6 (3 per encoder direction), batch 2, 5 source and 3 target steps,
    # 10 target words; FLOPs = 2 per multiply-add.
    # Per source token: encoder GRU, 2 directions * 3 gates * (4 + 3) inputs * 3 units = 126 MACs, and the
    # key projection 6 * 6 = 36 MACs: 162 MACs, 324 FLOPs; 5 tokens: 1,620.
    # Luong, no input feeding, per target step: GRU 3 * (4 + 6) * 6 = 180, scores 5 * 6 = 30,
    # context 30, W_c [c; h] 12 * 6 = 72, logits 6 * 10 = 60: 372 MACs, 744 FLOPs; 3 steps: 2,232.
    # Per sentence 1,620 + 2,232 = 3,852; batch of 2: 7,704.
    luong = ModelConfig(attention="luong", input_feeding=False, embedding_dim=4, units=6)
    assert train_throughput.forward_flops(luong, 2, 5, 3, 50, 10) == 7_704
    # Input feeding: the GRU's input is 4 + 6, 3 * 16 * 6 = 288 MACs per step, 108 more:
    # 2 sentences * 3 steps * 216 FLOPs = 1,296 more.
    feeding = ModelConfig(attention="luong", input_feeding=True, embedding_dim=4, units=6)
    assert train_throughput.forward_flops(feeding, 2, 5, 3, 50, 10) == 7_704 + 1_296
    # Bahdanau, per target step: GRU 288 (embedding and context in), W1 q 36, scores 30, context 30,
    # hidden [h; c; embedding] 16 * 6 = 96, logits 60: 540 MACs, 1,080 FLOPs; 3 steps: 3,240.
    # Per sentence 1,620 + 3,240 = 4,860; batch of 2: 9,720.
    bahdanau = ModelConfig(attention="bahdanau", embedding_dim=4, units=6)
    assert train_throughput.forward_flops(bahdanau, 2, 5, 3, 50, 10) == 9_720
    # Local-p adds W_p h_t (6 * 6 = 36 MACs) and v_p (6 MACs) a step: 84 FLOPs; 2 * 3 steps: 504.
    local_p = ModelConfig(attention="luong", input_feeding=True, local="p", embedding_dim=4, units=6)
    assert train_throughput.forward_flops(local_p, 2, 5, 3, 50, 10) == 7_704 + 1_296 + 504
    # The peer's shape: one encoder direction of 6 units, 3 * (4 + 6) * 6 = 180 MACs, and the keys 36:
    # 216 MACs, 432 FLOPs a source token; 5 tokens: 2,160. Per target step, Luong without input
    # feeding (372 MACs above) and the concat score's W q, 6 * 6 = 36: 408 MACs, 816 FLOPs; 3 steps:
    # 2,448. Per sentence 4,608; batch of 2: 9,216.
    peer_shape = ModelConfig(**train_throughput._PEER_SHAPE, embedding_dim=4, units=6)
    assert train_throughput.forward_flops(peer_shape, 2, 5, 3, 50, 10) == 9_216


def test_transformer_flops_count_every_matmul_of_a_small_model():
    # units u = 4, ff 8, one block, batch 1, 2 source and 3 target tokens, 10 target words; MACs:
    # per source token: Q, K, V, O projections 4 * 16 = 64, scores and context 2 * 2 * 4 = 16, feed-
    # forward 2 * 4 * 8 = 64: 144, and the cross-attention's K and V of it 2 * 16 = 32; 2 tokens: 352.
    # Per target token: self-attention 64 + 2 * 3 * 4 = 88, cross-attention Q and O 32 + scores and
    # context 2 * 2 * 4 = 16, feed-forward 64, logits 4 * 10 = 40: 240; 3 tokens: 720.
    # 1,072 MACs, 2,144 FLOPs.
    c = ModelConfig(attention="transformer", units=4, heads=2, ff_dim=8, num_layers=1)
    assert train_throughput.forward_flops(c, 1, 2, 3, 50, 10) == 2_144
    two = ModelConfig(attention="transformer", units=4, heads=2, ff_dim=8, num_layers=2)
    assert train_throughput.forward_flops(two, 1, 2, 3, 50, 10) == 2 * (2_144 - 240) + 240  # logits once


def test_quality_has_a_row_for_every_model_kind():
    args = argparse.Namespace(minutes=15, step_seconds=0.09, vocab_size=5000, dropout=0.2, learning_rate=2e-3,
                              model="luong-local-p", attention="bahdanau", score="general", input_feeding=False,
                              max_steps=None)
    model = quality.run_config(args).model
    assert (model.attention, model.local, model.window, model.units) == ("luong", "p", 10, 256)
    kinds = {name: quality.model_config(argparse.Namespace(**{**vars(args), "model": name}))
             for name in quality.KINDS}
    assert {c.attention for c in kinds.values()} == {"bahdanau", "luong", "transformer", "none"}
    assert kinds["transformer-relative"].positions == "relative" and kinds["hard"].hard
    assert kinds["transformer-encoder"].encoder == "transformer" and kinds["multihead"].heads == 4



def quality_config(row, **changes):
    """The `RunConfig` `bench/quality.py --model ROW` trains, without training."""
    args = argparse.Namespace(**{**dict(minutes=15, step_seconds=0.09, vocab_size=5000, dropout=0.2,
                                        learning_rate=2e-3, model=row, attention="bahdanau", score="general",
                                        input_feeding=False, max_steps=None), **changes})
    return quality.run_config(args)


def test_every_issue_44_row_changes_one_thing_of_its_kind():
    for row, spec in quality.ROWS.items():
        config, base = quality_config(row), quality_config(spec["kind"])
        changed = {f"{section}.{k}" for section in ("model", "train") for k, v in vars(getattr(config, section)).items()
                   if getattr(getattr(base, section), k) != v}
        changed |= {k for k in ("checkpoint_every",) if getattr(config, k) != getattr(base, k)}
        changed |= {"validation.average_checkpoints"} if config.validation != base.validation else set()
        changed |= {"tokenizer"} if config.target_tokenizer != base.target_tokenizer else set()
        assert changed, row  # a row that changes nothing measures nothing
        allowed = {"model.tie_embeddings", "model.norm", "model.embedding_dim", "model.units", "train.label_smoothing",
                   "train.precision", "train.decay_to_budget", "train.decay_steps", "train.decay_alpha", "train.warmup_steps",
                   "train.learning_rate", "checkpoint_every", "validation.average_checkpoints", "tokenizer"}
        assert changed <= allowed, (row, changed - allowed)


@pytest.mark.parametrize("row, check", [
    ("multihead-ls", lambda c: c.train.label_smoothing == 0.1 and c.model.heads == 4),
    ("bahdanau-ls", lambda c: c.train.label_smoothing == 0.1 and c.model.attention == "bahdanau"),
    ("transformer-tied", lambda c: c.model.tie_embeddings and c.model.attention == "transformer"
     and c.train.learning_rate == 1e-3),  # the Transformer's own rate kept
    ("bahdanau-tied", lambda c: c.model.tie_embeddings and c.model.embedding_dim == c.model.units == 256),
    ("multihead-wordpiece", lambda c: c.source_tokenizer.level == c.target_tokenizer.level == "wordpiece"
     and c.target_tokenizer.max_tokens == 5000),
    ("multihead-bf16", lambda c: c.train.precision == "mixed_bfloat16" and c.train.decay_to_budget
     and c.train.decay_steps is None and c.model.units == 256),
    # The command line's recipe in bfloat16 on the float32 row's schedule: a cosine over 900 s / 0.09 s
    # = 10,000 steps, so that with --max-steps the two compare at the same steps and learning rates.
    ("multihead-wordpiece-bf16", lambda c: c.train.precision == "mixed_bfloat16" and c.train.decay_steps == 10_000
     and not c.train.decay_to_budget and c.target_tokenizer.level == "wordpiece" and c.train.max_steps is None),
    ("multihead-wordpiece-bf16-budget", lambda c: c.train.precision == "mixed_bfloat16" and c.train.decay_to_budget
     and c.train.decay_steps is None and c.target_tokenizer.level == "wordpiece"),
    ("multihead-wordpiece-budget", lambda c: c.train.precision == "float32" and c.train.decay_to_budget
     and c.train.decay_steps is None and c.target_tokenizer.level == "wordpiece"),
    ("multihead-wordpiece-budget30", lambda c: c.train.decay_to_budget and c.train.decay_steps is None
     and c.train.decay_alpha == 0.3 and c.train.precision == "float32" and c.target_tokenizer.level == "wordpiece"),
    ("multihead-wordpiece-budget10", lambda c: c.train.decay_to_budget and c.train.decay_alpha == 0.1),
    ("multihead-wordpiece-budget", lambda c: c.train.decay_alpha == 0.01),
    ("multihead-bf16-384", lambda c: c.model.units == c.model.embedding_dim == 384 and c.model.heads == 4),
    ("multihead-warmup2000", lambda c: c.train.warmup_steps == 2000),
    ("multihead-lr3e-3", lambda c: c.train.learning_rate == 3e-3 and c.train.warmup_steps == 1000),
    ("transformer-postnorm", lambda c: c.model.norm == "post" and c.train.warmup_steps == 1000),
    ("multihead-avg5", lambda c: c.validation.average_checkpoints == 5 and c.checkpoint_every == 500),
    ("multihead-wordpiece-avg5", lambda c: c.validation.average_checkpoints == 5 and c.checkpoint_every == 500
     and c.target_tokenizer.level == "wordpiece" and c.train.precision == "float32"),
    ("multihead", lambda c: c.train.precision == "float32" and c.train.label_smoothing == 0.0
     and not c.model.tie_embeddings and c.model.norm == "pre" and c.checkpoint_every == 2000),
])
def test_issue_44_rows(row, check):
    assert check(quality_config(row))


def test_quality_max_steps_stops_a_row_at_that_step_and_keeps_its_schedule():
    config, plain = quality_config("multihead-wordpiece-bf16", max_steps=6_000), quality_config("multihead-wordpiece")
    assert config.train.max_steps == 6_000 and config.train.time_budget == 900.0
    assert (config.train.decay_steps, config.train.warmup_steps) == (plain.train.decay_steps, plain.train.warmup_steps)


def test_every_row_builds_its_model():
    from tfattn.model import make_model

    for row in quality.ROWS:
        make_model(quality_config(row).model, 50, 60)  # a tied RNN decoder needs embedding_dim == units


FAKE_PEER = """
import json, sys
assert sys.argv[1:] == ["serve", "--units", "1024"], sys.argv
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    n = int(line.split()[1])
    print(json.dumps({"steps": n, "seconds": 0.5 * n, "tokens": 600.0 * n}), flush=True)
"""


def test_the_peer_process_trains_on_request_and_quits(tmp_path):
    # bench/train_throughput.py --peer DIR starts DIR/.venv/bin/python DIR/peer.py serve --units U.
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "peer.py").write_text(FAKE_PEER)
    peer = train_throughput.Peer(str(tmp_path), 1024)
    assert peer.steps(3) == {"steps": 3, "seconds": 1.5, "tokens": 1800.0}
    peer.close()
    assert peer.process.returncode == 0


def test_the_peer_trains_as_many_steps_as_each_round_times_of_ours():
    """7 timed batches in 3 rounds: chunks of 3, 3 and 1, and the peer is asked once a round for 3, 3
    and 1 steps (it was asked three times a round, once for each figure it reports, for 3 steps each)."""
    asked = []
    figures = lambda n: {"steps": n, "seconds": 0.1 * n, "tokens": 10.0 * n}  # noqa: E731
    peer = types.SimpleNamespace(steps=lambda n: asked.append(n) or figures(n))
    rng = np.random.default_rng(0)
    data = [(tf.constant(rng.integers(4, 30, (2, 5)), tf.int32), tf.constant(rng.integers(4, 20, (2, 6)), tf.int32))
            for _ in range(12)]
    c = ModelConfig(attention="bahdanau", embedding_dim=4, units=4, max_source_length=40, max_target_length=40)
    result = train_throughput.measure(c, data, 7, 30, 20, peer=peer, rounds=3)
    assert asked == [3, 3, 1]
    assert result["peer"]["steps"] == 7 and result["peer"]["s_per_step"] == 0.1
    assert result["peer"]["nonpad_target_tokens_per_s"] == 100  # 10 tokens a step in 0.1 s


# --- bench/latency.py -----------------------------------------------------------------------------


def test_latency_fit_recovers_fixed_and_per_token_costs():
    import latency

    t_in = np.array([4.0, 6.0, 10.0, 12.0, 20.0])
    t_out = np.array([3.0, 8.0, 5.0, 12.0, 9.0])
    seconds = 0.002 + 0.0001 * t_in + 0.0005 * t_out  # 2 ms, 0.1 ms per source token, 0.5 per output token
    assert latency.fit(seconds, t_in, t_out) == {"fixed_ms": 2.0, "per_source_token_ms": 0.1,
                                                 "per_output_token_ms": 0.5, "r2": 1.0}
    noisy = seconds + np.array([1e-3, -1e-3, 1e-3, -1e-3, 0.0])  # a millisecond either way
    assert 0.0 < latency.fit(noisy, t_in, t_out)["r2"] < 0.99


def test_xla_bench_takes_one_batch_per_shape_from_short_to_long():
    import xla

    def batch(t_in, t_out):
        return np.zeros((2, t_in), "int32"), np.zeros((2, t_out), "int32")

    epoch = [batch(8, 16), batch(8, 8), batch(16, 16), batch(8, 16), batch(24, 32), batch(16, 8)]
    assert xla.distinct_shapes(epoch) == [((2, 8), (2, 8)), ((2, 8), (2, 16)), ((2, 16), (2, 8)),
                                          ((2, 16), (2, 16)), ((2, 24), (2, 32))]
    chosen = xla.one_per_shape(epoch, 3)  # five shapes by area 64, 128, 128, 256, 768: the 1st, 2nd, 4th
    assert [(s.shape[1], t.shape[1]) for s, t in chosen] == [(8, 8), (8, 16), (16, 16)]


def test_latency_reads_the_lengths_of_ours_or_a_peers_outputs():
    import latency

    ours = {"text": tf.constant([b"a b"]), "input_tokens": tf.constant([[b"[START]", b"x", b"y", b"[END]", b""]]),
            "length": tf.constant([3])}
    assert latency.lengths(ours) == (4, 3)  # the padding is not a source token
    peer = {"text": tf.constant([b"a b"]), "attention": tf.zeros([1, 5, 7])}  # (batch, t_out, t_in)
    assert latency.lengths(peer) == (7, 5)
    assert latency.lengths({"text": tf.constant([b"a b"])}) is None  # translate_text: measured apart


# --- bench/ops.py ---------------------------------------------------------------------------------


def test_ops_reads_lengths_and_fits_node_counts():
    import ops

    ours = {"input_tokens": np.array([[b"[START]", b"x", b"[END]", b""]]), "length": np.array([2])}
    assert ops.lengths_of(ours) == (3, 2)
    assert ops.lengths_of({"attention": np.zeros([1, 4, 6]), "text": np.array([b"a"])}) == (6, 4)
    assert ops.lengths_of({"text": np.array([b"a"])}) is None
    t_in, t_out = np.array([4.0, 6.0, 10.0, 12.0]), np.array([3.0, 8.0, 5.0, 12.0])
    counts = 500 + 90 * t_in + 150 * t_out  # nodes: 500 once, 90 a source token, 150 an output token
    assert ops.node_fit(counts, t_in, t_out) == {"fixed": 500.0, "per_source_token": 90.0,
                                                 "per_output_token": 150.0, "r2": 1.0}


def test_train_pair_loads_a_modules_functions_as_a_revision_had_them(tmp_path, monkeypatch):
    # bench/train_pair.py: the old side runs the module's source at --base; the working tree's
    # module stays as it is, and each old function reads the old module's other names.
    (tmp_path / "pairpkg").mkdir()
    module = tmp_path / "pairpkg" / "mod.py"
    module.write_text("SIZE = 1\n\n\ndef size():\n    return SIZE\n\n\ndef twice():\n    return 2 * size()\n")
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("add", "pairpkg/mod.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    module.write_text("SIZE = 5\n\n\ndef size():\n    return SIZE\n\n\ndef twice():\n    return 2 * size()\n")
    monkeypatch.setattr(train_pair, "ROOT", str(tmp_path))
    old = train_pair.old_functions("pairpkg.mod", "HEAD")
    assert sorted(old) == ["size", "twice"]
    assert (old["size"](), old["twice"]()) == (1, 2)  # the committed SIZE, through the old size()
    monkeypatch.syspath_prepend(str(tmp_path))
    import pairpkg.mod

    assert sorted(train_pair.functions(pairpkg.mod)) == ["size", "twice"] and pairpkg.mod.twice() == 10


def test_every_throughput_row_makes_its_config():
    # A Transformer takes no embedding_dim (its embeddings are `units` wide); the RNN rows take both.
    configs = {(name, units): train_throughput.config_for(fields, e, units)
               for name, fields, e, units in train_throughput.RUNS}
    assert configs[("transformer", 256)].units == 256 and configs[("transformer", 256)].num_layers == 2
    assert (configs[("peer-shape", 1024)].embedding_dim, configs[("peer-shape", 1024)].units) == (256, 1024)
    assert not configs[("peer-shape", 1024)].bidirectional and configs[("peer-shape", 1024)].score == "concat"
