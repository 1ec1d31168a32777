"""Stage `train`: the paper's training recipe (§5) for one positional variant and one seed.

Adam (0.9, 0.98, 1e-9) with the warmup-then-inverse-square-root schedule (§5.3), label smoothing
(§5.4), token-count batches with gradient accumulation (§5.1), a fixed number of updates, and the
average of the last checkpoints as the final model (§6.1).

Exactly reproducible: the seed, the thread count and deterministic algorithms fix every bit, and
the data a step sees depends on (seed, step) only. Killed and restarted, a run resumes from its
last checkpoint and ends with the same bits. Under torchrun it trains with DistributedDataParallel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from posenc import files, tokens
from posenc.batching import collate, epoch_order, make_batches
from posenc.config import ModelConfig, TrainConfig
from posenc.errors import UserError
from posenc.model import build_model, count_parameters
from posenc.scoring import corpus_nll, perplexity

TRAIN_LOG_HEADER = ["step", "lr", "loss", "tokens"]
DEV_LOG_HEADER = ["step", "dev_loss", "dev_ppl"]


def lr_at(step: int, d_model: int, warmup: int, scale: float) -> float:
    """§5.3, eq. (3): lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times `scale`."""
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@dataclasses.dataclass(frozen=True)
class Paths:
    model: Path          # the averaged model (DVC output)
    train_log: Path      # per-update TSV (DVC plot)
    dev_log: Path        # periodic dev loss and perplexity (DVC plot)
    checkpoints: Path    # working directory, removed when the run completes
    timings: Path        # wall-clock figures: untracked, since they differ between runs


@dataclasses.dataclass(frozen=True)
class Corpus:
    train_src: list[np.ndarray]
    train_tgt: list[np.ndarray]
    dev_src: list[np.ndarray]
    dev_tgt: list[np.ndarray]
    fingerprint: str     # of the training arrays: a checkpoint of other data is never resumed


def load_corpus(arrays: Path, dev: str, eos: int) -> Corpus:
    sides = {}
    digest = hashlib.sha256()
    for split in ("train", dev):
        for lang in ("en", "de"):
            path = tokens.array_path(arrays, split, lang)
            if not path.is_file():
                raise UserError(f"{path}: missing; run `dvc repro prepare` first")
            sides[split, lang] = tokens.load(path, eos)
            if split == "train":
                digest.update(files.sha256(path).encode())
    return Corpus(sides["train", "en"], sides["train", "de"], sides[dev, "en"], sides[dev, "de"],
                  digest.hexdigest())


def train(model_config: ModelConfig, cfg: TrainConfig, seed: int, corpus: Corpus, paths: Paths) -> dict:
    """Train, average, write the outputs; return a summary. Runs as one process or under torchrun."""
    rank, world, device = _setup_distributed()
    torch.manual_seed(seed)
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    model = build_model(model_config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=cfg.adam_betas, eps=cfg.adam_eps)
    fingerprint = _fingerprint(model_config, cfg, seed, world, corpus)
    state = _resume(paths.checkpoints, fingerprint, model, optimizer, device, rank)
    step, train_rows, dev_rows = state["step"], state["train_rows"], state["dev_rows"]
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model

    lens = np.array([len(s) for s in corpus.train_src]), np.array([len(t) for t in corpus.train_tgt])
    batches = make_batches(*lens, cfg.max_tokens, seed)
    group = world * cfg.accum  # micro-batches in one update, over all processes
    steps_per_epoch = len(batches) // group
    if steps_per_epoch == 0:
        raise UserError(f"params.yaml: train.accum ({cfg.accum}) x processes ({world}) exceeds the "
                        f"{len(batches)} batches of the training set; lower train.accum or max_tokens")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bfloat16")
    bar = tqdm(total=cfg.max_steps, initial=step, desc=f"train {model_config.positional}",
               unit=" step", disable=rank != 0, mininterval=2)
    started, tokens_seen, resumed_from = time.perf_counter(), 0, step
    order_epoch, order = -1, None
    model.train()
    while step < cfg.max_steps:
        epoch, k = divmod(step, steps_per_epoch)
        if epoch != order_epoch:
            order_epoch, order = epoch, epoch_order(len(batches), seed, epoch)
        mine = order[k * group:(k + 1) * group][rank::world]
        step += 1
        lr = lr_at(step, model_config.d_model, cfg.warmup, cfg.lr_scale)
        for g in optimizer.param_groups:
            g["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        totals = torch.zeros(2, dtype=torch.float64)
        for j, b in enumerate(mine):
            source, decoder_in, target = (t.to(device) for t in collate(
                corpus.train_src, corpus.train_tgt, batches[b], model_config.pad_id, model_config.bos_id))
            sync = contextlib.nullcontext() if world == 1 or j == len(mine) - 1 else net.no_sync()
            with sync:
                with autocast:
                    logits = net(source, decoder_in)
                loss = F.cross_entropy(logits.float().flatten(0, 1), target.flatten(),
                                       ignore_index=model_config.pad_id,
                                       label_smoothing=cfg.label_smoothing, reduction="sum")
                loss.backward()
            totals += torch.tensor([loss.item(), float((target != model_config.pad_id).sum())],
                                   dtype=torch.float64)
        if world > 1:
            dist.all_reduce(totals)
        loss_sum, n_tokens = totals.tolist()
        if not math.isfinite(loss_sum):
            raise UserError(f"step {step}: the training loss is {loss_sum}; the run diverged: "
                            f"lower train.lr_scale or raise train.warmup")
        # Gradients are summed token losses (DDP averages them over processes); divide by the
        # global token count so every token weighs the same whatever the split into batches.
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(world / n_tokens)
        optimizer.step()
        train_rows.append((step, lr, loss_sum / n_tokens, int(n_tokens)))
        tokens_seen += n_tokens
        if rank == 0 and (step % cfg.dev_every == 0 or step == cfg.max_steps):
            nll, count = corpus_nll(model, corpus.dev_src, corpus.dev_tgt, cfg.max_tokens, device)
            dev_rows.append((step, nll / count, perplexity(nll, count)))
        if rank == 0 and (step % cfg.save_every == 0 or step == cfg.max_steps):
            _save_checkpoint(paths.checkpoints, step, fingerprint, model, optimizer,
                             train_rows, dev_rows, cfg.average_last)
        elapsed = time.perf_counter() - started
        bar.set_postfix(loss=f"{loss_sum / n_tokens:.3f}", tok_s=f"{tokens_seen / elapsed:.0f}",
                        refresh=False)
        bar.update()
    bar.close()
    summary = {"variant": model_config.positional, "seed": seed, "steps": step,
               "parameters": count_parameters(model), "dev_ppl": dev_rows[-1][2] if dev_rows else None}
    if rank == 0:
        averaged = average_checkpoints(paths.checkpoints, cfg.average_last)
        files.write_tsv(paths.train_log, TRAIN_LOG_HEADER, train_rows)
        files.write_tsv(paths.dev_log, DEV_LOG_HEADER, dev_rows)
        files.save_torch(paths.model, {"config": dataclasses.asdict(model_config), "model": averaged})
        wall = time.perf_counter() - started
        files.write_json(paths.timings, {
            **summary, "wall_s": round(wall, 1), "resumed_from_step": resumed_from,
            "target_tokens_per_s_this_process": round(tokens_seen / world / wall, 1),
            "threads": cfg.threads, "processes": world, "device": device.type,
            "allocator": os.environ.get("LD_PRELOAD", "") or "default"})
        shutil.rmtree(paths.checkpoints)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return summary


def load_model(path: Path, device: torch.device | str = "cpu"):
    """Rebuild a model from the config saved beside its weights (the averaged model of `train`)."""
    if not Path(path).is_file():
        raise UserError(f"{path}: missing; run `dvc repro` to train it")
    saved = torch.load(path, map_location=device, weights_only=True)
    model = build_model(ModelConfig(**saved["config"])).to(device)
    model.load_state_dict(saved["model"])
    return model.eval()


def average_checkpoints(directory: Path, last: int) -> dict:
    """§6.1: the element-wise mean of the last `last` checkpoints' weights."""
    paths = sorted(directory.glob("step-*.pt"))[-last:]
    total = None
    for path in paths:
        weights = torch.load(path, map_location="cpu", weights_only=True)["model"]
        if total is None:
            total = {k: v.double() for k, v in weights.items()}
        else:
            for k, v in weights.items():
                total[k] += v.double()
    return {k: (v / len(paths)).to(weights[k].dtype) for k, v in total.items()}


