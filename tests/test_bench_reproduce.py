"""bench/reproduce.py's helpers: the grids, the plan, the budget and its duration, runs found again,
trends and tables.

No TensorFlow: the script imports it only inside the functions that train and score, and the first
test checks that importing the script loads none of it. Every expected value is worked out by hand
beside the assertion. The last test (long) runs the script itself in its `--tiny` mode.
"""

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import shared_data

BENCH = Path(__file__).resolve().parents[1] / "bench"
DOCS = BENCH.parent / "docs" / "reproduction.md"
sys.path.insert(0, str(BENCH))

import reproduce  # noqa: E402


def test_importing_the_script_loads_no_tensorflow():
    code = ("import sys, reproduce; heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'tensorflow', 'keras', 'jax', 'tfattn', 'matplotlib', 'sacrebleu'}); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- the budget -----------------------------------------------------------------------------------


@pytest.mark.parametrize("steps, every, expected", [
    (8000, 400, (20, 400)),  # 20 epochs cut at 400 batches: 8,000 steps
    (800, 400, (2, 400)),
    (400, 400, (1, 400)),
    (20, 400, (1, 20)),  # fewer steps than one validation interval: one epoch of 20
])
def test_schedule_trains_exactly_the_steps(steps, every, expected):
    epochs, per_epoch = reproduce.schedule(steps, every)
    assert (epochs, per_epoch) == expected
    assert epochs * per_epoch == steps


@pytest.mark.parametrize("steps, every, match", [
    (8100, 400, "multiple of --every"),  # 20.25 epochs: the budget would not be exact
    (0, 400, "steps=0"),
    (400, 0, "every=0"),
])
def test_schedule_refuses_a_budget_it_cannot_train_exactly(steps, every, match):
    with pytest.raises(ValueError, match=match):
        reproduce.schedule(steps, every)


def test_command_line_defaults_and_tiny():
    args = reproduce.parse_args([])
    assert args.corpora == ["spa-eng"] and args.parts == ["length", "alignment", "table4"] and not args.full
    assert args.kinds is None and args.reuse == [] and args.figures == "runs/reproduce/figures"
    budget = reproduce.budget_of(args)
    assert (budget.steps, budget.every, budget.size, budget.vocab) == (8000, 400, 256, {"spa-eng": 5000,
                                                                                       "multi30k": 8000})
    assert budget.max_pairs is None and budget.test_sentences is None

    full = reproduce.parse_args(["--full"])
    assert full.full and full.corpora == ["spa-eng", "multi30k"]
    assert full.out == "runs/reproduce"  # where the default grid's runs are, found there rather than trained again
    assert reproduce.budget_of(full) == budget  # the same recipe, so that the default grid's runs count in the full one

    assert reproduce.parse_args(["--tiny"]).out == "runs/reproduce-tiny"  # never the full runs' directory
    tiny = reproduce.parse_args(["--tiny", "--out", "/tmp/r"])
    assert tiny.kinds == ["none", "luong-local-p"] and tiny.figures == "/tmp/r/figures"
    assert tiny.corpora == ["spa-eng", "multi30k"]  # every path of the script, Multi30k's files too
    small = reproduce.budget_of(tiny)
    assert (small.steps, small.every, small.size, small.max_pairs, small.test_sentences) == (20, 20, 16, 2000, 200)

    longer = reproduce.budget_of(reproduce.parse_args(["--tiny", "--steps", "60"]))
    assert reproduce.schedule(longer.steps, longer.every) == (3, 20)  # tiny's validation every 20 steps kept
    chosen = reproduce.parse_args(["--corpora", "multi30k", "--kinds", "luong-dot, none", "--reuse", "a",
                                   "--reuse", "b"])
    assert chosen.corpora == ["multi30k"] and chosen.kinds == ["luong-dot", "none"] and chosen.reuse == ["a", "b"]
    # A full-grid cell is a valid --kinds without --full.
    assert reproduce.parse_args(["--kinds", "luong-local-m-concat"]).kinds == ["luong-local-m-concat"]


@pytest.mark.parametrize("argv", [["--steps", "8100"], ["--kinds", "luong,nope"], ["--corpora", "wmt14"],
                                  ["--parts", ""], ["--steps", "0"], ["--every", "0"], ["--tiny", "--steps", "0"],
                                  ["--every", "-400"], ["--steps", "many"]])
def test_command_line_refuses_what_it_cannot_run(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        reproduce.parse_args(argv)
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err


def paths_args(tmp_path, **given):
    args = argparse.Namespace(corpora=["spa-eng"], out=str(tmp_path / "out"), figures=str(tmp_path / "figures"))
    return argparse.Namespace(**{**vars(args), **given})


@pytest.fixture
def corpora(tmp_path, monkeypatch):
    """CORPORA pointing at tmp_path: spa.txt there, Multi30k's directory holding only train.en."""
    (tmp_path / "spa.txt").write_text("Go.\tVe.\n")
    (tmp_path / "m30k").mkdir()
    (tmp_path / "m30k" / "train.en").write_text("a dog\n")
    monkeypatch.setitem(reproduce.CORPORA, "spa-eng", {"corpus": str(tmp_path / "spa.txt"), "direction": "to_english"})
    multi30k = {**reproduce.CORPORA["multi30k"], "corpus": str(tmp_path / "m30k")}
    monkeypatch.setitem(reproduce.CORPORA, "multi30k", multi30k)


def test_paths_that_can_be_written_and_read_pass_and_are_made(tmp_path, corpora):
    assert reproduce.path_problem(paths_args(tmp_path)) is None
    assert sorted(os.listdir(tmp_path / "out")) == [] and sorted(os.listdir(tmp_path / "figures")) == []


def test_a_missing_corpus_is_named_before_any_training(tmp_path, corpora):
    problem = reproduce.path_problem(paths_args(tmp_path, corpora=["spa-eng", "multi30k"]))
    assert problem.startswith(f"the multi30k corpus is missing ({tmp_path / 'm30k' / 'train.de'} is not a file "
                              f"among others): ")
    assert problem.endswith("or leave multi30k out with --corpora. Received: --corpora spa-eng,multi30k")
    os.remove(tmp_path / "spa.txt")
    assert reproduce.path_problem(paths_args(tmp_path)).startswith(
        f"the spa-eng corpus is missing ({tmp_path / 'spa.txt'} is not a file): ")


@pytest.mark.parametrize("flag", ["out", "figures"])
@pytest.mark.parametrize("under", [False, True])
def test_an_output_that_is_a_file_is_refused_before_any_training(tmp_path, corpora, flag, under):
    (tmp_path / "F").write_text("a file")
    path = str(tmp_path / "F" / "sub" if under else tmp_path / "F")
    problem = reproduce.path_problem(paths_args(tmp_path, **{flag: path}))
    assert problem.startswith(f"--{flag} {path} is not a directory this script can write: ")
    assert problem.endswith(f"Received: --{flag} {path}")
    assert ("it is a file" in problem) == (not under)
    assert (tmp_path / "F").read_text() == "a file"


def test_the_script_stops_with_one_line_before_it_trains(tmp_path):
    (tmp_path / "F").write_text("a file")
    done = run_script("--tiny", "--corpora", "spa-eng", "--figures", str(tmp_path / "F"), "--out", str(tmp_path / "o"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"reproduce.py: error: --figures {tmp_path / 'F'} is not a directory this script can write: it is a file. "
        f"Received: --figures {tmp_path / 'F'}"]
    assert os.listdir(tmp_path / "o") == []  # nothing trained


def test_names_parses_a_comma_separated_list_of_known_names():
    parse = reproduce.names(("a", "b"))
    assert parse("b, a") == ["b", "a"]
    for text in ("a,c", "", " , "):
        with pytest.raises(argparse.ArgumentTypeError, match="Received"):
            parse(text)


# --- the plan -------------------------------------------------------------------------------------


def test_table4_cells_are_luongs_grid_with_quality_kinds_for_the_general_score():
    full = [
        ("global", "location", "luong-location"), ("global", "dot", "luong-dot"), ("global", "general", "luong"),
        ("global", "concat", "luong-concat"),
        ("local-m", "dot", "luong-local-m-dot"), ("local-m", "general", "luong-local-m"),
        ("local-m", "concat", "luong-local-m-concat"),
        ("local-p", "dot", "luong-local-p-dot"), ("local-p", "general", "luong-local-p"),
        ("local-p", "concat", "luong-local-p-concat"),
    ]  # location only global, as in the paper: 4 + 3 + 3 cells
    assert reproduce.table4_cells(reproduce.FULL_CELLS) == full
    assert reproduce.table4_cells() == full  # every cell of either grid: the default's are all in the full one
    # The default grid: global dot, general and concat, and general for each local range.
    assert reproduce.table4_cells(reproduce.DEFAULT_CELLS) == [
        ("global", "dot", "luong-dot"), ("global", "general", "luong"), ("global", "concat", "luong-concat"),
        ("local-m", "general", "luong-local-m"), ("local-p", "general", "luong-local-p")]
    assert reproduce.table4_cells([("global", "cosine")]) == [("global", "cosine", "luong-cosine")]  # a row to add


def test_fields_of_takes_qualitys_kinds_first_then_the_grid():
    known = {"luong": {"attention": "luong", "score": "general", "input_feeding": True}, "none": {"attention": "none"}}
    assert reproduce.fields_of("luong", known) == {"attention": "luong", "score": "general", "input_feeding": True}
    assert reproduce.fields_of("luong-local-p-dot", known) == {"attention": "luong", "score": "dot", "local": "p",
                                                               "window": 10}
    assert reproduce.fields_of("luong-location", {}) == {"attention": "luong", "score": "location"}
    assert reproduce.fields_of("luong-local-m", {}) == {"attention": "luong", "score": "general", "local": "m",
                                                        "window": 10}
    copy = reproduce.fields_of("none", known)
    copy["attention"] = "bahdanau"
    assert known["none"] == {"attention": "none"}  # a copy, not quality.KINDS' own dict
    with pytest.raises(ValueError, match="kind='luong-cosine'"):
        reproduce.fields_of("luong-cosine", known)


def test_plan_takes_each_kind_once_in_the_parts_order():
    assert reproduce.plan(["length"]) == ["none", "bahdanau", "luong", "luong-local-p"]
    assert reproduce.plan(["alignment", "length"]) == ["bahdanau", "luong", "luong-local-p", "none"]
    # The default grid: 4 kinds for the length part, then the 5 cells less the two it has (luong, luong-local-p).
    assert reproduce.plan(["length", "alignment", "table4"]) == [
        "none", "bahdanau", "luong", "luong-local-p", "luong-dot", "luong-concat", "luong-local-m"]
    everything = reproduce.plan(["length", "alignment", "table4"], reproduce.FULL_CELLS)
    # The full grid: 4 kinds for the length part, then the 10 cells less the two it has.
    assert everything == ["none", "bahdanau", "luong", "luong-local-p", "luong-location", "luong-dot", "luong-concat",
                          "luong-local-m-dot", "luong-local-m", "luong-local-m-concat", "luong-local-p-dot",
                          "luong-local-p-concat"]
    assert reproduce.plan(["length", "alignment", "table4"], None) == everything  # either grid's cells
    assert reproduce.plan(["length", "table4"], only=["luong-dot", "none"]) == ["none", "luong-dot"]
    assert reproduce.plan(["table4"], only=["luong-local-p-dot"]) == []  # not a cell of the default grid


@pytest.mark.parametrize("argv, expected", [
    ([], ["none", "bahdanau", "luong", "luong-local-p", "luong-dot", "luong-concat", "luong-local-m"]),
    (["--full", "--parts", "table4"], ["luong-location", "luong-dot", "luong", "luong-concat", "luong-local-m-dot",
                                       "luong-local-m", "luong-local-m-concat", "luong-local-p-dot", "luong-local-p",
                                       "luong-local-p-concat"]),
    (["--full"], ["none", "bahdanau", "luong", "luong-local-p", "luong-location", "luong-dot", "luong-concat",
                  "luong-local-m-dot", "luong-local-m", "luong-local-m-concat", "luong-local-p-dot",
                  "luong-local-p-concat"]),
    # --kinds takes cells of the full grid without --full, in the grid's order; none is not a Table 4 kind.
    (["--parts", "table4", "--kinds", "luong-local-p-dot,none,luong-dot"], ["luong-dot", "luong-local-p-dot"]),
    (["--tiny"], ["none", "luong-local-p"]),
    (["--tiny", "--parts", "table4"], ["luong-local-p"]),
])
def test_kinds_of_the_command_line(argv, expected):
    assert reproduce.kinds_of(reproduce.parse_args(argv)) == expected


# --- how long a grid takes ------------------------------------------------------------------------


def test_step_seconds_by_kind_and_corpus():
    assert reproduce.step_seconds("bahdanau", "spa-eng") == 0.09
    assert reproduce.step_seconds("luong-concat", "spa-eng") == 0.09  # global attention
    assert reproduce.step_seconds("none", "spa-eng") == 0.094
    assert reproduce.step_seconds("luong-local-m-dot", "spa-eng") == 0.114
    assert reproduce.step_seconds("luong-local-p", "multi30k") == pytest.approx(0.228)  # twice spa-eng's
    assert reproduce.step_seconds("luong", "multi30k") == pytest.approx(0.18)


def test_a_run_is_its_steps_its_validations_and_its_scoring():
    # 8,000 steps of 0.09 s = 720 s, 20 validations of 4 s = 80 s, scoring 60 s: 860 s.
    assert reproduce.run_seconds("bahdanau", "spa-eng", 8000, 400) == pytest.approx(860)
    # Local attention on Multi30k: 8,000 x 0.228 = 1,824 s, + 80 + 60 = 1,964 s.
    assert reproduce.run_seconds("luong-local-p", "multi30k", 8000, 400) == pytest.approx(1964)
    # 20 steps in one epoch: 20 x 0.094 = 1.88 s, one validation 4 s, scoring 60 s.
    assert reproduce.run_seconds("none", "spa-eng", 20, 400) == pytest.approx(65.88)


def test_the_grids_durations_are_computed_from_the_grids():
    # Per spa-eng run of 8,000 steps, 80 s of validations and 60 s of scoring (140 s) beside the steps:
    # global 720 + 140 = 860, none 752 + 140 = 892, local 912 + 140 = 1,052.
    # Default: none, 4 global (bahdanau, luong, luong-dot, luong-concat), 2 local (local-p, local-m):
    # 892 + 4 x 860 + 2 x 1,052 = 892 + 3,440 + 2,104 = 6,436 s = 107.3 min.
    default = reproduce.plan(reproduce.PARTS, reproduce.DEFAULT_CELLS)
    assert reproduce.estimate_seconds(["spa-eng"], default, 8000) == 6436
    # Full, spa-eng: none, 5 global (+ luong-location), 6 local: 892 + 4,300 + 6,312 = 11,504 s. Multi30k's
    # steps twice as long: global 1,440 + 140 = 1,580, none 1,504 + 140 = 1,644, local 1,824 + 140 = 1,964:
    # 1,644 + 5 x 1,580 + 6 x 1,964 = 1,644 + 7,900 + 11,784 = 21,328 s. In all 32,832 s = 547.2 min.
    full = reproduce.plan(reproduce.PARTS, reproduce.FULL_CELLS)
    assert reproduce.estimate_seconds(["spa-eng", "multi30k"], full, 8000) == 32832
    assert (reproduce.DEFAULT_DURATION, reproduce.FULL_DURATION) == ("1 h 47 min", "9 h 07 min")
    # What --full adds after the default grid: 32,832 - 6,436 = 26,396 s = 439.9 min.
    assert reproduce.duration_text(32832 - 6436) == "7 h 20 min"


def test_duration_text_rounds_to_the_minute():
    assert reproduce.duration_text(2820) == "47 min"
    assert reproduce.duration_text(3900) == "1 h 05 min"
    assert reproduce.duration_text(3599) == "1 h 00 min"  # 59.98 minutes
    assert reproduce.duration_text(6436) == "1 h 47 min"


def test_the_docstring_the_help_and_the_docs_give_the_computed_durations(capsys):
    rest = reproduce.duration_text(
        reproduce.estimate_seconds(list(reproduce.CORPORA), reproduce.plan(reproduce.PARTS, reproduce.FULL_CELLS),
                                   reproduce.STEPS)
        - reproduce.estimate_seconds(list(reproduce.DEFAULT_CORPORA), reproduce.plan(reproduce.PARTS),
                                     reproduce.STEPS))
    with pytest.raises(SystemExit):
        reproduce.parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    docstring = " ".join(reproduce.__doc__.split())
    docs = " ".join(DOCS.read_text(encoding="utf-8").split())
    runs = len(reproduce.plan(reproduce.PARTS)), 2 * len(reproduce.plan(reproduce.PARTS, reproduce.FULL_CELLS))
    assert runs == (7, 24)  # spa-eng's 7; 12 on each corpus
    for text in (f"{runs[0]} runs, about {reproduce.DEFAULT_DURATION}",
                 f"{runs[1]} runs, about {reproduce.FULL_DURATION}", f"{rest} more after the default grid"):
        assert text in docstring, text
        assert text in docs, text
    assert f"about {reproduce.FULL_DURATION}" in help_text and f"about {reproduce.DEFAULT_DURATION}" in help_text


# --- runs that exist ------------------------------------------------------------------------------


def test_run_dirs_look_in_both_layouts_of_every_reuse_directory():
    assert reproduce.run_dirs(["a", "b"], "spa-eng", "luong") == [
        "a/spa-eng/luong/run", "a/luong/run", "b/spa-eng/luong/run", "b/luong/run"]
    assert reproduce.run_dirs([], "spa-eng", "luong") == []


def test_run_state_tells_finished_cut_and_new_runs_apart(tmp_path):
    run = tmp_path / "run"
    assert reproduce.run_state(str(run)) == "new"  # absent
    run.mkdir()
    assert reproduce.run_state(str(run)) == "new"  # empty
    (run / "summary.json").write_text("{}")
    (run / "export").mkdir()
    (run / "export" / "saved_model.pb").write_bytes(b"x")
    assert reproduce.run_state(str(run)) == "new"  # no config.json: not a run
    (run / "config.json").write_text("{}")
    assert reproduce.run_state(str(run)) == "done"
    (run / "summary.json").unlink()
    assert reproduce.run_state(str(run)) == "partial"  # an export without its summary: cut short
    (run / "summary.json").write_text("{}")
    (run / "export" / "saved_model.pb").unlink()
    assert reproduce.run_state(str(run)) == "partial"  # a summary without its export


def spa_run(corpus_path, **model):
    """A config.json's corpus and model sections, as a run of the spa-eng recipe writes them."""
    return {"corpus": {"corpus": corpus_path, "format": None, "direction": "to_english", "source_lang": None,
                       "target_lang": None, "splits": ["train", "validation", "test"], "max_pairs": None},
            "model": {"attention": "luong", "score": "general", "local": None, "window": 10, "input_feeding": True,
                      **model}}


def test_reuse_problem_accepts_the_same_corpus_and_kind(tmp_path):
    corpus = tmp_path / "spa.txt"
    corpus.write_text("Go.\tVe.\n")
    (tmp_path / "link.txt").symlink_to(corpus)
    entry = {"corpus": str(corpus), "direction": "to_english"}
    luong = {"attention": "luong", "score": "general", "input_feeding": True}
    assert reproduce.reuse_problem(spa_run(str(corpus)), entry, luong) is None
    assert reproduce.reuse_problem(spa_run(str(tmp_path / "link.txt")), entry, luong) is None  # the same file


def test_reuse_problem_names_what_differs(tmp_path):
    entry = {"corpus": str(tmp_path / "spa.txt"), "direction": "to_english"}
    luong = {"attention": "luong", "score": "general", "input_feeding": True}
    other = reproduce.reuse_problem(spa_run(str(tmp_path / "other.txt")), entry, luong)
    assert "other.txt" in other
    backwards = spa_run(entry["corpus"])
    backwards["corpus"]["direction"] = "from_english"
    assert "direction" in reproduce.reuse_problem(backwards, entry, luong)
    # quality.py's `--attention luong` run has no input feeding: not the `luong` kind.
    assert "input_feeding" in reproduce.reuse_problem(spa_run(entry["corpus"], input_feeding=False), entry, luong)
    assert reproduce.reuse_problem({}, entry, luong).startswith("it trained on '', not ")  # no corpus section


def test_reuse_problem_reads_multi30k_splits_back_from_json_lists(tmp_path):
    entry = {"corpus": str(tmp_path), "format": "parallel", "source_lang": "en", "target_lang": "de",
             "splits": ("train", "val", "test_2016_flickr")}
    config = {"corpus": {"corpus": str(tmp_path), "format": "parallel", "source_lang": "en", "target_lang": "de",
                         "splits": ["train", "val", "test_2016_flickr"]},  # JSON has lists, not tuples
              "model": {"attention": "bahdanau"}}
    assert reproduce.reuse_problem(config, entry, {"attention": "bahdanau"}) is None
    config["corpus"]["source_lang"], config["corpus"]["target_lang"] = "de", "en"
    assert "source_lang" in reproduce.reuse_problem(config, entry, {"attention": "bahdanau"})


def test_recipe_differences_lists_the_recipe_fields_that_differ():
    ours = {"model": {"embedding_dim": 256, "units": 256, "dropout": 0.2, "attention": "luong"},
            "source_tokenizer": {"max_tokens": 5000}, "target_tokenizer": {"max_tokens": 5000},
            "data": {"batch_size": 64, "shuffle_buffer": None},
            "train": {"learning_rate": 0.002, "decay_steps": 8000, "time_budget": None}}
    # A quality.py run: 15 minutes (900 s) with the cosine over 10,000 steps, the same whole-split shuffle.
    theirs = {**ours, "train": {"learning_rate": 0.002, "decay_steps": 10000, "time_budget": 900.0},
              "model": {**ours["model"], "attention": "bahdanau"}}  # not a recipe field: the kind's
    assert reproduce.recipe_differences(theirs, ours) == {"train.decay_steps": [10000, 8000],
                                                          "train.time_budget": [900.0, None]}
    # A run of an earlier version, whose pipeline shuffled through a buffer of 20,000 rows.
    older = {**ours, "data": {"batch_size": 64, "shuffle_buffer": 20000}}
    assert reproduce.recipe_differences(older, ours) == {"data.shuffle_buffer": [20000, None]}
    assert reproduce.recipe_differences(ours, ours) == {}
    tiny = {**ours, "corpus": {"max_pairs": 2000}, "model": {**ours["model"], "units": 16}}
    assert reproduce.recipe_differences(tiny, ours) == {"corpus.max_pairs": [2000, None], "model.units": [16, 256]}


def test_perplexity_is_the_exponential_of_the_loss():
    assert reproduce.perplexity(0.0) == 1.0
    assert reproduce.perplexity(math.log(7.5)) == 7.5
    assert reproduce.perplexity(1.0) == 2.72  # e = 2.71828...
    for loss in (None, float("nan"), float("inf")):
        assert reproduce.perplexity(loss) is None


# --- what the scores show -------------------------------------------------------------------------


def buckets(*points):
    """`{label: {"bleu", "n"}}` over the package's five buckets from `(bleu, n)` pairs."""
    return {label: {"bleu": b, "n": n} for label, (b, n) in zip(("1-5", "6-10", "11-15", "16-20", "21+"), points)}


def test_length_trend_fits_a_line_over_the_buckets_with_enough_sentences():
    # x = 0..3, y = 30, 26, 24, 14: means 1.5 and 23.5; sum of dx*dy = -1.5*6.5 - 0.5*2.5 + 0.5*0.5 - 1.5*9.5 = -25,
    # sum of dx^2 = 5: slope -5 (the ends alone would give -16 / 3 = -5.33). 21+ is empty.
    trend = reproduce.length_trend(buckets((30.0, 100), (26.0, 50), (24.0, 30), (14.0, 25), (None, 0)))
    assert trend == {"buckets": ["1-5", "6-10", "11-15", "16-20"], "slope": -5.0, "last_minus_first": -16.0}


def test_length_trend_leaves_out_buckets_of_few_sentences_and_keeps_their_positions():
    by_length = buckets((30.0, 100), (99.0, 5), (20.0, 30), (16.0, 30), (None, 0))
    # Without 6-10 (5 sentences): points (0, 30), (2, 20), (3, 16); means 5/3 and 22; sum of dx*dy =
    # -5/3*8 + 1/3*-2 + 4/3*-6 = -22, sum of dx^2 = 14/3: slope -66/14 = -4.714.
    assert reproduce.length_trend(by_length) == {"buckets": ["1-5", "11-15", "16-20"], "slope": -4.71,
                                                 "last_minus_first": -14.0}
    # With it (min_n 5): x 0..3, y 30, 99, 20, 16: sum of dx*dy = -60.5, sum of dx^2 = 5: slope -12.1.
    assert reproduce.length_trend(by_length, min_n=5)["slope"] == -12.1
    one = reproduce.length_trend(buckets((30.0, 100), (20.0, 3), (None, 0), (None, 0), (None, 0)))
    assert one == {"buckets": ["1-5"], "slope": None, "last_minus_first": None}


def test_gaps_are_each_models_bleu_minus_the_baselines():
    by_length = {"none": buckets((20.0, 3), (10.0, 2), (None, 0)),
                 "bahdanau": buckets((25.5, 3), (18.0, 2), (None, 0)),
                 "luong": buckets((19.0, 3), (None, 2), (5.0, 0))}
    assert reproduce.gaps(by_length) == {"bahdanau": {"1-5": 5.5, "6-10": 8.0, "11-15": None},
                                         "luong": {"1-5": -1.0, "6-10": None, "11-15": None}}


def test_long_sentence_is_the_longest_source_within_the_limit():
    pairs = [("a b c", "x"), ("a b c d e", "y"), ("a b c d e f g", "z"), ("v  w x y z", "q")]
    assert reproduce.long_sentence(pairs, max_words=6) == ("a b c d e", "y")  # 5 words; the 7 too long; first of two
    assert reproduce.long_sentence(pairs, max_words=7) == ("a b c d e f g", "z")
    assert reproduce.long_sentence(pairs, max_words=2) is None


def test_figure_path_names_the_figure_in_the_directory():
    assert reproduce.figure_path("docs", "alignment", "spa-eng", "bahdanau") == \
        "docs/reproduction-alignment-spa-eng-bahdanau.png"


# --- the tables -----------------------------------------------------------------------------------


def row(steps, ppl, greedy, beam, greedy_by_length=None, beam_by_length=None):
    return {"steps": steps, "val_ppl": ppl, "greedy": {"bleu": greedy, "bleu_by_length": greedy_by_length or {}},
            "beam4": {"bleu": beam, "bleu_by_length": beam_by_length or {}}}


def by_length(first, second):
    """`{bucket: {"bleu", "n"}}` of two buckets, 1,500 and 25 sentences, as quality.score gives it."""
    return {"1-5": {"bleu": first, "n": 1500}, "6-10": {"bleu": second, "n": 25}}


MODELS = {
    "luong": row(6000, 4.5, 30.0, 32.25, by_length(31.0, None), by_length(33.0, 29.0)),
    "none": row(6000, 9.87, 10.0, 11.0, by_length(20.0, 10.0), by_length(22.0, 12.5)),
    "luong-local-p-dot": row(20, None, 1.0, 2.0),
}


def test_length_table_has_a_row_per_length_kind_in_order():
    # Slopes over two buckets: 12.5 - 22 = -9.5 and 29 - 33 = -4; luong-local-p-dot is not a length kind.
    assert reproduce.length_table(MODELS) == "\n".join([
        "| model | steps | 1-5 (n=1,500) | 6-10 (n=25) | slope, beam 4 |",
        "|---|---|---|---|---|",
        "| RNNencdec (no attention) | 6,000 | 20.00 / 22.00 | 10.00 / 12.50 | -9.50 |",
        "| Luong global | 6,000 | 31.00 / 33.00 | - / 29.00 | -4.00 |",
    ])


def test_table4_table_has_a_row_per_cell_that_ran_in_the_papers_order():
    assert reproduce.table4_table(MODELS) == "\n".join([
        "| attention | score | val ppl | BLEU greedy / beam 4 | steps |",
        "|---|---|---|---|---|",
        "| global | general | 4.50 | 30.00 / 32.25 | 6,000 |",
        "| local-p | dot | - | 1.00 / 2.00 | 20 |",
    ])


def test_markdown_gives_each_corpus_its_tables():
    result = {"corpora": {"spa-eng": {"direction": "Spanish -> English", "n_test": 2380,
                                      "models": MODELS, "length": {}, "table4": {}},
                          "multi30k": {"direction": "English -> German", "n_test": 1000,
                                       "models": {}, "table4": {}}}}
    text = reproduce.markdown(result)
    assert text.startswith("## spa-eng (Spanish -> English), 2,380 test sentences\n")
    assert reproduce.length_table(MODELS) in text and reproduce.table4_table(MODELS) in text
    multi30k = text[text.index("## multi30k"):]
    assert "BLEU by source length" not in multi30k and "Table 4 analogue" in multi30k  # no length part asked


# --- the budget against the real corpora ----------------------------------------------------------


@pytest.mark.data
def test_the_budget_fits_the_real_corpora():
    spa = shared_data("spa-eng", "spa.txt")
    with open(spa, encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    train = lines - sum(1 for i in range(lines) if i % 50 in (0, 1))  # TEST and VALIDATION by line index
    # 114,204 pairs make 1,784 batches of 64: a cut epoch of EVERY batches is 22% of an epoch.
    assert train == 114_204 and train // 64 >= reproduce.EVERY
    with open(shared_data("multi30k-en-de", "train.en"), encoding="utf-8") as f:
        pairs = sum(1 for _ in f)
    # 29,000 pairs make 453 batches of 64: an epoch cut at EVERY batches is never cut short by the data
    # (the length limit drops few: Multi30k's longest sentence has 39 words).
    assert pairs == 29_000 and pairs // 64 >= reproduce.EVERY
    assert Path(reproduce.CORPORA["spa-eng"]["corpus"]) == spa  # where the tests find the corpora
    assert Path(reproduce.CORPORA["multi30k"]["corpus"]) == shared_data("multi30k-en-de")


# --- the script itself, tiny ----------------------------------------------------------------------


def run_script(*args):
    """`python bench/reproduce.py ARGS` in a subprocess, this checkout's `tfattn` first on its path."""
    root = str(BENCH.parent)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, str(BENCH / "reproduce.py"), *args], capture_output=True, text=True,
                          env=env, cwd=root, timeout=3600)


# Source length buckets of the 200 test pairs `--tiny` scores, counted in the raw files with awk
# (whitespace-separated words): spa-eng's TEST pairs are its lines i % 50 == 0, and the 200 spread
# over its 2,380 are TEST pairs floor(11.9 k), k = 0..199, the longest of 15 words; Multi30k's are
# every fifth line of test_2016_flickr.en (1,000 / 200).
TINY_COUNTS = {"spa-eng": {"1-5": 100, "6-10": 90, "11-15": 10, "16-20": 0, "21+": 0},
               "multi30k": {"1-5": 1, "6-10": 76, "11-15": 93, "16-20": 24, "21+": 6}}


@pytest.mark.long  # four tiny runs trained, exported and scored twice: minutes, make test-long
@pytest.mark.data
def test_tiny_reproduction_runs_every_part_then_finds_its_runs_and_refuses_another_recipe(tmp_path):
    shared_data("spa-eng", "spa.txt")
    shared_data("multi30k-en-de", "test_2016_flickr.en")
    out = tmp_path / "out"
    first = run_script("--tiny", "--out", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.loads(first.stdout)
    assert result == json.loads((out / "reproduce.json").read_text(encoding="utf-8"))
    assert result["tiny"] and result["budget"]["steps"] == 20 and list(result["corpora"]) == ["spa-eng", "multi30k"]
    assert not result["full"] and result["estimated_seconds"] is None  # the estimates are of full-size models
    tables = (out / "tables.md").read_text(encoding="utf-8")
    for corpus, found in result["corpora"].items():
        assert found["n_test"] == 200
        assert list(found["models"]) == ["none", "luong-local-p"] and found["diverged"] == {}
        for kind, row in found["models"].items():
            assert (row["how"], row["steps"], row["validations"]) == ("trained", 20, 1)
            assert row["run"] == str(out / corpus / kind / "run") and "differs_from_recipe" not in row
            for decoding in ("greedy", "beam4"):
                assert 0.0 <= row[decoding]["bleu"] <= 100.0
                counts = {label: v["n"] for label, v in row[decoding]["bleu_by_length"].items()}
                assert counts == TINY_COUNTS[corpus]
        # The length part: both models' trends, the attention model's gap to the baseline in every bucket.
        length = found["length"]
        assert set(length["trend_beam4"]) == {"none", "luong-local-p"}
        assert list(length["gap_to_baseline_beam4"]) == ["luong-local-p"]
        assert list(length["gap_to_baseline_beam4"]["luong-local-p"]) == list(TINY_COUNTS[corpus])
        assert Path(length["figure"]) == out / "figures" / f"reproduction-bleu-by-length-{corpus}.png"
        # The alignment part: the baseline has no attention to draw.
        alignment = found["alignment"]
        assert list(alignment["models"]) == ["luong-local-p"] and alignment["words"] <= reproduce.LONG_WORDS
        assert Path(alignment["models"]["luong-local-p"]["figure"]) == \
            out / "figures" / f"reproduction-alignment-{corpus}-luong-local-p.png"
        # Table 4: the one cell that ran.
        assert list(found["table4"]) == ["local-p"] and list(found["table4"]["local-p"]) == ["general"]
        assert f"## {corpus} " in tables
    for png in (out / "figures").iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((out / "figures").iterdir())) == 4  # 2 corpora x (length, alignment)
    # spa-eng's 200 pairs hold no source of 16 words or more: no BLEU for them, rather than a crash.
    spa_row = result["corpora"]["spa-eng"]["models"]["none"]["greedy"]
    assert (spa_row["n_16_plus"], spa_row["bleu_16_plus"]) == (0, None)
    assert result["corpora"]["multi30k"]["models"]["none"]["greedy"]["n_16_plus"] == 30  # 24 + 6

    # Again, Table 4 alone: the run is found and scored again, not trained; the baseline is not needed.
    again = run_script("--tiny", "--out", str(out), "--corpora", "multi30k", "--parts", "table4")
    assert again.returncode == 0, again.stderr[-3000:]
    rows = json.loads(again.stdout)["corpora"]["multi30k"]["models"]
    assert list(rows) == ["luong-local-p"] and rows["luong-local-p"]["how"] == "found"
    assert rows["luong-local-p"]["greedy"]["bleu"] == \
        result["corpora"]["multi30k"]["models"]["luong-local-p"]["greedy"]["bleu"]  # the same export, greedy
    assert "luong-local-p: training" not in again.stderr
    assert "--kinds none: not needed by --parts table4" in again.stderr

    # Another budget into the same --out stops rather than mixing the two.
    other = run_script("--tiny", "--steps", "40", "--out", str(out), "--corpora", "multi30k", "--parts", "table4")
    assert other.returncode == 1 and '"benchmark"' not in other.stdout  # no JSON: nothing was scored
    assert "holds a run of another recipe" in other.stderr and "'train.decay_steps': [20, 40]" in other.stderr
