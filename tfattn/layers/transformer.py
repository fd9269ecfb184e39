"""The Transformer (Vaswani et al. 2017): a self-attention encoder and a decoder with causal
self-attention, cross-attention and a key/value cache, in the package's encoder/decoder contracts.

    TransformerEncoder(source) -> (outputs, {"h": masked mean of outputs}, mask)     as `Encoder`
    TransformerDecoder(target_in, outputs, state, mask) -> (logits, attention)       as `Decoder`
    TransformerDecoder.step(token, state, memory) -> (logits, weights, state)        as `Decoder.step`

so `Seq2Seq(TransformerEncoder(...), TransformerDecoder(...))` is the Transformer, trained by the
same train step and decoded by the same loop, and the RNN `Decoder` can attend over a
`TransformerEncoder` too.

Each block is `x + Dropout(sublayer(LayerNorm(x)))` per sublayer (`norm_first=True`, the default, with
a final `LayerNorm`), or the paper's `LayerNorm(x + Dropout(sublayer(x)))` (`norm_first=False`).

Where it departs from the paper, on purpose (`docs/models.md`, "Where the code departs from the
papers"; `tests/layers/test_paper_departures.py` pins each against the paper's rule):

- Pre-norm by default. Normalizing first keeps the gradients at the first layers well scaled and
  trains with a short warm-up or none (Xiong et al. 2020, arXiv 2002.04745); the paper's post-norm
  needs its long warm-up (section 5.3: 4,000 steps). Runs of the package warm up models with
  multi-head attention for 1,000 steps by default all the same (`tfattn.runs.config.WARMUP_MULTIHEAD`,
  `--warmup-steps`), which the Transformer needed at the recipe's learning rate.
- No tying. Section 3.4 shares one matrix among the two embeddings and the pre-softmax projection
  (over one shared vocabulary); here the decoder's projection `logits_dense` is a `Dense` layer of
  its own, with a bias, like the RNN decoders' output layer, and the two sides keep their own
  vocabularies. The embeddings are multiplied by `sqrt(units)`, as in section 3.4.
- One more dropout. Besides the paper's dropout on each sublayer's output and on the embedding sums
  (section 5.4), the decoder drops out its last hidden vector before the projection to the vocabulary.

The decoder's `step` keeps the keys and values of every step it has seen in a cache of fixed size
`(rows, heads, max_length, key_dim)` per layer: step `p` writes slot `p` and attends over slots
`0..p`, so the shapes never change inside `tf.while_loop` and each row can be gathered for beam
search. Stepping `t_out` times gives what teacher forcing gives (a test checks it).
"""

import math

import keras
from keras import ops

from tfattn.layers.checks import ShapeChecker, positive_int, rate, refuse_unused, token_ids
from tfattn.layers.multihead import MultiHeadAttention, causal_mask, renamed_heads
from tfattn.layers.options import POSITIONS
from tfattn.layers.positions import LearnedPositions, SinusoidalPositions, default_positions
from tfattn.layers.tied import add_bias, tied_logits


def check_sizes(units, num_heads, positions, ff_dim):
    """The shared argument checks; returns `ff_dim` (default `4 * units`)."""
    if units % num_heads:
        raise ValueError(f"num_heads must divide units: {units} is not a multiple of {num_heads}. "
                         f"Received: units={units}, num_heads={num_heads}")
    if positions not in POSITIONS:
        raise ValueError(f"positions must be one of {POSITIONS}. Received: positions={positions!r}")
    return 4 * units if ff_dim is None else positive_int("ff_dim", ff_dim)


def absolute_positions(kind, max_length, dtype):
    """The layer that adds absolute positions to the embeddings, or None (relative or none)."""
    if kind == "sinusoidal":
        return SinusoidalPositions(name="positions", dtype=dtype)
    if kind == "learned":
        return LearnedPositions(max_length, name="positions", dtype=dtype)
    return None


