"""The Transformer of "Attention Is All You Need" (§3), with a pluggable positional variant.

Post-norm residual blocks as in the paper, LayerNorm(x + Dropout(Sublayer(x))) (§3.1, §5.4);
`norm: pre` gives the pre-norm form for comparison. One joint vocabulary whose embedding matrix is
shared by the encoder, the decoder and the pre-softmax projection, scaled by sqrt(width) (§3.4).
`build_model(config)` is the one place where the parts are wired together.
"""

from __future__ import annotations

import dataclasses
import math
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.config import ModelConfig
from posenc.errors import UserError
from posenc.loss import projection_loss
from posenc import positional as variants
from posenc.positional import VARIANTS, AttentionPositions, Positional

# AttentionCache and DecoderCache, in annotations only, are posenc.cache's: not imported, so that
# the decoding code stays out of what the train stages depend on.


class MultiHeadAttention(nn.Module):
    """§3.2.2. Projections are bias-free matrices W^Q, W^K, W^V, W^O as in the paper (and
    tensor2tensor), so the first layer's logits split exactly into token and position terms.

    `position` (self-attention only) is the variant's module (posenc.positional): it rotates
    queries and keys, and/or biases the logits. Without a bias the attention is one call of
    scaled_dot_product_attention with the boolean mask or `is_causal` (its fast kernels); a bias
    is folded with the masks into one float `attn_mask`. Shaw's value term needs the weights, so
    that variant forms them itself, as does incremental decoding (one query a step), where plain
    products are faster than those kernels.
    """

    def __init__(self, d_model: int, heads: int, position: AttentionPositions | None = None):
        super().__init__()
        self.heads, self.d_head = heads, d_model // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.position = position

    def split(self, x: Tensor) -> Tensor:  # (B, L, d) -> (B, heads, L, d_head)
        return x.view(x.shape[0], x.shape[1], self.heads, self.d_head).transpose(1, 2)

    def keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention's keys and values of the encoder output (§3.2.3)."""
        return self.split(self.k(memory)), self.split(self.v(memory))

    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Self-attention's queries and keys for `x` at `positions`, rotated where the variant does."""
        q, k = self.split(self.q(x)), self.split(self.k(x))
        if self.position is not None:
            q, k = self.position.rotate(q, positions), self.position.rotate(k, positions)
        return q, k

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        return q @ k.transpose(-1, -2) * self.d_head ** -0.5

    def logits(self, q: Tensor, k: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """q·k / sqrt(d_head), plus the variant's bias: (B, heads, Lq, Lk), before any mask."""
        if self.position is None or not self.position.has_bias:
            return self.scores(q, k)
        return self.scores(q, k) + self.position.bias(q, q_positions, k_positions)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                causal: bool = False, cache: AttentionCache | None = None,
                positions: Tensor | None = None) -> Tensor:
        """Self-attention over `x` at `positions` when `memory` is None, else attention over
        `memory` (§3.2.3). `mask` (B, 1, 1, Lk) is True at the keys that may be attended to.

        With `cache`, keys and values of earlier steps (self) or of the memory (cross) are kept
        there, so incremental decoding computes each of them once; the cached keys sit at
        positions 0, 1, ..., so `positions` are those of the newest steps, and cross-attention
        reads its keys from the cache, not from `memory`.
        """
        if memory is None:
            q, k = self.queries_keys(x, positions)
            v = self.split(self.v(x))
            if cache is not None:
                k, v = cache.append(k, v)
        else:
            q = self.split(self.q(x))
            k, v = self.keys_values(memory) if cache is None else (cache.k, cache.v)
        bias = None
        if self.position is not None and self.position.has_bias:
            k_positions = positions if cache is None else torch.arange(k.shape[2], device=k.device)
            bias = self.position.bias(q, positions, k_positions)
            blocked = torch.tensor(float("-inf"), dtype=bias.dtype, device=bias.device)
            if mask is not None:
                bias = torch.where(mask, bias, blocked)
            if causal:
                future = torch.ones(bias.shape[-2:], dtype=torch.bool, device=q.device).triu(1)
                bias = torch.where(future, blocked, bias)
        has_values = bias is not None and self.position.has_values
        if cache is None and not has_values:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if bias is None else bias,
                                                 is_causal=causal and bias is None)
        else:
            # Shaw's value term needs the weights; for one query a step (incremental decoding),
            # plain products are also faster than the fused kernel (README, Performance).
            logits = self.scores(q, k)
            if bias is not None:
                logits = logits + bias
            elif mask is not None:
                logits = logits.masked_fill(~mask, float("-inf"))
            weights = logits.softmax(-1)
            out = weights @ v
            if has_values:
                out = out + self.position.values(weights, positions, k_positions)
        return self.o(out.transpose(1, 2).flatten(2))


