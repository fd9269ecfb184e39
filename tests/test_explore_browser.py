"""The attention explorer driven in a real browser: Chromium (Debian's `chromium` and `chromium-driver`),
through selenium, on pages written from real translations.

A tiny Transformer (2 blocks of 2 heads) trained for a few seconds on the dates gives a page with every
head (`Translator.translate_heads`) and one with the n-best list of a beam search (`Translator.beam`,
the outputs of the `translate_beam` signature). Every check compares what the browser computed (the
highlights' opacities, the heatmap's colours) with the weights the translator returned, read here in
Python, within 1e-3. The tests skip, saying why, where selenium or the browser is missing; `.ci/run`
installs the browser so that CI runs them.
"""

import shutil
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.explore import explore

# A browser, and a model and an export of their own for its pages: 40 s in all, make test-long.
pytestmark = pytest.mark.long

SENTENCES = ["tue 5 march 2019", "07/08/1930"]
TOLERANCE = 1e-3
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1200,900")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium with a fresh profile, its console log kept; skips where it cannot start."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (requirements.txt) to drive Chromium")
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver): "
                    f"found chromium={chromium}, chromedriver={driver}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="tfattn-chromium-")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    yield chrome
    chrome.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def transformer(dates_data):
    """A Transformer translator, 2 blocks of 2 heads, trained for one epoch of 94 steps on the dates."""
    import tfattn
    from tfattn.training.trainer import TrainConfig, fit

    train, _, source, target = dates_data
    keras.utils.set_random_seed(0)
    config = tfattn.ModelConfig(attention="transformer", heads=2, num_layers=2, units=16)
    model = tfattn.make_model(config, source.vocab_size, target.vocab_size)
    fit(model, tfattn.make_dataset(train, source, target, tfattn.DataConfig(batch_size=32)),
        TrainConfig(learning_rate=5e-3, epochs=1), quiet=True)
    return tfattn.Translator(model, source, target, tfattn.DecodeConfig(max_length=14))


@pytest.fixture(scope="module")
def heads(transformer):
    """The Transformer's greedy translations with every head, as NumPy arrays."""
    return {key: value.numpy() for key, value in transformer.translate_heads(tf.constant(SENTENCES)).items()}


def open_page(chrome, page, directory):
    """Writes an `Explorer` to a file and opens it, the console log emptied of what came before (so
    that what the page logs while it loads is read by `console_errors`); returns the sentences' panels."""
    path = page.save(directory / "page.html")
    chrome.get_log("browser")
    chrome.get(path.as_uri())
    return chrome.find_elements("css selector", ".tfattn-sentence")


def console_errors(chrome):
    """The console's errors since the last read: script errors, failed loads, `console.error`."""
    return [entry["message"] for entry in chrome.get_log("browser") if entry["level"] == "SEVERE"]


def opacities(chrome, panel):
    """The computed opacity of the highlight over each source token of a panel."""
    return np.array(chrome.execute_script(
        "return Array.from(arguments[0].querySelectorAll('.tfattn-source .tfattn-highlight'))"
        ".map(e => Number(getComputedStyle(e).opacity));", panel))


def hover(chrome, element):
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(chrome).move_to_element(element).perform()


def tap(chrome, element):
    """A touch (not a mouse): touchstart, touchend, and what the browser makes of a tap."""
    from selenium.webdriver.common.actions import interaction
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.pointer_input import PointerInput

    actions = ActionBuilder(chrome, mouse=PointerInput(interaction.POINTER_TOUCH, "finger"))
    actions.pointer_action.move_to(element).pointer_down().pointer_up()
    actions.perform()


def targets(panel):
    return panel.find_elements("css selector", ".tfattn-target")


def sizes(out, i):
    """Sentence `i`'s source tokens and output tokens, counted on the Python side: not padding."""
    return int((out["input_tokens"][i] != b"").sum()), int((out["tokens"][i] != b"").sum())


def choose(panel, name, index):
    from selenium.webdriver.support.select import Select

    Select(panel.find_element("css selector", f"select.tfattn-{name}")).select_by_index(index)


def assert_hovering_shows(chrome, panel, weights, tokens=None):
    """Hovering each output token in turn (or those at the positions `tokens`) lays that row of
    `weights (t_out, t_in)` over the source."""
    assert len(targets(panel)) == len(weights)
    for t in range(len(weights)) if tokens is None else tokens:
        hover(chrome, targets(panel)[t])
        np.testing.assert_allclose(opacities(chrome, panel), weights[t], atol=TOLERANCE, err_msg=f"output token {t}")


def test_hovering_an_output_token_lays_its_weights_over_the_source(browser, heads, tmp_path):
    panels = open_page(browser, explore(heads, SENTENCES), tmp_path)
    assert len(panels) == len(SENTENCES)
    for i, panel in enumerate(panels):
        t_in, t_out = sizes(heads, i)
        weights = heads["attention"][i, :t_out, :t_in]
        assert np.ptp(weights) > 0.1  # weights that tell the source tokens apart, so a wrong one shows
        assert not opacities(browser, panel).any()  # nothing highlighted before a token is chosen
        assert_hovering_shows(browser, panel, weights)
        hover(browser, browser.find_element("css selector", ".tfattn-explorer h1"))  # away: nothing chosen
        assert not opacities(browser, panel).any()
    assert not console_errors(browser)


