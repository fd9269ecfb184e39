"""A TensorFlow Datasets builder, `tfattn_anki`, for Anki/Tatoeba sentence-pair files.

Importing this module registers the builder, so afterwards `tfds.builder("tfattn_anki/spa")` and
`tfds.load("tfattn_anki/spa", ...)` work. It needs the optional `tensorflow_datasets`
(`pip install tfattn[data]`), which is why `tfattn` itself never imports this module.

Examples are `{"source": Text, "target": Text}` with `supervised_keys=("source", "target")`; by
default the source is the other language and the target English. The file is read and split by
`tfattn.data.anki`, as `tfattn.data.corpora.load_anki` reads it: bad lines are skipped, and the
splits follow the fixed rule of `anki.split_of`: with `i` the 0-based line index in the file, TEST is
`i % 50 == 0`, VALIDATION is `i % 50 == 1`, TRAIN is the rest.

Where the file comes from, first match wins:

1. `AnkiConfig.path`, a local file (for your own configs, e.g. a `deu.txt` you downloaded);
2. `<manual_dir>/<language>.txt` or `<manual_dir>/<language>-eng/<language>.txt`, with
   `manual_dir` given by `tfds.download.DownloadConfig(manual_dir=...)`;
3. `AnkiConfig.url`, downloaded and extracted by the TFDS download manager (network needed).

Example:

```python
import tensorflow_datasets as tfds
import tfattn.data.tfds_anki  # registers "tfattn_anki"

builder = tfds.builder("tfattn_anki/spa", data_dir="~/tensorflow_datasets")
builder.download_and_prepare(
    download_config=tfds.download.DownloadConfig(manual_dir="../shared/data/spa-eng"))
test = tfds.load("tfattn_anki/spa", split="test", as_supervised=True)  # 2,380 pairs
```
"""

import dataclasses
import os

from tfattn.data import anki
from tfattn.data.tfds_check import tensorflow_datasets

tfds = tensorflow_datasets()  # an ImportError that says why, rather than an AttributeError below

from etils import epath  # noqa: E402  (TFDS's dependency: after the check that TFDS is there)

_CITATION = """\
@misc{tatoeba,
  title = {Tatoeba: a collection of sentences and translations},
  howpublished = {\\url{https://tatoeba.org}, via \\url{https://www.manythings.org/anki/}},
  note = {CC-BY 2.0 (France)}
}
"""


@dataclasses.dataclass(eq=False)
class AnkiConfig(tfds.core.BuilderConfig):
    """One language of the Anki files.

    Args:
        name: str. The config name, e.g. `"spa"`.
        language: str. The file's language code: the file is `<language>.txt`. Defaults to `"spa"`.
        url: str or `None`. Zip to download when no local file is found. Defaults to `None`.
        path: str or `None`. A local Anki file, used instead of manual_dir or url.
            Defaults to `None`.
        direction: str. `"to_english"` or `"from_english"`, as in `anki.read_anki`.
            Defaults to `"to_english"`.

    Example:

    >>> config = AnkiConfig(name="deu", language="deu", path="deu-eng/deu.txt")
    >>> builder = tfds.builder("tfattn_anki", config=config, data_dir="/tmp/tfds")  # doctest: +SKIP
    """

    language: str = "spa"
    url: str | None = None
    path: str | None = None
    direction: str = "to_english"


class TfattnAnki(tfds.core.GeneratorBasedBuilder):
    """Anki/Tatoeba sentence pairs, other language -> English, split by line index modulo 50."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First release: train/validation/test by line index i % 50."}
    BUILDER_CONFIGS = [
        AnkiConfig(
            name="spa",
            language="spa",
            url=anki.ANKI_SPA_URL,
            description="Spanish -> English, the TensorFlow NMT tutorial's file (118,964 pairs).",
        ),
    ]
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
    Optional. To build without network, put the Anki file `<language>.txt` (for example `spa.txt`
    from spa-eng.zip) in manual_dir, directly or in a `<language>-eng/` folder.
    """

    # TFDS 4.9.10 finds a builder's source file with `importlib_resources`, which it declares only
    # for Python < 3.9 (tensorflow/datasets#11212), and the lookup also fails for namespace or
    # editable installs. This builder's code is this file, so it says so directly.
    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls):
        return epath.Path(__file__)

    def _info(self):
        features = tfds.features.FeaturesDict(
            {"source": tfds.features.Text(), "target": tfds.features.Text()}
        )
        return tfds.core.DatasetInfo(
            builder=self,
            description="Sentence pairs from the Anki/Tatoeba files of manythings.org.",
            features=features,
            supervised_keys=("source", "target"),
            homepage="https://www.manythings.org/anki/",
            citation=_CITATION,
        )

    def _manual_file(self, dl_manager):
        """Returns `<language>.txt` from the manual dir, or `None` when there is none."""
        try:
            manual_dir = dl_manager.manual_dir
        except AssertionError:  # No manual dir, or an empty one.
            return None
        language = self.builder_config.language
        for candidate in (manual_dir / f"{language}.txt",
                          manual_dir / f"{language}-eng" / f"{language}.txt"):
            if candidate.exists():
                return os.fspath(candidate)
        return None

    def _source_file(self, dl_manager):
        """Returns the local path of the Anki file: config path, manual dir, or downloaded url."""
        config = self.builder_config
        if config.path:
            return config.path
        manual = self._manual_file(dl_manager)
        if manual:
            return manual
        if not config.url:
            raise ValueError(
                f"Config {config.name!r} has no url: set AnkiConfig.path or put "
                f"{config.language}.txt in DownloadConfig(manual_dir=...). "
                f"Received: url={config.url!r}"
            )
        extracted = dl_manager.download_and_extract(config.url)
        return os.fspath(anki.find_anki_file(os.fspath(extracted)))

    def _split_generators(self, dl_manager):
        """Returns one generator per non-empty split (TFDS rejects empty splits)."""
        path = self._source_file(dl_manager)
        lines = list(anki.read_anki(path, direction=self.builder_config.direction))
        pairs = {line.index: line.pair for line in lines if line.pair}  # line index -> pair
        if not pairs:  # every line was skipped; the first reasons say why
            reasons = "".join(f"; line {line.number}: {line.problem}" for line in lines[:3])
            raise ValueError(
                f"No sentence pairs in {path}: {len(lines)} lines read, {len(lines)} skipped"
                f"{reasons}. Received: path={path!r}"
            )
        present = {anki.split_of(index) for index in pairs}
        return {
            split: self._generate_examples(pairs, split)
            for split in anki.SPLITS
            if split in present
        }

    def _generate_examples(self, pairs, split):
        """Yields `(line_index, {"source", "target"})` for the pairs of one split."""
        for index, (source, target) in pairs.items():
            if anki.split_of(index) == split:
                yield index, {"source": source, "target": target}