@keras.saving.register_keras_serializable(package="tfattn")
class TransformerBlock(keras.layers.Layer):
    """One encoder block (self-attention, feed-forward) or, with `cross=True`, one decoder block
    (causal self-attention, cross-attention, feed-forward); each sublayer with a residual, layer
    norm and dropout. Built and called by `TransformerEncoder` and `TransformerDecoder`.

    Args:
        units: int. Model size. num_heads: int. Heads of each attention (must divide `units`).
        ff_dim: int. Hidden size of the feed-forward sublayer.
        cross: bool. A decoder block. Defaults to `False`.
        relative_clip: int or None. Relative positions in the self-attention. Defaults to `None`.
        dropout: float. Residual dropout. Defaults to `0.0`.
        norm_first: bool. Layer norm before each sublayer rather than after. Defaults to `True`.
        **kwargs: base layer arguments.

    Call arguments:
        x: float `(batch, t, units)`. positions: int `(batch or 1, t)`. self_mask: bool `(batch,
        t or 1, t_keys)`, the pairs the self-attention may use. memory: decoder blocks: the
        cross-attention's `{"keys", "values", "mask"}`. cache: decoder steps: `{"keys", "values"}`
        of `(batch, heads, max_length, key_dim)` to write at `positions` and attend over.
        training: bool or None. Whether dropout is active (None: Keras' training context).

    Returns:
        `(x (batch, t, units), cross weights (batch, heads, t, t_in) or None, cache or None)`.
    """

    def __init__(self, units, num_heads, ff_dim, cross=False, relative_clip=None, dropout=0.0, norm_first=True,
                 heads=None, **kwargs):
        super().__init__(**kwargs)
        num_heads = num_heads if heads is None else heads  # `heads`: the name in configs saved before
        self.units, self.num_heads, self.ff_dim = units, num_heads, ff_dim
        self.cross, self.relative_clip, self.dropout, self.norm_first = cross, relative_clip, dropout, norm_first
        dtype = self.dtype_policy
        self.self_attention = MultiHeadAttention(num_heads, relative_clip=relative_clip, name="self_attention", dtype=dtype)
        self.cross_attention = MultiHeadAttention(num_heads, name="cross_attention", dtype=dtype) if cross else None
        self.ff_hidden = keras.layers.Dense(ff_dim, activation="relu", name="ff_hidden", dtype=dtype)
        self.ff_out = keras.layers.Dense(units, name="ff_out", dtype=dtype)
        self.norms = [keras.layers.LayerNormalization(epsilon=1e-6, name=f"norm_{i}", dtype=dtype)
                      for i in range(3 if cross else 2)]
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=dtype)

    def build(self, x_shape, memory_shape=None):
        self.self_attention.build(x_shape, x_shape)
        if self.cross:
            self.cross_attention.build(x_shape, memory_shape or x_shape)
        self.ff_hidden.build(x_shape)
        self.ff_out.build((*x_shape[:-1], self.ff_dim))
        for norm in self.norms:
            norm.build(x_shape)

    def _before(self, x, i):
        return self.norms[i](x) if self.norm_first else x

    def _after(self, x, out, i, training):
        x = x + self.dropout_layer(out, training=training)
        return x if self.norm_first else self.norms[i](x)

    def call(self, x, positions, self_mask=None, memory=None, cache=None, training=None):
        # 1. Self-attention (over the cache when stepping).
        out, cache = self.attend_to_self(self._before(x, 0), positions, self_mask, cache, training)
        x = self._after(x, out, 0, training)
        # 2. Cross-attention to the encoder outputs (decoder blocks).
        cross = None
        if self.cross:
            queries = self.cross_attention.project_queries(self._before(x, 1))  # (batch, heads, t, key_dim)
            mask = ops.expand_dims(memory["mask"], 1)  # (batch, 1, t_in)
            out, cross = self.cross_attention.attend(queries, memory["keys"], memory["values"], mask,
                                                     training=training)  # cross (batch, heads, t, t_in)
            x = self._after(x, out, 1, training)
        # 3. Position-wise feed-forward.
        out = self.ff_out(self.ff_hidden(self._before(x, len(self.norms) - 1)))  # (batch, t, units)
        return self._after(x, out, len(self.norms) - 1, training), cross, cache

    def attend_to_self(self, h, positions, mask, cache, training):
        """Self-attention of `h (batch, t, units)`; with a cache, the new keys and values are written
        at `positions (batch, 1)` first and the query attends over every slot."""
        attention = self.self_attention
        keys, values = attention.project_keys(h), attention.project_values(h)  # (batch, heads, t, key_dim)
        key_positions = positions
        if cache is not None:
            slot = ops.one_hot(positions[:, 0], cache["keys"].shape[2], dtype="bool")  # (batch, max_length)
            slot = slot[:, None, :, None]  # (batch, 1, max_length, 1): this step's slot in every head
            keys = ops.where(slot, keys, cache["keys"])  # (batch, heads, max_length, key_dim)
            values = ops.where(slot, values, cache["values"])
            cache = {"keys": keys, "values": values}
            key_positions = default_positions(keys[:, 0])  # (1, max_length)
        relative = attention.relative_embeddings(positions, key_positions)
        out, _ = attention.attend(attention.project_queries(h), keys, values, mask, relative, training)
        return out, cache

    def get_config(self):
        return {**super().get_config(), "units": self.units, "num_heads": self.num_heads, "ff_dim": self.ff_dim,
                "cross": self.cross, "relative_clip": self.relative_clip, "dropout": self.dropout,
                "norm_first": self.norm_first}


