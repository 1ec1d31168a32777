"""The model: shapes, the positional variants' defining properties, bad configurations,
the learning-rate schedule, and cached decoding against a full forward pass."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
import torch
import torch.nn.functional as F

from posenc.decode import beam_search, going_on, length_penalty, top_k
from posenc.errors import UserError
from posenc.cache import AttentionCache, DecoderCache
from posenc.loss import projection_loss
from posenc.model import build_model, count_parameters
from posenc.model import check as model_check
from posenc.config import (AlibiSettings, ConcatSettings, LearnedSettings, RelativeSettings, RopeSettings,
                           SinusoidalNarrowSettings)
from posenc.positional import VARIANTS, Rotary, alibi_slopes, sinusoid_table
from posenc.training import lr_at

from conftest import SMALL, TINY, model_of


def batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 60, (3, 9), generator=g)
    src[:, -1] = 3
    src[1, 6:] = 0
    src[1, 5] = 3
    tgt = torch.randint(4, 60, (3, 7), generator=g)
    tgt[:, 0] = 2
    return src, tgt


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_output_shape(variant, norm):
    src, tgt = batch()
    assert model_of(variant, norm=norm)(src, tgt).shape == (3, 7, 60)


def test_sinusoid_follows_the_paper_formula_interleaved():
    pe = sinusoid_table(torch.arange(50), 16)
    pos, i = 37, 3
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-5)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-5)


@pytest.mark.parametrize("variant, equivariant", [("none", True), ("sinusoidal", False),
                                                  ("learned", False), ("concat", False),
                                                  ("sinusoidal_narrow", False), ("rope", False), ("alibi", False),
                                                  ("relative", False)])
def test_only_none_is_permutation_equivariant_in_the_encoder(variant, equivariant):
    model = model_of(variant)
    with torch.no_grad():  # give the learned tables a visible size
        for name, p in model.named_parameters():
            if "position" in name:
                p.normal_(0, 1)
    src = torch.randint(4, 60, (1, 8), generator=torch.Generator().manual_seed(2))
    perm = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4])
    with torch.no_grad():
        out = model.encode(src)[0]
        out_perm = model.encode(src[:, perm])[0]
    assert torch.allclose(out[:, perm], out_perm, atol=1e-5) is equivariant


def test_concat_widths_and_parameter_count():
    model = model_of("concat")
    assert model.embed.weight.shape == (60, 24)
    token_part = model.positional.token_part(model.embed(torch.tensor([[5, 6, 7]])))
    position_part = model.positional.position_part(torch.arange(3))
    assert token_part.shape == (1, 3, 32) and position_part.shape == (3, 32)
    assert torch.all(token_part[..., 24:] == 0) and torch.all(position_part[..., :24] == 0)
    assert torch.allclose(position_part[:, 24:], sinusoid_table(torch.arange(3), 8))
    summed = model_of("sinusoidal")
    # the narrower shared table is the only difference from the summed model
    assert count_parameters(summed) - count_parameters(model) == 60 * 8
    learned = model_of("concat", position=ConcatSettings(8, "learned", 64))
    assert count_parameters(learned) - count_parameters(model) == 64 * 8


def test_the_concat_control_differs_from_concat_only_in_summing():
    """sinusoidal_narrow: concat's narrow token table (same parameters, same tied projection),
    zero-padded, plus the full-width sinusoid of `sinusoidal` summed over every dimension."""
    control, concat, summed = model_of("sinusoidal_narrow"), model_of("concat"), model_of("sinusoidal")
    assert control.embed.weight.shape == concat.embed.weight.shape == (60, 24)
    assert count_parameters(control) == count_parameters(concat)
    token_part = control.positional.token_part(control.embed(torch.tensor([[5, 6, 7]])))
    assert token_part.shape == (1, 3, 32) and torch.all(token_part[..., 24:] == 0)
    assert torch.equal(control.positional.position_part(torch.arange(3)),
                       summed.positional.position_part(torch.arange(3)))
    h = torch.randn(1, 3, 32)
    assert torch.equal(control.logits(h), F.linear(h[..., :24], control.embed.weight))


def test_attention_side_variants_add_what_their_papers_add():
    base = count_parameters(model_of("none"))
    assert count_parameters(model_of("rope")) == count_parameters(model_of("alibi")) == base
    # Shaw et al.: a key and a value table of 2k + 1 rows, d_head wide, in each self-attention
    # (2 layers x (encoder + decoder)); cross-attention has none
    assert count_parameters(model_of("relative")) - base == 4 * 2 * (2 * 3 + 1) * 8
    model = model_of("relative")
    assert all(layer.cross_attn.position is None for layer in model.decoder)
    assert model.positional.position_part(torch.arange(5)) is None


@pytest.mark.parametrize("changes, message", [
    (dict(positional="rotary"), "valid variants: sinusoidal, learned, concat, sinusoidal_narrow, none, rope, alibi, relative"),
    (dict(positional="concat", position=ConcatSettings(32, "sinusoidal", 64)),
     "positional.concat.dim (32) must be below model.d_model (32)"),
    (dict(positional="concat", position=ConcatSettings(7, "sinusoidal", 64)),
     "positional.concat.dim (7) must be even"),
    (dict(positional="sinusoidal_narrow", position=SinusoidalNarrowSettings(32)),
     "positional.sinusoidal_narrow.dim (32) must be below model.d_model (32)"),
    (dict(heads=5), "model.heads (5) must divide model.d_model (32)"),
    (dict(positional="rope", position=RopeSettings(10000.0), d_model=36, heads=4),
     "model.d_model / model.heads = 9 dimensions"),
    (dict(positional="alibi", position=AlibiSettings(), d_model=36, heads=3),
     "not model.heads = 3"),
])
def test_bad_model_configurations_fail_clearly(changes, message):
    with pytest.raises(UserError) as e:
        build_model(dataclasses.replace(SMALL, **changes))
    assert message in str(e.value)


@pytest.mark.parametrize("changes, key", [
    (dict(d_ff=10**9), "model.d_ff (1,000,000,000)"),
    (dict(positional="learned", position=LearnedSettings(10**9)), "positional.learned.max_positions (1,000,000,000)"),
    (dict(positional="relative", position=RelativeSettings(10**8)), "positional.relative.clip (100,000,000)"),
    (dict(vocab_size=10**10), "tokenizer.vocab_size (10,000,000,000)"),
])
def test_a_size_too_large_for_this_machine_is_refused_before_anything_is_allocated(changes, key):
    """The estimate comes from a build on the meta device (nothing allocated), so a size that would
    take terabytes fails at once, naming the key, instead of being killed at 20 GB."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with pytest.raises(UserError) as e:
        model_check(dataclasses.replace(SMALL, **changes), "other.yaml")
    message = str(e.value)
    assert message.startswith(f"other.yaml: {key} makes a model whose training state"), message
    assert f"this machine's {memory / 2**30:,.1f} GiB of memory; lower it" in message
    needed = float(message.split("needs about ")[1].split(" GiB")[0].replace(",", ""))
    assert needed * 2**30 > memory


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_memory_check_draws_no_random_numbers(variant):
    """build_model checks first: a check that drew from torch's generator would change every
    weight drawn after it, and so the bits of every training."""
    from conftest import SETTINGS

    for residual in ("sum", "concat"):
        c = dataclasses.replace(SMALL, positional=variant, position=SETTINGS[variant], residual=residual,
                                residual_init="xavier", d_ff=4096)
        torch.manual_seed(0)
        before = torch.get_rng_state()
        model_check(c, "params.yaml")  # fits: no error
        assert torch.equal(torch.get_rng_state(), before)


