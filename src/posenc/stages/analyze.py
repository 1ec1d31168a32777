"""Stage `analyze`: turn the classic answers to "why sum, not concatenate?" into measurements.

1. "Only about half of the sinusoidal dimensions move with position": variance of each dimension
   of the position table over positions 0..L-1, and how many dimensions hold 90% / 99% of it.
2. "Word and position vectors occupy nearly orthogonal subspaces": principal angles between the
   token embeddings' and the position table's principal subspaces, against random subspaces.
3. "With a sum, attention does four jobs at once": the first encoder layer's logits split exactly
   into word-word, word-position, position-word and position-position terms (post-norm: the first
   layer's input is exactly token part + position part; dropout off). Where position acts inside
   attention (rope, alibi, relative) no such split exists; for every variant, the share of the
   first layer's logit variance that relative distance alone explains.
4. "Without positions there is no word order": dev BLEU with shuffled and reversed source words.
Every seed's model is measured; a figure that depends on training is reported as its mean ± the
standard deviation over seeds (`over_seeds`), one that does not (a fixed sinusoid) as itself.
Every measurement asks the model (its position part, its first-layer logits); none keys on a
variant's name. The sentences of analysis.md are generated from the numbers, so they stay true
when those change.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import numpy as np
import torch

from posenc import config, corpora, files, runtime, tokens
from posenc.batching import pad
from posenc.checkpoints import load_model
from posenc.corpora import SRC
from posenc.decode import translate
from posenc.figures import STYLE, pyplot, save_figure
from posenc.runs import model_path
from posenc.scoring import read_references, score

TERMS = ("word-word", "word-position", "position-word", "position-position")


# 1 -------------------------------------------------------------------------------------------
def dimension_variance(table: np.ndarray, shares: tuple[float, ...]) -> dict:
    """Variance of each dimension over the rows (positions); dimensions holding each share of it."""
    var = table.var(axis=0)
    cumulative = np.cumsum(np.sort(var)[::-1]) / var.sum()
    return {"positions": int(table.shape[0]), "dims": int(table.shape[1]),
            **{f"dims_{round(s * 100)}pct": int(np.searchsorted(cumulative, s) + 1) for s in shares},
            "variance": [round(float(v), 6) for v in var]}


# 2 -------------------------------------------------------------------------------------------
def principal_basis(matrix: np.ndarray, share: float) -> np.ndarray:
    """Orthonormal basis (dims x k) of the top-k principal directions covering `share` of the variance."""
    centered = matrix - matrix.mean(axis=0)
    _, s, vt = np.linalg.svd(centered, full_matrices=False)
    cumulative = np.cumsum(s ** 2) / np.sum(s ** 2)
    k = int(np.searchsorted(cumulative, share) + 1)
    return vt[:k].T


def principal_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosines of the principal angles between the column spaces of orthonormal a and b."""
    return np.clip(np.linalg.svd(a.T @ b, compute_uv=False), 0.0, 1.0)


def random_cosines(dims: int, k1: int, k2: int, trials: int, seed: int) -> tuple[float, float]:
    """Mean and std over trials of the mean principal cosine of two random subspaces."""
    rng = np.random.default_rng(seed)
    means = [principal_cosines(np.linalg.qr(rng.standard_normal((dims, k1)))[0],
                               np.linalg.qr(rng.standard_normal((dims, k2)))[0]).mean()
             for _ in range(trials)]
    return float(np.mean(means)), float(np.std(means))


def subspace_angles(token_matrix: np.ndarray, position_table: np.ndarray, share: float,
                    trials: int, seed: int) -> dict:
    a, b = principal_basis(token_matrix, share), principal_basis(position_table, share)
    cos = principal_cosines(a, b)
    base_mean, base_std = random_cosines(token_matrix.shape[1], a.shape[1], b.shape[1], trials, seed)
    return {"k_token": a.shape[1], "k_position": b.shape[1], "mean_cos": round(float(cos.mean()), 4),
            "mean_angle_deg": round(float(np.degrees(np.arccos(cos)).mean()), 2),
            "random_mean_cos": round(base_mean, 4), "random_std": round(base_std, 4)}


# 3 -------------------------------------------------------------------------------------------
def first_layer_batches(model, sentences: list[np.ndarray], batch_size: int = 64):
    """(padded source ids, (B, S, S) mask of pairs of real tokens) for each batch of sentences."""
    for start in range(0, len(sentences), batch_size):
        src = pad(sentences[start:start + batch_size], model.config.pad_id).to(model.embed.weight.device)
        real = src != model.config.pad_id
        yield src, real[:, :, None] & real[:, None, :]


