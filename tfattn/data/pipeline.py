"""The `tf.data` input pipeline: string pairs -> padded id batches of similar lengths.

    (source, target) strings
      -> tokenize in graph (tfattn.data.text.Tokenizer)      id rows with [START] ... [END]
      -> drop pairs longer than the tokenizers' max_length (instead of truncating training targets)
      -> cache: later epochs do not tokenize again      (tokenize_pairs)
      -> shuffle, then bucket: sort pools of rows by length, cut them into batches, shuffle those
      -> prefetch                                       (batch_rows)

Bucketing keeps sentence pairs of similar lengths together, so that few of the tokens a batch
computes on are padding; `padding_fraction` measures that share on the target side. It sorts
pools of `pool_batches * batch_size` shuffled rows by target length, then source length, and cuts
each pool into full batches, so only an epoch's last batch may be short. (Binning pairs by length
instead would end every bin with a partial batch, and a short batch costs most of a full step on
a CPU, whose time goes to serial chains of small ops.)
"""

import dataclasses

import numpy as np
import tensorflow as tf

# tf.data traces each function given to map, filter, flat_map and reduce, by default through
# autograph's rewrite; these are straight-line code (as the package's tf.functions, docs/api.md),
# traced as written.
_as_written = tf.autograph.experimental.do_not_convert


