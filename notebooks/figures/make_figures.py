"""The notebooks' figures: drawn here, written to docs/figures/, attached to the notebooks' Markdown cells.

Each figure shows an idea before a learner runs anything, so it must say what the code computes. Where
its numbers come from the package (the weights of an attention layer, local windows, hard draws,
multi-head weights, the sinusoidal table) they are computed here with the package's own layers, from
fixed inputs and seeds; diagrams (when each decoder attends, a Transformer block) are checked against
the layers' structure. Reference pictures of trained models ("yours should look like this") are drawn
from small arrays in references.json, which `--retrain` writes from models trained on the dates corpus
as the notebooks train them, at their default sizes and seeds.

    python notebooks/figures/make_figures.py            # draw, write docs/figures/*.png, attach them
    python notebooks/figures/make_figures.py --check    # draw in memory and compare (the test runs this)
    python notebooks/figures/make_figures.py --retrain  # retrain the reference models first (~15 minutes)

The PNGs carry no metadata (no version, no date), so the same versions draw the same bytes. A
notebook shows a figure by referencing it in a Markdown cell, `![what it shows](attachment:NAME.png)`;
attaching puts the PNG of docs/figures/ into every cell that references it and removes attachments no
longer referenced, so running it again changes nothing.
"""

import argparse
import base64
import io
import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIGURES = ROOT / "docs" / "figures"
NOTEBOOKS = ROOT / "notebooks"
REFERENCES = HERE / "references.json"
MANIFEST = HERE / "manifest.json"  # the versions that drew the committed PNGs
DPI = 100
MAX_BYTES = 80_000
# Another matplotlib rounds a tight bounding box to a pixel more or less (3.10 drew multi-head.png 1200x459,
# 3.11 1200x460): a redrawn figure of other versions may be this many pixels off in each dimension.
SIZE_SLACK = 2
ATTACHMENT = re.compile(r"\(attachment:([\w.-]+\.png)\)")
# Colours: weights as plot_attention draws them (viridis); vectors' values in a diverging map.
WEIGHTS, VALUES = "viridis", "RdBu_r"
ATTEND, RNN, OUTPUT, NORM = "#f6c85f", "#9dd9d2", "#d3c4f3", "#f2f2f2"


def png_bytes(fig):
    """The figure as PNG bytes without metadata, in 256 colours (a third of the bytes; no visible loss on
    these drawings): the same drawing gives the same bytes."""
    from PIL import Image  # matplotlib's own dependency

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB").quantize(colors=256)
    buffer = io.BytesIO()
    image.save(buffer, format="png", optimize=True)
    return buffer.getvalue()


# -- drawing helpers ------------------------------------------------------------------------------


def canvas(width, height, xlim, ylim):
    """A figure of `width` x `height` inches with one axis-free Axes in data units `xlim` x `ylim`."""
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()
    return fig, ax


def box(ax, x, y, w, h, text, color, size=10, weight="normal"):
    """A rounded box with centred text; returns its (left, bottom, width, height)."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                facecolor=color, edgecolor="#444444", linewidth=1.0))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, weight=weight)
    return x, y, w, h


def arrow(ax, start, end, color="#333333", style="-|>", dashed=False, rad=0.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=color, linewidth=1.2,
                                 linestyle="--" if dashed else "-", connectionstyle=f"arc3,rad={rad}"))


def cells(ax, x, y, values, cmap, vmin, vmax, size=0.5, fmt="{:.2f}", vertical=True, fontsize=8):
    """A vector drawn as a column (or row) of coloured squares with its numbers; (x, y) is the
    bottom-left corner of the first square (the top one when vertical)."""
    colormap = matplotlib.colormaps[cmap]
    for i, value in enumerate(values):
        cx, cy = (x, y - i * size) if vertical else (x + i * size, y)
        shade = colormap((value - vmin) / (vmax - vmin))
        ax.add_patch(Rectangle((cx, cy), size, size, facecolor=shade, edgecolor="white", linewidth=1.0))
        dark = sum(shade[:3]) / 3 < 0.5
        ax.text(cx + size / 2, cy + size / 2, fmt.format(value), ha="center", va="center", fontsize=fontsize,
                color="white" if dark else "black")


def heatmap(ax, weights, xlabels, ylabels, title, vmax=1.0, cmap=WEIGHTS):
    """Weights `(t_q, t_in)` as plot_attention draws them, on a fixed 0..vmax scale."""
    image = ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(xlabels)), labels=xlabels, rotation=90 if max(map(len, xlabels)) > 2 else 0)
    ax.set_yticks(range(len(ylabels)), labels=ylabels)
    ax.set_title(title, fontsize=10)
    return image


def shape(ax, x, name, axes, sizes):
    """A tensor's name, its axes in the package's names and its sizes here, centred at `x`."""
    ax.text(x, 1.45, f"{name}\n{axes}\n= {sizes}", ha="center", fontsize=8, family="monospace", linespacing=1.3)


# -- (a) encoder states -> scores -> softmax -> context -------------------------------------------


def attention_steps():
    """Notebook 1's three words and query through LuongAttention("dot"): the numbers it prints."""
    import tfattn

    words = ["la", "casa", "roja"]
    value = np.array([[[1, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, 1]]], "float32")  # (batch, t_in, units)
    query = np.array([[[0, 2, 0, 1]]], "float32")  # (batch, t_q, units): the decoder wants "house"
    layer = tfattn.LuongAttention(score="dot")
    context, weights = (np.asarray(x)[0, 0] for x in layer(query, value))  # (units,), (t_in,)
    scores = np.asarray(layer.compute_scores(query, layer.prepare_keys(value)))[0, 0]  # (t_in,)
    fig, ax = canvas(11, 4.4, (0, 22), (0, 8.8))
    ax.text(11, 8.45, "One step of attention: the decoder about to write \"house\" reads la casa roja",
            ha="center", fontsize=12, weight="bold")
    for j, word in enumerate(words):  # the encoder states, one column per source word
        cells(ax, 0.5 + 1.0 * j, 6.4, value[0, j], VALUES, -1.2, 1.2, size=0.8, fmt="{:.0f}")
        ax.text(0.9 + 1.0 * j, 3.35, word, ha="center", fontsize=10)
    ax.text(2.0, 7.45, "encoder states $h_j$ (value)", ha="center", fontsize=10)
    shape(ax, 2.0, "value", "(batch, t_in, units)", "(1, 3, 4)")
    cells(ax, 4.6, 6.4, query[0, 0], VALUES, -2.4, 2.4, size=0.8, fmt="{:.0f}")
    ax.text(5.0, 7.45, "query $q$", ha="center", fontsize=10)
    shape(ax, 5.0, "query", "(batch, t_q, units)", "(1, 1, 4)")
    ax.text(5.0, 0.35, "Bahdanau: $s_{i-1}$, before the RNN step\nLuong: $h_t$, after it", ha="center", fontsize=8.5)
    steps = [(7.0, scores, "Oranges", (-0.5, 4.0), "{:.0f}", "1. score", "$e_j = q^\\top h_j$ (dot)"),
             (11.6, weights, WEIGHTS, (0.0, 1.0), "{:.2f}", "2. softmax", "$\\alpha_j = \\mathrm{softmax}_j(e_j)$")]
    for x, row, cmap, (lo, hi), fmt, name, formula in steps:
        arrow(ax, (x - 1.35, 5.2), (x - 0.15, 5.2))
        ax.text(x + 1.2, 7.9, name, ha="center", fontsize=11, weight="bold")
        ax.text(x + 1.2, 7.4, formula, ha="center", fontsize=10)
        cells(ax, x, 4.8, row, cmap, lo, hi, size=0.8, fmt=fmt, vertical=False, fontsize=9)
        for j, word in enumerate(words):
            ax.text(x + 0.4 + 0.8 * j, 4.45, word, ha="center", va="top", fontsize=8.5)
        shape(ax, x + 1.2, name.split(" ")[1].replace("score", "scores").replace("softmax", "weights"),
              "(batch, t_q, t_in)", "(1, 1, 3)")
    ax.text(12.8, 3.4, "each row sums to 1", ha="center", fontsize=8.5, style="italic")
    arrow(ax, (14.95, 5.2), (16.4, 5.2))
    ax.text(18.3, 7.9, "3. weighted sum", ha="center", fontsize=11, weight="bold")
    ax.text(18.3, 7.4, "$c = \\sum_j \\alpha_j h_j$", ha="center", fontsize=10)
    cells(ax, 17.9, 6.4, context, VALUES, -1.2, 1.2, size=0.8)
    shape(ax, 18.3, "context", "(batch, t_q, units)", "(1, 1, 4)")
    ax.text(18.3, 0.35, "mostly casa, some roja:\nwhat the decoder reads", ha="center", fontsize=8.5)
    return fig


