"""The choices of the models' and layers' options, each written once.

The layers check their arguments against these, `tfattn.ModelConfig` checks its fields against
them, and the `tfattn` command offers them as its flags' choices.
"""

# The kind of model, by its decoder (`ModelConfig.attention`, `--attention`).
ATTENTIONS = ("bahdanau", "luong", "transformer", "none")
# The encoder of an RNN decoder (`ModelConfig.encoder`, `--encoder`).
ENCODERS = ("rnn", "transformer")
# Luong's scores (section 3.1) and the cosine (`LuongAttention(score=...)`).
SCORES = ("dot", "general", "concat", "location", "cosine")
# Soft weights, or one position (`ScoredAttention(probability=...)`).
PROBABILITIES = ("soft", "hard")
# Global attention (None) or Luong's local-m and local-p (section 3.2).
LOCALS = (None, "m", "p")
# How self-attention knows word order ("none": it does not, a bag of words).
POSITIONS = ("sinusoidal", "learned", "relative", "none")
# The recurrent layers of the RNN encoder and decoders.
RNNS = ("gru", "lstm")
# Where a Transformer block normalizes: before each sublayer (and once at the stack's end), or after
# each residual as Vaswani et al. (`ModelConfig.norm`, `--norm`; the layers' `norm_first`).
NORMS = ("pre", "post")
