"""Beam search speed with the key/value cache next to the same search without it, in one run.

    python benchmarks/decode_speed.py --model models/sinusoidal-1/model.pt --arrays data/prepared/arrays

Without --model a randomly initialised model of the default size is used (its outputs run to the
length limit, so it measures long outputs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from posenc import numerics

numerics.apply(numerics.mode_from_argv(sys.argv[1:]))  # before torch loads its kernels

import numpy as np  # noqa: E402
import torch  # noqa: E402

from posenc import runtime, tokens  # noqa: E402
from posenc.config import ModelConfig, SinusoidalSettings  # noqa: E402
from posenc.decode import translate  # noqa: E402
from posenc.model import build_model  # noqa: E402
from posenc.checkpoints import load_model  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a trained model.pt (default: random weights)")
    p.add_argument("--arrays", help="encoded splits; the first --sentences of val.en are decoded")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--numerics", choices=numerics.MODES, default="portable",
                   help="numerics mode (posenc.numerics), set before torch loads (default portable)")
    a = p.parse_args()
    runtime.setup(a.threads, a.numerics)  # as the evaluate stage runs: allocator, threads, determinism
    if a.model:
        model = load_model(Path(a.model))
    else:
        torch.manual_seed(0)
        model = build_model(ModelConfig(positional="sinusoidal", position=SinusoidalSettings(),
                                        vocab_size=8000, pad_id=0, bos_id=2, eos_id=3, d_model=128,
                                        d_ff=512, heads=4, layers=3, dropout=0.1, norm="post")).eval()
    if a.arrays:
        sources = tokens.load(tokens.array_path(Path(a.arrays), "val", "en"), model.config.eos_id)[:a.sentences]
    else:
        rng = np.random.default_rng(0)
        sources = [np.append(rng.integers(4, model.config.vocab_size, size=rng.integers(8, 20)),
                             model.config.eos_id) for _ in range(a.sentences)]
    rates = {True: [], False: []}
    outputs = {}
    for _ in range(a.rounds):
        for cached in (True, False):
            start = time.perf_counter()
            outputs[cached] = translate(model, sources, a.beam, 0.6, 50, 8000, desc="cache" if cached else "no cache",
                                        use_cache=cached)
            rates[cached].append(len(sources) / (time.perf_counter() - start))
    print(f"{len(sources)} sentences, beam {a.beam}, {a.threads} threads, {a.rounds} rounds, "
          f"allocator: {os.environ.get('LD_PRELOAD') or 'glibc tuned'}; "
          f"same outputs with and without the cache: {outputs[True] == outputs[False]}")
    for cached in (True, False):
        print(f"{'with cache' if cached else 'without cache':14s} median {statistics.median(rates[cached]):7.1f} "
              f"sentences/s (min {min(rates[cached]):.1f}, max {max(rates[cached]):.1f})")
    print(f"speed-up from the cache: {statistics.median(rates[True]) / statistics.median(rates[False]):.2f}x")


if __name__ == "__main__":
    main()
