"""An interactive attention explorer: translations and their attention as one self-contained HTML page.

`explore(outputs)` takes the outputs of a translate signature (`translate`, `translate_heads` or
`translate_beam`, from an export or a `Translator`) and returns an `Explorer`. In a notebook it shows
inline (`_repr_html_`); `Explorer.save(path)` writes a page that opens in any browser without a
network. The page shows, for each sentence:

- the source and output tokens: hovering a target token (or tapping it, which keeps it selected until
  the next tap) lays a highlight over each source token whose opacity is that token's attention
  weight;
- the same weights as a heatmap, a row per output token;
- with `attention_heads` (`translate_heads`: multi-head and Transformer models), a layer and head
  selector: the model's own attention or any one head of any layer;
- with the n-best list of a beam search (`translate_beam`), a selector of the hypotheses, each
  shown with its own attention (`nbest_tokens`, `nbest_attention`).

The page's data is one strict JSON object (`null` where a weight is not finite) inside a
`<script type="application/json">` element, with `<`, `>` and `&` written as JSON escapes, so no text
of a sentence can end the element; the script below it puts every token into the page as text, never
as HTML. The page loads nothing: no URL, no font, no library.
"""

import html
import json
import math
import uuid
from pathlib import Path

import numpy as np

# The JSON embedded in the page, made safe inside a <script> element: none of these characters is
# left as it is (outside a JSON string they do not occur; inside one, the escape means the same).
_SCRIPT_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def explore(outputs, sources=None, title="Attention"):
    """An interactive page of translations and their attention (see the module's docstring).

    Padding is cropped from each sentence: trailing `""` source and output tokens (the padding of a
    batched signature) and the attention rows and columns that belong to them.

    Args:
        outputs: dict of a translate signature's outputs for a batch, as tensors, NumPy arrays or lists:
            `input_tokens (batch, t_in)`, `tokens (batch, t_out)` and `attention (batch, t_out, t_in)`;
            optionally `text (batch,)`, `score (batch,)`, `attention_heads (batch, layers, heads, t_out,
            t_in)`, and the n-best list `nbest_text (batch, n)`, `nbest_score (batch, n)`,
            `nbest_tokens (batch, n, t_out)`, `nbest_attention (batch, n, t_out, t_in)`. One sentence's
            arrays without the batch axis go too (`tokens (t_out,)` and so on).
        sources: optional list of `batch` str, the source texts shown as each sentence's heading.
            Defaults to `None`: the source tokens joined.
        title: str, the page's title. Defaults to `"Attention"`.

    Returns:
        `Explorer`.

    Example:
        >>> out = translator(["tue 5 march 2019", "07/08/1930"])   # or an export's signature
        >>> explore(out)                                             # shown inline in a notebook
        >>> explore(translator.beam(["5.3.19"], beam_width=4)).save("nbest.html")
    """
    arrays = _batched({key: _to_numpy(value) for key, value in outputs.items()})
    _check_shapes(arrays)
    batch = arrays["tokens"].shape[0]
    if sources is not None and len(sources) != batch:
        raise ValueError(f"sources must hold one text per sentence, {batch}. Received: len(sources)={len(sources)}")
    sentences = [_sentence(arrays, i, None if sources is None else str(sources[i])) for i in range(batch)]
    return Explorer({"title": str(title), "sentences": sentences})