# -- (b) when each decoder attends ------------------------------------------------------------------


def when_they_attend():
    """One decoder step of each paper, left to right in the order the step computes it."""
    check_decoder_order()
    fig, ax = canvas(12, 7.0, (0, 24), (0, 14.0))
    ax.text(12, 13.6, "When the decoder attends: one step of each", ha="center", fontsize=12, weight="bold")
    bahdanau_row(ax, 8.2)
    luong_row(ax, 3.0)
    legend = [(4.0, ATTEND, "attention: score, softmax, weighted sum"), (11.4, RNN, "the RNN's step (GRU)"),
              (16.2, OUTPUT, "the output layer")]
    for x, color, text in legend:
        ax.add_patch(Rectangle((x, 12.65), 0.5, 0.4, facecolor=color, edgecolor="#444444"))
        ax.text(x + 0.7, 12.85, text, va="center", fontsize=9)
    return fig


def bahdanau_row(ax, y):
    """Bahdanau et al. 2014: attend with s_{i-1}, then the RNN reads the context (eq. 4-6)."""
    ax.text(0.2, y + 3.3, "Bahdanau: attends with $s_{i-1}$, BEFORE the RNN step", fontsize=11, weight="bold")
    box(ax, 0.2, y + 1.2, 2.0, 1.0, "$s_{i-1}$", "white", size=12)
    box(ax, 3.2, y + 0.9, 4.6, 1.6, "attention\n$e_{ij} = a(s_{i-1}, h_j)$, $\\alpha_{ij}$\n$c_i = \\sum_j \\alpha_{ij} h_j$",
        ATTEND, size=9.5)
    box(ax, 3.2, y - 0.9, 4.6, 0.9, "encoder states $h_1 \\dots h_{T_x}$", "white", size=9.5)
    box(ax, 8.8, y + 1.2, 1.6, 1.0, "$c_i$", "white", size=12)
    box(ax, 11.4, y + 0.9, 4.4, 1.6, "GRU\n$s_i = f(s_{i-1}, [E y_{i-1}; c_i])$", RNN, size=9.5)
    box(ax, 16.8, y + 1.2, 1.6, 1.0, "$s_i$", "white", size=12)
    box(ax, 19.4, y + 0.9, 4.4, 1.6, "output\n$\\tanh(W[s_i; c_i; E y_{i-1}])$\n$\\to p(y_i)$", OUTPUT, size=9.5)
    for start, end in (((2.2, y + 1.7), (3.2, y + 1.7)), ((7.8, y + 1.7), (8.8, y + 1.7)),
                       ((10.4, y + 1.7), (11.4, y + 1.7)), ((15.8, y + 1.7), (16.8, y + 1.7)),
                       ((18.4, y + 1.7), (19.4, y + 1.7)), ((5.5, y + 0.0), (5.5, y + 0.9))):
        arrow(ax, start, end)
    arrow(ax, (1.2, y + 2.2), (13.0, y + 2.5), rad=-0.12)  # s_{i-1} is also the GRU's previous state


