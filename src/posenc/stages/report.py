"""Stage `report`: the Table 3 layout for every variant, paired bootstrap tests, provenance, figures.

Inputs are the files the pipeline wrote (metrics.json and hypotheses per run, dev logs per model,
dvc.lock); nothing here is typed by hand except the paper's own reference rows, which are labelled.
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
import subprocess
from importlib.metadata import version
from pathlib import Path

import yaml
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from posenc import config, corpora, files
from posenc.corpora import SRC
from posenc.errors import UserError
from posenc.figures import pyplot, save_figure
from posenc.runs import HYPS, METRICS, SIGNATURES, dev_log_path, hypothesis_path, result_dir, run_name
from posenc.scoring import read_references

# Vaswani et al. 2017, Table 3: the base model and row (E), newstest2013 (WMT14 en-de dev).
PAPER_ROWS = [
    {"variant": "paper: base (sinusoidal)", "parameters": "65M", "dev_ppl": 4.92, "dev_bleu": 25.8},
    {"variant": "paper: (E) learned", "parameters": "65M", "dev_ppl": 4.92, "dev_bleu": 25.7},
]


def load_runs(runs_dir: Path, variants: tuple[str, ...], seeds: tuple[int, ...]) -> list[dict]:
    """The metrics of every (variant, seed) listed in params, each with its hypotheses directory:
    {variant, seed, parameters, dev_ppl, bleu: {split: ...}, chrf: {split: ...}, signature, hyps}."""
    missing = [run_name(v, s) for v in variants for s in seeds
               if not (result_dir(runs_dir, v, s) / METRICS).is_file()]
    if missing:
        raise UserError(f"{runs_dir}: no metrics for {', '.join(missing)}; run `dvc repro evaluate`")
    runs = []
    for v in variants:
        for s in seeds:
            where = result_dir(runs_dir, v, s)
            metrics = json.loads((where / METRICS).read_text(encoding="utf-8"))
            signatures = json.loads((where / SIGNATURES).read_text(encoding="utf-8"))
            runs.append({"variant": v, "seed": s, "parameters": metrics["parameters"],
                         "dev_ppl": metrics["dev_ppl"], "signature": signatures, "hyps": where / HYPS,
                         **{m: {k.removeprefix(f"{m}_"): x for k, x in metrics.items() if k.startswith(f"{m}_")}
                            for m in ("bleu", "chrf")}})
    return runs


def summarize(values: list[float]) -> dict:
    mean = statistics.fmean(values)
    return {"mean": round(mean, 2 if mean > 10 else 3), "std": round(statistics.stdev(values), 3)
            if len(values) > 1 else None, "n": len(values)}


def table_rows(runs: list[dict], corpus: corpora.Corpus) -> list[dict]:
    """One row per variant: mean (and std over seeds) of each column."""
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        row = {"variant": variant, "seeds": [r["seed"] for r in mine],
               "parameters": mine[0]["parameters"],
               "dev_ppl": summarize([r["dev_ppl"] for r in mine])}
        for split in corpus.scored:
            row[f"bleu_{split}"] = summarize([r["bleu"][split] for r in mine])
        for split in corpus.scored:
            row[f"chrf_{split}"] = summarize([r["chrf"][split] for r in mine])
        rows.append(row)
    return rows


def paired_bootstrap(baseline: tuple[str, list[str]], others: list[tuple[str, list[str]]],
                     references: list[str], samples: int, seed: int) -> dict:
    """sacreBLEU's paired bootstrap resampling (Koehn 2004) of each system against the baseline:
    {name: {"bleu", "mean", "ci" (95% half-width), "p"}}."""
    # sacreBLEU takes its resampling seed from the environment only.
    os.environ["SACREBLEU_SEED"] = str(seed)
    test = PairedTest([baseline, *others], metrics={"BLEU": BLEU(references=[references])},
                      references=None, test_type="bs", n_samples=samples)
    _, scores = test()
    out = {}
    for name, result in zip(scores["System"], scores["BLEU"]):
        out[name] = {"bleu": round(float(result.score), 2), "mean": round(float(result.mean), 2),
                     "ci": round(float(result.ci), 2),
                     "p": None if result.p_value is None else round(float(result.p_value), 4)}
    return out


def significance(runs: list[dict], corpus: corpora.Corpus, raw: Path, baseline: str,
                 samples: int, seed: int) -> dict:
    """Per test set, every variant against the baseline, on the first seed's hypotheses."""
    first = {}
    for r in runs:
        first.setdefault(r["variant"], r)
    if baseline not in first:
        raise UserError(f"params.yaml: report.baseline '{baseline}' is not among the variants "
                        f"({', '.join(first)})")
    result = {}
    for split in corpus.tests:
        hyps = {v: files.read_lines(hypothesis_path(r["hyps"], split)) for v, r in first.items()}
        others = [(v, h) for v, h in hyps.items() if v != baseline]
        result[split] = paired_bootstrap((baseline, hyps[baseline]), others,
                                         read_references(raw, split, len(hyps[baseline])), samples, seed)
    return result


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


