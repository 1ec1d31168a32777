"""`posenc export`: a trained model as a CTranslate2 model directory (posenc.ct2), with its
SentencePiece model beside it as spm.model, for every variant CTranslate2 can express.
Not a DVC stage: it writes nothing the pipeline reads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

from posenc import ct2, files, tokens
from posenc.checkpoints import load_model
from posenc.errors import UserError
from posenc.runs import require_model, trained_with


def put_in_place(built: Path, out_dir: Path) -> None:
    """`built` (a directory beside `out_dir`) becomes `out_dir`. A model already there (--force)
    is moved aside, not deleted, until the new one is in place, and put back if that fails: an
    interrupted export never leaves a partly deleted model."""
    old = built.with_name(built.name + ".old") if out_dir.is_dir() else None
    if old:
        out_dir.rename(old)
    try:
        built.rename(out_dir)
    except BaseException:
        if old:
            old.rename(out_dir)
        raise
    if old:
        shutil.rmtree(old)


def run(args) -> None:
    ctranslate2 = ct2.engine()
    model_file, out_dir = Path(args.model), Path(args.out)
    if args.positions < 1:
        raise UserError(f"--positions {args.positions}: must be >= 1")
    # a CTranslate2 model directory and nothing else: never the project, an input or a directory
    # of the user's (posenc.files.check_output_dir)
    files.check_output_dir(out_dir, (model_file, *([args.spm] if args.spm else [])),
                           ours=("model.bin", "config.json", "*vocabulary*", "spm.model"))
    if out_dir.is_dir() and any(out_dir.iterdir()) and not args.force:  # as CTranslate2's own converters
        raise UserError(f"{out_dir}: exists; pass --force to replace it, or name another --out")
    require_model(model_file)
    model = load_model(model_file, torch.device("cpu"))
    spm = Path(args.spm) if args.spm else trained_with(model_file, Path(args.lock))
    sp = tokens.load_tokenizer(spm)
    tokens.check_vocabulary(sp, spm, model.config.vocabulary, model_file)
    built = ct2.spec(model, sp, args.positions)
    # written beside the target, then moved: an interrupted export leaves no half-written model
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes 0700: give the directory the usual mode
    try:
        built.save(str(tmp))
        shutil.copy(spm, tmp / "spm.model")
        put_in_place(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"export: {model_file} ({model.config.positional}) -> {out_dir} (CTranslate2 "
          f"{ctranslate2.__version__}; the SentencePiece model beside it as spm.model)")
