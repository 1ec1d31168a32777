"""The positional variants behind one interface, acting in two places (README, "The variants").

At the first layer (`Positional`): what is summed into the input. `token_part` widens the token
embeddings to d_model and `position_part` gives each position a d_model vector, or None. For
`sinusoidal` and `learned` the two overlap in every dimension (§3.5, Table 3 row (E)); for `concat`
they occupy separate dimensions (the sum of zero-padded parts *is* the concatenation);
`sinusoidal_narrow`, the control for `concat`, sums the full sinusoid into concat's narrow,
zero-padded token table; `none`, `rope`, `alibi` and `relative` add nothing there.

Inside every self-attention (`AttentionPositions`, one module per self-attention, made by
`Positional.self_attention`): `rotate` queries and keys by position (RoPE), and/or a `bias` on the
logits from query and key positions (ALiBi, Shaw), and Shaw's `values` term. Cross-attention stays
position-free, as in those papers. Each variant's settings come from params.yaml's
`positional.<variant>` (posenc.config.POSITIONAL); each module initialises its own parameters.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.config import ModelConfig
from posenc.errors import UserError


# ---- the first layer ---------------------------------------------------------------------------
def sinusoid_table(positions: Tensor, dim: int) -> Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Interleaved as the paper writes it (sin in even, cos in odd dimensions). tensor2tensor and
    fairseq concatenate all sines then all cosines instead: the same features in another order,
    which matters only when a checkpoint is moved between the two layouts.
    """
    rates = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    angles = positions.to(torch.float32)[:, None] * rates[None, :]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)


class SinusoidalTable(nn.Module):
    """Fixed position vectors, for any length."""

    max_len = None

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, positions: Tensor) -> Tensor:
        return sinusoid_table(positions, self.dim)


class LearnedTable(nn.Module):
    """One trained vector per position, `max_positions` rows (Table 3 row (E), [9]).
    Initialised N(0, 1/dim), as the token embeddings (§3.4's scale makes both O(1) per entry)."""

    def __init__(self, dim: int, max_positions: int):
        super().__init__()
        self.dim, self.max_len = dim, max_positions
        self.weight = nn.Parameter(torch.randn(max_positions, dim) * dim ** -0.5)

    def forward(self, positions: Tensor) -> Tensor:
        if int(positions.max()) >= self.max_len:
            raise ValueError(f"position {int(positions.max())} is beyond the learned table's "
                             f"{self.max_len} rows (positional.*.max_positions)")
        return self.weight[positions]


class Positional(nn.Module):
    """Interface: `token_dim` (width of the shared token table), `max_len` (None: unbounded),
    `token_part`, `position_part`, `self_attention`; forward = token part + position part."""

    token_dim: int
    max_len: int | None = None

    def token_part(self, tokens: Tensor) -> Tensor:
        """Scaled token embeddings (..., token_dim) -> (..., d_model)."""
        return tokens

    def position_part(self, positions: Tensor) -> Tensor | None:
        """Positions (L,) -> (L, d_model) vectors summed into the first layer, or None."""
        return None

    def self_attention(self) -> "AttentionPositions | None":
        """A fresh position module for one self-attention, or None: that attention is position-free."""
        return None

    def forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        x, p = self.token_part(tokens), self.position_part(positions)
        return x if p is None else x + p.to(x.dtype)


class Summed(Positional):
    """The paper's choice: position vectors added to the token embeddings (§3.5)."""

    def __init__(self, table: nn.Module):
        super().__init__()
        self.table, self.token_dim, self.max_len = table, table.dim, table.max_len

    def position_part(self, positions):
        return self.table(positions)


class Concatenated(Positional):
    """Token embedding d_model - k wide, position vector k wide, side by side: same d_model."""

    def __init__(self, table: nn.Module, d_model: int):
        super().__init__()
        self.table, self.max_len = table, table.max_len
        self.token_dim = d_model - table.dim

    def token_part(self, tokens):
        return F.pad(tokens, (0, self.table.dim))

    def position_part(self, positions):
        return F.pad(self.table(positions), (self.token_dim, 0))


