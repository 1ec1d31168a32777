"""CTranslate2, the engine MT users deploy with: a posenc model as its `TransformerSpec`, and
its beam search with posenc's settings (`posenc export` writes the model; the decoding benchmark
and tests/test_export.py use both). The package `ctranslate2` is an optional extra: `pip install
-e '.[export]'` in the project.

CTranslate2's TransformerSpec is an encoder-decoder with the paper's post-norm layers, so the
weights map one to one; what differs is said where it is mapped:
- The token table is exported already scaled by sqrt(width) (§3.4), because CTranslate2 would
  scale by sqrt(d_model): for `concat` and its control the table is narrower than d_model. The
  tied pre-softmax projection is exported as its own, unscaled, matrix.
- `concat` and `sinusoidal_narrow` are sums of zero-padded parts (posenc.positional), so they are
  exported as sums: the token table padded to d_model, the position table beside it.
- The position tables are exported as tables, `--positions` rows for the unbounded sinusoid:
  CTranslate2's own sinusoid lays sines and cosines out in halves, this paper's interleaves them.
- `none` gets a table of zeros (CTranslate2 adds a table unless the attention has positions).
- `rope` maps to CTranslate2's interleaved rotary embeddings over the whole head, `relative` to
  its Shaw et al. relative positions (keys and values). `alibi` cannot be expressed: CTranslate2's
  encoder has no ALiBi (its decoder has it, in the causal form).
"""

from __future__ import annotations

import numpy as np
import torch

from posenc.decode import length_penalty
from posenc.errors import UserError
from posenc.model import Transformer

# What CTranslate2 cannot express, by variant: the one line `posenc export` refuses with.
NOT_EXPRESSIBLE = {"alibi": "CTranslate2's Transformer encoder has no ALiBi (its decoder has the "
                            "causal form only), so an encoder-decoder with ALiBi cannot be expressed"}


