"""The self-contained SavedModel: `Translator`, `export`, `load`."""
