"""The residual study's report (posenc residuals) on constructed runs: which cells it compares,
the table and test against `sum` at the same depth, and findings that follow the figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from posenc import config, corpora
from posenc.errors import UserError
from posenc.stages.residuals import (ResidualStudyConfig, findings, geometric_mean, groups, highway_rows,
                                     load, markdown, run_dirs, significance, starts, summary, table_rows)

ROOT = Path(__file__).resolve().parents[1]
REFS = [f"a small dog number {i} runs across the green field" for i in range(40)]
SEEDS = (1, 2)
SCORED = corpora.get("multi30k").scored


def test_the_cells_are_each_depths_sum_then_the_other_kinds():
    study = config.load(ROOT / "params.yaml", "residual_study", ResidualStudyConfig)
    assert groups(study, 3) == [("sum", 3), ("concat", 3), ("none", 3), ("sum", 6), ("concat", 6), ("none", 6)]
    tiny = ResidualStudyConfig(kinds=("concat",), depths=(1,), sum_depths=())
    assert groups(tiny, 1) == [("sum", 1), ("concat", 1)]
    # no sum at a depth: its kinds are reported, not tested
    assert groups(ResidualStudyConfig(("none",), (6,), ()), 3) == [("sum", 3), ("none", 6)]


def test_a_study_listing_a_depth_twice_is_refused(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("depths: [3, 6]", "depths: [3, 3]", 1)
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(UserError, match=r"residual_study.depths: \[3, 3\] lists a value twice"):
        config.load(tmp_path / "p.yaml", "residual_study", ResidualStudyConfig)


def _write_run(where: Path, kind: str, cut: int, emb: float, update: float, w: tuple | None):
    """One run of residual `kind` at 1 layer, all its text in `where` (its results directory):
    hypotheses that drop `cut` words of each reference, its metrics and signatures, and a
    highway log whose embedding ratio is `emb` at both logged updates."""
    corpus = corpora.get("multi30k")
    (where / "hyps").mkdir(parents=True)
    for split in corpus.scored:
        (where / "hyps" / f"{split}.de").write_text("".join(" ".join(r.split()[:10 - cut]) + "\n" for r in REFS))
    (where / "metrics.json").write_text(json.dumps({"parameters": 1000, "dev_ppl": 5.0 + cut,
                                                    **{f"bleu_{s}": 30.0 - cut for s in corpus.scored}}))
    (where / "scores.json").write_text(json.dumps({f"{m}_{s}": 50.0 - cut for m in ("chrf", "bleu_tok")
                                                   for s in corpus.scored}))
    (where / "signatures.json").write_text(json.dumps({"variant": "sinusoidal", "seed": 1, "layers": 1,
                                                       "residual": kind, "residual_init": "identity"}))
    rows = ["step\tpart\tmeasure\tvalue"]
    for step in (100, 200):
        rows += [f"{step}\tencoder embeddings\tgrad_ratio\t{emb}", f"{step}\tdecoder embeddings\tgrad_ratio\t{emb}",
                 f"{step}\tencoder layer 1 input\tgrad_ratio\t{emb * 2}",
                 f"{step}\tencoder layer 1 self-attention\tupdate_ratio\t{update}"]
        if w:
            rows += [f"{step}\tencoder layer 1 self-attention\tw_x\t{w[0]}",
                     f"{step}\tencoder layer 1 self-attention\tw_f\t{w[1]}"]
    (where / "highway_log.tsv").write_text("\n".join(rows) + "\n")


@pytest.fixture
def study(tmp_path):
    """sum (the positional sinusoidal run), concat and none at 1 layer, two seeds each: concat's
    outputs drop one word more than sum's, none's three; the embeddings' gradient ratio is 0.9 for
    sum, 0.5 for concat, 0.01 for none."""
    corpus = corpora.get("multi30k")
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in corpus.scored:
        (raw / f"{split}.de").write_text("\n".join(REFS) + "\n")
    cells = [("sum", 1), ("concat", 1), ("none", 1)]
    for seed in SEEDS:
        _write_run(tmp_path / f"runs/sinusoidal-{seed}", "sum", 1, 0.9, 0.3, None)
        _write_run(tmp_path / f"residual/concat-1-{seed}", "concat", 2, 0.5, 0.6, (1.2, 0.8))
        _write_run(tmp_path / f"residual/none-1-{seed}", "none", 4, 0.01, 2.0, None)
    dirs = run_dirs(cells, SEEDS, 1, tmp_path / "runs", tmp_path / "residual")
    return load(dirs, corpus.scored), cells, raw


def test_table_test_and_findings_follow_the_figures(study):
    runs, cells, raw = study
    corpus = corpora.get("multi30k")
    rows = table_rows(runs, cells, SEEDS, corpus)
    assert [(r["kind"], r["dev_ppl"]["mean"]) for r in rows] == [("sum", 6.0), ("concat", 7.0), ("none", 9.0)]
    sig = significance(runs, cells, SEEDS, corpus, raw, 100, 1)
    for t in corpus.tests:
        assert list(sig[t]) == ["concat vs sum, 1 layer", "none vs sum, 1 layer"]
        assert sig[t]["none vs sum, 1 layer"]["delta"] < sig[t]["concat vs sum, 1 layer"]["delta"] < 0
        assert all(c["p_holm"] >= c["p"] for c in sig[t].values())
    hw = highway_rows(runs, cells, SEEDS)
    text = markdown(rows, sig, hw, cells, SEEDS, corpus)
    assert "| concat | 1 | 1,000 | 7.000 ± 0.000 |" in text
    assert "| none | 1 | 0.01 | 0.01 | 2 |  |" in text and "| concat | 1 | 0.5 | 0.5 | 0.6 | 1.2 / 0.8 |" in text
    said = findings(rows, sig, hw, cells, corpus)
    assert ("at 1 layer `sum` 0.9 / 0.9, `concat` 0.5 / 0.5, `none` 0.01 / 0.01. The sum keeps it within an order "
            "of magnitude of 1 at every depth, as the conjecture says; `concat` keeps it too at 1 layer; `none` does "
            "not, at 1 layer.") in said
    assert "1 of `sum`'s 1 sub-layers change their input by less than its own size" in said
    assert "(|f(x)| / |x| median 0.3, 0.3-0.3): each is a correction smaller than its input" in said
    assert "W's half acting on x ends at norm 1.2" in said and "it weighs x more than f(x), keeping the path" in said
    assert "**none vs sum, 1 layer:**" in said and "did not train" not in said


def test_the_findings_say_where_the_sum_itself_is_impeded_and_most_updates_are_large(study):
    """Conjecture 1 read per depth on both stacks; conjecture 2 by the share of sub-layers."""
    runs, cells, _ = study
    hw = highway_rows(runs, cells, SEEDS)
    for r in hw:
        if (r["kind"], r["part"]) == ("sum", "decoder embeddings"):
            r["value"] = 40.0  # the sum's decoder gradient 40x the top layer's: not within 10x
        if (r["kind"], r["measure"]) == ("sum", "update_ratio"):
            r["value"] = 1.5
    rows = table_rows(runs, cells, SEEDS, corpora.get("multi30k"))
    said = findings(rows, {}, hw, cells, corpora.get("multi30k"))
    assert "Which runs trained" not in said  # dev perplexities 6, 7 and 9: every run trained
    assert "`sum` 0.9 / 40" in said
    assert "The sum itself does not keep it within an order of magnitude of 1 at 1 layer, so the figures" in said
    assert "0 of `sum`'s 1 sub-layers" in said and "most are as large as their input or larger" in said
    for r in rows:  # sum and none end above 10x concat's dev perplexity: they did not train
        r["dev_ppl"]["mean"] = {"sum": 280.0, "concat": 7.0, "none": 436.0}[r["kind"]]
    said = findings(rows, {}, hw, cells, corpora.get("multi30k"))
    assert ("**Which runs trained.** `sum` at 1 layer (280), `none` at 1 layer (436) end at a dev perplexity more "
            "than an order of magnitude above the study's best, `concat` at 1 layer (7):") in said
    assert "the measures below describe their failed training" in said
    assert "At 1 layer even `sum` failed, so every comparison there is between runs that did not train" in said
    assert "The sum does not keep it within an order of magnitude of 1 at 1 layer, where it did not train; `concat` keeps it too at 1 layer; `none` does not, at 1 layer" in said
    assert "At 1 layer, where `sum` did not train, 0 of `sum`'s 1 sub-layers" in said


def test_the_findings_read_a_failed_cell_as_a_failure_not_as_evidence(study):
    """A gap against a run that did not train is that failure; one between two that did not train
    says nothing; W's halves within 10% of each other weigh x and f(x) alike."""
    runs, cells, raw = study
    corpus = corpora.get("multi30k")
    rows = table_rows(runs, cells, SEEDS, corpus)
    sig = significance(runs, cells, SEEDS, corpus, raw, 100, 1)
    hw = highway_rows(runs, cells, SEEDS)
    for r in hw:
        if (r["kind"], r["measure"]) == ("concat", "w_f"):
            r["value"] = 1.15  # 1.2 against 1.15: alike
    for r in rows:
        r["dev_ppl"]["mean"] = {"sum": 6.0, "concat": 7.0, "none": 436.0}[r["kind"]]
    said = findings(rows, sig, hw, cells, corpus)
    assert "`none` did not train at 1 layer: the gap is that failure." in said
    assert "it weighs x and f(x) alike (within 10%)" in said
    for r in rows:
        r["dev_ppl"]["mean"] = {"sum": 300.0, "concat": 7.0, "none": 436.0}[r["kind"]]
    said = findings(rows, sig, hw, cells, corpus)
    assert "**none vs sum, 1 layer:**" in said
    assert said.count("Neither run trained: the gap says nothing about the residual kind.") == 1
    assert "`sum` did not train at 1 layer: the gap is that failure." in said  # concat vs a failed sum


