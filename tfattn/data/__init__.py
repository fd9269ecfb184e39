"""Text and data: tokenizers, corpora, the tf.data pipeline, the dates corpus. Importing this package
loads no TensorFlow; its modules do."""
