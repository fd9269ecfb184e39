"""Word alignments from attention: the source token each output token attends to most.

A translator returns, for each sentence, `input_tokens` (`[START]`, the source tokens, `[END]`, then
"" padding), `tokens` (the output tokens, `[END]` included unless the length limit came first, then
"" padding) and `attention` `(t_out, t_in)`, row `j` holding the weights over the source positions
with which output token `j` was chosen. Two uses of its argmax over the source:

- `alignment_pairs` and `pharaoh` (NumPy, for `tfattn translate --alignments`): the alignment in
  Pharaoh format, `"i-j"` pairs for source token `i` and output token `j`.
- `replace_unknown` (TensorFlow, inside the exported graph for `Translator(replace_unknown=True)`):
  each output `[UNK]` becomes the source token it attends to most, as OpenNMT-tf's
  `replace_unknown_target` does (Luong et al. 2015, "Addressing the Rare Word Problem in Neural
  Machine Translation", arXiv 1410.8206, without its dictionary).

Which tokens count: the real tokens only, numbered from 0. On the source side, `input_tokens`
without `[START]`, `[END]` and padding, so source token `i` is `input_tokens[i + 1]`; the argmax
is taken over these positions only (attention on a marker never aligns). On the output side,
`tokens` up to, without, `[END]` and padding, so output token `j` is `tokens[j]`. These are the
tokenizer's tokens: words and punctuation marks at the word level, characters at the char level,
pieces at the wordpiece level. Ties go to the lower source index.
"""

import numpy as np
import tensorflow as tf

from tfattn.ids import END, PAD, UNK


def alignment_pairs(attention, source_length, target_length):
    """The alignment of one sentence: for each output token, the source token of largest weight.

    Args:
        attention: float array `(t_out, t_in)`, one sentence's attention as a translator returns it:
            column 0 is `[START]`, columns `1 .. source_length` are the source tokens, then `[END]`
            and padding; row `j` is output token `j`.
        source_length: int. Real source tokens (markers and padding not counted).
        target_length: int. Real output tokens (`[END]` and padding not counted).

    Returns:
        list of `(i, j)` int pairs, one per output token in order (`j = 0 .. target_length - 1`),
        `i` the argmax of row `j` over the source tokens (the lower index on ties); `[]` when the
        source has no real token.

    Example:

    >>> alignment_pairs([[0.1, 0.2, 0.7, 0.0], [0.0, 0.5, 0.5, 0.0], [0, 0, 0, 0]], 2, 2)
    [(1, 0), (0, 1)]
    """
    attention = np.asarray(attention)
    if attention.ndim != 2:
        raise ValueError(f"attention must be (t_out, t_in), one sentence's. Received: shape {attention.shape}")
    t_out, t_in = attention.shape
    if not 0 <= source_length <= t_in - 2:
        raise ValueError(f"source_length must be in [0, t_in - 2] ([START] and [END] take two columns), "
                         f"t_in = {t_in}. Received: source_length={source_length!r}")
    if not 0 <= target_length <= t_out:
        raise ValueError(f"target_length must be in [0, t_out], t_out = {t_out}. "
                         f"Received: target_length={target_length!r}")
    if source_length == 0:
        return []
    source = attention[:target_length, 1 : 1 + source_length]  # (target_length, source_length)
    return [(int(i), j) for j, i in enumerate(np.argmax(source, axis=1))]  # argmax: the first of equals


def pharaoh(pairs):
    """`[(i, j), ...]` -> `"i-j i-j ..."`, the Pharaoh format of word alignments ("" for none)."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def real_lengths(input_tokens, tokens):
    """`(source_length, target_length)`: the real tokens of one sentence's `input_tokens` and `tokens`
    (str or bytes arrays as a translator returns them), as `alignment_pairs` counts them."""
    source = [t for t in _as_str(input_tokens) if t != PAD]
    target = [t for t in _as_str(tokens) if t != PAD]
    if target and target[-1] == END:
        target.pop()
    return max(len(source) - 2, 0), len(target)


def _as_str(tokens):
    return [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t) for t in np.asarray(tokens)]


def sentence_alignment(attention, input_tokens, tokens):
    """One sentence's translator outputs -> its Pharaoh alignment string, e.g. `"0-0 2-1 1-2"`."""
    return pharaoh(alignment_pairs(attention, *real_lengths(input_tokens, tokens)))


def attended_source_tokens(attention, input_tokens):
    """The source token each output step attends to most, in the graph.

    Args:
        attention: float32 `(batch, t_out, t_in)`.
        input_tokens: string `(batch, t_in)`: `[START]`, the source tokens, `[END]`, "" padding.

    Returns:
        string `(batch, t_out)`: the real source token (markers excluded) of largest weight in each
        row, the lower position on ties; "" for every row of a sentence with no real source token.
    """
    t_in = tf.shape(input_tokens)[1]
    length = tf.reduce_sum(tf.cast(input_tokens != PAD, tf.int32), axis=1)  # (batch,), markers included
    position = tf.range(t_in)  # (t_in,)
    real = (position[None, :] >= 1) & (position[None, :] < length[:, None] - 1)  # (batch, t_in)
    weights = tf.where(real[:, None, :], attention, -np.inf)  # (batch, t_out, t_in)
    best = tf.reduce_max(weights, axis=2, keepdims=True)  # (batch, t_out, 1)
    # The first position holding the maximum (tf.argmax does not promise which one of equals).
    first = tf.reduce_min(tf.where(weights == best, position, t_in), axis=2)  # (batch, t_out)
    chosen = tf.gather(input_tokens, tf.minimum(first, t_in - 1), batch_dims=1)  # (batch, t_out)
    return tf.where(tf.reduce_any(real, axis=1)[:, None], chosen, PAD)


def replace_unknown(tokens, attention, input_tokens):
    """Output tokens with each `[UNK]` replaced by the source token it attends to most, in the graph.

    Args:
        tokens: string `(batch, t_out)`, output tokens.
        attention: float32 `(batch, t_out, t_in)`.
        input_tokens: string `(batch, t_in)`: `[START]`, the source tokens, `[END]`, "" padding.

    Returns:
        string `(batch, t_out)`: `tokens`, where `[UNK]` is replaced by `attended_source_tokens`
        (kept when the sentence has no real source token).
    """
    source = attended_source_tokens(attention, input_tokens)  # (batch, t_out)
    return tf.where((tokens == UNK) & (source != PAD), source, tokens)
