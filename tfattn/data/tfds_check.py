"""`tensorflow_datasets`, imported whole or refused with the reason and the mend.

TFDS is optional (`pip install "tfattn[data]"`), and where it is installed its import can still fail
halfway: `import tensorflow_datasets` logs the failure of its `core` and goes on, and the first
`tfds.core` then raises `AttributeError` far from the cause. Colab's image of August 2026 is such a
place: its tensorflow-metadata 1.21.0 was generated for protobuf 6.31.1 and its protobuf is 5.29.6.
`tensorflow_datasets()` imports `core` itself and raises an `ImportError` that names what failed.
"""

_PROTOBUF_MEND = (
    " Installing tfattn changes none of a runtime's packages; here tensorflow-metadata is newer than "
    "protobuf allows (Colab's image of August 2026 has this pair): "
    "`pip install 'tensorflow-metadata<1.18'` and a restart of the runtime mend it."
)


def tensorflow_datasets():
    """Returns the `tensorflow_datasets` module, whose `core` imported.

    Raises:
        ImportError: TFDS is not installed, or is installed and fails to import; the message gives
            the cause and what mends it.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise ImportError(
            "A tfds: corpus needs tensorflow-datasets: pip install \"tfattn[data]\". "
            f"Received: {error}"
        ) from None
    try:
        import tensorflow_datasets.core  # noqa: F401  (tfds's own import logs this failure and goes on)
    except Exception as error:  # protobuf's VersionError is no ImportError
        raise ImportError(unusable_message(error)) from None
    return tfds


def unusable_message(error):
    """The one-paragraph reason why an installed tensorflow-datasets cannot be used, from the error
    its `core` raised."""
    cause = str(error).strip().splitlines()[0].rstrip(".") if str(error).strip() else type(error).__name__
    mend = _PROTOBUF_MEND if "Gencode/Runtime" in cause else ""
    return f"tensorflow-datasets is installed but does not import: {cause}.{mend}"
