"""`tfattn.explore`: the page's data, its escaping and its shape checks, without a browser
(tests/test_explore_browser.py drives the page in Chromium)."""

import html.parser
import json
import math
import re

import numpy as np
import pytest

from tfattn import plot
from tfattn.explore import Explorer, explore, page_json

# Two sentences, padded as a batched signature pads them: the second has 2 source tokens and 1
# output token, the first 3 and 2.
PADDED = {
    "input_tokens": [["[START]", "a", "[END]"], ["[START]", "[END]", ""]],
    "tokens": [["x", "[END]"], ["[END]", ""]],
    "attention": [[[0.5, 0.25, 0.25], [0.0, 0.0, 1.0]], [[0.75, 0.25, 0.0], [0.0, 0.0, 0.0]]],
    "text": [b"x", b""],
}


def embedded(page):
    """The JSON object a page or fragment carries, parsed as the browser parses it: the text of its
    `<script type="application/json">` element, as an HTML parser splits the page."""
    class Scripts(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.inside, self.found = False, []

        def handle_starttag(self, tag, attrs):
            self.inside = tag == "script" and ("type", "application/json") in attrs
            if self.inside:
                self.found.append("")

        def handle_endtag(self, tag):
            self.inside = False

        def handle_data(self, data):
            if self.inside:
                self.found[-1] += data

    parser = Scripts()
    parser.feed(page)
    assert len(parser.found) == 1, parser.found
    return json.loads(parser.found[0])


def test_padding_is_cropped_and_the_data_round_trips_through_the_page():
    page = explore(PADDED, sources=["a", ""], title="two")
    data = embedded(page.html())
    assert data == page.data
    first, second = data["sentences"]
    assert first == {"source": "a", "input_tokens": ["[START]", "a", "[END]"], "hypotheses": [
        {"text": "x", "score": None, "tokens": ["x", "[END]"], "attention": [[0.5, 0.25, 0.25], [0.0, 0.0, 1.0]]}]}
    assert second["input_tokens"] == ["[START]", "[END]"]
    assert second["hypotheses"][0]["tokens"] == ["[END]"]
    assert second["hypotheses"][0]["attention"] == [[0.75, 0.25]]  # the padding's row and column cut


def test_one_sentence_without_a_batch_axis():
    page = explore({"input_tokens": ["h", "i"], "tokens": ["H"], "attention": [[0.125, 0.875]]})
    (sentence,) = page.data["sentences"]
    assert sentence["source"] == "hi" and sentence["hypotheses"][0]["text"] == "H"  # characters: joined as they are
    assert sentence["hypotheses"][0]["attention"] == [[0.125, 0.875]]


def test_weights_that_are_not_finite_are_null_in_strict_json():
    attention = [[[math.nan, math.inf, 0.5]]]
    page = explore({"input_tokens": [["a", "b", "c"]], "tokens": [["x"]], "attention": attention,
                    "score": [-math.inf]})
    text = page_json(page.data)
    assert "NaN" not in text and "Infinity" not in text
    hypothesis = json.loads(text)["sentences"][0]["hypotheses"][0]
    assert hypothesis["attention"] == [[None, None, 0.5]] and hypothesis["score"] is None


HOSTILE = ["</script>", "<b>bold</b>", "<!--", "&amp;", "</SCRIPT >", "\u2028", "\"'", "<script>alert(1)</script>"]


def test_no_token_can_break_the_page():
    tokens = [["[START]", *HOSTILE, "[END]"]]
    page = explore({"input_tokens": tokens, "tokens": [HOSTILE[:2]], "attention": np.full((1, 2, 10), 0.1)},
                   sources=["</script><script>alert(2)</script>"], title="</title><b>t</b>")
    for text in (page.html(), page._repr_html_()):
        assert len(re.findall(r"<script", text, flags=re.I)) == 2  # the data and the code, no other
        assert len(re.findall(r"</script", text, flags=re.I)) == 2
        assert "<b>" not in text and "<!--" not in text
        data = embedded(text)
        assert data["sentences"][0]["input_tokens"][1:-1] == HOSTILE  # every token comes back as it was
        assert data["sentences"][0]["source"] == "</script><script>alert(2)</script>"
    assert "<title>&lt;/title&gt;&lt;b&gt;t&lt;/b&gt;</title>" in page.html()
    assert page.html().isascii()  # non-ASCII characters (U+2028 too) travel as JSON escapes


def test_the_page_loads_nothing():
    page = explore(PADDED).html()
    assert not re.search(r"https?:|//[a-z]|\bsrc=|\bhref=|@import|url\(", page, flags=re.I)


def test_the_notebook_fragment_is_not_a_page_and_each_display_has_its_own_ids():
    page = explore(PADDED)
    first, second = page._repr_html_(), page._repr_html_()
    assert "<html" not in first and "<!DOCTYPE" not in first
    ids = [re.findall(r'id="(tfattn-explorer-\w+)"', text)[0] for text in (first, second)]
    assert ids[0] != ids[1] and f'("{ids[0]}")' in first  # the script is called on its own element


def test_save_adds_html_to_a_path_without_a_suffix(tmp_path):
    path = explore(PADDED).save(tmp_path / "page")
    assert path == tmp_path / "page.html"
    assert embedded(path.read_text(encoding="utf-8")) == explore(PADDED).data


def test_heads_and_the_nbest_list_go_to_the_page():
    heads = np.arange(2 * 2 * 2 * 3, dtype=float).reshape(1, 2, 2, 2, 3) / 8  # (batch, layers, heads, t_out, t_in)
    page = explore({**{k: v[:1] for k, v in PADDED.items()}, "attention_heads": heads})
    assert page.data["sentences"][0]["hypotheses"][0]["heads"] == heads[0].tolist()
    beam = {"input_tokens": [["[START]", "a", "[END]"]], "tokens": [["x", "[END]"]],
            "attention": [[[1.0, 0, 0], [0, 1.0, 0]]], "nbest_text": [["x", "y", ""]],
            "nbest_score": [[-0.5, -0.75, -math.inf]],
            "nbest_tokens": [[["x", "[END]"], ["y", "[END]"], ["", ""]]],  # the third could not be filled
            "nbest_attention": [[[[1.0, 0, 0], [0, 1.0, 0]], [[0, 0, 1.0], [0.5, 0.5, 0]], [[0, 0, 0], [0, 0, 0]]]]}
    hypotheses = explore(beam).data["sentences"][0]["hypotheses"]
    assert [(h["text"], h["score"]) for h in hypotheses] == [("x", -0.5), ("y", -0.75)]
    assert hypotheses[1]["attention"] == [[0, 0, 1.0], [0.5, 0.5, 0]]
    older = {k: v for k, v in beam.items() if k not in ("nbest_tokens", "nbest_attention")}
    hypotheses = explore(older).data["sentences"][0]["hypotheses"]  # an export from before nbest_tokens
    assert [h["text"] for h in hypotheses] == ["x", "y"] and hypotheses[1]["attention"] is None


@pytest.mark.parametrize("change, message", [
    ({"attention": np.zeros((2, 2, 4))}, r"attention must have shape \(batch, t_out, t_in\) with batch=2, t_out=2, "
                                         r"t_in=3, to match the tokens\. Received: attention.shape=\(2, 2, 4\)"),
    ({"attention": np.zeros((2, 3))}, r"attention must have shape \(batch, t_out, t_in\)\. Received: "
                                      r"attention.shape=\(2, 3\)"),
    ({"tokens": [["x"]]}, r"input_tokens must have shape \(batch, t_in\) with batch=1, t_in=3, to match the tokens"),
    ({"attention_heads": np.zeros((2, 1, 2, 3, 3))}, r"attention_heads must have shape \(batch, layers, heads, "
                                                     r"t_out, t_in\) with batch=2, layers, heads, t_out=2, t_in=3"),
    ({"nbest_tokens": np.full((2, 3, 2), "x")}, r"nbest_tokens needs nbest_attention.*Received: outputs without "
                                                 r"nbest_attention"),
    ({"nbest_text": np.full((2, 3), "x"), "nbest_score": np.zeros((2, 4))},
     r"nbest_score must have shape \(batch, n\) with batch=2, n=3.*Received: nbest_score.shape=\(2, 4\)"),
    ({"text": None}, r"outputs must hold input_tokens, tokens and attention"),
])
def test_shapes_that_do_not_match_name_the_argument(change, message):
    outputs = {**PADDED, **change}
    if change.get("text", 0) is None:
        outputs = {"text": PADDED["text"]}
    with pytest.raises(ValueError, match=message):
        explore(outputs)


def test_sources_must_be_one_per_sentence():
    with pytest.raises(ValueError, match=r"sources must hold one text per sentence, 2\. Received: len\(sources\)=1"):
        explore(PADDED, sources=["only one"])


def test_plot_explore_is_the_explorer():
    assert plot.explore is explore and isinstance(plot.explore(PADDED), Explorer)
