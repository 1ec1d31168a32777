"""Stage `measure`: the measurements of posenc.measures, taken on one trained model (a unit's last
stage that reads weights); the stage `analyze` sets every run's side by side from these files."""

from __future__ import annotations

from pathlib import Path

from posenc import config, corpora, files, runtime, tokens
from posenc.checkpoints import load_model
from posenc.decode import EvalConfig
from posenc.measures import AnalyzeConfig, measure


def run(args) -> None:
    data = config.load(args.params, "data", config.DataConfig)
    cfg = config.load(args.params, "analyze", AnalyzeConfig)
    eval_cfg = config.load(args.params, "eval", EvalConfig)
    device = runtime.setup(eval_cfg.threads, config.load_value(args.params, "numerics", config.Numerics))
    model = load_model(Path(args.model), device)
    sp = tokens.load_tokenizer(Path(args.spm))
    tokens.check_vocabulary(sp, Path(args.spm), model.config.vocabulary, Path(args.model))
    result = measure(model, sp, corpora.get(data.corpus), Path(args.arrays), Path(args.raw), cfg, eval_cfg)
    files.clear(args.out)  # never the previous run's file beside a failed one
    # The run's own facts beside its measurements: `analyze` checks them against its params.
    files.write_json(args.out, {"variant": model.config.positional, "seed": args.seed,
                                "layers": model.config.layers, "residual": model.config.residual, **result})
    order = result["word_order_bleu"]
    print(f"measure: {model.config.positional} seed {args.seed}: position in the {result['where_position']}, "
          f"dev BLEU original/shuffled/reversed {order['original']}/{order['shuffled']}/{order['reversed']} "
          f"-> {args.out}")
