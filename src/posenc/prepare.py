"""Stage `prepare`: a joint SentencePiece BPE model (§5.1), every split encoded, stats.

Training pairs longer than `max_len` subwords on a side, or with a length ratio above
`max_ratio`, are dropped; dev and test sets are never filtered (they are scored whole).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import sentencepiece as spm
from tqdm import tqdm

from posenc import files, tokens
from posenc.corpora import SRC, TGT, Corpus
from posenc.errors import UserError

# Fixed special ids, so every run and every variant agrees on them.
PAD, UNK, BOS, EOS = 0, 1, 2, 3


def train_tokenizer(texts: list[Path], model_path: Path, vocab_size: int, character_coverage: float,
                    input_sentence_size: int, seed: int, threads: int) -> None:
    """Train a joint BPE model on `texts`; the same inputs always give the same bytes."""
    spm.set_random_generator_seed(seed)
    # Written through memory: with a model_prefix, the (temporary) prefix would be stored inside
    # the model and two runs would differ in those bytes.
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            input=[str(p) for p in texts], model_writer=model, model_type="bpe",
            vocab_size=vocab_size, character_coverage=character_coverage,
            input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
            num_threads=threads, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
            minloglevel=2)
    except RuntimeError as e:
        raise UserError(f"params.yaml: tokenizer.vocab_size {vocab_size} does not fit the "
                        f"training text ({str(e).splitlines()[-1]}); lower it") from None
    files.write_bytes(model_path, model.getvalue())


def encode_splits(sp: spm.SentencePieceProcessor, raw_dir: Path, corpus: Corpus, arrays_dir: Path,
                  max_len: int, max_ratio: float) -> dict:
    """Encode every split of `corpus` into `arrays_dir` (replaced whole); return the stats."""
    tmp = arrays_dir.parent / f".{arrays_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    stats = {}
    try:
        for split in tqdm(corpus.splits, desc="encode", unit=" split"):
            ids = {}
            for lang in (SRC, TGT):
                path = raw_dir / f"{split.name}.{lang}"
                if not path.is_file():
                    raise UserError(f"{path}: missing; run `dvc repro fetch` first")
                ids[lang] = sp.encode(files.read_lines(path))
            pairs = list(zip(ids[SRC], ids[TGT]))
            if split.role == "train":
                pairs = [(s, t) for s, t in pairs if keep_pair(len(s), len(t), max_len, max_ratio)]
            for i, lang in enumerate((SRC, TGT)):
                tokens.save(tokens.array_path(tmp, split.name, lang), [p[i] for p in pairs],
                            EOS, sp.vocab_size())
            stats[split.name] = {
                "pairs": len(pairs), "dropped": len(ids[SRC]) - len(pairs),
                f"mean_len_{SRC}": round(sum(len(p[0]) for p in pairs) / max(len(pairs), 1), 3),
                f"mean_len_{TGT}": round(sum(len(p[1]) for p in pairs) / max(len(pairs), 1), 3)}
        train = next(s.name for s in corpus.splits if s.role == "train")
        if stats[train]["pairs"] == 0:
            raise UserError(f"{raw_dir / train}.*: no training pair survives data.max_len={max_len} "
                            f"and data.max_ratio={max_ratio}; raise them")
        if arrays_dir.exists():
            shutil.rmtree(arrays_dir)
        os.replace(tmp, arrays_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"vocab_size": sp.vocab_size(), "splits": stats}


def keep_pair(src_len: int, tgt_len: int, max_len: int, max_ratio: float) -> bool:
    if min(src_len, tgt_len) == 0 or max(src_len, tgt_len) > max_len:
        return False
    return max(src_len, tgt_len) / min(src_len, tgt_len) <= max_ratio


def run(args) -> None:
    from posenc import config, corpora

    data = config.load(args.params, "data", config.DataConfig)
    tok = config.load(args.params, "tokenizer", config.TokenizerConfig)
    corpus = corpora.get(data.corpus)
    raw = Path(args.raw)
    texts = [raw / f"train.{lang}" for lang in (SRC, TGT)]
    for path in texts:
        if not path.is_file():
            raise UserError(f"{path}: missing; run `dvc repro fetch` first")
    train_tokenizer(texts, Path(args.spm), tok.vocab_size, tok.character_coverage,
                    tok.input_sentence_size, tok.seed, tok.threads)
    sp = spm.SentencePieceProcessor(model_file=str(args.spm))
    stats = encode_splits(sp, raw, corpus, Path(args.arrays), data.max_len, data.max_ratio)
    files.write_json(args.stats, stats)
    train = stats["splits"]["train"]
    print(f"prepare: vocabulary {stats['vocab_size']}, train pairs kept {train['pairs']}, "
          f"dropped {train['dropped']} (max_len {data.max_len}, max_ratio {data.max_ratio})")