def test_rope_logits_depend_on_the_distance_only():
    rope = Rotary(16, 10000.0)
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 1, 1, 16, generator=g), torch.randn(1, 1, 1, 16, generator=g)

    def logit(m, n):
        return float(rope.rotate(q, torch.tensor([m])) @ rope.rotate(k, torch.tensor([n])).transpose(-1, -2))

    assert logit(3, 1) == pytest.approx(logit(12, 10), abs=1e-4) == pytest.approx(logit(52, 50), abs=1e-4)
    assert logit(3, 1) != pytest.approx(logit(3, 2), abs=1e-3)
    assert logit(0, 0) == pytest.approx(float(q.flatten() @ k.flatten()), abs=1e-5)  # no rotation at 0
    # the first pair turns by one radian per position (theta_0 = 1): RoFormer eq. 34
    e0 = torch.zeros(1, 1, 1, 16)
    e0[..., 0] = 1
    turned = rope.rotate(e0, torch.tensor([1]))[0, 0, 0]
    assert turned[:2].tolist() == pytest.approx([math.cos(1), math.sin(1)], abs=1e-6)


@pytest.mark.parametrize("heads, expected", [(4, [1 / 4, 1 / 16, 1 / 64, 1 / 256]),
                                             (8, [2 ** -i for i in range(1, 9)])])
