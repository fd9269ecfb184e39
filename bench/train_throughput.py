"""Training throughput on spa-eng (word level, 5,000-word vocabularies, batch 64, length buckets).

For each model: seconds per train step, non-padding target tokens per second, the padding share of
target tokens, and the achieved FLOP/s as a fraction of the machine's fp32 matmul speed measured in
the same run. Prints one JSON object. Usage: python bench/train_throughput.py [--steps 60] [--only transformer,luong-local-p]
[--precision float32|mixed_bfloat16|auto] [--peer PEER_DIR [--rounds 3]]

With `--peer PEER_DIR` (the rebuilt 2021 tutorial, `PEER_DIR/peer.py` with its own `PEER_DIR/.venv`
holding tf_keras: docs/performance.md, "The peer"), the Bahdanau rows and the `peer-shape` rows (units
256 and 1024) are timed against the peer at the same units, interleaved: the peer trains in its own process, started once
per size and traced before timing, and the two take turns, a chunk of steps each, for `--rounds`
rounds, so that a drift of the machine's speed touches both alike. Each side counts its own
non-padding target tokens (the peer's batches are the tutorial's: shuffled, unbucketed).

The `peer-shape` row is the peer's own model in this package: the tutorial's decoder runs its GRU on
the previous token alone and attends after it, with the additive score, then `tanh(Wc [c; h])`
(Luong's flow with his concat score, no input feeding), over a unidirectional GRU encoder. The
`bahdanau` row does more per target token: the context enters the GRU (Bahdanau et al.'s decoder),
so its GRU reads `embedding + units` inputs where the peer's reads `embedding`.

FLOPs are counted on the padded batch (the work done), forward pass x 3 for the backward pass:
multiply-adds of every matmul and of the attention scores and weighted sums, 2 FLOPs each.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402
from machine import matmul_gflops_by_dtype  # noqa: E402

spa.quiet_tensorflow()

import keras  # noqa: E402

from tfattn.data.pipeline import DataConfig, make_dataset  # noqa: E402
from tfattn.model import ModelConfig, make_model  # noqa: E402
from tfattn.training.precision import precision_scope, resolve_precision  # noqa: E402
from tfattn.training.step import make_optimizer, make_train_step  # noqa: E402
from tfattn.training.trainer import TrainConfig  # noqa: E402

# The 2021 tutorial's model (the module docstring): attention after the GRU, the additive score.
_PEER_SHAPE = dict(attention="luong", score="concat", input_feeding=False, bidirectional=False)
# (row name, ModelConfig fields beyond embedding_dim and units, embedding_dim, units)
RUNS = [
    ("bahdanau", dict(attention="bahdanau"), 256, 256),
    ("bahdanau", dict(attention="bahdanau"), 256, 1024),
    ("luong", dict(attention="luong", input_feeding=False), 256, 256),
    ("luong-feed", dict(attention="luong", input_feeding=True), 256, 256),
    ("luong", dict(attention="luong", input_feeding=False), 256, 1024),
    ("peer-shape", _PEER_SHAPE, 256, 256),
    ("peer-shape", _PEER_SHAPE, 256, 1024),
    ("luong-local-p", dict(attention="luong", input_feeding=True, local="p", window=10), 256, 256),
    ("transformer", dict(attention="transformer", heads=4, num_layers=2, ff_dim=512), 256, 256),  # quality.py's
]


def forward_flops(c, batch, t_in, t_out, source_vocab, target_vocab):
    """Multiply-add FLOPs of one forward pass on a padded batch (see the module docstring)."""
    if c.attention == "transformer":
        return transformer_flops(c, batch, t_in, t_out, target_vocab)
    e, u = c.embedding_dim, c.units
    directions = 2 if c.bidirectional else 1
    size = u // directions  # each direction's state
    encoder = t_in * directions * (2 * 3 * size * (e + size))  # three GRU gates per direction
    keys = t_in * 2 * u * u  # key projection, once per sentence
    rnn_in = e + (u if c.attention == "bahdanau" or c.input_feeding else 0)
    decoder = 2 * 3 * u * (rnn_in + u)
    additive = c.attention == "bahdanau" or c.score == "concat"  # W1 q per step
    attention = 2 * 2 * t_in * u + (2 * u * u if additive else 0)  # scores, context, W1 q
    hidden = 2 * u * (u + u + (e if c.attention == "bahdanau" else 0))  # tanh layer / W_c
    logits = 2 * u * target_vocab
    local_p = 2 * u * u + 2 * u if c.local == "p" else 0  # p_t = S sigmoid(v_p^T tanh(W_p h_t))
    return batch * (encoder + keys + t_out * (decoder + attention + hidden + logits + local_p))


def transformer_flops(c, batch, t_in, t_out, target_vocab):
    """Per block: the projections (4 u^2 a token for self-attention, and for cross-attention 2 u^2 a
    target token plus 2 u^2 a source token), scores and weighted sums (2 u per pair of positions,
    every pair computed as the masks come after), and the feed-forward layer (2 u ff)."""
    u, ff, n = c.units, c.ff_dim or 4 * c.units, c.num_layers
    encoder = t_in * n * (2 * 4 * u * u + 2 * 2 * t_in * u + 2 * 2 * u * ff)
    decoder = t_out * n * (2 * 4 * u * u + 2 * 2 * t_out * u  # causal self-attention
                           + 2 * 2 * u * u + 2 * 2 * t_in * u  # cross-attention: queries, outputs, scores
                           + 2 * 2 * u * ff)
    memory = t_in * n * 2 * 2 * u * u  # cross-attention keys and values, once per sentence
    return batch * (encoder + decoder + memory + t_out * 2 * u * target_vocab)


def config_for(fields, embedding_dim, units):
    """A row's `ModelConfig`: `fields` and the sizes (a Transformer has no `embedding_dim`: `units`)."""
    sizes = {"units": units, **({} if fields.get("attention") == "transformer" else {"embedding_dim": embedding_dim})}
    return ModelConfig(**fields, **sizes, max_source_length=40, max_target_length=40)