def test_the_mean_over_seeds_of_a_ratio_is_geometric():
    """One seed's vanished gradient does not disappear into another's small one."""
    assert geometric_mean([1e-12, 1e-2]) == pytest.approx(1e-7)
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0) and geometric_mean([0.0, 3.0]) == 0.0


def test_a_missing_evaluation_names_the_stage_that_makes_it(tmp_path):
    with pytest.raises(UserError, match=r"runs/sinusoidal-1/metrics.json: missing \(6 evaluations in all\); "
                                        r"run `dvc repro evaluate_residual evaluate_residual_sum evaluate`"):
        run_dirs([("sum", 1), ("concat", 1), ("none", 1)], SEEDS, 1, tmp_path / "runs", tmp_path / "residual")


def test_a_run_is_tabulated_under_its_own_kind_and_depth_or_refused(tmp_path):
    """The cell a run lands in is what the run says it is (its signatures.json, from its model),
    never the params' word: a `sum` cell whose run was trained with residual `none` is refused."""
    _write_run(tmp_path / "runs/sinusoidal-1", "none", 1, 0.9, 0.3, None)
    dirs = run_dirs([("sum", 1)], (1,), 1, tmp_path / "runs", tmp_path / "residual")
    with pytest.raises(UserError, match=r"sinusoidal-1/signatures.json: a run of residual none with 1 layers, "
                                        r"tabulated as sum with 1; re-run its train and evaluate stages"):
        load(dirs, SCORED)


