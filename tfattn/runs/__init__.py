"""Training runs: a directory that holds a run's config, checkpoints, history and export.

    config.py     RunConfig and its sections, read back from RUN/config.json with every field checked
    corpus.py     the corpus loaded and split, its fingerprint, the vocabularies
    directory.py  the run directory: its files, its lock, checkpoints that may be damaged
    train.py      train_run: a new or resumed run, from the corpus to the export
    saving.py     the latest and best checkpoints, and what each validation does
    finish.py     how a run ends: best (or averaged) weights, exported in float32
    export.py     export_run: a run's checkpoint as a SavedModel (`tfattn export`)

Runs sit above training (`tfattn.training`: the loop, which takes a dataset) and serving
(`tfattn.serving`: the export): a run is where the two meet.
"""