class Explorer:
    """A page of `explore`: `_repr_html_` shows it in a notebook, `html()` is the whole page, `save`
    writes it.

    Args:
        data: dict, the page's data: `{"title": str, "sentences": [...]}` as `explore` makes it.

    Example:
        >>> page = explore(out)
        >>> page.save("attention.html")
        PosixPath('attention.html')
    """

    def __init__(self, data):
        self.data = data

    def fragment(self):
        """The explorer as an HTML fragment (its style, its data, its script), for a notebook's output:
        its element's id is new at each call, so that the same page shown twice works twice."""
        root = f"tfattn-explorer-{uuid.uuid4().hex[:12]}"
        return (f'<div class="tfattn-explorer" id="{root}"></div>\n<style>{STYLE}</style>\n'
                f'<script type="application/json" id="{root}-data">{page_json(self.data)}</script>\n'
                f'<script>({SCRIPT})("{root}");</script>\n')

    def html(self):
        """The whole page, `<!DOCTYPE html>` to `</html>`."""
        return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                f'<title>{html.escape(self.data["title"])}</title>\n</head>\n<body>\n{self.fragment()}'
                f'</body>\n</html>\n')

    def _repr_html_(self):
        return self.fragment()

    def save(self, path):
        """Writes the page to `path` (`.html` is added to a path without a suffix); returns the `Path`."""
        path = Path(path)
        if not path.suffix:
            path = path.with_name(path.name + ".html")
        path.write_text(self.html(), encoding="utf-8")
        return path


