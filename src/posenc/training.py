"""The paper's training recipe (§5) for one positional variant and one seed: the loop that the
train stage runs (posenc.stages.train) and the throughput benchmark times.

Adam (0.9, 0.98, 1e-9) with the warmup-then-inverse-square-root schedule (§5.3), label smoothing
(§5.4), token-count batches with gradient accumulation (§5.1), a fixed number of updates, and the
average of the last checkpoints as the final model (§6.1).

Exactly reproducible: the seed, the thread count and deterministic algorithms fix every bit, and
the data a step sees depends on (seed, step) only. Killed and restarted, a run resumes from its
last checkpoint and ends with the same bits, and never from a checkpoint of other settings, data
or code (posenc.checkpoints). Under torchrun it trains with DistributedDataParallel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from posenc import checkpoints, files, highway, tokens
from posenc.batching import collate, epoch_order, make_batches
from posenc.config import ModelConfig, TrainConfig, checkpoint_steps
from posenc.corpora import Corpus as CorpusSpec
from posenc.errors import UserError
from posenc.flops import FlopMeter
from posenc.model import build_model, check_lengths, count_parameters
from posenc.perplexity import corpus_nll, perplexity

TRAIN_LOG_HEADER = ["step", "lr", "loss", "tokens"]
DEV_LOG_HEADER = ["step", "dev_loss", "dev_ppl"]


def lr_at(step: int, d_model: int, warmup: int, scale: float) -> float:
    """§5.3, eq. (3): lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times `scale`."""
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@dataclasses.dataclass(frozen=True)
class Paths:
    model: Path          # the average of the last checkpoints (§6.1): Table 2's test protocol
    last: Path           # the last checkpoint's weights: Table 3's dev protocol (§6.2, no averaging)
    train_log: Path      # per-update TSV (DVC plot)
    dev_log: Path        # periodic dev loss and perplexity (DVC plot)
    checkpoints: Path    # working directory, removed when the run completes
    timings: Path        # wall-clock figures: untracked, since they differ between runs
    digests: Path        # SHA-256 of the weights at every checkpoint, and what fixed their bits
    highway: Path        # the residual study's gradient and update sizes at each dev evaluation (TSV)


@dataclasses.dataclass(frozen=True)
class Corpus:
    train_src: list[np.ndarray]
    train_tgt: list[np.ndarray]
    dev_src: list[np.ndarray]
    dev_tgt: list[np.ndarray]
    fingerprint: str     # of the arrays read: a checkpoint of other data is never resumed


def read_corpus(model_config: ModelConfig, spec: CorpusSpec, arrays: Path) -> Corpus:
    """The training and dev sides of the prepared arrays, checked for this model first: a bad
    configuration fails before any data is read, and a sentence of any split (training or
    evaluation) longer than a learned position table fails now, not at the first dev evaluation
    or after minutes of decoding."""
    model = build_model(model_config)
    loaded = {path: tokens.load(path, model_config.eos_id) for path in (
        tokens.array_path(arrays, split.name, lang) for split in spec.splits for lang in ("en", "de"))}
    check_lengths(model, loaded)
    sides, digest = {}, hashlib.sha256()
    for split in ("train", spec.dev):
        for lang in ("en", "de"):
            path = tokens.array_path(arrays, split, lang)
            sides[split, lang] = loaded[path]
            digest.update(files.sha256(path).encode())
    return Corpus(sides["train", "en"], sides["train", "de"], sides[spec.dev, "en"],
                  sides[spec.dev, "de"], digest.hexdigest())


def train(model_config: ModelConfig, cfg: TrainConfig, seed: int, corpus: Corpus, paths: Paths,
          device: torch.device, numerics: dict, until: int | None = None,
          params: str = "params.yaml") -> dict:
    """Train, average, write the outputs; return a summary. Runs as one process or under torchrun,
    on `device` (posenc.runtime.setup, which fixes the threads and deterministic algorithms), with
    `numerics` (posenc.numerics.record: the mode and what it fixed) in the fingerprint.

    With `until` (posenc verify), stop after that update: the logs and digests of the updates so
    far are written, the models are not, and the checkpoints stay. `params` names the params file
    in errors."""
    rank, world = _setup_distributed(device)
    torch.manual_seed(seed)
    model = build_model(model_config).to(device)
    # fused: one kernel for all parameters, not a pass per tensor and statistic (README, Performance)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=cfg.adam_betas, eps=cfg.adam_eps,
                                 fused=True)
    fingerprint = checkpoints.fingerprint(
        [dataclasses.asdict(model_config), dataclasses.asdict(cfg), seed, world],
        corpus.fingerprint, __name__, numerics)
    # The steps whose checkpoints make the final average (§6.1): a resumed run needs those it has
    # already passed.
    window = checkpoint_steps(cfg.max_steps, cfg.save_every)[-cfg.average_last:]
    state = _resume(paths.checkpoints, fingerprint, window, model, optimizer, device, rank, world)
    step, train_rows, dev_rows = state["step"], state["train_rows"], state["dev_rows"]
    digests = state["digests"]  # (step, SHA-256 of the weights) of every checkpoint so far
    highway_rows = state["highway_rows"]
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model

    lens = np.array([len(s) for s in corpus.train_src]), np.array([len(t) for t in corpus.train_tgt])
    batches = make_batches(*lens, cfg.max_tokens, seed)
    # one fixed dev batch for the highway measures, the same in every run of this data
    dev_lens = np.array([len(s) for s in corpus.dev_src]), np.array([len(t) for t in corpus.dev_tgt])
    probe = tuple(t.to(device) for t in collate(corpus.dev_src, corpus.dev_tgt,
                                                make_batches(*dev_lens, cfg.max_tokens, seed=0)[0],
                                                model_config.pad_id, model_config.bos_id))
    group = world * cfg.accum  # micro-batches in one update, over all processes
    steps_per_epoch = len(batches) // group
    if steps_per_epoch == 0:
        raise UserError(f"{params}: train.accum ({cfg.accum}) x processes ({world}) exceeds the "
                        f"{len(batches)} batches of the training set; lower train.accum or max_tokens")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bfloat16")
    bar = tqdm(total=cfg.max_steps, initial=step, desc=f"train {model_config.positional}",
               unit=" step", disable=rank != 0, mininterval=2)
    started, tokens_seen, resumed_from = time.perf_counter(), 0, step
    meter, update_s = FlopMeter(), 0.0  # FLOPs and seconds of the updates alone (README, Performance)
    order_epoch, order = -1, None
    model.train()
    last_step = cfg.max_steps if until is None else min(until, cfg.max_steps)
    while step < last_step:
        epoch, k = divmod(step, steps_per_epoch)
        if epoch != order_epoch:
            order_epoch, order = epoch, epoch_order(len(batches), seed, epoch)
        mine = order[k * group:(k + 1) * group][rank::world]
        update_started = time.perf_counter()
        step += 1
        lr = lr_at(step, model_config.d_model, cfg.warmup, cfg.lr_scale)
        for g in optimizer.param_groups:
            g["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        totals = torch.zeros(2, dtype=torch.float64, device=device)  # nccl reduces on the GPU
        for j, b in enumerate(mine):
            source, decoder_in, target = (t.to(device) for t in collate(
                corpus.train_src, corpus.train_tgt, batches[b], model_config.pad_id, model_config.bos_id))
            sync = contextlib.nullcontext() if world == 1 or j == len(mine) - 1 else net.no_sync()
            with sync, meter.count(source.shape, decoder_in.shape):
                with autocast:
                    loss = net(source, decoder_in, target, cfg.label_smoothing)
                loss.backward()
            totals += torch.tensor([loss.item(), float((target != model_config.pad_id).sum())],
                                   dtype=torch.float64, device=device)
        if world > 1:
            dist.all_reduce(totals)
        loss_sum, n_tokens = totals.tolist()
        if not math.isfinite(loss_sum):
            bar.close()  # so that the error gets a line of its own
            raise UserError(f"step {step}: the training loss is {loss_sum}; the run diverged: "
                            f"lower train.lr_scale or raise train.warmup")
        # Gradients are summed token losses (DDP averages them over processes); divide by the
        # global token count so every token weighs the same whatever the split into batches.
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(world / n_tokens)
        optimizer.step()
        update_s += time.perf_counter() - update_started
        train_rows.append((step, lr, loss_sum / n_tokens, int(n_tokens)))
        tokens_seen += n_tokens
        if rank == 0 and (step % cfg.dev_every == 0 or step == cfg.max_steps):
            nll, count = corpus_nll(model, corpus.dev_src, corpus.dev_tgt, cfg.max_tokens, device)
            dev_rows.append((step, nll / count, perplexity(nll, count)))
            highway_rows += [(step, *row) for row in highway.measure(model, probe, cfg.label_smoothing)]
        if rank == 0 and (step % cfg.save_every == 0 or step == cfg.max_steps):
            digests.append((step, checkpoints.weights_digest(model.state_dict())))
            state = {"fingerprint": fingerprint, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(),
                     "train_rows": train_rows, "dev_rows": dev_rows, "digests": digests,
                     "highway_rows": highway_rows}
            if torch.cuda.is_available():
                state["cuda_rng"] = torch.cuda.get_rng_state()
            checkpoints.save(paths.checkpoints, step, state, cfg.average_last)
        elapsed = time.perf_counter() - started
        bar.set_postfix(loss=f"{loss_sum / n_tokens:.3f}", tok_s=f"{tokens_seen / elapsed:.0f}",
                        refresh=False)
        bar.update()
    bar.close()
    flops = torch.tensor([meter.total], dtype=torch.float64, device=device)  # nccl reduces on the GPU
    if world > 1:
        dist.all_reduce(flops)
    summary = {"variant": model_config.positional, "seed": seed, "steps": step,
               "parameters": count_parameters(model), "dev_ppl": dev_rows[-1][2] if dev_rows else None}
    if rank == 0:  # the old outputs go first: never a mix of two runs' (posenc.files.clear)
        files.clear(paths.train_log, paths.dev_log, paths.highway, paths.digests, paths.model, paths.last)
        files.write_tsv(paths.train_log, TRAIN_LOG_HEADER, train_rows)
        files.write_tsv(paths.dev_log, DEV_LOG_HEADER, dev_rows)
        files.write_tsv(paths.highway, highway.HEADER, highway_rows)
        # What `posenc verify` compares: each checkpoint's weights, and what fixed their bits.
        files.write_json(paths.digests, {"numerics": numerics, "threads": cfg.threads,
                                         "processes": world, "fingerprint": fingerprint,
                                         "checkpoints": [{"step": s, "sha256": d} for s, d in digests]})
    if rank == 0 and until is None:
        averaged = checkpoints.average(paths.checkpoints, window)
        checkpoints.save_model(paths.last, model_config, {k: v.cpu() for k, v in model.state_dict().items()})
        checkpoints.save_model(paths.model, model_config, averaged)
        wall = time.perf_counter() - started
        files.write_json(paths.timings, {
            **summary, "wall_s": round(wall, 1), "resumed_from_step": resumed_from,
            "update_s": round(update_s, 1), "train_flops": int(flops.item()),
            "target_tokens_per_s_this_process": round(tokens_seen / world / wall, 1),
            "threads": cfg.threads, "processes": world, "device": device.type,
            "allocator": os.environ.get("LD_PRELOAD", "") or "default"})
        shutil.rmtree(paths.checkpoints)  # after the model: a kill in between only repeats the average
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return summary


def _resume(directory: Path, fingerprint: dict, window: list[int], model, optimizer, device,
            rank: int, world: int) -> dict:
    """Load the newest usable checkpoint of this very run into model and optimizer, or start afresh.
    Rank 0 sorts the directory out first; the other processes then read what it kept."""
    state = checkpoints.resume(directory, fingerprint, window, device) if rank == 0 else None
    if world > 1:
        dist.barrier()
        if rank != 0:
            state = checkpoints.resume(directory, fingerprint, window, device, clean=False)
    if state is None:
        return {"step": 0, "train_rows": [], "dev_rows": [], "digests": [], "highway_rows": []}
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda_rng"])
    return state


def _setup_distributed(device: torch.device) -> tuple[int, int]:
    """(rank, world size): one process, or one of torchrun's (gloo on CPU, nccl on GPU)."""
    if "WORLD_SIZE" not in os.environ:
        return 0, 1
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size()
