"""Training throughput of posenc's Transformer, next to torch.nn.Transformer of identical size, and
in the real training loop on the default profile's prepared batches.

Synthetic part: same batches, same optimizer, forward + backward + Adam step, interleaved rounds;
prints target tokens/s of each, their FLOP/s (counted by torch's FlopCounterMode, not by hand),
the share of the machine's matmul peak and the ratio of the two models. The peak is timed in the
same run with preallocated outputs: every matrix product one training step runs (recorded from a
real step, with its shapes and memory layouts), replayed alone; "peak" is their FLOPs over their
time, and the fastest single shape is printed beside it.

Real part (--arrays), in two measurements. First, both models step on the first --real-batches
batches that training with seed 1 sees (real lengths and padding), interleaved as above, their
FLOPs counted before the timing. Then posenc.training.train itself, in this process, for
--real-steps updates of the default profile's params on the prepared data, --real-rounds times; its
timings give FLOPs (torch's count) and the seconds spent in updates, which include the stage's
own bookkeeping: the first step of each batch shape runs under FlopCounterMode
(posenc/flops.py), and nearly every step of a short run is a first. Run from the project root:

    python benchmarks/train_throughput.py --arrays data/prepared/arrays   # both parts
    python benchmarks/train_throughput.py --glibc-defaults   # without posenc.allocator.tune()
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 python benchmarks/train_throughput.py
    python benchmarks/train_throughput.py --profile          # top operators of posenc's step
    python benchmarks/train_throughput.py --parts            # its parts' times, without the profiler
    python benchmarks/train_throughput.py --levers           # without and with each training lever
    python benchmarks/train_throughput.py --bf16             # posenc's step under bfloat16 autocast too
    python benchmarks/train_throughput.py --compile          # and under torch.compile
    python benchmarks/train_throughput.py --compare-numerics # portable against native, interleaved

Every run computes in --numerics (default portable, as the stages: posenc.numerics), set before
torch loads its kernels.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from posenc import numerics

numerics.apply(numerics.mode_from_argv(sys.argv[1:]))  # before torch loads its kernels

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from posenc import allocator, config, corpora, tokens, training
from posenc.batching import collate, epoch_order, make_batches
from posenc.config import ModelConfig, SinusoidalSettings
from posenc.loss import projection_loss
from posenc.model import build_model
from posenc.positional import sinusoid_table

class TorchTransformer(nn.Module):
    """nn.Transformer (post-norm) with the same tied, scaled embedding and sinusoidal positions."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.core = nn.Transformer(c.d_model, c.heads, c.layers, c.layers, c.d_ff, c.dropout,
                                   batch_first=True)
        self.pad, self.scale = c.pad_id, math.sqrt(c.d_model)

    def embed_pos(self, ids):
        return self.embed(ids) * self.scale + sinusoid_table(torch.arange(ids.shape[1]), self.embed.embedding_dim)

    def forward(self, src, tgt, target=None, label_smoothing=0.0):
        """Logits, or given `target` the summed loss, as posenc's Transformer; the loss computed
        the usual way (F.cross_entropy of the logits)."""
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        h = self.core(self.embed_pos(src), self.embed_pos(tgt), tgt_mask=mask, tgt_is_causal=True,
                      src_key_padding_mask=src == self.pad, memory_key_padding_mask=src == self.pad)
        logits = F.linear(h, self.embed.weight)
        return logits if target is None else loss_from(logits, target, label_smoothing)


class Unfused(nn.Module):
    """posenc's Transformer with the loss computed from its logits (F.cross_entropy), as before
    the projection was fused into the loss (posenc.loss): the lever's "before"."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src, tgt, target, label_smoothing):
        return loss_from(self.model(src, tgt), target, label_smoothing)


class Autocast(nn.Module):
    """The model's forward under bfloat16 autocast, its logits returned in float32 for the loss."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.model(*args).float()


def batches(n: int, sentences: int, length: int, vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src = torch.randint(4, vocab, (sentences, length), generator=g)
        tgt = torch.randint(4, vocab, (sentences, length + 1), generator=g)
        out.append((src, tgt[:, :-1], tgt[:, 1:]))
    return out


SMOOTHING = 0.1  # the profiles' train.label_smoothing


def loss_from(logits, target, label_smoothing=SMOOTHING):
    """The summed label-smoothed loss of logits, unfused (pad id 0; synthetic batches have no
    padding)."""
    return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0,
                           label_smoothing=label_smoothing, reduction="sum")


