"""The report's pieces on constructed inputs, and README.md against the generated files."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc import corpora
from posenc.readme import sync
from posenc.stages.report import markdown, paired_bootstrap, summarize, table_rows

ROOT = Path(__file__).resolve().parents[1]
REFS = [f"a small dog number {i} runs across the green field" for i in range(60)]


def test_summaries_over_seeds():
    assert summarize([30.0]) == {"mean": 30.0, "std": None, "n": 1}
    s = summarize([30.0, 32.0, 34.0])
    assert s["mean"] == 32.0 and s["std"] == 2.0 and s["n"] == 3


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


def _run(variant, seed, bleu):
    corpus = corpora.get("multi30k")
    return {"variant": variant, "seed": seed, "parameters": 1000, "dev_ppl": 5.0 + seed,
            "bleu": {s: bleu + seed for s in corpus.scored}, "chrf": {s: 50.0 for s in corpus.scored},
            "signature": {"bleu": "BLEU sig", "chrf": "chrF sig"}}


def test_table_rows_and_markdown_carry_every_column_and_the_paper_rows():
    corpus = corpora.get("multi30k")
    runs = [_run("sinusoidal", 1, 30.0), _run("sinusoidal", 2, 30.0), _run("none", 1, 20.0),
            _run("none", 2, 20.0)]
    rows = table_rows(runs, corpus)
    assert [r["variant"] for r in rows] == ["sinusoidal", "none"]
    assert rows[0]["bleu_val"] == {"mean": 31.5, "std": 0.707, "n": 2}
    sig = {t: {"sinusoidal": {"bleu": 31, "mean": 31, "ci": 1, "p": None},
               "none": {"bleu": 21, "mean": 21, "ci": 1, "p": 0.001}} for t in corpus.tests}
    prov = {"bleu_signature": "BLEU sig", "chrf_signature": "chrF sig", "code_revision": "abc",
            "versions": {"torch": "2.13.0"}, "data_md5_from_dvc_lock": {"data/raw/multi30k": "f00"}}
    text = markdown(rows, sig, corpus, prov, "sinusoidal")
    assert "| sinusoidal | 1,000 | 6.5 ± 0.707 | 31.5 ± 0.707 |" in text
    assert "paper: (E) learned | 65M | 4.92 | 25.7" in text and "BLEU sig" in text and "f00" in text
    assert "p = 0.001" in text


def test_readme_blocks_are_copied_from_their_files(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results/t.md").write_text("| a |\n")
    text = "intro\n<!-- begin: results/t.md -->\nold\n<!-- end: results/t.md -->\noutro\n"
    assert sync(text, tmp_path) == "intro\n<!-- begin: results/t.md -->\n| a |\n<!-- end: results/t.md -->\noutro\n"


def test_readme_shows_the_committed_results():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "<!-- begin: results/table.md -->" in text
    assert sync(text, ROOT) == text, "README.md is stale: run `make readme`"