def _save_checkpoint(directory: Path, step: int, fingerprint: str, model, optimizer,
                     train_rows: list, dev_rows: list, keep: int) -> None:
    state = {"fingerprint": fingerprint, "step": step, "model": model.state_dict(),
             "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(),
             "train_rows": train_rows, "dev_rows": dev_rows}
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state()
    files.save_torch(directory / f"step-{step:08d}.pt", state)
    for old in sorted(directory.glob("step-*.pt"))[:-keep]:
        old.unlink()


def _resume(directory: Path, fingerprint: str, model, optimizer, device, rank: int) -> dict:
    """Load the newest checkpoint of this very configuration; otherwise start afresh."""
    latest = sorted(directory.glob("step-*.pt"))[-1:] if directory.is_dir() else []
    if latest:
        state = torch.load(latest[0], map_location=device, weights_only=True)
        if state["fingerprint"] == fingerprint:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
            if "cuda_rng" in state and torch.cuda.is_available():
                torch.cuda.set_rng_state(state["cuda_rng"])
            print(f"resuming from {latest[0]} (step {state['step']})", flush=True)
            return {"step": state["step"], "train_rows": [tuple(r) for r in state["train_rows"]],
                    "dev_rows": [tuple(r) for r in state["dev_rows"]]}
    if rank == 0:
        shutil.rmtree(directory, ignore_errors=True)  # checkpoints of another configuration
        directory.mkdir(parents=True, exist_ok=True)
    return {"step": 0, "train_rows": [], "dev_rows": []}


