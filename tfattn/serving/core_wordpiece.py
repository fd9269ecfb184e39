"""WordPiece splitting in core TensorFlow ops: the pieces tensorflow-text's `WordpieceTokenizer` gives,
without its op, so that an export of a WordPiece model runs where tensorflow-text's kernels are
missing (docs/serving.md, section 2).

The rule (tensorflow-text's, after BERT's): each word is split greedily, longest match first. The
longest prefix of the word that is in the vocabulary is the first piece; of what remains, the longest
prefix that is in the vocabulary with the suffix indicator (`##`) before it is the next piece; and so
on. If some remainder has no such prefix, or the word is longer than `max_bytes` bytes, the whole
word is one unknown token. Pieces end on character boundaries (UTF-8 code points).

How, in core ops: one loop, a step per piece. At each step every word still being split looks up all
its candidates at once, the substrings from where it stands to each character boundary at most
`longest_piece` characters later, and moves to the end of the longest one found (`(words,
longest_piece)` lookups a step). The loop ends when every word is split or unknown: after as many
steps as the most pieces a word of the batch has, never more than its longest word's characters.
"""

import tensorflow as tf


def wordpiece_split(words, table, suffix="##", unknown="[UNK]", max_bytes=100, longest_piece=None):
    """The WordPiece pieces of each word, as tensorflow-text's `WordpieceTokenizer.tokenize` with
    `token_out_type=tf.string` gives them.

    Args:
        words: `tf.Tensor` of shape `(n,)` or `tf.RaggedTensor` of `tf.string`, valid UTF-8 words.
        table: a `tf.lookup` table from piece to int64 id, -1 (or less) for a piece not in the
            vocabulary.
        suffix: str. Written before a piece that continues a word. Defaults to `"##"`.
        unknown: str. The token of a word that cannot be split. Defaults to `"[UNK]"`.
        max_bytes: int. A longer word is `unknown`. Defaults to 100, tensorflow-text's default.
        longest_piece: int or None. No key of `table` has more characters than this (the suffix
            counted), so longer substrings are not looked up. Defaults to `None`: every substring.

    Returns:
        `tf.RaggedTensor` of `tf.string`: `words`' shape with one more ragged dimension, the pieces.

    Example:

    >>> keys = tf.constant(["un", "##aff", "##able", "a"])
    >>> table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, tf.range(4, dtype=tf.int64)), -1)
    >>> wordpiece_split(tf.constant(["unaffable", "ab"]), table).to_list()
    [[b'un', b'##aff', b'##able'], [b'[UNK]']]
    """
    if isinstance(words, tf.RaggedTensor):
        return words.with_flat_values(wordpiece_split(words.flat_values, table, suffix, unknown, max_bytes,
                                                      longest_piece))
    words = tf.convert_to_tensor(words, tf.string)
    # Each distinct word once; a word that is itself in the vocabulary is its own single piece (its
    # longest prefix in the vocabulary is all of it), so only the others are walked piece by piece.
    distinct, index = tf.unique(words)
    sizes = tf.strings.length(distinct)  # bytes
    too_long = sizes > max_bytes  # unknown whatever its pieces
    whole = (table.lookup(distinct) >= 0) & ~too_long
    rest = tf.cast(tf.where(~whole & ~too_long)[:, 0], tf.int32)
    pieces, failed = _longest_first(tf.gather(distinct, rest), table, suffix, longest_piece)
    # Each distinct word's row: itself if whole, [UNK] if unknown, else its pieces (the rows of
    # `pieces` put back in place: row 0 below is empty, for the words not split).
    unknown_word = tf.scatter_nd(rest[:, None], failed, tf.shape(distinct)) | too_long
    none = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.string), tf.zeros([1], tf.int64))
    place = tf.scatter_nd(rest[:, None], tf.range(1, tf.size(rest) + 1), tf.shape(distinct))
    rows = tf.concat([
        tf.RaggedTensor.from_row_lengths(tf.boolean_mask(distinct, whole), tf.cast(whole, tf.int64)),
        tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(tf.cast(unknown_word, tf.int32))], unknown),
                                         tf.cast(unknown_word, tf.int64)),
        tf.gather(tf.concat([none, pieces], axis=0), place)], axis=1)
    return tf.gather(rows, index)


