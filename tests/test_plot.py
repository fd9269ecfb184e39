import re

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from tfattn import plot  # noqa: E402


class FakeEagerTensor:
    """Stands in for a `tf.Tensor`: anything with `.numpy()`."""

    def __init__(self, value):
        self.value = value

    def numpy(self):
        return np.asarray(self.value)


def _labels(ticks):
    return [tick.get_text() for tick in ticks]


def _heatmap_axes(fig):
    return next(ax for ax in fig.axes if ax.images)


def test_attention_heatmap_crops_padding_and_decodes_bytes():
    # As from a SavedModel: padded with b"", matrix padded to (4, 5).
    attention = np.arange(20, dtype=float).reshape(4, 5) / 20
    fig = plot.plot_attention(attention, [b"hola", b"mundo", b"\xc3\xb1", b"", b""],
                              [b"hello", b"world", b"", b""], title="es-en")
    ax = _heatmap_axes(fig)
    assert isinstance(fig, Figure)
    assert _labels(ax.get_xticklabels()) == ["hola", "mundo", "ñ"]
    assert _labels(ax.get_yticklabels()) == ["hello", "world"]
    assert ax.images[0].get_array().shape == (2, 3)
    np.testing.assert_allclose(ax.images[0].get_array(), attention[:2, :3])
    assert ax.get_title() == "es-en"
    assert len(fig.axes) == 2  # heatmap and colorbar


def test_invalid_utf8_is_replaced():
    fig = plot.plot_attention(np.ones((1, 1)), [b"\xff"], ["x"])
    assert _labels(_heatmap_axes(fig).get_xticklabels()) == ["\ufffd"]


@pytest.mark.parametrize("shape, expected", [((2, 2), (2, 2)), ((5, 6), (3, 4))])
def test_attention_crops_to_common_size(shape, expected):
    # Tokens longer than the matrix, or the matrix larger than the tokens.
    fig = plot.plot_attention(np.ones(shape), ["a", "b", "c", "d"], ["x", "y", "z"])
    ax = _heatmap_axes(fig)
    assert ax.images[0].get_array().shape == expected
    assert _labels(ax.get_xticklabels()) == ["a", "b", "c", "d"][: expected[1]]


def test_attention_accepts_tensor_like():
    fig = plot.plot_attention(FakeEagerTensor([[0.25, 0.75]]), FakeEagerTensor([b"a", b"b"]),
                              ["x"])
    ax = _heatmap_axes(fig)
    np.testing.assert_array_equal(ax.images[0].get_array(), [[0.25, 0.75]])
    assert _labels(ax.get_xticklabels()) == ["a", "b"] and _labels(ax.get_yticklabels()) == ["x"]