def engine():
    """The ctranslate2 package, or a one-line error saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError("the ctranslate2 package is not installed; install the extra: "
                        "pip install -e '.[export]' in the project (or pip install ctranslate2)") from None
    return ctranslate2


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _position_table(model: Transformer, rows: int) -> np.ndarray:
    """The d_model-wide vectors the first layer adds at positions 0 .. rows - 1 (zeros where the
    variant adds none)."""
    part = model.positional.position_part(torch.arange(rows))
    return np.zeros((rows, model.config.d_model), np.float32) if part is None else _np(part)


def spec(model: Transformer, sp, positions: int):
    """The CTranslate2 TransformerSpec of `model`, with the vocabulary of its SentencePiece model
    `sp` and `positions` rows of an unbounded (sinusoidal) position table."""
    engine()
    from ctranslate2.specs import transformer_spec as ts

    c = model.config
    if c.positional in NOT_EXPRESSIBLE:
        raise UserError(f"positional variant {c.positional}: {NOT_EXPRESSIBLE[c.positional]}")
    if c.residual != "sum":  # the residual study's other kinds (posenc.model.Residual)
        raise UserError(f"model.residual {c.residual}: CTranslate2's layers add their input to their "
                        f"output (x + f(x)), so only the summed residual can be expressed")
    pre = c.norm == "pre"
    attention = {"relative_position": c.positional == "relative"}
    if c.positional == "rope":  # the whole head, pairs (2i, 2i + 1): posenc.positional.Rotary
        attention |= {"rotary_dim": 0, "rotary_interleave": True, "rotary_base": float(c.position.base)}
    encoder = ts.TransformerEncoderSpec(c.layers, c.heads, pre_norm=pre, **attention)
    decoder = ts.TransformerDecoderSpec(c.layers, c.heads, pre_norm=pre, **attention)
    out = ts.TransformerSpec(encoder, decoder)

    width = model.positional.token_dim
    table = torch.nn.functional.pad(model.embed.weight, (0, c.d_model - width))  # (vocab, d_model)
    rows = model.max_len or positions
    for side in (encoder, decoder):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = _np(table * model.scale)
        side.scale_embeddings = False
        if hasattr(side, "position_encodings"):
            side.position_encodings.encodings = _position_table(model, rows)
        if pre:
            _norm(side.layer_norm, model.enc_norm if side is encoder else model.dec_norm)
    decoder.projection.weight = _np(table)

    for layer, source in zip(encoder.layer, model.encoder):
        _attention(layer.self_attention, source.attn, source.res[0].norm, self_attention=True)
        _ffn(layer.ffn, source.ff, source.res[1].norm)
    for layer, source in zip(decoder.layer, model.decoder):
        _attention(layer.self_attention, source.self_attn, source.res[0].norm, self_attention=True)
        _attention(layer.attention, source.cross_attn, source.res[1].norm, self_attention=False)
        _ffn(layer.ffn, source.ff, source.res[2].norm)

    out.config.unk_token, out.config.bos_token = sp.id_to_piece(sp.unk_id()), sp.id_to_piece(sp.bos_id())
    out.config.eos_token, out.config.decoder_start_token = sp.id_to_piece(sp.eos_id()), out.config.bos_token
    out.config.add_source_eos = True  # posenc's sources end in EOS (posenc.tokens)
    out.config.layer_norm_epsilon = model.encoder[0].res[0].norm.eps
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    out.register_source_vocabulary(pieces)
    out.register_target_vocabulary(pieces)
    out.validate()
    return out


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _attention(spec, attn, norm, self_attention: bool) -> None:
    """Self-attention's projections fused as CTranslate2 reads them ([q; k; v], then o); cross-
    attention's as [q], [k; v], o. The layer's post-norm (or pre-norm) LayerNorm goes with it."""
    q, k, v, o = (_np(m.weight) for m in (attn.q, attn.k, attn.v, attn.o))
    linears = [np.concatenate([q, k, v]), o] if self_attention else [q, np.concatenate([k, v]), o]
    for linear, weight in zip(spec.linear, linears):
        linear.weight = weight
    _norm(spec.layer_norm, norm)
    if attn.position is not None and hasattr(spec, "relative_position_keys"):
        spec.relative_position_keys = _np(attn.position.key)
        spec.relative_position_values = _np(attn.position.value)


def _ffn(spec, ff, norm) -> None:
    for linear, source in zip((spec.linear_0, spec.linear_1), (ff[0], ff[2])):
        linear.weight, linear.bias = _np(source.weight), _np(source.bias)
    _norm(spec.layer_norm, norm)


def search(translator, sp, sources: list[list[str]], beam: int, lenpen: float,
           max_len_extra: int) -> list[list[str]]:
    """Source subwords (without EOS: the exported model adds it) translated by a CTranslate2
    model with posenc's beam search settings (posenc.decode): the beam, each sentence's length
    limit (its subwords + EOS + max_len_extra, so at most its subwords + max_len_extra output
    subwords; sentences of one length share a batch, so a batch shares it), neither padding nor
    BOS ever generated, and GNMT's length penalty. CTranslate2's own penalty divides by
    length^alpha, not ((5 + length) / 6)^alpha, so it searches with none and returns its `beam`
    finished hypotheses with their summed log-probabilities (EOS included), and the best of them
    by GNMT's penalty is taken here, as posenc.decode takes it (one stopped at the limit, without
    EOS, only when none ended). The best hypothesis of each, without EOS."""
    never = [[sp.id_to_piece(sp.pad_id())], [sp.id_to_piece(sp.bos_id())]]
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(sources):
        by_length.setdefault(len(p), []).append(i)
    out: list[list[str]] = [[] for _ in sources]
    for n, idx in sorted(by_length.items()):
        results = translator.translate_batch([sources[i] for i in idx], beam_size=beam, length_penalty=0,
                                             num_hypotheses=beam, return_scores=True,
                                             max_decoding_length=n + max_len_extra,
                                             # EOS first is a hypothesis of posenc's search too (the
                                             # empty translation); CTranslate2 offers it only at 0
                                             min_decoding_length=0,
                                             suppress_sequences=never, max_batch_size=64)
        for i, r in zip(idx, results):
            # a hypothesis of the limit's length was stopped there without EOS (its score lacks
            # EOS's log-probability): one that ended goes first
            ended = [h for h in zip(r.scores, r.hypotheses) if len(h[1]) < n + max_len_extra]
            out[i] = max(ended or zip(r.scores, r.hypotheses),
                         key=lambda h: h[0] / length_penalty(len(h[1]) + 1, lenpen))[1]
    return out