@torch.no_grad()
def logit_shares(model, sentences: list[np.ndarray]) -> dict:
    """Each of the four terms' share of the summed term variances, per head and averaged over
    heads, over all (query, key) pairs of real tokens in the first encoder layer."""
    heads = model.config.heads
    stats = torch.zeros(len(TERMS), heads, 3, dtype=torch.float64)  # count, sum, sum of squares
    for src, pairs in first_layer_batches(model, sentences):
        terms = model.first_layer_terms(src)
        for i, name in enumerate(TERMS):
            values = terms[name].double().transpose(0, 1)[:, pairs].cpu()  # (heads, pairs)
            stats[i] += torch.stack((torch.full((heads,), float(values.shape[1]), dtype=torch.float64),
                                     values.sum(1), (values ** 2).sum(1)), dim=1)
    count, total, squares = stats.unbind(-1)
    variance = squares / count - (total / count) ** 2  # (terms, heads)
    share = variance / variance.sum(0, keepdim=True)
    return {"per_head": {name: [round(float(v), 4) for v in share[i]] for i, name in enumerate(TERMS)},
            "mean": {name: round(float(share[i].mean()), 4) for i, name in enumerate(TERMS)}}


@torch.no_grad()
def distance_share(model, sentences: list[np.ndarray]) -> dict:
    """The share of the first encoder layer's logit variance explained by the distance j - i
    alone (the correlation ratio eta^2 of the logits grouped by distance), per head and averaged:
    1 when the logits are a function of distance (a pure ALiBi bias), near 0 when position plays
    no part. Defined for every variant, additive or not."""
    span = max(len(s) for s in sentences)
    heads = model.config.heads
    count = torch.zeros(2 * span - 1, dtype=torch.float64)
    sums = torch.zeros(heads, 2 * span - 1, dtype=torch.float64)
    squares = torch.zeros(heads, dtype=torch.float64)
    for src, pairs in first_layer_batches(model, sentences):
        positions = torch.arange(src.shape[1], device=src.device)
        distance = (positions[None, :] - positions[:, None] + span - 1).expand_as(pairs)[pairs]
        values = model.first_layer_logits(src).double().transpose(0, 1)[:, pairs].cpu()  # (heads, pairs)
        distance = distance.cpu()
        count.index_add_(0, distance, torch.ones_like(distance, dtype=torch.float64))
        sums.index_add_(1, distance, values)
        squares += (values ** 2).sum(1)
    n = count.sum()
    grand = sums.sum(1) / n
    between = (sums ** 2 / count.clamp(min=1)).sum(1) - n * grand ** 2
    share = between / (squares - n * grand ** 2)
    return {"per_head": [round(float(v), 4) for v in share], "mean": round(float(share.mean()), 4)}


def where_position(model) -> str:
    """Where the variant puts position, as the model is built (not as its name says)."""
    if model.positional.position_part(torch.arange(1, device=model.embed.weight.device)) is not None:
        return "first layer"
    if model.encoder[0].attn.position is not None:
        return "self-attention"
    return "nowhere (the decoder's causal mask only)"


# 4 -------------------------------------------------------------------------------------------
def reorder_words(lines: list[str], how: str, seed: int) -> list[str]:
    if how == "original":
        return list(lines)
    if how == "reversed":
        return [" ".join(line.split()[::-1]) for line in lines]
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        rng.shuffle(words)
        out.append(" ".join(words))
    return out


def word_order_bleu(model, sp, sources: list[str], references: list[str], seed: int,
                    eval_cfg: config.EvalConfig) -> dict:
    result = {}
    for how in ("original", "shuffled", "reversed"):
        ids = [np.array(s + [model.config.eos_id]) for s in sp.encode(reorder_words(sources, how, seed))]
        out = translate(model, ids, eval_cfg.beam, eval_cfg.lenpen, eval_cfg.max_len_extra,
                        eval_cfg.batch_tokens, model.embed.weight.device, desc=f"{model.config.positional} {how}")
        result[how] = score([sp.decode(o) for o in out], references)["bleu"]
    return result


# over seeds ----------------------------------------------------------------------------------
def over_seeds(values: list):
    """One measurement from several seeds' models: equal values stay as they are; numbers that
    differ become {"seed_mean", "seed_std", "per_seed"}; lists (a table's variance per
    dimension) become their element-wise mean; dicts are combined key by key."""
    first = values[0]
    if isinstance(first, dict):
        return {k: over_seeds([v[k] for v in values]) for k in first}
    if isinstance(first, list):
        return [round(statistics.fmean(column), 6) for column in zip(*values)]
    if all(v == first for v in values) or not isinstance(first, (int, float)):
        return first
    return {"seed_mean": round(statistics.fmean(values), 4), "seed_std": round(statistics.stdev(values), 4),
            "per_seed": values}


