"""The measurements behind "why sum, not concatenate?", taken on one trained model.

1. "Only about half of the sinusoidal dimensions move with position": variance of each dimension
   of the position table over positions 0..L-1, and how many dimensions hold 90% / 99% of it.
2. "Word and position vectors occupy nearly orthogonal subspaces": principal angles between the
   token embeddings' and the position table's principal subspaces, against random subspaces.
3. "With a sum, attention does four jobs at once": the first encoder layer's logits split exactly
   into word-word, word-position, position-word and position-position terms (post-norm: the first
   layer's input is exactly token part + position part; dropout off). Where position acts inside
   attention (rope, alibi, relative) no such split exists; for every variant, the share of the
   first layer's logit variance that relative distance alone explains.
4. "Without positions there is no word order": dev BLEU with shuffled and reversed source words.
The per-run stage `measure` (posenc.stages.measure) takes them on each model; the stage
`analyze` sets them side by side over variants and seeds. Every measurement asks the model (its position part, its first-layer logits); none keys on a
variant's name. The sentences of analysis.md are generated from the numbers, so they stay true
when those change.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posenc import corpora, files, tokens
from posenc.batching import pad
from posenc.config import NonNegative, Positive, Share
from posenc.corpora import SRC, TGT
from posenc.decode import EvalConfig, translate
from posenc.scoring import read_references, score


@dataclass(frozen=True)
class AnalyzeConfig:
    variance_shares: tuple[Share, ...]  # report how many dimensions hold these shares
    long_positions: Positive      # the second position range for conjecture 1
    subspace_share: Share         # principal subspaces cover this share of the variance
    random_trials: Positive       # Monte Carlo draws for the random-subspace baseline
    seed: NonNegative
    max_sentences: NonNegative    # dev sentences for the logit split and word-order test (0 = all)


TERMS = ("word-word", "word-position", "position-word", "position-position")


# 1 -------------------------------------------------------------------------------------------
def dimension_variance(table: np.ndarray, shares: tuple[float, ...]) -> dict:
    """Variance of each dimension over the rows (positions); dimensions holding each share of it."""
    var = table.var(axis=0)
    cumulative = np.cumsum(np.sort(var)[::-1]) / var.sum()
    return {"positions": int(table.shape[0]), "dims": int(table.shape[1]),
            **{f"dims_{round(s * 100)}pct": int(np.searchsorted(cumulative, s) + 1) for s in shares},
            "variance": [round(float(v), 6) for v in var]}


# 2 -------------------------------------------------------------------------------------------
def principal_basis(matrix: np.ndarray, share: float) -> np.ndarray:
    """Orthonormal basis (dims x k) of the top-k principal directions covering `share` of the variance."""
    centered = matrix - matrix.mean(axis=0)
    _, s, vt = np.linalg.svd(centered, full_matrices=False)
    cumulative = np.cumsum(s ** 2) / np.sum(s ** 2)
    k = int(np.searchsorted(cumulative, share) + 1)
    return vt[:k].T


def principal_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosines of the principal angles between the column spaces of orthonormal a and b."""
    return np.clip(np.linalg.svd(a.T @ b, compute_uv=False), 0.0, 1.0)


def random_cosines(dims: int, k1: int, k2: int, trials: int, seed: int) -> tuple[float, float]:
    """Mean and std over trials of the mean principal cosine of two random subspaces."""
    rng = np.random.default_rng(seed)
    means = [principal_cosines(np.linalg.qr(rng.standard_normal((dims, k1)))[0],
                               np.linalg.qr(rng.standard_normal((dims, k2)))[0]).mean()
             for _ in range(trials)]
    return float(np.mean(means)), float(np.std(means))


def subspace_angles(token_matrix: np.ndarray, position_table: np.ndarray, share: float,
                    trials: int, seed: int) -> dict:
    a, b = principal_basis(token_matrix, share), principal_basis(position_table, share)
    cos = principal_cosines(a, b)
    base_mean, base_std = random_cosines(token_matrix.shape[1], a.shape[1], b.shape[1], trials, seed)
    return {"k_token": a.shape[1], "k_position": b.shape[1], "mean_cos": round(float(cos.mean()), 4),
            "mean_angle_deg": round(float(np.degrees(np.arccos(cos)).mean()), 2),
            "random_mean_cos": round(base_mean, 4), "random_std": round(base_std, 4)}


# 3 -------------------------------------------------------------------------------------------
def first_layer_batches(model, sentences: list[np.ndarray], batch_size: int = 64):
    """(padded source ids, (B, S, S) mask of pairs of real tokens) for each batch of sentences."""
    for start in range(0, len(sentences), batch_size):
        src = pad(sentences[start:start + batch_size], model.config.pad_id).to(model.embed.weight.device)
        real = src != model.config.pad_id
        yield src, real[:, :, None] & real[:, None, :]


@torch.no_grad()
def logit_shares(model, sentences: list[np.ndarray]) -> dict:
    """Each of the four terms' share of the summed term variances, per head and averaged over
    heads, over all (query, key) pairs of real tokens in the first encoder layer."""
    heads = model.config.heads
    stats = torch.zeros(len(TERMS), heads, 3, dtype=torch.float64)  # count, sum, sum of squares
    for src, pairs in first_layer_batches(model, sentences):
        terms = model.first_layer_terms(src)
        for i, name in enumerate(TERMS):
            values = terms[name].double().transpose(0, 1)[:, pairs].cpu()  # (heads, pairs)
            stats[i] += torch.stack((torch.full((heads,), float(values.shape[1]), dtype=torch.float64),
                                     values.sum(1), (values ** 2).sum(1)), dim=1)
    count, total, squares = stats.unbind(-1)
    variance = squares / count - (total / count) ** 2  # (terms, heads)
    share = variance / variance.sum(0, keepdim=True)
    return {"per_head": {name: [round(float(v), 4) for v in share[i]] for i, name in enumerate(TERMS)},
            "mean": {name: round(float(share[i].mean()), 4) for i, name in enumerate(TERMS)}}