def _fingerprint(model_config: ModelConfig, cfg: TrainConfig, seed: int, world: int, corpus: Corpus) -> str:
    key = json.dumps([dataclasses.asdict(model_config), dataclasses.asdict(cfg), seed, world,
                      corpus.fingerprint], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()


def _setup_distributed() -> tuple[int, int, torch.device]:
    """(rank, world size, device): one process, or one of torchrun's (gloo on CPU, nccl on GPU)."""
    cuda = torch.cuda.is_available()
    if cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    if "WORLD_SIZE" not in os.environ:
        return 0, 1, torch.device("cuda" if cuda else "cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), device


def run(args) -> None:
    import sentencepiece as spm

    from posenc import config, corpora

    data = config.load(args.params, "data", config.DataConfig)
    cfg = config.load(args.params, "train", TrainConfig)
    sp = spm.SentencePieceProcessor(model_file=str(args.spm))
    model_config = config.load(args.params, "model", ModelConfig, positional=args.variant,
                               vocab_size=sp.vocab_size(), pad_id=sp.pad_id(),
                               bos_id=sp.bos_id(), eos_id=sp.eos_id())
    build_model(model_config)  # a bad configuration fails here, before any data is read
    corpus = load_corpus(Path(args.arrays), corpora.get(data.corpus).dev, sp.eos_id())
    paths = Paths(Path(args.model), Path(args.train_log), Path(args.dev_log),
                  Path(args.checkpoints), Path(args.timings))
    s = train(model_config, cfg, args.seed, corpus, paths)
    if s["dev_ppl"] is not None:
        print(f"train: {s['variant']} seed {s['seed']}: {s['steps']} updates, "
              f"{s['parameters']:,} parameters, dev perplexity {s['dev_ppl']:.3f} -> {args.model}")
