"""`posenc translate`: English lines in, German lines out, with one trained model.

As `fairseq-interactive` or `onmt_translate` do: lines from stdin (or `-i FILE`) to stdout (or
`-o FILE`), one output line per input line. Decoding is the evaluate stage's own (beam search,
length penalty, batches by tokens, SentencePiece decoded back to text), with its params as the
defaults, so a line gets exactly the hypothesis that evaluation scored for it. The SentencePiece
model is the one the run was trained with, as dvc.lock records it, unless `--spm` names one.
Not a DVC stage: it writes nothing the pipeline reads.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np

from posenc import config, files, runtime, tokens
from posenc.checkpoints import load_model
from posenc.decode import EvalConfig, check_beam, translate
from posenc.errors import UserError
from posenc.runs import require_model, trained_with


def _existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (the one the output's directories go into)."""
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path


def run(args) -> None:
    cfg = config.load(args.params, "eval", EvalConfig)
    given = {"beam": args.beam, "lenpen": args.lenpen, "batch_tokens": args.batch_tokens,
             "threads": args.threads}
    for key, value in given.items():  # the options replace the evaluate stage's params
        if value is not None and not (0 <= value <= 10 if key == "lenpen" else value >= 1):
            raise UserError(f"--{key.replace('_', '-')} {value}: must be "
                            f"{'in [0, 10]' if key == 'lenpen' else '>= 1'}")
    cfg = dataclasses.replace(cfg, **{k: v for k, v in given.items() if v is not None})
    device = runtime.setup(cfg.threads, config.load_value(args.params, "numerics", config.Numerics))
    model_file = Path(args.model)
    require_model(model_file)
    model = load_model(model_file, device)
    spm = Path(args.spm) if args.spm else trained_with(model_file, Path(args.lock))
    sp = tokens.load_tokenizer(spm)
    if sp.get_piece_size() != model.config.vocab_size:
        raise UserError(f"{spm}: a vocabulary of {sp.get_piece_size()}, but {model_file} was trained with "
                        f"{model.config.vocab_size}; pass the SentencePiece model of its run (--spm)")
    tokens.check_vocabulary(sp, spm, model.config.vocabulary, model_file)
    check_beam(cfg.beam, model.config.vocab_size, "--beam" if args.beam else f"{args.params}: eval.beam")
    if args.input:
        if not Path(args.input).is_file():
            raise UserError(f"{args.input}: no such file; give a file of English lines, one sentence each")
        raw = Path(args.input).read_bytes()
    else:
        raw = sys.stdin.buffer.read()
    try:  # a file and stdin alike: UTF-8, or one line naming the first line that is not
        lines = files.split_lines(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise UserError(f"{args.input or 'stdin'}: line {line} is not UTF-8; "
                        f"convert the input (e.g. iconv -f latin1 -t utf-8)") from None
    if args.output and (Path(args.output).is_dir() or not os.access(_existing(Path(args.output).parent), os.W_OK)):
        raise UserError(f"-o {args.output}: not a file that can be written here; give a path in a "
                        f"writable directory")
    # Empty lines are not decoded (the model would invent a sentence) but keep their place.
    todo = [i for i, line in enumerate(lines) if line.strip()]
    eos = model.config.eos_id
    sources = [np.array(ids + [eos]) for ids in sp.encode([lines[i] for i in todo])]
    where = args.input or "stdin"
    too_long = [(i, len(s)) for i, s in zip(todo, sources) if model.max_len and len(s) > model.max_len]
    if too_long:
        line, n = too_long[0]
        raise UserError(f"{where}: line {line + 1} is {n} subwords long (EOS included), more than the "
                        f"{model.max_len} positions of {model_file}'s learned table; split the line")
    out = translate(model, sources, cfg.beam, cfg.lenpen, cfg.max_len_extra, cfg.batch_tokens, device,
                    desc=f"translate {where}", progress=bool(args.input))
    german = [""] * len(lines)
    for i, ids in zip(todo, out):
        german[i] = sp.decode(ids)
    if args.output:
        files.write_lines(args.output, german)
        print(f"translate: {len(todo)} lines ({len(lines) - len(todo)} empty) -> {args.output}",
              file=sys.stderr)
    else:
        sys.stdout.write("".join(line + "\n" for line in german))
