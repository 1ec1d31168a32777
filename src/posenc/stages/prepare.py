"""Stage `prepare`: a joint SentencePiece BPE model (§5.1), every split encoded, stats.

Training pairs longer than `max_len` subwords on a side, or with a length ratio above
`max_ratio`, are dropped; dev and test sets are never filtered (they are scored whole).

The SentencePiece model, the arrays encoded with it and their stats change together or not at
all: all three are made in a staging directory first, so a failed run leaves the old set whole.
"""

from __future__ import annotations

import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
from tqdm import tqdm

from posenc import files, tokens
from posenc.config import NonNegative, Positive, Share
from posenc.corpora import SRC, TGT, Corpus
from posenc.errors import UserError


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: Positive          # one joint BPE vocabulary (§5.1)
    character_coverage: Share
    input_sentence_size: NonNegative  # 0: train on every sentence; else a seeded sample of this many
    seed: NonNegative
    threads: Positive

# Fixed special ids, so every run and every variant agrees on them.
PAD, UNK, BOS, EOS = 0, 1, 2, 3


def train_tokenizer(texts: list[Path], vocab_size: int, character_coverage: float,
                    input_sentence_size: int, seed: int, threads: int, where: str = "params.yaml") -> bytes:
    """A joint BPE model trained on `texts`, serialized; the same inputs always give the same bytes.
    `where` names the params file in errors."""
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
        raise UserError(f"{where}: tokenizer.vocab_size {vocab_size} does not fit the "
                        f"training text ({str(e).splitlines()[-1]}); lower it") from None
    return model.getvalue()


def encode_splits(sp: spm.SentencePieceProcessor, raw_dir: Path, corpus: Corpus, arrays_dir: Path,
                  max_len: int, max_ratio: float) -> dict:
    """Encode every split of `corpus` into the new directory `arrays_dir`; return the stats."""
    stats = {}
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
            if not pairs:
                raise UserError(f"{raw_dir / split.name}.{SRC}: no training pair survives "
                                f"data.max_len={max_len} and data.max_ratio={max_ratio}; raise them")
        for i, lang in enumerate((SRC, TGT)):
            tokens.save(tokens.array_path(arrays_dir, split.name, lang), [p[i] for p in pairs],
                        EOS, sp.vocab_size())
        stats[split.name] = {
            "pairs": len(pairs), "dropped": len(ids[SRC]) - len(pairs),
            f"mean_len_{SRC}": round(sum(len(p[0]) for p in pairs) / max(len(pairs), 1), 3),
            f"mean_len_{TGT}": round(sum(len(p[1]) for p in pairs) / max(len(pairs), 1), 3)}
    return {"vocab_size": sp.vocab_size(), "splits": stats}


def keep_pair(src_len: int, tgt_len: int, max_len: int, max_ratio: float) -> bool:
    if min(src_len, tgt_len) == 0 or max(src_len, tgt_len) > max_len:
        return False
    return max(src_len, tgt_len) / min(src_len, tgt_len) <= max_ratio


def run(args) -> None:
    from posenc import config, corpora
    from posenc.downloads import read_record

    data = config.load(args.params, "data", config.DataConfig)
    tok = config.load(args.params, "tokenizer", TokenizerConfig)
    corpus = corpora.get(data.corpus)
    raw = Path(args.raw)
    texts = [raw / f"train.{lang}" for lang in (SRC, TGT)]
    for path in texts:
        if not path.is_file():
            raise UserError(f"{path}: missing; run `dvc repro fetch` first")
    record = read_record(raw)
    spm_path, arrays, stats_path = Path(args.spm), Path(args.arrays), Path(args.stats)
    staging = arrays.parent / ".prepare.tmp"
    shutil.rmtree(staging, ignore_errors=True)  # what a killed run left
    try:
        model = train_tokenizer(texts, tok.vocab_size, tok.character_coverage,
                                tok.input_sentence_size, tok.seed, tok.threads, where=args.params)
        sp = spm.SentencePieceProcessor(model_proto=model)
        stats = encode_splits(sp, raw, corpus, staging / "arrays", data.max_len, data.max_ratio)
        stats["fetch"] = record  # how many training pairs, and from where
        files.write_bytes(staging / "model", model)
        files.write_json(staging / "stats", stats)
        # The whole set is ready. The old arrays go first, so that a kill from here on leaves
        # arrays missing (which every reader reports), never arrays beside another vocabulary.
        if arrays.exists():
            shutil.rmtree(arrays)
        for made, final in ((staging / "model", spm_path), (staging / "stats", stats_path)):
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(made, final)
        os.replace(staging / "arrays", arrays)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    train = stats["splits"]["train"]
    print(f"prepare: vocabulary {stats['vocab_size']}, train pairs kept {train['pairs']}, "
          f"dropped {train['dropped']} (max_len {data.max_len}, max_ratio {data.max_ratio})")
