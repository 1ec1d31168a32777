"""Training and decoding throughput of posenc beside fairseq and eole (OpenNMT's successor), the
toolkits an MT researcher would otherwise train this experiment with.

Training: the profile's model (params.yaml: d_model, d_ff, heads, layers, post-norm, sinusoidal
positions, one embedding table for source, target and output, dropout, label smoothing, Adam and
§5.3's schedule, max_tokens) trained by each toolkit with its own CLI on the same
SentencePiece-encoded data (the prepared arrays, written out as pieces), one thread each, every
toolkit in a fresh process for --updates updates, the toolkits interleaved in --rounds rounds so
that drift in machine speed hits them alike. Each process times its own updates (batch in hand to
optimizer step done; reading and batching the data, validation and start-up excluded) and counts
their target tokens: posenc's loop over the span its own update meter times (from setting the
learning rate to the optimizer step), fairseq's `Trainer.train_step` and eole's
`Trainer._train_step`, each wrapped by this script. Every toolkit starts from seed 1. The FLOPs are counted once, by torch on
posenc's model for the first real batches, per target token, and the GEMM peak is timed in the same
run (benchmarks/train_throughput.py: the step's own matrix products replayed alone), so every
toolkit's tokens/s is also a share of the peak. Each toolkit's parameter count and dev perplexity
(without label smoothing) after the same updates show that it built the same model.

Decoding (--model): one trained posenc model, the same weights in each engine, on the first
--sentences val sentences, interleaved rounds: posenc's cached beam search, CTranslate2 float32
(posenc export) and fairseq's own `SequenceGenerator` (the model converted: posenc's sinusoid
loaded as fairseq's learned position table), beam and length limit as the eval params, with BLEU
when --raw gives the references. Each engine's sentences/s is a share of the same peak too, its
work counted once, by torch on posenc's cached search of the same sentences.

    make peers     # .venv-peers: the pinned set, fairseq and eole (benchmarks/peers.lock)
    .venv-peers/bin/python benchmarks/peers.py --arrays data/prepared/arrays \\
        --model models/sinusoidal-1/model.pt --raw data/raw/multi30k

Where the toolkits cannot build posenc's model exactly, it says so (docs/performance.md, "Beside
fairseq and eole"): fairseq's attention projections carry biases (posenc's do not) and its
length penalty is length^alpha, not GNMT's; eole 0.6.4's decoder layers are pre-norm only (its
encoder has a post-norm style), so eole trains post-norm encoder layers and pre-norm decoder
layers with a final LayerNorm, and cannot load a post-norm model to decode it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_throughput, beside this file

from posenc import numerics  # noqa: E402

numerics.apply(numerics.mode_from_argv(sys.argv[1:]))  # before torch loads its kernels

import torch  # noqa: E402
import yaml  # noqa: E402

from posenc import config, tokens  # noqa: E402

TOOLKITS = ("posenc", "fairseq", "eole")
RESULT = "peers-result: "  # the line a child prints last: its figures as JSON


# ---- the data, as each toolkit reads it ----------------------------------------------------------

def write_text(arrays: Path, sp, work: Path, splits=("train", "val")) -> None:
    """The prepared arrays as lines of pieces (what both toolkits read), and the vocabulary: every
    piece but SentencePiece's four specials, in id order (each toolkit puts its own specials first:
    the same 8,000 rows)."""
    specials = {sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()}
    for split in splits:
        for lang in ("en", "de"):
            lines = tokens.load(tokens.array_path(arrays, split, lang), sp.eos_id())
            (work / f"{split}.{lang}").write_text(
                "".join(" ".join(sp.id_to_piece(int(i)) for i in s[:-1]) + "\n" for s in lines))
    pieces = [sp.id_to_piece(i) for i in range(sp.vocab_size()) if i not in specials]
    (work / "dict.txt").write_text("".join(f"{p} 1\n" for p in pieces))      # fairseq's
    (work / "vocab.txt").write_text("".join(f"{p}\t1\n" for p in pieces))    # eole's


def fairseq_binarize(work: Path) -> None:
    """fairseq-preprocess with the vocabulary above (no padding of the dictionary: the same rows)."""
    run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "en", "--target-lang", "de",
         "--trainpref", str(work / "train"), "--validpref", str(work / "val"), "--destdir",
         str(work / "bin"), "--srcdict", str(work / "dict.txt"), "--joined-dictionary", "--workers", "1"],
        "fairseq-preprocess")


def run(cmd: list[str], what: str, env: dict | None = None) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
        raise SystemExit(f"{what} failed (exit {r.returncode}): {lines[-1] if lines else 'no message'}")
    return r.stdout


# ---- the settings, one place for all three -------------------------------------------------------

def settings(params: Path) -> tuple[config.ModelConfig, config.TrainConfig]:
    """The profile's model and train params; refused where the peers cannot build that model."""
    model = config.load(params, "model", config.ModelConfig, positional="sinusoidal",
                        position=config.SinusoidalSettings(), vocab_size=1, pad_id=0, bos_id=0, eos_id=0)
    if model.norm != "post" or model.residual != "sum":
        raise SystemExit(f"{params}: model.norm {model.norm} and model.residual {model.residual}: the peers "
                         f"build the paper's post-norm summed residuals; use norm: post, residual: sum")
    return model, config.load(params, "train", config.TrainConfig)


