"""Attention heatmaps, training curves and BLEU-by-length plots.

matplotlib is imported inside each function, and figures are made with `matplotlib.figure.Figure`
rather than `pyplot`: nothing needs a display, and no figure is kept in pyplot's global state (in a
notebook, show a returned figure by leaving it as the cell's last expression). Every function takes
an optional `ax` to draw into an existing figure and returns the figure it drew on.

Inputs are plain NumPy arrays, lists of str or bytes and dicts, so the outputs of an exported
SavedModel (`tf.Tensor`s of bytes, padded with empty strings) can be passed in as they are.

`explore` (from `tfattn.explore`) draws no figure: it makes an interactive HTML page of translations
and their attention (hover a token, choose a head or a beam hypothesis), shown inline in a notebook.
"""

from pathlib import Path

import numpy as np

from tfattn.explore import Explorer, explore  # noqa: F401 (public here: tfattn.plot.explore)


def _to_numpy(x):
    """A NumPy array from an array-like, a list, or an eager `tf.Tensor` (anything with `.numpy()`)."""
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _as_tokens(tokens):
    """A list of str from str or bytes tokens; bytes are decoded as UTF-8 with errors replaced."""
    tokens = _to_numpy(tokens).reshape(-1).tolist()
    return [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t) for t in tokens]


def _strip_padding(tokens):
    """`tokens` without its trailing empty strings."""
    end = len(tokens)
    while end and tokens[end - 1] == "":
        end -= 1
    return tokens[:end]


