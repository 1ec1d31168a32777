"""Stage `residuals`: the residual study (README, "The residual study"), sum against
concatenation against no residual at all, as a table over seeds with the seed-aware test against
`sum` at the same depth, the gradient highway measured along training as a figure, and the
findings those figures support.

Inputs are what the pipeline wrote: each residual run's evaluation (results/residual/runs/<kind>-
<layers>-<seed>/), the positional table's `sinusoidal` runs, which are `sum` at model.layers (not
trained twice), and every run's highway log beside its model (posenc.highway). The positional
report is not touched: this stage reads its runs and writes only its own files.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from posenc import config, corpora, files
from posenc.config import MAY_BE_EMPTY, Positive
from posenc.errors import UserError
from posenc.figures import pyplot, save_figure
from posenc.report_config import ReportConfig
from posenc.runs import HIGHWAY, HYPS, METRICS, SCORES, SIGNATURES, read_object, residual_name, result_dir
from posenc.scoring import hypothesis_path, read_references
from posenc.significance import holm, seed_bootstrap, sentence_statistics
from posenc.tables import cell, count, how_it_reads, markdown_table, p_is, summarize, to_csv


@dataclass(frozen=True)
class ResidualStudyConfig:
    """The residual study (README, "The residual study"): `sum` against the other kinds, with
    sinusoidal positions. dvc.yaml's train_residual matrix trains `kinds` at every depth of
    `depths`, train_residual_sum trains `sum` at `sum_depths`; `sum` at model.layers is the
    positional table's sinusoidal run, not trained twice."""
    kinds: tuple[Literal["concat", "none"], ...]
    depths: tuple[Positive, ...]  # layers on each side
    sum_depths: Annotated[tuple[Positive, ...], MAY_BE_EMPTY]

    def __post_init__(self):
        for key in ("kinds", "depths", "sum_depths"):
            values = getattr(self, key)
            if len(set(values)) != len(values):
                raise UserError(f"{key}: {list(values)} lists a value twice (DVC's matrix would merge "
                                f"the runs); list each once")

KINDS = ("sum", "concat", "none")  # posenc.model.Residual: the paper's first, then the two others


def layers_text(depth: int) -> str:
    return count(depth, "layer")


def depths_text(depths: list[int]) -> str:
    """"3 layers", "3 and 6 layers"."""
    return " and ".join([*map(str, depths[:-1]), layers_text(depths[-1])])


def cells_text(cells: list[tuple[str, int]]) -> str:
    """"`sum` and `concat` at 3 layers; `none` at 6 layers"."""
    def listed(words: list[str]) -> str:
        return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)
    return "; ".join(listed([f"`{k}`" for k, d in cells if d == depth]) + f" at {layers_text(depth)}"
                     for depth in dict.fromkeys(d for _, d in cells))


def comparison(kind: str, depth: int) -> str:
    """The name of `kind` tested against `sum` at `depth`: "concat vs sum, 3 layers"."""
    return f"{kind} vs sum, {layers_text(depth)}"


def groups(study: ResidualStudyConfig, layers: int) -> list[tuple[str, int]]:
    """The (kind, depth) cells of the study, each depth's `sum` first: sum at `layers` (the
    positional table's sinusoidal run) and at `sum_depths`, the other kinds at `depths`."""
    depths = sorted({layers, *study.depths, *study.sum_depths})
    cells = []
    for depth in depths:
        if depth == layers or depth in study.sum_depths:
            cells.append(("sum", depth))
        cells += [(kind, depth) for kind in KINDS[1:] if kind in study.kinds and depth in study.depths]
    return cells


def run_dirs(cells: list[tuple[str, int]], seeds: tuple[int, ...], layers: int, runs: Path,
             residual_runs: Path) -> dict:
    """{(kind, depth, seed): the run's results directory}: `sum` at model.layers is the
    positional table's sinusoidal run; every other cell is a residual run."""
    out = {}
    for kind, depth in cells:
        for seed in seeds:
            if kind == "sum" and depth == layers:
                out[kind, depth, seed] = result_dir(runs, "sinusoidal", seed)
            else:
                out[kind, depth, seed] = Path(residual_runs) / residual_name(kind, depth, seed)
    missing = [str(where / METRICS) for where in out.values() if not (where / METRICS).is_file()]
    if missing:
        raise UserError(f"{missing[0]}: missing ({len(missing)} evaluations in all); run `dvc repro "
                        f"evaluate_residual evaluate_residual_sum evaluate`")
    return out


