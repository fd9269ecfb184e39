"""TensorBoard summaries of a training run, written with `tf.summary`.

    train/loss, train/accuracy, train/learning_rate, train/grad_norm, train/tokens_per_s,
    train/padding_fraction, train/nonfinite_steps (and train/loss_scale under mixed_float16):
        every `log_every` steps, the means since the previous ones (the step is the global step)
    validation/loss, validation/accuracy, validation/bleu, validation/chrf: at every validation
    validation/attention: an image, the attention heatmaps of a few fixed validation sentences
    validation/translations: text, those sentences, their references and translations
    hparams: the run's config (`tensorboard.plugins.hparams`), once when a session starts

Look at it with `tensorboard --logdir RUN/tensorboard`. The `tensorboard` package is needed only
for the hparams (skipped without it) and to view the files; `tf.summary` writes the rest.
"""

import io
import math

import numpy as np
import tensorflow as tf


class Summaries:
    """Writes a run's summaries to `logdir` (see the module's docstring for the tags).

    Args:
        logdir: str. The directory of the event files.
        config: dict or None. The run's config, written as hparams (nested keys joined by `.`).
    """

    def __init__(self, logdir, config=None):
        self.logdir = logdir
        self.writer = tf.summary.create_file_writer(logdir)
        if config is not None:
            self.hparams(config)

    def scalars(self, prefix, logs, step):
        """Writes each finite number of `logs` as the scalar `prefix/name` at `step`."""
        with self.writer.as_default(step=step):
            for name, value in logs.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    tf.summary.scalar(f"{prefix}/{name}", value)
        self.writer.flush()

    def train(self, trainer, logs):
        """`Trainer.fit`'s `on_log`: the training means since the last call."""
        self.scalars("train", logs, trainer.step)

    def validation(self, logs, step, last=None, examples=3):
        """A validation's scores (the `val_` items of `logs`, named without it) and, from `Validator.last`, the
        heatmaps and translations of its first `examples` sentences."""
        self.scalars("validation", {k.removeprefix("val_"): v for k, v in logs.items() if k.startswith("val_")}, step)
        if last is None or not examples or not last["hypotheses"]:
            return
        n = min(examples, len(last["hypotheses"]))
        with self.writer.as_default(step=step):
            tf.summary.image("validation/attention", attention_images(last, n), step=step, max_outputs=n)
            rows = [f"| {i} | {_cell(last['sources'][i])} | {_cell(last['references'][i])} | "
                    f"{_cell(last['hypotheses'][i])} |" for i in range(n)]
            table = "\n".join(["| | source | reference | translation |", "|---|---|---|---|", *rows])
            tf.summary.text("validation/translations", table)
        self.writer.flush()

    def hparams(self, config):
        """The run's config as hparams (flattened; lists and None as text); nothing without `tensorboard`."""
        try:
            from tensorboard.plugins.hparams import api as hp
        except ImportError:
            return
        flat = {key: value if isinstance(value, (bool, int, float, str)) else str(value)
                for key, value in _flatten(config).items()}
        with self.writer.as_default():
            hp.hparams(flat)
        self.writer.flush()

    def close(self):
        self.writer.close()


def attention_images(last, n):
    """`(n, height, width, 4)` uint8 PNG-decoded heatmaps (`tfattn.plot.plot_attention`) of the first
    `n` sentences of `Validator.last`, padded to one size."""
    import matplotlib.pyplot as plt

    from tfattn.plot import plot_attention

    images = []
    for i in range(n):
        figure = plot_attention(last["attention"][i], last["input_tokens"][i], last["output_tokens"][i],
                                title=last["hypotheses"][i][:60])
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
        plt.close(figure)
        images.append(tf.io.decode_png(buffer.getvalue(), channels=4).numpy())
    height, width = max(im.shape[0] for im in images), max(im.shape[1] for im in images)
    padded = np.full((n, height, width, 4), 255, np.uint8)  # white, opaque
    for i, image in enumerate(images):
        padded[i, : image.shape[0], : image.shape[1]] = image
    return padded


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _flatten(d, prefix=""):
    flat = {}
    for key, value in d.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
