"""The key/value cache of incremental decoding: what each of the decoder's attentions has
computed, kept between decoding steps, with the beam reorder (fairseq's incremental state).
posenc.decode makes and reorders it; the model reads and appends through it.

It lives apart from posenc.model, which does not import it, so that decoding can change without
changing a file that every train stage depends on (dvc.yaml).
"""

from __future__ import annotations

import torch
from torch import Tensor


def moved_rows(rows: Tensor) -> Tensor:
    """Where `rows` (the rows to keep, in order) takes a row from elsewhere."""
    return (rows != torch.arange(len(rows), device=rows.device)).nonzero().squeeze(1)


class AttentionCache:
    """The keys and values one attention has computed, kept between decoding steps.

    Self-attention appends each step's keys and values into buffers allocated once, for
    `capacity` positions, at the first step; cross-attention's are the memory's, set when the
    decoding state is made (capacity None). `select` reorders the rows in place for beam search.
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
        # Contiguous once, so that no decoding step copies them for its q·kᵀ and ·v products.
        self.k, self.v, self.length = k.contiguous(), v.contiguous(), k.shape[2]

    def repeat(self, times: int) -> None:
        """Each row becomes `times` rows in a row (beam search, after its first step). Self-attention
        copies only its filled positions into new buffers of the same capacity."""
        if self.capacity is None:
            self.k, self.v = self.k.repeat_interleave(times, 0), self.v.repeat_interleave(times, 0)
            return
        filled = self.k[:, :, :self.length], self.v[:, :, :self.length]
        self.k, self.v = (b.new_empty((times * b.shape[0], *b.shape[1:])) for b in (self.k, self.v))
        self.k[:, :, :self.length] = filled[0].repeat_interleave(times, 0)
        self.v[:, :, :self.length] = filled[1].repeat_interleave(times, 0)

    def select(self, rows: Tensor, moved: Tensor | None = None) -> None:
        """Keep the rows `rows` (indices into the current rows), in that order, in the same buffers.
        Only the rows that change (`moved`, found here unless given) are copied: most beams continue
        their own row."""
        if moved is None:
            moved = moved_rows(rows)
        if len(moved):
            sources = rows[moved]
            for buffer in (self.k, self.v):
                filled = buffer[:, :, :self.length]
                # gathered before it is written; index_copy_ beats `filled[moved] = ...` by 2-3%
                filled.index_copy_(0, moved, filled.index_select(0, sources))
        self.k, self.v = self.k[:len(rows)], self.v[:len(rows)]


class DecoderCache:
    """Incremental decoding state of the whole decoder (fairseq's incremental state): each layer's
    self- and cross-attention cache, the number of positions decoded, and the beam reorder."""

    def __init__(self, model, capacity: int, memory: Tensor):
        """An empty state for outputs of up to `capacity` positions (BOS included) of `model` (a
        posenc.model.Transformer) over the encoder output `memory` (B, S, d_model), whose
        cross-attention keys and values each decoder layer computes here, once."""
        self.length = 0
        self.self_attn = [AttentionCache(capacity) for _ in model.decoder]
        self.cross_attn = [AttentionCache(None) for _ in model.decoder]
        for layer, cross in zip(model.decoder, self.cross_attn):
            cross.set(*layer.cross_attn.keys_values(memory))

    def reorder(self, rows: Tensor, kept: Tensor | None = None) -> None:
        """Beam search picked `rows` as the next step's hypotheses, of which only the rows `kept`
        go on (finished sentences dropped; None: all). Self-attention takes both in one copy;
        cross-attention only the drop, as a sentence's beams share one source."""
        if kept is not None:
            rows = rows[kept]
            moved = moved_rows(kept)
            for c in self.cross_attn:
                c.select(kept, moved)
        moved = moved_rows(rows)
        for c in self.self_attn:
            c.select(rows, moved)

    def repeat(self, times: int) -> None:
        """Each row becomes `times` rows in a row: one sentence's state, given to each of its beams."""
        for c in self.self_attn + self.cross_attn:
            c.repeat(times)
