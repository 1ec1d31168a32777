"""The "gradient highway" of the residual connections, measured (README, "The residual study").

The conjectures of the sum-versus-concatenation debate about `x + f(x)`: the sum's derivative
with respect to x is the identity, so the gradient reaches the first layers and the embeddings
"unimpeded"; a concatenation (here W [x; f(x)], posenc.model.Residual) or no residual at all puts
"road-tolls" on it; and a summed layer learns a gentle correction, a small f(x) beside x.

`measure` takes one fixed dev batch through the model, dropout off (eval mode: no random numbers
drawn, so the training's bits do not change), and returns, as (part, measure, value) rows:
- `grad_ratio`: the gradient norm at each layer's input and at the token embeddings (after the
  lookup, before the sqrt(width) scale), over the norm at the top layer's output: the gradient
  the stack passes down, 1 for a perfect highway;
- `update_ratio`: |f(x)| / |x| of each sub-layer (self-attention, cross-attention,
  feed-forward), x being its input (the residual stream; LayerNorm(x) under pre-norm);
- for `concat`, `w_x` and `w_f`: the norms of W's halves acting on x and on f(x), over
  sqrt(d_model) (both 1 at the identity initialisation [I I]): does it keep the identity path?
Norms are over the whole batch (padding included: its gradient is zero).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.model import FeedForward, MultiHeadAttention, Residual, Transformer

HEADER = ["step", "part", "measure", "value"]


def _sublayers(model: Transformer):
    """(name, sub-layer module) of every residual sub-layer, bottom to top."""
    for i, layer in enumerate(model.encoder):
        yield f"encoder layer {i + 1} self-attention", layer.attn
        yield f"encoder layer {i + 1} feed-forward", layer.ff
    for i, layer in enumerate(model.decoder):
        yield f"decoder layer {i + 1} self-attention", layer.self_attn
        yield f"decoder layer {i + 1} cross-attention", layer.cross_attn
        yield f"decoder layer {i + 1} feed-forward", layer.ff


def measure(model: Transformer, batch: tuple[Tensor, Tensor, Tensor], label_smoothing: float) -> list[tuple[str, str, float]]:
    """The rows above for `batch` (source, decoder input, target), with the training loss."""
    kept: dict[str, Tensor] = {}
    sizes: dict[str, float] = {}
    hooks = []

    def keep(name: str, tensor: Tensor) -> None:
        tensor.retain_grad()
        kept[name] = tensor

    embedded = iter(("encoder embeddings", "decoder embeddings"))  # encode runs first
    hooks.append(model.embed.register_forward_hook(lambda m, a, out: keep(next(embedded), out)))
    for side, layers in (("encoder", model.encoder), ("decoder", model.decoder)):
        for i, layer in enumerate(layers):
            hooks.append(layer.register_forward_pre_hook(
                lambda m, args, name=f"{side} layer {i + 1} input": keep(name, args[0])))
        hooks.append(layers[-1].register_forward_hook(
            lambda m, args, out, name=f"{side} top output": keep(name, out)))
    def size(name: str, x: Tensor, out: Tensor) -> None:
        sizes[name] = float(out.detach().norm() / x.detach().norm())

    for name, module in _sublayers(model):
        assert isinstance(module, (MultiHeadAttention, FeedForward))
        hooks.append(module.register_forward_hook(lambda m, args, out, name=name: size(name, args[0], out)))
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            model(*batch, label_smoothing).backward()
    finally:
        for h in hooks:
            h.remove()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    rows = []
    for side in ("encoder", "decoder"):
        top = float(kept[f"{side} top output"].grad.norm())
        for name, tensor in kept.items():
            if name.startswith(side) and name != f"{side} top output":
                rows.append((name, "grad_ratio", float(tensor.grad.norm()) / top))
    rows += [(name, "update_ratio", value) for name, value in sizes.items()]
    d = model.config.d_model
    for (name, _), res in zip(_sublayers(model), _residuals(model)):
        if res.kind == "concat":
            w = res.merge.weight.detach()
            rows += [(name, "w_x", float(w[:, :d].norm()) / d ** 0.5),
                     (name, "w_f", float(w[:, d:].norm()) / d ** 0.5)]
    return rows


def _residuals(model: Transformer) -> list[Residual]:
    """Each sub-layer's Residual, in the order of `_sublayers`."""
    return [r for layer in model.encoder for r in layer.res] + [r for layer in model.decoder for r in layer.res]
