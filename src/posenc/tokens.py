"""The on-disk form of encoded text: one flat integer array per split and language.

Each sentence is its subword ids followed by EOS, so the EOS positions are the sentence
boundaries and no offsets table is needed. uint16 while the vocabulary fits, else int32.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from posenc import files


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
    flat = np.load(path, allow_pickle=False).astype(np.int64)
    ends = np.flatnonzero(flat == eos) + 1
    return np.split(flat, ends)[:-1]
