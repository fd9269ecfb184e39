"""Every model kind exports, loads in a process where tfattn cannot be imported, and answers the bad
input matrix, an empty batch, a batch of 512 and eight threads at once, as in memory.

The models are the zoo's kinds at toy sizes, untrained: random weights emit varied tokens, which is
what a comparison of outputs needs. The Transformer runs in `make test`; every kind in `make test-long`.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.serving.translator import export

from conftest import assert_same_outputs, made_once

KINDS = {
    "luong-cosine": dict(attention="luong", score="cosine"),
    "luong-local-m": dict(attention="luong", local="m", window=2),
    "luong-local-p": dict(attention="luong", local="p", window=2),
    "luong-hard": dict(attention="luong", hard=True),
    "bahdanau-hard": dict(attention="bahdanau", hard=True),
    "multihead": dict(attention="luong", heads=2),
    "transformer-encoder": dict(attention="bahdanau", encoder="transformer", heads=2),
    "transformer": dict(attention="transformer", heads=2, num_layers=2),
    "transformer-relative": dict(attention="transformer", heads=2, positions="relative", relative_clip=3),
    "transformer-learned": dict(attention="transformer", heads=2, positions="learned"),
    "none": dict(attention="none"),
    "bahdanau-tied": dict(attention="bahdanau", tie_embeddings=True),  # the stored logits kernel is E^T
    "transformer-tied-post": dict(attention="transformer", heads=2, tie_embeddings=True, norm="post"),
}
# An export of each kind, 15-30 s each: make test-long (translate_heads below keeps a Transformer export in make test).
PARAMS = [pytest.param(k, marks=pytest.mark.long) for k in KINDS]

MIXED = ["tue 5 march 2019", "5.3.19", "", "   ", "x" * 10000, b"\xff\xfe\xc3(", "😀 🎉", "march 5th 2019",
         "\u202eمرحبا\u202c", "a\x00b\x07c\x1b[31m"]

# Runs in a fresh process in which `import tfattn` fails: the export must hold everything.
FRESH_PROCESS = textwrap.dedent("""
    import sys
    from concurrent.futures import ThreadPoolExecutor
    sys.modules["tfattn"] = None  # any `import tfattn` now raises ImportError
    import numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
    texts = [bytes.fromhex(h) for h in sys.argv[2].split(",")]
    signatures = tf.saved_model.load(sys.argv[1]).signatures

    def greedy(batch):
        return {k: v.numpy() for k, v in signatures["translate"](text=tf.constant(batch, tf.string)).items()}

    def beam(batch, width=3):
        out = signatures["translate_beam"](text=tf.constant(batch, tf.string), beam_width=tf.constant(width),
                                           length_penalty=tf.constant(0.6))
        return {k: v.numpy() for k, v in out.items()}

    results = {**{"greedy_" + k: v for k, v in greedy(texts).items()},
               **{"beam_" + k: v for k, v in beam(texts).items()}}
    # An empty batch: every output with 0 rows.
    for name, out in (("greedy", greedy([])), ("beam", beam([]))):
        assert all(v.shape[0] == 0 for v in out.values()), (name, {k: v.shape for k, v in out.items()})
    # A batch of 512: row i answers as row i % len(texts) does.
    big = [texts[i % len(texts)] for i in range(512)]
    for name, out in (("greedy", greedy(big)), ("beam", beam(big, 2))):
        assert out["text"].shape == (512,), name
        for i in range(len(texts)):
            assert out["text"][i] == out["text"][i + 5 * len(texts)], (name, i)
    # Eight threads at once get the single-threaded answers.
    jobs = [(i % 2, [texts[(i + j) % len(texts)] for j in range(1 + i % 3)]) for i in range(48)]
    run = lambda job: (beam(job[1], 1 + len(job[1])) if job[0] else greedy(job[1]))["text"]  # noqa: E731
    serial = [run(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(run, jobs))
    for i, (a, b) in enumerate(zip(serial, threaded)):
        assert (a == b).all(), ("thread call", i, a, b)
    np.savez(sys.argv[3], **results)
""")


@pytest.fixture(scope="module")
def tokenizers(dates_data):
    _, _, source, target = dates_data
    return source, target


def translator(kind, tokenizers):
    source, target = tokenizers
    embedding = {} if KINDS[kind].get("attention") == "transformer" else {"embedding_dim": 8}  # its own: units
    config = tfattn.ModelConfig(**embedding, units=8, max_source_length=source.max_length,
                                max_target_length=target.max_length, **KINDS[kind])
    model = tfattn.make_model(config, source.vocab_size, target.vocab_size)
    return tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=target.max_length))


def exported(kind, t, tmp_path_factory):
    """`t` (the seeded `translator(kind)`, the same weights in every test) exported once per session."""
    return str(made_once(tmp_path_factory, f"kind-{kind}", lambda f: export(t, str(f / kind))) / kind)


@pytest.mark.parametrize("kind", PARAMS)
def test_every_kind_serves_without_tfattn(kind, tokenizers, tmp_path, tmp_path_factory):
    t = translator(kind, tokenizers)
    path = exported(kind, t, tmp_path_factory)
    texts = [s.encode("utf-8") if isinstance(s, str) else s for s in MIXED]
    result = tmp_path / "out.npz"
    script = tmp_path / "serve.py"
    script.write_text(FRESH_PROCESS)
    env = {**os.environ, "PYTHONPATH": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, str(script), path, ",".join(s.hex() for s in texts), str(result)],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = np.load(result, allow_pickle=True)
    greedy = t.translate(tf.constant(texts))
    beam = t.translate_beam(tf.constant(texts), tf.constant(3), tf.constant(0.6))
    expected = {**{"greedy_" + k: v.numpy() for k, v in greedy.items()},
                **{"beam_" + k: v.numpy() for k, v in beam.items()}}
    assert_same_outputs({k: fresh[k] for k in fresh.files}, expected, kind)
    # Blank sources get empty translations; the 10,000 characters are cut to the source length.
    assert list(fresh["greedy_text"][2:4]) == [b"", b""] and list(fresh["greedy_length"][2:4]) == [0, 0]
    assert fresh["greedy_input_tokens"].shape[1] == t.source_tokenizer.max_length
    weights = fresh["greedy_attention"]  # (batch, t_out, t_in): rows sum to 1, or 0 past the end
    sums = weights.sum(axis=-1)
    if KINDS[kind]["attention"] == "none":
        assert not weights.any()  # the baseline has no attention: zeros, as documented
    else:
        lengths = fresh["greedy_length"]
        for i, n in enumerate(lengths):
            if KINDS[kind].get("local") == "p":  # Luong eq. 10: the Gaussian is not renormalized
                assert (sums[i, :n] > 0).all() and (sums[i, :n] <= 1 + 1e-5).all(), f"{kind} row {i}"
            else:
                np.testing.assert_allclose(sums[i, :n], 1.0, atol=1e-4, err_msg=f"{kind} row {i}")
            assert not sums[i, n:].any()
    if KINDS[kind].get("hard"):  # one source position per step, exactly
        assert set(np.unique(weights)) <= {0.0, 1.0}


@pytest.mark.parametrize("kind", [pytest.param("transformer"), pytest.param("multihead", marks=pytest.mark.long),
                                  pytest.param("none", marks=pytest.mark.long)])
def test_every_head_through_translate_heads(kind, tokenizers, tmp_path_factory):
    from tfattn.serving.translator import load

    loaded = load(exported(kind, translator(kind, tokenizers), tmp_path_factory))
    if kind == "none":  # one layer of one head (zeros): the signature would repeat `attention`
        assert "translate_heads" not in loaded.signatures
        return
    texts = ["tue 5 march 2019", "", "march 5th 2019"]
    out = {k: v.numpy() for k, v in loaded.signatures["translate_heads"](text=tf.constant(texts)).items()}
    greedy = {k: v.numpy() for k, v in loaded.signatures["translate"](text=tf.constant(texts)).items()}
    assert_same_outputs({k: v for k, v in out.items() if k != "attention_heads"}, greedy, kind)
    heads = out["attention_heads"]  # (batch, layers, heads, t_out, t_in)
    layers = KINDS[kind].get("num_layers", 1) if kind == "transformer" else 1
    assert heads.shape == (3, layers, 2, *out["attention"].shape[1:])
    np.testing.assert_allclose(heads[:, -1].mean(axis=1), out["attention"], atol=1e-5)  # docs/models.md
    for i, n in enumerate(out["length"]):
        np.testing.assert_allclose(heads[i, :, :, :n].sum(axis=-1), 1.0, atol=1e-5)
        assert not heads[i, :, :, n:].any()  # past [END], and every row of the blank text
    assert out["length"][1] == 0
