"""The machine's fp32 matmul speed, measured in the same run as every benchmark, so figures compare
as ratios across machines."""

import time

import tensorflow as tf


def matmul_gflops(n=2048, repeats=10):
    """Best-of-`repeats` GFLOP/s of an `n x n` float32 matmul (2 n^3 FLOPs each)."""
    a = tf.random.normal([n, n], seed=1)
    b = tf.random.normal([n, n], seed=2)
    matmul = tf.function(lambda x, y: tf.matmul(x, y))
    matmul(a, b).numpy()  # warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9
