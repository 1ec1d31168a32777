"""§3.5 trained short, tested long, reported (posenc trained-short) on constructed runs: the share
of BLEU within L kept beyond L, its seed-aware test against sinusoidal and none, and findings that
follow the figures."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from posenc.buckets import ShortTrainingConfig
from posenc.errors import UserError
from posenc.significance import corpus_bleu, kept_share, kept_share_bootstrap, sentence_statistics
from posenc.stages.trained_short import (findings, load_runs, markdown, reference_stops, sentence_sets,
                                         significance, summary, table_rows)

SHORT = ShortTrainingConfig(max_len=6, variants=("sinusoidal", "learned", "none"), buckets=(9,))
SEEDS = (1, 2)
# 30 sentences within L (5 words + EOS = 6 subwords here, one id a word) and 30 beyond (8 and 12)
WORDS = [f"w{i}" for i in range(40)]
REFS = ([" ".join(WORDS[i:i + 5]) for i in range(30)] + [" ".join(WORDS[i:i + 7]) for i in range(15)]
        + [" ".join(WORDS[i:i + 11]) for i in range(15)])


def _runs(tmp_path: Path, beyond_cut: dict[str, int]) -> tuple[dict, dict, Path]:
    """Runs whose hypotheses are the references within L and drop `beyond_cut[variant]` words of
    every reference beyond L (seed 2 one word more); their lengths.json as the lengths stage writes it."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "val.de").write_text("\n".join(REFS) + "\n")
    sources = {"val": [np.arange(len(r.split()) + 1) for r in REFS]}  # EOS included
    for variant, cut in beyond_cut.items():
        for seed in SEEDS:
            where = tmp_path / f"runs/{variant}-{seed}"
            (where / "hyps").mkdir(parents=True)
            hyps = [r if len(r.split()) <= 5 else " ".join(r.split()[:-(cut + seed - 1)]) for r in REFS]
            (where / "hyps/val.de").write_text("\n".join(hyps) + "\n")
            buckets = []
            for name, idx in (("1-6", range(30)), ("7-9", range(30, 45)), ("10+", range(45, 60))):
                stats = sentence_statistics([hyps[i] for i in idx], [REFS[i] for i in idx]).sum(0)
                buckets.append({"sources": name, "sentences": len(idx), "bleu": round(corpus_bleu(stats), 2),
                                "chrf": 50.0, "length_ratio": 1.0, "stopped_within_max_len": 0})
            (where / "lengths.json").write_text(json.dumps({"variant": variant, "seed": seed, "max_len": 6,
                                                            "buckets": buckets}))
    short = dataclasses.replace(SHORT, variants=tuple(beyond_cut))
    return load_runs(tmp_path / "runs", short, SEEDS), sources, raw


