"""Stage `extrapolate`: §3.5's claim that sinusoids "may allow the model to extrapolate to sequence
lengths longer than the ones encountered during training", tested on one run.

Inputs longer than any training sentence are made from real test sets, after Varis & Bojar 2021
("Sequence length is a domain"): k consecutive source sentences joined with a space, their
references joined likewise, each joined input translated as one sentence and scored with
sacreBLEU against the joined reference, for each k of `extrapolate.joins`. They build long
inputs by joining short pairs too, but bucket their test data by target length; here each k is
scored as a whole, and the share of its inputs longer than the longest training source says how
far beyond training it reaches. The last (k - n mod k) sentences of a split, too few for a whole
join, are left out. Decoding is the evaluate stage's (`eval` params), with the averaged model
(the test sets' protocol, §6.1); a hypothesis that reaches the output limit (source length +
`eval.max_len_extra`, or a learned table's end) is counted, since that limit would cut it short.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from posenc import config, corpora, files, runtime, tokens
from posenc.checkpoints import load_model
from posenc.config import NonNegative, Positive
from posenc.corpora import SRC, TGT
from posenc.decode import EvalConfig, check_beam, translate
from posenc.errors import UserError
from posenc.scoring import read_references, score


@dataclass(frozen=True)
class ExtrapolateConfig:
    """§3.5's claim, tested: inputs made longer than any in training by joining test sentences."""
    joins: tuple[Positive, ...]   # k: consecutive sentences (and references) joined into one input
    splits: tuple[str, ...]       # the test sets joined; each a test split of data.corpus
    max_sentences: NonNegative    # 0: every sentence; else the first N of each split (quick profiles)


def joined(lines: list[str], k: int) -> list[str]:
    """Every k consecutive lines joined with a space; a remainder shorter than k is left out."""
    return [" ".join(lines[i:i + k]) for i in range(0, len(lines) - len(lines) % k, k)]


def longest(arrays: Path, split: str, lang: str, eos: int) -> int:
    """The longest sentence of a prepared split, in positions (subwords and EOS)."""
    return max(len(s) for s in tokens.load(tokens.array_path(arrays, split, lang), eos))


def extrapolate(model, sp, raw: Path, splits: tuple[str, ...], cfg: ExtrapolateConfig,
                eval_cfg: EvalConfig, longest_source: int, device="cpu", where: str = "params.yaml") -> dict:
    """{split: {k: figures}} for one model; `where` names the params file in errors."""
    eos, limit = model.config.eos_id, cfg.max_sentences or None
    result = {}
    for split in splits:
        sources = files.read_lines(Path(raw) / f"{split}.{SRC}")[:limit]
        references = read_references(raw, split, limit)
        result[split] = {}
        for k in cfg.joins:
            inputs = [np.array(ids + [eos]) for ids in sp.encode(joined(sources, k))]
            if not inputs:
                raise UserError(f"{where}: extrapolate.joins: k = {k} is more than the "
                                f"{len(sources)} sentences of {split}; lower it")
            lengths = np.array([len(s) for s in inputs])
            if model.max_len is not None and lengths.max() > model.max_len:
                raise UserError(f"{where}: extrapolate.joins: k = {k} makes {split} inputs of "
                                f"{lengths.max()} positions, more than the learned table's "
                                f"{model.max_len} rows; raise positional.{model.config.positional}.max_positions and retrain")
            out = translate(model, inputs, eval_cfg.beam, eval_cfg.lenpen, eval_cfg.max_len_extra,
                            eval_cfg.batch_tokens, device, desc=f"{model.config.positional} {split} k={k}")
            # beam_search's limit: source positions + max_len_extra (the table's end for learned)
            caps = np.minimum(lengths + eval_cfg.max_len_extra, model.max_len or np.iinfo(np.int64).max)
            at_limit = int(sum(len(o) + 1 >= cap for o, cap in zip(out, caps)))
            figures = score([sp.decode(o) for o in out], joined(references, k))
            result[split][str(k)] = {
                "inputs": len(inputs), "bleu": figures["bleu"], "chrf": figures["chrf"],
                "length_ratio": figures["length_ratio"],  # below 1: the outputs stop short
                "bleu_signature": figures["bleu_signature"],
                "mean_source_positions": round(float(lengths.mean()), 1),
                "max_source_positions": int(lengths.max()),
                "max_output_positions": max(len(o) for o in out) + 1,  # BOS and the tokens
                "longer_than_training": round(float((lengths > longest_source).mean()), 4),
                "at_length_limit": at_limit}
    return result


def run(args) -> None:
    data = config.load(args.params, "data", config.DataConfig)
    cfg = config.load(args.params, "extrapolate", ExtrapolateConfig)
    eval_cfg = config.load(args.params, "eval", EvalConfig)
    corpus = corpora.get(data.corpus)
    unknown = [s for s in cfg.splits if s not in corpus.tests]
    if unknown or not cfg.splits:
        raise UserError(f"{args.params}: extrapolate.splits: {unknown[0] + ' is not a test set' if unknown else 'empty'}"
                        f"; choose from {', '.join(corpus.tests)}")
    device = runtime.setup(eval_cfg.threads, config.load_value(args.params, "numerics", config.Numerics))
    model = load_model(Path(args.model), device)
    check_beam(eval_cfg.beam, model.config.vocab_size, f"{args.params}: eval.beam")
    sp = tokens.load_tokenizer(Path(args.spm))
    tokens.check_vocabulary(sp, Path(args.spm), model.config.vocabulary, Path(args.model))
    eos, arrays = model.config.eos_id, Path(args.arrays)
    longest_source = longest(arrays, "train", SRC, eos)
    longest_target = longest(arrays, "train", TGT, eos)
    result = extrapolate(model, sp, Path(args.raw), cfg.splits, cfg, eval_cfg, longest_source, device,
                         args.params)
    files.write_json(args.out, {
        "variant": model.config.positional, "seed": args.seed,
        # positions a learned table never saw in training: beyond both sides' longest sentence
        "longest_training_source": longest_source, "longest_training_target": longest_target,
        "table_rows": model.max_len, "splits": result})
    print(f"extrapolate: {model.config.positional} seed {args.seed}: "
          + "; ".join(f"{split} " + ", ".join(f"k={k} BLEU {v['bleu']}" for k, v in ks.items())
                      for split, ks in result.items()) + f" -> {args.out}")
