"""The `tfattn` command line: `tfattn demo | translate` (see `tfattn COMMAND --help`).

Errors a user can fix (a missing file, a directory that is not an export, a bad flag value) print
one line, `tfattn: error: ...`, and exit with status 2; never a traceback.
"""

import argparse
import os
import sys


def _demo(args):
    from tfattn.demo import DemoConfig, main

    config = DemoConfig(attention=args.attention, n_train=args.n_train, n_test=args.n_test, epochs=args.epochs,
                        time_budget=args.time_budget, out_dir=args.out_dir, seed=args.seed)
    main(config, quiet=args.quiet)


def _require_export(path):
    """Fails fast, before TensorFlow loads, when `path` is not an export directory."""
    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise FileNotFoundError(f"Not a SavedModel directory (no saved_model.pb). Received: path={path!r}")


def _translate(args):
    _require_export(args.model)
    import tensorflow as tf

    from tfattn.export import load

    texts = args.text or [line.rstrip("\n") for line in sys.stdin]
    translate = load(args.model).signatures["translate"]
    out = translate(text=tf.constant(texts, tf.string))
    for text in out["text"].numpy():
        print(text.decode("utf-8"))
    if args.plot and texts:
        from tfattn.plot import plot_attention, save_figure

        fig = plot_attention(out["attention"][0], out["input_tokens"][0].numpy(), out["tokens"][0].numpy())
        print(f"attention plot: {save_figure(fig, args.plot)}", file=sys.stderr)


def build_parser():
    parser = argparse.ArgumentParser(prog="tfattn", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="train on the offline dates corpus, export, reload, translate, plot",
                          description="Train an attention model to turn human-written dates into ISO "
                                      "dates, export it as a SavedModel, reload it, and print one JSON line.")
    demo.add_argument("--attention", choices=("luong", "bahdanau"), default="luong",
                      help="attention and decoder style (default: luong)")
    demo.add_argument("--n-train", type=int, default=30000, help="training pairs (default: 30000)")
    demo.add_argument("--n-test", type=int, default=1000, help="held-out test pairs (default: 1000)")
    demo.add_argument("--epochs", type=int, default=2, help="training epochs (default: 2)")
    demo.add_argument("--time-budget", type=float, default=85.0,
                      help="stop training after this many seconds (default: 85)")
    demo.add_argument("--out-dir", default="saved_models",
                      help="the export goes to OUT_DIR/dates-ATTENTION (default: saved_models)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    demo.add_argument("--quiet", action="store_true", help="no progress output")
    demo.set_defaults(func=_demo)

    tr = sub.add_parser("translate", help="translate text with an exported model",
                        description="Translate the given sentences (or stdin lines) with an export.")
    tr.add_argument("--model", required=True, help="export directory (holds saved_model.pb)")
    tr.add_argument("text", nargs="*", help="sentences to translate; read from stdin when absent")
    tr.add_argument("--plot", help="save the first sentence's attention heatmap to this PNG path")
    tr.set_defaults(func=_translate)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (FileNotFoundError, ValueError, OSError) as e:
        parser.exit(2, f"tfattn: error: {e}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