def test_the_layer_and_head_selectors_show_that_heads_weights(browser, heads, tmp_path):
    (panel, _) = open_page(browser, explore(heads, SENTENCES), tmp_path)
    t_in, t_out = sizes(heads, 0)
    grid = heads["attention_heads"][0, :, :, :t_out, :t_in]  # (layers, heads, t_out, t_in)
    assert grid.shape[:2] == (2, 2)
    assert np.abs(grid[0, 0] - grid[1, 1]).max() > 0.05 and np.abs(grid[1, 0] - grid[1, 1]).max() > 0.05
    for layer in range(2):
        choose(panel, "layer", layer + 1)  # option 0 is the model's own attention
        for head in range(2):
            choose(panel, "head", head)
            assert_hovering_shows(browser, panel, grid[layer, head], tokens=(0, t_out // 2, t_out - 1))
    choose(panel, "layer", 0)
    assert_hovering_shows(browser, panel, heads["attention"][0, :t_out, :t_in])
    assert not console_errors(browser)


def heatmap(chrome, panel):
    """The computed opacity of each heatmap cell's colour, `(t_out, t_in)`."""
    return np.array(chrome.execute_script(
        "return Array.from(arguments[0].querySelectorAll('.tfattn-heatmap tr')).slice(1).map(r => "
        "Array.from(r.querySelectorAll('.tfattn-cell')).map(c => Number(getComputedStyle(c).opacity)));", panel))


def test_the_heatmap_shows_the_weights_of_the_chosen_view(browser, heads, tmp_path):
    (panel, _) = open_page(browser, explore(heads, SENTENCES), tmp_path)
    t_in, t_out = sizes(heads, 0)
    np.testing.assert_allclose(heatmap(browser, panel), heads["attention"][0, :t_out, :t_in], atol=TOLERANCE)
    choose(panel, "layer", 1)
    choose(panel, "head", 1)
    np.testing.assert_allclose(heatmap(browser, panel), heads["attention_heads"][0, 0, 1, :t_out, :t_in],
                               atol=TOLERANCE)
    assert not console_errors(browser)


def test_a_tap_keeps_its_token_chosen_until_tapped_again(browser, heads, tmp_path):
    (panel, _) = open_page(browser, explore(heads, SENTENCES), tmp_path)
    t_in, _ = sizes(heads, 0)
    elsewhere = browser.find_element("css selector", ".tfattn-explorer h1")
    hover(browser, elsewhere)  # the mouse out of the way: a touch alone from here
    for t in (2, 4):  # a tap chooses a token, a tap on another moves the choice there
        tap(browser, targets(panel)[t])
        tap(browser, elsewhere)  # a hover would end here; a tap stays
        np.testing.assert_allclose(opacities(browser, panel), heads["attention"][0, t, :t_in], atol=TOLERANCE)
    tap(browser, targets(panel)[4])  # the same token again: no longer chosen
    tap(browser, elsewhere)
    assert not opacities(browser, panel).any()
    assert not console_errors(browser)


def test_the_nbest_selector_shows_each_hypothesis_own_attention(browser, transformer, tmp_path):
    beam = transformer.beam(SENTENCES, beam_width=3)  # NumPy arrays, as translate_beam returns them
    panels = open_page(browser, explore(beam, SENTENCES), tmp_path)
    # The sentence whose hypotheses' attention differs most: by ten times the tolerance at least, so
    # that a page showing another hypothesis' weights fails.
    attention = beam["nbest_attention"]
    differ = [max(np.abs(a[j] - a[k]).max() for j, k in ((0, 1), (0, 2), (1, 2))) for a in attention]
    i = int(np.argmax(differ))
    assert differ[i] > 10 * TOLERANCE, differ
    panel, t_in = panels[i], int((beam["input_tokens"][i] != b"").sum())
    for k in range(3):
        choose(panel, "hypothesis", k)
        t_out = int((beam["nbest_tokens"][i, k] != b"").sum())
        assert [cell.text for cell in targets(panel)] == [t.decode() for t in beam["nbest_tokens"][i, k, :t_out]]
        assert_hovering_shows(browser, panel, attention[i, k, :t_out, :t_in])
    assert not console_errors(browser)


def test_tokens_show_as_text_never_as_markup(browser, tmp_path):
    hostile = ["</script>", "<b>bold</b>", "<img src=x onerror=\"document.title='pwned'\">", "&amp;", "\u2028"]
    page = explore({"input_tokens": hostile, "tokens": ["<i>", "[END]"], "attention": np.full((2, 5), 0.2)},
                   title="<b>t</b>")
    (panel,) = open_page(browser, page, tmp_path)
    shown = browser.execute_script("return Array.from(arguments[0].querySelectorAll('.tfattn-source "
                                   ".tfattn-token-text')).map(e => e.textContent);", panel)
    assert shown == hostile
    assert not browser.find_elements("css selector", ".tfattn-explorer b, .tfattn-explorer img, .tfattn-explorer i")
    assert browser.title == "<b>t</b>"
    assert_hovering_shows(browser, panel, np.full((2, 5), 0.2))
    assert not console_errors(browser)