def mean(x) -> float:
    """The number, or its mean over seeds."""
    return x["seed_mean"] if isinstance(x, dict) else x


def fmt(x, digits: int | None = None) -> str:
    """`mean ± std` over seeds (one decimal unless `digits` says), or the number alone where every
    seed gave it."""
    if isinstance(x, dict):
        d = 1 if digits is None else digits
        return f"{x['seed_mean']:.{d}f} ± {x['seed_std']:.{d}f}"
    return f"{x:.{digits}f}" if digits is not None else f"{x:g}"


# the stage -----------------------------------------------------------------------------------
def analyze(models: dict, sp, corpus: corpora.Corpus, arrays: Path, raw: Path,
            cfg: config.AnalyzeConfig, eval_cfg: config.EvalConfig) -> dict:
    """`models`: variant name -> trained model (one seed)."""
    eos = next(iter(models.values())).config.eos_id
    train = [tokens.load(tokens.array_path(arrays, "train", lang), eos) for lang in ("en", "de")]
    longest = max(len(s) for side in train for s in side)
    limit = cfg.max_sentences or None
    dev = tokens.load(tokens.array_path(arrays, corpus.dev, SRC), eos)[:limit]
    dev_sources = files.read_lines(Path(raw) / f"{corpus.dev}.{SRC}")[:limit]
    dev_references = read_references(raw, corpus.dev, limit)
    out = {"longest_training_sentence": longest, "where_position": {}, "position_variance": {},
           "subspace_angles": {}, "logit_terms": {}, "distance_share": {}, "word_order_bleu": {}}
    for name, model in models.items():
        out["where_position"][name] = where_position(model)
        # A learned table has max_len rows: the long range stops there ("positions" says so).
        rows = {n: min(n, model.max_len or n) for n in (longest, cfg.long_positions)}
        device = model.embed.weight.device
        parts = {n: model.positional.position_part(torch.arange(r, device=device)) for n, r in rows.items()}
        if parts[longest] is not None:
            tables = {f"L{n}": p.detach().cpu().numpy() for n, p in parts.items()}
            out["position_variance"][name] = {k: dimension_variance(t, cfg.variance_shares)
                                              for k, t in tables.items()}
            embeddings = model.positional.token_part(model.embed.weight.detach() * model.scale).cpu().numpy()
            embeddings = np.delete(embeddings, model.config.pad_id, axis=0)
            out["subspace_angles"][name] = subspace_angles(
                embeddings, tables[f"L{longest}"], cfg.subspace_share, cfg.random_trials, cfg.seed)
        reason = model.logit_split()
        out["logit_terms"][name] = logit_shares(model, dev) if reason is None else {"undefined": reason}
        out["distance_share"][name] = distance_share(model, dev)
        out["word_order_bleu"][name] = word_order_bleu(model, sp, dev_sources, dev_references,
                                                       cfg.seed, eval_cfg)
    return out