def fairseq_model_args(m: config.ModelConfig) -> list[str]:
    return ["--arch", "transformer", "--share-all-embeddings", "--dropout", str(m.dropout),
            *(x for side in ("encoder", "decoder") for x in (
                f"--{side}-embed-dim", str(m.d_model), f"--{side}-ffn-embed-dim", str(m.d_ff),
                f"--{side}-attention-heads", str(m.heads), f"--{side}-layers", str(m.layers)))]


def fairseq_train_args(work: Path, m: config.ModelConfig, t: config.TrainConfig, updates: int) -> list[str]:
    # §5.3's rate, d^-0.5 min(step^-0.5, step warmup^-1.5), is fairseq's inverse_sqrt from 0 to
    # lr_scale d^-0.5 warmup^-0.5 over the warmup
    peak = t.lr_scale * m.d_model ** -0.5 * t.warmup ** -0.5
    return [str(work / "bin"), *fairseq_model_args(m), "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", str(t.label_smoothing), "--optimizer", "adam", "--adam-betas",
            str(tuple(t.adam_betas)), "--adam-eps", str(t.adam_eps), "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", str(t.warmup), "--warmup-init-lr", "0", "--lr", repr(peak),
            "--max-tokens", str(t.max_tokens), "--update-freq", str(t.accum), "--max-update", str(updates),
            "--seed", "1", "--cpu", "--num-workers", "0", "--no-save", "--save-dir", str(work / "fairseq-ck"),
            "--best-checkpoint-metric", "nll_loss", "--log-format", "simple", "--log-interval", "100000"]


def eole_batch(arrays: Path, eos: int, max_tokens: int) -> int:
    """eole's batch_size for as many target tokens an update as max_tokens gives posenc and fairseq:
    all three fill a batch up to (sentences x the longest side), but eole's target side holds BOS
    too, so its limit is raised by the training pairs' mean of max(source, target + 1) over
    max(source, target)."""
    src, tgt = (tokens.load(tokens.array_path(arrays, "train", lang), eos) for lang in ("en", "de"))
    theirs = sum(max(len(s), len(t) + 1) for s, t in zip(src, tgt))
    ours = sum(max(len(s), len(t)) for s, t in zip(src, tgt))
    return round(max_tokens * theirs / ours)


def eole_config(work: Path, m: config.ModelConfig, t: config.TrainConfig, updates: int, batch: int) -> dict:
    """eole's YAML (as a dict). Its decoder layers are pre-norm only: the closest model it builds."""
    vocab = str(work / "vocab.txt")
    return {
        "src_vocab": vocab, "tgt_vocab": vocab, "share_vocab": True, "vocab_size_multiple": 1,
        "src_vocab_size": 1 << 20, "tgt_vocab_size": 1 << 20, "save_data": str(work / "eole-run"),
        "overwrite": True, "seed": 1, "report_every": 100000,
        "data": {"corpus_1": {"path_src": str(work / "train.en"), "path_tgt": str(work / "train.de"),
                              "transforms": []},
                 "valid": {"path_src": str(work / "val.en"), "path_tgt": str(work / "val.de"), "transforms": []}},
        "model": {"architecture": "transformer", "hidden_size": m.d_model, "transformer_ff": m.d_ff,
                  "heads": m.heads, "layers": m.layers, "share_embeddings": True,
                  "share_decoder_embeddings": True, "generator_bias": False, "add_ffnbias": True,
                  "embeddings": {"word_vec_size": m.d_model, "position_encoding_type": "SinusoidalInterleaved"},
                  "encoder": {"encoder_layer_style": "postnorm", "final_encoder_layer_norm": False}},
        "training": {"model_path": str(work / "eole-run/model"), "train_steps": updates, "valid_steps": updates,
                     "save_checkpoint_steps": 0, "batch_type": "tokens", "batch_size": batch,
                     "valid_batch_size": t.max_tokens, "normalization": "tokens", "accum_count": [t.accum],
                     "num_workers": 0, "dropout": [m.dropout], "attention_dropout": [0.0], "dropout_steps": [0],
                     "label_smoothing": t.label_smoothing, "optim": "adam", "adam_beta1": t.adam_betas[0],
                     "adam_beta2": t.adam_betas[1], "learning_rate": t.lr_scale, "decay_method": "noam",
                     "warmup_steps": t.warmup, "max_grad_norm": 0, "param_init_method": "xavier_uniform",
                     "world_size": 1, "gpu_ranks": []},
    }


