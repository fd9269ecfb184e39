"""The command line's promises beyond parsing: `tfattn train`'s default recipe, read back from a run's
files, and beam search through `tfattn translate --beam` and `tfattn evaluate --beam`."""

import json
import math
import string
import sys
from pathlib import Path

import pytest

from conftest import run_main
from processes import write_anki


def distinct_words(n, prefix):
    """`n` different lowercase words: prefix + three letters."""
    letters = string.ascii_lowercase
    return [prefix + letters[i // 676] + letters[i // 26 % 26] + letters[i % 26] for i in range(n)]


def test_train_without_model_flags_uses_the_default_recipe(tmp_path, capsys, monkeypatch, no_export):
    """The best 15-minute row of docs/performance.md (`bench/quality.py --model multihead-wordpiece`):
    Luong's decoder with input feeding and 4-head cross-attention, untied, 1,000 warm-up steps; dropout
    0.2, WordPiece vocabularies of 5,000 entries, learning rate 2e-3 on a cosine over the time budget
    ending at 30% of it (docs/performance.md, "Where the cosine fitted to the clock should end")."""
    from tfattn.training import trainer

    # 1,200 lines of 5 new words a side: 6,000 words each, more than the vocabulary takes.
    source, target = distinct_words(6000, "s"), distinct_words(6000, "t")
    lines = [f"{' '.join(target[5 * i:5 * i + 5])}\t{' '.join(source[5 * i:5 * i + 5])}\n" for i in range(1200)]
    (tmp_path / "c.txt").write_text("".join(lines), encoding="utf-8")
    rates = []  # (seconds into training, step, learning rate) at each step

    def recorded(config, elapsed, step=0):
        rate = real_rate(config, elapsed, step)
        rates.append((elapsed, step, rate))
        return rate

    real_rate = trainer.budget_learning_rate
    monkeypatch.setattr(trainer, "budget_learning_rate", recorded)
    run = tmp_path / "run"
    status, _, err = run_main(capsys, "train", "--corpus", str(tmp_path / "c.txt"), "--out", str(run),
                              "--epochs", "1", "--time-budget", "10m", "--quiet")
    assert status == 0, err

    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    model = config["model"]
    assert (model["attention"], model["heads"], model["input_feeding"]) == ("luong", 4, True)
    assert (model["score"], model["scale"], model["local"], model["hard"]) == ("general", True, None, False)
    assert (model["embedding_dim"], model["units"], model["encoder"], model["rnn"]) == (256, 256, "rnn", "gru")
    assert model["tie_embeddings"] is False
    assert config["model"]["dropout"] == 0.2
    assert config["source_tokenizer"]["max_tokens"] == config["target_tokenizer"]["max_tokens"] == 5000
    assert config["source_tokenizer"]["level"] == config["target_tokenizer"]["level"] == "wordpiece"
    train = config["train"]
    assert train["learning_rate"] == 2e-3
    assert (train["time_budget"], train["decay_to_budget"], train["decay_steps"]) == (600.0, True, None)
    assert train["decay_alpha"] == 0.3
    assert train["warmup_steps"] == 1000
    # 1,152 training pairs (24 lines each go to test and validation) hold 5,760 words a side, each seen
    # once: the WordPiece vocabularies stop at 5,000 ids, the 4 reserved ones included, and hold every
    # letter, alone and continuing a word ("##a"), so that no word of these letters is unknown.
    tokenizers = json.loads((run / "tokenizers.json").read_text(encoding="utf-8"))
    for side in ("source", "target"):
        vocabulary = tokenizers[side]["vocabulary"]
        assert len(vocabulary) == len(set(vocabulary)) == 5000 - 4
        assert {*string.ascii_lowercase, *("##" + c for c in string.ascii_lowercase)} <= set(vocabulary)
    # Each of the 18 steps of 64 trained at the cosine's rate for its time, 2e-3 * (0.3 + 0.7 *
    # (1 + cos(pi * t / 600)) / 2) (still about 2e-3 this early in a 10-minute budget), times the
    # warm-up's step / 1000 (from 0 at the first step).
    assert len(rates) == 1152 // 64
    assert [step for _, step, _ in rates] == list(range(18))  # counted from 0, as Keras' CosineDecay warm-up counts
    for elapsed, step, rate in rates:
        cosine = 2e-3 * (0.3 + 0.7 * (1 + math.cos(math.pi * elapsed / 600)) / 2)
        assert rate == pytest.approx(cosine * step / 1000, rel=1e-9)
        assert 0 <= elapsed < 600 and cosine > 1.9e-3


def test_the_default_model_is_the_best_measured_row(tmp_path):
    """`tfattn train`'s model and tokenizers without model flags are `bench/quality.py --model
    multihead-wordpiece`'s, the row docs/performance.md measured best: changing the recipe or the row
    shows here."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import quality
    from tfattn.cli import build_parser, run_config

    args = build_parser().parse_args(["train", "--corpus", str(tmp_path / "c.txt"), "--out", str(tmp_path / "run")])
    config = run_config(args)
    assert config.model == quality.recipe_model(quality.KINDS["multihead-wordpiece"], dropout=0.2)
    row = quality.recipe(config.corpus, config.model, config.train, 5000, **quality.ROWS["multihead-wordpiece"]["run"])
    assert config.source_tokenizer == config.target_tokenizer == row.source_tokenizer == row.target_tokenizer
    assert config.source_tokenizer.level == "wordpiece"


# -- beam search through translate and evaluate ----------------------------------------------------

def greedy_and_beam(translator, texts):
    """The in-memory translator's greedy and beam-4 texts (length penalty 0.6, as the CLI asks)."""
    greedy = [t.decode("utf-8") for t in translator(texts)["text"]]
    beam = [t.decode("utf-8") for t in translator.beam(texts, beam_width=4, length_penalty=0.6)["text"]]
    assert greedy != beam, "beam 4 gives what greedy gives here: the test could not tell them apart"
    return greedy, beam


def test_translate_with_beam_4_gives_the_translators_beam_search(dates_translator, exported_dates, dates_data,
                                                                 capsys):
    texts = [s for s, _ in dates_data[1]]
    assert texts
    greedy, beam = greedy_and_beam(dates_translator, texts)  # the translator `exported_dates` holds
    status, out, err = run_main(capsys, "translate", "--model", exported_dates, "--beam", "4", *texts)
    assert status == 0, err
    assert out.splitlines() == beam


def test_evaluate_with_beam_4_scores_the_beam_translations(dates_translator, exported_dates, tmp_path, capsys):
    from sacrebleu.metrics import BLEU, CHRF

    pairs = write_anki(tmp_path / "d.txt", 10_000)  # (written date, ISO) on line i
    test = pairs[::50]  # the test split of a single file: lines i % 50 == 0
    sources, references = [s for s, _ in test], [t for _, t in test]
    greedy, beam = greedy_and_beam(dates_translator, sources)
    status, out, err = run_main(capsys, "evaluate", "--model", exported_dates, "--corpus", str(tmp_path / "d.txt"),
                                "--split", "test", "--beam", "4", "--output", str(tmp_path / "e.json"))
    assert status == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result == json.loads((tmp_path / "e.json").read_text(encoding="utf-8"))
    assert (result["beam"], result["n"], result["split"]) == (4, 200, "test")
    expected = {"bleu": BLEU(lowercase=True).corpus_score(beam, [references]).score,
                "chrf": CHRF(lowercase=True).corpus_score(beam, [references]).score}
    assert (result["bleu"], result["chrf"]) == (round(expected["bleu"], 2), round(expected["chrf"], 2))
    # The greedy translations score otherwise: the scores above are the beam's.
    greedy_scores = (BLEU(lowercase=True).corpus_score(greedy, [references]).score,
                     CHRF(lowercase=True).corpus_score(greedy, [references]).score)
    assert tuple(round(s, 2) for s in greedy_scores) != (result["bleu"], result["chrf"])