@torch.no_grad()
def distance_share(model, sentences: list[np.ndarray]) -> dict:
    """The share of the first encoder layer's logit variance explained by the distance j - i
    alone (the correlation ratio eta^2 of the logits grouped by distance), per head and averaged:
    1 when the logits are a function of distance (a pure ALiBi bias), near 0 when position plays
    no part. Defined for every variant, additive or not."""
    span = max(len(s) for s in sentences)
    heads = model.config.heads
    count = torch.zeros(2 * span - 1, dtype=torch.float64)
    sums = torch.zeros(heads, 2 * span - 1, dtype=torch.float64)
    squares = torch.zeros(heads, dtype=torch.float64)
    for src, pairs in first_layer_batches(model, sentences):
        positions = torch.arange(src.shape[1], device=src.device)
        distance = (positions[None, :] - positions[:, None] + span - 1).expand_as(pairs)[pairs]
        values = model.first_layer_logits(src).double().transpose(0, 1)[:, pairs].cpu()  # (heads, pairs)
        distance = distance.cpu()
        count.index_add_(0, distance, torch.ones_like(distance, dtype=torch.float64))
        sums.index_add_(1, distance, values)
        squares += (values ** 2).sum(1)
    n = count.sum()
    grand = sums.sum(1) / n
    between = (sums ** 2 / count.clamp(min=1)).sum(1) - n * grand ** 2
    share = between / (squares - n * grand ** 2)
    return {"per_head": [round(float(v), 4) for v in share], "mean": round(float(share.mean()), 4)}


def where_position(model) -> str:
    """Where the variant puts position, as the model is built (not as its name says)."""
    if model.positional.position_part(torch.arange(1, device=model.embed.weight.device)) is not None:
        return "first layer"
    if model.encoder[0].attn.position is not None:
        return "self-attention"
    return "nowhere (the decoder's causal mask only)"


# 4 -------------------------------------------------------------------------------------------
def reorder_words(lines: list[str], how: str, seed: int) -> list[str]:
    if how == "original":
        return list(lines)
    if how == "reversed":
        return [" ".join(line.split()[::-1]) for line in lines]
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        rng.shuffle(words)
        out.append(" ".join(words))
    return out


def word_order_bleu(model, sp, sources: list[str], references: list[str], seed: int,
                    eval_cfg: EvalConfig) -> dict:
    result = {}
    for how in ("original", "shuffled", "reversed"):
        ids = [np.array(s + [model.config.eos_id]) for s in sp.encode(reorder_words(sources, how, seed))]
        out = translate(model, ids, eval_cfg.beam, eval_cfg.lenpen, eval_cfg.max_len_extra,
                        eval_cfg.batch_tokens, model.embed.weight.device, desc=f"{model.config.positional} {how}")
        result[how] = score([sp.decode(o) for o in out], references)["bleu"]
    return result


# one model -----------------------------------------------------------------------------------
def measure(model, sp, corpus: corpora.Corpus, arrays: Path, raw: Path, cfg: AnalyzeConfig,
            eval_cfg: EvalConfig) -> dict:
    """Every measurement of one trained model. `position_variance` and `subspace_angles` only where
    the model has a position table beside its token embeddings."""
    eos = model.config.eos_id
    train = [tokens.load(tokens.array_path(arrays, "train", lang), eos) for lang in (SRC, TGT)]
    longest = max(len(s) for side in train for s in side)
    limit = cfg.max_sentences or None
    dev = tokens.load(tokens.array_path(arrays, corpus.dev, SRC), eos)[:limit]
    tokens.check_ids(tokens.array_path(arrays, corpus.dev, SRC), dev, model.config.vocab_size)
    dev_sources = files.read_lines(Path(raw) / f"{corpus.dev}.{SRC}")[:limit]
    dev_references = read_references(raw, corpus.dev, limit)
    out = {"longest_training_sentence": longest, "where_position": where_position(model)}
    # A learned table has max_len rows: the long range stops there ("positions" says so).
    rows = {n: min(n, model.max_len or n) for n in (longest, cfg.long_positions)}
    device = model.embed.weight.device
    parts = {n: model.positional.position_part(torch.arange(r, device=device)) for n, r in rows.items()}
    if parts[longest] is not None:
        tables = {f"L{n}": p.detach().cpu().numpy() for n, p in parts.items()}
        out["position_variance"] = {k: dimension_variance(t, cfg.variance_shares) for k, t in tables.items()}
        embeddings = model.positional.token_part(model.embed.weight.detach() * model.scale).cpu().numpy()
        embeddings = np.delete(embeddings, model.config.pad_id, axis=0)
        out["subspace_angles"] = subspace_angles(embeddings, tables[f"L{longest}"], cfg.subspace_share,
                                                 cfg.random_trials, cfg.seed)
    reason = model.logit_split()
    out["logit_terms"] = logit_shares(model, dev) if reason is None else {"undefined": reason}
    out["distance_share"] = distance_share(model, dev)
    out["word_order_bleu"] = word_order_bleu(model, sp, dev_sources, dev_references, cfg.seed, eval_cfg)
    return out
