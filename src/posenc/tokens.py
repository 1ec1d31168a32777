"""The on-disk form of text: the SentencePiece model, and one flat integer array per split and
language encoded with it.

Each sentence is its subword ids followed by EOS, so the EOS positions are the sentence
boundaries and no offsets table is needed. uint16 while the vocabulary fits, else int32.
"""

from __future__ import annotations

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