class FeedForward(nn.Sequential):
    """§3.3: FFN(x) = max(0, x W1 + b1) W2 + b2."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))


class Residual(nn.Module):
    """§3.1 and §5.4: LayerNorm(x + Dropout(Sublayer(x))), or x + Dropout(Sublayer(LayerNorm(x))).

    `kind` is how the sub-layer's output y meets its input x: `sum`, x + y (the paper's, whose
    derivative with respect to x is the identity: the "gradient highway"); `concat`, W [x; y]
    with W of 2d -> d, so the width stays d_model; `none`, y alone (the control without an
    identity path). concat's W starts at [I I] (`identity`: the model starts as the summed one,
    and learns whether to keep the path) or at Xavier (`xavier`: no identity path at the start).
    """

    def __init__(self, d_model: int, dropout: float, norm: str, kind: str = "sum", init: str = "identity"):
        super().__init__()
        self.norm, self.drop, self.pre, self.kind = nn.LayerNorm(d_model), nn.Dropout(dropout), norm == "pre", kind
        if kind == "concat":
            # skip_init: no random numbers drawn here, so that every other weight is drawn as in
            # the summed model (the identity start is then exactly that model); on the default
            # device, so that the meta-device build of the memory check (`check`) allocates nothing
            self.merge = torch.nn.utils.skip_init(nn.Linear, 2 * d_model, d_model, bias=False,
                                                  device=torch.get_default_device())
            with torch.no_grad():
                if init == "identity":
                    eye = torch.eye(d_model)
                    self.merge.weight.copy_(torch.cat((eye, eye), dim=1))
                else:
                    nn.init.xavier_uniform_(self.merge.weight)

    def sublayer_input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre else x

    def combine(self, x: Tensor, y: Tensor) -> Tensor:
        if self.kind == "sum":
            return x + y
        if self.kind == "concat":
            return self.merge(torch.cat((x, y), dim=-1))
        return y

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre:
            return self.combine(x, self.drop(sublayer(self.norm(x))))
        return self.norm(self.combine(x, self.drop(sublayer(x))))


class EncoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, positional: Positional):
        super().__init__()
        self.attn = MultiHeadAttention(c.d_model, c.heads, positional.self_attention())
        self.ff = FeedForward(c.d_model, c.d_ff)
        self.res = nn.ModuleList(Residual(c.d_model, c.dropout, c.norm, c.residual, c.residual_init)
                                 for _ in range(2))

    def forward(self, x: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
        x = self.res[0](x, lambda y: self.attn(y, mask=mask, positions=positions))
        return self.res[1](x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, positional: Positional):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.heads, positional.self_attention())
        self.cross_attn = MultiHeadAttention(c.d_model, c.heads)  # position-free (§3.2.3)
        self.ff = FeedForward(c.d_model, c.d_ff)
        self.res = nn.ModuleList(Residual(c.d_model, c.dropout, c.norm, c.residual, c.residual_init)
                                 for _ in range(3))

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor, positions: Tensor,
                caches: tuple[AttentionCache, AttentionCache] | None) -> Tensor:
        # Without a cache the whole prefix is here: mask the future (§3.2.3). With one, x is the
        # newest position only and every cached key is in its past.
        self_cache, cross_cache = caches or (None, None)
        x = self.res[0](x, lambda y: self.self_attn(y, causal=caches is None, cache=self_cache,
                                                    positions=positions))
        x = self.res[1](x, lambda y: self.cross_attn(y, memory, mask=src_mask, cache=cross_cache))
        return self.res[2](x, self.ff)


class Transformer(nn.Module):
    def __init__(self, c: ModelConfig, positional: Positional):
        super().__init__()
        self.config, self.positional = c, positional
        width = positional.token_dim
        # §3.4: one matrix for both embeddings and the pre-softmax projection, scaled by sqrt(width).
        # For `concat` (and its control) the token table is d_model - dim wide; its logits come
        # from the same slice of the decoder output, so the projection stays tied (see `logits`).
        self.embed = nn.Embedding(c.vocab_size, width, padding_idx=c.pad_id)
        self.scale = math.sqrt(width)
        self.drop = nn.Dropout(c.dropout)  # §5.4: on the sums of embeddings and positions
        self.encoder = nn.ModuleList(EncoderLayer(c, positional) for _ in range(c.layers))
        self.decoder = nn.ModuleList(DecoderLayer(c, positional) for _ in range(c.layers))
        # Pre-norm stacks need a final LayerNorm; post-norm outputs are normalized already.
        self.enc_norm = nn.LayerNorm(c.d_model) if c.norm == "pre" else nn.Identity()
        self.dec_norm = nn.LayerNorm(c.d_model) if c.norm == "pre" else nn.Identity()
        # Xavier for the projection matrices (as tensor2tensor); position tables and relative
        # embeddings keep the initialisation their own module states (posenc.positional).
        # concat's residual merge keeps the initialisation its module chose (Residual).
        merges = {id(m.merge) for m in self.modules() if isinstance(m, Residual) and m.kind == "concat"}
        for m in self.modules():
            if isinstance(m, nn.Linear) and id(m) not in merges:
                nn.init.xavier_uniform_(m.weight)
        nn.init.normal_(self.embed.weight, std=width ** -0.5)
        with torch.no_grad():
            self.embed.weight[c.pad_id].zero_()

    @property
    def max_len(self) -> int | None:
        return self.positional.max_len

    def embed_with_positions(self, ids: Tensor, positions: Tensor) -> Tensor:
        return self.drop(self.positional(self.embed(ids) * self.scale, positions))

    def encode(self, src: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Source ids (B, S) -> memory (B, S, d_model) and the key mask (B, 1, 1, S), True = token.
        `offset` moves the sentence to positions offset, offset + 1, ... (the shift tests)."""
        mask = (src != self.config.pad_id)[:, None, None, :]
        positions = _positions(src, offset)
        x = self.embed_with_positions(src, positions)
        for layer in self.encoder:
            x = layer(x, mask, positions)
        return self.enc_norm(x), mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor,
               cache: DecoderCache | None = None) -> Tensor:
        """Logits (B, T, vocab) for target inputs (B, T). With a cache (posenc.cache), `tgt` holds
        only the newest tokens, the cache supplies everything before them and the cross-attention
        keys and values, and `memory` is not read."""
        return self.logits(self.decoder_output(tgt, memory, src_mask, cache))

    def decoder_output(self, tgt: Tensor, memory: Tensor, src_mask: Tensor,
                       cache: DecoderCache | None = None) -> Tensor:
        """The decoder stack's output (B, T, d_model), before the pre-softmax projection."""
        offset = 0 if cache is None else cache.length
        positions = _positions(tgt, offset)
        x = self.embed_with_positions(tgt, positions)
        for i, layer in enumerate(self.decoder):
            x = layer(x, memory, src_mask, positions,
                      None if cache is None else (cache.self_attn[i], cache.cross_attn[i]))
        if cache is not None:
            cache.length += tgt.shape[1]
        return self.dec_norm(x)

    def logits(self, h: Tensor) -> Tensor:
        return F.linear(h[..., : self.positional.token_dim], self.embed.weight)

    def forward(self, src: Tensor, tgt: Tensor, target: Tensor | None = None,
                label_smoothing: float = 0.0) -> Tensor:
        """Logits (B, T, vocab) for target inputs `tgt`; given the `target` tokens instead, the
        summed label-smoothed loss (§5.4) of the training step, with the projection fused into
        it (posenc.loss), padding left out. As nanoGPT's forward, so that DistributedDataParallel,
        which wraps the forward, sees the whole step."""
        memory, src_mask = self.encode(src)
        if target is None:
            return self.decode(tgt, memory, src_mask)
        h = self.decoder_output(tgt, memory, src_mask)[..., : self.positional.token_dim]
        return projection_loss(h, self.embed.weight, target, label_smoothing, self.config.pad_id)

    # What the analysis stage reads: the first encoder self-attention, as the model computes it.
    def first_layer_logits(self, src: Tensor, offset: int = 0) -> Tensor:
        """The first encoder self-attention's logits (B, heads, S, S) before the padding mask,
        with the variant's rotation and bias; dropout as the mode says (eval: off)."""
        positions = _positions(src, offset)
        layer = self.encoder[0]
        x = layer.res[0].sublayer_input(self.embed_with_positions(src, positions))
        q, k = layer.attn.queries_keys(x, positions)
        return layer.attn.logits(q, k, positions, positions)

    def logit_split(self) -> str | None:
        """Why the first layer's logits do not split into word and position terms, or None."""
        if self.encoder[0].attn.position is not None:
            return ("position acts inside attention (a rotation or a bias), not as a summand of "
                    "the input: there is no position vector to split the logits by")
        if self.config.norm == "pre":
            return "pre-norm: the first attention sees LayerNorm(word + position), which does not split"
        return None

    def first_layer_terms(self, src: Tensor) -> dict[str, Tensor]:
        """Where `logit_split()` is None: the first encoder layer's logits split exactly into
        word-word, word-position, position-word and position-position terms (bias-free
        projections, post-norm, dropout off), each (B, heads, S, S), summing to
        `first_layer_logits(src)`."""
        positions = _positions(src, 0)
        word = self.positional.token_part(self.embed(src) * self.scale)
        position = self.positional.position_part(positions)
        parts = {"word": word, "position": torch.zeros_like(word) if position is None
                 else position.to(word.dtype).expand_as(word)}
        attn = self.encoder[0].attn
        return {f"{a}-{b}": attn.scores(attn.split(attn.q(parts[a])), attn.split(attn.k(parts[b])))
                for a in ("word", "position") for b in ("word", "position")}


