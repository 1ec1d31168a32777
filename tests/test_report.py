"""The report's pieces on constructed inputs, and README.md against the generated files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc import corpora
from posenc.errors import UserError
from posenc.stages.report import (comparisons, extrapolation_rows, findings, kendall_tau, markdown, summary,
                                  ranking_along_training, run_rows, significance, summarize, table_rows)

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
    seeds = {"delta": -10.0, "ci": [-11.0, -9.0], "p": 0.002, "p_holm": 0.006, "samples": 1000}
    sig = {t: {"none vs sinusoidal": {"variant": "none", "reference": "sinusoidal", "seeds": seeds,
                                      "first_seed": {"bleu": 21, "mean": 21, "ci": 1, "p": 0.001,
                                                     "seed": 1, "identical": False}}}
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
    assert "| sinusoidal | 1,000 | 6.500 ± 0.707 | 31.50 ± 0.71 |" in text
    assert "paper: (E) learned | 65M | 4.92 | 25.7" in text and "BLEU sig" in text and "f00" in text
    # no resample across zero: the floor of 1,000 resamples, said as a bound (issue 51)
    assert "| none vs sinusoidal | -10.00 [-11.00, -9.00], p ≤ 0.002 (B = 1,000) (0.006); seed 1: p = 0.001" in text
    assert "| 200 | sinusoidal, none | 1 | 1, 1 |" in text
    assert "k = 8 (n = 125, longer 50%, up to 160 positions)" in text and "5.500 ± 0.707 (ratio 0.125), at limit 2" in text
    assert "tok+compound-split BLEU (comparable with Vaswani et al. Tables 2-3" in text


def test_comparisons_are_against_the_baseline_then_each_control():
    variants = ["sinusoidal", "learned", "concat", "sinusoidal_narrow"]
    assert comparisons(variants, "sinusoidal") == [
        ("learned", "sinusoidal"), ("concat", "sinusoidal"), ("sinusoidal_narrow", "sinusoidal"),
        ("concat", "sinusoidal_narrow")]
    assert comparisons(["sinusoidal", "concat"], "sinusoidal") == [("concat", "sinusoidal")]
    with pytest.raises(UserError, match="report.baseline 'rope' is not among the variants"):
        comparisons(variants, "rope")


def test_significance_tests_the_control_pair_on_real_hypotheses(tmp_path):
    corpus = corpora.get("multi30k")
    for t in corpus.tests:
        (tmp_path / f"{t}.de").write_text("\n".join(REFS) + "\n")
    # concat is the reference verbatim, its control drops the last word, sinusoidal the last two;
    # seed 1 of each drops one more word on every other line (a seed effect)
    drop = {"concat": 0, "sinusoidal_narrow": 1, "sinusoidal": 2}
    runs = []
    for v, k in drop.items():
        for seed in (1, 2):
            hyps = tmp_path / f"{v}-{seed}"
            hyps.mkdir()
            lines = []
            for i, words in enumerate(r.split() for r in REFS):
                cut = k + (i % 2 if seed == 1 else 0)
                lines.append(" ".join(words[:len(words) - cut]))
            for t in corpus.tests:
                (hyps / f"{t}.de").write_text("\n".join(lines) + "\n")
            runs.append({"variant": v, "seed": seed, "hyps": hyps})
    sig = significance(runs, corpus, tmp_path, "sinusoidal", 200, 1)
    assert list(sig[corpus.tests[0]]) == ["concat vs sinusoidal", "sinusoidal_narrow vs sinusoidal",
                                          "concat vs sinusoidal_narrow"]
    for t in corpus.tests:
        control = sig[t]["concat vs sinusoidal_narrow"]
        assert (control["variant"], control["reference"]) == ("concat", "sinusoidal_narrow")
        assert control["seeds"]["delta"] > 0 and control["seeds"]["ci"][0] > 0
        assert control["first_seed"]["p"] < 0.05
        assert 0 < sig[t]["sinusoidal_narrow vs sinusoidal"]["seeds"]["delta"] < sig[t]["concat vs sinusoidal"]["seeds"]["delta"]
        assert all(c["seeds"]["p_holm"] >= c["seeds"]["p"] for c in sig[t].values())


def test_identical_first_seed_outputs_are_marked_not_given_sacrebleus_floor_p(tmp_path):
    """sacreBLEU's paired bootstrap gives two identical systems p = 1 / (n + 1), which would read
    as significant: the report marks identical outputs, and labels the seed it really used."""
    corpus = corpora.get("multi30k")
    for t in corpus.tests:
        (tmp_path / f"{t}.de").write_text("\n".join(REFS) + "\n")
    runs = []
    for v, cut in (("sinusoidal", 1), ("none", 1), ("learned", 2)):  # none's outputs are sinusoidal's
        for seed in (2, 3):
            hyps = tmp_path / f"{v}-{seed}"
            hyps.mkdir()
            for t in corpus.tests:
                (hyps / f"{t}.de").write_text("\n".join(" ".join(r.split()[:-cut]) for r in REFS) + "\n")
            runs.append({"variant": v, "seed": seed, "hyps": hyps})
    sig = significance(runs, corpus, tmp_path, "sinusoidal", 100, 1)
    t = corpus.tests[0]
    assert sig[t]["none vs sinusoidal"]["first_seed"] | {"bleu": 0, "mean": 0, "ci": 0} == {
        "bleu": 0, "mean": 0, "ci": 0, "p": None, "seed": 2, "identical": True}
    learned = sig[t]["learned vs sinusoidal"]["first_seed"]
    assert learned["identical"] is False and learned["seed"] == 2 and 0 < learned["p"] <= 1
    made = [_run(v, seed, 20.0) for v in ("sinusoidal", "none", "learned") for seed in (2, 3)]
    prov = {"bleu_signature": "b", "chrf_signature": "c", "code_revision": "abc", "versions": {},
            "data_md5_from_dvc_lock": {}}
    ranking = ranking_along_training({f"{r['variant']}-{r['seed']}": [(100, 9.0)] for r in made}, made)
    text = markdown(table_rows(made, corpus), sig, ranking, extrapolation_rows(made), corpus, prov,
                    "sinusoidal", made)
    none_row = next(line for line in text.splitlines() if line.startswith("| none vs sinusoidal |"))
    assert none_row.count("seed 2: identical outputs") == len(corpus.tests) and "seed 1" not in none_row
    assert "never below 1 / 101 = 0.0099" in text


def _seeds(delta, low, high, p_holm):
    return {"delta": delta, "ci": [low, high], "p": p_holm / 4, "p_holm": p_holm, "samples": 1000}


def test_findings_state_each_conclusion_with_its_figure():
    corpus = corpora.get("multi30k")
    variants = ["sinusoidal", "learned", "concat", "sinusoidal_narrow"]
    runs = [_run(v, s, 30.0 + i) for i, v in enumerate(variants) for s in (1, 2)]
    rows = table_rows(runs, corpus)
    figures = {"learned vs sinusoidal": _seeds(0.3, -0.4, 1.0, 1.0),
               "concat vs sinusoidal": _seeds(1.5, 0.8, 2.2, 0.004),
               "sinusoidal_narrow vs sinusoidal": _seeds(-0.6, -1.1, -0.1, 0.2),
               "concat vs sinusoidal_narrow": _seeds(2.1, 1.2, 3.0, 0.004)}
    sig = {t: {c: {"seeds": dict(s)} for c, s in figures.items()} for t in corpus.tests}
    sig["test_2017_mscoco"]["learned vs sinusoidal"]["seeds"] = _seeds(-1.2, -2.0, -0.5, 0.01)
    sig["test_2017_flickr"]["learned vs sinusoidal"]["seeds"] = _seeds(-0.9, -1.5, -0.2, 0.09)
    curves = {f"{v}-{s}": [(100, 9.0 - i), (200, 8.0 + i), (300, 7.0 + i)]
              for i, v in enumerate(variants) for s in (1, 2)}
    text = findings(rows, sig, ranking_along_training(curves, runs), extrapolation_rows(runs), corpus)
    assert "2 training seeds per variant" in text
    assert ("dev perplexity sinusoidal 6.500 ± 0.707, learned 6.500 ± 0.707; dev BLEU sinusoidal "
            "31.50 ± 0.71, learned 32.50 ± 0.71") in text
    assert "- test_2016_flickr: +0.30 BLEU [-0.40, +1.00], Holm p = 1; within noise (the interval includes 0)." in text
    assert ("holds here on test_2016_flickr (the interval includes 0); it holds on test_2017_flickr "
            "after Holm's adjustment, though the unadjusted interval excludes 0; it does not hold on "
            "test_2017_mscoco (a difference after Holm's adjustment).") in text
    assert "`concat` minus `sinusoidal_narrow`: where the position goes" in text
    assert "+2.10 BLEU [+1.20, +3.00], Holm p = 0.004; significant after Holm's adjustment." in text
    assert "-0.60 BLEU [-1.10, -0.10], Holm p = 0.2; its interval excludes 0, but not after Holm's adjustment." in text
    assert ("- Significant after Holm's adjustment: `learned vs sinusoidal` on test_2017_mscoco (-1.20); "
            "`concat vs sinusoidal` on test_2016_flickr (+1.50), test_2017_flickr (+1.50), "
            "test_2017_mscoco (+1.50); `concat vs sinusoidal_narrow` on") in text
    assert "- Within noise (the interval includes 0): `learned vs sinusoidal` on test_2016_flickr (+0.30)." in text
    # dev PPL 8 + i at updates 200 and 300, 9 - i at 100: the ranking turned after update 100
    assert ("best first: sinusoidal, learned, concat, sinusoidal_narrow. The mean ranking has been the "
            "same since update 200; at update 200 Kendall's tau against the last ranking is 1") in text
    assert ("test_2016_flickr, k = 8 (50% of inputs longer than any training source)" in text
            and "sinusoidal_narrow 18.50 ± 0.71 (57%); concat 17.50 ± 0.71 (56%)" in text)
    # length ratio 1/k: at k = 8 the brevity penalty is exp(1 - 8)
    assert ("At k = 8 every variant's output is 12%-12% as long as the joined reference (mean length "
            "ratio over seeds), so BLEU's brevity penalty alone multiplies its score by at most 0.001") in text
    # k = 2 joins inputs no longer than training ones (share 0): the loss there is not position
    assert ("At k = 2, where 0.0% of inputs are longer than any training source, mean BLEU is already "
            "27.5-30.5 (k = 1: 29.5-32.5) and the output 50%-50% as long as the reference: 14% of the BLEU "
            "lost from k = 1 to k = 8 (mean over variants) is lost within the lengths trained on.") in text



def test_the_summary_is_a_line_a_question_and_the_main_table():
    """README's front: each question its differences and how they read; the ranking; the table."""
    corpus = corpora.get("multi30k")
    variants = ["sinusoidal", "learned", "concat", "sinusoidal_narrow", "none"]
    runs = [_run(v, s, 30.0 + i) for i, v in enumerate(variants) for s in (1, 2)]
    figures = {"learned vs sinusoidal": _seeds(0.3, -0.4, 1.0, 1.0),
               "concat vs sinusoidal": _seeds(1.5, 0.8, 2.2, 0.004),
               "none vs sinusoidal": _seeds(-5.0, -6.0, -4.0, 0.001),
               "concat vs sinusoidal_narrow": _seeds(2.1, 1.2, 3.0, 0.2)}
    sig = {t: {c: {"seeds": dict(s)} for c, s in figures.items()} for t in corpus.tests}
    text = summary(table_rows(runs, corpus), sig, corpus)
    assert ("- **Table 3 (E), learned against sinusoidal positions**: `learned` minus `sinusoidal` +0.30, "
            "+0.30, +0.30 BLEU: within noise on 3 of 3.") in text
    assert ("`concat` minus `sinusoidal_narrow` +2.10, +2.10, +2.10 BLEU: unadjusted interval excludes 0 on "
            "3 of 3; `concat` minus `sinusoidal` +1.50, +1.50, +1.50 BLEU: significant after Holm's "
            "adjustment on 3 of 3.") in text
    assert "- **No positions at all**: `none` minus `sinusoidal` -5.00" in text
    assert "Positions inside attention" not in text  # none of rope, relative, alibi was run
    assert text.count("\n- ") == 4 and "- **By dev perplexity**, best first: " in text
    assert "| variant | dev PPL (val) | BLEU test_2016_flickr |" in text
    assert [line.split(" |")[0] for line in text.splitlines() if line.startswith("| ") and "±" in line] == [
        f"| {v}" for v in variants]

