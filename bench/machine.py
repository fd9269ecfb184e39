"""The machine's matmul speed, measured in the same run as every benchmark, so figures compare as
ratios across machines: float32 always, and bfloat16 beside it where a benchmark compares precisions."""

import time

import tensorflow as tf


def matmul_gflops(n=2048, repeats=10, dtype="float32"):
    """Best-of-`repeats` GFLOP/s of an `n x n` matmul in `dtype` (2 n^3 FLOPs each)."""
    a = tf.cast(tf.random.normal([n, n], seed=1), dtype)
    b = tf.cast(tf.random.normal([n, n], seed=2), dtype)
    matmul = tf.function(lambda x, y: tf.matmul(x, y))
    matmul(a, b).numpy()  # warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def matmul_gflops_by_dtype(dtypes=("float32", "bfloat16"), rounds=3, n=2048, repeats=4):
    """`{dtype: GFLOP/s}`: the best of `rounds` rounds in which every dtype is timed in turn, so that
    a drift of the machine's speed touches both alike."""
    best = {dtype: 0.0 for dtype in dtypes}
    for _ in range(rounds):
        for dtype in dtypes:
            best[dtype] = max(best[dtype], matmul_gflops(n, repeats, dtype))
    return {dtype: round(value, 1) for dtype, value in best.items()}