def read_highway(path: Path) -> list[tuple[int, str, str, float]]:
    """A run's highway log (posenc.highway): (step, part, measure, value) rows."""
    if not path.is_file():
        raise UserError(f"{path}: missing; the run's train stage writes it (`dvc repro` of that run)")
    rows = [line.split("\t") for line in files.read_lines(path)[1:]]
    try:
        parsed = [(int(step), part, measure, float(value)) for step, part, measure, value in rows]
    except ValueError:  # a short row, or a step or value that is not a number
        raise UserError(f"{path}: not a highway log (rows of step, part, measure, value); its train "
                        f"stage writes it again (`dvc repro -f` of that run)") from None
    if not parsed:  # a seed without rows would silently leave its cell
        raise UserError(f"{path}: holds no measurement, only its header; its train stage writes it "
                        f"again (`dvc repro -f` of that run)")
    return parsed


def load(dirs: dict, scored: tuple[str, ...]) -> dict:
    """{(kind, depth, seed): {"metrics": metrics and scores, "highway": rows}}; a run's metrics
    without a figure the table shows (of the `scored` splits) are one line naming the file."""
    out = {}
    for key, where in dirs.items():
        # the cell a run is tabulated in is the run's own kind and depth, never the params' word
        signature = files.read_json(where / SIGNATURES, "its evaluate stage writes it (`dvc repro`)")
        kind, depth, _ = key
        made = (signature.get("residual", "sum"), signature.get("layers")) if isinstance(signature, dict) else None
        if made != (kind, depth):
            raise UserError(f"{where / SIGNATURES}: a run of residual {made[0] if made else '?'} with "
                            f"{made[1] if made else '?'} layers, tabulated as {kind} with {depth}; "
                            f"re-run its train and evaluate stages under the current params")
        again = "its evaluate stage writes it again (`dvc repro -f`)"
        metrics = {}
        for name in (METRICS, SCORES):
            metrics |= read_object(where / name, again, "evaluate")
        wanted = ["parameters", "dev_ppl", *(f"{m}_{s}" for s in scored for m in ("bleu", "chrf"))]
        if missing := [k for k in wanted if k not in metrics]:
            raise UserError(f"{where / METRICS}: no {', '.join(missing)} (here or in {SCORES}); {again}")
        out[key] = {"metrics": metrics, "highway": read_highway(where / HIGHWAY), "hyps": where / HYPS,
                    "init": signature.get("residual_init", "identity")}
    return out


def table_rows(runs: dict, cells: list[tuple[str, int]], seeds: tuple[int, ...],
               corpus: corpora.Corpus) -> list[dict]:
    """One row per (kind, depth): parameters, dev PPL, BLEU and chrF per scored split, mean ± std."""
    rows = []
    for kind, depth in cells:
        mine = [runs[kind, depth, s]["metrics"] for s in seeds]
        row = {"kind": kind, "layers": depth, "parameters": mine[0]["parameters"],
               "dev_ppl": summarize([m["dev_ppl"] for m in mine])}
        for split in corpus.scored:
            row[f"bleu_{split}"] = summarize([m[f"bleu_{split}"] for m in mine])
            row[f"chrf_{split}"] = summarize([m[f"chrf_{split}"] for m in mine])
        rows.append(row)
    return rows


