"""Validation BLEU and chrF as a Keras callback, for `model.fit` and for tfattn's own trainer.

`TranslationMetrics` translates a fixed sample of validation pairs greedily at each epoch's end and
puts `val_bleu` and `val_chrf` into the epoch's logs (sacrebleu, as `tfattn evaluate` scores them),
where Keras' `EarlyStopping`, `ModelCheckpoint`, `ReduceLROnPlateau`, `History` and `TensorBoard`
read them. Give it before them in `callbacks=[...]`: Keras calls the callbacks in their order.

    metrics = TranslationMetrics(validation_pairs, source_tokenizer, target_tokenizer)
    model.fit(train, epochs=20, callbacks=[
        metrics,
        keras.callbacks.EarlyStopping(monitor="val_bleu", mode="max", patience=3),
        keras.callbacks.ModelCheckpoint("best.weights.h5", monitor="val_bleu", mode="max",
                                        save_best_only=True, save_weights_only=True)])

tfattn's trainer scores its validations with the same object (`tfattn.training.validation.Validator`
holds one), so `tfattn train`'s `val_bleu` and a `model.fit` user's are the same computation.
"""

import keras
import tensorflow as tf

from tfattn import evaluate
from tfattn.accel import seq2seq as fast
from tfattn.search import DecodeConfig, Greedy, decode


def fixed_sample(pairs, size):
    """`size` pairs spread evenly over `pairs` (all of them if there are fewer), in their order."""
    if size >= len(pairs):
        return list(pairs)
    return [pairs[i * len(pairs) // size] for i in range(size)]


class TranslationMetrics(keras.callbacks.Callback):
    """Puts the BLEU and chrF of greedy translations of validation pairs into the logs of each epoch.

    Args:
        pairs: list of `(source, reference)` str pairs, the validation split.
        source_tokenizer, target_tokenizer: the model's `tfattn.Tokenizer`s.
        decode_config: `DecodeConfig` of the translations. Defaults to `DecodeConfig(max_length=
            target_tokenizer.max_length)`.
        sample: int. Pairs translated at each epoch's end, evenly spaced over `pairs` and the same
            every time, so that two epochs' scores compare; 0 or more than `len(pairs)`: all.
            Defaults to `200`.
        batch_size: int. Sentences decoded at a time. Defaults to `64`.
        accel: bool or None. The tier that decodes (`tfattn.tier`'s switch when None), chosen once per
            model (`tfattn.accel.seq2seq.choose`). Defaults to `None`.
        prefix: str. Put before the names in the logs. Defaults to `"val_"`.
        model: the model to translate with, for use outside `fit` (`scores()`); `fit` sets its own.

    Call: `on_epoch_end` adds `{prefix}bleu` and `{prefix}chrf` (floats, 0-100) to the logs. After
    each scoring, `last` holds the sample's `sources`, `references` and `hypotheses` (str lists),
    and per sentence its `attention (t_out, t_in)`, `input_tokens` and `output_tokens`.

    Example:

    >>> metrics = TranslationMetrics(pairs[:50], source, target, sample=50)
    >>> history = model.fit(data, epochs=3, callbacks=[metrics], verbose=0)
    >>> sorted(k for k in history.history if k.startswith("val_"))
    ['val_bleu', 'val_chrf']

    Reference: Papineni et al. 2002 (BLEU); Popovic 2015 (chrF); Post 2018 (sacrebleu).
    """

    def __init__(self, pairs, source_tokenizer, target_tokenizer, decode_config=None, sample=200, batch_size=64,
                 accel=None, prefix="val_", model=None):
        super().__init__()
        if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
            raise ValueError(f"sample must be an int >= 0. Received: sample={sample!r}")
        if not pairs:
            raise ValueError(f"pairs must hold at least one (source, reference) pair. Received: pairs={pairs!r}")
        self.pairs = fixed_sample(pairs, sample) if sample else list(pairs)
        self.source_tokenizer, self.target_tokenizer = source_tokenizer, target_tokenizer
        self.decode_config = decode_config or DecodeConfig(max_length=target_tokenizer.max_length)
        self.batch_size, self.accel, self.prefix = batch_size, accel, prefix
        self.last = None
        self._given_model, self._translate, self._translating = model, None, None

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update(self.scores())

    def scores(self, model=None):
        """`{prefix + "bleu", prefix + "chrf"}` of the sample's translations by `model` (by default
        the model given, or the one `fit` trains)."""
        self.last = self.translate([s for s, _ in self.pairs], model)
        self.last["references"] = [t for _, t in self.pairs]
        scores = evaluate.score(self.last["hypotheses"], self.last["references"])
        return {f"{self.prefix}bleu": scores["bleu"], f"{self.prefix}chrf": scores["chrf"]}

    def translate(self, sources, model=None):
        """Greedy translations of a list of str, with their attention and tokens (see `last`)."""
        translate = self._function_for(model or self._given_model or self.model)
        last = {"sources": list(sources), "hypotheses": [], "attention": [], "input_tokens": [], "output_tokens": []}
        for i in range(0, len(sources), self.batch_size):
            out = translate(tf.constant(sources[i : i + self.batch_size]))
            last["hypotheses"] += [t.decode("utf-8") for t in out["text"].numpy()]
            last["attention"] += list(out["attention"].numpy())
            last["input_tokens"] += [[t.decode("utf-8") for t in row] for row in out["input_tokens"].numpy()]
            last["output_tokens"] += [[t.decode("utf-8") for t in row] for row in out["output_tokens"].numpy()]
        return last

    def _function_for(self, model):
        """The traced greedy translation of `model` (traced once per model, for any batch and length)."""
        if self._translating is not model:
            signature = [tf.TensorSpec([None], tf.string)]
            accel = fast.choose(self.accel, model, model.dtype_policy.name)
            self._translate = tf.function(lambda text: self._greedy(model, text, accel), input_signature=signature,
                                          autograph=False)
            self._translating = model
        return self._translate

    def _greedy(self, model, text, accel):
        input_tokens, source = self.source_tokenizer.tokens_and_ids(text)  # (batch, t_in)
        out = decode(model, source, Greedy(), self.decode_config, accel)
        return {"text": self.target_tokenizer.detokenize(out["ids"]), "attention": out["attention"],
                "input_tokens": input_tokens, "output_tokens": self.target_tokenizer.ids_to_tokens(out["ids"])}
