"""Teacher-forced training: the `@tf.function` step, the loop around it, run directories."""