class NarrowSummed(Positional):
    """The control for `concat`: concat's token table (d_model - dim wide, so the same tied output
    projection), zero-padded to d_model, with the full-width sinusoid of §3.5 *added*. Against
    `sinusoidal` it changes only the table's width; against `concat` only sum versus concatenation."""

    def __init__(self, d_model: int, dim: int):
        super().__init__()
        self.table, self.token_dim = SinusoidalTable(d_model), d_model - dim

    def token_part(self, tokens):
        return F.pad(tokens, (0, self.table.dim - self.token_dim))

    def position_part(self, positions):
        return self.table(positions)


class InAttention(Positional):
    """Nothing at the first layer; every self-attention gets `make()` (None: `none`, where the
    encoder sees a bag of words and only the decoder's causal mask orders)."""

    def __init__(self, d_model: int, make: Callable[[], "AttentionPositions"] | None = None):
        super().__init__()
        self.token_dim, self.make = d_model, make

    def self_attention(self):
        return self.make() if self.make else None


# ---- inside self-attention ---------------------------------------------------------------------
class AttentionPositions(nn.Module):
    """What a variant does inside one self-attention, on (B, heads, L, d_head) queries and keys.

    `rotate` is applied to queries and keys before the logits (keys before they are cached, so
    cached decoding never rotates twice). `bias` (when `has_bias`) is added to the scaled logits
    q·k/sqrt(d_head); `values` (when `has_values`) adds to the attention's output a term computed
    from its weights, so the attention must form them itself instead of calling SDPA's kernel.
    """

    has_bias = False
    has_values = False

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        return x

    def bias(self, q: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """Added to the scaled logits: broadcastable to (B, heads, Lq, Lk)."""
        raise NotImplementedError

    def values(self, weights: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """Added to weights @ v: (B, heads, Lq, d_head)."""
        raise NotImplementedError


class Rotary(AttentionPositions):
    """RoPE (Su et al. 2021, RoFormer, §3.4.2 eq. 34): each pair of dimensions (2i, 2i+1) of a
    query or key at position m is rotated by the angle m·θ_i, θ_i = base^(-2i/d), so q_m·k_n depends
    on the positions through m - n only. The full head dimension, pairs interleaved: the paper's
    form and Meta's reference (torchtune), rather than x-transformers' half-width rotation; no
    parameters, so nothing to initialise."""

    def __init__(self, d_head: int, base: float):
        super().__init__()
        self.register_buffer("rates", base ** (-torch.arange(0, d_head, 2, dtype=torch.float32) / d_head),
                             persistent=False)

    def rotate(self, x, positions):
        angles = positions.to(torch.float32)[:, None] * self.rates  # (L, d_head / 2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def alibi_slopes(heads: int) -> Tensor:
    """Press et al. 2022, §3: the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8) for n heads
    (n a power of two; the paper's own code interpolates other counts, which is not done here)."""
    return 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=torch.float32) / heads)