def luong_row(ax, y):
    """Luong et al. 2015: the RNN steps first, attends with h_t, then h~_t (eq. 5-7, section 3.3)."""
    ax.text(0.2, y + 3.3, "Luong: attends with $h_t$, AFTER the RNN step, then makes $\\tilde h_t$",
            fontsize=11, weight="bold")
    box(ax, 0.2, y + 1.2, 1.6, 1.0, "$h_{t-1}$", "white", size=12)
    box(ax, 2.6, y + 0.9, 4.6, 1.6, "GRU\n$h_t = f(h_{t-1}, [E y_{t-1}; \\tilde h_{t-1}])$", RNN, size=9.5)
    box(ax, 8.0, y + 1.2, 1.4, 1.0, "$h_t$", "white", size=12)
    box(ax, 10.2, y + 0.9, 4.6, 1.6, "attention\n$a_t(s) = \\mathrm{align}(h_t, \\bar h_s)$\n$c_t = \\sum_s a_t(s) \\bar h_s$",
        ATTEND, size=9.5)
    box(ax, 10.2, y - 0.9, 4.6, 0.9, "encoder states $\\bar h_1 \\dots \\bar h_S$", "white", size=9.5)
    box(ax, 15.6, y + 1.2, 1.4, 1.0, "$c_t$", "white", size=12)
    box(ax, 17.8, y + 0.9, 3.4, 1.6, "$\\tilde h_t =$\n$\\tanh(W_c [c_t; h_t])$", OUTPUT, size=9.5)
    box(ax, 21.9, y + 0.9, 1.9, 1.6, "softmax\n$(W_s \\tilde h_t)$\n$\\to p(y_t)$", OUTPUT, size=9)
    for start, end in (((1.8, y + 1.7), (2.6, y + 1.7)), ((7.2, y + 1.7), (8.0, y + 1.7)),
                       ((9.4, y + 1.7), (10.2, y + 1.7)), ((14.8, y + 1.7), (15.6, y + 1.7)),
                       ((17.0, y + 1.7), (17.8, y + 1.7)), ((21.2, y + 1.7), (21.9, y + 1.7)),
                       ((12.5, y + 0.0), (12.5, y + 0.9))):
        arrow(ax, start, end)
    arrow(ax, (8.7, y + 2.2), (18.6, y + 2.5), rad=-0.1)  # h_t joins c_t in h~_t
    arrow(ax, (19.5, y + 0.9), (4.9, y + 0.9), dashed=True, rad=-0.36)  # input feeding, to the next step
    ax.text(12.0, y - 2.65, "input feeding: $\\tilde h_t$ joins the next step's input (section 3.3)",
            fontsize=8.5, style="italic", ha="center")


def check_decoder_order():
    """The diagram's order is the code's: the weights of one Decoder.step are the attention of the state
    before its RNN step for Bahdanau's decoder (s_{i-1}), of the state after it for Luong's (h_t)."""
    import tfattn

    rng = np.random.default_rng(0)  # encoder states and a first state that make the weights differ
    outputs = rng.normal(size=(1, 5, 8)).astype("float32")  # (batch, t_in, units)
    state, mask = {"h": rng.normal(size=(1, 8)).astype("float32")}, np.ones((1, 5), bool)
    for kind, after in (("bahdanau", False), ("luong", True)):
        scaled = tfattn.LuongAttention("general", scale=True) if kind == "luong" else None  # weights not saturated
        decoder = tfattn.Decoder(10, 4, 8, attention=kind, attention_layer=scaled)
        decoder(np.array([[2, 4]]), outputs, state, mask)  # builds it
        memory, before = decoder.prepare_memory(outputs, mask), decoder.initial_state(state)
        _, weights, new = decoder.step(np.array([2]), before, memory)  # weights: (batch, t_in)
        query = (new if after else before)["h"][:, None, :]  # (batch, 1, units)
        _, expected = decoder.attention_layer(query, memory["values"], value_mask=memory["mask"],
                                              prepared_keys=memory["keys"])
        assert np.allclose(weights, np.asarray(expected)[:, 0], atol=1e-5), f"{kind} attends elsewhere: redraw"


# -- (c) global, local-m and local-p ----------------------------------------------------------------

WINDOW = 2  # D: a window of 2D + 1 = 5 source positions
ALIGN = [0, 1, 5, 6, 3, 8]  # the source position each of six target steps should read: a reordering


def local_inputs():
    """Ten source vectors and six queries, each query close to the source vector of ALIGN[t], with one
    more feature that tells local-p's position network where to look. (batch = 1.)"""
    rng = np.random.default_rng(0)
    value = rng.normal(size=(1, 10, 16)).astype("float32")  # (batch, t_in, units - 1)
    query = 0.6 * value[:, ALIGN] + 0.1 * rng.normal(size=(1, len(ALIGN), 16)).astype("float32")
    # p_t = S * sigmoid(v_p^T tanh(W_p h_t)) with W_p and v_p set below: the last feature is that logit's atanh.
    target = (np.array(ALIGN) + 0.25) / value.shape[1]  # p_t / S, a little past each aligned position
    feature = np.arctanh(np.log(target / (1 - target)) / 6.0)  # v_p = 6, W_p reads this feature alone
    query = np.concatenate([query, feature[None, :, None].astype("float32")], axis=-1)  # (batch, t_q, units)
    value = np.concatenate([value, np.zeros((1, 10, 1), "float32")], axis=-1)  # (batch, t_in, units)
    return query, value


def local_windows():
    """LuongAttention("dot") global, local-m and local-p (window D = 2) over the same queries and values."""
    import tfattn

    query, value = local_inputs()
    fig = Figure(figsize=(12, 3.9), layout="constrained")
    axes = fig.subplots(1, 3)
    sources, steps = [f"x{j}" for j in range(value.shape[1])], [f"t={t}" for t in range(query.shape[1])]
    for ax, local in zip(axes, (None, "m", "p")):
        options = {"window": WINDOW} if local else {}  # (units: local-p's prediction layer, of 1 here)
        layer = tfattn.LuongAttention("dot", local=local, **options, **({"units": 1} if local == "p" else {}))
        _, weights = layer(query, value)  # (batch, t_q, t_in); the first call builds the layer
        positions = None
        if local == "p":  # W_p reads the last feature; v_p = 6
            layer.w_p.assign(np.eye(query.shape[-1], 1, k=-(query.shape[-1] - 1), dtype="float32"))
            layer.v_p.assign(np.array([6.0], "float32"))
            _, weights = layer(query, value)
        if local is not None:
            positions = np.asarray(layer.predict_positions(query, source_length=value.shape[1]))[0]  # (t_q,)
        image = heatmap(ax, np.asarray(weights)[0], sources, steps, "")
        if positions is not None:
            draw_windows(ax, positions, value.shape[1])
        ax.set_xlabel("source position (t_in)")
        for t, s in enumerate(ALIGN):
            ax.add_patch(Rectangle((s - 0.5, t - 0.5), 1, 1, fill=False, edgecolor="white", linewidth=1.6,
                                   linestyle=":"))
    axes[0].set_ylabel("target step (t_out)")
    axes[0].set_title("global: every position", fontsize=10)
    axes[1].set_title("local-m: window around $p_t = t$", fontsize=10)
    axes[2].set_title("local-p: window around a predicted $p_t$,\nweights times a Gaussian", fontsize=10)
    fig.colorbar(image, ax=axes, shrink=0.9, label="attention weight")
    fig.suptitle(f"Where each target step may look (window D = {WINDOW}); dotted: the position it should read",
                 fontsize=11)
    return fig