def page_json(data):
    """`data` as strict JSON (a float that is not finite becomes `null`), ASCII only, safe inside a
    `<script>` element (`<`, `>` and `&` escaped)."""
    text = json.dumps(_finite_or_null(data), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return "".join(_SCRIPT_SAFE.get(char, char) for char in text)


def _finite_or_null(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(item) for item in value]
    return value


# -- arrays to the page's data ---------------------------------------------------------------------

RANKS = {"input_tokens": 2, "tokens": 2, "attention": 3, "text": 1, "score": 1, "attention_heads": 5,
         "nbest_text": 2, "nbest_score": 2, "nbest_tokens": 3, "nbest_attention": 4}
AXES = {"input_tokens": "(batch, t_in)", "tokens": "(batch, t_out)", "attention": "(batch, t_out, t_in)",
        "text": "(batch,)", "score": "(batch,)", "attention_heads": "(batch, layers, heads, t_out, t_in)",
        "nbest_text": "(batch, n)", "nbest_score": "(batch, n)", "nbest_tokens": "(batch, n, t_out)",
        "nbest_attention": "(batch, n, t_out, t_in)"}


def _to_numpy(value):
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def _batched(arrays):
    """The arrays we use, with a batch axis of one added when `tokens` has none (one sentence)."""
    missing = [key for key in ("input_tokens", "tokens", "attention") if key not in arrays]
    if missing:
        raise ValueError(f"outputs must hold input_tokens, tokens and attention, as a translate signature returns "
                         f"them. Received: outputs without {', '.join(missing)}")
    arrays = {key: value for key, value in arrays.items() if key in RANKS}
    if arrays["tokens"].ndim == 1:
        arrays = {key: value[None] for key, value in arrays.items()}
    return arrays


def _check_shapes(arrays):
    """Every array's rank, and sizes that agree: one `ValueError` naming the first that does not."""
    for key, value in arrays.items():
        if value.ndim != RANKS[key]:
            raise ValueError(f"{key} must have shape {AXES[key]}. Received: {key}.shape={value.shape}")
    batch, t_out = arrays["tokens"].shape
    t_in = arrays["input_tokens"].shape[1]
    if ("nbest_tokens" in arrays) != ("nbest_attention" in arrays):
        given, other = ("nbest_tokens", "nbest_attention") if "nbest_tokens" in arrays else (
            "nbest_attention", "nbest_tokens")
        raise ValueError(f"{given} needs {other}: each hypothesis' tokens and attention go together. "
                         f"Received: outputs without {other}")
    sizes = {"batch": batch, "t_out": t_out, "t_in": t_in}
    for key in ("nbest_tokens", "nbest_text", "nbest_score"):  # the first of them says n
        if key in arrays:
            sizes.setdefault("n", arrays[key].shape[1])
    for key, value in arrays.items():
        names = AXES[key].strip("()").rstrip(",").split(", ")
        want = tuple(sizes.get(name) for name in names)
        if any(w is not None and w != got for w, got in zip(want, value.shape)):
            expected = ", ".join(f"{name}={w}" if w is not None else name for name, w in zip(names, want))
            raise ValueError(f"{key} must have shape {AXES[key]} with {expected}, to match the tokens. "
                             f"Received: {key}.shape={value.shape}")


def _text(token):
    return token.decode("utf-8", errors="replace") if isinstance(token, bytes) else str(token)


def _tokens(row):
    """A row of tokens as a list of str, without its trailing `""` padding."""
    tokens = [_text(token) for token in row]
    while tokens and tokens[-1] == "":
        tokens.pop()
    return tokens


def _weights(matrix, t_out, t_in):
    """The top-left `(t_out, t_in)` of a matrix, as lists of floats rounded to 6 decimals."""
    return np.round(np.asarray(matrix, dtype=np.float64)[..., :t_out, :t_in], 6).tolist()


def _sentence(arrays, i, source):
    """Sentence `i`'s data: its source tokens and text, and its hypotheses, the first the best."""
    input_tokens = _tokens(arrays["input_tokens"][i])
    text, score = _nbest_text_and_score(arrays, i, 0)
    best = _hypothesis(_tokens(arrays["tokens"][i]), arrays["attention"][i], len(input_tokens),
                       _text(arrays["text"][i]) if "text" in arrays else text,
                       float(arrays["score"][i]) if "score" in arrays else score)
    if "attention_heads" in arrays:
        best["heads"] = _weights(arrays["attention_heads"][i], len(best["tokens"]), len(input_tokens))
    return {"source": _joined(input_tokens) if source is None else source, "input_tokens": input_tokens,
            "hypotheses": _nbest(arrays, i, len(input_tokens), best) or [best]}


def _nbest(arrays, i, t_in, best):
    """Sentence `i`'s beam hypotheses, each with its tokens and attention; from an export without
    `nbest_tokens`, `best` and the others' text and score alone; `[]` for greedy outputs. Hypotheses
    without a token (more than the beam could fill) are left out."""
    if "nbest_tokens" in arrays:
        hypotheses = [_hypothesis(_tokens(arrays["nbest_tokens"][i, k]), arrays["nbest_attention"][i, k], t_in,
                                  *_nbest_text_and_score(arrays, i, k))
                      for k in range(arrays["nbest_tokens"].shape[1])]
        return [hypothesis for hypothesis in hypotheses if hypothesis["tokens"]]
    if "nbest_text" not in arrays:
        return []
    others = [_nbest_text_and_score(arrays, i, k) for k in range(1, arrays["nbest_text"].shape[1])]
    return [best] + [{"text": text, "score": score, "tokens": None, "attention": None}
                     for text, score in others if text]


def _joined(tokens):
    """Tokens as a text, without `[START]` and `[END]`: by spaces, or as they are if all are characters."""
    words = [token for token in tokens if token not in ("[START]", "[END]")]
    return "".join(words) if all(len(word) == 1 for word in words) else " ".join(words)


def _hypothesis(tokens, attention, t_in, text, score):
    if text is None:
        text = _joined(tokens)
    return {"text": text, "score": score, "tokens": tokens, "attention": _weights(attention, len(tokens), t_in)}


def _nbest_text_and_score(arrays, i, k):
    """Hypothesis `k` of sentence `i`: its text and score, each None where the outputs lack it."""
    text = _text(arrays["nbest_text"][i, k]) if "nbest_text" in arrays else None
    score = float(arrays["nbest_score"][i, k]) if "nbest_score" in arrays else None
    return text, score


# -- the page --------------------------------------------------------------------------------------

STYLE = """
.tfattn-explorer { font: 14px/1.4 system-ui, sans-serif; color: #222; }
.tfattn-explorer h1 { font-size: 18px; margin: 0 0 8px; }
.tfattn-sentence { border: 1px solid #ccc; border-radius: 6px; padding: 8px 12px; margin: 0 0 12px; }
.tfattn-source-text { font-weight: 600; margin-bottom: 6px; }
.tfattn-controls { display: flex; flex-wrap: wrap; gap: 12px; margin: 4px 0 8px; }
.tfattn-controls label { font-size: 13px; color: #555; }
.tfattn-row { display: flex; flex-wrap: wrap; align-items: center; gap: 3px; margin: 4px 0; }
.tfattn-row-name { width: 56px; font-size: 12px; color: #777; }
.tfattn-token { position: relative; display: inline-block; min-width: 14px; padding: 2px 5px; border: 1px solid #ddd;
  border-radius: 4px; white-space: pre; font-family: ui-monospace, monospace; text-align: center; }
.tfattn-highlight { position: absolute; inset: 0; border-radius: 3px; background: #e8590c; opacity: 0;
  pointer-events: none; }
.tfattn-token-text { position: relative; }
.tfattn-target { cursor: pointer; }
.tfattn-target.tfattn-selected { border-color: #e8590c; background: #fff4e6; }
.tfattn-target.tfattn-pinned { outline: 2px solid #e8590c; }
.tfattn-heatmap { border-collapse: collapse; margin-top: 8px; font-family: ui-monospace, monospace; font-size: 12px; }
.tfattn-heatmap th { font-weight: normal; padding: 1px 3px; white-space: pre; }
.tfattn-heatmap tr:first-child th { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; }
.tfattn-heatmap td { width: 18px; height: 18px; padding: 0; border: 1px solid #f1f1f1; }
.tfattn-cell { width: 100%; height: 100%; background: #e8590c; }
.tfattn-heatmap tr.tfattn-selected th { color: #e8590c; font-weight: 600; }
.tfattn-note { font-size: 12px; color: #777; }
"""

# The page's script: a function of the root element's id, called once per explorer on the page.
SCRIPT = r"""
function (rootId) {
  "use strict";
  var root = document.getElementById(rootId);
  var data = JSON.parse(document.getElementById(rootId + "-data").textContent);

  function make(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;  // text, never HTML
    return node;
  }

  function select(label, options, onChange) {
    var wrap = make("label", null, label + " ");
    var box = make("select");
    options.forEach(function (option, i) { box.appendChild(make("option", null, option)).value = String(i); });
    box.addEventListener("change", function () { onChange(Number(box.value)); });
    wrap.appendChild(box);
    return {element: wrap, box: box};
  }

  function weightText(w) { return w === null ? "not finite" : w.toFixed(3); }

  function sentencePanel(sentence) {
    var panel = make("div", "tfattn-sentence");
    var state = {hypothesis: 0, layer: -1, head: 0, pinned: null};
    panel.appendChild(make("div", "tfattn-source-text", sentence.source));
    var controls = panel.appendChild(make("div", "tfattn-controls"));
    var body = panel.appendChild(make("div"));
    var hypotheses = sentence.hypotheses;
    if (hypotheses.length > 1) {
      var names = hypotheses.map(function (h, k) {
        return (k + 1) + ". " + h.text + (h.score === null ? "" : "  (score " + h.score.toFixed(3) + ")");
      });
      var chooser = select("hypothesis", names, function (k) { state.hypothesis = k; draw(); });
      chooser.box.className = "tfattn-hypothesis";
      controls.appendChild(chooser.element);
    }
    var headControls = controls.appendChild(make("span"));

    function weights() {
      var h = hypotheses[state.hypothesis];
      if (state.layer < 0 || !h.heads) return h.attention;
      return h.heads[state.layer][state.head];
    }

    function drawHeadControls() {
      headControls.textContent = "";
      var h = hypotheses[state.hypothesis];
      if (!h.heads) return;
      var layers = ["the model's attention"].concat(h.heads.map(function (_, l) { return "layer " + (l + 1); }));
      var layer = select("layer", layers, function (l) { state.layer = l - 1; head.box.disabled = l === 0; draw(); });
      var head = select("head", h.heads[0].map(function (_, k) { return "head " + (k + 1); }),
                        function (k) { state.head = k; draw(); });
      layer.box.className = "tfattn-layer";
      head.box.className = "tfattn-head";
      layer.box.value = String(state.layer + 1);
      head.box.value = String(state.head);
      head.box.disabled = state.layer < 0;
      headControls.appendChild(layer.element);
      headControls.appendChild(head.element);
    }

    function draw() {
      body.textContent = "";
      drawHeadControls();
      var h = hypotheses[state.hypothesis];
      var sourceRow = body.appendChild(make("div", "tfattn-row tfattn-source"));
      sourceRow.appendChild(make("span", "tfattn-row-name", "source"));
      var sources = sentence.input_tokens.map(function (token) {
        var cell = sourceRow.appendChild(make("span", "tfattn-token"));
        cell.appendChild(make("span", "tfattn-highlight"));
        cell.appendChild(make("span", "tfattn-token-text", token));
        return cell;
      });
      if (!h.tokens) {
        body.appendChild(make("div", "tfattn-note", "This export returns no tokens or attention for this " +
                                                   "hypothesis: only its text, " + h.text));
        return;
      }
      var matrix = weights();
      var targetRow = body.appendChild(make("div", "tfattn-row tfattn-output"));
      targetRow.appendChild(make("span", "tfattn-row-name", "output"));
      var targets = h.tokens.map(function (token, t) {
        var cell = targetRow.appendChild(make("span", "tfattn-token tfattn-target", token));
        cell.tabIndex = 0;
        cell.addEventListener("mouseenter", function () { show(t); });
        cell.addEventListener("mouseleave", function () { show(state.pinned); });
        cell.addEventListener("focus", function () { show(t); });
        cell.addEventListener("blur", function () { show(state.pinned); });
        cell.addEventListener("click", function () { state.pinned = state.pinned === t ? null : t; show(t); });
        return cell;
      });
      var rows = heatmap(body, sentence.input_tokens, h.tokens, matrix, show);
      rows.table.addEventListener("mouseleave", function () { show(state.pinned); });
      if (state.pinned !== null && state.pinned >= h.tokens.length) state.pinned = null;

      function show(t) {  // t: the output token whose attention is laid over the source, or null
        sources.forEach(function (cell, i) {
          var w = t === null ? 0 : matrix[t][i];
          cell.firstChild.style.opacity = String(w === null ? 0 : w);
          cell.title = t === null ? "" : "weight " + weightText(w);
        });
        targets.forEach(function (cell, k) {
          cell.classList.toggle("tfattn-selected", k === t);
          cell.classList.toggle("tfattn-pinned", k === state.pinned);
        });
        rows.rows.forEach(function (row, k) { row.classList.toggle("tfattn-selected", k === t); });
      }
      show(state.pinned);
    }

    draw();
    return panel;
  }

  function heatmap(parent, sourceTokens, outputTokens, matrix, show) {
    var table = parent.appendChild(make("table", "tfattn-heatmap"));
    var head = table.appendChild(make("tr"));
    head.appendChild(make("th"));
    sourceTokens.forEach(function (token) { head.appendChild(make("th", null, token)); });
    var rows = outputTokens.map(function (token, t) {
      var row = table.appendChild(make("tr"));
      row.appendChild(make("th", null, token));
      matrix[t].forEach(function (w, i) {
        var cell = row.appendChild(make("td"));
        cell.appendChild(make("div", "tfattn-cell")).style.opacity = String(w === null ? 0 : w);
        cell.title = sourceTokens[i] + " \u2192 " + token + ": " + weightText(w);
      });
      row.addEventListener("mouseenter", function () { show(t); });
      return row;
    });
    return {table: table, rows: rows};
  }

  root.appendChild(make("h1", null, data.title));
  data.sentences.forEach(function (sentence) { root.appendChild(sentencePanel(sentence)); });
}
"""