def loss_of(model, batch):
    """The summed training loss, as each model computes it: posenc's with the projection fused
    into the loss (posenc.loss), torch.nn.Transformer's from its logits."""
    src, tgt_in, tgt_out = batch
    return model(src, tgt_in, tgt_out, SMOOTHING)


def adam(model: nn.Module, fused: bool = True) -> torch.optim.Optimizer:
    """posenc.training's optimizer (fused); fused=False: the per-tensor loop, the lever's "before"."""
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                            **({"fused": True} if fused else {"foreach": False}))


def step(model, optimizer, batch) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss_of(model, batch).backward()
    optimizer.step()


def step_time(model, optimizer, batch) -> float:
    start = time.perf_counter()
    step(model, optimizer, batch)
    return time.perf_counter() - start


def step_flops(model, batch) -> int:
    """Floating-point operations of one forward + backward pass, as torch counts them."""
    with FlopCounterMode(display=False) as counter:
        loss_of(model, batch).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.addmm_.default,
           torch.ops.aten.bmm.default}


class MatmulRecorder(TorchDispatchMode):
    """Records the shape and memory layout of the operands of every matrix product it sees."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            self.calls.append((func, tuple((tuple(a.shape), a.stride()) for a in args[:3]
                                           if isinstance(a, torch.Tensor))))
        return func(*args, **(kwargs or {}))


def replay_time(func, operands, reps: int, dtype: torch.dtype = torch.float32) -> float:
    """Median seconds of one product with these operands, into a preallocated output."""
    # as laid out in the step: transposed views and broadcast biases included
    ts = [torch.randn(1 + sum((n - 1) * st for n, st in zip(shape, stride)), dtype=dtype).as_strided(shape, stride)
          for shape, stride in operands]
    if func is torch.ops.aten.addmm_.default:
        run = lambda: ts[0].addmm_(ts[1], ts[2])  # noqa: E731
    else:
        factors = ts[-2:]
        out = torch.empty(*factors[0].shape[:-1], factors[1].shape[-1], dtype=dtype)
        op = torch.bmm if func is torch.ops.aten.bmm.default else torch.mm
        run = ((lambda: torch.addmm(ts[0], *factors, out=out)) if func is torch.ops.aten.addmm.default
               else (lambda: op(*factors, out=out)))
    run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak(model, optimizer, batch, reps: int = 10,
                dtype: torch.dtype = torch.float32) -> tuple[float, float]:
    """(FLOP/s of the step's own matrix products, replayed alone with preallocated outputs of
    `dtype`: their FLOPs over their summed time; FLOP/s of the fastest single one)."""
    recorder = MatmulRecorder()
    with recorder:
        step(model, optimizer, batch)
    flops = seconds = best = 0.0
    for (func, operands), n in collections.Counter(recorder.calls).items():
        (a_shape, _), (b_shape, _) = operands[-2:]
        f = 2 * math.prod(a_shape) * b_shape[-1]
        t = replay_time(func, operands, reps, dtype)
        flops, seconds, best = flops + n * f, seconds + n * t, max(best, f / t)
    return flops / seconds, best


def profile_inputs(arrays: Path, params: Path):
    """The default profile's model settings (variant sinusoidal), training settings and data: the
    `prepared` that real_batches and real_loop take."""
    sp = tokens.load_tokenizer(arrays.parent / "spm.model")
    model_config = config.load(params, "model", ModelConfig, positional="sinusoidal",
                               position=config.load_positional(params, "sinusoidal"),
                               vocab_size=sp.vocab_size(), pad_id=sp.pad_id(), bos_id=sp.bos_id(),
                               eos_id=sp.eos_id())
    spec = corpora.get(config.load(params, "data", config.DataConfig).corpus)
    train_config = config.load(params, "train", config.TrainConfig)
    return model_config, train_config, training.read_corpus(model_config, spec, arrays)


def real_batches(prepared, n: int, synthetic: ModelConfig, arrays: Path) -> list[tuple]:
    """The first n batches that training with seed 1 sees, as (source, decoder input, target)."""
    model_config, cfg, corpus = prepared
    real = (model_config.vocab_size, model_config.pad_id, model_config.bos_id)
    ours = (synthetic.vocab_size, synthetic.pad_id, synthetic.bos_id)
    if real != ours:
        raise SystemExit(f"{arrays}: vocabulary, pad and BOS ids {real} differ from the "
                         f"benchmark's {ours}; pass --vocab {model_config.vocab_size}")
    lens = np.array([len(s) for s in corpus.train_src]), np.array([len(t) for t in corpus.train_tgt])
    batches = make_batches(*lens, cfg.max_tokens, 1)
    return [collate(corpus.train_src, corpus.train_tgt, batches[b], model_config.pad_id, model_config.bos_id)
            for b in epoch_order(len(batches), 1, 0)[:n]]


def real_loop(prepared, steps: int, threads: int) -> dict:
    """posenc.training.train on the prepared data for `steps` updates of the profile's settings
    for `sinusoidal` (one checkpoint, no averaging, one dev evaluation at the end); its timings
    record. The threads are this benchmark's (set in main), not the profile's."""
    model_config, train_config, corpus = prepared
    cfg = dataclasses.replace(train_config, max_steps=steps, save_every=steps, dev_every=steps,
                              average_last=1, threads=threads)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        training.train(model_config, cfg, 1, corpus, training.Paths(
            t / "model.pt", t / "last.pt", t / "train.tsv", t / "dev.tsv", t / "ck", t / "timings.json",
            t / "digests.json", t / "highway.tsv"), torch.device("cpu"),
            numerics.record(numerics.applied() or "native"))
        timings = json.loads((t / "timings.json").read_text())
        rows = (t / "train.tsv").read_text().splitlines()[1:]
    timings["tokens"] = sum(int(r.split("\t")[3]) for r in rows)
    return timings


def interleaved(models, optimizers, data, tokens_per_round, rounds: int) -> dict[str, list[float]]:
    """Target tokens/s of each model over `data`, one figure a round; rounds interleave the models,
    so drift in machine speed hits them alike."""
    rates = {k: [] for k in models}
    for _ in range(rounds):
        for name, model in models.items():
            rates[name].append(tokens_per_round / sum(step_time(model, optimizers[name], b) for b in data))
    return rates


def beside_eager(model, variant, optimizer, data, tokens_per_round, rounds: int) -> tuple[float, float, list[float]]:
    """posenc's step as `variant` (the same model, computed another way: bfloat16, compiled) and as
    it is, interleaved: the variant's first step in seconds (its warm-up, or its compilation: one
    shape), its median target tokens/s, and its ratio to the eager step round by round."""
    pair = {"eager": model, "variant": variant}
    first = step_time(variant, optimizer, data[0])
    r = interleaved(pair, dict.fromkeys(pair, optimizer), data, tokens_per_round, rounds)
    return first, statistics.median(r["variant"]), [x / y for x, y in zip(r["variant"], r["eager"])]


def profile_top(model, optimizer, data, rows: int = 5) -> str:
    """The operators of posenc's steps by self CPU time (torch.profiler), and the steps' time with
    and without it: the profiler's own cost falls on some operators more than on others."""
    from torch.profiler import profile

    plain = sum(step_time(model, optimizer, b) for b in data)
    start = time.perf_counter()
    with profile() as p:
        for b in data:
            step(model, optimizer, b)
    profiled = time.perf_counter() - start
    return (p.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows) +
            f"\nprofiled: {profiled / len(data) * 1e3:.0f} ms a step, against "
            f"{plain / len(data) * 1e3:.0f} ms unprofiled just before")