def draw_windows(ax, positions, t_in):
    """Red crosses at p_t and the window [p_t - D, p_t + D] (centred on p_t rounded half up, as the layer does)."""
    centre = np.floor(positions + 0.5)
    ax.plot(positions, np.arange(len(positions)), "x", color="red", markersize=7)
    low, high = np.clip(centre - WINDOW, 0, t_in - 1), np.clip(centre + WINDOW, 0, t_in - 1)
    for t, (a, b) in enumerate(zip(low, high)):
        ax.add_patch(Rectangle((a - 0.5, t - 0.36), b - a + 1, 0.72, fill=False, edgecolor="red", linewidth=1.3))
    ax.set_xlim(-0.5, t_in - 0.5)


# -- (d) hard against soft ---------------------------------------------------------------------------


def hard_and_soft():
    """LuongAttention("dot") soft, and hard (probability="hard", seed 0): one draw per row in training,
    the argmax at inference, and the share of 2,000 draws of one row against its soft weights."""
    import tfattn

    rng = np.random.default_rng(1)
    value = rng.normal(size=(1, 6, 4)).astype("float32")  # (batch, t_in, units)
    query = 0.8 * rng.normal(size=(1, 4, 4)).astype("float32")  # (batch, t_q, units)
    _, soft = tfattn.LuongAttention("dot")(query, value)  # (batch, t_q, t_in)
    hard = tfattn.LuongAttention("dot", probability="hard", seed=0)
    _, drawn = hard(query, value, training=True)  # one-hot rows, drawn from the soft weights
    _, argmax = hard(query, value, training=False)  # one-hot rows, the most likely position
    _, draws = hard(np.repeat(query[:, :1], 2000, axis=1), value, training=True)  # (batch, 2000, t_in)
    fig = Figure(figsize=(12, 3.3), layout="constrained")
    axes = fig.subplots(1, 4, width_ratios=[1, 1, 1, 1.25])
    sources, steps = [f"x{j}" for j in range(6)], [f"t={t}" for t in range(4)]
    titles = ("soft: a weighted average\nof every position", "hard, in training: one position\ndrawn from the soft weights",
              "hard, at inference:\nthe most likely position")
    for ax, weights, title in zip(axes, (soft, drawn, argmax), titles):
        image = heatmap(ax, np.asarray(weights)[0], sources, steps, title)
        ax.set_xlabel("source position (t_in)")
    axes[0].set_ylabel("target step (t_out)")
    fig.colorbar(image, ax=axes[:3], shrink=0.9, label="attention weight")
    bars = axes[3]
    x = np.arange(6)
    bars.bar(x - 0.2, np.asarray(soft)[0, 0], width=0.4, color="#4c72b0", label="soft weight")
    bars.bar(x + 0.2, np.asarray(draws)[0].mean(axis=0), width=0.4, color="#dd8452", label="share of 2,000 draws")
    bars.set_xticks(x, labels=sources)
    bars.set_ylim(0, 1)
    bars.set_title("row t=0: the draws follow\nthe soft weights", fontsize=10)
    bars.legend(fontsize=8, loc="upper right")
    return fig


# -- (e) multi-head: split, attend, concatenate --------------------------------------------------------


def multi_head_values():
    """Notebook 6's sentence and layer: x `(t, units)`, every head's weights `(heads, t, t)`, every head's
    output `(heads, t, units / heads)`, their concatenation `(t, units)` and the layer's context."""
    import keras

    from tfattn.layers import MultiHeadAttention

    words = ["the", "cat", "saw", "the", "dog"]
    vocabulary = sorted(set(words))
    word_vectors = np.random.default_rng(0).normal(size=(len(vocabulary), 8)).astype("float32")
    x = word_vectors[[vocabulary.index(w) for w in words]][None]  # (batch, t, units)
    keras.utils.set_random_seed(0)  # as notebook 6 makes its layer
    layer = MultiHeadAttention(heads=2)
    context, heads = layer(x, x, return_heads=True)  # (batch, t, units), (batch, heads, t_q, t_in)
    values = layer.project_values(x)  # (batch, heads, t, units / heads): V W_i^V
    outputs = np.einsum("bhqk,bhkv->bhqv", np.asarray(heads), np.asarray(values))  # each head's weighted sum
    concat = np.concatenate(list(outputs[0]), axis=-1)  # (t, heads * units / heads)
    return words, x[0], np.asarray(heads)[0], outputs[0], concat, np.asarray(context)[0]