class _Stack(keras.layers.Layer):
    """What encoder and decoder share: arguments, embedding * sqrt(units) + positions, the blocks."""

    def __init__(self, vocab_size, units, num_heads=4, ff_dim=None, num_layers=2, positions="sinusoidal",
                 max_length=64, relative_clip=16, dropout=0.0, norm_first=True, cross=False, heads=None, **kwargs):
        super().__init__(**kwargs)
        if heads is not None:
            num_heads = renamed_heads(heads, num_heads, type(self).__name__)
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.units = positive_int("units", units)
        self.num_heads = positive_int("num_heads", num_heads)
        self.ff_dim = check_sizes(self.units, self.num_heads, positions, ff_dim)
        self.num_layers = positive_int("num_layers", num_layers)
        self.positions = positions
        self.max_length = positive_int("max_length", max_length)
        self.relative_clip = positive_int("relative_clip", relative_clip)
        refuse_unused("relative_clip", relative_clip, 16, positions == "relative", "positions='relative'",
                      f"positions={positions!r}")
        self.dropout = rate("dropout", dropout)
        self.norm_first = bool(norm_first)
        self.supports_masking = True
        dtype = self.dtype_policy
        self.embedding = keras.layers.Embedding(self.vocab_size, self.units, name="embedding", dtype=dtype)
        self.position_layer = absolute_positions(positions, self.max_length, dtype)
        clip = self.relative_clip if positions == "relative" else None
        self.blocks = [TransformerBlock(self.units, self.num_heads, self.ff_dim, cross=cross, relative_clip=clip,
                                        dropout=self.dropout, norm_first=self.norm_first, name=f"block_{i}",
                                        dtype=dtype) for i in range(self.num_layers)]
        # Pre-norm stacks end with a layer norm; post-norm ones end normalized already (and a weight no
        # call reads would get no gradient).
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm", dtype=dtype) \
            if self.norm_first else None
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=dtype)

    def build_stack(self, ids_shape, memory_shape=None):
        self.embedding.build(ids_shape)
        x_shape = (*ids_shape[:2], self.units)
        if self.position_layer is not None:
            self.position_layer.build(x_shape)
        for block in self.blocks:
            block.build(x_shape, memory_shape)
        if self.final_norm is not None:
            self.final_norm.build(x_shape)

    def embed(self, ids, positions, training=None):
        """`ids (batch, t)` at `positions (batch or 1, t)` -> `E[ids] * sqrt(units)` + positions."""
        t = ids.shape[1]
        if self.positions == "learned" and t is not None and t > self.max_length:
            raise ValueError(f"{self.name} has learned position vectors for max_length={self.max_length} steps and "
                             f"was given {t}: give it a larger max_length, or other positions. Received: "
                             f"ids.shape={tuple(ids.shape)}")
        x = self.embedding(ids) * ops.cast(math.sqrt(self.units), self.compute_dtype)  # (batch, t, units)
        if self.position_layer is not None:
            if self.positions == "learned":  # (a length only known when the graph runs: the last vector)
                positions = ops.minimum(positions, self.max_length - 1)
            x = self.position_layer(x, positions=positions)
        return self.dropout_layer(x, training=training)

    def finish(self, x):
        """The final layer norm of the pre-norm stack (the post-norm stack ends normalized)."""
        return x if self.final_norm is None else self.final_norm(x)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "units": self.units,
            "num_heads": self.num_heads,
            "ff_dim": self.ff_dim,
            "num_layers": self.num_layers,
            "positions": self.positions,
            "max_length": self.max_length,
            "relative_clip": self.relative_clip,
            "dropout": self.dropout,
            "norm_first": self.norm_first,
        }