def test_a_highway_log_without_rows_or_with_short_rows_is_one_line(tmp_path):
    """A seed whose log holds only its header no longer leaves its cell silently."""
    _write_run(tmp_path / "runs/sinusoidal-1", "sum", 1, 0.9, 0.3, None)
    log = tmp_path / "runs/sinusoidal-1/highway_log.tsv"
    dirs = run_dirs([("sum", 1)], (1,), 1, tmp_path / "runs", tmp_path / "residual")
    log.write_text("step\tpart\tmeasure\tvalue\n")
    with pytest.raises(UserError, match=r"highway_log.tsv: holds no measurement, only its header"):
        load(dirs, SCORED)
    log.write_text("step\tpart\tmeasure\tvalue\n100\tencoder embeddings\n")
    with pytest.raises(UserError, match=r"highway_log.tsv: not a highway log"):
        load(dirs, SCORED)


@pytest.mark.parametrize("metrics, said", [
    ("{", "metrics.json: not valid JSON"), ("[]", "metrics.json: not the JSON object evaluate writes"),
    ("{}", "metrics.json: no parameters, dev_ppl, bleu_")])
def test_a_corrupt_or_empty_metrics_file_is_one_line(tmp_path, metrics, said):
    _write_run(tmp_path / "runs/sinusoidal-1", "sum", 1, 0.9, 0.3, None)
    (tmp_path / "runs/sinusoidal-1/metrics.json").write_text(metrics)
    dirs = run_dirs([("sum", 1)], (1,), 1, tmp_path / "runs", tmp_path / "residual")
    with pytest.raises(UserError, match=re.escape(f"sinusoidal-1/{said}")):
        load(dirs, SCORED)