class ALiBi(AttentionPositions):
    """ALiBi (Press et al. 2022): a fixed per-head penalty -slope·|i - j| on the logits, no
    position vectors anywhere. The paper is decoder-only, where j <= i; the symmetric |i - j|
    form (x-transformers, OpenNMT-py, fairseq's data2vec) serves the encoder too and equals the
    paper's -slope·(i - j) under the decoder's causal mask, so one form serves both. No parameters."""

    has_bias = True

    def __init__(self, heads: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    def bias(self, q, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).abs().to(q.dtype)
        return -self.slopes.to(q.dtype)[:, None, None] * distance  # (heads, Lq, Lk)


class Relative(AttentionPositions):
    """Relative position representations (Shaw et al. 2018, §3): learned vectors a^K and a^V for
    each clipped distance clip(j - i, -k, k), added to the keys in the logits (eq. 4) and to the
    values in the output (eq. 3). Separate key and value tables per layer, shared across heads,
    as in the paper and tensor2tensor (OpenNMT-py shares one table for both). Each table is
    initialised N(0, 1/d_head), the scale of a head's projected keys and values."""

    has_bias = has_values = True

    def __init__(self, d_head: int, clip: int):
        super().__init__()
        self.clip, self.scale = clip, d_head ** -0.5
        self.key = nn.Parameter(torch.randn(2 * clip + 1, d_head) * d_head ** -0.5)
        self.value = nn.Parameter(torch.randn(2 * clip + 1, d_head) * d_head ** -0.5)

    def index(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        return (k_positions[None, :] - q_positions[:, None]).clamp(-self.clip, self.clip) + self.clip

    def bias(self, q, q_positions, k_positions):
        a = self.key[self.index(q_positions, k_positions)].to(q.dtype)  # (Lq, Lk, d_head)
        return torch.einsum("bhqd,qkd->bhqk", q, a) * self.scale

    def values(self, weights, q_positions, k_positions):
        a = self.value[self.index(q_positions, k_positions)].to(weights.dtype)
        return torch.einsum("bhqk,qkd->bhqd", weights, a)


# ---- the registry ------------------------------------------------------------------------------
def _table(kind: str, dim: int, max_positions: int) -> nn.Module:
    return SinusoidalTable(dim) if kind == "sinusoidal" else LearnedTable(dim, max_positions)


# name -> constructor from a ModelConfig whose `position` holds that variant's settings
VARIANTS: dict[str, Callable[[ModelConfig], Positional]] = {
    "sinusoidal": lambda c: Summed(SinusoidalTable(c.d_model)),
    "learned": lambda c: Summed(LearnedTable(c.d_model, c.position.max_positions)),
    "concat": lambda c: Concatenated(_table(c.position.kind, c.position.dim, c.position.max_positions),
                                     c.d_model),
    "sinusoidal_narrow": lambda c: NarrowSummed(c.d_model, c.position.dim),
    "none": lambda c: InAttention(c.d_model),
    "rope": lambda c: InAttention(c.d_model, lambda: Rotary(c.d_model // c.heads, c.position.base)),
    "alibi": lambda c: InAttention(c.d_model, lambda: ALiBi(c.heads)),
    "relative": lambda c: InAttention(c.d_model, lambda: Relative(c.d_model // c.heads, c.position.clip)),
}


def check(c: ModelConfig, where: str = "params.yaml") -> None:
    """The one-line errors for settings a variant cannot be built with, naming the key."""
    s, d_head = c.position, c.d_model // c.heads
    if c.positional == "concat":
        if not s.dim < c.d_model:
            raise UserError(f"{where}: positional.concat.dim ({s.dim}) must be below "
                            f"model.d_model ({c.d_model}): the token part needs a width")
        if s.kind == "sinusoidal" and s.dim % 2:
            raise UserError(f"{where}: positional.concat.dim ({s.dim}) must be even for a "
                            f"sinusoidal table (sin and cos pairs)")
    if c.positional == "sinusoidal_narrow" and not s.dim < c.d_model:
        raise UserError(f"{where}: positional.sinusoidal_narrow.dim ({s.dim}) must be below "
                        f"model.d_model ({c.d_model}): the token part needs a width")
    if c.positional in ("sinusoidal", "sinusoidal_narrow") and c.d_model % 2:
        raise UserError(f"{where}: model.d_model ({c.d_model}) must be even for the sinusoidal "
                        f"table (sin and cos pairs)")
    if c.positional == "rope" and d_head % 2:
        raise UserError(f"{where}: rope rotates pairs of each head's model.d_model / model.heads "
                        f"= {d_head} dimensions; choose them so that this is even")
    if c.positional == "rope":
        # The rates base^(-2i/d_head) are float32 (the model's arithmetic, Rotary): for a base
        # beyond float32's range every pair but the first stops rotating, and for one too close to
        # 1 the rates coincide. Bound it where they are distinct and above zero.
        rates = Rotary(d_head, s.base).rates
        if not (bool((rates > 0).all()) and bool((rates[1:] < rates[:-1]).all())):
            raise UserError(f"{where}: positional.rope.base ({s.base:g}) gives rotation rates "
                            f"base^(-2i/{d_head}) that are not distinct in float32 (the pairs stop "
                            f"rotating, or rotate alike); choose a base between 1.001 and "
                            f"{float(torch.finfo(torch.float32).max):.3g} (RoFormer uses 10000)")
    if c.positional == "alibi" and c.heads & (c.heads - 1):
        raise UserError(f"{where}: alibi's slopes are defined here for a power-of-two head count, "
                        f"not model.heads = {c.heads}; use 1, 2, 4, 8, 16, ...")