def markdown(a: dict, shares: tuple[float, ...]) -> str:
    """analysis.md: each conjecture, the measured figures, and the verdict they support."""
    s_lo, s_hi = (round(s * 100) for s in (shares[0], shares[-1]))
    n = len(a["seeds"])
    lines = ["Generated by `posenc analyze` from `results/analysis.json`; every figure below is read "
             f"from that file. The models of {n} seed{'s' if n > 1 else ''} per variant are measured"
             + ("; a figure that depends on training is their mean ± the standard deviation over "
                "seeds, one that does not (a fixed sinusoid) is given once." if n > 1 else "."),
             "", "### 1. \"Only about half of the sinusoidal dimensions carry position\"", ""]
    for colour, (name, tables) in enumerate(a["position_variance"].items()):
        for key, t in tables.items():
            lines.append(f"- {name}, positions 0..{t['positions'] - 1}: {s_lo}% of the positional variance "
                         f"lies in {fmt(t[f'dims_{s_lo}pct'])} of {t['dims']} dimensions, {s_hi}% in "
                         f"{fmt(t[f'dims_{s_hi}pct'])}.")
    key = f"L{a['longest_training_sentence']}"
    for name, tables in a["position_variance"].items():
        short = tables[key]
        half = mean(short[f"dims_{s_lo}pct"]) <= 0.6 * short["dims"]
        lines.append(f"\n- {name}: over the sentence lengths seen in training (up to "
                     f"{a['longest_training_sentence']} subwords) the claim "
                     f"{'holds' if half else 'does not hold'}: {fmt(short[f'dims_{s_lo}pct'])} of "
                     f"{short['dims']} dimensions carry {s_lo}% of the variance.")
    others = [n for n in a["where_position"] if n not in a["position_variance"]]
    if others:
        lines.append(f"\n- {', '.join(others)}: no position vectors at the first layer, so "
                     "sections 1 and 2 do not apply.")
    lines += ["", "### 2. \"Word and position vectors occupy nearly orthogonal subspaces\"", ""]
    for name, r in a["subspace_angles"].items():
        cos, chance, spread = mean(r["mean_cos"]), mean(r["random_mean_cos"]), mean(r["random_std"])
        closer, farther = cos < chance - 2 * spread, cos > chance + 2 * spread
        verdict = ("closer to orthogonal than" if closer else "less orthogonal than" if farther
                   else "as orthogonal as")
        lines.append(f"- {name}: principal subspaces of {fmt(r['k_token'])} (tokens) and {fmt(r['k_position'])} "
                     f"(positions) dimensions; mean cosine of the principal angles {fmt(r['mean_cos'], 4)} "
                     f"(mean angle {fmt(r['mean_angle_deg'])}°), against {fmt(chance, 4)} ± "
                     f"{fmt(spread, 4)} for random subspaces of the same sizes: {verdict} chance "
                     "(by the means over seeds).")
    split = {n: r for n, r in a["logit_terms"].items() if "undefined" not in r}
    lines += ["", "### 3. \"With a sum, attention does four jobs at once\"", "",
              "Share of the first encoder layer's attention-logit variance (mean over heads):", "",
              "| variant | " + " | ".join(TERMS) + " |", "|---|" + "---|" * len(TERMS)]
    for name, r in split.items():
        lines.append(f"| {name} | " + " | ".join(fmt(r['mean'][t], 3) for t in TERMS) + " |")
    for name, r in split.items():
        cross = mean(r["mean"]["word-position"]) + mean(r["mean"]["position-word"])
        lines.append(f"\n- {name}: the cross terms carry {cross:.1%} of the logit variance, "
                     f"position-position {mean(r['mean']['position-position']):.1%}.")
    for name, r in a["logit_terms"].items():
        if "undefined" in r:
            lines.append(f"\n- {name}: not defined: {r['undefined']}.")
    lines += ["", "Share of the same logits' variance that the distance j - i alone explains "
              "(eta squared; 1 = a function of distance only):", "",
              "| variant | position enters | distance share |", "|---|---|---|"]
    for name, r in a["distance_share"].items():
        lines.append(f"| {name} | {a['where_position'][name]} | {fmt(r['mean'], 3)} |")
    lines += ["", "### 4. \"Without positions the model has no notion of word order\"", "",
              "Dev BLEU with the source words in their original order, shuffled (seeded) and reversed:", "",
              "| variant | original | shuffled | reversed |", "|---|---|---|---|"]
    for name, r in a["word_order_bleu"].items():
        lines.append(f"| {name} | {fmt(r['original'], 2)} | {fmt(r['shuffled'], 2)} | {fmt(r['reversed'], 2)} |")
    for name, r in a["word_order_bleu"].items():
        drop = mean(r["original"]) - mean(r["shuffled"])
        lines.append(f"\n- {name}: shuffling the source costs {drop:.2f} BLEU"
                     + (" (its encoder sees a bag of words, so order cannot matter)."
                        if a["where_position"][name].startswith("nowhere") else "."))
    return "\n".join(lines) + "\n"


FLOOR = 1e-6  # variances below this are drawn at it: a log axis has no zero


