"""Decoding inside `tf.function`: greedy, sampling and beam search."""
