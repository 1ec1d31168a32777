"""Training throughput of posenc's Transformer next to torch.nn.Transformer of identical size.

Same batches, same optimizer, forward + backward + Adam step, interleaved rounds; prints target
tokens/s of each, their FLOP/s (counted by torch's FlopCounterMode, not by hand), the share of
the machine's matmul peak (timed in the same run at the model's own shapes and thread count, with
preallocated outputs), and the ratio of the two models. Run from the project root:

    python benchmarks/train_throughput.py            # the default profile's model size
    python benchmarks/train_throughput.py --d-model 256 --d-ff 1024 --layers 3
    python benchmarks/train_throughput.py --glibc-defaults   # without posenc.allocator.tune()
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from posenc import allocator
from posenc.config import ModelConfig
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

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        h = self.core(self.embed_pos(src), self.embed_pos(tgt), tgt_mask=mask, tgt_is_causal=True,
                      src_key_padding_mask=src == self.pad, memory_key_padding_mask=src == self.pad)
        return F.linear(h, self.embed.weight)


def batches(n: int, sentences: int, length: int, vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src = torch.randint(4, vocab, (sentences, length), generator=g)
        tgt = torch.randint(4, vocab, (sentences, length + 1), generator=g)
        out.append((src, tgt[:, :-1], tgt[:, 1:]))
    return out


def step_time(model, optimizer, batch) -> float:
    src, tgt_in, tgt_out = batch
    start = time.perf_counter()
    logits = model(src, tgt_in)
    loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def step_flops(model, batch) -> int:
    """Floating-point operations of one forward + backward pass, as torch counts them."""
    src, tgt_in, tgt_out = batch
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten()).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def matmul_peak(shapes: list[tuple[int, int, int]], reps: int = 20) -> float:
    """FLOP/s of the fastest of `shapes` (m, k, n): torch.mm into a preallocated output, the
    median of `reps` timed calls: the practical limit of this machine at these sizes."""
    best = 0.0
    for m, k, n in shapes:
        x, w, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
        torch.mm(x, w, out=out)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            torch.mm(x, w, out=out)
            times.append(time.perf_counter() - start)
        best = max(best, 2 * m * k * n / statistics.median(times))
    return best


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
    a = p.parse_args()
    tuned = not a.glibc_defaults and allocator.tune()
    torch.set_num_threads(a.threads)
    c = ModelConfig(positional="sinusoidal", vocab_size=a.vocab, pad_id=0, bos_id=2, eos_id=3,
                    d_model=a.d_model, d_ff=a.d_ff, heads=a.heads, layers=a.layers, dropout=0.1,
                    max_positions=256, concat_dim=32, concat_kind="sinusoidal", norm="post")
    torch.manual_seed(0)
    models = {"posenc": build_model(c), "torch.nn.Transformer": TorchTransformer(c)}
    optimizers = {k: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
                  for k, m in models.items()}
    data = batches(a.steps, a.sentences, a.length, a.vocab, seed=1)
    for name, model in models.items():  # warm-up
        step_time(model, optimizers[name], data[0])
    tokens = a.sentences * a.length * a.steps
    flops = {name: step_flops(model, data[0]) for name, model in models.items()}
    rows = a.sentences * a.length  # the model's matrices: projections, feed-forward, logits
    peak = matmul_peak([(rows, a.d_model, a.d_model), (rows, a.d_model, a.d_ff),
                        (rows, a.d_ff, a.d_model), (rows, a.d_model, a.vocab)])
    rates = {k: [] for k in models}
    for _ in range(a.rounds):  # interleaved, so drift in machine speed hits both alike
        for name, model in models.items():
            rates[name].append(tokens / sum(step_time(model, optimizers[name], b) for b in data))
    print(f"d_model {a.d_model}, d_ff {a.d_ff}, {a.layers}+{a.layers} layers, {a.heads} heads, "
          f"{a.sentences}x{a.length} target tokens per step, {a.threads} threads, {a.rounds} rounds, "
          f"allocator {'tuned' if tuned else 'as it is'}")
    print(f"matmul peak at these shapes: {peak / 1e9:.1f} GFLOP/s")
    for name, r in rates.items():
        per_s = statistics.median(r) / (a.sentences * a.length) * flops[name]
        print(f"{name:22s} median {statistics.median(r):8.0f} target tokens/s  "
              f"(min {min(r):.0f}, max {max(r):.0f}); {flops[name] / 1e9:.1f} GFLOP a step, "
              f"{per_s / 1e9:.1f} GFLOP/s = {per_s / peak:.0%} of the peak")
    ratios = [x / y for x, y in zip(rates["posenc"], rates["torch.nn.Transformer"])]
    print(f"ratio posenc / torch.nn.Transformer: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