def plot(a: dict, figures: Path, shares: tuple[float, ...]) -> None:
    plt = pyplot()
    # 1: each table's dimensions sorted by their variance over positions, both ranges, with the
    # number of dimensions that hold each share of it marked. Variants with the same table (the
    # sinusoid of sinusoidal and sinusoidal_narrow) are drawn once, named together.
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    same: dict[str, list[str]] = {}
    for name, tables in a["position_variance"].items():
        key = json.dumps(tables, sort_keys=True)
        same.setdefault(key, []).append(name)
    for names in same.values():
        tables = a["position_variance"][names[0]]
        colour, marker, _ = STYLE[names[0]]
        for key, t in tables.items():
            var = np.maximum(np.sort(np.array(t["variance"]))[::-1], FLOOR)
            short = key == f"L{a['longest_training_sentence']}"
            ax.plot(np.arange(1, len(var) + 1), var, linestyle="-" if short else "--", color=colour,
                    label=f"{' and '.join(names)}, positions 0..{t['positions'] - 1}")
            for share in shares:
                k = round(mean(t[f"dims_{round(share * 100)}pct"]))
                ax.plot([k], [var[k - 1]], marker="o" if share == shares[0] else "s", color=colour)
    ax.plot([], [], "k-", label="solid: the positions of training")
    ax.plot([], [], "k--", label="dashed: the long range (or the table's rows)")
    ax.plot([], [], "ko", label=f"{round(shares[0] * 100)}% of the variance within")
    ax.plot([], [], "ks", label=f"{round(shares[-1] * 100)}% within")
    ax.set(xlabel="dimensions, sorted by their variance",
           ylabel=f"variance of the dimension over positions\n(log; below {FLOOR:g} drawn at {FLOOR:g})",
           yscale="log", ylim=(FLOOR / 2, None), title="How many dimensions move with position")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, figures / "position_variance.png")

    # 3: the four-term split where it is defined, and which variants it is not defined for
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    names = [n for n, r in a["logit_terms"].items() if "undefined" not in r]
    undefined = [n for n in a["logit_terms"] if n not in names]
    bottom = np.zeros(len(names))
    for term, grey in zip(TERMS, ("0.15", "0.4", "0.65", "0.85")):  # greys: not the variants' colours
        cells = [a["logit_terms"][n]["mean"][term] for n in names]
        values = np.array([mean(c) for c in cells])
        ax.bar(names, values, bottom=bottom, label=term, color=grey, edgecolor="white",
               yerr=[c["seed_std"] if isinstance(c, dict) else 0 for c in cells], capsize=2,
               error_kw={"ecolor": "#D55E00"})
        bottom += values
    ax.set(xlabel="variant" + (f"\n(not defined for {', '.join(undefined)}: position acts inside "
                               "attention)" if undefined else ""),
           ylabel="share of logit variance (± std over seeds)", title="First encoder layer: the four logit terms")
    ax.tick_params(axis="x", labelrotation=30)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, figures / "logit_terms.png")

    # 4: word orders in greys, so that they are not read as the variants' colours
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    names = list(a["word_order_bleu"])
    for i, (how, grey) in enumerate(zip(("original", "shuffled", "reversed"), ("0.2", "0.55", "0.8"))):
        cells = [a["word_order_bleu"][n][how] for n in names]
        ax.bar([j + i * 0.27 for j in range(len(names))], [mean(c) for c in cells], 0.27, label=how,
               color=grey, yerr=[c["seed_std"] if isinstance(c, dict) else 0 for c in cells], capsize=2)
    ax.set_xticks([j + 0.27 for j in range(len(names))], names, rotation=30, ha="right")  # long names
    ax.set(xlabel="variant", ylabel="dev BLEU (± std over seeds)", title="Source word order")
    ax.legend(title="source words", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    save_figure(fig, figures / "word_order.png")


def run(args) -> None:
    data = config.load(args.params, "data", config.DataConfig)
    cfg = config.load(args.params, "analyze", config.AnalyzeConfig)
    eval_cfg = config.load(args.params, "eval", config.EvalConfig)
    variants = config.load_list(args.params, "variants", config.Variant)
    seeds = config.load_list(args.params, "seeds", config.NonNegative)
    device = runtime.setup(eval_cfg.threads, config.load_value(args.params, "numerics", config.Numerics))
    sp = tokens.load_tokenizer(Path(args.spm))
    corpus = corpora.get(data.corpus)
    each = [analyze({v: load_model(model_path(Path(args.models), v, seed), device) for v in variants},
                    sp, corpus, Path(args.arrays), Path(args.raw), cfg, eval_cfg) for seed in seeds]
    result = {"seeds": list(seeds), **over_seeds(each)}
    figures = Path(args.figures)
    files.clear(figures / "*.png", figures / "*.svg", args.json, args.md)  # never a mix of two runs'
    plot(result, figures, cfg.variance_shares)
    files.write_json(args.json, result)
    files.write_text(args.md, markdown(result, cfg.variance_shares))
    order = result["word_order_bleu"]
    print(f"analyze: {len(seeds)} seed(s), dev BLEU original/shuffled: "
          + ", ".join(f"{v} {fmt(r['original'], 2)}/{fmt(r['shuffled'], 2)}" for v, r in order.items())
          + f" -> {args.md}")
