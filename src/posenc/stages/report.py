"""Stage `report`: the Table 3 layout for every variant (mean ± std over seeds), the seed-aware
test against the baseline, the ranking by dev perplexity along training, the extrapolation table
(§3.5), provenance, figures.

Inputs are the files the pipeline wrote (metrics.json, hypotheses and extrapolation.json per run,
dev logs per model, dvc.lock); nothing here is typed by hand except the paper's own reference
rows, which are labelled.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import statistics
import subprocess
from importlib.metadata import version
from pathlib import Path

import yaml
from sacrebleu.metrics import BLEU

from posenc import config, corpora, files
from posenc.corpora import SRC
from posenc.errors import UserError
from posenc.figures import STYLE, pyplot, save_figure, style
from posenc.report_config import ReportConfig
from posenc.runs import (EXTRAPOLATION, HYPS, METRICS, SCORES, SIGNATURES, dev_log_path, read_object, result_dir,
                         run_name)
from posenc.scoring import hypothesis_path, read_references
from posenc.significance import holm, paired_bootstrap, seed_bootstrap, sentence_statistics
from posenc.tables import (VERDICTS, cell, count, how_it_reads, markdown_table, p_is, p_text, span, summarize, to_csv,
                           verdict)

MEASURES = ("bleu", "bleu_tok", "chrf")  # `<measure>_<split>` keys of metrics.json and scores.json

# Vaswani et al. 2017, Table 3: the base model and row (E), newstest2013 (WMT14 en-de dev). Their
# BLEU is tensor2tensor's get_ende_bleu.sh: tokenized and compound-split (posenc.scoring).
PAPER_ROWS = [
    {"variant": "paper: base (sinusoidal)", "parameters": "65M", "dev_ppl": 4.92, "dev_bleu": 25.8},
    {"variant": "paper: (E) learned", "parameters": "65M", "dev_ppl": 4.92, "dev_bleu": 25.7},
]


def load_runs(runs_dir: Path, variants: tuple[str, ...], seeds: tuple[int, ...],
              corpus: corpora.Corpus) -> list[dict]:
    """The metrics of every (variant, seed) listed in params, each with its hypotheses directory:
    {variant, seed, parameters, dev_ppl, bleu / bleu_tok / chrf: {split: ...}, signature, hyps,
    extrapolation}."""
    missing = [run_name(v, s) for v in variants for s in seeds
               if not all((result_dir(runs_dir, v, s) / f).is_file() for f in (METRICS, SCORES))]
    if missing:
        raise UserError(f"{runs_dir}: no metrics for {', '.join(missing)}; run `dvc repro evaluate`")
    missing = [run_name(v, s) for v in variants for s in seeds
               if not (result_dir(runs_dir, v, s) / EXTRAPOLATION).is_file()]
    if missing:
        raise UserError(f"{runs_dir}: no {EXTRAPOLATION} for {', '.join(missing)}; "
                        f"run `dvc repro extrapolate`")
    runs = []
    for v in variants:
        for s in seeds:
            where = result_dir(runs_dir, v, s)
            again = f"`dvc repro -f evaluate@{run_name(v, s)}` writes it again"
            metrics = {**read_object(where / METRICS, again), **read_object(where / SCORES, again)}
            signatures = read_object(where / SIGNATURES, again)
            try:
                scores = {m: {split: metrics[f"{m}_{split}"] for split in corpus.scored} for m in MEASURES}
                parameters, dev_ppl = metrics["parameters"], metrics["dev_ppl"]
            except KeyError as e:
                raise UserError(f"{where}: no {e.args[0]} in {METRICS} or {SCORES}; written by an older "
                                f"evaluate stage: run `dvc repro evaluate`") from None
            runs.append({"variant": v, "seed": s, "parameters": parameters,
                         "dev_ppl": dev_ppl, "signature": signatures, "hyps": where / HYPS,
                         "extrapolation": read_object(where / EXTRAPOLATION,
                                                   f"`dvc repro -f extrapolate@{run_name(v, s)}` writes it again"),
                         **scores})
    return runs


def table_rows(runs: list[dict], corpus: corpora.Corpus) -> list[dict]:
    """One row per variant: mean (and std over seeds) of each column."""
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        row = {"variant": variant, "seeds": [r["seed"] for r in mine],
               "parameters": mine[0]["parameters"],
               "dev_ppl": summarize([r["dev_ppl"] for r in mine])}
        for m in MEASURES:
            for split in corpus.scored:
                row[f"{m}_{split}"] = summarize([r[m][split] for r in mine])
        rows.append(row)
    return rows


def run_rows(runs: list[dict], corpus: corpora.Corpus) -> list[dict]:
    """Every run's own figures, one row each (table.csv and table.json keep every seed)."""
    return [{"variant": r["variant"], "seed": r["seed"], "parameters": r["parameters"],
             "dev_ppl": r["dev_ppl"], **{f"{m}_{split}": r[m][split] for m in MEASURES
                                         for split in corpus.scored}} for r in runs]


# A control variant and the variant it controls: `sinusoidal_narrow` has concat's narrow token table
# with the sinusoid summed, so `concat` against it differs only in sum against concatenation (and
# `sinusoidal_narrow` against the baseline only in the table's width).
CONTROLS = [("concat", "sinusoidal_narrow")]


