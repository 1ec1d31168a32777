"""The positional variants behind one interface (§3.5, Table 3 row (E), and the seed question).

Every variant splits the first layer's input into a token part and a position part, both d_model
wide, and returns their sum. For `sinusoidal` and `learned` the two overlap in every dimension; for
`concat` they occupy separate dimensions (the sum of zero-padded parts *is* the concatenation); for
`none` the position part is zero. `parts` is what the analysis stage splits attention logits with.

`token_dim` tells `build_model` how wide the shared token table is. A rotary or ALiBi variant would
need a second hook on the attention scores; there is none until one is asked for.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


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
    """One trained vector per position, `max_positions` rows (Table 3 row (E), [9])."""

    def __init__(self, dim: int, max_positions: int):
        super().__init__()
        self.dim, self.max_len = dim, max_positions
        self.weight = nn.Parameter(torch.randn(max_positions, dim) * dim ** -0.5)

    def forward(self, positions: Tensor) -> Tensor:
        if int(positions.max()) >= self.max_len:
            raise ValueError(f"position {int(positions.max())} is beyond the learned table's "
                             f"{self.max_len} rows (model.max_positions)")
        return self.weight[positions]


class Positional(nn.Module):
    """Interface: `token_dim`, `max_len` (None: unbounded), `parts(...)`, and forward = sum of parts."""

    token_dim: int
    max_len: int | None = None

    def parts(self, tokens: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """(token part, position part), each (batch, length, d_model), from scaled token embeddings
        (batch, length, token_dim) and positions (length,)."""
        raise NotImplementedError

    def forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        token_part, position_part = self.parts(tokens, positions)
        return token_part + position_part


class Summed(Positional):
    """The paper's choice: position vectors added to the token embeddings (§3.5)."""

    def __init__(self, table: nn.Module):
        super().__init__()
        self.table, self.token_dim, self.max_len = table, table.dim, table.max_len

    def parts(self, tokens, positions):
        return tokens, self.table(positions).to(tokens.dtype).expand_as(tokens)


class Concatenated(Positional):
    """Token embedding d_model - k wide, position vector k wide, side by side: same d_model."""

    def __init__(self, table: nn.Module, d_model: int):
        super().__init__()
        self.table, self.max_len = table, table.max_len
        self.token_dim = d_model - table.dim

    def parts(self, tokens, positions):
        pos = self.table(positions).to(tokens.dtype).expand(tokens.shape[0], -1, -1)
        return F.pad(tokens, (0, self.table.dim)), F.pad(pos, (self.token_dim, 0))


class NoPosition(Positional):
    """No position signal: the encoder sees a bag of words; only the decoder's causal mask orders."""

    def __init__(self, d_model: int):
        super().__init__()
        self.token_dim = d_model

    def parts(self, tokens, positions):
        return tokens, torch.zeros_like(tokens)


def _table(kind: str, dim: int, max_positions: int) -> nn.Module:
    return SinusoidalTable(dim) if kind == "sinusoidal" else LearnedTable(dim, max_positions)


# name -> constructor from a ModelConfig
VARIANTS = {
    "sinusoidal": lambda c: Summed(SinusoidalTable(c.d_model)),
    "learned": lambda c: Summed(LearnedTable(c.d_model, c.max_positions)),
    "concat": lambda c: Concatenated(_table(c.concat_kind, c.concat_dim, c.max_positions), c.d_model),
    "none": lambda c: NoPosition(c.d_model),
}
