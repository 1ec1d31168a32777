"""The on-disk form of text: the SentencePiece model, and one flat integer array per split and
language encoded with it.

Each sentence is its subword ids followed by EOS, so the EOS positions are the sentence
boundaries and no offsets table is needed. uint16 while the vocabulary fits, else int32.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np

from posenc import files
from posenc.errors import UserError


def load_tokenizer(path: Path):
    """The joint SentencePiece model that `prepare` wrote."""
    import sentencepiece as spm

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: missing; run `dvc repro prepare` first")
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as e:
        raise UserError(f"{path}: not a readable SentencePiece model ({str(e).splitlines()[0][:80]}); "
                        f"train it again with `dvc repro -f prepare`") from None


def vocabulary_digest(sp) -> str:
    """SHA-256 of the pieces in id order: two SentencePiece models of one size but other pieces
    differ here (the ids a model was trained on would mean other words)."""
    return hashlib.sha256("\n".join(sp.id_to_piece(i) for i in range(sp.vocab_size())).encode()).hexdigest()


def check_vocabulary(sp, spm: Path, vocabulary: str, model: Path) -> None:
    """Refuse a SentencePiece model that is not the one `model` was trained with."""
    if vocabulary and vocabulary_digest(sp) != vocabulary:
        raise UserError(f"{spm}: not the SentencePiece model that {model} was trained with (other "
                        f"pieces); pass the --spm of its training run (dvc.lock's train stage names it)")


def check_ids(path: Path, sentences: list[np.ndarray], vocab_size: int) -> None:
    """Refuse arrays encoded with a larger vocabulary than the model's (ids beyond its table)."""
    top = max((int(s.max()) for s in sentences if len(s)), default=-1)
    if top >= vocab_size:
        raise UserError(f"{path}: holds id {top}, beyond the model's vocabulary of {vocab_size}; pass "
                        f"the --arrays that were encoded with the model's SentencePiece model")


def array_path(arrays_dir: Path, split: str, lang: str) -> Path:
    return Path(arrays_dir) / f"{split}.{lang}.npy"


def save(path: Path, sentences: list[list[int]], eos: int, vocab_size: int) -> None:
    dtype = np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32
    flat = np.fromiter((t for s in sentences for t in (*s, eos)), dtype=dtype)
    buffer = io.BytesIO()
    np.save(buffer, flat, allow_pickle=False)
    files.write_bytes(path, buffer.getvalue())


def load(path: Path, eos: int) -> list[np.ndarray]:
    """The sentences of one file, each an int64 array that ends with EOS."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: missing; run `dvc repro prepare` first")
    try:
        flat = np.load(path, allow_pickle=False).astype(np.int64)
    except (ValueError, OSError, EOFError) as e:
        raise UserError(f"{path}: not a readable array ({type(e).__name__}); encode it again "
                        f"with `dvc repro -f prepare`") from None
    ends = np.flatnonzero(flat == eos) + 1
    return np.split(flat, ends)[:-1]