# ---- the children: one toolkit's training, timed from inside -------------------------------------

class Timed:
    """Wraps a toolkit's update function: seconds inside it, updates and target tokens."""

    def __init__(self):
        self.seconds, self.updates, self.tokens, self.parameters = 0.0, 0, 0, 0

    def wrap(self, cls, name: str, count_tokens, model_of):
        inner = getattr(cls, name)

        def timed(obj, *args, **kwargs):
            self.parameters = self.parameters or sum(p.numel() for p in model_of(obj).parameters())
            start = time.perf_counter()
            out = inner(obj, *args, **kwargs)
            self.seconds += time.perf_counter() - start
            self.updates += 1
            self.tokens += count_tokens(*args)
            return out
        setattr(cls, name, timed)

    def result(self, dev_ppl: float) -> dict:
        return {"seconds": self.seconds, "updates": self.updates, "tokens": self.tokens,
                "parameters": self.parameters, "dev_ppl": dev_ppl}


def child_posenc(a) -> dict:
    """posenc.training.train as the train stage runs it, without its FLOP bookkeeping (it counts
    each new batch shape once, which a short run meets at nearly every update)."""
    import train_throughput
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from posenc import runtime, training

    class Uncounted:
        total = 0

        def count(self, *shapes):
            return contextlib.nullcontext()

    runtime.setup(1, a.numerics)
    training.FlopMeter = Uncounted
    # the loop's own update span (training.py: update_s), unrounded: from the learning rate it
    # sets first to the optimizer step it ends with
    seconds, started, lr_at = [0.0], [0.0], training.lr_at

    def start(*args):
        started[0] = time.perf_counter()
        return lr_at(*args)

    def stop(*_):
        seconds[0] += time.perf_counter() - started[0]
    training.lr_at = start
    register_optimizer_step_post_hook(stop)
    timings = train_throughput.real_loop(train_throughput.profile_inputs(a.arrays, a.params), a.updates, 1)
    return {"seconds": seconds[0], "updates": timings["steps"], "tokens": timings["tokens"],
            "parameters": timings["parameters"], "dev_ppl": timings["dev_ppl"]}


def child_fairseq(a) -> dict:
    torch.set_num_threads(1)
    from fairseq import trainer
    from fairseq_cli import train

    timed, dev = Timed(), []
    timed.wrap(trainer.Trainer, "train_step", lambda samples, *_: sum(int(s["ntokens"]) for s in samples if s),
               lambda t: t.model)
    validate = train.validate
    # --best-checkpoint-metric nll_loss: validate returns the dev NLL in bits, label smoothing apart
    train.validate = lambda *args, **kw: dev.append(validate(*args, **kw)[0]) or [dev[-1]]
    model, cfg = settings(a.params)
    sys.argv = ["fairseq-train", *fairseq_train_args(a.work, model, cfg, a.updates)]
    with contextlib.redirect_stdout(sys.stderr):
        train.cli_main()
    return timed.result(2 ** dev[-1])


