"""params.yaml, section by section, as frozen dataclasses: the loading rules, and the sections
that fix a training run's bits (numerics, data, model, positional, train).

The sections read after training live beside the code that reads them, so that an edit to them
leaves the train stage's code (its import closure, which dvc.yaml hashes) as it was: `eval` in
posenc.decode, `short_training` in posenc.buckets, `analyze` in posenc.measures, `report` in
posenc.report_config, `extrapolate`, `residual_study` and `tokenizer` in their stages' modules.

Each stage loads only the sections it uses (`load(path, "train", TrainConfig)`); library code
never sees params.yaml, only these objects or plain arguments. An unknown key, a missing key or a
value of the wrong type, or a number out of its range, fails with one line that names the key
and what it should be. Ranges are written beside each field (`Annotated[int, Range(1)]`), so
the allowed values of a key are read in one place.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from posenc.errors import UserError


@dataclass(frozen=True)
class Range:
    """Allowed values of a numeric key: low <= value <= high, or strict where `open`."""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return (f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                f"{')' if self.high_open else ']'}")


class MayBeEmpty:
    """Marks a list that may be empty (`Annotated[tuple[int, ...], MAY_BE_EMPTY]`): every other
    list a stage reads needs a value."""

    def __contains__(self, value) -> bool:
        return True


MAY_BE_EMPTY = MayBeEmpty()
Positive = Annotated[int, Range(1)]
NonNegative = Annotated[int, Range(0)]
PositiveFloat = Annotated[float, Range(0, low_open=True)]
NonNegativeFloat = Annotated[float, Range(0)]
Fraction = Annotated[float, Range(0, 1, high_open=True)]     # a probability below 1: [0, 1)
Share = Annotated[float, Range(0, 1, low_open=True)]         # a share of a whole: (0, 1]

# Top-level keys of params.yaml. `variants`, `seeds` and `launcher` are read by dvc.yaml only.
SECTIONS = ("numerics", "data", "tokenizer", "model", "positional", "train", "eval", "extrapolate",
            "report", "analyze", "variants", "seeds", "launcher", "residual_study", "short_training")

# params.yaml's `numerics`: portable (the same bits on Intel and AMD) or native (posenc.numerics).
Numerics = Literal["portable", "native"]


@dataclass(frozen=True)
class DataConfig:
    corpus: str                   # a name in posenc.corpora.CORPORA
    max_train_pairs: Positive | None  # None: all pairs; else a seeded random subset of this size
    subset_seed: NonNegative
    max_len: Positive             # training pairs with more subword tokens on a side are dropped
    max_ratio: Annotated[float, Range(1)]  # ... and so are pairs whose length ratio is above this


# Each positional variant's own settings: params.yaml's `positional.<variant>`, so that the train
# stage of a variant declares (and is re-run by) its own settings only. posenc.positional.VARIANTS
# builds each of them from these.
@dataclass(frozen=True)
class SinusoidalSettings:
    """§3.5: fixed sinusoids summed with the token embeddings; nothing to set."""


@dataclass(frozen=True)
class LearnedSettings:
    max_positions: Positive       # rows of the learned table: no sentence may be longer


@dataclass(frozen=True)
class ConcatSettings:
    dim: Positive                 # width of the position part; the token table is d_model - dim
    kind: Literal["sinusoidal", "learned"]
    max_positions: Positive       # rows of the table when kind is learned


@dataclass(frozen=True)
class SinusoidalNarrowSettings:
    """The control for `concat`: its narrow token table with the full-width sinusoid summed."""
    dim: Positive                 # width taken from the token table: the same as concat's dim


@dataclass(frozen=True)
class NoneSettings:
    """No position signal at all; nothing to set."""


@dataclass(frozen=True)
class RopeSettings:
    base: Annotated[float, Range(1, low_open=True)]  # RoFormer's 10000: wavelengths 2π..2π·base


@dataclass(frozen=True)
class AlibiSettings:
    """Fixed slopes from the head count (Press et al. 2022, §3); nothing to set."""


@dataclass(frozen=True)
class RelativeSettings:
    clip: Positive                # k of Shaw et al. 2018: distances beyond ±k share one vector


POSITIONAL = {"sinusoidal": SinusoidalSettings, "learned": LearnedSettings, "concat": ConcatSettings,
              "sinusoidal_narrow": SinusoidalNarrowSettings, "none": NoneSettings, "rope": RopeSettings, "alibi": AlibiSettings,
              "relative": RelativeSettings}
# A variant's name, wherever one forms a path (models/<variant>-<seed>, results/runs/...): one of
# POSITIONAL, never free text.
Variant = Literal[tuple(POSITIONAL)]


@dataclass(frozen=True)
class ModelConfig:
    """Everything `build_model` needs; saved with each checkpoint so the model can be rebuilt."""
    positional: str               # a name in POSITIONAL (and posenc.positional.VARIANTS)
    position: Any                 # that variant's settings: an instance of POSITIONAL[positional]
    vocab_size: int               # vocab_size and the special ids come from the SentencePiece model
    pad_id: int
    bos_id: int
    eos_id: int
    d_model: Positive
    d_ff: Positive
    heads: Positive
    layers: Positive              # N, on each side (§3.1)
    dropout: Fraction             # P_drop (§5.4)
    norm: Literal["post", "pre"]  # post: LayerNorm(x + Sublayer(x)) as in §3.1
    # How each sub-layer's output meets its input (README, "The residual study"): sum, x + f(x),
    # as §3.1; concat, W [x; f(x)] with W of 2d -> d; none, f(x) alone (no identity path).
    residual: Literal["sum", "concat", "none"] = "sum"
    # concat's W at the start: identity, [I I] (so the model starts as the summed one); xavier.
    residual_init: Literal["identity", "xavier"] = "identity"
    # SHA-256 of the SentencePiece model's pieces (posenc.tokens.vocabulary_digest): a model is
    # read only with the vocabulary it was trained with. Empty: not recorded (a unit test's model).
    vocabulary: str = dataclasses.field(default="", metadata={"param": False})

    @classmethod
    def from_dict(cls, saved: dict) -> "ModelConfig":
        """The inverse of dataclasses.asdict (a checkpoint's "config")."""
        return cls(**{**saved, "position": POSITIONAL[saved["positional"]](**saved["position"])})


@dataclass(frozen=True)
class TrainConfig:
    max_tokens: Positive          # per side and micro-batch, padding included
    accum: Positive               # micro-batches per update (and per process)
    max_steps: Positive
    warmup: Positive              # warmup_steps of §5.3
    lr_scale: PositiveFloat       # 1.0 is the paper's schedule
    adam_betas: tuple[Fraction, Fraction]
    adam_eps: PositiveFloat
    label_smoothing: Fraction     # epsilon_ls (§5.4)
    save_every: Positive
    average_last: Positive        # checkpoints averaged into the final model (§6.1)
    dev_every: Positive
    threads: Positive             # part of the experiment: 1 and 2 threads give different bits
    precision: Literal["float32", "bfloat16"]

    def __post_init__(self):
        saved = len(checkpoint_steps(self.max_steps, self.save_every))
        if self.average_last > saved:
            raise UserError(f"average_last: {self.average_last} is more than the {saved} checkpoints "
                            f"that max_steps {self.max_steps} with save_every {self.save_every} "
                            f"saves; lower it, or lower train.save_every")


def checkpoint_steps(max_steps: int, save_every: int) -> list[int]:
    """The updates after which a training run saves a checkpoint: every `save_every`, and the last."""
    return sorted({*range(save_every, max_steps + 1, save_every), max_steps})


def load(path: str | Path, section: str, cls: type, **fixed: Any):
    """Read `section` of the YAML file at `path` into `cls`; `fixed` fills fields params may not set."""
    raw = read_params(path)
    if section not in raw:
        raise UserError(f"{path}: section '{section}' is missing; copy it from params.yaml")
    return build(cls, raw[section], f"{path}: {section}", **fixed)


def load_positional(path: str | Path, variant: str):
    """The settings of one positional variant: `positional.<variant>` of the file at `path`."""
    if variant not in POSITIONAL:
        raise UserError(f"positional variant '{variant}' is unknown; valid variants: "
                        f"{', '.join(POSITIONAL)} ({path}: variants)")
    raw = read_params(path).get("positional")
    if not isinstance(raw, dict) or variant not in raw:
        raise UserError(f"{path}: positional.{variant} is missing; copy it from params.yaml")
    settings = build(POSITIONAL[variant], raw[variant] or {}, f"{path}: positional.{variant}")
    # sinusoidal_narrow is concat's control (README, "The variants"): the report compares the two
    # as a pair, which holds only if the control's token table is exactly as narrow as concat's.
    pair = {"concat": "sinusoidal_narrow", "sinusoidal_narrow": "concat"}.get(variant)
    other = raw.get(pair) if pair else None
    if isinstance(other, dict) and "dim" in other and other["dim"] != settings.dim:
        raise UserError(f"{path}: positional.sinusoidal_narrow.dim ({raw['sinusoidal_narrow'].get('dim')}) "
                        f"must equal positional.concat.dim ({raw['concat'].get('dim')}): the control "
                        f"takes concat's width from the token table; set both to one value")
    return settings


def load_list(path: str | Path, key: str, item_type: Any) -> tuple:
    """A top-level list (`variants`, `seeds`): non-empty, and no value twice (DVC's matrix would
    silently merge the duplicates, and the table would count one run twice)."""
    raw = read_params(path)
    values = _convert(raw.get(key), tuple[item_type, ...], f"{path}: {key}")
    if not values:
        raise UserError(f"{path}: {key}: the list is empty; name at least one")
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise UserError(f"{path}: {key}: {twice!r} is listed twice; list each value once")
    return values


def load_value(path: str | Path, key: str, tp: Any):
    """One value, checked against `tp`: a top-level scalar (`numerics`) or one key of a section
    (`model.layers`), for a stage that reads that key alone."""
    raw: Any = read_params(path)
    *sections, name = key.split(".")
    for section in sections:
        raw = raw.get(section) if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or name not in raw:
        raise UserError(f"{path}: {key} is missing; copy it from params.yaml")
    return _convert(raw[name], tp, f"{path}: {key}")


def read_params(path: str | Path) -> dict:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: file not found; run from the project root or pass --params") from None
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]}); fix the syntax") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping of sections ({', '.join(SECTIONS)})")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise UserError(f"{path}: unknown section '{unknown[0]}'; valid sections: {', '.join(SECTIONS)}")
    return raw


