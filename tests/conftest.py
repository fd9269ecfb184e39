"""Shared fixtures: small corpora, briefly trained dates translators, an export and a finished run.

The expensive ones (a trained translator, an export, a run) are made once per test session however
many pytest-xdist workers run it (`made_once`): the first worker to ask makes the files, the others
wait for them and read them, so `make test`'s two workers do not each train the same model.
"""

import contextlib
import fcntl
import functools
import json
import os
import shutil
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# pytest-xdist's workers share the machine's cores, and each TensorFlow process sizes its two thread
# pools to all of them: two workers on two cores ran twice as many busy threads as cores, contending
# for them. Each worker, and every command it starts (they inherit the environment), gets its share;
# a test that needs TensorFlow's own defaults removes the variables from its child's environment
# (`tf_default_threads`), and a command's `--threads` still overrides them.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
if _WORKERS > 1:
    for _name in THREAD_VARIABLES:
        os.environ.setdefault(_name, str(max(1, len(os.sched_getaffinity(0)) // _WORKERS)))


def tf_default_threads(env):
    """`env` without the thread counts given to the workers: a child with TensorFlow's defaults."""
    return {k: v for k, v in env.items() if k not in THREAD_VARIABLES}

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import pytest  # noqa: E402

# Grappler, TensorFlow's graph optimizer, rewrites each function on its first call: 1-3 s for a train
# step or a decoding loop, which the few calls a test makes never earn back. The suite's workers and
# the commands its zygote forks (tests/zygote.py) run without it unless TFATTN_TEST_GRAPPLER=on, as
# make test-colab's second run of these tests does, so that CI also runs each of them optimized.
GRAPPLER = os.environ.get("TFATTN_TEST_GRAPPLER", "off")


def pytest_configure(config):
    if GRAPPLER == "off" and os.environ["KERAS_BACKEND"] == "tensorflow":
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


@pytest.fixture
def grappler():
    """Grappler on for one test, whatever TFATTN_TEST_GRAPPLER says: for what a user sees only after
    its rewrites (an error that names a signature's input: its function inlined into the signature)."""
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
    yield
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": GRAPPLER == "off"})


SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_data(*parts):
    """Path under ../shared/data, or skip the test with the reason when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs the shared corpora at {path} (absent on this machine)")
    return path


def usable_tfds():
    """tensorflow_datasets, or skip the test with the reason it cannot be used here: not installed,
    or installed and failing to import (Colab's image of August 2026, `tfattn.data.tfds_check`)."""
    from tfattn.data.tfds_check import tensorflow_datasets

    try:
        return tensorflow_datasets()
    except ImportError as error:
        pytest.skip(f"TFDS unusable here: {error}")


def tokens(tokenizer, text):
    """The split tokens of one text, as a list of str."""
    return [t.decode("utf-8") for t in tokenizer.split([text]).to_list()[0]]


def ids(tokenizer, texts):
    """Padded ids of texts, as nested lists."""
    return tokenizer(texts).numpy().tolist()


def detokenized(tokenizer, texts):
    """texts -> ids -> text again, as a list of str."""
    return [s.decode("utf-8") for s in tokenizer.detokenize(tokenizer(texts)).numpy()]


@functools.cache
def matmul_rows_are_independent():
    """Whether a row's matrix product here is the same alone as in a larger batch, to the bit (so with
    oneDNN, which TensorFlow uses on x86 CPUs with AVX-512; not with Eigen's matrix-vector path): rows
    7 and 3 to 7 of a random `(50, 8) @ (8, 24)` product, multiplied alone."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(50, 8)).astype("float32"), rng.normal(size=(8, 24)).astype("float32")
    whole = tf.matmul(x, w).numpy()
    return all(np.array_equal(tf.matmul(x[rows], w).numpy(), whole[rows]) for rows in (slice(7, 8), slice(3, 8)))


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


def made_once(tmp_path_factory, name, make):
    """The folder `make(folder)` fills, made once per test session and shared by its pytest-xdist
    workers: the first to ask makes it, holding a lock; the others wait and get the same folder. A
    `make` that fails leaves no folder behind, and the next to ask tries again. Tests must not change
    what is in it (copy it first)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, under xdist
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


DATES_MODEL = dict(embedding_dim=16, units=32)


def train_dates_translator(dates_data, attention, epochs=2):
    """A dates translator trained from seed 0 for `epochs` (a few seconds): the same weights in every
    process, whatever other tests did with the random generators before."""
    import keras

    import tfattn
    from tfattn.training.trainer import TrainConfig, fit

    train, _, source, target = dates_data
    keras.utils.set_random_seed(0)
    sizes = {k: v for k, v in DATES_MODEL.items() if not (attention == "transformer" and k == "embedding_dim")}
    model = tfattn.make_model(tfattn.ModelConfig(attention=attention, **sizes), source.vocab_size,
                              target.vocab_size)  # (the Transformer's embeddings are units wide)
    dataset = tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=32))
    fit(model, dataset, TrainConfig(learning_rate=5e-3, epochs=epochs), quiet=True)
    return tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14))


