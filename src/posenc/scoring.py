"""How a model is scored: teacher-forced NLL (dev loss and Table 3's per-wordpiece PPL), and
sacreBLEU's BLEU and chrF of detokenized hypotheses against the untouched references."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU, CHRF

from posenc import files
from posenc.batching import collate, make_batches
from posenc.corpora import TGT
from posenc.errors import UserError


def read_references(raw_dir: Path, split: str, count: int | None = None) -> list[str]:
    """The untouched references; the first `count` of them when only those were translated."""
    path = Path(raw_dir) / f"{split}.{TGT}"
    if not path.is_file():
        raise UserError(f"{path}: missing; run `dvc repro fetch` first")
    return files.read_lines(path)[:count]


def score(hypotheses: list[str], references: list[str]) -> dict:
    """sacreBLEU's BLEU (13a tokenization, cased) and chrF, with their signatures."""
    bleu, chrf = BLEU(), CHRF()
    return {"bleu": round(bleu.corpus_score(hypotheses, [references]).score, 2),
            "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
            "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature())}


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

