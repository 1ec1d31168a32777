"""Teacher-forced NLL of a corpus: the dev loss during training and Table 3's per-wordpiece PPL."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from posenc.batching import collate, make_batches


@torch.no_grad()
def corpus_nll(model, src: list[np.ndarray], tgt: list[np.ndarray], max_tokens: int,
               device: torch.device | str = "cpu") -> tuple[float, int]:
    """(summed NLL in nats, target tokens counted), no label smoothing, dropout off.

    Every target token counts once, the closing EOS included, as in the paper's PPL column.
    """
    was_training = model.training
    model.eval()
    pad_id, bos = model.config.pad_id, model.config.bos_id
    total, count = 0.0, 0
    lens = np.array([len(s) for s in src]), np.array([len(t) for t in tgt])
    for idx in make_batches(*lens, max_tokens, seed=0):
        source, decoder_in, target = (t.to(device) for t in collate(src, tgt, idx, pad_id, bos))
        logits = model(source, decoder_in).float()
        total += F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=pad_id,
                                 reduction="sum").item()
        count += int((target != pad_id).sum())
    model.train(was_training)
    return total, count


def perplexity(nll: float, tokens: int) -> float:
    return math.exp(nll / tokens)

