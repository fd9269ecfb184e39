"""Graph nodes run per call: how much work one sentence's call is, counted rather than timed.

Each export's signature is run in a TensorFlow session (`tf.compat.v1.saved_model.loader`, as
TensorFlow Serving runs a SavedModel) on single sentences spread evenly over spa-eng TEST, with a
full trace; every node the executor ran is counted, loop bodies once per iteration and the bodies
of function calls included. The counts are fitted by least squares as

    nodes = fixed + per_source_token * t_in + per_output_token * t_out

(`t_in`, `t_out` as in `bench/latency.py`). A count does not depend on the machine's load, so it
can be taken while others share the machine; what a node costs does, and varies by kind (a
matrix product of the vocabulary against a control-flow node), so counts guide and timings decide.
Prints one JSON object: per export, the mean count per call and the fit.

Usage: python bench/ops.py [--sentences 60] NAME=EXPORT[@SIGNATURE] ...
"""

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import spa  # noqa: E402

spa.quiet_tensorflow()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from latency import fit  # noqa: E402
from paired import export_and_signature  # noqa: E402


def lengths_of(outputs):
    """`(t_in, t_out)` of one sentence from NumPy outputs: ours' `input_tokens` and `length`, or a
    peer's `attention (1, t_out, t_in)`; None when they hold neither (`translate_text`)."""
    if "length" in outputs:
        return int((outputs["input_tokens"][0] != b"").sum()), int(outputs["length"][0])
    if "attention" in outputs:
        return int(outputs["attention"].shape[2]), int(outputs["attention"].shape[1])
    return None


def node_counts(path, signature, texts):
    """`(nodes run per call, t_in, t_out)` arrays over `texts`, each translated alone."""
    counts, t_in, t_out = [], [], []
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)

        def run(name, text, options=None, metadata=None):
            sig = meta.signature_def[name]
            (given,) = sig.inputs.values()
            fetches = {k: v.name for k, v in sig.outputs.items()}
            return session.run(fetches, {given.name: [text]}, options=options, run_metadata=metadata)

        trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        lengths_from = signature if signature != "translate_text" else "translate"
        run(signature, texts[0])  # the first call also initializes
        for text in texts:
            metadata = tf.compat.v1.RunMetadata()
            outputs = run(signature, text, trace, metadata)
            counts.append(sum(len(device.node_stats) for device in metadata.step_stats.dev_stats))
            n_in, n_out = lengths_of(outputs) or lengths_of(run(lengths_from, text))
            t_in.append(n_in)
            t_out.append(n_out)
    return np.array(counts, float), np.array(t_in, float), np.array(t_out, float)


def node_fit(counts, t_in, t_out):
    """The least-squares fit of counts, in nodes (the fit of `bench/latency.py`, which works in ms)."""
    coefficients = fit(counts / 1000, t_in, t_out)  # fit() reports seconds x 1000
    return {"fixed": coefficients["fixed_ms"], "per_source_token": coefficients["per_source_token_ms"],
            "per_output_token": coefficients["per_output_token_ms"], "r2": coefficients["r2"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="+", metavar="NAME=EXPORT[@SIGNATURE]")
    parser.add_argument("--sentences", type=int, default=60)
    args = parser.parse_args()
    import tensorflow_text  # noqa: F401  (the text ops of exports made with --tokenizer-ops text)

    texts = spa.spread([source for source, _ in spa.splits()["test"]], args.sentences)
    result = collections.OrderedDict(benchmark="ops", sentences=len(texts))
    for name, spec in (spec.split("=", 1) for spec in args.exports):
        path, signature = export_and_signature(spec)
        counts, t_in, t_out = node_counts(path, signature, texts)
        result[name] = {"signature": signature, "mean_nodes_per_call": round(float(counts.mean()), 1),
                        **node_fit(counts, t_in, t_out),
                        "mean_t_in": round(float(t_in.mean()), 1), "mean_t_out": round(float(t_out.mean()), 1)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
