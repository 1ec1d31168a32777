"""params.yaml, section by section, as frozen dataclasses.

Each stage loads only the sections it uses (`load(path, "train", TrainConfig)`); library code
never sees params.yaml, only these objects or plain arguments. An unknown key, a missing key or a
value of the wrong type fails with one line that names the key and what it should be.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from posenc.errors import UserError

# Top-level keys of params.yaml. `variants`, `seeds` and `launcher` are read by dvc.yaml only.
SECTIONS = ("data", "tokenizer", "model", "train", "eval", "report", "analyze",
            "variants", "seeds", "launcher")


@dataclass(frozen=True)
class DataConfig:
    corpus: str                   # a name in posenc.corpora.CORPORA
    max_train_pairs: int | None   # None: all pairs; else a seeded random subset of this size
    subset_seed: int
    max_len: int                  # training pairs with more subword tokens on a side are dropped
    max_ratio: float              # ... and so are pairs whose length ratio is above this


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int               # one joint BPE vocabulary (§5.1)
    character_coverage: float
    input_sentence_size: int      # 0: train on every sentence; else a seeded sample of this many
    seed: int
    threads: int


@dataclass(frozen=True)
class ModelConfig:
    """Everything `build_model` needs; saved with each checkpoint so the model can be rebuilt."""
    positional: str               # a name in posenc.positional.VARIANTS
    vocab_size: int               # vocab_size and the special ids come from the SentencePiece model
    pad_id: int
    bos_id: int
    eos_id: int
    d_model: int
    d_ff: int
    heads: int
    layers: int                   # N, on each side (§3.1)
    dropout: float                # P_drop (§5.4)
    max_positions: int            # rows of a learned position table
    concat_dim: int               # width of the position part for `concat`
    concat_kind: Literal["sinusoidal", "learned"]
    norm: Literal["post", "pre"]  # post: LayerNorm(x + Sublayer(x)) as in §3.1


@dataclass(frozen=True)
class TrainConfig:
    max_tokens: int               # per side and micro-batch, padding included
    accum: int                    # micro-batches per update (and per process)
    max_steps: int
    warmup: int                   # warmup_steps of §5.3
    lr_scale: float               # 1.0 is the paper's schedule
    adam_betas: tuple[float, float]
    adam_eps: float
    label_smoothing: float        # epsilon_ls (§5.4)
    save_every: int
    average_last: int             # checkpoints averaged into the final model (§6.1)
    dev_every: int
    threads: int                  # part of the experiment: 1 and 2 threads give different bits
    precision: Literal["float32", "bfloat16"]


@dataclass(frozen=True)
class EvalConfig:
    beam: int                     # §6.1: beam size 4
    lenpen: float                 # §6.1: alpha 0.6, GNMT's ((5+len)/6)^alpha
    max_len_extra: int            # §6.1: output length at most input length + 50
    batch_tokens: int             # source tokens per decoding batch
    threads: int
    max_sentences: int            # 0: every sentence; else the first N of each split (quick profiles)


@dataclass(frozen=True)
class ReportConfig:
    baseline: str                 # the variant the others are tested against
    bootstrap_samples: int
    bootstrap_seed: int
    length_buckets: tuple[int, ...]  # upper bounds (source words) of the length buckets


@dataclass(frozen=True)
class AnalyzeConfig:
    variance_shares: tuple[float, ...]  # report how many dimensions hold these shares
    long_positions: int           # the second position range for conjecture 1
    subspace_share: float         # principal subspaces cover this share of the variance
    random_trials: int            # Monte Carlo draws for the random-subspace baseline
    seed: int
    max_sentences: int            # dev sentences for the logit split and word-order test (0 = all)


def load(path: str | Path, section: str, cls: type, **fixed: Any):
    """Read `section` of the YAML file at `path` into `cls`; `fixed` fills fields params may not set."""
    raw = read_params(path)
    if section not in raw:
        raise UserError(f"{path}: section '{section}' is missing; copy it from params.yaml")
    return build(cls, raw[section], f"{path}: {section}", **fixed)


def load_list(path: str | Path, key: str, item_type: type) -> tuple:
    raw = read_params(path)
    return _convert(raw.get(key), tuple[item_type, ...], f"{path}: {key}")


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


def build(cls: type, values: Any, where: str, **fixed: Any):
    """Check `values` against the fields of dataclass `cls` and construct it."""
    if not isinstance(values, dict):
        raise UserError(f"{where}: expected a mapping of keys, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    settable = [f.name for f in dataclasses.fields(cls) if f.name not in fixed]
    for key in values:
        if key not in settable:
            raise UserError(f"{where}.{key}: unknown key; valid keys: {', '.join(settable)}")
    for key in settable:
        if key not in values:
            raise UserError(f"{where}.{key}: missing; add it (see params.yaml for an example)")
    converted = {k: _convert(v, hints[k], f"{where}.{k}") for k, v in values.items()}
    return cls(**converted, **fixed)


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
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
            return tuple(_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise UserError(f"{where}: expected a list of {len(args)} values, got {len(value)}")
        return tuple(_convert(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, args)))
    if tp is type(None):
        if value is None:
            return None
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, tp):
        return value
    raise UserError(f"{where}: {value!r} is not {_describe(tp)}")


def _describe(tp: Any) -> str:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if tp is type(None):
        return "null"
    return f"a{'n' if tp is int else ''} {getattr(tp, '__name__', str(tp))}"