def test_alibi_slopes_are_the_papers_geometric_sequence(heads, expected):
    # Press et al. 2022, §3: for n heads, 2^(-8/n), 2^(-16/n), ..., 2^(-8)
    assert alibi_slopes(heads).tolist() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("variant, invariant", [("rope", True), ("alibi", True), ("relative", True),
                                                ("none", True), ("sinusoidal", False),
                                                ("learned", False), ("concat", False),
                                                ("sinusoidal_narrow", False)])
def test_relative_variants_give_the_same_logits_at_any_offset(variant, invariant):
    model = model_of(variant)
    src = torch.randint(4, 60, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        at_0, at_7 = model.first_layer_logits(src), model.first_layer_logits(src, offset=7)
        memory_0, memory_7 = model.encode(src)[0], model.encode(src, offset=7)[0]
    assert torch.allclose(at_0, at_7, atol=1e-4) is invariant
    assert torch.allclose(memory_0, memory_7, atol=1e-4) is invariant


def test_the_four_terms_sum_to_the_models_own_logits():
    for variant in ("sinusoidal", "learned", "concat", "sinusoidal_narrow"):
        model = model_of(variant)
        src = torch.randint(4, 60, (2, 6), generator=torch.Generator().manual_seed(5))
        assert model.logit_split() is None
        with torch.no_grad():
            terms = model.first_layer_terms(src)
            assert torch.allclose(sum(terms.values()), model.first_layer_logits(src), atol=1e-4)
    assert "inside attention" in model_of("rope").logit_split()
    assert "pre-norm" in model_of("sinusoidal", norm="pre").logit_split()


def test_learning_rate_schedule_matches_equation_3():
    d, warmup = 512, 4000
    for step in (1, 100, 3999, 4000, 4001, 100000):
        expected = d ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert lr_at(step, d, warmup, 1.0) == pytest.approx(expected, rel=1e-12)
    assert lr_at(4000, d, warmup, 2.0) == pytest.approx(2 * d ** -0.5 * 4000 ** -0.5)
    rates = [lr_at(s, d, warmup, 1.0) for s in range(1, 10000)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == warmup  # peak at warmup_steps


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(10, 0.6) == pytest.approx((15 / 6) ** 0.6)


CACHE_CASES = [(v, "sum", "identity") for v in VARIANTS] + [("sinusoidal", "concat", "identity"),
                                                             ("sinusoidal", "concat", "xavier"),
                                                             ("sinusoidal", "none", "identity")]


@pytest.mark.parametrize("variant, residual, init", CACHE_CASES)
def test_cached_decoding_equals_a_full_forward_pass(variant, residual, init):
    """For every variant and residual kind, to 1e-5 in float32: step by step, and on after a
    beam reorder."""
    model = model_of(variant, residual=residual, residual_init=init)
    src, tgt = batch()
    with torch.no_grad():
        full = model(src, tgt)
        memory, mask = model.encode(src)
        cache = DecoderCache(model, 7, memory)
        steps = torch.cat([model.decode(tgt[:, i:i + 1], memory, mask, cache) for i in range(7)], 1)
        assert torch.allclose(full, steps, atol=1e-5)
        # three beams of one sentence for three steps; then beam search keeps beams 2, 0, 0 and
        # the cache must continue those prefixes
        beams = src[:1].expand(3, -1)
        memory, mask = model.encode(beams)
        cache = DecoderCache(model, 7, memory)
        for i in range(3):
            model.decode(tgt[:, i:i + 1], memory, mask, cache)
        rows = torch.tensor([2, 0, 0])
        cache.reorder(rows)
        moved = tgt[rows]
        later = torch.cat([model.decode(moved[:, i:i + 1], memory, mask, cache) for i in range(3, 7)], 1)
        assert torch.allclose(model(beams, moved)[:, 3:], later, atol=1e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_beam_search_with_and_without_cache_agree(variant):
    model = model_of(variant)
    src, _ = batch()
    cached = beam_search(model, src, beam=4, lenpen=0.6, max_len_extra=6, use_cache=True)
    full = beam_search(model, src, beam=4, lenpen=0.6, max_len_extra=6, use_cache=False)
    for (a_tokens, a_score), (b_tokens, b_score) in zip(cached, full):
        assert a_tokens == b_tokens and a_score == pytest.approx(b_score, abs=1e-4)
    lengths = (src != 0).sum(1)
    assert all(len(t) < n + 6 for (t, _), n in zip(cached, lengths))  # EOS counts in the limit


def reference_beam_search(model, src: torch.Tensor, beam: int, lenpen: float, max_len_extra: int):
    """Beam search for one sentence, spelled out: every hypothesis's full prefix through the whole
    model, every (hypothesis, token) candidate ranked (fairseq's rule, as posenc.decode states it)."""
    src = src[:, : int((src != 0).sum())]
    limit = src.shape[1] + max_len_extra
    live, finished = [(0.0, [2])], []
    for step in range(limit):
        candidates = []
        for score, prefix in live:
            with torch.no_grad():
                logp = F.log_softmax(model(src, torch.tensor([prefix]))[0, -1], -1)
            for token in range(logp.shape[0]):
                if token not in (0, 2) and (step + 1 < limit or token == 3):
                    candidates.append((score + float(logp[token]), prefix, token))
        candidates = sorted(candidates, key=lambda c: -c[0])[: 2 * beam]
        for score, prefix, token in candidates[:beam]:
            if token == 3 and len(finished) < beam:
                finished.append((score / length_penalty(step + 1, lenpen), prefix[1:]))
        if len(finished) >= beam or step + 1 >= limit:
            break
        live = [(score, prefix + [token]) for score, prefix, token in candidates if token != 3][:beam]
    return max(finished)


@pytest.mark.parametrize("variant", ["sinusoidal", "alibi"])
def test_beam_search_finds_what_ranking_every_candidate_finds(variant):
    """The batched search ranks each hypothesis's 2 x beam best tokens only; a sentence's 2 x beam
    best candidates are always among them, so it must agree with ranking all beam x vocab."""
    model = model_of(variant)
    src, _ = batch()
    found = beam_search(model, src, beam=3, lenpen=0.6, max_len_extra=4)
    for row, (tokens, score) in zip(src, found):
        ref_score, ref_tokens = reference_beam_search(model, row[None], beam=3, lenpen=0.6, max_len_extra=4)
        assert tokens == ref_tokens and score == pytest.approx(ref_score, abs=1e-4)


def test_greedy_is_beam_one_and_picks_the_argmax():
    model = model_of("sinusoidal")
    src, _ = batch()
    (tokens, _), *_ = beam_search(model, src[:1], beam=1, lenpen=0.6, max_len_extra=4)
    with torch.no_grad():
        prefix = torch.tensor([[2] + tokens])
        logits = model(src[:1], prefix)[0, :-1]
        logits[:, [0, 2]] = float("-inf")
    assert logits.argmax(-1).tolist() == tokens


def test_the_decoding_cache_reorders_rows_in_its_own_buffers():
    cache = AttentionCache(capacity=5)
    steps = [torch.arange(4.0).view(4, 1, 1, 1) + 10 * i for i in range(3)]
    for s in steps:
        k, v = cache.append(s, -s)
    buffer = cache.k.data_ptr()
    cache.select(torch.tensor([2, 2, 0]))
    assert cache.k.data_ptr() == buffer and cache.length == 3
    assert cache.k[:, 0, :3, 0].tolist() == [[2, 12, 22], [2, 12, 22], [0, 10, 20]]
    assert torch.equal(cache.v[:, :, :3], -cache.k[:, :, :3])
    k, _ = cache.append(torch.full((3, 1, 1, 1), 7.0), torch.zeros(3, 1, 1, 1))
    assert k[:, 0, :, 0].tolist() == [[2, 12, 22, 7], [2, 12, 22, 7], [0, 10, 20, 7]]
    cache.append(k[:, :, :1], k[:, :, :1])
    with pytest.raises(ValueError, match="beyond the cache's 5 positions"):
        cache.append(k[:, :, :1], k[:, :, :1])


def test_dropping_finished_sentences_keeps_the_rest_and_moves_only_what_it_must():
    done = [False, False, True, False, False, True, False, False, False, True]
    order = going_on(done)
    assert sorted(order) == [i for i, d in enumerate(done) if not d]
    # only the two places of finished sentences below the new end take a sentence from beyond it
    assert [i for i, s in enumerate(order) if s != i] == [2, 5]
    assert going_on([True, True, False]) == [2] and going_on([True]) == []


def test_the_decoding_state_gives_each_sentence_its_beams():
    """Beam search decodes its first step once a sentence, then repeats the state for its beams:
    going on from there equals decoding every beam from the start."""
    model = model_of("sinusoidal")
    src, tgt = batch()
    with torch.no_grad():
        memory, mask = model.encode(src)
        cache = DecoderCache(model, 7, memory)
        model.decode(tgt[:, :1], memory, mask, cache)
        cache.repeat(2)
        assert cache.self_attn[0].k.shape[0] == cache.cross_attn[0].k.shape[0] == 6
        assert cache.self_attn[0].k.is_contiguous() and cache.cross_attn[0].k.is_contiguous()
        doubled, mask2 = tgt.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)
        later = torch.cat([model.decode(doubled[:, i:i + 1], memory, mask2, cache) for i in range(1, 7)], 1)
        full = model(src.repeat_interleave(2, 0), doubled)[:, 1:]
        assert torch.allclose(later, full, atol=1e-5)


@pytest.mark.parametrize("width", [8000, 1001, 40])
def test_top_k_finds_what_torch_topk_finds(width):
    """Over rows as wide as a vocabulary (or not a whole number of chunks, or narrower than k
    chunks), with blocked entries as beam search has them."""
    g = torch.Generator().manual_seed(width)
    x = torch.randn(50, width, generator=g) * 3
    x[:, :3] = float("-inf")  # pad and BOS, never generated
    x[7, :] = float("-inf")
    x[7, 5] = 0.0  # a row at its length limit: only EOS may follow
    values, indices = top_k(x, 8)
    expected = x.topk(8, dim=1)
    finite = values.isfinite()
    assert torch.equal(values, expected.values)
    assert torch.equal(indices[finite], expected.indices[finite])  # -inf ties may come in any order
    assert indices[7, 0] == 5 and finite.sum() == 49 * 8 + 1


@pytest.mark.parametrize("variant", ["sinusoidal", "rope", "relative"])
def test_bits_do_not_depend_on_torchs_fill_of_new_memory(variant):
    """posenc.runtime turns off torch's NaN fill of new tensors under deterministic algorithms:
    nothing posenc computes may read memory it has not written, in training or in beam search."""
    src, tgt = batch()
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.utils.deterministic.fill_uninitialized_memory)
    results = []
    try:
        torch.use_deterministic_algorithms(True)
        for fill in (True, False):
            torch.utils.deterministic.fill_uninitialized_memory = fill
            model = model_of(variant, dropout=0.1).train()
            loss = F.cross_entropy(model(src, tgt).flatten(0, 1), tgt.roll(-1, 1).flatten(),
                                   ignore_index=0, label_smoothing=0.1, reduction="sum")
            loss.backward()
            grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
            found = beam_search(model.eval(), src, beam=4, lenpen=0.6, max_len_extra=6)
            results.append((grads, found))
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.utils.deterministic.fill_uninitialized_memory = before[1]
    (grads_on, found_on), (grads_off, found_off) = results
    assert all(torch.equal(a, b) for a, b in zip(grads_on, grads_off)) and found_on == found_off


@pytest.mark.parametrize("chunk", [1, 5, 4096])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_fused_projection_loss_equals_cross_entropy_of_the_logits(chunk, smoothing):
    """posenc.loss: the loss and its gradients (decoder output and the tied embedding) equal the
    unfused F.linear + F.cross_entropy to float32 rounding, padding left out, for chunks that
    split the tokens unevenly, split them one by one, or take them all at once."""
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(3, 7, 16, generator=g, requires_grad=True)
    weight = (torch.randn(60, 16, generator=g) * 0.3).requires_grad_()
    target = torch.randint(4, 60, (3, 7), generator=g)
    target[1, 4:] = 0
    fused = projection_loss(hidden, weight, target, smoothing, ignore_index=0, chunk=chunk)
    (fused * 0.5).backward()  # a scaled loss, so that backward's factor is checked too
    fused_grads = hidden.grad, weight.grad
    hidden.grad = weight.grad = None
    plain = F.cross_entropy(F.linear(hidden, weight).flatten(0, 1), target.flatten(), ignore_index=0,
                            label_smoothing=smoothing, reduction="sum")
    (plain * 0.5).backward()
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close(fused_grads[0], hidden.grad)
    torch.testing.assert_close(fused_grads[1], weight.grad)
    assert fused_grads[0][1, 4:].abs().sum() == 0  # padded positions get no gradient


@pytest.mark.parametrize("variant", ["sinusoidal", "concat"])
def test_the_models_training_loss_is_the_loss_of_its_logits(variant):
    """forward(src, tgt, target) is the summed label-smoothed loss of forward(src, tgt)'s logits
    (concat projects from the token slice of the decoder output: the same slice either way)."""
    src, tgt = batch()
    model = model_of(variant).eval()
    target = torch.roll(tgt, -1, 1)
    target[1, 5:] = 0
    logits = model(src, tgt)
    plain = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0,
                            label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(model(src, tgt, target, 0.1), plain)


def test_concat_residual_at_the_identity_starts_as_the_summed_model():
    """W = [I I] gives W [x; f(x)] = x + f(x): the first forward pass of the summed model, to
    float32 rounding (the other weights are drawn alike: W takes no random numbers)."""
    src, tgt = batch()
    torch.testing.assert_close(model_of("sinusoidal", residual="concat")(src, tgt),
                               model_of("sinusoidal", residual="sum")(src, tgt))
    xavier = model_of("sinusoidal", residual="concat", residual_init="xavier")
    assert not torch.allclose(xavier(src, tgt), model_of("sinusoidal")(src, tgt), atol=1e-3)


@pytest.mark.parametrize("kind, identity_path", [("sum", True), ("concat", True), ("none", False)])
def test_only_none_has_no_identity_path(kind, identity_path):
    """A sub-layer whose output ignores its input: the residual's output still depends on x
    through the identity path, except without one (`none`), where x gets no gradient at all."""
    from posenc.model import Residual

    res = Residual(8, 0.0, "post", kind)
    x = torch.randn(2, 3, 8, requires_grad=True)
    constant = torch.randn(2, 3, 8)
    out = res(x, lambda y: constant)
    (out * torch.randn_like(out)).sum().backward()
    assert (x.grad is not None and x.grad.abs().sum() > 0) == identity_path


def test_a_residual_kind_is_checked_where_the_params_are_read(tmp_path):
    from posenc import config

    text = TINY.read_text().replace("residual: sum", "residual: product")
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(UserError, match=r"model.residual: 'product'"):
        config.load(tmp_path / "p.yaml", "model", config.ModelConfig, positional="sinusoidal",
                    position=config.SinusoidalSettings(), vocab_size=60, pad_id=0, bos_id=2, eos_id=3)


def test_the_highway_measures_every_layer_and_leaves_the_model_as_it_was():
    from posenc import highway

    model = model_of("sinusoidal", residual="concat").train()
    src, tgt = batch()
    target = torch.roll(tgt, -1, 1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    rows = highway.measure(model, (src, tgt, target), 0.1)
    assert model.training and all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)  # no dropout masks drawn: the training's bits stay
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    got = {(part, m): v for part, m, v in rows}
    layers = model.config.layers
    for side in ("encoder", "decoder"):
        assert got[(f"{side} embeddings", "grad_ratio")] > 0
        for i in range(1, layers + 1):
            assert got[(f"{side} layer {i} input", "grad_ratio")] > 0
    assert len([k for k in got if k[1] == "update_ratio"]) == 5 * layers  # 2 + 3 sub-layers a layer
    halves = [v for (p, m), v in got.items() if m in ("w_x", "w_f")]
    assert len(halves) == 2 * 5 * layers and halves == pytest.approx([1.0] * len(halves))