def test_the_findings_say_how_concats_w_started_as_the_runs_say(study):
    runs, cells, _ = study
    rows, hw = table_rows(runs, cells, SEEDS, corpora.get("multi30k")), highway_rows(runs, cells, SEEDS)
    assert starts(runs) == {1: "identity"}
    assert "both 1 at the start (`residual_init: identity`)" in findings(rows, {}, hw, cells, corpora.get("multi30k"),
                                                                         starts(runs))
    for seed in SEEDS:
        runs["concat", 1, seed]["init"] = "xavier"
    said = findings(rows, {}, hw, cells, corpora.get("multi30k"), starts(runs))
    assert "both drawn at random at the start (`residual_init: xavier`)" in said and "both 1 at the start" not in said
    runs["concat", 1, SEEDS[0]]["init"] = "identity"
    with pytest.raises(UserError, match=r"concat at 1 layer: seeds started from identity and xavier W"):
        starts(runs)


def test_the_summary_names_what_trained_and_reads_each_test_against_a_sum_that_trained(study):
    """README's block: a failed kind is marked beside its gap; a depth where `sum` itself failed
    gets one line saying its comparisons say nothing, not a row of meaningless differences."""
    runs, cells, raw = study
    corpus = corpora.get("multi30k")
    rows = table_rows(runs, cells, SEEDS, corpus)
    sig = significance(runs, cells, SEEDS, corpus, raw, 100, 1)
    said = summary(rows, sig, cells, corpus)
    assert "- **Which runs trained**: `sum`, `concat` and `none` at 1 layer." in said
    assert re.search(r"- \*\*concat vs sum, 1 layer\*\*: `concat` minus `sum` (-\d+\.\d\d, ){2}-\d+\.\d\d BLEU: ", said)
    assert "| concat | 1 | 7.000 ± 0.000 | 28.00 ± 0.00 |" in said
    for r in rows:
        r["dev_ppl"]["mean"] = {"sum": 6.0, "concat": 7.0, "none": 436.0}[r["kind"]]
    said = summary(rows, sig, cells, corpus)
    assert ("`sum` and `concat` at 1 layer. Not (a dev perplexity more than an order of magnitude above the best): "
            "`none` at 1 layer.") in said
    assert re.search(r"\*\*none vs sum, 1 layer\*\*: .* BLEU: .* \(`none` did not train\)\.", said)
    for r in rows:
        r["dev_ppl"]["mean"] = {"sum": 300.0, "concat": 7.0, "none": 436.0}[r["kind"]]
    said = summary(rows, sig, cells, corpus)
    assert "vs sum" not in said
    assert "- **At 1 layer** `sum` did not train either: the comparisons there say nothing" in said
