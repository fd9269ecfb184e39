"""The fast tier: every technique that buys speed at the cost of plain reading, each equal to the
reference tier (`tfattn.layers`, `tfattn.model`) within float32 rounding, chosen by `accel=True`."""
