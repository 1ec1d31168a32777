"""Stage `shorten`: the training data of §3.5's second protocol, train short and test long.

The paper chose sinusoids because they "may allow the model to extrapolate to sequence lengths
longer than the ones encountered during training" (§3.5). The literature tests that claim on
natural sentences by moving the training lengths (Varis & Bojar 2021, "Sequence Length is a
Domain"; Neishi & Yoshinaga 2019; Press et al. 2022 for language models): train only on short
pairs, then translate the held-back longer ones. This stage keeps the training pairs whose source
and target are both at most `short_training.max_len` subwords, EOS included (so no position
beyond max_len - 1 is ever trained), and copies every other split unchanged: the short runs
(dvc.yaml's train_short) are then evaluated on every natural sentence. Its stats record what was
kept and how many evaluation sentences lie beyond the bound.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import tempfile
from pathlib import Path

from posenc import config, corpora, files, tokens
from posenc.buckets import ShortTrainingConfig
from posenc.corpora import SRC, TGT
from posenc.errors import UserError


def run(args) -> None:
    cfg = config.load(args.params, "short_training", ShortTrainingConfig)
    data = config.load(args.params, "data", config.DataConfig)
    corpus = corpora.get(data.corpus)
    sp = tokens.load_tokenizer(Path(args.spm))
    eos, limit = sp.eos_id(), cfg.max_len
    arrays, out, stats_path = Path(args.arrays), Path(args.out), Path(args.stats)
    # the output directory holds the split arrays and nothing else: never the project, an input
    # or a directory of the user's (posenc.files.check_output_dir)
    files.check_output_dir(out, (arrays, args.spm, args.params), ours=("*.npy",))
    sides = {lang: tokens.load(tokens.array_path(arrays, "train", lang), eos) for lang in (SRC, TGT)}
    kept = [i for i, (s, t) in enumerate(zip(sides[SRC], sides[TGT])) if len(s) <= limit and len(t) <= limit]
    if not kept:
        raise UserError(f"{args.params}: short_training.max_len {limit}: no training pair is that short "
                        f"(subwords with EOS); raise it")
    stats = {"max_len": limit,
             "train_pairs": {"kept": len(kept), "dropped": len(sides[SRC]) - len(kept)},
             "longest_kept": {lang: max(len(sides[lang][i]) for i in kept) for lang in (SRC, TGT)},
             "sources_beyond_max_len": {}}
    # Written beside the target and moved in as a set: no directory holds a mix of two runs. The
    # staging directory is this process's own, so two runs at once never share one.
    out.parent.mkdir(parents=True, exist_ok=True)
    stats_path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=".shorten."))
    (staging / "arrays").mkdir()
    try:
        for lang in (SRC, TGT):
            tokens.save(tokens.array_path(staging / "arrays", "train", lang),
                        [sides[lang][i][:-1].tolist() for i in kept], eos, sp.vocab_size())
        for split in corpus.scored:
            for lang in (SRC, TGT):
                shutil.copyfile(tokens.array_path(arrays, split, lang),
                                tokens.array_path(staging / "arrays", split, lang))
            sources = tokens.load(tokens.array_path(arrays, split, SRC), eos)
            stats["sources_beyond_max_len"][split] = {
                "sentences": len(sources), "beyond": sum(len(s) > limit for s in sources)}
        files.write_json(staging / "stats", stats)
        # The earlier output is moved aside whole (into the staging directory, removed below), then
        # ours moved in. Another run at once may put its own in place between the two moves: ours
        # then moves that aside too, so the directory is always one run's whole output.
        for attempt in itertools.count():
            if out.exists():
                with contextlib.suppress(FileNotFoundError):  # the other run moved it first
                    os.replace(out, staging / f"replaced-{attempt}")
            try:
                os.replace(staging / "arrays", out)
                break
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        os.replace(staging / "stats", stats_path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"shorten: training pairs of at most {limit} subwords: kept {len(kept):,}, dropped "
          f"{stats['train_pairs']['dropped']:,} -> {out}")
