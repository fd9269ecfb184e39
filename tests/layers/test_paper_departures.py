"""Where the layers depart from the papers on purpose, each departure pinned against the paper's rule
with numbers checkable by hand: the layer gives one thing, the paper another, and the docstrings and
`docs/models.md` ("Where the code departs from the papers") say which and why.

Luong, Pham, Manning 2015 (arXiv 1508.04025), section 3.1-3.2; Vaswani et al. 2017 (arXiv 1706.03762),
section 3.1, 3.4 and 5.4.
"""

import keras
import numpy as np

from attention_oracles import np_aligned_positions, np_local_attention
from tfattn.layers.luong import LuongAttention
from tfattn.layers.transformer import TransformerBlock, TransformerDecoder
from tfattn.model import ModelConfig


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def local_weights(local, window, length, steps):
    """The layer's weights for a zero query (every score 0) over a sentence of `length` real words,
    at target steps `steps`: `(len(steps), length)`."""
    layer = LuongAttention("dot", local=local, window=window)
    query, value = np.zeros((1, len(steps), 4), "float32"), np.ones((1, length, 4), "float32")
    _, weights = layer(query, value, value_mask=np.ones((1, length), bool), query_positions=np.array(steps))
    return to_numpy(weights)[0]


def paper(local, window, length, steps):
    """The paper's weights (the oracle's rule without departures) for the same zero query."""
    query, value = np.zeros((1, len(steps), 4)), np.ones((1, length, 4))
    p = np_aligned_positions(local, query, np.array([float(length)]), np.array(steps), np.zeros((4, 4)),
                             np.zeros(4))
    return np_local_attention(np.zeros((1, len(steps), length)), value, None, local, window, p)[1][0]


def test_local_m_clips_p_t_where_the_papers_window_leaves_the_sentence():
    # S = 7, D = 2, every score 0 (uniform over the window). The paper: the window [t - D, t + D] cut to
    # the sentence: t = 5 -> {3..6}, t = 7 -> {5, 6}, t = 9 -> none (a zero context). The layer clips
    # p_t = t to S - 1 = 6, so from t = 7 on it keeps attending to the last D + 1 words {4, 5, 6}.
    q, t, h = 1 / 4, 1 / 3, 1 / 2
    layer = [[0, 0, 0, q, q, q, q], [0, 0, 0, 0, t, t, t], [0, 0, 0, 0, t, t, t]]
    papers = [[0, 0, 0, q, q, q, q], [0, 0, 0, 0, 0, h, h], [0, 0, 0, 0, 0, 0, 0]]
    np.testing.assert_allclose(local_weights("m", 2, 7, [5, 7, 9]), layer, atol=1e-7)
    np.testing.assert_allclose(paper("m", 2, 7, [5, 7, 9]), papers, atol=1e-12)


def test_local_p_centres_its_window_on_p_t_rounded_half_up():
    # S = 5, D = 1, a zero query: p_t = 5 sigmoid(0) = 2.5, sigma = D / 2, Gaussian exp(-2 (s - 2.5)^2).
    # The paper: positions within D of the real p_t, {2, 3}: softmax 1/2 each, times exp(-0.5).
    # The layer: within D of round(2.5) = 3, {2, 3, 4} (2D + 1 positions, the paper's fixed size of
    # a_t): 1/3 each, times exp(-0.5), exp(-0.5), exp(-4.5); position 4 lies D + 0.5 from p_t.
    a, b = np.exp(-0.5), np.exp(-4.5)
    np.testing.assert_allclose(local_weights("p", 1, 5, [0]), [[0, 0, a / 3, a / 3, b / 3]], rtol=1e-6)
    np.testing.assert_allclose(paper("p", 1, 5, [0]), [[0, 0, a / 2, a / 2, 0]], rtol=1e-12)