def multi_head():
    words, x, weights, outputs, concat, context = multi_head_values()
    fig = Figure(figsize=(12, 4.6))
    overlay = fig.add_axes((0, 0, 1, 1))
    overlay.set_axis_off()
    overlay.set_xlim(0, 1)
    overlay.set_ylim(0, 1)
    fig.text(0.5, 0.95, "Multi-head attention: two heads side by side, then concatenated (MultiHeadAttention(heads=2))",
             ha="center", fontsize=12, weight="bold")
    small(fig, (0.04, 0.28, 0.11, 0.40), x, words, "x\n(batch, t, units) = (1, 5, 8)")
    for i, y in enumerate((0.53, 0.08)):
        ax = fig.add_axes((0.28, y, 0.12, 0.30))
        heatmap(ax, weights[i], words, words, "")
        ax.tick_params(labelsize=7)
        ax.set_title(f"head {i + 1}: softmax($Q_{i + 1} K_{i + 1}^\\top / \\sqrt{{4}}$)", fontsize=9)
        small(fig, (0.47, y, 0.06, 0.30), outputs[i], words, f"head {i + 1} = weights $\\cdot V_{i + 1}$\n(t, 4)")
        arrow(overlay, (0.16, 0.48), (0.245, y + 0.15))
        arrow(overlay, (0.41, y + 0.15), (0.445, y + 0.15))
        arrow(overlay, (0.54, y + 0.15), (0.60, 0.48))
    overlay.text(0.205, 0.48, "$Q_i = x W_i^Q$\n$K_i = x W_i^K$\n$V_i = x W_i^V$", fontsize=9, ha="center", va="center",
                 bbox=dict(facecolor="white", edgecolor="none"))
    overlay.text(0.095, 0.08, "$Q_i, K_i, V_i$: (batch, heads, t,\nunits / heads) = (1, 2, 5, 4)", fontsize=8,
                 ha="center", family="monospace")
    small(fig, (0.63, 0.28, 0.11, 0.40), concat, words, "Concat(head 1, head 2)\n(t, 8)")
    arrow(overlay, (0.75, 0.48), (0.805, 0.48))
    overlay.text(0.785, 0.53, "$\\cdot W^O$", fontsize=10, ha="center")
    small(fig, (0.84, 0.28, 0.11, 0.40), context, words, "context\n(batch, t, units) = (1, 5, 8)")
    return fig


def small(fig, rect, matrix, rows, title):
    """A matrix of values (rows: the words) as a small diverging heatmap at `rect`."""
    ax = fig.add_axes(rect)
    limit = float(np.abs(matrix).max())
    ax.imshow(matrix, cmap=VALUES, vmin=-limit, vmax=limit, aspect="auto")
    ax.set_yticks(range(len(rows)), labels=rows, fontsize=7)
    ax.set_xticks([])
    ax.set_title(title, fontsize=8.5)
    return ax


# -- (f) one Transformer block, pre-norm as tfattn builds it ------------------------------------------------


def check_transformer_structure():
    """The diagram's structure is the package's: pre-norm blocks (norm_first=True by default), two
    sublayers in an encoder block and three in a decoder block, each with its own LayerNorm, and a final
    LayerNorm after the stack."""
    from tfattn.layers.transformer import TransformerBlock, TransformerEncoder

    encoder, decoder = TransformerBlock(8, 2, 16), TransformerBlock(8, 2, 16, cross=True)
    assert encoder.norm_first and len(encoder.norms) == 2 and encoder.cross_attention is None
    assert decoder.norm_first and len(decoder.norms) == 3 and decoder.cross_attention is not None
    assert decoder.ff_hidden.activation.__name__ == "relu"
    stack = TransformerEncoder(20, 8)
    assert stack.norm_first and hasattr(stack, "final_norm"), "the stack ends with a LayerNorm when pre-norm"


def sublayer(ax, x, y, name, color, note=None):
    """x + sublayer(LayerNorm(x)) from height y: the LayerNorm, the sublayer, the residual and its sum.
    Returns the height where the sum leaves."""
    box(ax, x - 1.6, y + 0.35, 3.2, 0.5, "LayerNorm", NORM, size=9)
    box(ax, x - 2.2, y + 1.15, 4.4, 0.75, name, color, size=9.5)
    arrow(ax, (x, y), (x, y + 0.35))
    arrow(ax, (x, y + 0.85), (x, y + 1.15))
    ax.add_patch(matplotlib.patches.Circle((x, y + 2.35), 0.22, facecolor="white", edgecolor="#333333"))
    ax.text(x, y + 2.35, "+", ha="center", va="center", fontsize=11)
    arrow(ax, (x, y + 1.9), (x, y + 2.13))
    ax.plot([x, x - 2.6, x - 2.6], [y + 0.15, y + 0.15, y + 2.35], color="#333333", linewidth=1.2)
    arrow(ax, (x - 2.6, y + 2.35), (x - 0.22, y + 2.35))
    if note:
        ax.text(x + 2.35, y + 1.52, note, fontsize=8, va="center", style="italic")
    return y + 2.57


def transformer_block():
    check_transformer_structure()
    fig, ax = canvas(12, 6.9, (0, 24), (0, 13.8))
    ax.text(12, 13.4, "The Transformer as tfattn builds it: pre-norm blocks, x + Sublayer(LayerNorm(x))",
            ha="center", fontsize=12, weight="bold")
    for x, ids, name, shape_out in ((5.5, "source ids (batch, t_in)", "encoder", "encoder outputs (batch, t_in, units)"),
                                    (17.0, "target ids, shifted right: [START] y1 ... (batch, t_out)", "decoder",
                                     "logits (batch, t_out, vocab)")):
        ax.text(x, 0.35, ids, ha="center", fontsize=9, family="monospace")
        arrow(ax, (x, 0.7), (x, 1.1))
        box(ax, x - 2.4, 1.1, 4.8, 0.8, "embedding $\\times \\sqrt{units}$ + positions", "white", size=9.5)
        arrow(ax, (x, 1.9), (x, 2.5))
        top, cross = stack(ax, x, 2.5, name)
        box(ax, x - 1.6, top + 0.3, 3.2, 0.5, "final LayerNorm", NORM, size=9)
        arrow(ax, (x, top), (x, top + 0.3))
        if name == "decoder":
            box(ax, x - 1.6, top + 1.1, 3.2, 0.5, "Dense (vocab)", OUTPUT, size=9)
            arrow(ax, (x, top + 0.8), (x, top + 1.1))
            top += 0.8
        arrow(ax, (x, top + 0.8), (x, top + 1.2))
        ax.text(x, top + 1.35, shape_out, ha="center", fontsize=9, family="monospace")
        if name == "encoder":
            outputs = (x + 3.3, top + 1.5)
    arrow(ax, outputs, (14.8, cross), color="#b8860b", rad=-0.2)  # encoder outputs -> cross-attention
    ax.text(11.6, outputs[1] + 0.05, "keys and values of\nthe cross-attention", fontsize=8.5, color="#8b6508",
            ha="center")
    return fig