def child_eole(a) -> dict:
    torch.set_num_threads(1)
    from eole import trainer
    from eole.bin.main import main as eole_main

    timed, dev = Timed(), []
    timed.wrap(trainer.Trainer, "_train_step", lambda batches, normalization, *_: int(normalization),
               lambda t: t.model)
    validate = trainer.Trainer.validate

    def unsmoothed(self, *args, **kwargs):
        self.valid_loss.criterion.label_smoothing = 0.0  # its dev loss is the training criterion's
        stats = validate(self, *args, **kwargs)
        dev.append(stats.ppl())
        return stats
    trainer.Trainer.validate = unsmoothed
    sys.argv = ["eole", "train", "-config", str(a.work / "eole.yaml")]  # main() wrote it
    with contextlib.redirect_stdout(sys.stderr):
        eole_main()
    return timed.result(dev[-1])


CHILDREN = {"posenc": child_posenc, "fairseq": child_fairseq, "eole": child_eole}


def train_round(toolkit: str, a, work: Path) -> dict:
    out = run([sys.executable, __file__, "--child", toolkit, "--work", str(work), "--arrays", str(a.arrays),
               "--params", str(a.params), "--updates", str(a.updates), "--numerics", a.numerics],
              f"{toolkit}'s training", env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return json.loads(out.strip().splitlines()[-1].removeprefix(RESULT))


# ---- decoding: one posenc model in three engines -------------------------------------------------

def fairseq_translator(model, sp, work: Path, beam: int, max_len_extra: int, lenpen: float):
    """posenc's weights in fairseq's Transformer: dictionary rows in fairseq's order (its four
    specials first), zero attention biases, and posenc's sinusoid as a learned position table
    (fairseq's own sinusoid has other frequencies). A function from piece lines to piece lists, by
    fairseq's SequenceGenerator (beam, lenpen its length^alpha form, max length source + EOS +
    max_len_extra as posenc's), decoding from BOS as posenc's decoder does."""
    import logging

    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.hub_utils import GeneratorHubInterface

    from posenc.positional import sinusoid_table

    logging.getLogger("fairseq").setLevel(logging.WARNING)
    c = model.config
    rows = 1024
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(work / "bin"), *fairseq_model_args(c), "--encoder-learned-pos", "--decoder-learned-pos",
        "--max-source-positions", str(rows), "--max-target-positions", str(rows), "--cpu"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    fs = task.build_model(cfg.model).eval()
    d = task.source_dictionary
    order = [sp.bos_id(), sp.pad_id(), sp.eos_id(), sp.unk_id()]  # fairseq's <s> <pad> </s> <unk>
    order += [i for i in range(sp.vocab_size()) if i not in order]
    assert len(d) == len(order) and all(d[j] == sp.id_to_piece(order[j]) for j in range(4, len(d)))
    w = model.state_dict()
    state = {k: torch.zeros_like(v) for k, v in fs.state_dict().items()}
    state["encoder.embed_tokens.weight"] = w["embed.weight"][order]
    table = torch.zeros(rows + d.pad() + 1, c.d_model)
    table[d.pad() + 1:] = sinusoid_table(torch.arange(rows), c.d_model)  # fairseq counts from pad + 1
    for side in ("encoder", "decoder"):
        state[f"{side}.embed_positions.weight"] = table
    names = {"encoder": (("self_attn", "self_attn_layer_norm"), (None, "final_layer_norm")),
             "decoder": (("self_attn", "self_attn_layer_norm"), ("cross_attn", "encoder_attn_layer_norm"),
                         (None, "final_layer_norm"))}
    fairseq_attn = {"self_attn": "self_attn", "cross_attn": "encoder_attn"}
    for side, parts in names.items():
        for i in range(c.layers):
            p, q = f"{side}.{i}.", f"{side}.layers.{i}."
            for r, (attn, norm) in enumerate(parts):
                if attn:
                    for mine, theirs in zip("qkvo", ("q_proj", "k_proj", "v_proj", "out_proj")):
                        state[f"{q}{fairseq_attn[attn]}.{theirs}.weight"] = w[f"{p}{attn if side == 'decoder' else 'attn'}.{mine}.weight"]
                for x in ("weight", "bias"):
                    state[f"{q}{norm}.{x}"] = w[f"{p}res.{r}.norm.{x}"]
            for mine, theirs in (("0", "fc1"), ("2", "fc2")):
                for x in ("weight", "bias"):
                    state[f"{q}{theirs}.{x}"] = w[f"{p}ff.{mine}.{x}"]
    state["decoder.embed_tokens.weight"] = state["decoder.output_projection.weight"] = state["encoder.embed_tokens.weight"]
    fs.load_state_dict(state)
    cfg.generation.beam, cfg.generation.lenpen = beam, lenpen
    cfg.generation.max_len_a, cfg.generation.max_len_b = 1, max_len_extra
    hub = GeneratorHubInterface(cfg, task, [fs])
    # the hub starts the decoder from EOS (fairseq's habit); posenc's model was trained from BOS
    task.inference_step = lambda generator, models, sample, **kw: generator.generate(
        models, sample, bos_token=d.bos(), **kw)
    return lambda lines: [h.split() for h in hub.translate(lines, beam=beam)]


def decode(a, model_path: Path, sp, work: Path, peak: float, beam: int, lenpen: float, max_len_extra: int,
           batch_tokens: int) -> None:
    import decode_speed

    from posenc import ct2, runtime, scoring
    from posenc.checkpoints import load_model
    from posenc.decode import translate

    runtime.setup(1, a.numerics)
    model = load_model(model_path)
    tokens.check_vocabulary(sp, a.arrays.parent / "spm.model", model.config.vocabulary, model_path)
    sources = tokens.load(tokens.array_path(a.arrays, "val", "en"), model.config.eos_id)[:a.sentences]
    lines = [" ".join(sp.id_to_piece(int(i)) for i in s[:-1]) for s in sources]
    pieces = [line.split() for line in lines]
    exported = work / "ct2"
    exported.mkdir()
    ct2.spec(model, sp, 1024).save(str(exported))
    engine = ct2.engine().Translator(str(exported), device="cpu", compute_type="float32",
                                     inter_threads=1, intra_threads=1)
    as_pieces = lambda ids: [sp.id_to_piece(int(i)) for i in ids]  # noqa: E731
    fairseq = fairseq_translator(model, sp, work, beam, max_len_extra, lenpen)
    searches = {
        "posenc, cached": lambda: [as_pieces(h) for h in translate(model, sources, beam, lenpen, max_len_extra,
                                                                   batch_tokens, desc="posenc")],
        "CTranslate2 float32": lambda: ct2.search(engine, sp, pieces, beam, lenpen, max_len_extra),
        "fairseq": lambda: fairseq(lines)}
    rates, outputs = decode_speed.interleaved(searches, a.rounds, len(sources))
    per_sentence = decode_speed.search_work(searches["posenc, cached"]) / len(sources)
    refs = scoring.read_references(a.raw, "val", len(sources)) if a.raw else None
    print(f"decoding: {len(sources)} val sentences of {model_path}, beam {beam}, length penalty {lenpen}, "
          f"limit source + {max_len_extra}, 1 thread, {a.rounds} rounds; eole: not run (its decoder "
          f"layers are pre-norm only: it cannot hold this post-norm model); {per_sentence / 1e6:.1f} MFLOP a "
          f"sentence (torch's count of posenc's cached search, the work of every row)")
    posenc_rate = statistics.median(rates["posenc, cached"])
    for name, r in rates.items():
        same = sum(x == y for x, y in zip(outputs[name], outputs["posenc, cached"]))
        bleu = (f"; BLEU {scoring.score([sp.decode(h) for h in outputs[name]], refs)['bleu']:.2f}"
                if refs else "")
        print(f"  {name:20s} median {statistics.median(r):7.1f} sentences/s (min {min(r):.1f}, max {max(r):.1f}) "
              f"= {statistics.median(r) * per_sentence / peak:.0%} of the peak, "
              f"{statistics.median(r) / posenc_rate:.2f}x posenc's; {same}/{len(sources)} outputs as posenc's{bleu}")


# ---- the parent ----------------------------------------------------------------------------------

def flops_and_peak(a) -> tuple[float, float]:
    """FLOPs per target token (torch's count on posenc's model, the first --flop-batches real
    batches) and the GEMM peak (the first batch's step, its products replayed alone), one thread."""
    import train_throughput as tt

    from posenc.model import build_model

    torch.set_num_threads(1)
    prepared = tt.profile_inputs(a.arrays, a.params)
    torch.manual_seed(1)
    model = build_model(prepared[0])
    data = tt.real_batches(prepared, a.flop_batches, prepared[0], a.arrays)
    flops = sum(tt.step_flops(model, b) for b in data)
    target = sum(int((b[2] != prepared[0].pad_id).sum()) for b in data)
    peak, _ = tt.matmul_peak(model, tt.adam(model), data[0])
    return flops / target, peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arrays", type=Path, default=Path("data/prepared/arrays"),
                   help="the prepared arrays (spm.model beside them); their train and val splits")
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--updates", type=int, default=100, help="updates a toolkit trains a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--flop-batches", type=int, default=8)
    p.add_argument("--toolkits", default=",".join(TOOLKITS), help="comma-separated, of " + ", ".join(TOOLKITS))
    p.add_argument("--model", type=Path, help="a trained posenc model.pt: also time the three searches")
    p.add_argument("--sentences", type=int, default=200, help="val sentences decoded")
    p.add_argument("--raw", type=Path, help="directory with val.de (fetch's output): BLEU of each search")
    p.add_argument("--numerics", choices=numerics.MODES, default="portable",
                   help="numerics mode of every process, set before torch loads (default portable, as "
                        "the stages: the same MKL branch for every toolkit)")
    p.add_argument("--child", choices=TOOLKITS, help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(RESULT + json.dumps(CHILDREN[a.child](a)))
        return
    toolkits = a.toolkits.split(",")
    if unknown := set(toolkits) - set(TOOLKITS):
        raise SystemExit(f"--toolkits: {', '.join(sorted(unknown))} unknown; choose from {', '.join(TOOLKITS)}")
    model_config, train_config = settings(a.params)
    missing = [k for k in ("fairseq", "eole") if (k in toolkits or (k == "fairseq" and a.model))
               and importlib.util.find_spec(k) is None]
    if missing:
        raise SystemExit(f"{' and '.join(missing)}: not installed beside {sys.executable}; `make peers` installs "
                         f"them in .venv-peers: run .venv-peers/bin/python benchmarks/peers.py")
    cpu = numerics.cpu()
    sp = tokens.load_tokenizer(a.arrays.parent / "spm.model")
    with tempfile.TemporaryDirectory(prefix="posenc-peers-") as tmp:
        work = Path(tmp)
        write_text(a.arrays, sp, work)
        if "fairseq" in toolkits or a.model:
            fairseq_binarize(work)
        if "eole" in toolkits:  # its config, once for every round
            batch = eole_batch(a.arrays, sp.eos_id(), train_config.max_tokens)
            (work / "eole.yaml").write_text(yaml.safe_dump(eole_config(work, model_config, train_config,
                                                                       a.updates, batch)))
        per_token, peak = flops_and_peak(a)
        results: dict[str, list[dict]] = {k: [] for k in toolkits}
        for r in range(a.rounds):
            for k in toolkits:
                results[k].append(train_round(k, a, work))
                print(f"round {r + 1}/{a.rounds} {k}: {results[k][-1]['tokens'] / results[k][-1]['seconds']:.0f} "
                      f"target tokens/s", file=sys.stderr)
        print(f"{cpu['vendor']} family {cpu['family']} model {cpu['model']}, numerics {a.numerics}, 1 thread, "
              f"torch {torch.__version__}; GEMM peak {peak / 1e9:.2f} GFLOP/s (the step's products alone); "
              f"{per_token / 1e6:.2f} MFLOP a target token (torch's count on posenc's model)")
        print(f"training: {a.params} (d_model {model_config.d_model}, d_ff {model_config.d_ff}, {model_config.heads} "
              f"heads, {model_config.layers}+{model_config.layers} layers, max_tokens {train_config.max_tokens}), "
              f"{a.updates} updates a round, {a.rounds} rounds interleaved")
        rates = {k: [x["tokens"] / x["seconds"] for x in v] for k, v in results.items()}
        for k, v in results.items():
            rate = statistics.median(rates[k])
            ratio = (f", {rate / statistics.median(rates['posenc']):.2f}x posenc's" if "posenc" in rates else "")
            last = v[-1]
            print(f"  {k:8s} median {rate:6.0f} target tokens/s (min {min(rates[k]):.0f}, max {max(rates[k]):.0f}) "
                  f"= {rate * per_token / peak:.0%} of the peak{ratio}; {last['tokens'] / last['updates']:.0f} target "
                  f"tokens an update; {last['parameters']:,} parameters; dev perplexity {last['dev_ppl']:.2f} "
                  f"after {last['updates']} updates")
        if a.model:
            ev = decode_settings(a.params)
            decode(a, a.model, sp, work, peak, *ev)


def decode_settings(params: Path) -> tuple[int, float, int, int]:
    from posenc.decode import EvalConfig

    ev = config.load(params, "eval", EvalConfig)
    return ev.beam, ev.lenpen, ev.max_len_extra, ev.batch_tokens


if __name__ == "__main__":
    main()