def param_fields(cls: type) -> list[str]:
    """The fields of `cls` that a params file sets: all but those marked `{"param": False}`
    (facts that the stage fills in, such as the model's vocabulary digest)."""
    return [f.name for f in dataclasses.fields(cls) if f.metadata.get("param", True)]


def build(cls: type, values: Any, where: str, **fixed: Any):
    """Check `values` against the fields of dataclass `cls` and construct it."""
    if not isinstance(values, dict):
        raise UserError(f"{where}: expected a mapping of keys, got {type(values).__name__}")
    hints = typing.get_type_hints(cls, include_extras=True)
    settable = [name for name in param_fields(cls) if name not in fixed]
    for key in values:
        if key not in settable:
            valid = f"valid keys: {', '.join(settable)}" if settable else "it takes no settings: write {}"
            raise UserError(f"{where}.{key}: unknown key; {valid}")
    for key in settable:
        if key not in values:
            raise UserError(f"{where}.{key}: missing; add it (see params.yaml for an example)")
    converted = {k: _convert(v, hints[k], f"{where}.{k}") for k, v in values.items()}
    try:
        return cls(**converted, **fixed)
    except UserError as e:  # a check across keys (__post_init__) names its key without the file
        raise UserError(f"{where}.{e}") from None


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        if args[1] is MAY_BE_EMPTY and value == []:
            return ()
        value, allowed = _convert(value, args[0], where), args[1]
        if value not in allowed:
            raise UserError(f"{where}: {value!r} is out of range; it must be {allowed}")
        return value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return _convert(value, option, where)
            except UserError:
                pass
        raise UserError(f"{where}: {value!r} is not {_describe(tp)}")
    if origin is Literal:
        if value not in args:
            raise UserError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise UserError(f"{where}: {value!r} is not a list; write [a, b, ...]")
        if len(args) == 2 and args[1] is Ellipsis:
            if not value:  # every list a stage reads needs a value (joins, variance_shares, ...)
                raise UserError(f"{where}: the list is empty; give at least one value")
            return tuple(_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise UserError(f"{where}: expected a list of {len(args)} values, got {len(value)}")
        return tuple(_convert(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, args)))
    if tp is type(None):
        if value is None:
            return None
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        if isinstance(value, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", value):
            # YAML 1.1 reads 1e308 (no dot, no sign in the exponent) as a string
            fixed = float(value)
            raise UserError(f"{where}: {value!r} is a string to YAML; write it as {fixed:.1e}"
                            .replace("e+0", "e+").replace("e-0", "e-"))
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, tp):
        return value
    raise UserError(f"{where}: {value!r} is not {_describe(tp)}")


def _describe(tp: Any) -> str:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is Annotated:
        return f"{_describe(args[0])} {args[1]}"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if tp is type(None):
        return "null"
    if tp is float:
        return "a finite float"
    return f"a{'n' if tp is int else ''} {getattr(tp, '__name__', str(tp))}"