def provenance(runs: list[dict], lock: Path) -> dict:
    """What a citation needs: metric signatures, data hashes from dvc.lock, code revision, versions."""
    hashes = {}
    if Path(lock).is_file():
        stages = (yaml.safe_load(Path(lock).read_text(encoding="utf-8")) or {}).get("stages", {})
        for stage in ("fetch", "prepare"):
            for out in stages.get(stage, {}).get("outs", []):
                hashes[out["path"]] = out.get("md5")
    return {"bleu_signature": runs[0]["signature"]["bleu"],
            "chrf_signature": runs[0]["signature"]["chrf"],
            "data_md5_from_dvc_lock": hashes, "code_revision": code_revision(),
            "versions": {p: version(p) for p in ("torch", "sacrebleu", "sentencepiece")}}


def code_revision() -> str:
    """The last commit that changed src/ (stable when only results are committed after it)."""
    try:
        commit = subprocess.run(["git", "log", "-1", "--format=%H", "--", "src"], check=True,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], check=True,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return (commit or "uncommitted") + (" with uncommitted changes in src/" if dirty else "")


def _cell(s: dict) -> str:
    return "" if s is None else f"{s['mean']}" + (f" ± {s['std']}" if s.get("std") is not None else "")


def markdown(rows: list[dict], sig: dict, corpus: corpora.Corpus, prov: dict, baseline: str) -> str:
    dev, tests = corpus.dev, corpus.tests
    head = (["variant", "params", f"dev PPL ({dev})", f"dev BLEU ({dev})"]
            + [f"BLEU {t}" for t in tests] + [f"chrF {s}" for s in corpus.scored])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["variant"], f"{r['parameters']:,}", _cell(r["dev_ppl"]), _cell(r[f"bleu_{dev}"])]
        cells += [_cell(r[f"bleu_{t}"]) for t in tests] + [_cell(r[f"chrf_{s}"]) for s in corpus.scored]
        lines.append("| " + " | ".join(cells) + " |")
    n = rows[0]["dev_ppl"]["n"]
    lines += ["", f"{n} seed{'s' if n > 1 else ''} per variant"
              + (" (mean ± standard deviation)." if n > 1 else "."),
              "PPL is per wordpiece, teacher-forced, without label smoothing.",
              f"The paper's protocol: the dev columns ({dev}: PPL, BLEU, chrF) are of the last "
              "checkpoint, as Table 3 (§6.2: no checkpoint averaging); the test sets are scored "
              "with the average of the last checkpoints, as Table 2 (§6.1).", "",
              f"Paired bootstrap resampling against `{baseline}` (sacreBLEU, first seed): "
              "BLEU, its bootstrap mean ± 95% confidence half-width, and the p-value.", "",
              "| variant | " + " | ".join(tests) + " |", "|---|" + "---|" * len(tests)]
    for variant in sig[tests[0]]:
        cells = [variant] + [f"{sig[t][variant]['bleu']} ({sig[t][variant]['mean']} ± "
                             f"{sig[t][variant]['ci']})" + ("" if sig[t][variant]["p"] is None
                                                            else f", p = {sig[t][variant]['p']}")
                             for t in tests]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "For reference, the paper's own rows (Vaswani et al. 2017, Table 3; WMT14 en-de, "
              "newstest2013 dev, base model): not comparable with the rows above, which are "
              f"measured on {corpus.name}.", "",
              "| paper row | params | dev PPL (newstest2013) | dev BLEU (newstest2013) |",
              "|---|---|---|---|"]
    lines += [f"| {p['variant']} | {p['parameters']} | {p['dev_ppl']} | {p['dev_bleu']} |" for p in PAPER_ROWS]
    lines += ["", "Provenance:", "",
              f"- BLEU signature: `{prov['bleu_signature']}`",
              f"- chrF signature: `{prov['chrf_signature']}`",
              f"- code revision (last commit touching src/): `{prov['code_revision']}`",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in prov["versions"].items())]
    lines += [f"- data (dvc.lock md5): `{path}` {md5}" for path, md5 in prov["data_md5_from_dvc_lock"].items()]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[dict], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def flat_rows(rows: list[dict]) -> tuple[list[dict], list[str]]:
    flat = []
    for r in rows:
        f = {"variant": r["variant"], "parameters": r["parameters"]}
        for key, value in r.items():
            if isinstance(value, dict):
                f[key], f[f"{key}_std"] = value["mean"], value["std"]
        flat.append(f)
    return flat, list(flat[0])