def shared_dates_translator(dates_data, tmp_path_factory, attention):
    """`train_dates_translator`'s translator, trained once per session (`made_once`) and read back from
    its weights in every worker."""
    import keras

    import tfattn

    _, _, source, target = dates_data
    save = lambda folder: train_dates_translator(dates_data, attention).model.save_weights(  # noqa: E731
        str(folder / "model.weights.h5"))
    folder = made_once(tmp_path_factory, f"dates-{attention}", save)
    sizes = {k: v for k, v in DATES_MODEL.items() if not (attention == "transformer" and k == "embedding_dim")}
    # Seeded as the trained model was: the weights file holds no dropout seed generator's state, so
    # without it each worker's copy drew its own seed from whatever tests ran before in that worker
    # (and an export made by one worker held another seed than the next worker's translator).
    keras.utils.set_random_seed(0)
    model = tfattn.make_model(tfattn.ModelConfig(attention=attention, **sizes), source.vocab_size,
                              target.vocab_size)  # (the Transformer's embeddings are units wide)
    tfattn.model.ensure_built(model).load_weights(str(folder / "model.weights.h5"))
    return tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14))


@pytest.fixture(scope="session")
def dates_translator(dates_data, tmp_path_factory):
    """A Luong translator trained for a few seconds: good enough to emit dates, not to be right."""
    return shared_dates_translator(dates_data, tmp_path_factory, "luong")


@pytest.fixture(scope="session")
def bahdanau_translator(dates_data, tmp_path_factory):
    return shared_dates_translator(dates_data, tmp_path_factory, "bahdanau")


@pytest.fixture(scope="session")
def exported_dates(dates_translator, tmp_path_factory):
    """The Luong dates translator exported once for the session (core-ops tokenizers, the default)."""
    from tfattn.serving.translator import export

    folder = made_once(tmp_path_factory, "export-dates", lambda f: export(dates_translator, str(f / "dates")))
    return str(folder / "dates")


@pytest.fixture(scope="session")
def exported_bahdanau(bahdanau_translator, tmp_path_factory):
    """The Bahdanau dates translator exported once for the session."""
    from tfattn.serving.translator import export

    folder = made_once(tmp_path_factory, "export-bahdanau",
                       lambda f: export(bahdanau_translator, str(f / "bahdanau")))
    return str(folder / "bahdanau")


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same seeds, so a random initializer gives the same weights in every run
    and on every machine: a failure reproduces, and a pass cannot depend on luck of the draw."""
    import keras

    keras.utils.set_random_seed(0)


@pytest.fixture(scope="session")
def small_run(tmp_path_factory):
    """A finished run (`tfattn train` in a child process): 600 date lines, 2 epochs of 72 steps,
    checkpoints every 10 steps; `(run directory, summary dict)`. Tests copy it before changing it. Its
    corpus, `d.txt` beside the run directory, was given as typed from that folder (a relative path)."""
    import zygote
    from processes import TRAIN_FLAGS, write_anki

    def train(folder):
        write_anki(folder / "d.txt", 600)
        done = zygote.run("train", "--corpus", "d.txt", "--out", str(folder / "run"), "--epochs", "2", *TRAIN_FLAGS,
                          cwd=str(folder))
        assert done.returncode == 0, done.stderr
        (folder / "summary.json").write_text(done.stdout.strip().splitlines()[-1], encoding="utf-8")

    folder = made_once(tmp_path_factory, "small-run", train)
    return str(folder / "run"), json.loads((folder / "summary.json").read_text(encoding="utf-8"))



@contextlib.contextmanager
def runs_without_export():
    """Runs trained in this process finish without writing their export (the rest of their finish, the
    summary included, is done; its "export" names the folder that was not written): for the tests of
    what a run writes before its export, so that each does not pay an export's tracing, seconds. The
    tests of the export train without it."""
    from tfattn.runs import finish

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(finish, "export", lambda translator, path: path)
        yield


@pytest.fixture
def no_export():
    """`runs_without_export` for one test."""
    with runs_without_export():
        yield


@functools.lru_cache(maxsize=None)
def shared_export(path):
    """The export at `path` loaded once per test process, for the session's exports that no test
    changes (`exported_dates`, `exported_bahdanau`): loading one takes seconds. A test of loading
    itself, or of an export it changes, loads its own (`tfattn.serving.translator.load`)."""
    from tfattn.serving.translator import load

    return load(path)


def run_main(capsys, *args):
    """`tfattn ARGS` in this process: (exit status, stdout, stderr)."""
    from tfattn.cli import main

    try:
        status = main(list(args))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err