def step_parts(model, optimizer, data, rounds: int) -> dict[str, float]:
    """Median milliseconds of posenc's step in its parts, each timed with perf_counter (no
    profiler): forward to the decoder output; the loss with its projection (the tied embedding,
    §3.4), fused (posenc.loss: it forms its gradients as it goes); backward; Adam. Then, alone at
    the step's shapes, projection and loss forward + backward, fused and unfused. The fused
    part's FLOPs (torch's count) are returned beside them."""
    target = data[0][2]
    hidden = torch.randn(*target.shape, model.config.d_model, requires_grad=True)

    def fused_alone():
        projection_loss(hidden, model.embed.weight, target, SMOOTHING, 0).backward()
        hidden.grad = model.embed.weight.grad = None

    def unfused_alone():
        loss_from(model.logits(hidden), target).backward()
        hidden.grad = model.embed.weight.grad = None

    def ms(f) -> float:
        start = time.perf_counter()
        f()
        return (time.perf_counter() - start) * 1e3

    with FlopCounterMode(display=False) as counter:
        fused_alone()
    # untimed once: the first touch of new heap pages is slow on these VMs (README, Performance)
    step(model, optimizer, data[0])
    unfused_alone()
    parts = collections.defaultdict(list)
    for _ in range(rounds):
        for src, tgt_in, tgt_out in data:
            optimizer.zero_grad(set_to_none=True)
            t = [time.perf_counter()]
            memory, src_mask = model.encode(src)  # the wiring of Transformer.forward, in parts
            h = model.decoder_output(tgt_in, memory, src_mask)
            t.append(time.perf_counter())
            loss = projection_loss(h, model.embed.weight, tgt_out, SMOOTHING, 0)
            t.append(time.perf_counter())
            loss.backward()
            t.append(time.perf_counter())
            optimizer.step()
            t.append(time.perf_counter())
            for name, start, end in zip(("forward", "loss", "backward", "Adam"), t, t[1:]):
                parts[name].append((end - start) * 1e3)
            parts["fused alone"].append(ms(fused_alone))
            parts["unfused alone"].append(ms(unfused_alone))
    result = {k: statistics.median(v) for k, v in parts.items()}
    result["loss FLOPs"] = counter.get_total_flops()
    return result