@dataclasses.dataclass
class DataConfig:
    """How batches are made.

    Attributes:
        batch_size: sentences per batch.
        bucket: batch pairs of similar lengths together: pools of `pool_batches * batch_size`
            shuffled pairs are sorted by target length, then source length, and cut into batches,
            which are shuffled (a pool's worth at a time). Bucketing reorders sentences, so it
            applies to shuffled (training) datasets only. Only an epoch's last batch may be short.
        pool_batches: batches per sorted pool. Larger pools pad less but mix the corpus more
            coarsely.
        shuffle_buffer: size of the shuffle buffer; None (the default): every row of the split, a
            uniform shuffle each epoch (the rows are cached in memory, and the buffer holds
            references to them). A smaller buffer only mixes rows that are near each other, and a
            corpus sorted by length (spa-eng's file is) then trains short sentences first and long
            ones last in every epoch. 0: no shuffling.
        seed: shuffle seed.
        pad_to_multiple: pad each batch's source and target lengths up to a multiple of this
            (never beyond the tokenizers' `max_length`), so that batches come in few shapes: XLA
            (`TrainConfig.jit_compile`) compiles the step once per shape. 1: no extra padding.
    """

    batch_size: int = 64
    bucket: bool = True
    pool_batches: int = 200
    shuffle_buffer: int | None = None
    seed: int = 0
    pad_to_multiple: int = 1

    def __post_init__(self):
        for name in ("batch_size", "pool_batches", "pad_to_multiple"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int. Received: {name}={value!r}")
        buffer = self.shuffle_buffer
        if buffer is not None and (isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 0):
            raise ValueError(f"shuffle_buffer must be an int >= 0 or None (every row). Received: shuffle_buffer={buffer!r}")


def make_dataset(pairs, source_tokenizer, target_tokenizer, config=None, shuffle=True, repeat=False):
    """Builds batches of `(source_ids, target_ids)` from string pairs.

    Args:
        pairs: list of `(source, target)` str pairs.
        source_tokenizer, target_tokenizer: `tfattn.data.text.Tokenizer`s.
        config: `DataConfig`; defaults to `DataConfig()`.
        shuffle: bool. Shuffle before batching (training) or keep the order (evaluation).
        repeat: bool. Repeat forever.

    Returns:
        A `tf.data.Dataset` of `(source (batch, t_in), target (batch, t_out))` int32 tensors, both
        right-padded with 0; targets include `[START]` and `[END]`.
    """
    rows = tokenize_pairs(pairs, source_tokenizer, target_tokenizer)
    limits = (source_tokenizer.max_length, target_tokenizer.max_length)
    return batch_rows(rows, config, shuffle=shuffle, repeat=repeat, max_lengths=limits)


def tokenize_pairs(pairs, source_tokenizer, target_tokenizer):
    """String pairs -> a dataset of id rows `(source (t_in,), target (t_out + 1,))`, cached.

    Pairs with a side longer than its tokenizer's `max_length` are dropped, not truncated. The
    text is tokenized on the first full pass and read from memory on later ones, so a training
    run tokenizes its corpus once, however many epochs it batches it into.
    """
    if not pairs:
        raise ValueError("pairs is empty: there is nothing to batch. Received: pairs=[]")
    sources, targets = (list(side) for side in zip(*pairs))
    ds = tf.data.Dataset.from_tensor_slices((sources, targets)).batch(1024)
    tokenize = _as_written(_tokenizer_fn(source_tokenizer, target_tokenizer))
    ds = ds.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
    # rows of a ragged batch come out as plain 1-D tensors
    ds = ds.unbatch().map(_as_written(lambda s, t: (s, t)))
    ds = ds.filter(_as_written(lambda s, t: (tf.size(s) <= source_tokenizer.max_length)  # not truncated
                               & (tf.size(t) <= target_tokenizer.max_length)))
    return ds.cache()


def with_count(rows, count):
    """`rows` with its number of rows, `count` (from `count_rows`), known to tf.data: a whole-split
    shuffle in `batch_rows` then needs no counting pass of its own."""
    return rows.apply(tf.data.experimental.assert_cardinality(count))


def count_rows(rows):
    """The number of rows in a dataset of rows (from `tokenize_pairs`); a first pass fills its cache."""
    return int(rows.reduce(tf.constant(0, tf.int64), _as_written(lambda n, *_: n + 1)))


def too_long(pairs, source_tokenizer, target_tokenizer):
    """The pairs `tokenize_pairs` drops as longer than `max_length`: `(by source, by target, in all)`."""
    over = []
    for side, tokenizer in enumerate((source_tokenizer, target_tokenizer)):
        texts = [pair[side] for pair in pairs]
        lengths = [tokenizer.split(texts[i : i + 4096]).row_lengths().numpy() for i in range(0, len(texts), 4096)]
        over.append(np.concatenate(lengths) + 2 > tokenizer.max_length)  # + [START] and [END]
    return int(over[0].sum()), int(over[1].sum()), int((over[0] | over[1]).sum())


def batch_rows(rows, config=None, shuffle=True, repeat=False, max_lengths=None):
    """Id rows (from `tokenize_pairs`) -> shuffled, bucketed, padded, prefetched batches.

    Without `shuffle` the rows keep their order and are padded in batches as they come.
    `max_lengths`: `(source, target)` lengths that `config.pad_to_multiple` pads no batch beyond.
    """
    config = config or DataConfig()
    if shuffle and config.shuffle_buffer != 0:
        buffer = config.shuffle_buffer
        if buffer is None:  # every row: a uniform shuffle
            known = int(rows.cardinality())  # -2 (unknown) after tokenize_pairs' filter
            buffer = known if known >= 0 else count_rows(rows)
        rows = rows.shuffle(max(buffer, 1), seed=config.seed, reshuffle_each_iteration=True)
    if repeat:
        rows = rows.repeat()
    batches = _bucket(rows, config) if shuffle and config.bucket else _pad(rows, config.batch_size)
    if config.pad_to_multiple > 1:
        limits = max_lengths or (None, None)
        multiple = config.pad_to_multiple
        batches = batches.map(_as_written(lambda source, target: (_round_up(source, multiple, limits[0]),
                                                                  _round_up(target, multiple, limits[1]))))
    # tf.data's autotuning is off: batches made from rows in memory gain nothing from it, and its
    # model thread, which deleting an iterator waits for, kept an epoch's end waiting for seconds
    # (it models every pool's own dataset). `prefetch` keeps two batches ready.
    options = tf.data.Options()
    options.autotune.enabled = False
    return batches.prefetch(2).with_options(options)


def _round_up(batch, multiple, limit=None):
    """`batch (n, t)` right-padded with 0 to the next multiple of `multiple` columns (at most `limit`)."""
    length = tf.shape(batch)[1]
    padded = (length + multiple - 1) // multiple * multiple
    if limit is not None:
        padded = tf.maximum(tf.minimum(padded, limit), length)
    return tf.pad(batch, [[0, 0], [0, padded - length]])


def _pad(rows, batch_size):
    return rows.padded_batch(batch_size, padded_shapes=([None], [None]))


def _tokenizer_fn(source_tokenizer, target_tokenizer):
    def ids(tokenizer, texts):
        # One spare slot, so that a sentence longer than max_length can be seen and dropped.
        return tokenizer.lookup(tokenizer.tokenize(texts, max_length=tokenizer.max_length + 1))

    return lambda source, target: (ids(source_tokenizer, source), ids(target_tokenizer, target))


def _bucket(rows, config):
    """Shuffled rows -> batches of similar lengths: sorted pools cut into batches, then shuffled."""
    size, pool = config.batch_size, config.pool_batches

    def batches_of(source, target):  # one pool, padded: (n, s_max), (n, t_max)
        s_len = tf.math.count_nonzero(source, axis=1, dtype=tf.int32)  # (n,); padding is the only id 0
        t_len = tf.math.count_nonzero(target, axis=1, dtype=tf.int32)  # (n,)
        order = tf.argsort(t_len * (tf.shape(source)[1] + 1) + s_len, stable=True)  # by t_len, then s_len
        pool_rows = tuple(tf.gather(x, order) for x in (source, target, s_len, t_len))
        return tf.data.Dataset.from_tensor_slices(pool_rows).batch(size).map(_as_written(_trim))

    pools = rows.padded_batch(size * pool, padded_shapes=([None], [None]))
    return pools.flat_map(_as_written(batches_of)).shuffle(pool, seed=config.seed)


def _trim(source, target, s_len, t_len):
    """A batch cut from a padded pool, without the columns that are padding in every row."""
    return source[:, : tf.reduce_max(s_len)], target[:, : tf.reduce_max(t_len)]


def padding_fraction(dataset, max_batches=None, side="target"):
    """Share of padding among the target (or source) tokens of the batches.

    On the target side it counts `target[:, 1:]`, the positions the loss is computed on; with
    `side="source"`, every source position (the encoder's and the attention's work).
    """
    if side not in ("source", "target"):
        raise ValueError(f"side must be 'source' or 'target'. Received: side={side!r}")
    pad = total = 0
    for i, (source, target) in enumerate(dataset):
        if max_batches is not None and i >= max_batches:
            break
        t = target.numpy()[:, 1:] if side == "target" else source.numpy()
        pad += int(np.sum(t == 0))
        total += t.size
    return pad / total if total else 0.0