def test_attention_draws_in_given_ax():
    fig = Figure()
    ax = fig.add_subplot()
    weights = np.array([[0.9, 0.1], [0.3, 0.7]])
    assert plot.plot_attention(weights, ["a", "b"], ["x", "y"], ax=ax) is fig
    assert len(ax.images) == 1 and _heatmap_axes(fig) is ax  # drawn in the given axes, not new ones
    np.testing.assert_array_equal(ax.images[0].get_array(), weights)  # rows: outputs, columns: sources
    assert _labels(ax.get_xticklabels()) == ["a", "b"] and _labels(ax.get_yticklabels()) == ["x", "y"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source", "output")
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "attention weight"  # and its colorbar


@pytest.mark.parametrize("shape", [(3,), (1, 2, 2)])
def test_attention_bad_shape(shape):
    with pytest.raises(ValueError, match=re.escape(f"Received: attention.shape={shape!r}")):
        plot.plot_attention(np.ones(shape), ["a", "b"], ["x", "y"])


def test_attention_all_padding_raises():
    with pytest.raises(ValueError, match="Nothing to plot"):
        plot.plot_attention(np.ones((2, 2)), ["", ""], ["x", "y"])


@pytest.mark.parametrize("history, n_loss, n_acc", [
    ({"loss": [2.0, 1.0, 0.5], "accuracy": [0.1, 0.5, 0.7],
      "val_loss": [2.1, 1.2, 0.9], "val_accuracy": [0.1, 0.4, 0.6]}, 2, 2),
    ({"loss": [2.0, 1.0], "val_loss": [2.1, 1.2], "learning_rate": [1e-3, 1e-3]}, 2, 0),
    ({"loss": [2.0], "masked_acc": [0.2]}, 1, 1),
])
def test_history(history, n_loss, n_acc):
    fig = plot.plot_history(history)
    loss_ax, acc_ax = fig.axes
    assert (len(loss_ax.lines), len(acc_ax.lines)) == (n_loss, n_acc)
    assert list(loss_ax.lines[0].get_xdata()) == list(range(1, len(history["loss"]) + 1))
    assert loss_ax.get_legend() is not None


def test_history_in_given_axes():
    fig = Figure()
    axes = fig.subplots(1, 2)
    assert plot.plot_history({"loss": [1.0, 0.5], "val_accuracy": [0.25, 0.75]}, ax=axes) is fig
    loss_ax, acc_ax = axes
    assert list(loss_ax.lines[0].get_xdata()) == [1, 2] and list(loss_ax.lines[0].get_ydata()) == [1.0, 0.5]
    assert list(acc_ax.lines[0].get_ydata()) == [0.25, 0.75] and acc_ax.lines[0].get_linestyle() == "--"
    assert (loss_ax.get_xlabel(), loss_ax.get_ylabel(), acc_ax.get_ylabel()) == ("epoch", "loss", "accuracy")
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == ["loss"]


@pytest.mark.parametrize("history", [{}, {"loss": []}, {"learning_rate": [0.1]}])
def test_empty_history_raises(history):
    with pytest.raises(ValueError, match="Received: history="):
        plot.plot_history(history)


BY_LENGTH = {"1-5": {"bleu": 40.0, "n": 3}, "6-10": {"bleu": None, "n": 0},
             "11-15": {"bleu": 20.0, "n": 2}, "16-20": {"bleu": None, "n": 0},
             "21+": {"bleu": 10.0, "n": 1}}


def test_bleu_by_length_skips_empty_buckets():
    fig = plot.plot_bleu_by_length(BY_LENGTH, label="bahdanau")
    ax = fig.axes[0]
    assert _labels(ax.get_xticklabels()) == ["1-5", "11-15", "21+"]
    assert list(ax.lines[0].get_ydata()) == [40.0, 20.0, 10.0]
    assert [text.get_text() for text in ax.texts] == ["n=3", "n=2", "n=1"]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["bahdanau"]


def test_bleu_by_length_several_models():
    luong = {**BY_LENGTH, "6-10": {"bleu": 30.0, "n": 4}}
    fig = plot.plot_bleu_by_length({"bahdanau": BY_LENGTH, "luong": {"bleu_by_length": luong}})
    ax = fig.axes[0]
    assert len(ax.lines) == 2
    assert _labels(ax.get_xticklabels()) == ["1-5", "6-10", "11-15", "21+"]
    assert list(ax.lines[0].get_xdata()) == [0, 2, 3]  # bahdanau skips "6-10"
    assert list(ax.lines[1].get_ydata()) == [40.0, 30.0, 20.0, 10.0]


def test_bleu_by_length_of_several_evaluate_texts_results():
    # Each value is a whole `evaluate.evaluate_texts` result, which has an "n" of its own: still
    # one line per model, not one model whose buckets are the model names.
    luong = {**BY_LENGTH, "6-10": {"bleu": 30.0, "n": 4}}
    results = {"bahdanau": {"bleu": 25.0, "chrf": 50.0, "n": 6, "bleu_by_length": BY_LENGTH},
               "luong": {"bleu": 28.0, "chrf": 52.0, "n": 10, "bleu_by_length": luong}}
    ax = plot.plot_bleu_by_length(results).axes[0]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["bahdanau", "luong"]
    assert _labels(ax.get_xticklabels()) == ["1-5", "6-10", "11-15", "21+"]
    assert list(ax.lines[0].get_ydata()) == [40.0, 20.0, 10.0]
    assert list(ax.lines[1].get_ydata()) == [40.0, 30.0, 20.0, 10.0]


def test_bleu_by_length_all_empty_raises():
    with pytest.raises(ValueError, match="empty"):
        plot.plot_bleu_by_length({"1-5": {"bleu": None, "n": 0}})


def test_save_figure_writes_png(tmp_path):
    fig = plot.plot_attention(np.eye(2), ["a", "b"], ["x", "y"])
    path = plot.save_figure(fig, tmp_path / "deep" / "dir" / "attention.png")
    assert path.exists() and path.stat().st_size > 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_local_windows_are_marked_where_the_positions_say():
    weights = np.zeros((2, 6))
    weights[0, :3], weights[1, 2:5] = 1 / 3, 1 / 3
    fig = plot.plot_attention(weights, list("abcdef"), ["x", "y"], positions=[1.0, 3.4], window=1)
    ax = fig.axes[0]
    crosses = [line for line in ax.lines if line.get_label() == "p_t"]
    assert len(crosses) == 1
    np.testing.assert_allclose(crosses[0].get_xdata(), [1.0, 3.4])
    np.testing.assert_allclose(crosses[0].get_ydata(), [0, 1])
    (segments,) = [c.get_segments() for c in ax.collections if hasattr(c, "get_segments")]
    # Rows 0 and 1: [p - D, p + D] = [0, 2] and [2.4, 4.4], each widened by half a cell.
    np.testing.assert_allclose([s[:, 0] for s in segments], [[-0.5, 2.5], [1.9, 4.9]])


def test_window_without_positions_is_refused():
    with pytest.raises(ValueError, match="positions"):
        plot.plot_attention(np.eye(2), ["a", "b"], ["x", "y"], window=2)


def test_heads_draw_one_panel_per_layer_and_head():
    heads = np.random.default_rng(0).random((2, 3, 2, 4))  # (layers, heads, t_out, t_in)
    fig = plot.plot_heads(heads, ["a", "b", "c", ""], ["x", "y"])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [f"layer {l}, head {h}" for l in (1, 2) for h in (1, 2, 3)]
    # Padding cropped: 3 source tokens, and the last panel shows the last head's weights.
    np.testing.assert_allclose(fig.axes[-1].images[0].get_array(), heads[1, 2, :, :3])
    one_layer = plot.plot_heads(heads[0], ["a", "b", "c", "d"], ["x", "y"])
    assert [ax.get_title() for ax in one_layer.axes] == ["head 1", "head 2", "head 3"]
    with pytest.raises(ValueError, match="heads"):
        plot.plot_heads(np.ones((2, 2)), ["a", "b"], ["x", "y"])


@pytest.mark.parametrize("series", ["abc", [1.0, "2"], [True, False], [[1.0], [2.0]], {"1": 2.0}, 3.0])
def test_a_series_that_is_not_numbers_is_refused_by_its_key(series):
    with pytest.raises(ValueError, match=r"^history\['val_loss'\] must be a list of numbers .* Received: "
                                         r"history\['val_loss'\]="):
        plot.plot_history({"loss": [2.0, 1.0], "val_loss": series})


def test_null_values_are_gaps_in_the_curve():
    fig = plot.plot_history({"loss": [2.0, None, 1.0]})  # strict JSON's null for a loss that was not finite
    ys = fig.axes[0].lines[0].get_ydata()
    assert ys[0] == 2.0 and np.isnan(ys[1]) and ys[2] == 1.0
