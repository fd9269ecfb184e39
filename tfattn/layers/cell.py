"""`AttentionCell`: any Keras RNN cell plus a tfattn attention layer, as one cell for `keras.layers.RNN`.

The successor of TensorFlow Addons' `tfa.seq2seq.AttentionWrapper`. Each step runs the wrapped cell
and attends over the memory (the encoder outputs), in one of two orders:

    attention="luong" (tfa's order)          attention="bahdanau"
    x = [x_t; a_{t-1}]  (input feeding)      c_t, alpha_t = attend(s_{t-1}, memory)
    h_t = cell(x, s_{t-1})                   h_t = cell([x_t; c_t], s_{t-1})
    c_t, alpha_t = attend(h_t, memory)       a_t = tanh(W_c [c_t; h_t])  or  c_t
    a_t = tanh(W_c [c_t; h_t])  or  c_t

`a_t` is the attentional vector (Luong's `h~_t`); the output is `a_t` or `h_t`.

Keras 3's `RNN` has no `constants` argument, so the memory travels in the state: the cell's state
list is `[*wrapped cell states, a_{t-1}, alpha_{t-1}, memory, memory mask]`, made by
`AttentionCell.initial_state(memory, memory_mask)` and passed to the RNN as `initial_state=`. The
memory and its mask go through every step unchanged. The keys are projected at every step
(`prepare_keys`), since a cell has no place to keep them between steps; `Decoder` projects them once.
"""

import keras
from keras import ops

from tfattn.layers.attention import ScoredAttention
from tfattn.layers.checks import ShapeChecker, positive_int, static_shape

ORDERS = ("bahdanau", "luong")
EXTRA_STATES = 4  # after the wrapped cell's states: attentional vector, alignments, memory, memory mask