LEVERS = {"before: loss from the logits, Adam per tensor": (False, False),
          "the projection fused into the loss": (True, False),
          "fused Adam": (False, True),
          "both (posenc.training)": (True, True)}


def levers(model, data, tokens_per_round, rounds: int, what: str) -> None:
    """posenc's step without and with each training lever (README, Performance), interleaved
    round by round on the same model and batches (`what`): each row's target tokens/s, and its
    ratio to "before" round by round."""
    models = {name: model if fused_loss else Unfused(model) for name, (fused_loss, _) in LEVERS.items()}
    optimizers = {name: adam(model, fused) for name, (_, fused) in LEVERS.items()}
    for name in LEVERS:  # warm-up: Adam's state, the first touch of each buffer
        step_time(models[name], optimizers[name], data[0])
    rates = interleaved(models, optimizers, data, tokens_per_round, rounds)
    before = rates[next(iter(LEVERS))]
    print(f"training levers, posenc's step on {what}, {rounds} interleaved rounds:")
    for name, r in rates.items():
        ratios = [x / y for x, y in zip(r, before)]
        print(f"  {name:48s} median {statistics.median(r):6.0f} target tokens/s, "
              f"{statistics.median(ratios):.3f}x before (min {min(ratios):.3f}, max {max(ratios):.3f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--sentences", type=int, default=256)
    p.add_argument("--length", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--glibc-defaults", action="store_true",
                   help="leave glibc's allocator as it is (training tunes it: posenc.allocator)")
    p.add_argument("--profile", action="store_true", help="print the top operators of posenc's step")
    p.add_argument("--compile", action="store_true",
                   help="also time posenc's step under torch.compile (inductor fuses the passes between "
                        "the products: other floating-point results, so never a speed-up by issue 11's rules)")
    p.add_argument("--parts", action="store_true",
                   help="time posenc's step in parts, and its projection and loss alone, fused and unfused")
    p.add_argument("--levers", action="store_true",
                   help="time posenc's step without and with each training lever, interleaved")
    p.add_argument("--bf16", action="store_true",
                   help="also time posenc's step under bfloat16 autocast: another computation, so never a "
                        "speed-up by issue 11's rules, but native on CPUs with AMX")
    p.add_argument("--arrays", type=Path, help="prepared arrays: also time the real training loop")
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--real-batches", type=int, default=20, help="real batches timed step by step")
    p.add_argument("--real-steps", type=int, default=100)
    p.add_argument("--real-rounds", type=int, default=3)
    p.add_argument("--numerics", choices=numerics.MODES, default="portable",
                   help="numerics mode (posenc.numerics), set before torch loads (default portable)")
    p.add_argument("--compare-numerics", action="store_true",
                   help="time native against portable: --rounds rounds, each one child process per "
                        "mode in alternating order (the modes cannot change inside one process)")
    a = p.parse_args()
    if a.compare_numerics:
        return compare_numerics(a.rounds)
    tuned = not a.glibc_defaults and allocator.tune()
    torch.set_num_threads(a.threads)
    c = ModelConfig(positional="sinusoidal", position=SinusoidalSettings(), vocab_size=a.vocab,
                    pad_id=0, bos_id=2, eos_id=3, d_model=a.d_model, d_ff=a.d_ff, heads=a.heads,
                    layers=a.layers, dropout=0.1, norm="post")
    torch.manual_seed(0)
    models = {"posenc": build_model(c), "torch.nn.Transformer": TorchTransformer(c)}
    optimizers = {k: adam(m) for k, m in models.items()}
    data = batches(a.steps, a.sentences, a.length, a.vocab, seed=1)
    prepared = profile_inputs(a.arrays, a.params) if a.arrays else None  # read once, checked early
    real = real_batches(prepared, a.real_batches, c, a.arrays) if prepared else None
    for name, model in models.items():  # warm-up
        step_time(model, optimizers[name], data[0])
    tokens_per_round = a.sentences * a.length * a.steps
    flops = {name: step_flops(model, data[0]) for name, model in models.items()}
    peak, best = matmul_peak(models["posenc"], optimizers["posenc"], data[0])
    rates = interleaved(models, optimizers, data, tokens_per_round, a.rounds)
    print(f"d_model {a.d_model}, d_ff {a.d_ff}, {a.layers}+{a.layers} layers, {a.heads} heads, "
          f"{a.sentences}x{a.length} target tokens per step, {a.threads} threads, {a.rounds} rounds, "
          f"numerics {a.numerics}, "
          f"allocator: {os.environ.get('LD_PRELOAD') or ('glibc tuned' if tuned else 'glibc as it is')}")
    print(f"matmul peak: {peak / 1e9:.1f} GFLOP/s over the step's own products "
          f"(fastest single shape {best / 1e9:.1f})")
    for name, r in rates.items():
        per_s = statistics.median(r) / (a.sentences * a.length) * flops[name]
        print(f"{name:22s} median {statistics.median(r):8.0f} target tokens/s  "
              f"(min {min(r):.0f}, max {max(r):.0f}); {flops[name] / 1e9:.1f} GFLOP a step, "
              f"{per_s / 1e9:.1f} GFLOP/s = {per_s / peak:.0%} of the peak ({per_s / best:.0%} of the fastest)")
    ratios = [x / y for x, y in zip(rates["posenc"], rates["torch.nn.Transformer"])]
    print(f"ratio posenc / torch.nn.Transformer: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    if a.bf16:
        bf16_peak, _ = matmul_peak(models["posenc"], optimizers["posenc"], data[0], dtype=torch.bfloat16)
        _, rate, ratios = beside_eager(models["posenc"], Autocast(models["posenc"]), optimizers["posenc"],
                                       data, tokens_per_round, a.rounds)
        print(f"bfloat16 autocast: the step's products {bf16_peak / 1e9:.1f} GFLOP/s "
              f"({bf16_peak / peak:.1f}x float32's); posenc median {rate:.0f} "
              f"target tokens/s, {statistics.median(ratios):.2f}x float32's "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    if a.compile:
        compile_s, rate, ratios = beside_eager(models["posenc"], torch.compile(models["posenc"]),
                                               optimizers["posenc"], data, tokens_per_round, a.rounds)
        print(f"torch.compile: compiled in {compile_s:.0f} s; posenc median {rate:.0f} "
              f"target tokens/s, {statistics.median(ratios):.2f}x eager's "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    if a.parts:
        part = step_parts(models["posenc"], optimizers["posenc"], data, a.rounds)
        step_ms = part["forward"] + part["loss"] + part["backward"] + part["Adam"]
        loss_flops, rest_flops = part["loss FLOPs"], flops["posenc"] - part["loss FLOPs"]
        rest_ms = step_ms - part["fused alone"]
        share = lambda f, ms: f"{f / 1e9:.1f} GFLOP, {f / ms / 1e6:.1f} GFLOP/s = {f / ms * 1e3 / peak:.0%}"  # noqa: E731
        print(f"posenc's step in parts (perf_counter, median of {a.rounds} rounds x {len(data)} steps): "
              f"forward {part['forward']:.0f} ms, loss {part['loss']:.0f}, backward {part['backward']:.0f}, "
              f"Adam {part['Adam']:.0f}; {step_ms:.0f} in all")
        print(f"  alone at its shapes: projection and loss forward + backward, fused {part['fused alone']:.0f} ms "
              f"({share(loss_flops, part['fused alone'])}; {part['fused alone'] / step_ms:.0%} of the step), "
              f"unfused {part['unfused alone']:.0f} ms; the rest of the step {rest_ms:.0f} ms "
              f"({share(rest_flops, rest_ms)})")
    if a.levers:
        levers(models["posenc"], data, tokens_per_round, a.rounds, "synthetic batches")
    if a.profile:
        print(profile_top(models["posenc"], optimizers["posenc"], data))
    if a.arrays:
        n_tokens = sum(int((t != c.pad_id).sum()) for _, _, t in real)
        real_flops = {name: sum(step_flops(model, b) for b in real) for name, model in models.items()}
        real_rates = interleaved(models, optimizers, real, n_tokens, a.rounds)
        print(f"real batches (the first {len(real)} that training sees, {n_tokens:,} target tokens, "
              f"FLOPs counted before the timing), {a.rounds} rounds:")
        for name, r in real_rates.items():
            per_s = statistics.median(r) / n_tokens * real_flops[name]
            print(f"{name:22s} median {statistics.median(r):8.0f} target tokens/s; "
                  f"{per_s / 1e9:.1f} GFLOP/s = {per_s / peak:.0%} of the peak")
        ratios = [x / y for x, y in zip(real_rates["posenc"], real_rates["torch.nn.Transformer"])]
        print(f"ratio posenc / torch.nn.Transformer on real batches: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
        if a.levers:  # with their padding: the fused loss skips the padded positions' logits
            levers(models["posenc"], real, n_tokens, a.rounds, f"the first {len(real)} real batches")
        runs = [real_loop(prepared, a.real_steps, a.threads) for _ in range(a.real_rounds)]
        if not all(r["update_s"] for r in runs):  # the timings record rounds to 0.1 s
            raise SystemExit(f"--real-steps {a.real_steps}: too few updates to time; raise --real-steps")
        in_updates = [r["train_flops"] / r["update_s"] for r in runs]
        whole = [r["train_flops"] / r["wall_s"] for r in runs]
        m = statistics.median(in_updates)
        print(f"real loop ({a.params}, {a.real_steps} updates, {a.real_rounds} rounds): median "
              f"{statistics.median(r['tokens'] / r['update_s'] for r in runs):.0f} target tokens/s in "
              f"updates, {m / 1e9:.1f} GFLOP/s = {m / peak:.0%} of the peak; whole run (dev "
              f"evaluation and model building included) {statistics.median(whole) / peak:.0%}")


def compare_numerics(rounds: int) -> None:
    """Portable against native, interleaved: each round runs this benchmark once per mode (one
    round each, native first in odd rounds, portable first in even ones), and each child times
    its own GEMM peak, so the shares are of each mode's peak."""
    argv = [x for x in sys.argv[1:] if x != "--compare-numerics"]
    figures = {m: {"peak": [], "posenc": [], "torch": [], "real": []} for m in ("native", "portable")}
    for r in range(rounds):
        for mode in (("native", "portable") if r % 2 == 0 else ("portable", "native")):
            out = subprocess.run([sys.executable, __file__, *argv, "--rounds", "1", "--real-rounds", "1",
                                  "--numerics", mode], check=True, capture_output=True, text=True).stdout
            figures[mode]["peak"].append(float(re.search(r"matmul peak: ([\d.]+)", out).group(1)))
            figures[mode]["posenc"].append(float(re.search(r"^posenc +median +(\d+)", out, re.M).group(1)))
            figures[mode]["torch"].append(float(re.search(r"^torch.nn.Transformer +median +(\d+)", out, re.M).group(1)))
            real = re.search(r"real loop .*median (\d+) target tokens/s in updates", out)
            if real:
                figures[mode]["real"].append(float(real.group(1)))
    info = numerics.cpu()
    print(f"portable against native, {rounds} interleaved rounds; CPU {info['vendor']} family "
          f"{info['family']} model {info['model']}")
    med = {m: {k: statistics.median(v) for k, v in f.items() if v} for m, f in figures.items()}
    for mode, m in med.items():
        print(f"{mode:9s} matmul peak {m['peak']:.1f} GFLOP/s; posenc {m['posenc']:.0f} target tokens/s, "
              f"torch.nn.Transformer {m['torch']:.0f}" + (f"; real loop {m['real']:.0f}" if "real" in m else ""))
    ratios = [p / n for p, n in zip(figures["portable"]["posenc"], figures["native"]["posenc"])]
    print(f"portable / native, posenc's step: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}); native / portable time "
          f"{1 / statistics.median(ratios):.3f}x")


if __name__ == "__main__":
    main()