def _longest_first(words, table, suffix, longest_piece):
    """The pieces of `words (n,)`, longest match first: `(pieces (n, (pieces)), failed (n,))`, where a
    failed word (a remainder that no piece starts) has none."""
    starts = tf.strings.unicode_decode_with_offsets(words, "UTF-8")[1]  # (n, (chars)): byte offsets
    chars = tf.cast(starts.row_lengths(), tf.int32)  # (n,)
    # The character boundaries of each word, its end included: (n, L + 1), zero-padded (a padded
    # boundary only ends pieces that `inside` below leaves out), and one column more, so that no
    # words still give a column.
    bounds = tf.concat([tf.cast(starts, tf.int32), tf.expand_dims(tf.strings.length(words), 1)], axis=1)
    bounds = tf.pad(bounds.to_tensor(), [[0, 0], [0, 1]])
    last = tf.maximum(tf.shape(bounds)[1] - 2, 0)  # L, the longest word's characters
    width = last if longest_piece is None else tf.minimum(last, longest_piece)
    lengths = tf.range(1, width + 1)[None, :]  # (1, B): the lengths of piece looked up, in characters
    n = tf.shape(words)[0]

    def step(t, at, failed, pieces, moves):
        # Each word's longest piece from character `at`: its B candidates looked up at once.
        active = (at < chars) & ~failed  # (n,)
        ends = at[:, None] + lengths  # (n, B)
        inside = active[:, None] & (ends <= chars[:, None])
        begin = tf.gather(bounds, at, batch_dims=1)[:, None]  # (n, 1) bytes
        size = tf.where(inside, tf.gather(bounds, tf.minimum(ends, last), batch_dims=1) - begin, 0)
        piece = tf.strings.substr(tf.broadcast_to(words[:, None], tf.shape(size)),
                                  tf.broadcast_to(begin, tf.shape(size)), size)
        prefix = tf.broadcast_to(tf.where(at > 0, suffix, "")[:, None], tf.shape(piece))
        keys = tf.strings.join([prefix, piece])  # (n, B)
        longest = tf.reduce_max(tf.where(inside & (table.lookup(keys) >= 0), lengths, 0), axis=1)  # 0: none
        moved = active & (longest > 0)
        pieces = tf.concat([pieces, tf.gather(keys, tf.maximum(longest - 1, 0), batch_dims=1)[:, None]], axis=1)
        moves = tf.concat([moves, moved[:, None]], axis=1)
        return t + 1, tf.where(moved, at + longest, at), failed | (active & ~moved), pieces, moves

    def going(t, at, failed, *_):
        return (t < last) & tf.reduce_any((at < chars) & ~failed)

    start = (0, tf.zeros([n], tf.int32), tf.zeros([n], tf.bool), tf.fill([n, 0], ""), tf.zeros([n, 0], tf.bool))
    columns = tf.TensorShape([None, None])  # pieces, moves: a column a step
    _, _, failed, pieces, moves = tf.while_loop(  # at most L steps, one per piece
        going, step, start, shape_invariants=(tf.TensorShape([]), *(tf.TensorShape([None]),) * 2, columns, columns))
    return tf.ragged.boolean_mask(pieces, moves & ~failed[:, None]), failed  # no pieces for a failed word


class CoreWordpiece(tf.Module):
    """`wordpiece_split` with its table, in the place of tensorflow-text's `WordpieceTokenizer` in a
    `tfattn.data.text.Tokenizer` (`tokenize(words)`, words ragged or dense, pieces one dimension more).

    Args:
        table: as `wordpiece_split`'s.
        longest_piece: int. The characters of the vocabulary's longest entry.
        suffix, unknown: as `wordpiece_split`'s.
    """

    def __init__(self, table, longest_piece, suffix="##", unknown="[UNK]", name=None):
        super().__init__(name=name)
        self.table = table
        self.longest_piece = int(longest_piece)
        self.suffix, self.unknown = suffix, unknown

    def tokenize(self, words):
        return wordpiece_split(words, self.table, self.suffix, self.unknown, longest_piece=self.longest_piece)