def stack(ax, x, y, name):
    """The N blocks of the encoder (self-attention, feed-forward) or of the decoder (causal self-attention,
    cross-attention, feed-forward), framed and marked N x. Returns the height of its top and, for the
    decoder, the middle of the cross-attention's box."""
    start, cross = y, None
    if name == "encoder":
        y = sublayer(ax, x, y + 0.2, "multi-head self-attention", ATTEND, "padding masked")
    else:
        y = sublayer(ax, x, y + 0.2, "causal multi-head self-attention", ATTEND, "no later position")
        y, cross = sublayer(ax, x, y, "multi-head cross-attention", ATTEND, "queries: the decoder"), y + 1.52
    y = sublayer(ax, x, y, "feed-forward: Dense(ff_dim, relu),\nDense(units)", RNN, "each position alone")
    ax.add_patch(FancyBboxPatch((x - 3.1, start), 7.9, y - start + 0.15, boxstyle="round,pad=0.05,rounding_size=0.3",
                                fill=False, edgecolor="#888888", linestyle="--", linewidth=1.0))
    left = name == "encoder"
    ax.text(x - 3.3 if left else x + 5.0, (start + y) / 2, f"N $\\times$\n{name}\nblock", ha="right" if left else "left",
            va="center", fontsize=10)
    return y + 0.15, cross


# -- (g) sinusoidal positions ------------------------------------------------------------------------------


def sinusoidal_positions():
    """tfattn's sinusoids: the table PE (positions 0-49, d_model 64) and four of its features along the positions."""
    from tfattn.layers.positions import sinusoids

    n_positions, d_model = 50, 64
    table = np.asarray(sinusoids(np.arange(n_positions)[None], d_model))[0]  # (t, d_model)
    fig = Figure(figsize=(12, 3.9), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.15])
    image = left.imshow(table, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    left.set(xlabel="feature i of d_model = 64 (even: sin, odd: cos)", ylabel="position pos",
             title="PE: one row per position, added to its embedding")
    fig.colorbar(image, ax=left, shrink=0.9)
    positions = np.arange(n_positions)
    for feature, style in ((4, "-"), (5, "--"), (16, "-"), (40, "-")):
        right.plot(positions, table[:, feature], style, marker=".", markersize=4, linewidth=1.1,
                   label=f"feature {feature}: {'sin' if feature % 2 == 0 else 'cos'}(pos / 10000^({feature - feature % 2}/64))")
    right.set(xlabel="position pos", ylabel="PE(pos, i)", ylim=(-1.15, 1.6),
              title="each feature a sinusoid, its wavelength growing with i")
    right.legend(fontsize=8, loc="upper right", ncol=2)
    return fig


# -- reference pictures of trained models ("yours should look like this") -----------------------------------
# Each is trained as its notebook trains it, with the notebook's default sizes and seeds, and its weights
# kept in references.json (rounded to 3 decimals): the pictures are drawn from there.


def dates_data(n_train, n_test):
    """The dates corpus and its character tokenizers, as every dates notebook makes them (seed 0)."""
    import tfattn
    from tfattn.data import dates

    train, test = dates.make_corpus(n_train=n_train, n_test=n_test, seed=0)
    source = tfattn.Tokenizer.adapt([s for s, _ in train], level="char", max_length=40)
    target = tfattn.Tokenizer.adapt([t for _, t in train], level="char", max_length=14)
    return train, test, source, target


def rounded(x):
    """An array as nested lists of floats with 3 decimals (in float64: float32's 0.652 prints as 0.6520000457...)."""
    return np.round(np.asarray(x, dtype="float64"), 3).tolist()


def tokens(tokenizer, ids):
    """Token strings of one row of ids, padding dropped."""
    return [t.decode() for t in tokenizer.ids_to_tokens(ids).numpy() if t]


def greedy_attention(model, source, target, text):
    """`{"source", "output", "weights"}` of a greedy translation of `text`, as notebooks 2 and the tour draw it."""
    import tfattn

    input_tokens, ids = source.tokens_and_ids([text])  # (1, t_in)
    out = tfattn.greedy(model, ids, tfattn.DecodeConfig(max_length=target.max_length))
    return {"source": tokens(source, ids[0]), "output": tokens(target, out["ids"][0]),
            "weights": rounded(out["attention"][0])}


def train_why_attention():
    """Notebook 2's Bahdanau and Luong models at its defaults: 600 updates each on the reference tier."""
    import keras
    import tfattn

    train, test, source, target = dates_data(20_000, 1_000)
    example = max(test, key=lambda pair: len(pair[0]))[0]  # the longest test source, as notebook 2 draws it
    kinds = {"bahdanau": dict(attention="bahdanau"), "luong": dict(attention="luong", score="general", scale=True)}
    found = {}
    for name, kind in kinds.items():
        keras.utils.set_random_seed(0)
        model = tfattn.make_model(tfattn.ModelConfig(**kind, embedding_dim=32, units=64), source.vocab_size,
                                  target.vocab_size)
        config = tfattn.TrainConfig(learning_rate=5e-3, decay_steps=600, epochs=1, steps_per_epoch=600, accel=False,
                                    seed=0)
        data = tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=128, seed=0), repeat=True)
        tfattn.Trainer(model, config, quiet=True).fit(data)
        found[f"why-attention/{name}"] = greedy_attention(model, source, target, example)
    return found


