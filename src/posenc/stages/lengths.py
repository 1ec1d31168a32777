"""Stage `lengths`: §3.5's second protocol, scored. One model trained on short pairs (the shorten
stage, dvc.yaml's train_short) translates every natural sentence of the evaluation splits (val
and the test sets), and the translations are scored by source length: within the training bound
L (`short_training.max_len`, subwords with EOS) and in the buckets beyond it
(`short_training.buckets`, the last to the longest source). Per bucket, pooled over the splits:
sentences, sacreBLEU's BLEU and chrF, BLEU's length ratio, and how many outputs stop at or before
L target positions (EOS included): the early stop that a model trained on short targets may
learn whatever its position scheme (Varis & Bojar 2021). The averaged model is used, as for the
test sets (§6.1); the hypotheses are saved per split.
"""

from __future__ import annotations

from pathlib import Path

from posenc import config, corpora, files, runtime, tokens
from posenc.buckets import ShortTrainingConfig, bucket_bounds, bucket_name, by_bucket
from posenc.checkpoints import load_model
from posenc.corpora import SRC
from posenc.decode import EvalConfig, check_beam, translate
from posenc.model import check_lengths
from posenc.scoring import hypothesis_files, hypothesis_path, read_references, score


def run(args) -> None:
    cfg = config.load(args.params, "eval", EvalConfig)
    short = config.load(args.params, "short_training", ShortTrainingConfig)
    data = config.load(args.params, "data", config.DataConfig)
    corpus = corpora.get(data.corpus)
    device = runtime.setup(cfg.threads, config.load_value(args.params, "numerics", config.Numerics))
    model = load_model(Path(args.model), device)
    check_beam(cfg.beam, model.config.vocab_size, f"{args.params}: eval.beam")
    sp = tokens.load_tokenizer(Path(args.spm))
    tokens.check_vocabulary(sp, Path(args.spm), model.config.vocabulary, Path(args.model))
    eos, limit, arrays = model.config.eos_id, cfg.max_sentences or None, Path(args.arrays)
    splits = list(corpus.scored)
    sources = {split: tokens.load(tokens.array_path(arrays, split, SRC), eos)[:limit] for split in splits}
    for split, sentences in sources.items():
        tokens.check_ids(tokens.array_path(arrays, split, SRC), sentences, model.config.vocab_size)
    check_lengths(model, {tokens.array_path(arrays, split, SRC): s for split, s in sources.items()})
    lengths, outputs, hyps, refs, texts = [], [], [], [], {}
    for split in splits:
        out = translate(model, sources[split], cfg.beam, cfg.lenpen, cfg.max_len_extra, cfg.batch_tokens,
                        device, desc=f"{model.config.positional} {split}")
        text = texts[split] = [sp.decode(ids) for ids in out]
        lengths += [len(s) for s in sources[split]]
        outputs += [len(ids) + 1 for ids in out]  # target positions, EOS included
        hyps += text
        refs += read_references(Path(args.raw), split, limit, sources=len(sources[split]))
    bounds = bucket_bounds(short.max_len, short.buckets)
    rows, signatures = [], {}
    for (low, high), idx in zip(bounds, by_bucket(lengths, bounds)):
        row = {"sources": bucket_name(low, high), "sentences": len(idx),
               "stopped_within_max_len": sum(outputs[i] <= short.max_len for i in idx)}
        if idx:
            result = score([hyps[i] for i in idx], [refs[i] for i in idx])
            row |= {k: result[k] for k in ("bleu", "chrf", "length_ratio")}
            signatures = {k: result[f"{k}_signature"] for k in ("bleu", "chrf")}
        rows.append(row)
    files.clear(hypothesis_files(Path(args.hyps)), args.out)  # never a mix of two runs' outputs
    for split, text in texts.items():
        files.write_lines(hypothesis_path(Path(args.hyps), split), text)
    files.write_json(args.out, {"variant": model.config.positional, "seed": args.seed,
                                "max_len": short.max_len, "splits": splits, "buckets": rows,
                                "signatures": signatures})
    print(f"lengths: {model.config.positional} seed {args.seed}: BLEU by source length "
          + ", ".join(f"{r['sources']} {r.get('bleu', '-')}" for r in rows) + f" -> {args.out}")
