import json

import pytest

from tfattn import evaluate

# Sentences of at least 4 words, so that corpus BLEU has 4-grams to count.
CAT = "the cat sat on the mat"
DOG = "a dog ran in the park"


def _words(n):
    return " ".join(["w"] * n)


def test_identical_texts_score_100():
    result = evaluate.score([CAT, DOG], [CAT, DOG])
    assert result["bleu"] == pytest.approx(100.0)
    assert result["chrf"] == pytest.approx(100.0)
    assert result["n"] == 2


def test_no_shared_words_or_characters_score_0():
    result = evaluate.score(["xyz xyz xyz xyz"], [CAT])
    assert result == {"bleu": 0.0, "chrf": 0.0, "n": 1}


def test_one_wrong_word_by_hand():
    # 6 words, last one wrong: unigram 5/6, bigram 4/5, trigram 3/4, 4-gram 2/3; brevity 1.
    result = evaluate.score(["the cat sat on the rug"], [CAT])
    expected = 100 * (5 / 6 * 4 / 5 * 3 / 4 * 2 / 3) ** 0.25
    assert result["bleu"] == pytest.approx(expected)


@pytest.mark.parametrize("lowercase, expected_bleu", [(True, 100.0), (False, None)])
def test_lowercase_flag(lowercase, expected_bleu):
    result = evaluate.score(["The cat sat on the mat"], [CAT], lowercase=lowercase)
    if expected_bleu is None:
        # Unigram 5/6, bigram 4/5, trigram 3/4, 4-gram 2/3: only "The" differs.
        assert result["bleu"] == pytest.approx(100 * (5 / 6 * 4 / 5 * 3 / 4 * 2 / 3) ** 0.25)
        assert result["chrf"] < 100.0
    else:
        assert result["bleu"] == pytest.approx(expected_bleu)
        assert result["chrf"] == pytest.approx(100.0)


def test_bytes_are_decoded():
    result = evaluate.score([CAT.encode()], [CAT])
    assert result["bleu"] == pytest.approx(100.0)


@pytest.mark.parametrize("n_words, label", [
    (1, "1-5"), (5, "1-5"), (6, "6-10"), (20, "16-20"), (21, "21+"), (30, "21+"), (0, "1-5"),
])
def test_length_bucket(n_words, label):
    assert evaluate.length_bucket(n_words) == label


def test_bleu_by_length_assigns_buckets():
    sources = [_words(n) for n in (1, 5, 6, 20, 21, 30)]
    by_length = evaluate.bleu_by_length(sources, [CAT] * 6, [CAT] * 6)
    assert list(by_length) == ["1-5", "6-10", "11-15", "16-20", "21+"]
    assert {label: v["n"] for label, v in by_length.items()} == {
        "1-5": 2, "6-10": 1, "11-15": 0, "16-20": 1, "21+": 2}
    assert by_length["11-15"]["bleu"] is None
    assert by_length["21+"]["bleu"] == pytest.approx(100.0)


def test_bleu_by_length_scores_each_bucket_alone():
    sources = [_words(2), _words(8)]
    by_length = evaluate.bleu_by_length(sources, [CAT, "xyz xyz xyz xyz"], [CAT, DOG])
    assert by_length["1-5"]["bleu"] == pytest.approx(100.0)
    assert by_length["6-10"]["bleu"] == 0.0


@pytest.mark.parametrize("call", [
    lambda: evaluate.score([CAT, DOG], [CAT]),
    lambda: evaluate.bleu_by_length([CAT], [CAT, DOG], [CAT]),
    lambda: evaluate.evaluate_texts([CAT], [CAT], [CAT, DOG, DOG]),
])
def test_mismatched_lengths_raise(call):
    with pytest.raises(ValueError, match=r"same length\. Received: len\(\w+\)=\d+, len\(\w+\)=\d+"):
        call()


def test_score_error_gives_both_lengths():
    with pytest.raises(ValueError, match=r"len\(hypotheses\)=2, len\(references\)=1"):
        evaluate.score([CAT, DOG], [CAT])


def test_empty_input():
    assert evaluate.score([], []) == {"bleu": 0.0, "chrf": 0.0, "n": 0}
    result = evaluate.evaluate_texts([], [], [])
    assert result["n"] == 0 and result["bleu"] == 0.0
    assert all(v == {"bleu": None, "n": 0} for v in result["bleu_by_length"].values())


def test_evaluate_texts_is_json_and_rounded():
    result = evaluate.evaluate_texts(
        [_words(3), _words(12)], ["the cat sat on the rug", DOG], [CAT, DOG])
    assert set(result) == {"bleu", "chrf", "n", "bleu_by_length", "signature"}
    assert json.loads(json.dumps(result)) == result
    assert result["bleu_by_length"]["11-15"] == {"bleu": 100.0, "n": 1}
    assert result["bleu_by_length"]["1-5"]["bleu"] == round(result["bleu_by_length"]["1-5"]["bleu"], 2)
    assert result["chrf"] == round(result["chrf"], 2)


@pytest.mark.parametrize("lowercase, case", [(True, "lc"), (False, "mixed")])
def test_the_json_carries_sacrebleus_signatures(lowercase, case):
    # What sacrebleu's signature says of the scores `score` computes: one reference each, the case,
    # BLEU's 13a tokenizer and exponential smoothing, chrF's character 6-grams and no word n-grams
    # (chrF, not chrF++), and sacrebleu's version.
    import sacrebleu

    signature = evaluate.evaluate_texts(["a"], [CAT], [CAT], lowercase=lowercase)["signature"]
    version = sacrebleu.__version__
    assert signature == {"bleu": f"nrefs:1|case:{case}|eff:no|tok:13a|smooth:exp|version:{version}",
                         "chrf": f"nrefs:1|case:{case}|eff:yes|nc:6|nw:0|space:no|version:{version}"}
