"""Beam search speed, in one interleaved run on the same sentences and threads: posenc's search
with the key/value cache and without it, and with --spm the same model exported to CTranslate2
(posenc export) in float32 and int8, with the BLEU of each beside its speed when --raw gives the
references.

    python benchmarks/decode_speed.py --model models/sinusoidal-1/model.pt --arrays data/prepared/arrays \
        --spm data/prepared/spm.model --raw data/raw/multi30k

Without --model a randomly initialised model of the default size is used (its outputs run to the
length limit, so it measures long outputs; no CTranslate2 rows).

Each speed is also a share of the GEMM peak measured in the same run, as training's are
(train_throughput.py): the work is torch's FLOP count of posenc's cached search of the sentences
(the same for every row, so the uncached search's recomputation counts as time, not work), the
peak the model's own training-step products replayed alone at the same threads. A search forms
products of a few rows (the beams of a batch, one target position at a time), far from the shapes
a GEMM runs fastest on; the share says how far (int8's too is against the float32 peak).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_throughput, beside this file

from posenc import numerics  # noqa: E402

numerics.apply(numerics.mode_from_argv(sys.argv[1:]))  # before torch loads its kernels

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import train_throughput as tt  # noqa: E402

from posenc import ct2, runtime, scoring, tokens  # noqa: E402
from posenc.config import ModelConfig, SinusoidalSettings  # noqa: E402
from posenc.decode import translate  # noqa: E402
from posenc.model import build_model  # noqa: E402
from posenc.checkpoints import load_model  # noqa: E402

LENPEN, MAX_LEN_EXTRA, BATCH_TOKENS = 0.6, 50, 8000  # the default profile's eval params


def interleaved(searches: dict, rounds: int, sentences: int) -> tuple[dict[str, list[float]], dict]:
    """Sentences/s of each search (a function of no arguments), one figure a round, the rounds
    interleaving the searches so that drift in machine speed hits them alike; and each one's outputs."""
    rates, outputs = {name: [] for name in searches}, {}
    for _ in range(rounds):
        for name, search in searches.items():
            start = time.perf_counter()
            outputs[name] = search()
            rates[name].append(sentences / (time.perf_counter() - start))
    return rates, outputs


def search_work(search) -> float:
    """FLOPs of one run of `search`, as torch counts them."""
    with FlopCounterMode(display=False) as counter:
        search()
    return counter.get_total_flops()


def gemm_peak(model_config) -> float:
    """The GEMM peak in FLOP/s: the products of one training step of a fresh model of this config
    on a synthetic batch of train_throughput's default shape, replayed alone at the threads set now."""
    torch.manual_seed(0)
    fresh = build_model(model_config)
    peak, _ = tt.matmul_peak(fresh, tt.adam(fresh), tt.batches(1, 256, 16, model_config.vocab_size, seed=0)[0])
    return peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a trained model.pt (default: random weights)")
    p.add_argument("--arrays", help="encoded splits; the first --sentences of val.en are decoded")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--spm", help="SentencePiece model of --model: also time it exported to CTranslate2")
    p.add_argument("--raw", help="directory with val.de (fetch's output): print each search's BLEU")
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
    searches = {"posenc, cached": lambda: translate(model, sources, a.beam, LENPEN, MAX_LEN_EXTRA,
                                                   BATCH_TOKENS, desc="cached"),
                "posenc, uncached": lambda: translate(model, sources, a.beam, LENPEN, MAX_LEN_EXTRA,
                                                     BATCH_TOKENS, desc="uncached", use_cache=False)}
    sp = tokens.load_tokenizer(Path(a.spm)) if a.spm else None
    if sp is not None:
        if not a.model:
            raise SystemExit("--spm: the CTranslate2 rows need a trained --model")
        ctranslate2 = ct2.engine()
        exported = tempfile.mkdtemp(prefix="posenc-ct2-")
        ct2.spec(model, sp, 1024).save(exported)
        pieces = [[sp.id_to_piece(int(i)) for i in s[:-1]] for s in sources]
        for compute in ("float32", "int8"):
            engine = ctranslate2.Translator(exported, device="cpu", compute_type=compute,
                                            inter_threads=1, intra_threads=a.threads)
            searches[f"CTranslate2 {compute}"] = lambda engine=engine: [
                [sp.piece_to_id(p) for p in hyp]
                for hyp in ct2.search(engine, sp, pieces, a.beam, LENPEN, MAX_LEN_EXTRA)]
    rates, outputs = interleaved(searches, a.rounds, len(sources))
    work, peak = search_work(searches["posenc, cached"]), gemm_peak(model.config)
    per_sentence = work / len(sources)
    refs = None
    if a.raw and sp is not None:
        refs = scoring.read_references(Path(a.raw), "val", len(sources))
    print(f"{len(sources)} sentences, beam {a.beam}, {a.threads} threads, {a.rounds} rounds, "
          f"allocator: {os.environ.get('LD_PRELOAD') or 'glibc tuned'}; same outputs with and "
          f"without the cache: {outputs['posenc, cached'] == outputs['posenc, uncached']}")
    print(f"work: {work / 1e9:.4g} GFLOP for the {len(sources)} sentences (torch's count of posenc's cached "
          f"search); GEMM peak {peak / 1e9:.1f} GFLOP/s (a training step's products alone, {a.threads} threads)")
    for name, r in rates.items():
        bleu = ""
        if refs is not None:
            hyps = [sp.decode(ids) for ids in outputs[name]]
            bleu = f"; BLEU {scoring.score(hyps, refs)['bleu']:.2f}"
        same = sum(x == y for x, y in zip(outputs[name], outputs["posenc, cached"]))
        speed = statistics.median(r) * per_sentence
        print(f"{name:20s} median {statistics.median(r):7.1f} sentences/s (min {min(r):.1f}, max {max(r):.1f}) "
              f"= {speed / 1e9:.1f} GFLOP/s = {speed / peak:.0%} of the peak; "
              f"{same}/{len(sources)} outputs as posenc's{bleu}")
    cached = statistics.median(rates["posenc, cached"])
    print(f"speed-up from the cache: {cached / statistics.median(rates['posenc, uncached']):.2f}x")
    if "CTranslate2 float32" in rates:
        print(f"posenc cached / CTranslate2 float32: {cached / statistics.median(rates['CTranslate2 float32']):.2f}x; "
              f"/ int8: {cached / statistics.median(rates['CTranslate2 int8']):.2f}x")


if __name__ == "__main__":
    main()
