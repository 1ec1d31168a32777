"""Stage `evaluate`: translate the dev and test sets, score them, write the metrics of one run.

The paper's protocol: Table 3's dev columns (perplexity and BLEU) are of single models, "no
checkpoint averaging" (§6.2): the last checkpoint. The test sets are scored with the average of
the last checkpoints, as for Table 2 (§6.1). The train stage writes both models.

Hypotheses are decoded from SentencePiece back to text and scored with sacreBLEU against the
untouched references from data/raw (BLEU and chrF, with their signatures), the primary figures;
beside them the paper's own kind of BLEU, tokenized and compound-split (posenc.scoring). Dev
perplexity is per wordpiece, teacher-forced, without label smoothing: Table 3's PPL column.
"""

from __future__ import annotations

from pathlib import Path

import sentencepiece as spm

from posenc import config, corpora, files, numerics, runtime, tokens
from posenc.checkpoints import load_model
from posenc.corpora import SRC, TGT, Corpus
from posenc.decode import EvalConfig, check_beam, translate
from posenc.model import check_lengths, count_parameters
from posenc.perplexity import corpus_nll, perplexity
from posenc.scoring import compound_split_bleu, hypothesis_files, hypothesis_path, read_references, score


def evaluate(model, last, sp: spm.SentencePieceProcessor, corpus: Corpus, arrays: Path, raw_dir: Path,
             cfg: EvalConfig, device="cpu") -> tuple[dict, dict[str, list[str]]]:
    """(metrics, hypotheses per split) for one run: the dev split with `last` (the last
    checkpoint), the test splits with `model` (the averaged one)."""
    eos, limit = model.config.eos_id, cfg.max_sentences or None
    paths = [tokens.array_path(arrays, corpus.dev, TGT)]
    paths += [tokens.array_path(arrays, split, SRC) for split in corpus.scored]
    read = {path: tokens.load(path, eos)[:limit] for path in paths}
    # A source longer than a learned position table is not cut to fit (that would score a
    # translation of part of the sentence): the stage stops before decoding, naming it.
    for path, sentences in read.items():
        tokens.check_ids(path, sentences, model.config.vocab_size)
    check_lengths(model, read)
    dev_src = read[tokens.array_path(arrays, corpus.dev, SRC)]
    dev_tgt = read[tokens.array_path(arrays, corpus.dev, TGT)]
    nll, count = corpus_nll(last, dev_src, dev_tgt, cfg.batch_tokens, device)
    metrics = {"parameters": count_parameters(model), "dev_ppl": round(perplexity(nll, count), 4)}
    metrics.update(bleu={}, chrf={}, bleu_tok={})
    hypotheses = {}
    for split in corpus.scored:
        src = read[tokens.array_path(arrays, split, SRC)]
        which = last if split == corpus.dev else model
        out = translate(which, src, cfg.beam, cfg.lenpen, cfg.max_len_extra, cfg.batch_tokens,
                        device, desc=f"{model.config.positional} {split}")
        hypotheses[split] = [sp.decode(ids) for ids in out]
        references = read_references(raw_dir, split, limit, sources=len(src))
        result = score(hypotheses[split], references)
        metrics["bleu"][split], metrics["chrf"][split] = result["bleu"], result["chrf"]
        metrics["bleu_tok"][split] = compound_split_bleu(hypotheses[split], references)
        metrics["signature"] = {"bleu": result["bleu_signature"], "chrf": result["chrf_signature"]}
    return metrics, hypotheses


def run(args) -> None:
    data = config.load(args.params, "data", config.DataConfig)
    cfg = config.load(args.params, "eval", EvalConfig)
    mode = config.load_value(args.params, "numerics", config.Numerics)
    device = runtime.setup(cfg.threads, mode)
    model, last = load_model(Path(args.model), device), load_model(Path(args.last), device)
    check_beam(cfg.beam, model.config.vocab_size, f"{args.params}: eval.beam")
    sp = tokens.load_tokenizer(Path(args.spm))
    tokens.check_vocabulary(sp, Path(args.spm), model.config.vocabulary, Path(args.model))
    corpus = corpora.get(data.corpus)
    metrics, hypotheses = evaluate(model, last, sp, corpus, Path(args.arrays), Path(args.raw), cfg, device)
    # never a mix of two runs' outputs (posenc.files.clear)
    files.clear(hypothesis_files(Path(args.hyps)), args.signatures, args.metrics, args.scores)
    for split, lines in hypotheses.items():
        files.write_lines(hypothesis_path(Path(args.hyps), split), lines)
    # The run's own facts (variant, seed, depth, residual kind and start), which the aggregates
    # label their rows with and check against their params, and how it was scored.
    c = model.config
    files.write_json(args.signatures, {"variant": c.positional, "seed": args.seed, "layers": c.layers,
                                       "residual": c.residual, "residual_init": c.residual_init,
                                       **metrics.pop("signature"), "numerics": numerics.record(mode)})
    # DVC's metrics file holds numbers only, one flat key each (`dvc metrics show` is a table of
    # them): the Table 3 figures (dev perplexity and BLEU, §6.2) and the first test set's BLEU
    # (Table 2's protocol), so that the table fits 120 columns; the other test sets' BLEU and the
    # secondary scores go beside it.
    headline = corpus.scored[:2]
    files.write_json(args.metrics, {"parameters": metrics["parameters"], "dev_ppl": metrics["dev_ppl"],
                                    **{f"bleu_{split}": metrics["bleu"][split] for split in headline}})
    files.write_json(args.scores, {f"{m}_{split}": v for m in ("chrf", "bleu_tok", "bleu")
                                   for split, v in metrics[m].items() if m != "bleu" or split not in headline})
    # the residual study's runs share the variant: name the residual kind and depth too
    print(f"evaluate: {c.positional}, {c.layers} layers, residual {c.residual}, seed {args.seed}: "
          f"dev PPL {metrics['dev_ppl']:.2f}, " + ", ".join(f"{k} BLEU {v}" for k, v in metrics["bleu"].items()))
