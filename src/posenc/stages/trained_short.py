"""Stage `trained_short`: §3.5's second protocol, reported. Every short run (trained on pairs of
at most L = short_training.max_len subwords, dvc.yaml's train_short) was scored by source length
(posenc.stages.lengths); this stage puts them side by side: BLEU per length bucket over seeds, and
the question each variant answers, how much of its BLEU within L it keeps beyond L, against
`sinusoidal` (the paper's claim) and against `none` (no positions: its loss beyond L is the part
that does not come from positions at all), with the seed-aware test and Holm's adjustment of the
positional report (posenc.significance).

Sentence lengths come from the encoded sources (EOS included, as the lengths stage bucketed them),
the hypotheses from each run's saved files, the references untouched.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from posenc import config, corpora, files, tokens
from posenc.buckets import ShortTrainingConfig, bucket_bounds, bucket_name, by_bucket
from posenc.corpora import SRC, TGT
from posenc.errors import UserError
from posenc.figures import STYLE, pyplot, save_figure, style
from posenc.report_config import ReportConfig
from posenc.runs import HYPS, run_name
from posenc.scoring import hypothesis_path, read_references
from posenc.significance import holm, kept_share, kept_share_bootstrap, sentence_statistics
from posenc.tables import VERDICTS, cell, count, markdown_table, p_is, summarize, to_csv, verdict

LENGTHS = "lengths.json"  # the lengths stage's, per run
REFERENCES = ("sinusoidal", "none")  # what each variant's kept share is tested against


def load_runs(short_runs: Path, short: ShortTrainingConfig, seeds: tuple[int, ...]) -> dict:
    """{(variant, seed): {"lengths": lengths.json, "hyps": its hypotheses directory}}. A run scored
    under another L or other buckets than `short`'s, or a file of another run, is refused: the
    table's headers come from the params, its cells from the runs."""
    names = [bucket_name(low, high) for low, high in bucket_bounds(short.max_len, short.buckets)]
    out = {}
    for v in short.variants:
        for s in seeds:
            where = Path(short_runs) / run_name(v, s)
            stage = f"evaluate_short@{run_name(v, s)}"
            got = files.read_json(where / LENGTHS, f"run `dvc repro {stage}`")
            buckets = got.get("buckets") if isinstance(got, dict) else None
            made = ([b.get("sources") for b in buckets] if isinstance(buckets, list)
                    and all(isinstance(b, dict) for b in buckets) else None)
            if made is None or got.get("variant", v) != v or got.get("seed", s) != s:
                raise UserError(f"{where / LENGTHS}: not the lengths of {run_name(v, s)}; `dvc repro -f {stage}`")
            if got.get("max_len", short.max_len) != short.max_len or made != names:
                raise UserError(f"{where / LENGTHS}: scored with L = {got.get('max_len')} in buckets {made}, "
                                f"the params say L = {short.max_len} in {names}; `dvc repro {stage}` scores it again")
            out[v, s] = {"lengths": got, "hyps": where / HYPS}
    return out


def sentence_sets(runs: dict, sources: dict[str, list], raw: Path, short: ShortTrainingConfig) -> tuple[dict, list]:
    """Per run, its sentence statistics within L and beyond L (pooled over the scored splits, in
    the lengths stage's order); and the buckets' sentence indices."""
    lengths = [len(s) for split in sources for s in sources[split]]
    references = [r for split in sources for r in read_references(raw, split, len(sources[split]),
                                                                  sources=len(sources[split]))]
    buckets = by_bucket(lengths, bucket_bounds(short.max_len, short.buckets))
    within, beyond = buckets[0], [i for b in buckets[1:] for i in b]
    out = {}
    for key, run in runs.items():
        hyps = []
        for split in sources:
            lines = files.read_lines(hypothesis_path(run["hyps"], split))
            if len(lines) != len(sources[split]):
                raise UserError(f"{hypothesis_path(run['hyps'], split)}: {len(lines)} lines for "
                                f"{len(sources[split])} sources; re-run `dvc repro -f evaluate_short@{run_name(*key)}`")
            hyps += lines
        stats = sentence_statistics(hyps, references)
        out[key] = (stats[within], stats[beyond])
    return out, buckets