def plot_learning_curves(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    """Each run's dev perplexity by update, as training measured it. Its last point is the last
    checkpoint, the model of the table's dev columns (§6.2); the test sets' averaged model (§6.1)
    is not on these curves."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    for name, points in curves.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], label=name, marker=".")
    ax.set(xlabel="update (last point: the last checkpoint, the table's dev model)",
           ylabel="dev perplexity (per wordpiece)", yscale="log", title="Learning curves")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, path)


def plot_bleu_by_length(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    buckets = list(dict.fromkeys(r["bucket"] for r in rows))
    counts = {r["bucket"]: r["sentences"] for r in rows}
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    width = 0.8 / len(variants)
    for i, v in enumerate(variants):
        mine = {r["bucket"]: r for r in rows if r["variant"] == v}
        ax.bar([b + i * width for b in range(len(buckets))], [mine[b]["bleu"] if b in mine else 0 for b in buckets],
               width, yerr=[mine[b]["ci"] if b in mine else 0 for b in buckets], capsize=2, label=v)
    ax.set_xticks([b + width * (len(variants) - 1) / 2 for b in range(len(buckets))],
                  [f"{b}\nn = {counts[b]}" for b in buckets])
    ax.set(xlabel="source length (words)", ylabel="BLEU (test sets pooled)",
           title="BLEU by source length, with 95% bootstrap intervals")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, path)


def read_dev_log(path: Path) -> list[tuple[int, float]]:
    rows = files.read_lines(path)[1:]
    return [(int(r.split("\t")[0]), float(r.split("\t")[2])) for r in rows]


def run(args) -> None:
    data = config.load(args.params, "data", config.DataConfig)
    cfg = config.load(args.params, "report", config.ReportConfig)
    variants = config.load_list(args.params, "variants", str)
    seeds = config.load_list(args.params, "seeds", config.NonNegative)
    corpus, raw = corpora.get(data.corpus), Path(args.raw)
    runs = load_runs(Path(args.runs), variants, seeds)
    rows = table_rows(runs, corpus)
    sig = significance(runs, corpus, raw, cfg.baseline, cfg.bootstrap_samples, cfg.bootstrap_seed)
    prov = provenance(runs, Path(args.lock))
    by_length = bleu_by_length(runs, corpus, raw, cfg.length_buckets, cfg.bootstrap_samples)
    # Dev logs live beside each model (posenc.runs).
    curves = {run_name(r["variant"], r["seed"]): read_dev_log(dev_log_path(Path(args.models), r["variant"], r["seed"]))
              for r in runs}
    figures = Path(args.figures)
    plot_learning_curves(curves, figures / "learning_curves.png")
    plot_bleu_by_length(by_length, figures / "bleu_by_length.png")
    files.write_text(args.by_length_csv, to_csv(by_length, ["variant", "bucket", "sentences", "bleu", "ci"]))
    # One file, one row per (run, dev evaluation): `dvc plots show` draws every run in one chart
    files.write_text(args.curves_csv, to_csv([{"run": name, "step": step, "dev_ppl": ppl}
                                              for name, points in curves.items() for step, ppl in points],
                                             ["run", "step", "dev_ppl"]))
    flat, columns = flat_rows(rows)
    files.write_text(args.table_csv, to_csv(flat, columns))
    files.write_json(args.table_json, {"table": {r["variant"]: r for r in rows}, "significance": sig,
                                       "provenance": prov, "paper": PAPER_ROWS})
    files.write_text(args.table_md, markdown(rows, sig, corpus, prov, cfg.baseline))
    best = max(rows, key=lambda r: r[f"bleu_{corpus.tests[0]}"]["mean"])
    print(f"report: {len(rows)} variants x {len(seeds)} seeds -> {args.table_md}; best on "
          f"{corpus.tests[0]}: {best['variant']} {best[f'bleu_{corpus.tests[0]}']['mean']} BLEU")