def _positions(ids: Tensor, offset: int) -> Tensor:
    """The positions of the tokens `ids` (B, L): offset, offset + 1, ..., offset + L - 1."""
    return torch.arange(offset, offset + ids.shape[1], device=ids.device)


def build_model(c: ModelConfig) -> Transformer:
    """Check the configuration, then wire the chosen positional variant into the Transformer."""
    check(c)
    return Transformer(c, VARIANTS[c.positional](c))


def check(c: ModelConfig, where: str = "params.yaml") -> None:
    """The one-line errors for a configuration that cannot be built here, naming the key in the
    params file `where`: checks across keys, and a model too large for this machine's memory."""
    if c.positional not in VARIANTS:
        raise UserError(f"positional variant '{c.positional}' is unknown; "
                        f"valid variants: {', '.join(VARIANTS)} ({where}: variants)")
    if c.d_model % c.heads:
        raise UserError(f"{where}: model.heads ({c.heads}) must divide model.d_model ({c.d_model})")
    variants.check(c, where)
    _check_memory(c, where)


# Training holds each float32 parameter four times: the weight, its gradient and Adam's two moments.
TRAINING_BYTES_PER_PARAMETER = 16


def _check_memory(c: ModelConfig, where: str) -> None:
    """Refuse, before anything is allocated, a model whose training state alone exceeds this
    machine's memory (a size key set far too large: model.d_ff 1e9, a learned table of 1e9 rows,
    a relative clip of 1e8, model.layers 1e5), naming the key that holds most of it. Models of
    one and two layers a side are built on the meta device, which allocates nothing, so the count
    is torch's own; every further layer costs what the second did, so no depth is ever built."""
    one, two = _training_bytes(dataclasses.replace(c, layers=1)), _training_bytes(dataclasses.replace(c, layers=2))
    parts = {k: one.get(k, 0) + (two[k] - one.get(k, 0)) * (c.layers - 1) for k in two}
    needed, available = sum(parts.values()), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > available:
        if sum(one.values()) <= available < sum(two.values()) * c.layers / 2:
            key, value = "model.layers", c.layers  # one layer a side fits: the depth is what is too much
        else:
            key = max(parts, key=parts.get)
            section, _, field = key.rpartition(".")
            value = {"model": c, "tokenizer": {"vocab_size": c.vocab_size}}.get(section, c.position)
            value = value[field] if isinstance(value, dict) else getattr(value, field)
        raise UserError(f"{where}: {key} ({value:,}) makes a model whose training state (weights, "
                        f"gradients, Adam's moments) needs about {needed / 2**30:,.1f} GiB, more than "
                        f"this machine's {available / 2**30:,.1f} GiB of memory; lower it")


