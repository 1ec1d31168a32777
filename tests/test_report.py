"""The report's pieces on constructed inputs, and README.md against the generated files."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc import corpora
from posenc.readme import sync
from posenc.stages.report import (extrapolation_rows, kendall_tau, markdown, ranking_along_training,
                                  run_rows, summarize, table_rows)

ROOT = Path(__file__).resolve().parents[1]
REFS = [f"a small dog number {i} runs across the green field" for i in range(60)]


def test_summaries_over_seeds():
    assert summarize([30.0]) == {"mean": 30.0, "std": None, "n": 1}
    s = summarize([30.0, 32.0, 34.0])
    assert s["mean"] == 32.0 and s["std"] == 2.0 and s["n"] == 3


def _extrapolation(bleu: float, seed: int) -> dict:
    return {"longest_training_source": 53, "longest_training_target": 55, "table_rows": None,
            "splits": {"test_2016_flickr": {str(k): {
                "inputs": 1000 // k, "bleu": bleu - 2 * k + seed, "chrf": 50.0, "bleu_signature": "sig",
                "length_ratio": 1.0 / k,
                "mean_source_positions": 15.0 * k, "max_source_positions": 20 * k,
                "max_output_positions": 22 * k, "longer_than_training": 0.0 if k < 4 else 0.5,
                "at_length_limit": 1 if k == 8 else 0} for k in (1, 2, 4, 8)}}}


def _run(variant, seed, bleu):
    corpus = corpora.get("multi30k")
    return {"variant": variant, "seed": seed, "parameters": 1000, "dev_ppl": 5.0 + seed,
            "bleu": {s: bleu + seed for s in corpus.scored}, "chrf": {s: 50.0 for s in corpus.scored},
            "bleu_tok": {s: bleu + seed + 1 for s in corpus.scored},
            "signature": {"bleu": "BLEU sig", "chrf": "chrF sig"}, "extrapolation": _extrapolation(bleu, seed)}


def test_table_rows_and_markdown_carry_every_column_and_the_paper_rows():
    corpus = corpora.get("multi30k")
    runs = [_run("sinusoidal", 1, 30.0), _run("sinusoidal", 2, 30.0), _run("none", 1, 20.0),
            _run("none", 2, 20.0)]
    rows = table_rows(runs, corpus)
    assert [r["variant"] for r in rows] == ["sinusoidal", "none"]
    assert rows[0]["bleu_val"] == {"mean": 31.5, "std": 0.707, "n": 2}
    assert rows[0]["bleu_tok_val"]["mean"] == 32.5
    assert [(r["variant"], r["seed"], r["bleu_val"]) for r in run_rows(runs, corpus)] == [
        ("sinusoidal", 1, 31.0), ("sinusoidal", 2, 32.0), ("none", 1, 21.0), ("none", 2, 22.0)]
    seeds = {"delta": -10.0, "ci": [-11.0, -9.0], "p": 0.0, "p_holm": 0.0, "samples": 1000}
    sig = {t: {"none": {"seeds": seeds, "first_seed": {"bleu": 21, "mean": 21, "ci": 1, "p": 0.001}}}
           for t in corpus.tests}
    curves = {"sinusoidal-1": [(100, 9.0), (200, 6.0)], "sinusoidal-2": [(100, 9.0), (200, 6.0)],
              "none-1": [(100, 8.0), (200, 7.0)], "none-2": [(100, 8.0), (200, 7.0)]}
    ranking = ranking_along_training(curves, runs)
    assert ranking["mean"][100] == {"order": ["none", "sinusoidal"], "tau_vs_last": -1.0}
    assert ranking["mean"][200]["tau_vs_last"] == 1.0 and ranking["per_seed"][100] == {1: -1.0, 2: -1.0}
    extrapolation = extrapolation_rows(runs)
    k8 = next(r for r in extrapolation if r["variant"] == "none" and r["k"] == 8)
    assert k8["bleu"] == {"mean": 5.5, "std": 0.707, "n": 2} and k8["at_length_limit"] == 2
    prov = {"bleu_signature": "BLEU sig", "chrf_signature": "chrF sig", "code_revision": "abc",
            "versions": {"torch": "2.13.0"}, "data_md5_from_dvc_lock": {"data/raw/multi30k": "f00"}}
    text = markdown(rows, sig, ranking, extrapolation, corpus, prov, "sinusoidal", runs)
    assert "| sinusoidal | 1,000 | 6.5 ± 0.707 | 31.5 ± 0.707 |" in text
    assert "paper: (E) learned | 65M | 4.92 | 25.7" in text and "BLEU sig" in text and "f00" in text
    assert "-10.00 [-11.00, -9.00], p = < 0.001 (< 0.001); seed 1: p = 0.001" in text
    assert "| 200 | sinusoidal, none | 1 | 1, 1 |" in text
    assert "k = 8 (n = 125, longer 50%, up to 160 positions)" in text and "5.5 ± 0.707 (ratio 0.125), at limit 2" in text
    assert "tok+compound-split BLEU (comparable with Vaswani et al. Tables 2-3" in text


def test_kendall_tau():
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1.0
    assert kendall_tau(["a", "b", "c"], ["b", "a", "c"]) == pytest.approx(1 / 3, abs=1e-3)


def test_readme_blocks_are_copied_from_their_files(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results/t.md").write_text("| a |\n")
    text = "intro\n<!-- begin: results/t.md -->\nold\n<!-- end: results/t.md -->\noutro\n"
    assert sync(text, tmp_path) == "intro\n<!-- begin: results/t.md -->\n| a |\n<!-- end: results/t.md -->\noutro\n"


def test_readme_shows_the_committed_results():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "<!-- begin: results/table.md -->" in text
    assert sync(text, ROOT) == text, "README.md is stale: run `make readme`"
