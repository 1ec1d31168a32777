"""Beam search as in §6.1: beam 4, length penalty alpha = 0.6, output length <= input length + 50.

Batched over sentences and beams, with keys and values cached between steps (incremental
decoding); `use_cache=False` recomputes the whole prefix each step, for the parity test and the
speed benchmark. Beam size 1 is greedy search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from posenc.batching import pad
from posenc.cache import DecoderCache
from posenc.config import NonNegative, Positive, Range
from posenc.errors import UserError


@dataclass(frozen=True)
class EvalConfig:
    beam: Positive                # §6.1: beam size 4
    # §6.1: alpha 0.6, GNMT's ((5+len)/6)^alpha; at most 10 (GNMT tuned it in [0, 1]; far
    # beyond, the penalty overflows a float for long outputs)
    lenpen: Annotated[float, Range(0, 10)]
    max_len_extra: NonNegative    # §6.1: output length at most input length + 50
    batch_tokens: Positive        # source tokens per decoding batch
    threads: Positive
    max_sentences: NonNegative    # 0: every sentence; else the first N of each split (quick profiles)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016), the penalty §6.1 refers to."""
    return ((5 + length) / 6) ** alpha


def top_k(x: Tensor, k: int, width: int = 64) -> tuple[Tensor, Tensor]:
    """`x.topk(k, dim=1)` for rows as wide as the vocabulary, in a few cheap passes.

    The k largest entries of a row lie in the k chunks (of `width` columns) with the largest
    maxima: a chunk holding one of them has a maximum at least the k-th largest. So a row's chunk
    maxima are ranked, and only k chunks are searched. On the CPU, torch.topk over 8,000 columns
    took twice as long as this (README, Performance). The same values and indices, up to the order
    of exact ties.
    """
    n, v = x.shape
    if v <= k * width:
        return x.topk(k, dim=1)
    if v % width:  # F.pad copies even when it pads nothing
        x = F.pad(x, (0, -v % width), value=float("-inf"))
    chunks = x.view(n, -1, width)
    best = chunks.amax(-1).topk(k, dim=1).indices
    candidates = chunks.gather(1, best[:, :, None].expand(-1, -1, width)).view(n, k * width)
    values, at = candidates.topk(k, dim=1)
    return values, best.gather(1, at // width) * width + at % width


def check_beam(beam: int, vocab_size: int, key: str) -> None:
    """The search ranks 2 x beam candidates of each hypothesis over the vocabulary: refuse a beam
    that needs more, naming the setting (`key`) that gave it."""
    if 2 * beam > vocab_size:
        raise UserError(f"{key} {beam}: more than half the model's vocabulary of {vocab_size} (the "
                        f"search ranks 2 x beam candidates); lower {key}")


def going_on(done: list[bool]) -> list[int]:
    """The sentences that are not `done`, in the order that moves the fewest rows of the caches:
    each finished sentence's place goes to the last of those beyond the new end, the others stay.
    (Nothing depends on the order of the sentences in a batch; keeping it would move every row
    after the first finished one.)"""
    n = len(done) - sum(done)
    beyond = [i for i in range(n, len(done)) if not done[i]]
    order = list(range(n))
    for hole, last in zip((i for i in range(n) if done[i]), reversed(beyond)):
        order[hole] = last
    return order


# Inference mode, not just no_grad: torch then keeps no version counters or views' autograd
# metadata, which is 3-5% of a search made of many small operations (README, Performance).
@torch.inference_mode()
def beam_search(model, src: Tensor, beam: int, lenpen: float, max_len_extra: int,
                use_cache: bool = True) -> list[tuple[list[int], float]]:
    """For each source row (padded ids ending in EOS): (best hypothesis without EOS, its score).

    The score is the summed log-probability, EOS included, divided by the length penalty. A
    sentence stops when `beam` hypotheses have ended (fairseq's rule); at its length limit every
    live hypothesis is made to end.
    """
    c = model.config
    n_src = src.shape[0]
    max_lens = (src != c.pad_id).sum(1) + max_len_extra
    if model.max_len is not None:  # a learned position table bounds the output length
        max_lens = max_lens.clamp(max=model.max_len)
    memory, mask = model.encode(src)
    cache = DecoderCache(model, int(max_lens.max()) + 1, memory) if use_cache else None
    alive = torch.arange(n_src)
    scores = torch.full((n_src, beam), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # every beam starts as the same BOS: let one of them expand
    seqs = torch.full((n_src * beam, 1), c.bos_id, dtype=torch.long, device=src.device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(n_src)]
    step = 0
    while len(alive):
        if step == 0:  # every beam is the same BOS: decode one row a sentence, then give it its beams
            logits = model.decode(seqs[::beam], memory, mask, cache)[:, -1].repeat_interleave(beam, 0)
            mask = mask.repeat_interleave(beam, 0)
            if cache is None:
                memory = memory.repeat_interleave(beam, 0)
            else:  # it holds all that later steps read of the memory
                cache.repeat(beam)
        else:
            logits = model.decode(seqs[:, -1:] if use_cache else seqs, memory, mask, cache)[:, -1]
        logp = F.log_softmax(logits.float(), dim=-1)
        logp[:, c.pad_id] = logp[:, c.bos_id] = float("-inf")  # never generated
        n = len(alive)
        at_limit = step + 1 >= max_lens[alive]
        if at_limit.any():  # only EOS may follow
            rows = at_limit.repeat_interleave(beam)
            eos = logp[rows, c.eos_id]
            logp[rows] = float("-inf")
            logp[rows, c.eos_id] = eos
        # A sentence's 2 x beam best continuations are among the 2 x beam best of each of its
        # hypotheses: rank those few instead of all beam x vocab sums (the same sums).
        best_logp, best_token = top_k(logp, 2 * beam)
        candidates = (scores.view(-1, 1) + best_logp).view(n, 2 * beam * beam)
        top_scores, top = candidates.topk(2 * beam, dim=1)
        top_beam, top_token = top // (2 * beam), best_token.view(n, -1).gather(1, top)
        is_eos = top_token == c.eos_id
        # A hypothesis ends when EOS is among the `beam` best candidates of its sentence.
        for i, r in (is_eos[:, :beam] & top_scores[:, :beam].isfinite()).nonzero().tolist():
            sentence = int(alive[i])
            if len(finished[sentence]) < beam:
                prefix = seqs[i * beam + int(top_beam[i, r]), 1:].tolist()
                score = float(top_scores[i, r]) / length_penalty(step + 1, lenpen)
                finished[sentence].append((score, prefix))
        scores, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(beam, dim=1)
        rows = (torch.arange(n, device=src.device)[:, None] * beam + top_beam.gather(1, pick)).view(-1)
        seqs = torch.cat((seqs[rows], top_token.gather(1, pick).view(-1, 1)), dim=1)
        done = torch.tensor([len(finished[s]) >= beam for s in alive.tolist()]) | at_limit.cpu()
        kept = None
        if done.any():
            keep = torch.tensor(going_on(done.tolist()), dtype=torch.long, device=src.device)
            kept = (keep[:, None] * beam + torch.arange(beam, device=src.device)).view(-1)
            alive, scores, seqs = alive[keep.cpu()], scores[keep], seqs[kept]
            mask = mask[kept]
            if cache is None:
                memory = memory[kept]
        if cache is not None:
            cache.reorder(rows, kept)
        step += 1
    best = [max(hyps) for hyps in finished]
    return [(tokens, score) for score, tokens in best]


def batches(sentences: list[np.ndarray], beam: int, batch_tokens: int) -> list[list[int]]:
    """How `translate` groups the sentences: sorted by length, each batch within `batch_tokens`
    source tokens times the beam (the same batches give the same bits: posenc verify)."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out, start = [], 0
    while start < len(order):
        end = start + 1  # sorted by length: the last sentence of a batch is its longest
        while end < len(order) and (end + 1 - start) * len(sentences[order[end]]) * beam <= batch_tokens:
            end += 1
        out.append(order[start:end])
        start = end
    return out


def translate(model, sentences: list[np.ndarray], beam: int, lenpen: float, max_len_extra: int,
              batch_tokens: int, device: torch.device | str = "cpu", desc: str = "translate",
              use_cache: bool = True, progress: bool = True,
              only: set[int] | None = None) -> list[list[int]]:
    """Decode every source sentence (ids ending in EOS); outputs in input order, without EOS.
    With `only`, decode just the batches that hold those sentences (the others stay empty)."""
    out: list[list[int]] = [[] for _ in sentences]
    todo = [idx for idx in batches(sentences, beam, batch_tokens) if only is None or only & set(idx)]
    bar = tqdm(total=sum(map(len, todo)), desc=desc, unit=" sent", mininterval=2, disable=not progress)
    for idx in todo:
        src = pad([sentences[i] for i in idx], model.config.pad_id).to(device)
        for i, (tokens, _) in zip(idx, beam_search(model, src, beam, lenpen, max_len_extra, use_cache)):
            out[i] = tokens
        bar.update(len(idx))
    bar.close()
    return out