def reference_stops(targets: list[int], buckets: list[list[int]], max_len: int) -> list[dict]:
    """Per source-length bucket, how many references are at most L target subwords long (EOS
    included): what a translation that stops at or before L would match. Beyond L, the early
    stops of the outputs are read against it."""
    return [{"within_max_len": sum(targets[i] <= max_len for i in idx), "sentences": len(idx)} for idx in buckets]


def table_rows(runs: dict, sets: dict, variants: tuple[str, ...], seeds: tuple[int, ...]) -> list[dict]:
    """Per variant: each bucket's BLEU, chrF, length ratio (mean ± std over seeds), the outputs
    that stop at or before L (all seeds), and the kept share (mean ± std)."""
    rows = []
    for v in variants:
        buckets = [runs[v, s]["lengths"]["buckets"] for s in seeds]
        row = {"variant": v, "buckets": []}
        for i, first in enumerate(buckets[0]):
            each = [b[i] for b in buckets]
            row["buckets"].append({
                "sources": first["sources"], "sentences": first["sentences"],
                **{m: summarize([e[m] for e in each]) for m in ("bleu", "chrf", "length_ratio") if m in first},
                "stopped_within_max_len": sum(e["stopped_within_max_len"] for e in each),
                "outputs": first["sentences"] * len(each)})
        shares = [kept_share(w.sum(0), b.sum(0)) for w, b in (sets[v, s] for s in seeds)]
        row["kept"] = None if any(math.isnan(x) for x in shares) else summarize(shares)
        rows.append(row)
    return rows


def significance(sets: dict, variants: tuple[str, ...], seeds: tuple[int, ...], samples: int, seed: int) -> dict:
    """Each variant's kept share against `sinusoidal` and against `none` (where run), Holm-adjusted
    over the whole family: {"<variant> vs <reference>": bootstrap result}."""
    result = {}
    for ref in (r for r in REFERENCES if r in variants):
        for v in variants:
            if v != ref and f"{ref} vs {v}" not in result:
                result[f"{v} vs {ref}"] = kept_share_bootstrap([sets[ref, s] for s in seeds],
                                                               [sets[v, s] for s in seeds], samples, seed)
    tested = {c: r["p"] for c, r in result.items() if r["p"] is not None}
    for c, p in holm(tested).items():
        result[c]["p_holm"] = p
    return result