def train_the_tour():
    """The tour's Luong model at its defaults (30,000 pairs, 4 epochs), reading "tue 5 march 2019"."""
    import keras
    import tfattn

    train, test, source, target = dates_data(30_000, 1_000)
    keras.utils.set_random_seed(0)
    model = tfattn.make_model(tfattn.ModelConfig(attention="luong", score="general", embedding_dim=32, units=128),
                              source.vocab_size, target.vocab_size)
    data = tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=128, seed=0))
    steps = -(-len(train) // 128) * 4
    tfattn.fit(model, data, tfattn.TrainConfig(learning_rate=5e-3, decay_steps=steps, epochs=4, seed=0), quiet=True)
    return {"tour/luong": greedy_attention(model, source, target, "tue 5 march 2019")}


def train_local_and_hard():
    """Notebook 3's global, local-m, local-p (window 3) and hard models at its defaults (model.fit, 3 epochs
    of 20,000 pairs), teacher-forced over its longest test date, with the local models' p_t."""
    import dataclasses

    import keras
    import tfattn

    train, test, source, target = dates_data(20_000, 1_000)
    example = max(test, key=lambda pair: len(pair[0]))
    batches = lambda: tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=128, seed=0))  # noqa: E731
    first = next(iter(tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=128, bucket=False),
                                          shuffle=False)))
    base = tfattn.ModelConfig(attention="luong", score="general", embedding_dim=32, units=64)
    configs = {"global": base, "local-m": dataclasses.replace(base, local="m", window=3),
               "local-p": dataclasses.replace(base, local="p", window=3), "hard": dataclasses.replace(base, hard=True)}
    found = {}
    for name, config in configs.items():
        keras.utils.set_random_seed(0)
        model = tfattn.make_model(config, source.vocab_size, target.vocab_size)
        model((first[0], first[1][:, :-1]))  # built on the first batch, as notebook 3 builds it
        model.compile(optimizer=keras.optimizers.Adam(5e-3))
        model.fit(batches(), epochs=3, verbose=0)
        found[f"local-and-hard/{name}"] = teacher_forced(model, source, target, *example)
    return found


def teacher_forced(model, source, target, source_text, target_text):
    """Notebook 3's teacher_forced: the decoder stepped over the true target; weights, tokens and, for local
    attention, the positions p_t that predict_positions gives for each step's query h_t."""
    input_tokens, ids = source.tokens_and_ids([source_text])  # (1, t_in)
    target_ids = target([target_text])  # (1, t_out + 1)
    memory, state = model.encode(ids)
    weights, queries = [], []
    for t in range(target_ids.shape[1] - 1):
        _, w, state = model.decoder.step(target_ids[:, t], state, memory)  # w: (1, t_in)
        weights.append(np.asarray(w[0]))
        queries.append(np.asarray(state["h"][0]))
    found = {"source": tokens(source, ids[0]), "output": tokens(target, target_ids[0, 1:]),
             "weights": rounded(np.stack(weights))}
    layer = model.decoder.attention_layer
    if layer.local is not None:
        positions = layer.predict_positions(np.stack(queries)[None], source_length=len(found["source"]))
        found["positions"], found["window"] = rounded(np.asarray(positions)[0]), layer.window
    return found


def train_transformer():
    """Notebook 6's Transformer at its defaults (30,000 pairs, 8 epochs): every head's cross-attention while
    it translates "tue 5 march 2019"."""
    import keras
    import tensorflow as tf
    import tfattn

    train, test, source, target = dates_data(30_000, 1_000)
    keras.utils.set_random_seed(0)
    config = tfattn.ModelConfig(attention="transformer", units=64, heads=4, num_layers=2, ff_dim=128,
                                positions="sinusoidal", dropout=0.1)
    model = tfattn.make_model(config, source.vocab_size, target.vocab_size)
    data = tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=128, seed=0))
    steps = -(-len(train) // 128) * 8
    tfattn.fit(model, data, tfattn.TrainConfig(learning_rate=2e-3, warmup_steps=100, decay_steps=steps, epochs=8,
                                               seed=0), quiet=True)
    translator = tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14))
    out = {k: v.numpy() for k, v in translator.translate_heads(tf.constant(["tue 5 march 2019"])).items()}
    return {"transformer/heads": {"source": [t.decode() for t in out["input_tokens"][0] if t],
                                  "output": [t.decode() for t in out["tokens"][0] if t],
                                  "weights": rounded(out["attention_heads"][0])}}