def test_kendall_tau():
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1.0
    assert kendall_tau(["a", "b", "c"], ["b", "a", "c"]) == pytest.approx(1 / 3, abs=1e-3)


def test_provenance_names_the_numerics_and_refuses_two_modes(tmp_path):
    from posenc.stages.report import provenance

    def run(mode):
        return {"signature": {"bleu": "b", "chrf": "c", "numerics": {"mode": mode, "aten": "AVX2"}}}

    prov = provenance([run("portable"), run("portable")], tmp_path / "dvc.lock", [])
    assert prov["numerics"] == {"mode": "portable", "aten": "AVX2"}
    with pytest.raises(UserError, match="under 2 numerics settings .*re-run their evaluate stages under one"):
        provenance([run("portable"), run("native")], tmp_path / "dvc.lock", [])


def test_runs_whose_hypotheses_differ_in_length_are_refused(tmp_path):
    corpus = corpora.get("multi30k")
    for t in corpus.tests:
        (tmp_path / f"{t}.de").write_text("\n".join(REFS) + "\n")
    runs = []
    for v, n in (("sinusoidal", len(REFS)), ("concat", len(REFS) - 1)):
        hyps = tmp_path / f"{v}-1"
        hyps.mkdir()
        for t in corpus.tests:
            (hyps / f"{t}.de").write_text("\n".join(REFS[:n]) + "\n")
        runs.append({"variant": v, "seed": 1, "hyps": hyps})
    with pytest.raises(UserError) as e:
        significance(runs, corpus, tmp_path, "sinusoidal", 20, 1)
    assert str(e.value) == (f"{tmp_path / 'concat-1' / (corpus.tests[0] + '.de')}: {len(REFS) - 1} lines, but "
                            f"{len(REFS)} references; re-run its evaluation (`dvc repro -f evaluate@concat-1`)")


