"""Shared fixtures: small corpora and one briefly trained dates translator for the whole session."""

import functools
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import pytest  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_data(*parts):
    """Path under ../shared/data, or skip the test with the reason when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs the shared corpora at {path} (absent on this machine)")
    return path


def tokens(tokenizer, text):
    """The split tokens of one text, as a list of str."""
    return [t.decode("utf-8") for t in tokenizer.split([text]).to_list()[0]]


def ids(tokenizer, texts):
    """Padded ids of texts, as nested lists."""
    return tokenizer(texts).numpy().tolist()


def detokenized(tokenizer, texts):
    """texts -> ids -> text again, as a list of str."""
    return [s.decode("utf-8") for s in tokenizer.detokenize(tokenizer(texts)).numpy()]


def _pieces_match_the_whole(x_shape, w_shape, pieces):
    """Whether `x[rows] @ w[:, columns]`, multiplied alone, equals that piece of `x @ w` to the bit, for
    every `(rows, columns)` pair of slices in `pieces` (random float32 `x`, `w` of the given shapes)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x, w = rng.normal(size=x_shape).astype("float32"), rng.normal(size=w_shape).astype("float32")
    whole = tf.matmul(x, w).numpy()
    return all(np.array_equal(tf.matmul(x[rows], w[:, columns]).numpy(), whole[rows, columns])
               for rows, columns in pieces)


@functools.cache
def matmul_rows_are_independent():
    """Whether a row's matrix product here is the same alone as in a larger batch, to the bit (so with
    oneDNN, which TensorFlow uses on x86 CPUs with AVX-512; not with Eigen's matrix-vector path)."""
    every = slice(None)
    return _pieces_match_the_whole((50, 8), (8, 24), [(slice(7, 8), every), (slice(3, 8), every)])


@functools.cache
def matmul_columns_are_independent():
    """Whether a block of a product's columns, multiplied alone, is the same to the bit as in the whole
    product (so with oneDNN; not with Eigen's GEMM on an AVX2 CPU, whose kernels for 13 and for 4
    columns of 20 rows add in other orders)."""
    every = slice(None)
    return _pieces_match_the_whole((20, 6), (6, 13), [(every, slice(a, b)) for a, b in [(0, 4), (4, 7), (7, 13)]])


@functools.cache
def bfloat16_matmul_truncates():
    """Whether TensorFlow's bfloat16 matmul stores its float32 sums in bfloat16 by dropping the low 16
    bits (toward zero), as its Eigen kernels do on a CPU without bfloat16 instructions (measured on an
    AVX2 CPU), instead of rounding to the nearest (oneDNN)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x, w = (tf.cast(rng.normal(size=shape), tf.bfloat16) for shape in [(13, 6), (6, 18)])
    exact = (x.numpy().astype("float64") @ w.numpy().astype("float64")).astype("float32")
    return np.array_equal(tf.cast(tf.matmul(x, w), tf.float32).numpy(), _truncated_to_bfloat16(exact))


def _truncated_to_bfloat16(values):
    """float32 values with their low 16 bits dropped: bfloat16 rounded toward zero, as float32."""
    import numpy as np

    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return (bits & np.uint32(0xFFFF0000)).view(np.float32)


def as_bfloat16_product(values):
    """A float32 product (of bfloat16 inputs) stored in bfloat16 as this machine's bfloat16 matmul stores
    its results (see `bfloat16_matmul_truncates`), returned as float32."""
    import tensorflow as tf

    if bfloat16_matmul_truncates():
        return tf.constant(_truncated_to_bfloat16(tf.convert_to_tensor(values, tf.float32).numpy()))
    return tf.cast(tf.cast(values, tf.bfloat16), tf.float32)


def assert_close_or_same(got, want, same, err_msg=""):
    """Float arrays equal within float32 rounding (rtol 1e-5, atol 1e-6), and to the bit if `same` (a
    probe's answer above, where the arithmetic on both sides is the same)."""
    import numpy as np

    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=err_msg)
    if same:
        np.testing.assert_array_equal(got, want, err_msg=err_msg)


def assert_same_outputs(got, want, err_msg=""):
    """Two dicts of decoding outputs are equal: strings and integers exactly, floats to the bit where a
    row's matrix product does not depend on the other rows (an export's token tables then give exactly
    what computing the shares gives), else within rounding."""
    import numpy as np

    assert set(got) == set(want), err_msg
    for key in want:
        a, b = np.asarray(got[key]), np.asarray(want[key])
        if a.dtype.kind not in "f":
            np.testing.assert_array_equal(a, b, err_msg=f"{err_msg} {key}")
        else:
            assert_close_or_same(a, b, matmul_rows_are_independent(), f"{err_msg} {key}")


@pytest.fixture(scope="session")
def dates_data():
    """3,000 training and 200 test date pairs, character-level tokenizers."""
    from tfattn.data import dates
    from tfattn.data.text import Tokenizer

    train, test = dates.make_corpus(3000, 200, seed=0)
    source = Tokenizer.adapt([s for s, _ in train], level="char", max_length=40)
    target = Tokenizer.adapt([t for _, t in train], level="char", max_length=14)
    return train, test, source, target


def train_dates_translator(dates_data, attention, epochs=2):
    import tfattn
    from tfattn.training.trainer import TrainConfig, fit

    train, _, source, target = dates_data
    model = tfattn.make_model(tfattn.ModelConfig(attention=attention, embedding_dim=16, units=32),
                              source.vocab_size, target.vocab_size)
    dataset = tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=32))
    fit(model, dataset, TrainConfig(learning_rate=5e-3, epochs=epochs), quiet=True)
    return tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14))


@pytest.fixture(scope="session")
def dates_translator(dates_data):
    """A Luong translator trained for a few seconds: good enough to emit dates, not to be right."""
    return train_dates_translator(dates_data, "luong")


@pytest.fixture(scope="session")
def bahdanau_translator(dates_data):
    return train_dates_translator(dates_data, "bahdanau")


@pytest.fixture(scope="session")
def exported_dates(dates_translator, tmp_path_factory):
    """The Luong dates translator exported once for the session."""
    from tfattn.serving.translator import export

    return export(dates_translator, str(tmp_path_factory.mktemp("export") / "dates"))


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same seeds, so a random initializer gives the same weights in every run
    and on every machine: a failure reproduces, and a pass cannot depend on luck of the draw."""
    import keras

    keras.utils.set_random_seed(0)