def test_the_scaled_dot_score_starts_with_a_gain_the_paper_does_not_have():
    # q = (1, 1, 1, 1), keys (1, 1, 1, 1) and 0: the paper's dot scores are 4 and 0, weights
    # e^4 / (e^4 + 1) = 0.982 and 0.018. ModelConfig scales by default: the gain starts at
    # 1 / sqrt(4), scores 2 and 0, weights e^2 / (e^2 + 1) = 0.881 and 0.119.
    assert ModelConfig().scale is True and ModelConfig().score == "general"
    query, keys = np.ones((1, 1, 4), "float32"), np.array([[[1, 1, 1, 1], [0, 0, 0, 0]]], "float32")
    _, scaled = LuongAttention("dot", scale=True)(query, keys)
    _, unscaled = LuongAttention("dot", scale=False)(query, keys)
    e2, e4 = np.exp(2.0), np.exp(4.0)
    np.testing.assert_allclose(to_numpy(scaled)[0, 0], [e2 / (e2 + 1), 1 / (e2 + 1)], rtol=1e-6)
    np.testing.assert_allclose(to_numpy(unscaled)[0, 0], [e4 / (e4 + 1), 1 / (e4 + 1)], rtol=1e-6)


def silent_block(norm_first):
    """A Transformer encoder block whose self-attention and feed-forward output zeros."""
    block = TransformerBlock(units=4, num_heads=1, ff_dim=4, norm_first=norm_first)
    block.build((1, 2, 4))
    for variable in (block.self_attention.output_kernel, block.ff_out.kernel, block.ff_out.bias):
        variable.assign(np.zeros(variable.shape, "float32"))
    return block


def test_the_transformer_normalizes_before_each_sublayer_not_after():
    # Sublayers that output zeros: pre-norm, x + sublayer(LayerNorm(x)), gives x back, (1, 2, 3, 4); the
    # paper's post-norm (section 3.1), LayerNorm(x + sublayer(x)), gives x standardized: mean 2.5,
    # variance 1.25, (x - 2.5) / sqrt(1.25) = (-1.342, -0.447, 0.447, 1.342). (Two steps, the second
    # x reversed, so that the self-attention's softmax has two positions.)
    x = np.array([[[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]]], "float32")
    positions = np.array([[0, 1]], "int32")
    pre, _, _ = silent_block(norm_first=True)(x, positions)
    post, _, _ = silent_block(norm_first=False)(x, positions)
    np.testing.assert_allclose(to_numpy(pre), x, atol=1e-6)
    np.testing.assert_allclose(to_numpy(post), (x - 2.5) / np.sqrt(1.25), atol=1e-5)
    assert TransformerBlock(4, 1, 4).norm_first and TransformerDecoder(10, 8).norm_first  # the default


def test_the_transformer_decoder_does_not_tie_its_output_projection_to_its_embedding():
    # Section 3.4 shares one matrix E (vocab, units) between the embedding and the pre-softmax
    # projection: logits = x E^T. Here the projection has its own kernel (units, vocab) and bias.
    decoder = TransformerDecoder(vocab_size=10, units=8, num_heads=2, num_layers=1)
    decoder.build((1, 3), (1, 4, 8))
    embedding, kernel = decoder.embedding.embeddings, decoder.logits_dense.kernel
    assert tuple(embedding.shape) == (10, 8) and tuple(kernel.shape) == (8, 10)
    assert kernel is not embedding and decoder.logits_dense.use_bias
    assert not np.allclose(to_numpy(kernel), to_numpy(embedding).T)
    assert [tuple(w.shape) for w in decoder.trainable_weights].count((8, 10)) == 1  # E^T is not among them


def test_the_transformer_decoder_drops_out_before_its_logits():
    # The paper's dropout (section 5.4) is on each sublayer's output and on the embedding sums; the
    # decoder here also drops its last hidden vector before the projection. With the projection set
    # to the identity (units = vocab = 8, bias 0), dropout 0.5 zeroes about half of the logits in
    # training, and none when translating (a layer-normed vector has no exact zeros).
    keras.utils.set_random_seed(0)
    decoder = TransformerDecoder(vocab_size=8, units=8, num_heads=2, num_layers=1, dropout=0.5)
    target, memory = np.array([[2, 5, 6, 7, 3]] * 2), np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
    decoder(target, memory)  # builds
    decoder.logits_dense.kernel.assign(np.eye(8, dtype="float32"))
    decoder.logits_dense.bias.assign(np.zeros(8, "float32"))
    zeros_training = (to_numpy(decoder(target, memory, training=True)[0]) == 0).mean()
    zeros_inference = (to_numpy(decoder(target, memory, training=False)[0]) == 0).mean()
    assert zeros_inference == 0 and 0.3 < zeros_training < 0.7, (zeros_training, zeros_inference)