def retrain():
    """Trains the reference models and writes references.json (a few minutes on 2 CPU cores)."""
    found = {}
    for train in (train_why_attention, train_the_tour, train_local_and_hard, train_transformer):
        found.update(train())
        print(f"trained {train.__name__}", flush=True)
    REFERENCES.write_text(json.dumps(found, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")


def references():
    return json.loads(REFERENCES.read_text(encoding="utf-8"))


def reference_panels(names, titles, suptitle, width=5.0):
    """Trained weights of references.json side by side, drawn by tfattn.plot.plot_attention on one 0-1 scale."""
    from tfattn.plot import plot_attention

    found = references()
    fig = Figure(figsize=(width * len(names), 3.9), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(names)))
    for ax, name, title in zip(axes, names, titles):
        ref = found[name] if name else None
        if ref is None:  # the baseline: no attention, all zeros
            ref = {**found[names[1]], "weights": np.zeros_like(found[names[1]]["weights"]).tolist()}
        plot_attention(np.array(ref["weights"]), ref["source"], ref["output"], ax=ax, title=title, colorbar=False,
                       positions=ref.get("positions"), window=ref.get("window"))
        ax.images[0].set_clim(0.0, 1.0)
    fig.colorbar(axes[0].images[0], ax=axes, shrink=0.9, label="attention weight")
    fig.suptitle(suptitle, fontsize=11)
    return fig


def reference_why_attention():
    return reference_panels([None, "why-attention/bahdanau", "why-attention/luong"],
                            ["RNNencdec (no attention): all zeros", "RNNsearch (Bahdanau)", "Luong global"],
                            "Yours should look like this: 600 updates each, the longest test date, greedy")


def reference_local():
    return reference_panels(["local-and-hard/global", "local-and-hard/local-m", "local-and-hard/local-p"],
                            ["global", "local-m", "local-p"],
                            "Yours should look like this: teacher-forced over the longest test date (crosses: p_t)")


def reference_hard():
    return reference_panels(["local-and-hard/global", "local-and-hard/hard"], ["soft", "hard"],
                            "Yours should look like this: soft and hard attention, teacher-forced")


def reference_tour():
    return reference_panels(["tour/luong"], ["Luong attention: 'tue 5 march 2019'"],
                            "Yours should look like this (a model trained with the defaults)", width=6.0)


def reference_transformer():
    from tfattn.plot import plot_heads

    ref = references()["transformer/heads"]
    fig = plot_heads(np.array(ref["weights"]), ref["source"], ref["output"],
                     title="Yours should look like this: cross-attention by layer and head, 'tue 5 march 2019'")
    for ax in fig.axes:
        ax.images[0].set_clim(0.0, 1.0)
    return fig


# -- writing, attaching, checking ------------------------------------------------------------------------

DRAWINGS = {
    "attention-steps.png": attention_steps,
    "when-they-attend.png": when_they_attend,
    "local-windows.png": local_windows,
    "hard-and-soft.png": hard_and_soft,
    "multi-head.png": multi_head,
    "transformer-block.png": transformer_block,
    "sinusoidal-positions.png": sinusoidal_positions,
    "reference-why-attention.png": reference_why_attention,
    "reference-local.png": reference_local,
    "reference-hard.png": reference_hard,
    "reference-tour.png": reference_tour,
    "reference-transformer.png": reference_transformer,
}


def draw_all():
    """{file name: PNG bytes} of every figure, drawn now."""
    import keras

    drawn = {}
    for name, draw in DRAWINGS.items():
        keras.utils.set_random_seed(0)  # each figure from the same state, whatever was drawn before it
        drawn[name] = png_bytes(draw())
    return drawn


def versions():
    """What the pixels depend on: matplotlib draws them, numpy and TensorFlow compute the values."""
    import tensorflow as tf
    from PIL import Image

    return {"matplotlib": matplotlib.__version__, "numpy": np.__version__, "tensorflow": tf.__version__,
            "pillow": Image.__version__}


def notebook_paths():
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def attach(figures):
    """Puts each figure into every Markdown cell that references it, and drops attachments no cell
    references; writes only the notebooks that change. Returns {notebook name: [figure names]}."""
    import nbformat

    used = {}
    for path in notebook_paths():
        notebook = nbformat.read(path, as_version=4)
        before = nbformat.writes(notebook)
        for cell in notebook.cells:
            names = ATTACHMENT.findall(cell.source) if cell.cell_type == "markdown" else []
            unknown = sorted(set(names) - set(figures))
            assert not unknown, f"{path.name} references figures that make_figures.py does not draw: {unknown}"
            if names:
                cell["attachments"] = {n: {"image/png": base64.b64encode(figures[n]).decode("ascii")} for n in names}
            elif cell.cell_type == "markdown":
                cell.pop("attachments", None)
            used.setdefault(path.name, []).extend(names)
        if nbformat.writes(notebook) != before:
            nbformat.write(notebook, path)
    return {name: names for name, names in used.items() if names}


def pixels(data):
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def check():
    """What differs between the figures drawn now, docs/figures/ and the notebooks' attachments: a list
    of problems, empty when they agree. Pixels are compared exactly where the versions that drew the
    committed files are this Python's; elsewhere (Colab's matplotlib renders text its own way) each
    figure must still draw, at the committed size in pixels give or take SIZE_SLACK, and under MAX_BYTES."""
    drawn, problems = draw_all(), []
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    exact = manifest["versions"] == versions()
    for name, data in drawn.items():
        path = FIGURES / name
        if not path.exists():
            problems.append(f"{name}: drawn, but docs/figures/{name} is not committed")
        else:
            problems += compare(name, data, path.read_bytes(), exact)
    problems += [f"docs/figures/{p.name}: committed, but no longer drawn" for p in FIGURES.glob("*.png")
                 if p.name not in drawn]
    return problems + check_attachments(drawn)


def compare(name, drawn, committed, exact):
    """The problems of a figure drawn now against its committed PNG: bytes, pixel size (exact with `exact`,
    the same versions drew both; within SIZE_SLACK otherwise), and with `exact` every pixel."""
    problems = []
    if len(committed) > MAX_BYTES or len(drawn) > MAX_BYTES:
        problems.append(f"{name}: {len(committed):,} bytes committed, {len(drawn):,} drawn; at most {MAX_BYTES:,}")
    now, then = pixels(drawn), pixels(committed)
    slack = 0 if exact else SIZE_SLACK
    if max(abs(a - b) for a, b in zip(now.shape, then.shape)) > slack:  # (height, width, 3) both
        problems.append(f"{name}: {now.shape[1]}x{now.shape[0]} pixels drawn, {then.shape[1]}x{then.shape[0]} committed")
    elif exact and not np.array_equal(now, then):
        changed = float(np.mean(np.any(now != then, axis=-1)))
        problems.append(f"{name}: {changed:.2%} of its pixels differ from the committed file")
    return problems


def check_attachments(drawn):
    """Every reference of a Markdown cell has its attachment, the committed file's bytes; every figure is used."""
    import nbformat

    problems, used = [], set()
    for path in notebook_paths():
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            names = ATTACHMENT.findall(cell.source) if cell.cell_type == "markdown" else []
            used.update(names)
            attached = cell.get("attachments", {})
            if sorted(attached) != sorted(set(names)):
                problems.append(f"{path.name} cell {i}: attachments {sorted(attached)}, references {sorted(set(names))}")
                continue
            for name in names:
                committed = (FIGURES / name).read_bytes() if (FIGURES / name).exists() else b""
                if base64.b64decode(attached[name]["image/png"]) != committed:
                    problems.append(f"{path.name} cell {i}: {name} is not the committed file (run make_figures.py)")
    problems += [f"{name}: drawn, but no notebook shows it" for name in sorted(set(drawn) - used)]
    return problems


def write():
    """Draws every figure, writes the files that changed and the manifest, and attaches them."""
    drawn = draw_all()
    FIGURES.mkdir(parents=True, exist_ok=True)
    for name, data in drawn.items():
        path = FIGURES / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            print(f"wrote docs/figures/{name} ({len(data):,} bytes)")
    for path in FIGURES.glob("*.png"):
        if path.name not in drawn:
            path.unlink()
            print(f"removed docs/figures/{path.name}")
    MANIFEST.write_text(json.dumps({"versions": versions()}, indent=1) + "\n", encoding="utf-8")
    for notebook, names in attach(drawn).items():
        print(f"{notebook}: {', '.join(names)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="draw in memory and compare; exit 1 on a difference")
    parser.add_argument("--retrain", action="store_true", help="retrain the reference models first (about 15 minutes on 2 cores)")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        print("\n".join(problems) or f"{len(DRAWINGS)} figures agree with docs/figures/ and the notebooks")
        return 1 if problems else 0
    if args.retrain:
        retrain()
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