@keras.saving.register_keras_serializable(package="tfattn")
class TransformerEncoder(_Stack):
    """Self-attention encoder: embeddings * sqrt(units) + positions, then `num_layers` blocks of
    multi-head self-attention and feed-forward. A drop-in for `Encoder`.

    Padding (id 0) is masked: no position attends to it, so a sentence gets the same outputs alone or
    in a batch of longer sentences, and the outputs at padding are zeros. The state for an RNN
    decoder is the mean of the outputs over the real positions (zeros for an empty sentence).

    Args:
        vocab_size: int. Size of the source vocabulary (id 0 is padding).
        units: int. Model size `d_model`: embeddings, attention and outputs.
        num_heads: int. Heads of each self-attention; must divide `units`. Defaults to `4`. (`heads=`,
            its old name, is still taken, with a `DeprecationWarning`.)
        ff_dim: int or None. Hidden size of the feed-forward sublayers. Defaults to `4 * units`.
        num_layers: int. Number of blocks. Defaults to `2`.
        positions: str. `"sinusoidal"` (Vaswani), `"learned"` (one vector per position up to
            `max_length`), `"relative"` (Shaw, inside the self-attention) or `"none"` (a bag of
            words). Defaults to `"sinusoidal"`.
        max_length: int. Positions with a learned vector (`"learned"` only). Defaults to `64`.
        relative_clip: int. Shaw's clipping distance `k` (`"relative"` only). Defaults to `16`.
        dropout: float. Dropout on the embeddings and every sublayer's output. Defaults to `0.0`.
        norm_first: bool. Layer norm before each sublayer (and at the end), else after each
            residual as in the paper. Defaults to `True`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        source: int `(batch, t_in)`, right-padded with 0. An id outside 0 .. vocab_size - 1
            is refused with a ValueError where the values are known (an eager call; `checks.token_ids`).
        training: bool or None. Whether dropout is active (None: Keras' training context).

    Returns:
        `(outputs, state, mask)`: outputs `(batch, t_in, units)` carrying the padding mask as their
        Keras mask; state `{"h": (batch, units)}`, the masked mean of the outputs; mask bool
        `(batch, t_in)`, `False` on padding.

    Example:

    >>> encoder = TransformerEncoder(vocab_size=100, units=16, num_heads=4)
    >>> outputs, state, mask = encoder(np.array([[5, 6, 7, 0]]))
    >>> outputs.shape, state["h"].shape, mask.numpy().tolist()
    (TensorShape([1, 4, 16]), TensorShape([1, 16]), [[True, True, True, False]])

    Reference: Vaswani et al. 2017, arXiv 1706.03762, section 3.1 and 3.3-3.5 (and 5.4, dropout);
    Shaw et al. 2018, arXiv 1803.02155 (relative positions).
    """

    def __init__(self, vocab_size, units, **kwargs):
        super().__init__(vocab_size, units, cross=False, **kwargs)

    def build(self, source_shape):
        self.build_stack(source_shape)

    def call(self, source, training=None):
        # 1. Embed and add positions; padding masked for every self-attention.
        ShapeChecker()("source", source, ("batch", "t_in"))
        token_ids("source", source, self.vocab_size)
        mask = ops.not_equal(source, 0)  # (batch, t_in)
        positions = default_positions(source)  # (1, t_in)
        x = self.embed(source, positions, training)  # (batch, t_in, units)
        # 2. The blocks; every position attends to every real position.
        allowed = ops.expand_dims(mask, 1)  # (batch, 1, t_in)
        for block in self.blocks:
            x, _, _ = block(x, positions, allowed, training=training)
        # 3. Zeros at padding; the state is the mean over real positions.
        x = ops.where(mask[:, :, None], self.finish(x), ops.zeros_like(x))  # (batch, t_in, units)
        count = ops.maximum(ops.sum(ops.cast(mask, x.dtype), axis=1, keepdims=True), 1.0)  # (batch, 1)
        return x, {"h": ops.sum(x, axis=1) / count}, mask

    def compute_mask(self, inputs, mask=None):
        """The outputs carry the source's padding mask (for a decoder or an attention layer next)."""
        return ops.not_equal(inputs, 0), {"h": None}, None

    def compute_output_spec(self, source, training=None):
        batch, t_in = source.shape
        return (keras.KerasTensor((batch, t_in, self.units), self.compute_dtype),
                {"h": keras.KerasTensor((batch, self.units), self.compute_dtype)},
                keras.KerasTensor((batch, t_in), "bool"))