def comparisons(variants: list[str], baseline: str) -> list[tuple[str, str]]:
    """The (variant, reference) pairs the report tests: every variant against the baseline, then
    each variant against its control (CONTROLS) where both were run."""
    if baseline not in variants:
        raise UserError(f"params.yaml: report.baseline '{baseline}' is not among the variants "
                        f"({', '.join(variants)})")
    if len(variants) < 2:
        raise UserError(f"params.yaml: variants: the report compares variants with the baseline "
                        f"'{baseline}'; list at least one more")
    return ([(v, baseline) for v in variants if v != baseline]
            + [(v, c) for v, c in CONTROLS if v in variants and c in variants and baseline not in (v, c)])


def significance(runs: list[dict], corpus: corpora.Corpus, raw: Path, baseline: str,
                 samples: int, seed: int) -> dict:
    """Per test set and comparison (`comparisons`; keyed "variant vs reference"): the two-level
    bootstrap over seeds and sentences (posenc.significance), its p-values Holm-adjusted over every
    comparison and test set; beside it sacreBLEU's paired bootstrap on the first seed's hypotheses."""
    by_variant: dict[str, list[dict]] = {}
    for r in runs:
        by_variant.setdefault(r["variant"], []).append(r)
    pairs = comparisons(list(by_variant), baseline)
    result = {}
    for split in corpus.tests:
        hyps = {v: [files.read_lines(hypothesis_path(r["hyps"], split)) for r in mine]
                for v, mine in by_variant.items()}
        references = read_references(raw, split, len(hyps[baseline][0]))
        for v, mine in by_variant.items():  # every run translated the same sentences
            for r, h in zip(mine, hyps[v]):
                if len(h) != len(references):
                    raise UserError(f"{hypothesis_path(r['hyps'], split)}: {len(h)} lines, but "
                                    f"{len(references)} references; re-run its evaluation "
                                    f"(`dvc repro -f evaluate@{v}-{r['seed']}`)")
        stats = {v: [sentence_statistics(h, references) for h in hs] for v, hs in hyps.items()}
        first = {}
        for reference in dict.fromkeys(ref for _, ref in pairs):
            others = [(v, hyps[v][0]) for v, ref in pairs if ref == reference]
            for v, out in paired_bootstrap((reference, hyps[reference][0]), others, references,
                                           samples, seed).items():
                # sacreBLEU's p is (c + 1) / (n + 1), c counting resamples whose difference exceeds
                # the observed one strictly: two identical systems get its floor 1 / (n + 1), which
                # reads as significant. Identical outputs are said to be so instead.
                identical = hyps[v][0] == hyps[reference][0]
                first[v, reference] = {**out, "seed": by_variant[v][0]["seed"], "identical": identical,
                                       "p": None if identical else out["p"]}
        result[split] = {f"{v} vs {ref}": {"variant": v, "reference": ref,
                                           "seeds": seed_bootstrap(stats[ref], stats[v], samples, seed),
                                           "first_seed": first[v, ref]} for v, ref in pairs}
    adjusted = holm({(split, c): result[split][c]["seeds"]["p"] for split in result for c in result[split]})
    for (split, c), p in adjusted.items():
        result[split][c]["seeds"]["p_holm"] = p
    return result


def ranking_along_training(curves: dict[str, list[tuple[int, float]]], runs: list[dict]) -> dict:
    """The variants ranked by dev perplexity at each logged update (mean over seeds, and each seed
    alone), and Kendall's tau of each ranking against the ranking at the last update."""
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    seeds = sorted({r["seed"] for r in runs})
    ppl = {(r["variant"], r["seed"]): dict(curves[run_name(r["variant"], r["seed"])]) for r in runs}
    steps = sorted(set.intersection(*(set(p) for p in ppl.values())))

    def ranked(step: int, seed: int | None) -> list[str]:  # every variant has every seed (load_runs)
        value = {v: statistics.fmean(ppl[v, s][step] for s in (seeds if seed is None else [seed]))
                 for v in variants}
        return sorted(value, key=value.get)

    out = {"steps": steps, "mean": {}, "per_seed": {}}
    for step in steps:
        order = ranked(step, None)
        out["mean"][step] = {"order": order, "tau_vs_last": kendall_tau(order, ranked(steps[-1], None))}
        out["per_seed"][step] = {s: kendall_tau(ranked(step, s), ranked(steps[-1], s)) for s in seeds}
    return out


def kendall_tau(a: list[str], b: list[str]) -> float:
    """Kendall's tau between two orderings of the same items: 1 the same, -1 reversed."""
    pos = {x: i for i, x in enumerate(b)}
    pairs = [(i, j) for i in range(len(a)) for j in range(i + 1, len(a))]
    if not pairs:
        return 1.0
    concordant = sum(pos[a[i]] < pos[a[j]] for i, j in pairs)
    return round((2 * concordant - len(pairs)) / len(pairs), 3)


