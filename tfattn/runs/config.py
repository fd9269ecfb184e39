"""A training run's configuration: `RunConfig` and its sections, written as the run's `config.json`
and read back, every field checked, when the run resumes, exports or is evaluated.

The sections are the package's own configs (`ModelConfig`, `DataConfig`, `TrainConfig`,
`DecodeConfig`, `ValidationConfig`, `DistributeConfig`) and two of this package's: where the
sentence pairs come from (`CorpusConfig`) and how each side is tokenized (`TokenizerConfig`).
"""

import dataclasses
import json
import os

from tfattn.data.pipeline import DataConfig
from tfattn.model import ModelConfig, without_unused
from tfattn.search import DecodeConfig
from tfattn.training.distributed import DistributeConfig
from tfattn.training.precision import resolve_precision
from tfattn.training.trainer import TrainConfig
from tfattn.training.validation import ValidationConfig


@dataclasses.dataclass
class CorpusConfig:
    """Where the sentence pairs come from.

    Attributes:
        corpus: a path, a URL of an Anki zip, `tfds:NAME`, or, with `format="parallel"`, a
            directory holding `SPLIT.LANG` files (Multi30k's `train.en`, `train.de`, ...).
        format: `"anki"`, `"tsv"`, `"parallel"` or None (guessed from `corpus`).
        strict: stop at the first bad line instead of skipping it.
        direction: Anki files: `"to_english"` (default) or `"from_english"`.
        source_lang, target_lang: parallel files: the file suffixes.
        splits: names of the train, validation and test splits for parallel files and TFDS. A
            single file is split by line index (TEST `i % 50 == 0`, VALIDATION `i % 50 == 1`).
        data_dir: TFDS data directory.
        max_pairs: keep only this many training pairs (every k-th), for quick runs.
        fingerprint: a local corpus file's `{"size", "mtime", "sha256"}` (see `fingerprint`), taken
            when the run started; a resumed run or `evaluate` refuses a file that does not match it.
            None for URLs, TFDS, directories and runs of earlier versions.
    """

    corpus: str = ""
    format: str | None = None
    strict: bool = False
    direction: str = "to_english"
    source_lang: str | None = None
    target_lang: str | None = None
    splits: tuple = ("train", "validation", "test")
    data_dir: str | None = None
    max_pairs: int | None = None
    fingerprint: dict | None = None


@dataclasses.dataclass
class TokenizerConfig:
    """How one side is tokenized: `level` `"char"`, `"word"` or `"wordpiece"`, vocabulary size
    (reserved ids included), maximum tokens per sentence (markers included), case folding."""

    level: str = "word"
    max_tokens: int | None = 8000
    max_length: int = 40
    lowercase: bool = True


# The warm-up of a run whose `TrainConfig.warmup_steps` is None: at the recipe's 2e-3, a model with
# multi-head attention (the Transformer, a self-attention encoder, a multi-head Luong decoder) can stay
# at the unigram loss from its first steps on; 1,000 steps of warm-up avoid it (docs/models.md).
WARMUP_MULTIHEAD = 1000


def default_warmup(model):
    """The warm-up steps a `ModelConfig` trains with by default: `WARMUP_MULTIHEAD` with multi-head
    attention, else 0."""
    return WARMUP_MULTIHEAD if model.heads > 1 or model.self_attention_encoder else 0


@dataclasses.dataclass
class RunConfig:
    """Everything a training run needs; saved as `RUN/config.json`.

    `tensorboard` is where the run writes its TensorBoard summaries: `""` for `RUN/tensorboard`,
    None for nowhere (`tfattn.training.tensorboard`). `distribute` is the `tf.distribute` strategy
    it trains under (`tfattn.training.distributed`); `data.batch_size` is the global batch's. A
    `train.warmup_steps` of None becomes `default_warmup(model)`; a `train.precision` of `"auto"`
    becomes the machine's choice (`tfattn.training.precision.auto_precision`), with
    `train.precision_asked="auto"` to say so."""

    corpus: CorpusConfig = dataclasses.field(default_factory=CorpusConfig)
    source_tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)
    target_tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)
    checkpoint_every: int = 500
    validation: ValidationConfig = dataclasses.field(default_factory=ValidationConfig)
    tensorboard: str | None = ""
    distribute: DistributeConfig = dataclasses.field(default_factory=DistributeConfig)

    def __post_init__(self):
        if self.train.warmup_steps is None:  # the model's own default, written into config.json
            self.train = dataclasses.replace(self.train, warmup_steps=default_warmup(self.model))
        if self.train.precision == "auto":  # the machine's choice, written into config.json
            self.train = dataclasses.replace(self.train, precision=resolve_precision("auto"), precision_asked="auto")

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        """The `RunConfig` of a dict read from `config.json`.

        Raises:
            ValueError: naming the first field that is unknown, missing, of the wrong type or refused.
        """
        fields = _fields_of(cls, d, "")
        for name in ("corpus", "model"):
            if name not in fields:
                raise ValueError(f"it has no field {name!r}")
        fields["corpus"].splits = tuple(fields["corpus"].splits)
        return cls(**fields)


