"""The tests of a difference against the baseline (posenc.significance), on constructed systems."""

from __future__ import annotations

import random

import pytest
from sacrebleu.metrics import BLEU

from posenc.significance import corpus_bleu, holm, paired_bootstrap, seed_bootstrap, sentence_statistics

REFS = [f"a small dog number {i} runs across the green field" for i in range(60)]


def degraded(keep: float, seed: int) -> list[str]:
    """The references with words dropped at random: lower `keep`, lower BLEU; `seed` plays the
    part of a training seed."""
    rng = random.Random(seed)
    return [" ".join(w for w in r.split() if rng.random() < keep) or "a" for r in REFS]


def test_statistics_give_sacrebleus_corpus_bleu():
    hyps = degraded(0.8, 1)
    assert corpus_bleu(sentence_statistics(hyps, REFS).sum(0)) == pytest.approx(
        BLEU().corpus_score(hyps, [REFS]).score, abs=1e-9)


def test_sacrebleus_private_statistics_are_what_significance_py_reads():
    """posenc.significance reads BLEU's private _extract_corpus_statistics (per-sentence sufficient
    statistics; sacreBLEU has no public call for them): pyproject.toml bounds sacreBLEU below 3, and
    this fails loudly if a 2.x release moves or reshapes it: one row per sentence, hypothesis and
    reference length, then matched and total n-grams for n = 1..4."""
    import sacrebleu

    assert sacrebleu.__version__.split(".")[0] == "2", sacrebleu.__version__
    rows = BLEU()._extract_corpus_statistics(["the cat sat", "a dog"], [["the cat sat down", "a dog"]])
    assert [list(r) for r in rows] == [[3, 4, 3, 2, 1, 0, 3, 2, 1, 0], [2, 2, 2, 1, 0, 0, 2, 1, 0, 0]]


def test_a_system_better_on_every_seed_is_significant():
    base = [sentence_statistics(degraded(0.6, s), REFS) for s in (1, 2, 3)]
    better = [sentence_statistics(degraded(0.9, s), REFS) for s in (4, 5, 6)]
    result = seed_bootstrap(base, better, samples=300, seed=1)
    assert result["delta"] > 10 and result["ci"][0] > 0 and result["p"] < 0.01
    assert seed_bootstrap(base, better, samples=300, seed=1) == result  # seeded


def test_seeds_of_the_same_system_are_not_significantly_different():
    base = [sentence_statistics(degraded(0.7, s), REFS) for s in (1, 2, 3)]
    same = [sentence_statistics(degraded(0.7, s), REFS) for s in (4, 5, 6)]
    result = seed_bootstrap(base, same, samples=300, seed=1)
    assert result["ci"][0] < 0 < result["ci"][1] and result["p"] > 0.05


def test_seed_variance_widens_the_interval():
    """The same sentences, but one system's seeds spread widely: resampling seeds must show it,
    where a test over one run's sentences cannot."""
    base = [sentence_statistics(degraded(0.7, s), REFS) for s in (1, 2, 3)]
    steady = [sentence_statistics(degraded(0.75, s), REFS) for s in (4, 5, 6)]
    spread = [sentence_statistics(degraded(k, s), REFS) for k, s in ((0.55, 4), (0.75, 5), (0.95, 6))]
    narrow, wide = seed_bootstrap(base, steady, 300, 1)["ci"], seed_bootstrap(base, spread, 300, 1)["ci"]
    assert wide[1] - wide[0] > 2 * (narrow[1] - narrow[0])


def test_holm_adjusts_step_down_and_keeps_the_order():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    assert adjusted == {"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5}


def test_paired_bootstrap_separates_a_better_system_from_a_copy():
    weak = [" ".join(r.split()[:4]) for r in REFS]
    close = [REFS[0]] + weak[1:]  # one sentence of 60 better: not a significant difference
    systems = [("close", close), ("better", list(REFS))]
    result = paired_bootstrap(("base", weak), systems, REFS, samples=200, seed=12345)
    assert result["better"]["bleu"] == 100.0 and result["better"]["p"] < 0.05
    assert result["close"]["p"] > 0.05 and result["base"]["p"] is None
    assert result["close"]["ci"] > 0 and abs(result["close"]["mean"] - result["close"]["bleu"]) < result["close"]["ci"]
    again = paired_bootstrap(("base", weak), systems, REFS, samples=200, seed=12345)
    assert again == result  # a fixed seed gives the same confidence intervals


def test_no_resample_across_zero_gives_the_floor_of_the_resampling_not_zero():
    """Issue 51: a p of 0 printed as "p < 0.001" claimed more than 1,000 resamples can show; the
    two-sided p counts (k + 1) / (B + 1) on the smaller side, so its floor is 2 / (B + 1)."""
    from posenc.tables import floor, p_is

    base = [sentence_statistics(degraded(0.3, s), REFS) for s in (1, 2, 3)]
    better = [sentence_statistics(degraded(1.0, s), REFS) for s in (4, 5, 6)]
    result = seed_bootstrap(base, better, 1000, 0)
    assert result["delta"] > 0 and result["p"] == round(floor(1000), 4) == 0.002
    assert p_is(result["p"], 1000) == "p ≤ 0.002 (B = 1,000)"
    assert holm({"a": result["p"], "b": 0.3}) == {"a": 0.004, "b": 0.3}  # Holm multiplies the bound
    assert p_is(0.12, 1000) == "p = 0.12"


def test_a_count_agrees_with_its_noun():
    """The reports' "1 seed", "3 seeds", "6 layers": one helper, so a one-seed run reads right."""
    from posenc.tables import count

    assert [count(n, "seed") for n in (0, 1, 3)] == ["0 seeds", "1 seed", "3 seeds"]
