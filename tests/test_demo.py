"""The offline demo's promise: trained for a fixed number of steps, its reloaded export reads at least
99% of the 1,000 held-out dates (dates never seen in training) exactly right.

The demo trains to an 80-second budget; here it trains a fixed number of steps instead (no time
budget, the cosine over those steps), so that the result does not depend on the machine's speed.
Three epochs of 235 batches (705 steps): 8 of 8 Luong runs with other first weights and data orders
reached 99.5-100%, and 3 of 3 Bahdanau runs 99.9-100%; two epochs (470 steps) missed in 2 of 10 Luong
runs (25.6% and 97.9%).
"""

import json

import keras
import pytest
import tensorflow as tf

from tfattn import demo
from tfattn.data import dates
from tfattn.serving.translator import load

EPOCHS = 3  # of 235 steps: 30,000 pairs in batches of 128


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("attention", ["luong", "bahdanau"])
def test_the_demo_reads_99_percent_of_held_out_dates_after_705_steps(attention, tmp_path):
    config = demo.DemoConfig(attention=attention, epochs=EPOCHS, time_budget=None, out_dir=str(tmp_path), seed=0)
    # DemoConfig.seed fixes the corpus and the batches' order; the first weights come from the global
    # seed at the model's making (the demo sets its seed only after that), so it is set here.
    keras.utils.set_random_seed(config.seed)
    summary = demo.run(config, quiet=True)

    # Scored here, from the export on disk and the held-out pairs, not by the demo's own count.
    _, test_pairs = dates.make_corpus(config.n_train, config.n_test, seed=config.seed)
    assert len(test_pairs) == 1000
    translate = load(summary["export"]).signatures["translate"]
    right = 0
    for i in range(0, len(test_pairs), 250):
        chunk = test_pairs[i:i + 250]
        out = translate(text=tf.constant([source for source, _ in chunk]))["text"].numpy()
        right += sum(text.decode("utf-8") == iso for text, (_, iso) in zip(out, chunk))
    assert right / len(test_pairs) >= 0.99, summary["errors_by_form"]
    assert summary["exact_match"] == round(right / len(test_pairs), 4)  # the demo reports what it got


@pytest.mark.parametrize("quiet, examples", [(True, 0), (False, 5)])
def test_quiet_prints_the_json_alone(dates_translator, tmp_path, monkeypatch, capsys, quiet, examples):
    config = demo.DemoConfig(n_test=8, out_dir=str(tmp_path))
    _, test_pairs = dates.make_corpus(40, config.n_test, seed=0)
    monkeypatch.setattr(demo, "train_translator", lambda config, quiet: (dates_translator, test_pairs,
                                                                         {"seconds": 1.0, "loss": [1.0]}))
    demo.main(config, quiet=quiet)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == examples + 1 and " -> " not in lines[-1]
    assert set(json.loads(lines[-1])) >= {"exact_match", "export", "plot"}  # the summary, last