def significance(runs: dict, cells: list[tuple[str, int]], seeds: tuple[int, ...], corpus: corpora.Corpus,
                 raw: Path, samples: int, seed: int) -> dict:
    """Every kind against `sum` at the same depth, on each test set: the two-level bootstrap over
    seeds and sentences (posenc.significance), Holm-adjusted over the whole family."""
    pairs = [(k, d) for k, d in cells if k != "sum" and ("sum", d) in cells]
    result: dict = {}
    for split in corpus.tests:
        stats, references = {}, None
        for kind, depth in {c for pair in pairs for c in (pair, ("sum", pair[1]))}:
            each = [files.read_lines(hypothesis_path(runs[kind, depth, s]["hyps"], split)) for s in seeds]
            references = references or read_references(raw, split, len(each[0]))
            for s, h in zip(seeds, each):
                if len(h) != len(references):
                    raise UserError(f"{hypothesis_path(runs[kind, depth, s]['hyps'], split)}: {len(h)} lines, "
                                    f"but {len(references)} references; re-run its evaluation")
            stats[kind, depth] = [sentence_statistics(h, references) for h in each]
        for kind, depth in pairs:
            result.setdefault(split, {})[comparison(kind, depth)] = seed_bootstrap(
                stats["sum", depth], stats[kind, depth], samples, seed)
    adjusted = holm({(split, c): r["p"] for split, cs in result.items() for c, r in cs.items()})
    for (split, c), p in adjusted.items():
        result[split][c]["p_holm"] = p
    return result


def highway_rows(runs: dict, cells: list[tuple[str, int]], seeds: tuple[int, ...]) -> list[dict]:
    """Each measure of each part along training, the geometric mean over seeds: one row per (kind,
    layers, step, part, measure), for the figure and highway.csv."""
    values: dict = {}
    for kind, depth in cells:
        for s in seeds:
            for step, part, measure, value in runs[kind, depth, s]["highway"]:
                values.setdefault((kind, depth, step, part, measure), []).append(value)
    return [{"kind": k, "layers": d, "step": step, "part": part, "measure": m,
             "value": geometric_mean(v), "seeds": len(v)}
            for (k, d, step, part, m), v in values.items()]


def geometric_mean(values: list[float]) -> float:
    """The mean of ratios that span orders of magnitude (a vanished gradient of one seed, 1e-12,
    must not vanish into another's 1e-3): exp of the mean log; 0 where a seed's value is 0."""
    return 0.0 if min(values) <= 0 else math.exp(statistics.fmean(math.log(v) for v in values))


def at_last_step(rows: list[dict], kind: str, depth: int, measure: str) -> dict[str, float]:
    """{part: value} of one measure at the cell's last logged update."""
    mine = [r for r in rows if (r["kind"], r["layers"], r["measure"]) == (kind, depth, measure)]
    if not mine:
        return {}
    last = max(r["step"] for r in mine)
    return {r["part"]: r["value"] for r in mine if r["step"] == last}


def markdown(rows: list[dict], sig: dict, hw: list[dict], cells: list[tuple[str, int]],
             seeds: tuple[int, ...], corpus: corpora.Corpus) -> str:
    tests = corpus.tests
    lines = ["## The residual study: the table", "",
             f"`sinusoidal` positions, {count(len(seeds), 'seed')} per cell "
             "(mean ± standard deviation over seeds). `sum` at the positional table's depth is its "
             "`sinusoidal` run. Dev perplexity of the last checkpoint, BLEU and chrF (sacreBLEU) of the "
             "average of the last checkpoints, as in the positional table.", ""]
    lines += markdown_table(["residual", "layers", "params", "dev PPL", *(f"BLEU {t}" for t in tests),
                             *(f"chrF {t}" for t in tests)],
                            [[r["kind"], str(r["layers"]), f"{r['parameters']:,}", cell(r["dev_ppl"])]
                             + [cell(r[f"bleu_{t}"]) for t in tests] + [cell(r[f"chrf_{t}"]) for t in tests]
                             for r in rows])
    if sig:
        samples = next(iter(next(iter(sig.values())).values()))["samples"]
        lines += ["", "Each kind against `sum` at the same depth, over seeds and sentences (two-level "
                  f"bootstrap, {samples} resamples; posenc/significance.py): the difference of mean BLEU, "
                  "its 95% interval, the p-value and, in brackets, the p-value Holm-adjusted over every "
                  "comparison and test set.", ""]
        lines += markdown_table(["comparison", *tests], [
            [c] + [f"{sig[t][c]['delta']:+.2f} [{sig[t][c]['ci'][0]:+.2f}, {sig[t][c]['ci'][1]:+.2f}], "
                   f"{p_is(sig[t][c]['p'], samples)} ({p_is(sig[t][c]['p_holm'], samples, 'Holm p')})"
                   for t in tests] for c in next(iter(sig.values()))])
    lines += ["", "The highway at the last logged update (geometric mean over seeds, one fixed dev batch, dropout "
              "off; posenc/highway.py): the gradient norm at the token embeddings over the norm at the "
              "top layer's output, encoder and decoder; each sub-layer's |f(x)| / |x| (median over "
              "sub-layers); for `concat`, the norms of W's x and f(x) halves over sqrt(d_model) (1 and 1 "
              "at the start).", ""]
    body = []
    for kind, depth in cells:
        grad = at_last_step(hw, kind, depth, "grad_ratio")
        update = list(at_last_step(hw, kind, depth, "update_ratio").values())
        w_x = list(at_last_step(hw, kind, depth, "w_x").values())
        w_f = list(at_last_step(hw, kind, depth, "w_f").values())
        body.append([kind, str(depth), f"{grad.get('encoder embeddings', float('nan')):.3g}",
                     f"{grad.get('decoder embeddings', float('nan')):.3g}",
                     f"{statistics.median(update):.3g}" if update else "",
                     f"{statistics.fmean(w_x):.3g} / {statistics.fmean(w_f):.3g}" if w_x else ""])
    lines += markdown_table(["residual", "layers", "grad at encoder embeddings", "grad at decoder embeddings",
                             "median |f(x)| / |x|", "W: x half / f(x) half"], body)
    return "\n".join(lines) + "\n"