def test_a_variant_name_that_is_not_a_variant_is_refused_before_any_path_is_read(tmp_path):
    from posenc import config

    (tmp_path / "p.yaml").write_text("variants: [sinusoidal, ../../../x/evil]\n")
    with pytest.raises(UserError, match=r"variants\[1\]: '../../../x/evil' is not one of 'sinusoidal', "):
        config.load_list(tmp_path / "p.yaml", "variants", config.Variant)


def test_the_dvc_charts_colour_each_variant_as_the_figures_do():
    """One colour-blind-safe colour per variant (posenc.figures.STYLE), the same in the PNG/SVG
    figures and in DVC's charts; the learning curves' chart dashes by seed, one panel per revision."""
    import json

    from posenc.config import POSITIONAL
    from posenc.figures import STYLE

    assert len({STYLE[v][0] for v in POSITIONAL}) == len(POSITIONAL)  # every variant its own colour
    assert len({STYLE[v][1] for v in POSITIONAL}) == len(POSITIONAL)  # and its own marker
    for name in ("runs_lines", "grouped_bars"):
        encoding = json.loads((ROOT / ".dvc/plots" / f"{name}.json").read_text())["encoding"]
        scale = encoding["color"]["scale"]
        assert encoding["color"]["field"] == "variant"
        assert dict(zip(scale["domain"], scale["range"])) == {v: STYLE[v][0] for v in POSITIONAL}
    lines = json.loads((ROOT / ".dvc/plots/runs_lines.json").read_text())["encoding"]
    assert lines["strokeDash"]["field"] == "seed" and lines["column"]["field"] == "rev"


