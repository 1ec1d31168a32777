"""The Transformer of "Attention Is All You Need" (§3), with a pluggable positional variant.

Post-norm residual blocks as in the paper, LayerNorm(x + Dropout(Sublayer(x))) (§3.1, §5.4);
`norm: pre` gives the pre-norm form for comparison. One joint vocabulary whose embedding matrix is
shared by the encoder, the decoder and the pre-softmax projection, scaled by sqrt(width) (§3.4).
`build_model(config)` is the one place where the parts are wired together.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.config import ModelConfig
from posenc.errors import UserError
from posenc.positional import VARIANTS, Positional


def moved_rows(rows: Tensor) -> Tensor:
    """Where `rows` (the rows to keep, in order) takes a row from elsewhere."""
    return (rows != torch.arange(len(rows), device=rows.device)).nonzero().squeeze(1)


class AttentionCache:
    """The keys and values one attention has computed, kept between decoding steps.

    Self-attention appends each step's keys and values into buffers allocated once, for
    `capacity` positions, at the first step; cross-attention's are the memory's, set at the first
    step (capacity None). `select` reorders the rows in place for beam search.
    """

    def __init__(self, capacity: int | None):
        self.capacity, self.length = capacity, 0
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store this step's (B, heads, t, d_head) keys and values; return every stored one."""
        if self.k is None:
            shape = (k.shape[0], k.shape[1], self.capacity, k.shape[3])
            self.k, self.v = k.new_empty(shape), v.new_empty(shape)
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"decoding step {end} is beyond the cache's {self.capacity} positions")
        self.k[:, :, self.length:end], self.v[:, :, self.length:end] = k, v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def set(self, k: Tensor, v: Tensor) -> None:
        self.k, self.v, self.length = k, v, k.shape[2]

    def select(self, rows: Tensor, moved: Tensor | None = None) -> None:
        """Keep the rows `rows` (indices into the current rows), in that order, in the same buffers.
        Only the rows that change (`moved`, found here unless given) are copied: most beams continue
        their own row."""
        if moved is None:
            moved = moved_rows(rows)
        if len(moved):
            for buffer in (self.k, self.v):
                filled = buffer[:, :, :self.length]
                filled[moved] = filled[rows[moved]]  # the right side is gathered before it is written
        self.k, self.v = self.k[:len(rows)], self.v[:len(rows)]


class DecoderCache:
    """Incremental decoding state of the whole decoder (fairseq's incremental state): each layer's
    self- and cross-attention cache, the number of positions decoded, and the beam reorder."""

    def __init__(self, layers: int, capacity: int):
        self.length = 0
        self.self_attn = [AttentionCache(capacity) for _ in range(layers)]
        self.cross_attn = [AttentionCache(None) for _ in range(layers)]

    def reorder(self, rows: Tensor) -> None:
        """Beam search picked `rows` as the next step's hypotheses. Cross-attention keys need no
        reorder: a sentence's beams share one source."""
        moved = moved_rows(rows)
        for c in self.self_attn:
            c.select(rows, moved)

    def keep(self, rows: Tensor) -> None:
        """Only `rows` go on (finished sentences dropped): from self- and cross-attention alike."""
        moved = moved_rows(rows)
        for c in self.self_attn + self.cross_attn:
            c.select(rows, moved)


class MultiHeadAttention(nn.Module):
    """§3.2.2. Projections are bias-free matrices W^Q, W^K, W^V, W^O as in the paper (and
    tensor2tensor), so the first layer's logits split exactly into token and position terms."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads, self.d_head = heads, d_model // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))

    def split(self, x: Tensor) -> Tensor:  # (B, L, d) -> (B, heads, L, d_head)
        return x.view(x.shape[0], x.shape[1], self.heads, self.d_head).transpose(1, 2)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                causal: bool = False, cache: AttentionCache | None = None) -> Tensor:
        """Self-attention when `memory` is None, else attention over `memory` (§3.2.3).

        With `cache`, keys and values of earlier steps (self) or of the memory (cross) are kept
        there, so incremental decoding computes each of them once.
        """
        q = self.split(self.q(x))
        if memory is None:
            k, v = self.split(self.k(x)), self.split(self.v(x))
            if cache is not None:
                k, v = cache.append(k, v)
        elif cache is not None and cache.k is not None:
            k, v = cache.k, cache.v
        else:
            k, v = self.split(self.k(memory)), self.split(self.v(memory))
            if cache is not None:
                cache.set(k, v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.o(out.transpose(1, 2).flatten(2))


class FeedForward(nn.Sequential):
    """§3.3: FFN(x) = max(0, x W1 + b1) W2 + b2."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))