def test_the_kept_share_and_its_test_against_sinusoidal_and_none(tmp_path):
    runs, sources, raw = _runs(tmp_path, {"sinusoidal": 1, "learned": 4, "none": 1})
    sets, buckets = sentence_sets(runs, sources, raw, SHORT)
    assert [len(b) for b in buckets] == [30, 15, 15]
    within, beyond = sets["learned", 1]
    assert kept_share(within.sum(0), beyond.sum(0)) < kept_share(*(s.sum(0) for s in sets["sinusoidal", 1])) < 1
    rows = table_rows(runs, sets, SHORT.variants, SEEDS)
    assert [b["sentences"] for b in rows[0]["buckets"]] == [30, 15, 15]
    assert rows[0]["buckets"][0]["bleu"]["mean"] == 100.0  # within L the hypotheses are the references
    sig = significance(sets, SHORT.variants, SEEDS, 200, 1)
    assert list(sig) == ["learned vs sinusoidal", "none vs sinusoidal", "learned vs none"]
    assert sig["learned vs sinusoidal"]["delta"] < 0 and sig["learned vs sinusoidal"]["ci"][1] < 0
    assert sig["none vs sinusoidal"]["delta"] == 0  # the same hypotheses
    assert all(r["p_holm"] >= r["p"] for r in sig.values())
    refs = reference_stops([len(r.split()) + 1 for r in REFS], buckets, SHORT.max_len)  # EOS included
    assert refs == [{"within_max_len": 30, "sentences": 30}, {"within_max_len": 0, "sentences": 15},
                    {"within_max_len": 0, "sentences": 15}]
    text = markdown(rows, refs, sig, SHORT, SEEDS, 200)
    assert "| learned vs sinusoidal | -" in text and "were never trained" in text
    assert "sentences per bucket: 1-6: 30, 7-9: 15, 10+: 15" in text
    assert "| references | 100% | 0% | 0% |" in text
    said = findings(rows, refs, sig, SHORT, 200)
    assert ("**Against `sinusoidal`** (Holm-adjusted, 200 resamples): no variant keeps significantly more; "
            "keep significantly less: `learned`.") in said
    # `none vs sinusoidal` read from `none`'s side; `learned` keeps less than `none` as it does than sinusoidal
    assert ("**Against `none`** (Holm-adjusted, 200 resamples): no variant keeps significantly more; "
            "keep significantly less: `learned`.") in said
    assert "this protocol supports it: `learned` keeps significantly less (-0.449 of kept share" in said
    # an interval that excludes 0 only before Holm's adjustment is a lean; one that includes 0, noise
    lean = {**sig, "learned vs sinusoidal": {**sig["learned vs sinusoidal"], "p_holm": 0.3}}
    assert ("this protocol leans towards it without establishing it: `learned` keeps less, an interval that "
            "excludes 0 but not after Holm's adjustment over the 3 comparisons (-0.449") in findings(
                rows, refs, lean, SHORT, 200)
    noise = {**sig, "learned vs sinusoidal": {**sig["learned vs sinusoidal"], "p_holm": 0.3, "ci": [-0.5, 0.1]}}
    assert "this protocol neither supports nor refutes it" in findings(rows, refs, noise, SHORT, 200)
    # the constructed runs never stop early: the drop beyond L is not the early stop
    assert "of those sources' references, 0% are that short. Not every variant ends at or before L" in said
    assert "**Kept beyond L = 6 subwords**, of each variant's BLEU within L: `sinusoidal` " in said


def test_readmes_summary_lists_the_findings_points(tmp_path):
    """README's block: what was trained and tested in one line, then the findings' points, §3.5's
    claim first, one item each."""
    runs, sources, raw = _runs(tmp_path, {"sinusoidal": 1, "learned": 4, "none": 1})
    sets, buckets = sentence_sets(runs, sources, raw, SHORT)
    rows, sig = table_rows(runs, sets, SHORT.variants, SEEDS), significance(sets, SHORT.variants, SEEDS, 200, 1)
    refs = reference_stops([len(r.split()) + 1 for r in REFS], buckets, SHORT.max_len)
    lines = summary(rows, refs, sig, SHORT, SEEDS, 200, ["val"]).splitlines()
    assert lines[0].startswith("Generated by `posenc trained-short`: each variant trained on the pairs of at most "
                               "L = 6 subwords a side, 2 seeds, then tested on every sentence of val; ")
    items = [line[2:] for line in lines[2:]]
    assert lines[1] == "" and all(line.startswith("- **") for line in lines[2:])
    assert items[0].startswith("**§3.5's claim**") and items[-1].startswith("**Early stops beyond L**")
    assert findings(rows, refs, sig, SHORT, 200) == "\n\n".join(
        ["## §3.5 trained short, tested long: what the figures support", *items]) + "\n"


