"""`tfattn train --deterministic`: two runs (separate processes) train the same losses, step by step."""

import os

import pytest

from processes import TRAIN_FLAGS, tfattn, write_anki

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
from tensorboard.util import tensor_util  # noqa: E402


def step_losses(run):
    board = event_accumulator.EventAccumulator(os.path.join(run, "tensorboard"), {event_accumulator.TENSORS: 0})
    board.Reload()
    return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in board.Tensors("train/loss")]


@pytest.mark.long
def test_two_deterministic_runs_train_the_same_losses(tmp_path):
    write_anki(tmp_path / "d.txt", 400)
    flags = [*TRAIN_FLAGS, "--deterministic", "--log-every", "1", "--max-pairs", "160", "--dropout", "0.3",
             "--bleu-sample", "0", "--epochs", "1", "--corpus", str(tmp_path / "d.txt")]
    runs = [str(tmp_path / name) for name in ("a", "b")]
    procs = [tfattn("train", *flags, "--out", run) for run in runs]  # side by side, one per core
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    first, second = (step_losses(run) for run in runs)
    assert [step for step, _ in first] == list(range(1, 21))  # 160 pairs in batches of 8: 20 steps, each read
    assert first == second  # to the bit, dropout included