def extrapolation_rows(runs: list[dict]) -> list[dict]:
    """Per variant, test set and k: BLEU mean ± std over seeds, the share of inputs longer than
    the longest training source, the hypotheses at the output limit (summed over seeds)."""
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r["extrapolation"] for r in runs if r["variant"] == variant]
        for split, ks in mine[0]["splits"].items():
            for k, first in ks.items():
                each = [m["splits"][split][k] for m in mine]
                rows.append({"variant": variant, "split": split, "k": int(k), "inputs": first["inputs"],
                             "bleu": summarize([e["bleu"] for e in each]),
                             "length_ratio": summarize([e["length_ratio"] for e in each]),
                             "longer_than_training": first["longer_than_training"],
                             "max_source_positions": first["max_source_positions"],
                             "max_output_positions": max(e["max_output_positions"] for e in each),
                             "at_length_limit": sum(e["at_length_limit"] for e in each),
                             "hypotheses": first["inputs"] * len(each)})
    return rows


def bleu_by_length(runs: list[dict], corpus: corpora.Corpus, raw: Path,
                   buckets: tuple[int, ...], samples: int) -> list[dict]:
    """Corpus BLEU of the pooled test sets per source-length bucket (words), first seed per
    variant, with the sentence count and a bootstrap confidence half-width."""
    bounds = [*buckets, None]
    names = [f"{lo + 1}-{hi}" if hi else f">{lo}" for lo, hi in zip((0, *buckets), bounds)]
    sources, references = [], []
    first = runs[0]["hyps"]
    for split in corpus.tests:
        count = len(files.read_lines(hypothesis_path(first, split)))  # eval.max_sentences
        sources += files.read_lines(Path(raw) / f"{split}.{SRC}")[:count]
        references += read_references(raw, split, count)
    bucket_of = [next(i for i, hi in enumerate(bounds) if hi is None or len(s.split()) <= hi)
                 for s in sources]
    rows, seen = [], set()
    for r in runs:
        if r["variant"] in seen:
            continue
        seen.add(r["variant"])
        hyps = [h for split in corpus.tests for h in files.read_lines(hypothesis_path(r["hyps"], split))]
        for b, name in enumerate(names):
            idx = [i for i, k in enumerate(bucket_of) if k == b]
            if idx:
                # sacreBLEU's bootstrap (its --confidence; resampling seeded by SACREBLEU_SEED,
                # 12345 unless set): the 95% half-width beside the bucket's BLEU
                score = BLEU().corpus_score([hyps[i] for i in idx], [[references[i] for i in idx]],
                                            n_bootstrap=samples)
                rows.append({"variant": r["variant"], "bucket": name, "sentences": len(idx),
                             "bleu": round(score.score, 2), "ci": round(score._ci, 2)})
    return rows


def provenance(runs: list[dict], lock: Path, reads: list[str]) -> dict:
    """What a citation needs: metric signatures, data hashes from dvc.lock, the revision of the code
    that made what the report `reads`, versions."""
    hashes, stages = {}, {}
    if Path(lock).is_file():
        stages = (yaml.safe_load(Path(lock).read_text(encoding="utf-8")) or {}).get("stages", {})
        for stage in ("fetch", "prepare"):
            for out in stages.get(stage, {}).get("outs", []):
                hashes[out["path"]] = out.get("md5")
    # A table is of one numerics mode (posenc.numerics): portable figures beside native ones
    # would be exact on different machines.
    modes = {json.dumps(r["signature"].get("numerics"), sort_keys=True) for r in runs}
    if len(modes) > 1:
        raise UserError(f"the runs were computed under {len(modes)} numerics settings "
                        f"({'; '.join(sorted(modes))}); re-run their evaluate stages under one numerics mode")
    return {"numerics": runs[0]["signature"].get("numerics"),
            "bleu_signature": runs[0]["signature"]["bleu"],
            "chrf_signature": runs[0]["signature"]["chrf"],
            "data_md5_from_dvc_lock": hashes, "code_revision": code_revision(stages, reads),
            "versions": {p: version(p) for p in ("torch", "sacrebleu", "sentencepiece")}}


def upstream(stages: dict, reads: list[str]) -> set[str]:
    """The stages of dvc.lock whose outputs lie in the paths a stage `reads`, and the stages whose
    outputs those read in turn. From the paths, not from the reader's own lock entry, which its
    first run does not have yet."""
    def inside(path: str, folder: str) -> bool:
        return path == folder or path.startswith(folder.rstrip("/") + "/")
    seen, scanned, todo = set(), set(), list(reads)
    while todo:
        read = todo.pop()
        if read in scanned:
            continue
        scanned.add(read)
        for name, stage in stages.items():
            if name not in seen and any(inside(o["path"], read) for o in stage.get("outs", [])):
                seen.add(name)
                todo += [d["path"] for d in stage.get("deps", [])]
    return seen


def code_revision(stages: dict, reads: list[str]) -> str:
    """The revision of the code that computed the runs: the first commit at which every source
    file that dvc.lock records for the stages before the report (those whose outputs it `reads`)
    had its pinned content. Later commits that change other files, or only results, or the code
    of a stage the report does not read (another part's aggregate), leave it where it is, so the
    table names what computed it rather than the latest commit."""
    before = upstream(stages, reads)
    pinned = {d["path"]: d["md5"] for name, stage in stages.items() if name in before
              for d in stage.get("deps", []) if d["path"].startswith("src/") and "md5" in d}
    if not pinned:
        return "unknown (dvc.lock records no source file)"

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout

    try:
        commits = git("rev-list", "--reverse", "HEAD", "--", *sorted(pinned)).split()
        md5 = functools.cache(lambda blob: hashlib.md5(subprocess.run(
            ["git", "cat-file", "blob", blob], check=True, capture_output=True).stdout).hexdigest())
        for commit in commits:
            tree = dict(line.split(" ", 2)[2].split("\t")[::-1] for line in
                        git("ls-tree", commit, "--", *sorted(pinned)).splitlines())
            if all(path in tree and md5(tree[path]) == want for path, want in pinned.items()):
                return commit
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return "uncommitted (no commit has the source files dvc.lock records)"


