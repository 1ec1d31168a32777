"""Stage `train`: one positional variant with one seed, by the paper's recipe (posenc.training).

Reads numerics, the data, model, positional.<variant> and train sections; the loop itself, its
checkpoints, resume and averaging are the library's. Under torchrun it trains with
DistributedDataParallel. The residual study's runs (`train_residual` in dvc.yaml) give their
residual kind and depth on the command line (--residual, --layers) in place of model.residual
and model.layers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from posenc import config, corpora, model, numerics, runtime, tokens
from posenc.config import ModelConfig, TrainConfig
from posenc.errors import UserError
from posenc.training import Corpus, Paths, read_corpus, train


def inputs(params: Path, variant: str, spm: Path, arrays: Path,
           model_changes: dict | None = None) -> tuple[ModelConfig, TrainConfig, Corpus]:
    """The settings and the data of one training run, checked before any update;
    `model_changes` replaces model.* keys (the residual study's --residual and --layers)."""
    data = config.load(params, "data", config.DataConfig)
    cfg = config.load(params, "train", TrainConfig)
    sp = tokens.load_tokenizer(spm)
    model_config = config.load(params, "model", ModelConfig, positional=variant,
                               position=config.load_positional(params, variant),
                               vocab_size=sp.vocab_size(), pad_id=sp.pad_id(),
                               bos_id=sp.bos_id(), eos_id=sp.eos_id(),
                               vocabulary=tokens.vocabulary_digest(sp))
    if model_changes:
        model_config = dataclasses.replace(model_config, **model_changes)
    model.check(model_config, str(params))  # before any data is read, naming this params file
    return model_config, cfg, read_corpus(model_config, corpora.get(data.corpus), arrays)


def run(args) -> None:
    if args.seed < 0:
        raise UserError(f"--seed {args.seed}: a seed is an int >= 0 (params.yaml: seeds)")
    if args.until is not None and args.until < 1:
        raise UserError(f"--until {args.until}: an update number >= 1")
    if args.layers is not None and args.layers < 1:
        raise UserError(f"--layers {args.layers}: a layer count >= 1")
    changes = {k: v for k, v in (("residual", args.residual), ("layers", args.layers)) if v is not None}
    model_config, cfg, corpus = inputs(Path(args.params), args.variant, Path(args.spm), Path(args.arrays),
                                       changes)
    mode = config.load_value(args.params, "numerics", config.Numerics)
    paths = Paths(Path(args.model), Path(args.last), Path(args.train_log), Path(args.dev_log),
                  Path(args.checkpoints), Path(args.timings), Path(args.digests), Path(args.highway))
    device = runtime.setup(cfg.threads, mode)
    s = train(model_config, cfg, args.seed, corpus, paths, device, numerics.record(mode), args.until,
              params=args.params)
    if args.until is not None:
        print(f"train: {s['variant']} seed {s['seed']}: stopped after update {s['steps']} (--until); "
              f"logs and digests -> {args.digests}")
    elif s["dev_ppl"] is not None:
        print(f"train: {s['variant']} seed {s['seed']}: {s['steps']} updates, "
              f"{s['parameters']:,} parameters, dev perplexity {s['dev_ppl']:.3f} -> {args.model}")