def test_the_committed_plot_data_has_every_field_its_chart_reads():
    """`dvc plots show` on a fresh clone draws from the committed CSVs (issue 51: a learning-curve
    chart with no lines and "seed: undefined"): every field the chart's Vega-Lite template and
    dvc.yaml's x and y read is a column of the committed CSV; DVC adds `rev` itself."""
    import csv
    import json

    import yaml

    def fields(node):
        if isinstance(node, dict):
            return ({node["field"]} if isinstance(node.get("field"), str) else set()).union(
                *map(fields, node.values()))
        return set().union(*map(fields, node)) if isinstance(node, list) else set()

    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    assert plots
    for entry in plots:
        ((path, spec),) = entry.items()
        template = json.loads((ROOT / ".dvc/plots" / f"{spec['template']}.json").read_text())
        read = {spec["x"], spec["y"]} | {f for f in fields(template) if not f.startswith("<DVC_METRIC")}
        with open(ROOT / path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f))
        assert read - {"rev"} <= set(header), f"{path}: {sorted(read - {'rev'} - set(header))} missing"


def test_the_code_revision_is_the_first_commit_with_the_pinned_sources(tmp_path, monkeypatch):
    """Not the latest commit: one that changes another file, or only results, leaves it in place."""
    import hashlib
    import subprocess

    from posenc.stages.report import code_revision

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()

    monkeypatch.chdir(tmp_path)
    git("init", "-q")
    (tmp_path / "src").mkdir()
    revisions = []
    for text in ("a = 1\n", "a = 2\n"):
        (tmp_path / "src/model.py").write_text(text)
        git("add", "-A"), git("commit", "-qm", text)
        revisions.append(git("rev-parse", "HEAD"))
    md5 = hashlib.md5(b"a = 2\n").hexdigest()
    # the report reads results/runs, which evaluate@x-1 writes from train@x-1's model; its own
    # entry is not needed (its first run has none), and another part's aggregate is not its code
    stages = {"train@x-1": {"deps": [{"path": "src/model.py", "md5": md5}, {"path": "data/a", "md5": "0"}],
                            "outs": [{"path": "models/x-1/model.pt"}]},
              "evaluate@x-1": {"deps": [{"path": "models/x-1/model.pt", "md5": "2"}],
                               "outs": [{"path": "results/runs/x-1/metrics.json"}]},
              "residuals": {"deps": [{"path": "src/residuals.py", "md5": "stale"}, {"path": "results/runs"}],
                            "outs": [{"path": "results/residual/table.md"}]}}
    reads = ["results/runs"]
    assert code_revision(stages, reads) == revisions[1]
    (tmp_path / "src/other.py").write_text("b = 1\n")
    (tmp_path / "results.md").write_text("figures\n")
    git("add", "-A"), git("commit", "-qm", "later")
    assert code_revision(stages, reads) == revisions[1]
    stages["train@x-1"]["deps"][0]["md5"] = hashlib.md5(b"a = 3\n").hexdigest()
    assert code_revision(stages, reads).startswith("uncommitted")  # reached through evaluate's model
    assert code_revision(stages, ["results/elsewhere"]).startswith("unknown")
    assert code_revision({}, reads).startswith("unknown")


