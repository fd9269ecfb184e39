"""WordPiece splitting in core TensorFlow ops: the pieces tensorflow-text's `WordpieceTokenizer` gives,
without its op, so that an export of a WordPiece model can run where tensorflow-text's kernels are
missing (docs/serving.md, section 2).

The rule (tensorflow-text's, after BERT's): each word is split greedily, longest match first. The
longest prefix of the word that is in the vocabulary is the first piece; of what remains, the longest
prefix that is in the vocabulary with the suffix indicator (`##`) before it is the next piece; and so
on. If some remainder has no such prefix, or the word is longer than `max_bytes` bytes, the whole
word is one unknown token. Pieces end on character boundaries (UTF-8 code points).

How, in core ops: every substring of every word, from a character boundary to a later one, is looked
up at once (`(words, L + 1, L + 1)` lookups for words of at most L characters); then one loop of at
most L steps walks each word from its start to the end of its longest piece there.
"""

import tensorflow as tf


def wordpiece_split(words, table, suffix="##", unknown="[UNK]", max_bytes=100):
    """The WordPiece pieces of each word, as tensorflow-text's `WordpieceTokenizer.tokenize` with
    `token_out_type=tf.string` gives them.

    Args:
        words: `tf.Tensor` of shape `(n,)` or `tf.RaggedTensor` of `tf.string`, valid UTF-8 words.
        table: a `tf.lookup` table from piece to int64 id, -1 (or less) for a piece not in the
            vocabulary.
        suffix: str. Written before a piece that continues a word. Defaults to `"##"`.
        unknown: str. The token of a word that cannot be split. Defaults to `"[UNK]"`.
        max_bytes: int. A longer word is `unknown`. Defaults to 100, tensorflow-text's default.

    Returns:
        `tf.RaggedTensor` of `tf.string`: `words`' shape with one more ragged dimension, the pieces.

    Example:

    >>> keys = tf.constant(["un", "##aff", "##able", "a"])
    >>> table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, tf.range(4, dtype=tf.int64)), -1)
    >>> wordpiece_split(tf.constant(["unaffable", "ab"]), table).to_list()
    [[b'un', b'##aff', b'##able'], [b'[UNK]']]
    """
    if isinstance(words, tf.RaggedTensor):
        return words.with_flat_values(wordpiece_split(words.flat_values, table, suffix, unknown, max_bytes))
    words = tf.convert_to_tensor(words, tf.string)
    sizes = tf.strings.length(words)  # bytes
    words = tf.where(sizes > max_bytes, "", words)  # unknown whatever its pieces: none looked up
    starts = tf.strings.unicode_decode_with_offsets(words, "UTF-8")[1]  # (n, (chars)): byte offsets
    chars = tf.cast(starts.row_lengths(), tf.int32)  # (n,)
    # The character boundaries of each word, its end included: (n, L + 1), zero-padded (a padded
    # boundary only starts or ends pairs that `ok` below leaves out, at length 0).
    bounds = tf.concat([tf.cast(starts, tf.int32), tf.expand_dims(tf.strings.length(words), 1)], axis=1)
    bounds = bounds.to_tensor()
    positions = tf.range(tf.shape(bounds)[1])
    begin, end = bounds[:, :, None], bounds[:, None, :]  # (n, L + 1, 1) and (n, 1, L + 1)
    ok = (positions[:, None] < positions[None, :])[None] & (positions[None, None, :] <= chars[:, None, None])
    length = tf.where(ok, end - begin, 0)
    text = tf.broadcast_to(words[:, None, None], tf.shape(length))
    piece = tf.strings.substr(text, tf.broadcast_to(begin, tf.shape(length)), length)
    prefix = tf.where(positions > 0, suffix, "")[None, :, None]
    keys = tf.strings.join([tf.broadcast_to(prefix, tf.shape(piece)), piece])  # keys[w, i, j]: piece i..j
    known = ok & (table.lookup(keys) >= 0)

    n = tf.shape(words)[0]
    steps = tf.maximum(tf.shape(bounds)[1] - 1, 0)
    columns = tf.range(steps)[None, :]

    def step(t, at, failed, ends):
        active = (at < chars) & ~failed
        row = tf.gather(known, at, batch_dims=1)  # (n, L + 1): which ends make a piece from `at`
        longest = tf.reduce_max(tf.where(row, positions[None, :], -1), axis=1)
        failed |= active & (longest < 0)
        moved = active & (longest >= 0)
        ends = tf.where(columns == t, tf.where(moved, longest, -1)[:, None], ends)
        return t + 1, tf.where(moved, longest, at), failed, ends

    start = (0, tf.zeros([n], tf.int32), tf.zeros([n], tf.bool), tf.fill([n, steps], -1))
    _, _, failed, ends = tf.while_loop(lambda t, *_: t < steps, step, start)  # ends: (n, steps), -1 after the last
    begins = tf.concat([tf.zeros([n, 1], tf.int32), ends], axis=1)[:, :steps]  # each piece from the last end
    pairs = tf.maximum(tf.stack([begins, ends], axis=-1), 0)
    unknown_word = failed | (sizes > max_bytes)
    kept = (ends >= 0) & ~unknown_word[:, None]
    pieces = tf.ragged.boolean_mask(tf.gather_nd(keys, pairs, batch_dims=1), kept)
    count = tf.reduce_sum(tf.cast(unknown_word, tf.int32))
    unknowns = tf.RaggedTensor.from_row_lengths(tf.fill([count], unknown), tf.cast(unknown_word, tf.int64))
    return tf.concat([unknowns, pieces], axis=1)  # each word's row: [UNK] or its pieces