def train_step_for(c, source_vocab, target_vocab, precision="float32"):
    """A fresh model of config `c` (seed 0) and its train step, as `tfattn train` makes them."""
    keras.utils.set_random_seed(0)
    with precision_scope(precision):
        model = make_model(c, source_vocab, target_vocab)
    config = TrainConfig(learning_rate=1e-3, precision=precision)
    return make_train_step(model, make_optimizer(config))


def measure(c, data, steps, source_vocab, target_vocab, precision="float32", peer=None, rounds=1):
    """Our train step's figures over `steps` batches; with `peer` (a `Peer`), the peer's too, the two
    taking turns for `rounds` rounds."""
    step = train_step_for(c, source_vocab, target_vocab, precision)
    batches = data[:: max(1, len(data) // (steps + 5))][: steps + 5]  # spread over the whole epoch
    for source, target in batches[:5]:  # trace and warm up
        step(source, target)
    timed, chunk = batches[5:], -(-(len(batches) - 5) // rounds)
    tokens = padded = flops = seconds = 0
    peer_figures = {"steps": 0, "seconds": 0.0, "tokens": 0.0}
    for r in range(rounds):
        part = timed[r * chunk:(r + 1) * chunk]  # the last round's may be shorter: the peer takes as many
        start = time.perf_counter()
        for source, target in part:
            out = step(source, target)
            tokens += int(out["tokens"])
            b, t_in = source.shape
            t_out = target.shape[1] - 1
            padded += b * t_out
            flops += 3 * forward_flops(c, b, t_in, t_out, source_vocab, target_vocab)
        out["loss"].numpy()  # the chunk's last step done before the clock stops
        seconds += time.perf_counter() - start
        if peer is not None:
            figures = peer.steps(len(part))
            peer_figures = {k: v + figures[k] for k, v in peer_figures.items()}
    result = {"s_per_step": seconds / len(timed), "nonpad_target_tokens_per_s": tokens / seconds,
              "padding_fraction": 1 - tokens / padded, "gflops": flops / seconds / 1e9}
    if peer is not None:
        rate = peer_figures["tokens"] / peer_figures["seconds"]
        result["peer"] = {"steps": peer_figures["steps"],
                          "s_per_step": round(peer_figures["seconds"] / peer_figures["steps"], 4),
                          "nonpad_target_tokens_per_s": round(rate),
                          "tokens_per_s_ratio": round(result["nonpad_target_tokens_per_s"] / rate, 2)}
    return result


class Peer:
    """The rebuilt 2021 tutorial training in its own process (`PEER_DIR/peer.py serve`), on request."""

    def __init__(self, directory, units):
        python = os.path.join(directory, ".venv", "bin", "python")
        self.process = subprocess.Popen([python, os.path.join(directory, "peer.py"), "serve", "--units", str(units)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.close()
            sys.exit(f"the peer in {directory} did not start (it said {line!r}); see its stderr above")

    def steps(self, n):
        """`{"steps", "seconds", "tokens"}` of `n` train steps of the peer."""
        self.process.stdin.write(f"steps {n}\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.flush()
            self.process.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="timed steps per model (units 1024: a third)")
    parser.add_argument("--only", help="comma-separated row names to run (default: every row)")
    parser.add_argument("--precision", default="float32", choices=("float32", "mixed_bfloat16", "auto"),
                        help="our models' precision (auto: what `tfattn train` picks here) (default: float32)")
    parser.add_argument("--peer", metavar="PEER_DIR",
                        help="time the rebuilt 2021 tutorial beside the bahdanau and peer-shape rows, interleaved")
    parser.add_argument("--rounds", type=int, default=3, help="with --peer: turns each (default: 3)")
    args = parser.parse_args()
    precision = resolve_precision(args.precision)
    if args.peer:
        args.only = args.only or "bahdanau,peer-shape"
    source_tok, target_tok = spa.tokenizers(5000, 40)
    # One epoch of batches; each model trains on batches drawn evenly from all of it (the first
    # batches of a bucketed epoch are the short ones, and would flatter the figures).
    data = list(make_dataset(spa.splits()["train"], source_tok, target_tok, DataConfig(batch_size=64)))
    gflops_by_dtype = matmul_gflops_by_dtype()
    gflops = gflops_by_dtype["float32"]
    runs = []
    only = set(args.only.split(",")) if args.only else None
    for name, fields, embedding, units in RUNS:
        if only and name not in only:
            continue
        c = config_for(fields, embedding, units)
        steps = args.steps if units <= 256 else max(10, args.steps // 3)
        peer = Peer(args.peer, units) if args.peer and name in ("bahdanau", "peer-shape") else None
        try:
            r = measure(c, data, steps, source_tok.vocab_size, target_tok.vocab_size, precision, peer,
                        args.rounds if peer else 1)
        finally:
            if peer is not None:
                peer.close()
        runs.append({"model": name, "attention": c.attention,
                     "input_feeding": c.input_feeding if c.attention == "luong" else None,
                     "score": c.score if c.attention == "luong" else None, "bidirectional": c.bidirectional,
                     "embedding_dim": embedding, "units": units, "steps": steps,
                     "s_per_step": round(r["s_per_step"], 4),
                     "nonpad_target_tokens_per_s": round(r["nonpad_target_tokens_per_s"]),
                     "padding_fraction": round(r["padding_fraction"], 4),
                     "flop_fraction": round(r["gflops"] / gflops, 4), **({"peer": r["peer"]} if peer else {})})
        print(json.dumps(runs[-1]), file=sys.stderr)
    print(json.dumps({"benchmark": "train_throughput", "matmul_gflops": round(gflops, 1),
                      "matmul_gflops_by_dtype": gflops_by_dtype, "precision": precision, "batch_size": 64,
                      "vocab_size": 5000, "runs": runs}))


if __name__ == "__main__":
    main()