def markdown(rows: list[dict], refs: list[dict], sig: dict, short: ShortTrainingConfig,
             seeds: tuple[int, ...], samples: int) -> str:
    names = [b["sources"] for b in rows[0]["buckets"]]
    counts = ", ".join(f"{b['sources']}: {b['sentences']:,}" for b in rows[0]["buckets"])
    lines = ["## §3.5 trained short, tested long: the table", "",
             f"Every variant trained on the pairs of at most L = {short.max_len} subwords a side (EOS "
             f"included), {count(len(seeds), 'seed')}, then translating every "
             "natural sentence of the evaluation splits, pooled and bucketed by source length in "
             f"subwords (sentences per bucket: {counts}). BLEU per bucket (mean ± standard deviation "
             "over seeds), and the share of its BLEU within L that a variant keeps beyond L "
             "(BLEU of every sentence beyond L over BLEU within L)."
             + (f" The rows of `learned`'s position table beyond L = {short.max_len} were never trained: "
                "what it translates beyond L, it translates with untrained positions (the point of §3.5)."
                if any(r["variant"] == "learned" for r in rows) else ""), ""]
    lines += markdown_table(["variant", *(f"BLEU {n}" + (" (within L)" if i == 0 else "") for i, n in enumerate(names)),
                             "kept beyond L"],
                            [[r["variant"]] + [cell(b.get("bleu")) for b in r["buckets"]] + [cell(r["kept"]) or "n/a"]
                             for r in rows])
    lines += ["", "Outputs that stop at or before L target positions (EOS included), all seeds, and BLEU's "
              "length ratio (mean over seeds), per bucket; the last row, the references that are that short:", ""]
    lines += markdown_table(["variant", *names],
                            [[r["variant"]] + [f"{b['stopped_within_max_len'] / max(b['outputs'], 1):.0%} "
                                               f"(ratio {b['length_ratio']['mean']:.3g})" if "length_ratio" in b
                                               else "-" for b in r["buckets"]] for r in rows]
                            + [["references"] + [f"{b['within_max_len'] / max(b['sentences'], 1):.0%}" for b in refs]])
    if sig:
        lines += ["", "The kept share of each variant against `sinusoidal` and against `none`, over seeds and "
                  f"sentences (two-level bootstrap, {samples:,} resamples, the sentences within and beyond L "
                  "drawn apart): the difference, its 95% interval, the p-value and the Holm-adjusted one.", ""]
        lines += markdown_table(["comparison", "difference of kept share"], [
            [c, f"{r['delta']:+.3f} [{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}], {p_is(r['p'], samples)} "
                f"({p_is(r['p_holm'], samples, 'Holm p')})" if r["p"] is not None
             else "n/a (a run's BLEU within L is 0)"] for c, r in sig.items()])
    return "\n".join(lines) + "\n"


def points(rows: list[dict], refs: list[dict], sig: dict, short: ShortTrainingConfig, samples: int) -> list[str]:
    """What the figures support, one point a question: §3.5's claim, the kept shares, the tests
    against each reference, the early stops (generated: no conclusion outlives its numbers). The
    findings give them as paragraphs, README's summary as a list."""
    kept = {r["variant"]: r["kept"] for r in rows}
    if all(k is None for k in kept.values()):
        return ["No variant has a BLEU above 0 within L on every seed, so no share kept beyond L is defined: "
                "the runs support no conclusion."]
    said = []
    claim = sig.get("learned vs sinusoidal")
    if claim and claim["p"] is not None:
        # §3.5: sinusoids "may allow the model to extrapolate to sequence lengths longer than the
        # ones encountered during training", which a learned table (Table 3, row E) may not. Read
        # as the report reads a comparison (posenc.tables.VERDICTS): an interval that excludes 0
        # only before Holm's adjustment over the family is a lean, not a finding.
        lo, hi = claim["ci"]
        less, reading = claim["delta"] < 0, verdict(claim)
        if reading == VERDICTS[0]:
            said_of_it = ("supports it: `learned` keeps significantly less" if less else
                          "contradicts it: `learned` keeps significantly more")
        elif reading == VERDICTS[1]:
            said_of_it = (f"leans {'towards' if less else 'against'} it without establishing it: `learned` keeps "
                          f"{'less' if less else 'more'}, an interval that excludes 0 but not after Holm's "
                          f"adjustment over the {len(sig)} comparisons")
        else:
            said_of_it = "neither supports nor refutes it: `learned` and `sinusoidal` do not differ beyond noise"
        said.append("**§3.5's claim**, that the sinusoids extrapolate beyond the lengths seen in training better "
                    f"than a learned table: this protocol {said_of_it} ({claim['delta']:+.3f} of kept share, "
                    f"95% interval [{lo:+.3f}, {hi:+.3f}], {p_is(claim['p'], samples)}, "
                    f"{p_is(claim['p_holm'], samples, 'Holm p')}).")
    ranked = sorted((v for v in kept if kept[v]), key=lambda v: -kept[v]["mean"])
    said.append(f"**Kept beyond L = {short.max_len} subwords**, of each variant's BLEU within L: "
                + ", ".join(f"`{v}` {kept[v]['mean']:.0%}" for v in ranked) + ".")
    for ref in REFERENCES:
        # each variant's difference from `ref`, whichever side of a comparison `ref` is on
        mine = {(b if a == ref else a): (r["delta"] if b == ref else -r["delta"], r["p_holm"])
                for (a, b), r in ((c.split(" vs "), r) for c, r in sig.items())
                if ref in (a, b) and r["p"] is not None}
        if mine:
            more = [f"`{v}`" for v, (delta, p) in mine.items() if p < 0.05 and delta > 0]
            less = [f"`{v}`" for v, (delta, p) in mine.items() if p < 0.05 and delta < 0]
            said.append(f"**Against `{ref}`** (Holm-adjusted, {samples:,} resamples): "
                        + (f"keep significantly more: {', '.join(more)}; " if more else "no variant keeps significantly more; ")
                        + (f"keep significantly less: {', '.join(less)}." if less else "no variant keeps significantly less."))
    beyond = refs[1:]
    ref_share = sum(b["within_max_len"] for b in beyond) / max(1, sum(b["sentences"] for b in beyond))
    stops = {r["variant"]: sum(b["stopped_within_max_len"] for b in r["buckets"][1:])
             / max(1, sum(b["outputs"] for b in r["buckets"][1:])) for r in rows}
    said.append("**Early stops beyond L** (outputs of a source longer than L that end at or before L target "
                "positions): " + ", ".join(f"`{v}` {s:.0%}" for v, s in stops.items())
                + f"; of those sources' references, {ref_share:.0%} are that short. "
                + (f"Every variant ends at or before L more often than the references do (by "
                   f"{100 * (min(stops.values()) - ref_share):.0f} to {100 * (max(stops.values()) - ref_share):.0f} "
                   "points): part of the drop beyond L is the stop learned from short targets (Varis & Bojar 2021), "
                   "whatever the position scheme." if min(stops.values()) > ref_share else
                   "Not every variant ends at or before L more often than the references do: the drop beyond L is not "
                   "explained by early stops alone."))
    return said


