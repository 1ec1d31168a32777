"""The training loss: the tied pre-softmax projection (§3.4) and label-smoothed cross-entropy
(§5.4) in one pass, chunked over target tokens.

Unfused, the projection writes a (tokens x vocabulary) logit matrix (4096 x 8000 floats, 131 MB,
in the default profile), log-softmax reads it and writes another, the loss reads that, and the
backward pass walks both again: each pass goes to memory. Here each chunk of CHUNK tokens goes
through the product, the log-softmax, the loss and its gradient while it is still in the cache,
and the chunk's gradients with respect to the decoder output and the tied embedding are formed at
once (the idea of Cut Cross-Entropy, Wijmans et al. 2024, and Liger Kernel's fused linear
cross-entropy, whose kernels are GPU-only; neither has label smoothing). Padded target positions
are dropped first, so their logits are not computed at all.

The loss and the gradients equal F.cross_entropy(F.linear(h, W), target, label_smoothing=eps,
reduction="sum") to float32 rounding (tests/test_model.py), not bit for bit: the tied embedding's
gradient is summed chunk by chunk.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Tokens per chunk. It fixes the order in which the embedding's gradient is summed, so it is part
# of the bits, and is a constant rather than a guess from the cache size of the machine at hand.
# 512 tokens x 8000 subwords x 4 bytes = 16 MB a buffer (README, Performance: chosen by timing).
CHUNK = 512


class _ProjectionLoss(torch.autograd.Function):
    """sum over tokens of (1 - eps) * -log p(target) + eps * mean over the vocabulary of -log p,
    with p = softmax(h W^T); the gradients are formed in the forward pass, chunk by chunk."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, target: Tensor, smoothing: float, chunk: int) -> Tensor:
        n, vocab = h.shape[0], weight.shape[0]
        want_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        total = h.new_zeros(())
        grad_h = torch.empty_like(h) if want_grad else None
        grad_w = torch.zeros_like(weight) if want_grad else None
        logits = h.new_empty(min(chunk, n), vocab)
        logp = torch.empty_like(logits)
        for start in range(0, n, chunk):
            h_c, t_c = h[start:start + chunk], target[start:start + chunk]
            z, lp = logits[:len(t_c)], logp[:len(t_c)]
            torch.mm(h_c, weight.t(), out=z)
            torch.log_softmax(z, -1, out=lp)
            nll = lp.gather(1, t_c[:, None]).sum()
            total -= (1 - smoothing) * nll + smoothing / vocab * lp.sum()
            if want_grad:
                # d loss / d z = softmax(z) - (1 - eps) one_hot(target) - eps / V
                g = torch.exp(lp, out=z).sub_(smoothing / vocab)
                g[torch.arange(len(t_c)), t_c] -= 1 - smoothing
                torch.mm(g, weight, out=grad_h[start:start + chunk])
                grad_w.addmm_(g.t(), h_c)
        ctx.save_for_backward(grad_h, grad_w)
        return total

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_out, grad_w * grad_out, None, None, None


def projection_loss(hidden: Tensor, weight: Tensor, target: Tensor, smoothing: float,
                    ignore_index: int, chunk: int = CHUNK) -> Tensor:
    """The summed label-smoothed cross-entropy of the logits hidden @ weight^T (hidden: (..., d),
    weight: (vocabulary, d), target: (...)), positions whose target is `ignore_index` left out."""
    keep = (target != ignore_index).flatten()
    h = hidden.flatten(0, -2)[keep]
    with torch.autocast(hidden.device.type, enabled=False):  # the loss in float32, as before
        return _ProjectionLoss.apply(h.float(), weight.float(), target.flatten()[keep], smoothing, chunk)