@pytest.mark.parametrize("text", ["step\tloss\tppl\neight\t1.0\t2.7\n", "step\n8\n"])
def test_a_dev_log_that_is_not_one_is_named(tmp_path, text):
    """Issue 49: a dev log with a non-numeric step or a single column gave a traceback."""
    from posenc.stages.report import read_dev_log

    (tmp_path / "dev_log.tsv").write_text(text)
    with pytest.raises(UserError, match=r"dev_log.tsv: not a dev log \(step, loss, perplexity per row\)"):
        read_dev_log(tmp_path / "dev_log.tsv")
    with pytest.raises(UserError, match=r"gone.tsv: missing"):
        read_dev_log(tmp_path / "gone.tsv")


def test_metrics_without_a_figure_the_table_shows_are_one_line(tmp_path):
    from posenc.stages.report import load_runs

    corpus = corpora.get("multi30k")
    where = tmp_path / "sinusoidal-1"
    where.mkdir()
    (where / "metrics.json").write_text(json.dumps({"dev_ppl": 5.0, **{f"bleu_{s}": 30.0 for s in corpus.scored}}))
    (where / "scores.json").write_text(json.dumps({f"{m}_{s}": 50.0 for m in ("chrf", "bleu_tok")
                                                   for s in corpus.scored}))
    for name in ("signatures.json", "extrapolation.json"):
        (where / name).write_text("{}")
    with pytest.raises(UserError) as e:
        load_runs(tmp_path, ("sinusoidal",), (1,), corpus)
    assert str(e.value) == (f"{where}: no parameters in metrics.json or scores.json; written by an older "
                            f"evaluate stage: run `dvc repro evaluate`")