def test_early_stops_are_read_against_the_references():
    """Beyond L, outputs that end by L target positions more often than their references do are
    the stop learned from short targets (Varis & Bojar 2021); the findings say so only then."""
    bucket = {"sources": "7+", "sentences": 10, "outputs": 20, "bleu": {"mean": 10.0, "std": 0.0}}
    rows = [{"variant": v, "kept": {"mean": 0.5, "std": 0.0},
             "buckets": [{**bucket, "sources": "1-6", "stopped_within_max_len": 20},
                         {**bucket, "stopped_within_max_len": stops}]} for v, stops in (("sinusoidal", 18), ("none", 16))]
    said = findings(rows, [{"within_max_len": 10, "sentences": 10}, {"within_max_len": 2, "sentences": 10}], {}, SHORT, 50)
    assert ("`sinusoidal` 90%, `none` 80%; of those sources' references, 20% are that short. Every variant ends at "
            "or before L more often than the references do (by 60 to 70 points)") in said
    said = findings(rows, [{"within_max_len": 10, "sentences": 10}, {"within_max_len": 9, "sentences": 10}], {}, SHORT, 50)
    assert "90% are that short. Not every variant ends at or before L more often" in said


def test_runs_of_bleu_zero_within_l_support_no_conclusion(tmp_path):
    """The tiny profile's models: no BLEU within L, so no share and no test."""
    bleu0 = [(np.zeros((3, 10), dtype=np.int64), np.zeros((3, 10), dtype=np.int64))] * 2
    assert kept_share_bootstrap(bleu0, bleu0, 50, 1)["delta"] is None
    runs, sources, raw = _runs(tmp_path, {"sinusoidal": 1, "learned": 1, "none": 1})
    sets = {k: (np.zeros_like(w), b) for k, (w, b) in sentence_sets(runs, sources, raw, SHORT)[0].items()}
    rows = table_rows(runs, sets, SHORT.variants, SEEDS)
    assert all(r["kept"] is None for r in rows)
    assert "support no conclusion" in findings(rows, [], significance(sets, SHORT.variants, SEEDS, 50, 1), SHORT, 50)


def test_a_missing_run_and_a_cut_hypothesis_file_are_one_line(tmp_path):
    with pytest.raises(UserError, match=r"sinusoidal-1/lengths.json: missing; run `dvc repro evaluate_short@sinusoidal-1`"):
        load_runs(tmp_path, dataclasses.replace(SHORT, variants=("sinusoidal",)), SEEDS)
    runs, sources, raw = _runs(tmp_path, {"sinusoidal": 1})
    (tmp_path / "runs/sinusoidal-2/hyps/val.de").write_text("one line\n")
    with pytest.raises(UserError, match=r"val.de: 1 lines for 60 sources; re-run `dvc repro -f evaluate_short@sinusoidal-2`"):
        sentence_sets(runs, sources, raw, SHORT)


def test_runs_scored_under_other_buckets_or_another_l_are_refused(tmp_path):
    """The table's headers come from the params and its cells from lengths.json: the two must
    have been made under one L and one set of buckets."""
    _runs(tmp_path, {"sinusoidal": 1})
    other = dataclasses.replace(SHORT, variants=("sinusoidal",), buckets=(8,))
    with pytest.raises(UserError, match=r"sinusoidal-1/lengths.json: scored with L = 6 in buckets \['1-6', '7-9', "
                                        r"'10\+'\], the params say L = 6 in \['1-6', '7-8', '9\+'\]"):
        load_runs(tmp_path / "runs", other, SEEDS)
    path = tmp_path / "runs/sinusoidal-1/lengths.json"
    path.write_text(path.read_text().replace('"seed": 1', '"seed": 2'))
    with pytest.raises(UserError, match=r"not the lengths of sinusoidal-1"):
        load_runs(tmp_path / "runs", dataclasses.replace(SHORT, variants=("sinusoidal",)), SEEDS)
    path.write_text('{"buck')
    with pytest.raises(UserError, match=r"sinusoidal-1/lengths.json: not valid JSON"):
        load_runs(tmp_path / "runs", dataclasses.replace(SHORT, variants=("sinusoidal",)), SEEDS)
    for foreign in ("{}", "[]", '{"buckets": [1, 2]}'):
        path.write_text(foreign)
        with pytest.raises(UserError, match=r"sinusoidal-1/lengths.json: not the lengths of sinusoidal-1; "
                                            r"`dvc repro -f evaluate_short@sinusoidal-1`"):
            load_runs(tmp_path / "runs", dataclasses.replace(SHORT, variants=("sinusoidal",)), SEEDS)