def read_run_config(path):
    """The `RunConfig` in the file `path` (a run's `config.json`); one line naming the file and the
    field if it is not JSON or not a run's config."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is damaged, not JSON ({error}). Put back the config.json the run wrote. "
                         f"Received: {path!r}") from None
    try:
        return RunConfig.from_dict(d)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path} is not a run's config.json that tfattn reads: {error}. Put back the one the run "
                         f"wrote. Received: {path!r}") from None


def _fields_of(kind, d, where):
    """The constructor arguments of the dataclass `kind` from the JSON object `d`, each field checked
    (name and type, its section's own checks); `where` prefixes a field's name in errors."""
    if not isinstance(d, dict):
        raise _FieldError(f"{where.rstrip('.') or 'the file'} is a JSON {type(d).__name__}, not an object")
    known, fields = {f.name: f for f in dataclasses.fields(kind)}, {}
    for name, value in d.items():
        field = known.get(name)
        if field is None:
            raise _FieldError(f"unknown field {where}{name}")
        if dataclasses.is_dataclass(field.default_factory):
            section = field.default_factory
            arguments = _fields_of(section, _without_retired(name, value), f"{where}{name}.")
            if section is ModelConfig:  # options that earlier versions recorded and their models ignored
                arguments = without_unused(arguments)
            if section is TrainConfig and arguments.get("decay_to_budget"):  # earlier versions fitted the
                arguments["schedule"] = "cosine"  # cosine to the budget whatever the schedule: what they trained
            try:
                value = section(**arguments)
            except (TypeError, ValueError) as error:  # the section's own checks (`__post_init__`)
                raise _FieldError(f"{where}{name}: {error}") from None
        elif not _fits(field.type, value):
            raise _FieldError(f"field {where}{name} is {value!r}, not {_type_name(field.type)}")
        fields[name] = value
    return fields


class _FieldError(ValueError):
    """A field of a config.json that is unknown or of the wrong kind (the message names it)."""


_JSON_KINDS = {"str": str, "bool": bool, "int": int, "float": (int, float), "tuple": (list, tuple), "dict": dict,
               "None": type(None)}


def _type_name(annotation):
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _fits(annotation, value):
    """Whether the JSON value `value` fits a field annotated `annotation` (`int`, `float | None`, ...)."""
    names = [name.strip() for name in _type_name(annotation).split("|")]
    if any(name not in _JSON_KINDS for name in names):
        return True  # a kind this check does not know
    if isinstance(value, bool) and "bool" not in names:
        return False
    return any(isinstance(value, _JSON_KINDS[name]) for name in names)


# Fields that earlier versions wrote into config.json and that no longer exist, so that their runs
# still resume and their exports still load: {section: {field, ...}}.
_RETIRED = {"data": {"bucket_width"},  # length bins, replaced by sorted pools (`pool_batches`)
            "decode": {"slices"},  # the fast tier's row slices, now its own (`tfattn.accel.decoding`)
            "model": {"projection_dtype"}}  # bfloat16 output layers in training, removed


def _without_retired(section, value):
    retired = _RETIRED.get(section, ())
    return {k: v for k, v in value.items() if k not in retired} if isinstance(value, dict) else value


def run_config_of(model_dir):
    """The `RunConfig` of a run directory, or of the run whose `export/` `model_dir` is; None if
    unknown. A `config.json` beside an export that is not a run's `export/` is not read."""
    parent = os.path.dirname(os.path.abspath(model_dir))
    candidates = [model_dir] + ([parent] if os.path.isfile(os.path.join(parent, "tokenizers.json")) else [])
    for path in (os.path.join(directory, "config.json") for directory in candidates):
        if os.path.isfile(path):
            return read_run_config(path)
    return None