@keras.saving.register_keras_serializable(package="tfattn")
class TransformerDecoder(_Stack):
    """Transformer decoder: causal multi-head self-attention, cross-attention to the encoder outputs
    and feed-forward, `num_layers` times, then the vocabulary projection. A drop-in for `Decoder`.

    The `attention` it returns (teacher forcing and `step`) is the **last block's cross-attention,
    averaged over its heads**: `(batch, t_out, t_in)`, rows summing to 1, padding exactly 0.
    `cross_attention_heads` returns every block's every head for plots. The decoder does not use
    the encoder's state; its own `step` state is a position counter per row and the key/value cache.

    Args:
        vocab_size: int. Size of the target vocabulary (id 0 is padding).
        units: int. Model size; the encoder's `units`.
        num_heads, ff_dim, num_layers, positions, relative_clip, dropout, norm_first: as
            `TransformerEncoder` takes them.
        tie_embeddings: bool. The logits are the last features times the target embedding table,
            transposed, plus a bias (Press & Wolf 2017; Vaswani et al. section 3.4 share it with the
            pre-softmax projection; `tfattn.layers.tied`). Defaults to `False`: `logits_dense`.
        max_length: int. The cache holds `max_length` target positions (and `"learned"` positions
            have as many vectors): a teacher-forced target may have at most `max_length` steps and
            `step` at most `max_length` calls per sentence (keep `DecodeConfig.max_length` at or
            below it; past it the cache stops recording). Defaults to `64`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        target_in: int `(batch, t_out)`, the target shifted right (starts with `[START]`).
        encoder_outputs: float `(batch, t_in, units)`.
        state: the encoder's state (checked, not used).
        encoder_outputs_mask: bool `(batch, t_in)`, `False` on source padding; taken from
            `encoder_outputs`' Keras mask when not given.
        training: bool or None. Whether dropout is active (None: Keras' training context).

    Returns:
        `(logits, attention)`: logits `(batch, t_out, vocab)` carrying the target's Keras mask,
        attention `(batch, t_out, t_in)` as above.

    Example:

    >>> encoder = TransformerEncoder(vocab_size=50, units=16)
    >>> decoder = TransformerDecoder(vocab_size=60, units=16)
    >>> model = Seq2Seq(encoder, decoder)        # tfattn.model.Seq2Seq: the Transformer
    >>> logits, attention = model((np.array([[4, 5, 6, 0]]), np.array([[2, 7, 8]])))
    >>> logits.shape, attention.shape
    (TensorShape([1, 3, 60]), TensorShape([1, 3, 4]))

    Reference: Vaswani et al. 2017, arXiv 1706.03762, section 3.1 (decoder), 3.2.3 (masking) and 3.4
    (the embeddings times `sqrt(units)`; not its weight tying, and with a dropout before the logits
    the paper does not have: see the module's docstring).
    """

    def __init__(self, vocab_size, units, tie_embeddings=False, **kwargs):
        super().__init__(vocab_size, units, cross=True, **kwargs)
        self.tie_embeddings = bool(tie_embeddings)  # the embedding has `units` numbers: always the right size
        self.logits_dense = None if self.tie_embeddings else keras.layers.Dense(
            self.vocab_size, name="logits_dense", dtype=self.dtype_policy)

    def build(self, target_in_shape, encoder_outputs_shape, state_shape=None):
        self.build_stack(target_in_shape, encoder_outputs_shape)
        if self.tie_embeddings:
            self.logits_bias = add_bias(self, self.vocab_size)
        else:
            self.logits_dense.build((*target_in_shape[:2], self.units))

    # -- state and memory -------------------------------------------------------------------------

    def initial_state(self, encoder_state):
        """Position 0 for every row and an empty cache: `{"position": (batch,) int32, "keys": [...],
        "values": [...]}`, one `(batch, heads, max_length, units // heads)` cache per block."""
        batch = ops.shape(encoder_state["h"])[0]
        empty = ops.zeros((batch, self.num_heads, self.max_length, self.units // self.num_heads), self.compute_dtype)
        return {"position": ops.zeros((batch,), "int32"),
                "keys": [empty] * self.num_layers, "values": [empty] * self.num_layers}

    def prepare_memory(self, encoder_outputs, mask=None):
        """Every block's cross-attention keys and values, projected once per sentence, and the bool
        `mask (batch, t_in)` (all True when None)."""
        if mask is None:
            mask = ops.ones(ops.shape(encoder_outputs)[:2], "bool")
        attentions = [block.cross_attention for block in self.blocks]
        return {"keys": [a.project_keys(encoder_outputs) for a in attentions],  # each (batch, heads, t_in, key_dim)
                "values": [a.project_values(encoder_outputs) for a in attentions],
                "mask": ops.cast(mask, "bool")}

    # -- the blocks ---------------------------------------------------------------------------------

    def run_blocks(self, ids, positions, memory, self_mask, cache=None, training=None):
        """`ids (batch, t)` -> logits `(batch, t, vocab)`, every block's cross weights `(batch, heads,
        t, t_in)` and the new cache (or None when not stepping)."""
        x = self.embed(ids, positions, training)  # (batch, t, units)
        crosses, new_cache = [], {"keys": [], "values": []}
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else {"keys": cache["keys"][i], "values": cache["values"][i]}
            layer_memory = {"keys": memory["keys"][i], "values": memory["values"][i], "mask": memory["mask"]}
            x, cross, layer_cache = block(x, positions, self_mask, layer_memory, layer_cache, training=training)
            crosses.append(cross)
            if cache is not None:
                new_cache["keys"].append(layer_cache["keys"])
                new_cache["values"].append(layer_cache["values"])
        x = self.dropout_layer(self.finish(x), training=training)  # (batch, t, units)
        if self.tie_embeddings:
            logits = tied_logits(x, self.embedding.embeddings, self.logits_bias)  # (batch, t, vocab)
        else:
            logits = self.logits_dense(x)  # (batch, t, vocab)
        return logits, crosses, new_cache if cache is not None else None

    def step(self, token, state, memory):
        """One inference step.

        Args:
            token: int `(batch,)`, the previous output token (`[START]` first).
            state: from `initial_state` or the previous step.
            memory: from `prepare_memory`.

        Returns:
            `(logits (batch, vocab), weights (batch, t_in), state)`: weights as `call` returns them.
        """
        ShapeChecker()("token", token, ("batch",))
        token_ids("token", token, self.vocab_size)
        position = state["position"]  # (batch,)
        positions = position[:, None]  # (batch, 1)
        seen = causal_mask(positions, default_positions(state["keys"][0][:, 0]))  # (batch, 1, max_length)
        logits, crosses, cache = self.run_blocks(token[:, None], positions, memory, seen, state)
        state = {"position": position + 1, **cache}
        return logits[:, 0], ops.mean(crosses[-1], axis=1)[:, 0], state  # (batch, vocab), (batch, t_in)

    # -- teacher forcing --------------------------------------------------------------------------

    def call(self, target_in, encoder_outputs, state=None, encoder_outputs_mask=None, training=None):
        # 1. Every block's cross-attention keys and values; 2. all target positions at once, causally.
        crosses, logits = self._teacher_forced(target_in, encoder_outputs, encoder_outputs_mask, training)
        # 3. The attention returned: the last block's, averaged over heads.
        return logits, ops.mean(crosses[-1], axis=1)  # (batch, t_out, t_in)

    def cross_attention_heads(self, target_in, encoder_outputs, encoder_outputs_mask=None):
        """Every block's every head, teacher-forced: `(batch, num_layers, heads, t_out, t_in)`."""
        crosses, _ = self._teacher_forced(target_in, encoder_outputs, encoder_outputs_mask, False)
        return ops.stack(crosses, axis=1)

    def _teacher_forced(self, target_in, encoder_outputs, encoder_outputs_mask, training):
        check = ShapeChecker()
        check("target_in", target_in, ("batch", "t_out"))
        check("encoder_outputs", encoder_outputs, ("batch", "t_in", "units"))
        check("encoder_outputs_mask", encoder_outputs_mask, ("batch", "t_in"))
        token_ids("target_in", target_in, self.vocab_size)
        if encoder_outputs.shape[-1] not in (None, self.units):
            raise ValueError(f"encoder_outputs must have shape (batch, t_in, units) with units = {self.units}. "
                             f"Received: encoder_outputs.shape={tuple(encoder_outputs.shape)}")
        t_out = target_in.shape[1]
        if t_out is not None and t_out > self.max_length:
            raise ValueError(f"target_in has {t_out} steps but the decoder's max_length is {self.max_length}. "
                             f"Received: target_in.shape={tuple(target_in.shape)}")
        memory = self.prepare_memory(encoder_outputs, encoder_outputs_mask)
        positions = default_positions(target_in)  # (1, t_out)
        logits, crosses, _ = self.run_blocks(target_in, positions, memory, causal_mask(positions, positions),
                                             training=training)
        return crosses, logits

    def compute_mask(self, inputs, mask=None):
        """The logits carry the target's padding mask; the attention carries none."""
        return ops.not_equal(inputs, 0), None

    def get_config(self):
        return {**super().get_config(), "tie_embeddings": self.tie_embeddings}


def transformer_layers(source_vocab_size, target_vocab_size, units=256, tie_embeddings=False, **kwargs):
    """A `TransformerEncoder` and a `TransformerDecoder` with the same settings (`heads`, `ff_dim`,
    `num_layers`, `positions`, `max_length`, `relative_clip`, `dropout`, `norm_first`), the decoder's
    output projection tied to its embedding if `tie_embeddings`: `Seq2Seq(*transformer_layers(...))`
    is the Transformer."""
    return (TransformerEncoder(source_vocab_size, units, name="encoder", **kwargs),
            TransformerDecoder(target_vocab_size, units, tie_embeddings=tie_embeddings, name="decoder", **kwargs))
