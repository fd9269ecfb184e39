"""`tfattn train` writes TensorBoard summaries that TensorBoard's own reader finds, tag by tag."""

import json
import os

import numpy as np
import pytest

from conftest import made_once, run_main, runs_without_export
from processes import TRAIN_FLAGS, write_anki
from tfattn.runs.directory import Run

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
from tensorboard.util import tensor_util  # noqa: E402

TRAIN_TAGS = ["train/loss", "train/accuracy", "train/learning_rate", "train/grad_norm", "train/tokens_per_s",
              "train/padding_fraction", "train/nonfinite_steps"]
VALIDATION_TAGS = ["validation/loss", "validation/accuracy", "validation/bleu", "validation/chrf"]


def read_events(logdir):
    accumulator = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    return accumulator


def values(accumulator, tag):
    return [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(tag)]


@pytest.fixture(scope="module")
def board_run(tmp_path_factory):
    """96 training pairs of dates, 2 epochs of 6 steps (batches of 16), the means read every 4 steps and
    at each epoch's end, 6 validation sentences translated for BLEU, TensorBoard in its default place."""

    from tfattn.cli import main

    def train(folder):
        write_anki(folder / "d.txt", 200)
        flags = [*TRAIN_FLAGS, "--batch-size", "16", "--units", "16", "--embedding-dim", "8", "--log-every", "4",
                 "--bleu-sample", "6", "--max-pairs", "96"]
        with runs_without_export():  # what is read here is written before it
            assert main(["train", "--corpus", str(folder / "d.txt"), "--out", str(folder / "run"), "--epochs", "2",
                         *flags]) == 0

    return str(made_once(tmp_path_factory, "board-run", train) / "run")


def test_every_tag_is_written(board_run):
    events = read_events(os.path.join(board_run, "tensorboard"))
    tags = set(events.Tags()["tensors"])
    for tag in TRAIN_TAGS + VALIDATION_TAGS + ["validation/attention", "validation/translations"]:
        assert tag in tags, (tag, sorted(tags))
    assert events.SummaryMetadata("validation/attention").plugin_data.plugin_name == "images"
    assert events.SummaryMetadata("validation/translations").plugin_data.plugin_name == "text"
    assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")


def test_training_scalars_are_the_means_between_reads(board_run):
    events = read_events(os.path.join(board_run, "tensorboard"))
    steps = [step for step, _ in values(events, "train/loss")]
    assert steps == [4, 6, 10, 12]  # 6 steps an epoch: a read after 4 steps, and at the epoch's end
    losses = [float(v) for _, v in values(events, "train/loss")]
    vocab = Run(board_run).tokenizers()[1].vocab_size
    assert losses[0] == pytest.approx(np.log(vocab), rel=0.2) and losses[-1] < losses[0]  # untrained: ln(vocab)
    # Every batch holds 16 ISO dates of 10 labels and an [END]: the epoch's loss in history.json is the
    # mean of its reads weighted by their steps, 4 and 2.
    history = json.load(open(os.path.join(board_run, "history.json")))
    assert history["loss"][0] == pytest.approx((4 * losses[0] + 2 * losses[1]) / 6, rel=1e-5)
    assert history["loss"][1] == pytest.approx((4 * losses[2] + 2 * losses[3]) / 6, rel=1e-5)
    assert all(float(v) == 0.0 for _, v in values(events, "train/padding_fraction"))  # ISO dates: one length
    assert all(float(v) == 0.0 for _, v in values(events, "train/nonfinite_steps"))
    assert all(float(v) == pytest.approx(0.003) for _, v in values(events, "train/learning_rate"))
    assert all(float(v) > 0 for _, v in values(events, "train/grad_norm"))


def test_validation_summaries_match_the_history(board_run):
    events = read_events(os.path.join(board_run, "tensorboard"))
    history = json.load(open(os.path.join(board_run, "history.json")))
    for name in ("loss", "bleu", "chrf"):
        got = values(events, f"validation/{name}")
        assert [step for step, _ in got] == [6, 12]  # at each epoch's end
        assert [float(v) for _, v in got] == pytest.approx(history[f"val_{name}"], rel=1e-6)
    (_, image), = values(events, "validation/attention")[:1]
    assert len(image) == 2 + 3  # width, height, then 3 encoded PNGs (--bleu-sample 6, 3 shown)
    assert bytes(image[2]).startswith(b"\x89PNG")
    (_, table), = values(events, "validation/translations")[:1]
    text = table.item().decode("utf-8")
    assert text.count("\n") == 1 + 3 and "| source | reference | translation |" in text


def test_the_config_is_written_as_hparams(board_run):
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = read_events(os.path.join(board_run, "tensorboard"))
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    assert info.hparams["model.units"].number_value == 16
    assert info.hparams["train.learning_rate"].number_value == pytest.approx(0.003)
    from tfattn.training.precision import auto_precision

    assert info.hparams["train.precision"].string_value == auto_precision()[0]  # --precision auto, resolved
    assert info.hparams["train.precision_asked"].string_value == "auto"


@pytest.mark.long  # a run or an export of its own, 15-40 s: make test-long
def test_no_tensorboard_writes_none(tmp_path, capsys):
    write_anki(tmp_path / "d.txt", 100)
    run = str(tmp_path / "run")
    status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "d.txt"), "--out", run, "--epochs", "1",
                              *TRAIN_FLAGS, "--no-tensorboard", "--bleu-sample", "0")
    assert status == 0, err
    assert not os.path.exists(os.path.join(run, "tensorboard"))
    assert json.load(open(os.path.join(run, "config.json")))["tensorboard"] is None
