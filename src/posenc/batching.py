"""Batches by token count (§5.1: ~25k source and ~25k target tokens per step), length-bucketed.

Sentences of similar length go together, so a batch wastes little on padding. The batches are
made once, with a seeded tie-break, and only their order is reshuffled per epoch; hence the data
a step sees depends on (seed, step) alone, which is what makes resuming bit-exact.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def make_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int) -> list[np.ndarray]:
    """Index arrays whose padded size (count x longest) stays within `max_tokens` on both sides."""
    order = np.random.default_rng(seed).permutation(len(src_lens))
    # Stable sort after a random permutation: length buckets with a seeded order inside each length.
    order = order[np.lexsort((src_lens[order], tgt_lens[order]))]
    batches, start, longest_src, longest_tgt = [], 0, 0, 0
    for i, idx in enumerate(order):
        longest_src, longest_tgt = max(longest_src, src_lens[idx]), max(longest_tgt, tgt_lens[idx])
        if (i + 1 - start) * max(longest_src, longest_tgt) > max_tokens and i > start:
            batches.append(order[start:i])
            start, longest_src, longest_tgt = i, src_lens[idx], tgt_lens[idx]
    batches.append(order[start:])
    return batches


def epoch_order(n_batches: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n_batches)


def pad(sequences: list[np.ndarray], pad_id: int) -> Tensor:
    out = torch.full((len(sequences), max(len(s) for s in sequences)), pad_id, dtype=torch.long)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = torch.from_numpy(s)
    return out


def collate(src: list[np.ndarray], tgt: list[np.ndarray], idx: np.ndarray, pad_id: int,
            bos: int) -> tuple[Tensor, Tensor, Tensor]:
    """(source, decoder input, decoder target): the input is BOS + target, the target ends in EOS."""
    source = pad([src[i] for i in idx], pad_id)
    target = pad([tgt[i] for i in idx], pad_id)
    decoder_in = pad([np.concatenate(([bos], tgt[i][:-1])) for i in idx], pad_id)
    return source, decoder_in, target