def markdown(rows: list[dict], sig: dict, ranking: dict, extrapolation: list[dict],
             corpus: corpora.Corpus, prov: dict, baseline: str, runs: list[dict]) -> str:
    dev, tests = corpus.dev, corpus.tests
    n = rows[0]["dev_ppl"]["n"]
    seeds = f"{count(n, 'seed')} per variant" + (" (mean ± standard deviation over seeds)" if n > 1 else "")
    lines = markdown_table(["variant", "params", f"dev PPL ({dev})", f"dev BLEU ({dev})", *(f"BLEU {t}" for t in tests)],
                   [[r["variant"], f"{r['parameters']:,}", cell(r["dev_ppl"]), cell(r[f"bleu_{dev}"])]
                    + [cell(r[f"bleu_{t}"]) for t in tests] for r in rows])
    lines += ["", f"{seeds}. BLEU is sacreBLEU's (signature below), the primary figure. PPL is per "
              "wordpiece, teacher-forced, without label smoothing. The paper's protocol: the dev "
              f"columns ({dev}: PPL, BLEU, chrF) are of the last checkpoint, as Table 3 (§6.2: no "
              "checkpoint averaging); the test sets are scored with the average of the last "
              "checkpoints, as Table 2 (§6.1).", "",
              "chrF, and tok+compound-split BLEU (comparable with Vaswani et al. Tables 2-3: Moses "
              "tokenizer, hyphenated compounds split, case-sensitive multi-bleu; tensor2tensor's "
              "get_ende_bleu.sh):", ""]
    lines += markdown_table(["variant"] + [f"chrF {s}" for s in corpus.scored] + [f"tok BLEU {s}" for s in corpus.scored],
                    [[r["variant"]] + [cell(r[f"chrf_{s}"]) for s in corpus.scored]
                     + [cell(r[f"bleu_tok_{s}"]) for s in corpus.scored] for r in rows])
    samples = next(iter(next(iter(sig.values())).values()))["seeds"]["samples"]
    controls = [c for c, e in next(iter(sig.values())).items() if e["reference"] != baseline]
    lines += ["", f"Every variant against `{baseline}`"
              + "".join(f", `{c.replace(' vs ', '` against its control `')}`" for c in controls)
              + ", over seeds and sentences (two-level bootstrap, "
              f"{samples} resamples; posenc/significance.py): the difference of mean BLEU, its 95% "
              "interval, the p-value and, in brackets, the p-value Holm-adjusted over every "
              "comparison and test set. After it, sacreBLEU's paired bootstrap on the first seed's "
              f"hypotheses alone: its p is (c + 1) / (n + 1), never below 1 / {samples + 1:,} = "
              f"{1 / (samples + 1):.4f} (which it gives two identical systems too), so outputs "
              "identical to the reference's are marked as such instead of given a p.", ""]
    body = []
    for comparison in next(iter(sig.values())):
        cells = [comparison]
        for t in tests:
            s, f = sig[t][comparison]["seeds"], sig[t][comparison]["first_seed"]
            cells.append(f"{s['delta']:+.2f} [{s['ci'][0]:+.2f}, {s['ci'][1]:+.2f}], {p_is(s['p'], samples)} "
                         f"({p_text(s['p_holm'], samples)}); seed {f['seed']}: "
                         + ("identical outputs" if f["identical"] else f"p = {f['p']}"))
        body.append(cells)
    lines += markdown_table(["comparison", *tests], body)
    steps = ranking["steps"]
    lines += ["", "The variants ranked by dev perplexity (best first) along training, mean over seeds; "
              "Kendall's tau against the ranking at the last update, for the mean and for each seed:", ""]
    shown = [s for s in steps if s >= steps[len(steps) // 2]] or steps
    lines += markdown_table(["update", "ranking (mean over seeds)", "tau (mean)", "tau per seed"],
                    [[str(s), ", ".join(ranking["mean"][s]["order"]), f"{ranking['mean'][s]['tau_vs_last']:g}",
                      ", ".join(f"{t:g}" for t in ranking["per_seed"][s].values())] for s in shown])
    first = runs[0]["extrapolation"]
    rows_of = [r["extrapolation"]["table_rows"] for r in runs if r["extrapolation"]["table_rows"]]
    lines += ["", f"Extrapolation (§3.5): each test set's sentences joined k at a time into one input, "
              "sacreBLEU against the joined references, the averaged model. The longest training "
              f"source is {first['longest_training_source']} positions (EOS included), the longest "
              f"target {first['longest_training_target']}"
              + (f"; a learned table has {rows_of[0]} rows, and rows beyond those lengths "
                 "were never trained" if rows_of else "")
              + ". \"longer\": the share of inputs longer than the longest training source; "
              "\"ratio\": BLEU's length ratio, output over reference tokens (mean over seeds; "
              "below 1 the outputs stop short of the joined reference); \"at limit\": hypotheses "
              "(all seeds) that reached the output limit.", ""]
    ks = sorted({r["k"] for r in extrapolation})
    for split in dict.fromkeys(r["split"] for r in extrapolation):
        mine = [r for r in extrapolation if r["split"] == split]
        info = {r["k"]: r for r in mine}
        lines += [f"{split}:", ""]
        lines += markdown_table(["variant"] + [f"k = {k} (n = {info[k]['inputs']}, longer {info[k]['longer_than_training']:.0%}, "
                                       f"up to {info[k]['max_source_positions']} positions)" for k in ks],
                        [[v] + [f"{cell(r['bleu'])} (ratio {r['length_ratio']['mean']})"
                                + (f", at limit {r['at_length_limit']}" if r["at_length_limit"] else "")
                                for k in ks for r in mine if r["variant"] == v and r["k"] == k]
                         for v in dict.fromkeys(r["variant"] for r in mine)])
        lines.append("")
    lines += [f"For reference, the paper's own rows (Vaswani et al. 2017, Table 3; WMT14 en-de, "
              "newstest2013 dev, base model; its BLEU is tok+compound-split): not comparable with the "
              f"rows above, which are measured on {corpus.name}.", ""]
    lines += markdown_table(["paper row", "params", "dev PPL (newstest2013)", "dev tok+compound-split BLEU (newstest2013)"],
                    [[p["variant"], p["parameters"], str(p["dev_ppl"]), str(p["dev_bleu"])] for p in PAPER_ROWS])
    lines += ["", "Provenance:", "",
              f"- BLEU signature: `{prov['bleu_signature']}`",
              f"- chrF signature: `{prov['chrf_signature']}`",
              "- code revision (the first commit with the source files that dvc.lock records for the stages "
              f"this table reads): `{prov['code_revision']}`",
              "- numerics: " + (", ".join(f"{k} {v}" for k, v in prov["numerics"].items()) if prov.get("numerics")
                                else "not recorded (runs from before the numerics modes: native)"),
              "- versions: " + ", ".join(f"{k} {v}" for k, v in prov["versions"].items())]
    lines += [f"- data (dvc.lock md5): `{path}` {md5}" for path, md5 in prov["data_md5_from_dvc_lock"].items()]
    return "\n".join(lines) + "\n"


def _difference(s: dict, samples: int) -> str:
    return (f"{s['delta']:+.2f} BLEU [{s['ci'][0]:+.2f}, {s['ci'][1]:+.2f}], "
            f"{p_is(s['p_holm'], samples, 'Holm p')}")


def findings(rows: list[dict], sig: dict, ranking: dict, extrapolation: list[dict],
             corpus: corpora.Corpus) -> str:
    """The conclusions the table supports, each with its seed-aware figure (results/findings.md,
    which README copies): generated, so that no conclusion outlives the figures it rests on."""
    tests = corpus.tests
    first = next(iter(sig.values()))
    samples = next(iter(first.values()))["seeds"]["samples"]
    n = rows[0]["dev_ppl"]["n"]
    row = {r["variant"]: r for r in rows}
    lines = [f"Generated by `posenc report` from `results/table.json`: {n} training seeds per variant, "
             "the two-level bootstrap over seeds and test sentences, Holm's adjustment over every "
             "comparison and test set (Significance over seeds).", ""]

    def comparison(c: str) -> list[str]:
        return [f"- {t}: {_difference(sig[t][c]['seeds'], samples)}; {verdict(sig[t][c]['seeds'])}."
                for t in tests]

    if "learned vs sinusoidal" in first:
        lines += ["### Table 3 (E): learned against sinusoidal positions", ""]
        dev = {m: ", ".join(f"{v} {cell(row[v][m])}" for v in ("sinusoidal", "learned"))
               for m in ("dev_ppl", f"bleu_{corpus.dev}")}
        lines += [f"Table 3's columns, on {corpus.dev} with the last checkpoint: dev perplexity "
                  f"{dev['dev_ppl']}; dev BLEU {dev[f'bleu_{corpus.dev}']}. The test sets, learned "
                  "minus sinusoidal:", ""]
        lines += comparison("learned vs sinusoidal")
        reading = {t: verdict(sig[t]["learned vs sinusoidal"]["seeds"]) for t in tests}
        differ, nominal, noise = ([t for t in tests if reading[t] == v] for v in VERDICTS)
        parts = ([f"holds here on {', '.join(noise)} (the interval includes 0)"] if noise else [])
        parts += [f"holds on {', '.join(nominal)} after Holm's adjustment, though the unadjusted "
                  "interval excludes 0"] if nominal else []
        parts += [f"does not hold on {', '.join(differ)} (a difference after Holm's adjustment)"] if differ else []
        lines += ["", "The paper's result (learned ≈ sinusoidal: 4.92 / 4.92 PPL, 25.8 / 25.7 BLEU) "
                  + "; it ".join(parts) + ".", ""]
    if "concat vs sinusoidal_narrow" in first:
        lines += ["### Sum against concatenation", ""]
        parts = [("concat vs sinusoidal_narrow", "where the position goes (the same narrow token table, "
                  "the sinusoid concatenated or summed)"),
                 ("sinusoidal_narrow vs sinusoidal", "the token table's width alone (both sum the sinusoid)"),
                 ("concat vs sinusoidal", "both at once, the comparison the question asks")]
        for c, what in parts:
            if c in first:
                lines += [f"`{c.replace(' vs ', '` minus `')}`: {what}.", ""] + comparison(c) + [""]
    lines += ["### Every comparison", ""]
    verdicts = {(c, t): verdict(sig[t][c]["seeds"]) for c in first for t in tests}
    for kind in VERDICTS:
        hits = [f"`{c}` on " + ", ".join(f"{t} ({sig[t][c]['seeds']['delta']:+.2f})" for t in tests
                                        if verdicts[c, t] == kind)
                for c in first if any(verdicts[c, t] == kind for t in tests)]
        lines += [f"- {kind[0].upper() + kind[1:]}: " + ("; ".join(hits) if hits else "none") + "."]
    steps, mean = ranking["steps"], ranking["mean"]
    last = mean[steps[-1]]["order"]
    since = steps[-1]
    for step in reversed(steps):
        if mean[step]["order"] != last:
            break
        since = step
    middle = steps[len(steps) // 2]
    per_seed = ranking["per_seed"][middle]
    lines += ["", "### Would a longer run change the ranking?", "",
              f"By dev perplexity at the last update ({steps[-1]}), mean over seeds, best first: "
              f"{', '.join(last)}. The mean ranking has been the same since update {since}; at update "
              f"{middle} Kendall's tau against the last ranking is {mean[middle]['tau_vs_last']:g} for "
              "the mean and " + ", ".join(f"{t:g}" for t in per_seed.values())
              + f" for seeds {', '.join(str(s) for s in per_seed)}.", ""]
    ks = sorted({r["k"] for r in extrapolation})
    if len(ks) > 1:
        lines += ["### Extrapolation to longer inputs (§3.5)", ""]
        for split in dict.fromkeys(r["split"] for r in extrapolation):
            at = {(r["variant"], r["k"]): r for r in extrapolation if r["split"] == split}
            variants = list(dict.fromkeys(v for v, _ in at))
            top = ks[-1]
            bleu = {key: r["bleu"]["mean"] for key, r in at.items()}
            kept = {v: bleu[v, top] / bleu[v, ks[0]] if bleu[v, ks[0]] else 0.0 for v in variants}
            order = sorted(variants, key=lambda v: -bleu[v, top])
            longer = at[order[0], top]["longer_than_training"]
            lines += [f"{split}, k = {top} ({longer:.0%} of inputs longer than any training source): "
                      "BLEU mean ± std over seeds, and the share of each variant's own k = "
                      f"{ks[0]} BLEU it keeps: "
                      + "; ".join(f"{v} {cell(at[v, top]['bleu'])} ({kept[v]:.0%})" for v in order)
                      + ". No test over seeds is made here: read differences smaller than the "
                      "standard deviations as noise.", ""]
            ratio = {key: r["length_ratio"]["mean"] for key, r in at.items()}
            top_ratio = [ratio[v, top] for v in variants]
            penalty = math.exp(1 - 1 / max(top_ratio)) if max(top_ratio) < 1 else 1.0
            lines += [f"At k = {top} every variant's output is {span(top_ratio, '.0%')} as long "
                      "as the joined reference (mean length ratio over seeds), so BLEU's brevity "
                      f"penalty alone multiplies its score by at most {penalty:.3f}"
                      + (": the models end their output long before the input ends, whatever their "
                         "positions." if max(top_ratio) < 0.5 else "."), ""]
            within = [k for k in ks[1:] if at[order[0], k]["longer_than_training"] < 0.05]
            if within:  # joined inputs no longer than training ones: what is lost there is not position
                k, k1 = within[-1], ks[0]
                lost = [(bleu[v, k1] - bleu[v, k]) / (bleu[v, k1] - bleu[v, top])
                        for v in variants if bleu[v, k1] > bleu[v, top]]
                share = statistics.fmean(lost) if lost else 0.0
                lines += [f"At k = {k}, where {at[order[0], k]['longer_than_training']:.1%} of inputs are "
                          f"longer than any training source, mean BLEU is already "
                          f"{span([bleu[v, k] for v in variants], 'g')} (k = {k1}: "
                          f"{span([bleu[v, k1] for v in variants], 'g')}) and the output "
                          f"{span([ratio[v, k] for v in variants], '.0%')} as long as the reference: "
                          f"{share:.0%} of the BLEU lost from "
                          f"k = {k1} to k = {top} (mean over variants) is lost within the lengths "
                          "trained on" + (", so joined inputs test more than positions (length is a "
                                          "domain of its own, Varis & Bojar 2021)" if share > 0.5 else "")
                          + ".", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# README's summary: one line a question, in the order the project asks them (README, "What it found").
QUESTIONS = [("Table 3 (E), learned against sinusoidal positions", ["learned vs sinusoidal"]),
             ("Sum or concatenate: at the same token-table width, then against the paper's sum",
              ["concat vs sinusoidal_narrow", "concat vs sinusoidal"]),
             ("No positions at all", ["none vs sinusoidal"]),
             ("Positions inside attention", ["rope vs sinusoidal", "relative vs sinusoidal", "alibi vs sinusoidal"])]


def summary(rows: list[dict], sig: dict, corpus: corpora.Corpus) -> str:
    """README's front: a line per question with its test-set differences and how they read (the
    intervals and p-values are in findings.md), and the main table."""
    tests = corpus.tests
    first = sig[tests[0]]

    n = rows[0]["dev_ppl"]["n"]
    lines = [f"Generated by `posenc report`: differences of mean test BLEU over {n} seeds on "
             f"{', '.join(tests)}, read with the two-level bootstrap and Holm's adjustment "
             "(the intervals and p-values: docs/results.md).", ""]
    for question, comparisons in QUESTIONS:
        shown = [c for c in comparisons if c in first]
        if shown:
            lines.append(f"- **{question}**: " + "; ".join(
                f"`{c.replace(' vs ', '` minus `')}` "
                + ", ".join(f"{sig[t][c]['seeds']['delta']:+.2f}" for t in tests)
                + f" BLEU: {how_it_reads([sig[t][c]['seeds'] for t in tests])}"
                for c in shown) + ".")
    order = sorted(rows, key=lambda r: r["dev_ppl"]["mean"])
    lines += [f"- **By dev perplexity**, best first: {', '.join(r['variant'] for r in order)}.", ""]
    lines += markdown_table(["variant", f"dev PPL ({corpus.dev})", *(f"BLEU {t}" for t in tests)],
                            [[r["variant"], cell(r["dev_ppl"]), *(cell(r[f"bleu_{t}"]) for t in tests)]
                             for r in rows])
    return "\n".join(lines) + "\n"


def plot_learning_curves(curves: dict[str, list[tuple[int, float]]], runs: list[dict], path: Path) -> None:
    """Each variant's dev perplexity by update, as training measured it: the mean over seeds,
    with the band from the lowest to the highest seed. The last point is the last checkpoint,
    the model of the table's dev columns (§6.2); the test sets' averaged model (§6.1) is not on
    these curves."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    second, lowest = [], []  # each variant's mean at its second logged update: the top of the range shown
    seeds = len({r["seed"] for r in runs})
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [dict(curves[run_name(variant, r["seed"])]) for r in runs if r["variant"] == variant]
        steps = sorted(set.intersection(*(set(c) for c in mine)))
        values = [[c[s] for c in mine] for s in steps]
        means = [statistics.fmean(v) for v in values]
        ax.plot(steps, means, markersize=4, label=variant, **style(variant))
        second.append(means[min(1, len(means) - 1)])
        lowest.append(min(min(v) for v in values))
        if len(mine) > 1:
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values],
                            color=STYLE[variant][0], alpha=0.15, linewidth=0)
    # The first dev evaluation (hundreds of perplexity points) would squeeze the rest into the
    # bottom of the axis: the range shown starts at the second.
    ax.set_yscale("log")
    ax.set_ylim(min(lowest) * 0.95, max(second) * 1.1)
    ax.set(xlabel="update", ylabel="dev perplexity (per wordpiece)",
           title=f"Dev perplexity, mean of {count(seeds, 'seed')}, band: lowest to highest")
    ax.title.set_fontsize("medium")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, path)


def plot_extrapolation(rows: list[dict], path: Path) -> None:
    """BLEU against k (sentences joined per input), one line per variant, ± std over seeds; one
    panel per test set."""
    plt = pyplot()
    splits = list(dict.fromkeys(r["split"] for r in rows))
    fig, axes = plt.subplots(1, len(splits), figsize=(7.2 if len(splits) == 1 else 4.2 * len(splits), 4.2),
                             squeeze=False)
    for ax, split in zip(axes[0], splits):
        mine = [r for r in rows if r["split"] == split]
        ks = sorted({r["k"] for r in mine})
        for variant in dict.fromkeys(r["variant"] for r in mine):
            cells = {r["k"]: r["bleu"]["mean"] for r in mine if r["variant"] == variant}
            if cells[ks[0]] > 0:  # as a share of its own BLEU at k = 1: where the lines part
                ax.plot(ks, [max(cells[k], 1e-3) / cells[ks[0]] for k in ks], label=variant, **style(variant))
        longer = {r["k"]: r["longer_than_training"] for r in mine}
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ks, [f"{k}\n{longer[k]:.0%} longer" for k in ks])
        ax.set(xlabel="sentences joined per input (share longer than any training source)",
               ylabel=f"BLEU over its BLEU at k = {ks[0]} (mean over seeds)",
               title=f"Extrapolation (§3.5): {split}")
        ax.grid(alpha=0.3)
        if not ax.get_lines():  # every variant at BLEU 0 for k = 1 (an undertrained profile's)
            ax.text(0.5, 0.5, f"no variant has BLEU above 0 at k = {ks[0]}:\nno ratio to draw",
                    transform=ax.transAxes, ha="center", va="center")
    if axes[0][-1].get_lines():
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, path)


FEW = 50  # sentences: a length bucket with fewer is drawn pale (its interval is wide)


def plot_bleu_by_length(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    buckets = list(dict.fromkeys(r["bucket"] for r in rows))
    counts = {r["bucket"]: r["sentences"] for r in rows}
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        mine = {r["bucket"]: r for r in rows if r["variant"] == v}
        for b, bucket in enumerate(buckets):
            if bucket in mine:  # a bucket of few sentences pale: its interval says little
                ax.bar(b + i * width, mine[bucket]["bleu"], width, yerr=mine[bucket]["ci"], capsize=2,
                       color=STYLE[v][0], alpha=1.0 if counts[bucket] >= FEW else 0.35,
                       label=v if b == 0 else None)
    ax.set_xticks([b + width * (len(variants) - 1) / 2 for b in range(len(buckets))],
                  [f"{b}\nn = {counts[b]}" for b in buckets])
    ax.set(xlabel=f"source length (words); pale: fewer than {FEW} sentences", ylabel="BLEU (test sets pooled)",
           title="BLEU by source length, each variant's first seed, with 95% bootstrap intervals")
    ax.title.set_fontsize("medium")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, path)


def read_dev_log(path: Path) -> list[tuple[int, float]]:
    """(update, dev perplexity) rows of a run's dev log (step, loss, perplexity, ...)."""
    try:
        rows = files.read_lines(path)[1:]
        return [(int(r.split("\t")[0]), float(r.split("\t")[2])) for r in rows]
    except FileNotFoundError:
        raise UserError(f"{path}: missing; the run's train stage writes it (`dvc repro` of that run)") from None
    except (ValueError, IndexError, UnicodeDecodeError):
        raise UserError(f"{path}: not a dev log (step, loss, perplexity per row); its train stage writes it "
                        f"again (`dvc repro -f` of that run)") from None


def run(args) -> None:
    data = config.load(args.params, "data", config.DataConfig)
    cfg = config.load(args.params, "report", ReportConfig)
    variants = config.load_list(args.params, "variants", config.Variant)
    seeds = config.load_list(args.params, "seeds", config.NonNegative)
    corpus, raw = corpora.get(data.corpus), Path(args.raw)
    runs = load_runs(Path(args.runs), variants, seeds, corpus)
    rows = table_rows(runs, corpus)
    sig = significance(runs, corpus, raw, cfg.baseline, cfg.bootstrap_samples, cfg.bootstrap_seed)
    prov = provenance(runs, Path(args.lock), [os.path.relpath(args.runs), os.path.relpath(args.raw)])
    by_length = bleu_by_length(runs, corpus, raw, cfg.length_buckets, cfg.bootstrap_samples)
    # Dev logs are the train stage's text, in each run's results directory (posenc.runs).
    curves = {run_name(r["variant"], r["seed"]): read_dev_log(dev_log_path(Path(args.runs), r["variant"], r["seed"]))
              for r in runs}
    ranking = ranking_along_training(curves, runs)
    extrapolation = extrapolation_rows(runs)
    figures = Path(args.figures)
    files.clear(figures / "*.png", figures / "*.svg", args.by_length_csv, args.curves_csv, args.table_csv,
                args.extrapolation_csv, args.table_json, args.table_md, args.findings_md, args.summary_md)  # never a mix of two runs'
    plot_learning_curves(curves, runs, figures / "learning_curves.png")
    plot_bleu_by_length(by_length, figures / "bleu_by_length.png")
    plot_extrapolation(extrapolation, figures / "extrapolation.png")
    files.write_text(args.by_length_csv, to_csv(by_length, ["variant", "bucket", "sentences", "bleu", "ci"]))
    # One file, one row per (run, dev evaluation): `dvc plots show` draws every run in one chart
    # (variant and seed apart, so that the chart colours by variant and dashes by seed)
    files.write_text(args.curves_csv, to_csv([{"run": run_name(r["variant"], r["seed"]), "variant": r["variant"],
                                               "seed": r["seed"], "step": step, "dev_ppl": ppl}
                                              for r in runs for step, ppl in curves[run_name(r["variant"], r["seed"])]],
                                             ["run", "variant", "seed", "step", "dev_ppl"]))
    every = run_rows(runs, corpus)
    files.write_text(args.table_csv, to_csv(every, list(every[0])))
    files.write_text(args.extrapolation_csv, to_csv(
        [{**r, "bleu": r["bleu"]["mean"], "bleu_std": r["bleu"]["std"],
          "length_ratio": r["length_ratio"]["mean"]} for r in extrapolation],
        ["variant", "split", "k", "inputs", "bleu", "bleu_std", "length_ratio", "longer_than_training",
         "max_source_positions", "max_output_positions", "at_length_limit", "hypotheses"]))
    files.write_json(args.table_json, {"table": {r["variant"]: r for r in rows}, "runs": every,
                                       "significance": sig, "ranking_along_training": ranking,
                                       "extrapolation": extrapolation, "provenance": prov,
                                       "paper": PAPER_ROWS})
    files.write_text(args.table_md, markdown(rows, sig, ranking, extrapolation, corpus, prov, cfg.baseline, runs))
    files.write_text(args.findings_md, findings(rows, sig, ranking, extrapolation, corpus))
    files.write_text(args.summary_md, summary(rows, sig, corpus))
    best = max(rows, key=lambda r: r[f"bleu_{corpus.tests[0]}"]["mean"])
    print(f"report: {len(rows)} variants x {len(seeds)} seeds -> {args.table_md}; best on "
          f"{corpus.tests[0]}: {best['variant']} {best[f'bleu_{corpus.tests[0]}']['mean']} BLEU")