class Residual(nn.Module):
    """§3.1 and §5.4: LayerNorm(x + Dropout(Sublayer(x))), or x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, d_model: int, dropout: float, norm: str):
        super().__init__()
        self.norm, self.drop, self.pre = nn.LayerNorm(d_model), nn.Dropout(dropout), norm == "pre"

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre:
            return x + self.drop(sublayer(self.norm(x)))
        return self.norm(x + self.drop(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.attn, self.ff = MultiHeadAttention(c.d_model, c.heads), FeedForward(c.d_model, c.d_ff)
        self.res = nn.ModuleList(Residual(c.d_model, c.dropout, c.norm) for _ in range(2))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.res[0](x, lambda y: self.attn(y, mask=mask))
        return self.res[1](x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.heads)
        self.cross_attn = MultiHeadAttention(c.d_model, c.heads)
        self.ff = FeedForward(c.d_model, c.d_ff)
        self.res = nn.ModuleList(Residual(c.d_model, c.dropout, c.norm) for _ in range(3))

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor,
                caches: tuple[AttentionCache, AttentionCache] | None) -> Tensor:
        # Without a cache the whole prefix is here: mask the future (§3.2.3). With one, x is the
        # newest position only and every cached key is in its past.
        self_cache, cross_cache = caches or (None, None)
        x = self.res[0](x, lambda y: self.self_attn(y, causal=caches is None, cache=self_cache))
        x = self.res[1](x, lambda y: self.cross_attn(y, memory, mask=src_mask, cache=cross_cache))
        return self.res[2](x, self.ff)


class Transformer(nn.Module):
    def __init__(self, c: ModelConfig, positional: Positional):
        super().__init__()
        self.config, self.positional = c, positional
        width = positional.token_dim
        # §3.4: one matrix for both embeddings and the pre-softmax projection, scaled by sqrt(width).
        # For `concat` the token table is d_model - concat_dim wide; its logits come from the same
        # slice of the decoder output, so the projection stays tied (see `logits`).
        self.embed = nn.Embedding(c.vocab_size, width, padding_idx=c.pad_id)
        self.scale = math.sqrt(width)
        self.drop = nn.Dropout(c.dropout)  # §5.4: on the sums of embeddings and positions
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.layers))
        # Pre-norm stacks need a final LayerNorm; post-norm outputs are normalized already.
        self.enc_norm = nn.LayerNorm(c.d_model) if c.norm == "pre" else nn.Identity()
        self.dec_norm = nn.LayerNorm(c.d_model) if c.norm == "pre" else nn.Identity()
        for name, p in self.named_parameters():
            if p.dim() == 2 and not name.startswith(("embed", "positional")):
                nn.init.xavier_uniform_(p)
        nn.init.normal_(self.embed.weight, std=width ** -0.5)
        with torch.no_grad():
            self.embed.weight[c.pad_id].zero_()

    @property
    def max_len(self) -> int | None:
        return self.positional.max_len

    def first_layer_input(self, ids: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """The (token part, position part) whose sum enters the first layer, before dropout."""
        positions = torch.arange(offset, offset + ids.shape[1], device=ids.device)
        return self.positional.parts(self.embed(ids) * self.scale, positions)

    def embed_with_positions(self, ids: Tensor, offset: int = 0) -> Tensor:
        token_part, position_part = self.first_layer_input(ids, offset)
        return self.drop(token_part + position_part)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Source ids (B, S) -> memory (B, S, d_model) and the key mask (B, 1, 1, S), True = token."""
        mask = (src != self.config.pad_id)[:, None, None, :]
        x = self.embed_with_positions(src)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.enc_norm(x), mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor,
               cache: DecoderCache | None = None) -> Tensor:
        """Logits (B, T, vocab) for target inputs (B, T). With a cache (see `new_cache`), `tgt` holds
        only the newest tokens and the cache supplies everything before them."""
        offset = 0 if cache is None else cache.length
        x = self.embed_with_positions(tgt, offset)
        for i, layer in enumerate(self.decoder):
            x = layer(x, memory, src_mask,
                      None if cache is None else (cache.self_attn[i], cache.cross_attn[i]))
        if cache is not None:
            cache.length += tgt.shape[1]
        return self.logits(self.dec_norm(x))

    def logits(self, h: Tensor) -> Tensor:
        return F.linear(h[..., : self.positional.token_dim], self.embed.weight)

    def new_cache(self, capacity: int) -> DecoderCache:
        """An empty decoding state for outputs of up to `capacity` positions (BOS included)."""
        return DecoderCache(len(self.decoder), capacity)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        memory, src_mask = self.encode(src)
        return self.decode(tgt, memory, src_mask)


def build_model(c: ModelConfig) -> Transformer:
    """Check the configuration, then wire the chosen positional variant into the Transformer."""
    if c.positional not in VARIANTS:
        raise UserError(f"positional variant '{c.positional}' is unknown; "
                        f"valid variants: {', '.join(VARIANTS)} (params.yaml: variants)")
    if c.d_model % c.heads:
        raise UserError(f"params.yaml: model.heads ({c.heads}) must divide model.d_model ({c.d_model})")
    if c.positional == "concat" and not 0 < c.concat_dim < c.d_model:
        raise UserError(f"params.yaml: model.concat_dim ({c.concat_dim}) must be between 0 and "
                        f"model.d_model ({c.d_model}), exclusive")
    sinusoid_width = {"sinusoidal": c.d_model,
                      "concat": c.concat_dim if c.concat_kind == "sinusoidal" else 0}.get(c.positional, 0)
    if sinusoid_width % 2:
        raise UserError(f"params.yaml: a sinusoidal table needs an even width, got {sinusoid_width} "
                        f"(model.d_model / model.concat_dim)")
    return Transformer(c, VARIANTS[c.positional](c))


def count_parameters(model: nn.Module) -> int:
    """Shared tensors (the tied embedding) are counted once."""
    return sum(p.numel() for p in model.parameters())


def check_lengths(model: Transformer, splits: dict) -> None:
    """Fail, naming the first sentence that does not fit, when a learned position table is too short
    for the sentences it will see ({file: sentences}, each sentence ending in EOS). Sinusoids have
    no such bound (§3.5); a learned table has model.max_positions rows and nothing beyond them."""
    if model.max_len is None:
        return
    too_long = [(where, i, len(s)) for where, sentences in splits.items()
                for i, s in enumerate(sentences) if len(s) > model.max_len]
    if too_long:
        where, i, n = too_long[0]
        raise UserError(f"{where}: sentence {i + 1} is {n} subwords long (EOS included), more than "
                        f"the learned position table's {model.max_len} rows ({len(too_long)} such "
                        f"sentences); raise model.max_positions to at least "
                        f"{max(t[2] for t in too_long)}")
