"""Each measurement of the analysis (posenc.measures) on constructed inputs whose answer is known,
and the aggregate that reads every run's measurements."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from posenc.decode import translate
from posenc.errors import UserError
from posenc.measures import (dimension_variance, distance_share, logit_shares, principal_basis, principal_cosines,
                             random_cosines, reorder_words, where_position)
from posenc.stages.analyze import read_measures

from conftest import model_of


def test_the_distance_share_is_one_for_a_pure_distance_bias_and_small_without_positions():
    sentences = [np.array([5, 6, 7, 8, 9, 10, 3]), np.array([9, 10, 11, 3]), np.array([12, 3])]
    alibi = model_of("alibi")
    with torch.no_grad():  # no content in the logits: only ALiBi's -slope * |i - j| is left
        alibi.encoder[0].attn.q.weight.zero_()
    assert distance_share(alibi, sentences)["mean"] == pytest.approx(1.0, abs=1e-6)
    none = distance_share(model_of("none"), sentences)
    assert 0 <= none["mean"] < distance_share(model_of("alibi"), sentences)["mean"]
    assert len(none["per_head"]) == 4


def test_where_position_reads_the_model_not_the_name():
    assert [where_position(model_of(v)) for v in ("learned", "concat", "rope", "relative", "none")] == [
        "first layer", "first layer", "self-attention", "self-attention",
        "nowhere (the decoder's causal mask only)"]


def test_logit_shares_sum_to_one_and_none_is_all_word_word():
    sentences = [np.array([5, 6, 7, 8, 3]), np.array([9, 10, 3])]
    shares = logit_shares(model_of("sinusoidal"), sentences)
    assert sum(shares["mean"].values()) == pytest.approx(1.0, abs=1e-3)  # rounded to 4 places
    assert all(len(v) == 4 for v in shares["per_head"].values())
    none = logit_shares(model_of("none"), sentences)
    assert none["mean"]["word-word"] == pytest.approx(1.0)


def test_principal_angles_of_identical_and_orthogonal_subspaces():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.standard_normal((10, 10)))[0]
    a, b = basis[:, :3], basis[:, 3:6]
    assert np.degrees(np.arccos(principal_cosines(a, a))) == pytest.approx([0, 0, 0], abs=1e-5)
    assert np.degrees(np.arccos(principal_cosines(a, b))) == pytest.approx([90, 90, 90], abs=1e-5)


def test_principal_basis_finds_the_spanned_plane():
    rng = np.random.default_rng(1)
    plane = np.linalg.qr(rng.standard_normal((6, 2)))[0]
    points = rng.standard_normal((200, 2)) @ plane.T * 5 + 0.001 * rng.standard_normal((200, 6))
    basis = principal_basis(points, 0.99)
    assert basis.shape == (6, 2)
    assert principal_cosines(basis, plane) == pytest.approx([1, 1], abs=1e-4)


def test_random_subspace_baseline_is_computed():
    mean, std = random_cosines(32, 4, 4, 200, 0)
    assert 0.05 < mean < 0.6 and std > 0
    full_mean, _ = random_cosines(8, 8, 3, 5, 0)  # a full-space subspace contains any other
    assert full_mean == pytest.approx(1.0)


def test_dimension_variance_counts_dimensions():
    table = np.array([[2.0, 1.0, 5.0], [-2.0, -1.0, 5.0]])  # variances 4, 1, 0
    r = dimension_variance(table, (0.8, 0.9, 0.99))
    assert (r["dims_80pct"], r["dims_90pct"], r["dims_99pct"]) == (1, 2, 2)
    assert r["variance"] == [4.0, 1.0, 0.0]


def test_reordered_sources_keep_their_words():
    lines = ["a man rides a red bike", "two dogs"]
    shuffled = reorder_words(lines, "shuffled", 3)
    assert [sorted(s.split()) for s in shuffled] == [sorted(s.split()) for s in lines]
    assert shuffled != lines and reorder_words(lines, "shuffled", 3) == shuffled
    assert reorder_words(lines, "reversed", 3) == ["bike red a rides man a", "dogs two"]


def test_a_shuffled_source_changes_nothing_for_an_encoder_that_ignores_order():
    """`none`: the encoder is permutation-equivariant and cross-attention sums over the keys, so
    permuting the source leaves the translation unchanged; `sinusoidal` notices."""
    rng = np.random.default_rng(4)
    sources = [np.append(rng.integers(4, 60, size=n), 3) for n in (5, 8, 11)]
    permuted = [np.append(rng.permutation(s[:-1]), 3) for s in sources]
    for variant, same in (("none", True), ("sinusoidal", False)):
        model = model_of(variant)
        with torch.no_grad():  # a sharper model, so that orders give visibly different outputs
            model.embed.weight.mul_(3)
        a = translate(model, sources, 2, 0.6, 6, 1000)
        b = translate(model, permuted, 2, 0.6, 6, 1000)
        assert (a == b) is same, variant


def test_measurements_over_seeds_keep_what_every_seed_agrees_on():
    from posenc.stages.analyze import fmt, mean, over_seeds

    one = {"where": "first layer", "dims": 128, "share": 0.25, "variance": [1.0, 3.0]}
    two = {"where": "first layer", "dims": 128, "share": 0.35, "variance": [3.0, 5.0]}
    combined = over_seeds([one, two])
    assert combined["where"] == "first layer" and combined["dims"] == 128
    assert combined["share"] == {"seed_mean": 0.3, "seed_std": 0.0707, "per_seed": [0.25, 0.35]}
    assert combined["variance"] == [2.0, 4.0]
    assert mean(combined["share"]) == 0.3 and fmt(combined["share"], 2) == "0.30 ± 0.07"
    assert fmt(combined["dims"]) == "128" and over_seeds([one]) == one
    # a count that differs between seeds: one decimal, not the mean's every digit
    assert fmt(over_seeds([{"dims_90pct": 95}, {"dims_90pct": 96}, {"dims_90pct": 95}])["dims_90pct"]) == "95.3 ± 0.6"


def test_the_aggregate_reads_each_runs_own_measurements_and_refuses_a_foreign_file(tmp_path):
    """analyze reads results/runs/<variant>-<seed>/analysis.json alone: a measure keyed by
    variant per seed, and a file of another run (or a corrupt one) is one line naming it."""
    import json

    for variant, seed, share in (("sinusoidal", 1, 0.5), ("rope", 1, 0.75)):
        (tmp_path / f"{variant}-{seed}").mkdir()
        (tmp_path / f"{variant}-{seed}" / "analysis.json").write_text(json.dumps({
            "variant": variant, "seed": seed, "layers": 3, "residual": "sum", "longest_training_sentence": 40,
            "where_position": "first layer", "distance_share": {"mean": share}}))
    got = read_measures(tmp_path, ("sinusoidal", "rope"), (1,))
    assert got == [{"longest_training_sentence": 40, "where_position": {"sinusoidal": "first layer", "rope": "first layer"},
                    "distance_share": {"sinusoidal": {"mean": 0.5}, "rope": {"mean": 0.75}}}]
    (tmp_path / "rope-1" / "analysis.json").write_text(json.dumps({"variant": "alibi", "seed": 1}))
    with pytest.raises(UserError, match=r"rope-1/analysis.json: not the measurements of rope-1; `dvc repro -f measure@rope-1`"):
        read_measures(tmp_path, ("sinusoidal", "rope"), (1,))
    (tmp_path / "rope-1" / "analysis.json").write_text('{"variant": "ro')
    with pytest.raises(UserError, match=r"rope-1/analysis.json: not valid JSON"):
        read_measures(tmp_path, ("sinusoidal", "rope"), (1,))
    with pytest.raises(UserError, match=r"alibi-1/analysis.json: missing; `dvc repro measure@alibi-1` writes it"):
        read_measures(tmp_path, ("alibi",), (1,))


def test_the_word_order_findings_say_when_reversal_costs_far_less_than_shuffling():
    """Issue 51: ALiBi's symmetric encoder bias keeps every distance of a reversed sentence; the
    findings read that off the numbers (not the variant's name)."""
    from posenc.stages.analyze import markdown

    a = {"seeds": [1], "longest_training_sentence": 40, "position_variance": {}, "subspace_angles": {},
         "logit_terms": {}, "where_position": {"alibi": "self-attention", "rope": "self-attention",
                                                "none": "nowhere (the decoder's causal mask only)"},
         "distance_share": {v: {"mean": 0.5, "per_head": [0.5]} for v in ("alibi", "rope", "none")},
         "word_order_bleu": {"alibi": {"original": 30.0, "shuffled": 10.0, "reversed": 28.0},
                             "rope": {"original": 30.0, "shuffled": 10.0, "reversed": 12.0},
                             "none": {"original": 20.0, "shuffled": 20.0, "reversed": 20.0}}}
    text = markdown(a, (0.9,))
    assert ("- alibi: shuffling the source costs 20.00 BLEU, reversing it 2.00: reading the source backwards "
            "costs less than half of that") in text
    assert "- rope: shuffling the source costs 20.00 BLEU, reversing it 18.00.\n" in text
    assert "- none: shuffling the source costs 0.00 BLEU, reversing it 0.00 (its encoder sees a bag of words" in text