@keras.saving.register_keras_serializable(package="tfattn")
class AttentionCell(keras.layers.Layer):
    """A Keras RNN cell with attention over a memory at every step (tfa's `AttentionWrapper`).

    Wraps `cell` (`keras.layers.GRUCell`, `LSTMCell`, `StackedRNNCells`, or any cell with
    `state_size` and `call(inputs, states)`) and a `ScoredAttention` layer (`BahdanauAttention`,
    `LuongAttention`, ...), so that `keras.layers.RNN(AttentionCell(...), return_sequences=True)`
    attends at every step. Pass the memory through the initial state:
    `rnn(x, initial_state=cell.initial_state(memory, memory_mask))`.

    - `attention="luong"` (tfa's order): the cell reads `[x_t; a_{t-1}]` (input feeding) and the
      attention's query is its new output `h_t`.
    - `attention="bahdanau"`: the query is the previous output `s_{t-1}` (the wrapped cell's first
      state: `h` of a GRU or LSTM, of the top cell of a `StackedRNNCells`), and the cell reads
      `[x_t; c_t]`.

    Then `a_t = tanh(W_c [c_t; h_t])` (a Dense without bias, `attention_dense`) when
    `attention_layer_size` is set, else `a_t = c_t`. `W_c` reads `[c_t; h_t]` in Luong's order, as
    `Decoder`'s does (tfa read `[h_t; c_t]`: a tfa kernel's two row blocks swap places).

    Args:
        cell: a Keras RNN cell. Its own `dropout` and `recurrent_dropout` must be 0 (Keras' RNN
            prepares those masks only for the cell it holds; use the attention layer's dropout or a
            `Dropout` on the inputs).
        attention_layer: a `ScoredAttention` layer (`BahdanauAttention`, `LuongAttention`, ...). Its
            dropout, and hard attention's draws, work on TensorFlow; on JAX only outside training (a
            ValueError says so). Local-m (which reads the target step) is refused; local-p works.
        attention: str. The order, `"luong"` (attend after the cell, with `h_t`) or `"bahdanau"`
            (attend before it, with `s_{t-1}`). Defaults to `"luong"`.
        attention_layer_size: int or None. Size of `a_t = tanh(W_c [c_t; h_t])`; None: no `W_c`,
            `a_t` is the context `c_t`. Defaults to `None` (as in tfa).
        output_attention: bool. Output `a_t` (Luong's `h~_t`, as tfa did); False: output the cell's
            `h_t`. Defaults to `True`.
        input_feeding: bool. Luong order only: the cell reads `[x_t; a_{t-1}]`, else `x_t`. The
            Bahdanau order always reads `[x_t; c_t]`. Defaults to `True`.
        alignment_history: bool. Append the step's alignments to the output, zero-padded to
            `memory_length` positions; `split_outputs` separates them. Defaults to `False`.
        memory_length: int or None. The longest memory `t_in` (the static size Keras needs for the
            output); required with `alignment_history`. Defaults to `None`.
        memory_size: int or None. The memory's feature size `dv`; None: the cell's output size.
            Defaults to `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments (as `keras.layers.RNN` calls it):
        inputs: `(batch, features)`, one step of the sequence.
        states: the list from `initial_state` or the previous step.
        training: bool. Passed to the wrapped cell and the attention layer (dropout). Defaults to
            `False`, as in Keras' own RNN cells (`keras.layers.GRUCell`), which `keras.layers.RNN` calls.

    Returns:
        `(output, states)`. output `(batch, output_size)`: `a_t` `(batch, attention size)` or `h_t`
        `(batch, units)`, then with `alignment_history` the alignments `(batch, memory_length)`.
        states: `[*cell states, a_t (batch, attention size), alignments (batch, t_in),
        memory (batch, t_in, dv), memory mask (batch, t_in)]` (`split_states` names them). The
        attention size is `attention_layer_size`, or `dv` without it. Padding gets exactly 0 weight.

    Example:

    >>> cell = AttentionCell(keras.layers.GRUCell(8), LuongAttention(), attention_layer_size=8)
    >>> rnn = keras.layers.RNN(cell, return_sequences=True)
    >>> memory = np.ones((2, 5, 8), "float32")
    >>> outputs = rnn(np.ones((2, 3, 4)), initial_state=cell.initial_state(memory))
    >>> outputs.shape
    TensorShape([2, 3, 8])

    Reference: Luong, Pham, Manning, arXiv 1508.04025, eq. 5 (`h~_t`) and section 3.3 (input
    feeding); Bahdanau, Cho, Bengio, arXiv 1409.0473, eq. 4-6 (attend with `s_{i-1}`).
    """

    def __init__(self, cell, attention_layer, attention="luong", attention_layer_size=None,
                 output_attention=True, input_feeding=True, alignment_history=False, memory_length=None,
                 memory_size=None, **kwargs):
        super().__init__(**kwargs)
        self.cell = _rnn_cell(cell)
        if not isinstance(attention_layer, ScoredAttention):
            raise ValueError("attention_layer must be a ScoredAttention layer (BahdanauAttention, "
                             f"LuongAttention, ...). Received: attention_layer={attention_layer!r}")
        if attention not in ORDERS:
            raise ValueError(f"attention must be one of {ORDERS}. Received: attention={attention!r}")
        if attention_layer.uses_positions:
            raise ValueError("AttentionCell cannot run an attention layer that reads the target step (Luong's local-m, "
                             "p_t = t): a cell does not count its steps. Use Decoder, or local='p'. Received: "
                             f"attention_layer with local={getattr(attention_layer, 'local', None)!r}")
        self.attention_layer = attention_layer
        self.attention = attention
        self.attention_layer_size = _optional_int("attention_layer_size", attention_layer_size)
        self.output_attention = bool(output_attention)
        self.input_feeding = bool(input_feeding)
        self.alignment_history = bool(alignment_history)
        self.memory_length = _optional_int("memory_length", memory_length)
        self.memory_size = _optional_int("memory_size", memory_size)
        if self.alignment_history and self.memory_length is None:
            raise ValueError("alignment_history=True needs memory_length, the longest memory t_in, because "
                             "the alignments are part of the output. Received: memory_length=None")
        self.attention_dense = None if self.attention_layer_size is None else keras.layers.Dense(
            self.attention_layer_size, activation="tanh", use_bias=False, name="attention_dense",
            dtype=self.dtype_policy)

    # -- sizes ------------------------------------------------------------------------------------

    @property
    def cell_output_size(self):
        """The wrapped cell's output size (`units` of a GRU or LSTM cell)."""
        size = getattr(self.cell, "output_size", None)
        return int(size) if size is not None else keras.tree.flatten(self.cell.state_size)[0]

    @property
    def value_size(self):
        """The memory's feature size `dv`: `memory_size`, or the cell's output size."""
        return self.memory_size or self.cell_output_size

    @property
    def attention_size(self):
        """The size of the attentional vector `a_t`: `attention_layer_size`, or `dv` (the context)."""
        return self.attention_layer_size or self.value_size

    @property
    def output_size(self):
        size = self.attention_size if self.output_attention else self.cell_output_size
        return size + (self.memory_length if self.alignment_history else 0)

    @property
    def state_size(self):
        """One int per state, as `keras.layers.RNN` wants them: the wrapped cell's sizes, the attention
        size, then `t_in`, `dv`, `t_in` for the alignments, the memory and its mask.

        Keras reads these only to shape the final states of a functional model with `return_state=True`
        (an int can only say `(batch, size)`): there the memory is declared `(batch, dv)` and `t_in` is
        `memory_length`, or 1 when it is None; the tensors themselves have their true shapes.
        """
        t_in = self.memory_length or 1
        return [*keras.tree.flatten(self.cell.state_size), self.attention_size, t_in, self.value_size, t_in]

    def _query_size(self):
        """Luong order: the cell's output size; Bahdanau order: the size of the state used as query."""
        if self.attention == "luong":
            return self.cell_output_size
        return keras.tree.flatten(self.cell.state_size)[self._query_index()]

    def _query_index(self):
        """Where `s_{t-1}` sits in the flat cell states: first, or the top cell's first of a stack."""
        if isinstance(self.cell, keras.layers.StackedRNNCells):
            return len(keras.tree.flatten(self.cell.state_size[:-1]))
        return 0

    # -- building ---------------------------------------------------------------------------------

    def build(self, input_shape):
        batch, features = input_shape[0], input_shape[-1]
        if features is None:
            raise ValueError("inputs must have shape (batch, features) with features known. "
                             f"Received: inputs.shape={tuple(input_shape)}")
        # Sub-layers may come built (from_config, or shared with a Decoder).
        if self.attention == "bahdanau":
            cell_input = features + self.value_size  # [x_t; c_t]
        else:
            cell_input = features + (self.attention_size if self.input_feeding else 0)  # [x_t; a_{t-1}]
        if not self.cell.built:
            self.cell.build((batch, cell_input))
        if not self.attention_layer.built:
            self.attention_layer.build((batch, 1, self._query_size()), (batch, None, self.value_size))
        if self.attention_dense is not None:
            self.attention_dense.build((batch, self.value_size + self.cell_output_size))  # [c_t; h_t]

    # -- the memory, through the initial state ----------------------------------------------------

    def get_initial_state(self, batch_size=None):
        """Keras' RNN calls this when no `initial_state` is given: an error, since the memory is needed."""
        raise ValueError(
            "AttentionCell needs the memory (the encoder outputs) in its initial state: call the RNN as "
            "rnn(inputs, initial_state=cell.initial_state(memory, memory_mask)). "
            f"Received: no initial_state (batch_size={batch_size!r})")

    def initial_state(self, memory, memory_mask=None, cell_state=None):
        """The states to pass to `keras.layers.RNN(cell)(inputs, initial_state=...)`.

        Works on tensors and on a functional model's symbolic tensors.

        Args:
            memory: float `(batch, t_in, dv)`, e.g. the encoder outputs.
            memory_mask: bool `(batch, t_in)`, False on padding; None: the memory's Keras mask if it
                has one (from `Embedding(mask_zero=True)` upstream), else no padding.
            cell_state: the wrapped cell's initial state, a tensor `(batch, units)` or a list as its
                `state_size` (flat or nested); None: zeros.

        Returns:
            `[*cell states, a_0 zeros (batch, attention size), alignments zeros (batch, t_in), memory
            (batch, t_in, dv), memory mask as float (batch, t_in)]`.
        """
        # 1. The mask: given, else the memory's Keras mask, else every position is real.
        if memory_mask is None:
            memory_mask = getattr(memory, "_keras_mask", None)
        check = self._check_memory(memory, memory_mask)
        if memory_mask is None:
            memory_mask = ops.ones_like(memory[:, :, 0])  # (batch, t_in)
        # 2. The wrapped cell's states, then the attention's: all zeros but the memory and its mask.
        cell_states = self._initial_cell_states(check, memory, cell_state)
        attentional = ops.repeat(ops.zeros_like(memory[:, 0, :1]), self.attention_size, axis=-1)  # (batch, a)
        alignments = ops.zeros_like(memory[:, :, 0])  # (batch, t_in)
        return [*cell_states, attentional, alignments, memory, ops.cast(memory_mask, memory.dtype)]

    def _check_memory(self, memory, memory_mask):
        """Shape checks of the memory and its mask; returns the checker (it knows `batch`)."""
        check = ShapeChecker()
        check.sizes["dv"] = (self.value_size, "memory_size" if self.memory_size else "the cell's output size")
        check("memory", memory, ("batch", "t_in", "dv"))
        check("memory_mask", memory_mask, ("batch", "t_in"))
        t_in = static_shape(memory)[1]
        if self.alignment_history and t_in is not None and t_in > self.memory_length:
            raise ValueError(f"memory must have shape (batch, t_in, dv) with t_in <= memory_length = "
                             f"{self.memory_length}. Received: memory.shape={static_shape(memory)}")
        return check

    def _initial_cell_states(self, check, memory, cell_state):
        """The wrapped cell's states as a flat list: zeros, or `cell_state` checked against its sizes."""
        sizes = keras.tree.flatten(self.cell.state_size)
        if cell_state is None:
            return [ops.repeat(ops.zeros_like(memory[:, 0, :1]), size, axis=-1) for size in sizes]  # (batch, units)
        states = keras.tree.flatten(cell_state)
        if len(states) != len(sizes):
            raise ValueError(f"cell_state must hold {len(sizes)} tensors (batch, units), one per entry of the "
                             f"cell's state_size {self.cell.state_size}. Received: {len(states)} tensors")
        for i, (state, size) in enumerate(zip(states, sizes)):
            state_check = ShapeChecker()
            state_check.sizes = {**check.sizes, "units": (size, "the cell's state_size")}
            state_check(f"cell_state[{i}]", state, ("batch", "units"))
        return states

    # -- one step ---------------------------------------------------------------------------------

    def call(self, inputs, states, training=False):
        # 1. JAX traces the step inside a scan, where a dropout's or a hard draw's random state cannot advance.
        if training and self.attention_layer.dropout and keras.backend.backend() == "jax":
            raise ValueError("The attention layer's dropout cannot run inside keras.layers.RNN on JAX (the "
                             "random state would leave the scan): use dropout=0 there, or the TensorFlow "
                             f"backend. Received: dropout={self.attention_layer.dropout!r}")
        if training and self.attention_layer.probability == "hard" and keras.backend.backend() == "jax":
            raise ValueError("Hard attention cannot draw its positions inside keras.layers.RNN on JAX in training "
                             "(the random state would leave the scan): use the TensorFlow backend. Received: "
                             "probability='hard'")
        # 2. The states: the wrapped cell's, a_{t-1}, the memory and its mask (alpha_{t-1} is not read).
        parts = self.split_states(states)
        cell_states, attentional = parts["cell"], parts["attention"]
        memory, memory_mask = parts["memory"], parts["memory_mask"]
        # 3. The cell and the attention, in the chosen order.
        if self.attention == "luong":
            x = ops.concatenate([inputs, attentional], axis=-1) if self.input_feeding else inputs  # (batch, input)
            h, cell_states = self._cell_step(x, cell_states, training)
            context, alignments = self._attend(h, memory, memory_mask, training)
        else:
            query = cell_states[self._query_index()]  # (batch, units): s_{t-1}
            context, alignments = self._attend(query, memory, memory_mask, training)
            x = ops.concatenate([inputs, context], axis=-1)  # (batch, features + dv)
            h, cell_states = self._cell_step(x, cell_states, training)
        # 4. The attentional vector a_t = tanh(W_c [c_t; h_t]), or the context.
        if self.attention_dense is not None:
            attentional = self.attention_dense(ops.concatenate([context, h], axis=-1))  # (batch, attention size)
        else:
            attentional = context  # (batch, dv)
        # 5. The output, with the alignments appended for the history.
        output = attentional if self.output_attention else h
        if self.alignment_history:
            output = ops.concatenate([output, self._padded(alignments)], axis=-1)  # (batch, output_size)
        return output, [*cell_states, attentional, alignments, memory, memory_mask]

    def _cell_step(self, x, cell_states, training):
        """The wrapped cell on `x (batch, input)` and its flat states: `h (batch, units)`, flat new states."""
        if len(cell_states) != len(keras.tree.flatten(self.cell.state_size)):
            raise ValueError(f"states must be the {len(self.state_size)} tensors that cell.initial_state(memory) "
                             f"returns. Received: {len(cell_states) + EXTRA_STATES} states")
        nested = keras.tree.pack_sequence_as(self.cell.state_size, cell_states)
        h, new_states = self.cell(x, nested, training=training)
        return h, keras.tree.flatten(new_states)

    def _attend(self, query, memory, memory_mask, training):
        """`query (batch, dq)` -> context `(batch, dv)` and alignments `(batch, t_in)`."""
        value_mask = ops.greater(memory_mask, 0)  # (batch, t_in), bool
        # (batch, 1, dv), (batch, 1, t_in)
        context, weights = self.attention_layer(query[:, None, :], memory, value_mask=value_mask, training=training)
        return context[:, 0, :], weights[:, 0, :]

    def _padded(self, alignments):
        """Alignments `(batch, t_in)` zero-padded to `(batch, memory_length)` for the history."""
        # t_in may be known only when the graph runs, so the pad is always there (0 wide when full).
        alignments = ops.pad(alignments, [[0, 0], [0, self.memory_length - ops.shape(alignments)[1]]])
        return ops.reshape(alignments, (-1, self.memory_length))  # (batch, memory_length)

    # -- reading outputs and states ---------------------------------------------------------------

    def split_outputs(self, outputs):
        """The RNN's outputs -> `(outputs, alignments)`: `(batch, t_out, size)` and `(batch, t_out,
        memory_length)` (or `(batch, ...)` for one step); alignments are None without `alignment_history`."""
        if not self.alignment_history:
            return outputs, None
        size = self.output_size - self.memory_length
        return outputs[..., :size], outputs[..., size:]

    def split_states(self, states):
        """The state list -> a dict: `"cell"` (the wrapped cell's flat states), `"attention"` (a_t),
        `"alignments"` `(batch, t_in)`, `"memory"` `(batch, t_in, dv)`, `"memory_mask"` `(batch, t_in)`."""
        states = list(states)
        if len(states) < EXTRA_STATES + 1:
            raise ValueError(f"states must be the {len(self.state_size)} tensors that cell.initial_state(memory) "
                             f"returns. Received: {len(states)} states")
        cell, (attentional, alignments, memory, memory_mask) = states[:-EXTRA_STATES], states[-EXTRA_STATES:]
        return {"cell": cell, "attention": attentional, "alignments": alignments, "memory": memory,
                "memory_mask": memory_mask}

    # -- serialization ----------------------------------------------------------------------------

    def get_config(self):
        return {
            **super().get_config(),
            "cell": keras.saving.serialize_keras_object(self.cell),
            "attention_layer": keras.saving.serialize_keras_object(self.attention_layer),
            "attention": self.attention,
            "attention_layer_size": self.attention_layer_size,
            "output_attention": self.output_attention,
            "input_feeding": self.input_feeding,
            "alignment_history": self.alignment_history,
            "memory_length": self.memory_length,
            "memory_size": self.memory_size,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["cell"] = keras.saving.deserialize_keras_object(config["cell"])
        config["attention_layer"] = keras.saving.deserialize_keras_object(config["attention_layer"])
        return cls(**config)


def _optional_int(name, value):
    return None if value is None else positive_int(name, value)


def _rnn_cell(cell):
    """`cell` if it is a Keras RNN cell without dropout of its own, else a ValueError."""
    if not callable(getattr(cell, "call", None)) or getattr(cell, "state_size", None) is None:
        raise ValueError("cell must be a Keras RNN cell, with state_size and call(inputs, states) "
                         f"(GRUCell, LSTMCell, StackedRNNCells, ...). Received: cell={cell!r}")
    for inner in getattr(cell, "cells", [cell]):
        rates = {name: getattr(inner, name, 0) or 0 for name in ("dropout", "recurrent_dropout")}
        if any(rates.values()):
            raise ValueError("The wrapped cell must have no dropout of its own: Keras' RNN prepares those masks "
                             "only for the cell it holds. Use the attention layer's dropout or a Dropout on the "
                             f"inputs. Received: {type(inner).__name__} with {rates}")
    return cell