def _training_bytes(c: ModelConfig) -> dict[str, int]:
    """Bytes of training state of the model `c`, by the params key that sizes each tensor."""
    with torch.device("meta"):
        model = Transformer(c, VARIANTS[c.positional](c))
    size_key = {"learned": "max_positions", "concat": "max_positions", "relative": "clip"}
    parts: dict[str, int] = {}
    for name, p in [*model.named_parameters(), *model.named_buffers()]:
        if c.positional in size_key and (".position." in name or name.startswith("positional.")):
            key = f"positional.{c.positional}.{size_key[c.positional]}"
        elif ".ff." in name:
            key = "model.d_ff"
        elif name.startswith("embed."):
            key = "tokenizer.vocab_size"
        else:
            key = "model.d_model"
        parts[key] = parts.get(key, 0) + p.numel() * TRAINING_BYTES_PER_PARAMETER
    return parts


def count_parameters(model: nn.Module) -> int:
    """Shared tensors (the tied embedding) are counted once."""
    return sum(p.numel() for p in model.parameters())


def check_lengths(model: Transformer, splits: dict) -> None:
    """Fail, naming the first sentence that does not fit, when a learned position table is too short
    for the sentences it will see ({file: sentences}, each sentence ending in EOS). Sinusoids have
    no such bound (§3.5); a learned table has positional.<variant>.max_positions rows and nothing beyond them."""
    if model.max_len is None:
        return
    too_long = [(where, i, len(s)) for where, sentences in splits.items()
                for i, s in enumerate(sentences) if len(s) > model.max_len]
    if too_long:
        where, i, n = too_long[0]
        raise UserError(f"{where}: sentence {i + 1} is {n} subwords long (EOS included), more than "
                        f"the learned position table's {model.max_len} rows ({len(too_long)} such "
                        f"sentences); raise positional.{model.config.positional}.max_positions to at least "
                        f"{max(t[2] for t in too_long)}")