def starts(runs: dict) -> dict[int, str]:
    """{depth: how concat's W started there (`residual_init`)}, as the runs themselves say; the
    seeds of one depth must agree."""
    out: dict[int, set] = {}
    for (kind, depth, _), run in runs.items():
        if kind == "concat":
            out.setdefault(depth, set()).add(run["init"])
    mixed = next((d for d, inits in out.items() if len(inits) > 1), None)
    if mixed is not None:
        raise UserError(f"concat at {layers_text(mixed)}: seeds started from {' and '.join(sorted(out[mixed]))} "
                        f"W (model.residual_init); re-run them under one setting")
    return {d: inits.pop() for d, inits in out.items()}


def dev_ppl(rows: list[dict]) -> dict[tuple[str, int], float]:
    """Each cell's mean dev perplexity over seeds."""
    return {(r["kind"], r["layers"]): r["dev_ppl"]["mean"] for r in rows}


def did_not_train(rows: list[dict], cells: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The cells whose dev perplexity ends more than an order of magnitude above the study's best:
    they did not learn to translate, and their measures describe a failed run."""
    ppl = dev_ppl(rows)
    return [c for c in cells if ppl[c] > 10 * min(ppl.values())]


def tested(sig: dict, cells: list[tuple[str, int]]) -> list[tuple[str, str, int]]:
    """(comparison, kind, depth) of each test against `sum` that `sig` holds, in its order."""
    pairs = {comparison(k, d): (k, d) for k, d in cells if k != "sum"}
    return [(name, *pairs[name]) for name in next(iter(sig.values()), {})]


def summary(rows: list[dict], sig: dict, cells: list[tuple[str, int]], corpus: corpora.Corpus) -> str:
    """README's front for the study: which cells trained, a line per test against `sum` with its
    test-set differences and how they read, and the table's dev perplexity and BLEU (the rest is
    table.md and findings.md, in docs/residual-study.md)."""
    tests, failed = corpus.tests, did_not_train(rows, cells)
    lines = [f"Generated by `posenc residuals`: `sinusoidal` positions, {rows[0]['dev_ppl']['n']} seeds per cell; "
             f"differences of mean test BLEU against `sum` at the same depth on {', '.join(tests)}, read with "
             "the two-level bootstrap and Holm's adjustment (the intervals, the gradient highway and what they "
             "support: docs/residual-study.md).", ""]
    trained = [c for c in cells if c not in failed]
    lines.append("- **Which runs trained**: " + (cells_text(trained) if trained else "none")
                 + (". Not (a dev perplexity more than an order of magnitude above the best): "
                    + cells_text(failed) if failed else "") + ".")
    lost_sums = []
    for name, kind, depth in tested(sig, cells):
        if ("sum", depth) in failed:
            lost_sums.append(depth)
            continue
        lines.append(f"- **{name}**: `{kind}` minus `sum` " + ", ".join(f"{sig[t][name]['delta']:+.2f}" for t in tests)
                     + f" BLEU: {how_it_reads([sig[t][name] for t in tests])}"
                     + (f" (`{kind}` did not train)" if (kind, depth) in failed else "") + ".")
    for depth in dict.fromkeys(lost_sums):
        lines.append(f"- **At {layers_text(depth)}** `sum` did not train either: the comparisons there say nothing "
                     "about the residual kind (the recipe's learning-rate schedule, the same at every depth, does not "
                     "train a post-norm stack that deep).")
    lines += [""] + markdown_table(["residual", "layers", f"dev PPL ({corpus.dev})", *(f"BLEU {t}" for t in tests)],
                                   [[r["kind"], str(r["layers"]), cell(r["dev_ppl"]), *(cell(r[f"bleu_{t}"]) for t in tests)]
                                    for r in rows])
    return "\n".join(lines) + "\n"


def findings(rows: list[dict], sig: dict, hw: list[dict], cells: list[tuple[str, int]],
             corpus: corpora.Corpus, init: dict[int, str] | None = None) -> str:
    """What the figures support, conjecture by conjecture, each with its figure: generated, so that
    no conclusion outlives the numbers it rests on."""
    depths = sorted({d for _, d in cells})
    lines = ["## The residual study: what the figures support", ""]
    # 0. which cells trained at all: a run whose dev perplexity ends more than an order of magnitude
    # above the study's best did not learn to translate, and its measures describe a failed run
    ppl = dev_ppl(rows)
    best = min(ppl, key=ppl.get)
    failed = did_not_train(rows, cells)
    if failed:
        lines += ["**Which runs trained.** " + ", ".join(f"`{k}` at {layers_text(d)} ({ppl[k, d]:.4g})" for k, d in failed)
                  + (" end" if len(failed) > 1 else " ends")
                  + f" at a dev perplexity more than an order of magnitude above the study's best, `{best[0]}` "
                  f"at {layers_text(best[1])} ({ppl[best]:.4g}): " + ("they" if len(failed) > 1 else "it")
                  + " did not learn to translate in the recipe's updates, and the measures below describe "
                  + ("their" if len(failed) > 1 else "its") + " failed training."
                  + "".join(f" At {layers_text(d)} even `sum` failed, so every comparison there is between runs that "
                            "did not train: the recipe (its warmup and learning rate, the same at every depth) does not "
                            "train a post-norm stack that deep, which post-norm's known need for a long warmup would "
                            "explain (Xiong et al. 2020; Liu et al. 2020), not the residual kind."
                            for k, d in failed if k == "sum"), ""]
    def at(depth: int, kind: str = "sum") -> str:
        """"At 6 layers", or "At 6 layers, where `sum` did not train": a failed cell's figures are
        read as those of a failed run, never as evidence for or against a conjecture."""
        return f"At {layers_text(depth)}" + (f", where `{kind}` did not train," if (kind, depth) in failed else ",")
    # 1. the highway: the gradient norm at the token embeddings over the top layer's output is 1
    # when it arrives unimpeded; the conjecture says that a sum keeps it near 1 and that other
    # arrangements put tolls on it. "Near" is within an order of magnitude, on both sides.
    near, far, said = [], [], []
    for depth in depths:
        grads = {}
        for kind in (k for k, d in cells if d == depth):
            grad = at_last_step(hw, kind, depth, "grad_ratio")
            sides = [grad.get(f"{side} embeddings") for side in ("encoder", "decoder")]
            if None not in sides:
                grads[kind] = sides
                (near if all(0.1 <= g <= 10 for g in sides) else far).append((kind, depth))
        if grads:
            said.append(f"at {layers_text(depth)} "
                        + ", ".join(f"`{k}` {e:.3g} / {d:.3g}" for k, (e, d) in grads.items()))
    if said:
        def where(kind: str, among: list) -> list[int]:
            return [d for k, d in among if k == kind]
        sums_far = where("sum", far)
        if not sums_far:
            verdict = "The sum keeps it within an order of magnitude of 1 at every depth, as the conjecture says"
        elif all(("sum", d) in failed for d in sums_far):
            sums_near = where("sum", near)
            verdict = ((f"The sum keeps it within an order of magnitude of 1 where it trained ({depths_text(sums_near)}), "
                        "not" if sums_near else "The sum does not keep it within an order of magnitude of 1")
                       + f" at {depths_text(sums_far)}, where it did not train")
        else:
            verdict = (f"The sum itself does not keep it within an order of magnitude of 1 at "
                       f"{depths_text(sums_far)}, so the figures do not support the conjecture as stated (in the "
                       "paper's post-norm layer, the sum's gradient also passes a LayerNorm)")
        others = []
        for kind in KINDS[1:]:
            yes, no = where(kind, near), where(kind, far)
            if yes or no:
                others.append(f"`{kind}` " + (f"keeps it too at {depths_text(yes)}" if yes else "does not")
                              + (f"{' but not' if yes else ','} at {depths_text(no)}" if no else ""))
        lines += ["**1. \"The gradient flows back unimpeded through a sum.\"** The gradient norm at the token "
                  "embeddings over the norm at the top layer's output (encoder / decoder; 1 is unimpeded), at the "
                  "last update: " + "; ".join(said) + ". " + verdict + "".join(f"; {o}" for o in others) + ".", ""]
    # 2. a gentle correction: |f(x)| / |x| of the summed sub-layers, at each depth
    said = []
    for depth in depths:
        update = list(at_last_step(hw, "sum", depth, "update_ratio").values())
        if update:
            small = sum(u < 1 for u in update)
            said.append(f"{at(depth)} {small} of `sum`'s {len(update)} sub-layers change their input by less than "
                        f"its own size at the last update (|f(x)| / |x| median {statistics.median(update):.3g}, "
                        f"{min(update):.3g}-{max(update):.3g}): "
                        + ("each is a correction smaller than its input, as the conjecture says." if small == len(update)
                           else "most are, as the conjecture says; the others are as large as their input or larger."
                           if 2 * small > len(update) else
                           "most are as large as their input or larger, which the conjecture does not predict."))
    if said:
        lines += ["**2. \"A summed layer learns a gentle correction.\"** " + " ".join(said), ""]
    # 3. does concat learn to keep the identity path? W's two halves, against each other; within
    # 10% of each other they weigh x and f(x) alike, and neither path is preferred
    said = []
    for depth in depths:
        w_x = list(at_last_step(hw, "concat", depth, "w_x").values())
        w_f = list(at_last_step(hw, "concat", depth, "w_f").values())
        if w_x:
            x, f = statistics.fmean(w_x), statistics.fmean(w_f)
            said.append(f"{at(depth, 'concat')} W's half acting on x ends at norm {x:.3g} (sub-layers "
                        f"{min(w_x):.3g}-{max(w_x):.3g}) and its half acting on f(x) at {f:.3g}, "
                        + ("both 1 at the start (`residual_init: identity`): " if (init or {}).get(depth, "identity")
                           == "identity" else "both drawn at random at the start (`residual_init: xavier`): ")
                        + ("it weighs x more than f(x), keeping the path." if x > 1.1 * f else
                           "it weighs f(x) more than x." if f > 1.1 * x else
                           "it weighs x and f(x) alike (within 10%)."))
    if said:
        lines += ["**3. Does `concat` keep an identity path?** " + " ".join(said), ""]
    # 4. quality against sum, seed-aware; a gap where a side did not train measures the failure
    if sig:
        samples = next(iter(next(iter(sig.values())).values()))["samples"]
        for name, kind, depth in tested(sig, cells):
            each = [(t, sig[t][name]) for t in corpus.tests]
            significant = [t for t, s in each if s["p_holm"] < 0.05]
            lost = [k for k in ("sum", kind) if (k, depth) in failed]
            lines += [f"**{name}:** " + "; ".join(
                f"{t} {s['delta']:+.2f} BLEU [{s['ci'][0]:+.2f}, {s['ci'][1]:+.2f}], "
                f"{p_is(s['p_holm'], samples, 'Holm p')}" for t, s in each)
                + (f": significant after Holm's adjustment on {', '.join(significant)}." if significant
                   else ": within noise after Holm's adjustment on every test set.")
                + (" Neither run trained: the gap says nothing about the residual kind." if len(lost) == 2 else
                   f" `{lost[0]}` did not train at {layers_text(depth)}: the gap is that failure." if lost else ""),
                ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot_highway(hw: list[dict], cells: list[tuple[str, int]], path: Path) -> None:
    """The gradient-norm ratio by layer along training, one panel per (kind, depth): the token
    embeddings and each encoder layer's input over the top layer's output (decoder dashed)."""
    plt = pyplot()
    depths = sorted({d for _, d in cells})
    kinds = [k for k in KINDS if any(k == c for c, _ in cells)]
    fig, axes = plt.subplots(len(kinds), len(depths), figsize=(3.6 * len(depths) + 1.6, 2.6 * len(kinds)),
                             squeeze=False, sharey=True)
    for i, kind in enumerate(kinds):
        for j, depth in enumerate(depths):
            ax = axes[i][j]
            mine = [r for r in hw if (r["kind"], r["layers"], r["measure"]) == (kind, depth, "grad_ratio")]
            if not mine:
                ax.set_axis_off()
                continue
            # 1 is a gradient that arrives unimpeded; the band is the findings' "within an order of magnitude"
            ax.axhspan(0.1, 10, color="0.92", zorder=0)
            ax.axhline(1, color="0.5", linewidth=0.8, zorder=0)
            for side, style in (("encoder", "-"), ("decoder", "--")):
                parts = [f"{side} embeddings"] + [f"{side} layer {n} input" for n in range(1, depth + 1)]
                for n, part in enumerate(parts):
                    points = sorted((r["step"], r["value"]) for r in mine if r["part"] == part)
                    if points:
                        # one colour per layer on every panel, whatever its depth
                        ax.plot(*zip(*points), style, color=plt.cm.viridis(n / max(1, depths[-1])),
                                label=part.removeprefix(f"{side} ") if side == "encoder" else None)
            ax.set(yscale="log", title=f"{kind}, {layers_text(depth)}", xlabel="update" if i == len(kinds) - 1 else None,
                   ylabel="grad norm / top layer's" if j == 0 else None)
            ax.grid(alpha=0.3)
    deepest = next(row[-1] for row in axes if row[-1].axison)  # its legend names every layer
    axes[0][-1].legend(*deepest.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(1.01, 1),
                       fontsize="small", title="encoder (decoder dashed)", title_fontsize="small")
    fig.suptitle("Gradient reaching each layer's input, geometric mean over seeds\n"
                 "(shaded: within an order of magnitude of the top layer's)", fontsize="medium")
    save_figure(fig, path)


def run(args) -> None:
    data = config.load(args.params, "data", config.DataConfig)
    study = config.load(args.params, "residual_study", ResidualStudyConfig)
    report = config.load(args.params, "report", ReportConfig)
    layers = config.load_value(args.params, "model.layers", config.Positive)
    seeds = config.load_list(args.params, "seeds", config.NonNegative)
    corpus, raw = corpora.get(data.corpus), Path(args.raw)
    cells = groups(study, layers)
    runs = load(run_dirs(cells, seeds, layers, Path(args.runs), Path(args.residual_runs)), corpus.scored)
    rows = table_rows(runs, cells, seeds, corpus)
    sig = significance(runs, cells, seeds, corpus, raw, report.bootstrap_samples, report.bootstrap_seed)
    hw = highway_rows(runs, cells, seeds)
    figures = Path(args.figures)
    files.clear(figures / "*.png", figures / "*.svg", args.table_md, args.findings_md, args.summary_md,
                args.table_json, args.highway_csv)  # never a mix of two runs' outputs
    plot_highway(hw, cells, figures / "highway.png")
    files.write_text(args.highway_csv, to_csv(hw, ["kind", "layers", "step", "part", "measure", "value", "seeds"]))
    files.write_json(args.table_json, {"table": rows, "significance": sig})
    files.write_text(args.table_md, markdown(rows, sig, hw, cells, seeds, corpus))
    files.write_text(args.findings_md, findings(rows, sig, hw, cells, corpus, starts(runs)))
    files.write_text(args.summary_md, summary(rows, sig, cells, corpus))
    print(f"residuals: {len(cells)} cells x {len(seeds)} seeds -> {args.table_md}")