def findings(rows: list[dict], refs: list[dict], sig: dict, short: ShortTrainingConfig, samples: int) -> str:
    """docs/results.md's account: the points, a paragraph each."""
    return "\n\n".join(["## §3.5 trained short, tested long: what the figures support",
                         *points(rows, refs, sig, short, samples)]) + "\n"


def summary(rows: list[dict], refs: list[dict], sig: dict, short: ShortTrainingConfig, seeds: tuple[int, ...],
            samples: int, splits: list[str]) -> str:
    """README's front for §3.5's protocol: what was trained and tested, then the points as a list
    (the table by source length and the tests are table.md, in docs/results.md)."""
    return "\n".join([f"Generated by `posenc trained-short`: each variant trained on the pairs of at most L = "
                      f"{short.max_len} subwords a side, {count(len(seeds), 'seed')}, then "
                      f"tested on every sentence of {', '.join(splits)}; the share of its BLEU within L that a "
                      "variant keeps beyond L, read with the two-level bootstrap and Holm's adjustment (the "
                      "table by source length and the tests: docs/results.md).", "",
                      *(f"- {p}" for p in points(rows, refs, sig, short, samples))]) + "\n"


def plot(rows: list[dict], short: ShortTrainingConfig, seeds: tuple[int, ...], runs: dict, path: Path) -> None:
    """BLEU by source-length bucket, one line per variant (mean over seeds) with the band from the
    lowest to the highest seed; L marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    names = [b["sources"] for b in rows[0]["buckets"]]
    for r in rows:
        per_seed = [[b.get("bleu", 0.0) for b in runs[r["variant"], s]["lengths"]["buckets"]] for s in seeds]
        mean = [statistics.fmean(c) for c in zip(*per_seed)]
        ax.plot(range(len(names)), mean, label=r["variant"], **style(r["variant"]))
        if len(seeds) > 1:
            ax.fill_between(range(len(names)), [min(c) for c in zip(*per_seed)], [max(c) for c in zip(*per_seed)],
                            color=STYLE[r["variant"]][0], alpha=0.15, linewidth=0)
    ax.axvline(0.5, color="0.4", linestyle="--", linewidth=1)
    ax.text(0.52, 0.98, f"L = {short.max_len}", transform=ax.get_xaxis_transform(), va="top", fontsize="small")
    ax.set_xticks(range(len(names)), [f"{n}\nn = {b['sentences']}" for n, b in zip(names, rows[0]["buckets"])])
    ax.set(xlabel="source length (subwords, EOS included)", ylabel="BLEU (mean over seeds, band: lowest-highest)",
           title=f"Trained on pairs of at most {short.max_len} subwords, {count(len(seeds), 'seed')}")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, path)


def run(args) -> None:
    data = config.load(args.params, "data", config.DataConfig)
    short = config.load(args.params, "short_training", ShortTrainingConfig)
    report = config.load(args.params, "report", ReportConfig)
    limit = config.load_value(args.params, "eval.max_sentences", config.NonNegative) or None
    seeds = config.load_list(args.params, "seeds", config.NonNegative)
    corpus = corpora.get(data.corpus)
    eos = tokens.load_tokenizer(Path(args.spm)).eos_id()
    sources = {split: tokens.load(tokens.array_path(Path(args.arrays), split, SRC), eos)[:limit]
               for split in corpus.scored}
    targets = [len(t) for split in corpus.scored
               for t in tokens.load(tokens.array_path(Path(args.arrays), split, TGT), eos)[:limit]]
    if len(set(short.variants)) < len(short.variants):
        raise UserError(f"{args.params}: short_training.variants lists a variant twice ({list(short.variants)}); "
                        f"list each once")
    if short.max_len >= data.max_len:
        raise UserError(f"{args.params}: short_training.max_len {short.max_len} is not below data.max_len "
                        f"{data.max_len}: no training pair is longer, so nothing is trained short; lower it")
    runs = load_runs(Path(args.short_runs), short, seeds)
    sets, buckets = sentence_sets(runs, sources, Path(args.raw), short)
    refs = reference_stops(targets, buckets, short.max_len)
    rows = table_rows(runs, sets, short.variants, seeds)
    sig = significance(sets, short.variants, seeds, report.bootstrap_samples, report.bootstrap_seed)
    figures = Path(args.figures)
    files.clear(figures / "*.png", figures / "*.svg", args.table_md, args.findings_md, args.summary_md,
                args.table_json, args.by_length_csv)  # never a mix of two runs' outputs
    plot(rows, short, seeds, runs, figures / "bleu_by_length.png")
    files.write_text(args.by_length_csv, to_csv(
        [{"variant": r["variant"], "sources": b["sources"], "sentences": b["sentences"],
          "bleu": b["bleu"]["mean"] if "bleu" in b else "", "bleu_std": b["bleu"]["std"] if "bleu" in b else "",
          "stopped_within_max_len": b["stopped_within_max_len"], "outputs": b["outputs"]}
         for r in rows for b in r["buckets"]],
        ["variant", "sources", "sentences", "bleu", "bleu_std", "stopped_within_max_len", "outputs"]))
    files.write_json(args.table_json, {"max_len": short.max_len, "table": rows, "references": refs,
                                       "significance": sig})
    files.write_text(args.table_md, markdown(rows, refs, sig, short, seeds, report.bootstrap_samples))
    files.write_text(args.findings_md, findings(rows, refs, sig, short, report.bootstrap_samples))
    files.write_text(args.summary_md, summary(rows, refs, sig, short, seeds, report.bootstrap_samples,
                                              list(corpus.scored)))
    print(f"trained_short: {len(rows)} variants x {len(seeds)} seeds, L = {short.max_len} -> {args.table_md}")