def _new_figure(figsize, ncols=1):
    """A figure that is not registered with pyplot, and its axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(1, ncols)
    return fig, axes


def crop_attention(attention, input_tokens, output_tokens):
    """Drop padding from a `(t_out, t_in)` attention matrix and its token lists.

    Trailing empty tokens (`""` or `b""`, the padding of a batched SavedModel output) are removed
    from both token lists. Then both the matrix and the lists are cropped to their common size:
    `t_in = min(len(input_tokens), attention.shape[1])` and likewise for `t_out`, so a matrix that
    is longer than its tokens (padded steps) or tokens longer than the matrix (e.g. an end token
    that has no attention row) are both handled by cutting the extra part.

    Args:
        attention: array-like `(t_out, t_in)`: NumPy, nested lists or an eager `tf.Tensor`.
        input_tokens: sequence of str or bytes, the source tokens.
        output_tokens: sequence of str or bytes, the output tokens.

    Returns:
        (attention, input_tokens, output_tokens): a float NumPy array `(t_out, t_in)` and two lists
        of str of lengths `t_in` and `t_out`.

    Example:
        >>> weights, src, out = crop_attention(np.ones((3, 4)), [b"hola", b""], ["hi", "", ""])
        >>> weights.shape, src, out
        ((1, 1), ['hola'], ['hi'])
    """
    attention = _to_numpy(attention).astype(float)
    if attention.ndim != 2:
        raise ValueError(f"attention must be 2-D (t_out, t_in). "
                         f"Received: attention.shape={attention.shape!r}")
    input_tokens = _strip_padding(_as_tokens(input_tokens))
    output_tokens = _strip_padding(_as_tokens(output_tokens))
    t_in = min(len(input_tokens), attention.shape[1])
    t_out = min(len(output_tokens), attention.shape[0])
    return attention[:t_out, :t_in], input_tokens[:t_in], output_tokens[:t_out]


def plot_attention(attention, input_tokens, output_tokens, ax=None, title=None, positions=None, window=None,
                   colorbar=True):
    """Heatmap of attention weights: source tokens along x, output tokens along y.

    Padding is cropped first, see `crop_attention`. Hard attention's one-hot rows and the zeros of
    the no-attention baseline draw as they are; for local attention pass the window's centres.

    Args:
        attention: array-like `(t_out, t_in)`; NumPy, lists or an eager `tf.Tensor`.
        input_tokens: sequence of str or bytes of length `>= t_in` (may be padded with `""`).
        output_tokens: sequence of str or bytes of length `>= t_out` (may be padded with `""`).
        ax: `matplotlib.axes.Axes` to draw in, or `None` for a new figure. Defaults to `None`.
        title: str or `None`. Defaults to `None`.
        positions: optional array-like `(t_out,)`: local attention's centre `p_t` of each output
            row, in source positions (`LuongAttention.predict_positions`), marked with a cross.
        window: optional int, local attention's half width `D`: the window `[p_t - D, p_t + D]`
            is outlined around each cross. Needs `positions`.
        colorbar: bool. Draw a colour bar. Defaults to `True`.

    Returns:
        `matplotlib.figure.Figure`, `ax.figure` when `ax` is given.

    Example:
        >>> result = exported.translate(tf.constant(["hola mundo"]))
        >>> fig = plot_attention(result["attention"][0], result["input_tokens"][0],
        ...                      result["tokens"][0])
        >>> save_figure(fig, "attention.png")
    """
    weights, input_tokens, output_tokens = crop_attention(attention, input_tokens, output_tokens)
    if weights.size == 0:
        raise ValueError(f"Nothing to plot after cropping padding. Received: "
                         f"attention.shape={_to_numpy(attention).shape!r}, "
                         f"input_tokens={input_tokens!r}, output_tokens={output_tokens!r}")
    t_out, t_in = weights.shape
    if ax is None:
        _, ax = _new_figure(figsize=(2.5 + 0.45 * t_in, 1.5 + 0.4 * t_out))
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_xticks(range(t_in), labels=input_tokens, rotation=90)
    ax.set_yticks(range(t_out), labels=output_tokens)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if positions is not None:
        _mark_windows(ax, _to_numpy(positions).astype(float).reshape(-1)[:t_out], window, t_in)
    elif window is not None:
        raise ValueError("window outlines local attention's windows around positions: pass positions too. "
                         "Received: positions=None")
    if title is not None:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="attention weight")
    return ax.figure


def _mark_windows(ax, positions, window, t_in):
    """Crosses at `(p_t, t)` and, with a `window`, the outline of `[p_t - D, p_t + D]` on each row."""
    rows = np.arange(len(positions))
    ax.plot(positions, rows, "x", color="red", markersize=7, label="p_t")
    if window is not None:
        low, high = np.clip(positions - window, 0, t_in - 1), np.clip(positions + window, 0, t_in - 1)
        ax.hlines(rows, low - 0.5, high + 0.5, colors="red", linewidth=0.8, alpha=0.6)
    ax.set_xlim(-0.5, t_in - 0.5)


def plot_heads(attention, input_tokens, output_tokens, title=None):
    """One heatmap per attention head: `(heads, t_out, t_in)` in a row, or `(layers, heads, t_out,
    t_in)` in a grid with one row per layer (a Transformer's cross-attention).

    Args:
        attention: array-like `(heads, t_out, t_in)` or `(layers, heads, t_out, t_in)`.
        input_tokens, output_tokens: as `plot_attention` takes them; padding is cropped.
        title: str or `None`, over the whole figure. Defaults to `None`.

    Returns:
        `matplotlib.figure.Figure`.
    """
    from matplotlib.figure import Figure

    weights = _to_numpy(attention).astype(float)
    if weights.ndim == 3:
        weights = weights[None]
    if weights.ndim != 4 or 0 in weights.shape[:2]:
        raise ValueError(f"attention must be (heads, t_out, t_in) or (layers, heads, t_out, t_in). "
                         f"Received: attention.shape={_to_numpy(attention).shape!r}")
    layers, heads = weights.shape[:2]
    _, source, output = crop_attention(weights[0, 0], input_tokens, output_tokens)
    fig = Figure(figsize=(1.0 + (1.0 + 0.35 * len(source)) * heads, 0.6 + (0.8 + 0.3 * len(output)) * layers),
                 layout="constrained")
    axes = np.asarray(fig.subplots(layers, heads, squeeze=False))
    for layer in range(layers):
        for head in range(heads):
            name = f"head {head + 1}" if layers == 1 else f"layer {layer + 1}, head {head + 1}"
            plot_attention(weights[layer, head], source, output, ax=axes[layer, head], title=name, colorbar=False)
    if title is not None:
        fig.suptitle(title)
    return fig


def _history_dict(history):
    """The dict of lists from a `keras.callbacks.History` or a plain dict."""
    return dict(getattr(history, "history", history) or {})


def _series(history, key):
    """`history[key]` as a list of floats (null, for a value that was not finite, as NaN: a gap).

    Raises:
        ValueError: it is not a list of numbers, naming the key."""
    values = history.get(key)
    if values is None:
        return []
    if not isinstance(values, (list, tuple)) or not all(v is None or _is_number(v) for v in values):
        raise ValueError(f"history[{key!r}] must be a list of numbers (null where not finite), one per epoch. "
                         f"Received: history[{key!r}]={values!r}")
    return [float("nan") if v is None else float(v) for v in values]


def _is_number(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _plot_curves(ax, history, keys, ylabel):
    """Draw the non-empty curves of `keys` against 1-based epochs; return how many were drawn."""
    from matplotlib.ticker import MaxNLocator

    drawn = 0
    for key in keys:
        values = _series(history, key)
        if values:
            style = "--" if key.startswith("val_") else "-"
            ax.plot(range(1, len(values) + 1), values, style, marker=".", label=key)
            drawn += 1
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if drawn:
        ax.legend()
    return drawn


def plot_history(history, ax=None):
    """Training curves in two panels: loss, and accuracy, each with train and validation lines.

    Keys ending in `"loss"` go to the loss panel and keys containing `"acc"` (`"accuracy"`,
    `"masked_acc"`, ...) to the accuracy panel; validation keys (`"val_..."`) are dashed. Missing
    or empty keys are skipped; other keys (e.g. `"learning_rate"`) are ignored.

    Args:
        history: dict of lists, e.g. `{"loss": [...], "val_loss": [...], "accuracy": [...],
            "val_accuracy": [...]}`, or a `keras.callbacks.History` (its `.history` is used).
        ax: pair of `matplotlib.axes.Axes` `(loss_ax, accuracy_ax)` to draw in, or `None` for a new
            figure with two panels. Defaults to `None`.

    Returns:
        `matplotlib.figure.Figure`.

    Example:
        >>> fig = plot_history({"loss": [2.3, 1.1], "val_loss": [2.4, 1.5]})
        >>> save_figure(fig, "history.png")
    """
    history = _history_dict(history)
    loss_keys = [key for key in history if key.endswith("loss")]
    accuracy_keys = [key for key in history if "acc" in key]
    if not any(history.get(key) for key in loss_keys + accuracy_keys):
        raise ValueError(f"history has no loss or accuracy values to plot. "
                         f"Received: history={history!r}")
    if ax is None:
        _, ax = _new_figure(figsize=(9, 3.5), ncols=2)
    axes = list(ax) if isinstance(ax, (list, tuple, np.ndarray)) else [ax]
    if len(axes) != 2:
        raise ValueError(f"ax must be a pair of Axes (loss, accuracy). Received: ax={ax!r}")
    _plot_curves(axes[0], history, loss_keys, "loss")
    _plot_curves(axes[1], history, accuracy_keys, "accuracy")
    return axes[0].figure


def _is_one_model(bleu_by_length):
    """Whether a dict is one model's `{label: {"bleu", "n"}}` rather than `{model: that}` (or
    `{model: evaluate_texts result}`, whose values hold an `"n"` too, and `"bleu_by_length"`)."""
    return all(isinstance(v, dict) and "n" in v and "bleu_by_length" not in v for v in bleu_by_length.values())


def _as_models(bleu_by_length, label):
    """A `{model_name: {label: {"bleu", "n"}}}` dict from one model's or several models' scores.

    An `evaluate.evaluate_texts` result is accepted in place of its `"bleu_by_length"` entry.
    """
    if "bleu_by_length" in bleu_by_length:
        bleu_by_length = bleu_by_length["bleu_by_length"]
    if _is_one_model(bleu_by_length):
        return {label: bleu_by_length}
    return {name: scores.get("bleu_by_length", scores) for name, scores in bleu_by_length.items()}


def _non_empty(scores):
    """The buckets of one model that hold sentences, as `(label, bleu, n)` in order."""
    return [(label, s["bleu"], s["n"]) for label, s in scores.items()
            if s.get("n") and s.get("bleu") is not None]


def plot_bleu_by_length(bleu_by_length, ax=None, label=None):
    """BLEU per source length bucket, one line per model, each point annotated with its `n`.

    Buckets with no sentences (`n == 0`) are skipped. This is the analogue of figure 2 of
    Bahdanau et al. (2014), which compares models by sentence length.

    Args:
        bleu_by_length: dict from `evaluate.bleu_by_length` (`{"1-5": {"bleu": 31.2, "n": 40},
            ...}`), or a dict of them keyed by model name, e.g. `{"bahdanau": ..., "luong": ...}`.
            A result of `evaluate.evaluate_texts` may stand in for a `bleu_by_length` dict.
        ax: `matplotlib.axes.Axes` to draw in, or `None` for a new figure. Defaults to `None`.
        label: str or `None`. Legend label when a single model is given. Defaults to `None`.

    Returns:
        `matplotlib.figure.Figure`, `ax.figure` when `ax` is given.

    Example:
        >>> fig = plot_bleu_by_length({"bahdanau": evaluate.bleu_by_length(src, hyp_a, ref),
        ...                            "luong": evaluate.bleu_by_length(src, hyp_b, ref)})
        >>> save_figure(fig, "bleu_by_length.png")

    Reference: arXiv 1409.0473, figure 2.
    """
    models = _as_models(bleu_by_length, label)
    all_labels = dict.fromkeys(bucket for scores in models.values() for bucket in scores)
    models = {name: _non_empty(scores) for name, scores in models.items()}
    used = {bucket for points in models.values() for bucket, _, _ in points}
    labels = [bucket for bucket in all_labels if bucket in used]  # in bucket order
    if not labels:
        raise ValueError(f"Every length bucket is empty. Received: bleu_by_length={bleu_by_length!r}")
    if ax is None:
        _, ax = _new_figure(figsize=(6, 4))
    for name, points in models.items():
        xs = [labels.index(bucket) for bucket, _, _ in points]
        ys = [bleu for _, bleu, _ in points]
        ax.plot(xs, ys, marker="o", label=name)
        for x, y, (_, _, n) in zip(xs, ys, points):
            ax.annotate(f"n={n}", (x, y), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=8)
    ax.set_xticks(range(len(labels)), labels=labels)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("BLEU")
    ax.margins(y=0.12)  # room for the n= annotations
    ax.set_ylim(bottom=0)
    if any(name is not None for name in models):
        ax.legend()
    return ax.figure


def save_figure(fig, path):
    """Save a figure as an image, creating parent directories, with a tight box at 120 dpi.

    Args:
        fig: `matplotlib.figure.Figure`.
        path: str or `pathlib.Path`; the suffix chooses the format (`.png`, `.pdf`, `.svg`, ...),
            and `.png` is added to a path without one.

    Returns:
        `pathlib.Path` of the written file.

    Example:
        >>> save_figure(plot_history({"loss": [2.3, 1.1]}), "plots/history.png")
        PosixPath('plots/history.png')
        >>> save_figure(plot_history({"loss": [2.3, 1.1]}), "plots/history")
        PosixPath('plots/history.png')
    """
    path = Path(path)
    if not path.suffix:  # matplotlib would add its default format's suffix: say which file is written
        path = path.with_name(path.name + ".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight", dpi=120)
    return path
