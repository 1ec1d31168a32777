"""concat's W started at Xavier against the pinned start at the identity pair (docs/residual-study.md).

The residual study pins `model.residual_init: identity`: W = [I I], so a concat model starts as the
summed one and the comparison isolates what learning W changes. Does the start matter? This trains
the study's concat run of one depth and seed with `residual_init: xavier` (every other setting as
params.yaml says) into --out, and prints its dev perplexity at every `train.dev_every` update beside
the pinned run's (models/residual-concat-<layers>-<seed>/), then W's two halves at the last update.
Run from the project root after the pinned run exists; a training cut short resumes from --out.

    python benchmarks/residual_init.py --layers 3 --seed 1 --out /tmp/residual-init
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from posenc import files
from posenc.runs import residual_name


def dev_ppl(path: Path) -> dict[int, float]:
    """{update: dev perplexity} of a dev log (step, dev_loss, dev_ppl)."""
    return {int(step): float(ppl) for step, _, ppl in (line.split("\t") for line in files.read_lines(path)[1:])}


def w_halves(path: Path) -> tuple[float, float]:
    """The mean over sub-layers of W's x half and f(x) half at the last logged update (posenc.highway)."""
    rows = [line.split("\t") for line in files.read_lines(path)[1:]]
    last = max(int(r[0]) for r in rows)
    return tuple(statistics.fmean(float(v) for step, _, m, v in rows if int(step) == last and m == measure)
                 for measure in ("w_x", "w_f"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, required=True, help="a depth of residual_study.depths")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", type=Path, required=True, help="the Xavier run's directory (resumed when it exists)")
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--models", type=Path, default=Path("models"), help="where the pinned run is")
    a = p.parse_args()
    pinned = a.models / f"residual-{residual_name('concat', a.layers, a.seed)}"
    if not (pinned / "dev_log.tsv").is_file():
        print(f"residual_init: {pinned / 'dev_log.tsv'}: missing; run `dvc repro --single-item "
              f"train_residual@concat-{a.layers}-{a.seed}` first", file=sys.stderr)
        return 2
    params = yaml.safe_load(a.params.read_text(encoding="utf-8"))
    params["model"]["residual_init"] = "xavier"
    a.out.mkdir(parents=True, exist_ok=True)
    files.write_text(a.out / "params.yaml", yaml.safe_dump(params, sort_keys=False))
    o = a.out
    subprocess.run([sys.executable, "-m", "posenc", "train", "--params", str(o / "params.yaml"),
                    "--variant", "sinusoidal", "--seed", str(a.seed), "--residual", "concat",
                    "--layers", str(a.layers), "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays",
                    "--model", str(o / "model.pt"), "--last", str(o / "last.pt"),
                    "--train-log", str(o / "train_log.tsv"), "--dev-log", str(o / "dev_log.tsv"),
                    "--checkpoints", str(o / "checkpoints"), "--timings", str(o / "timings.json"),
                    "--digests", str(o / "digests.json"), "--highway", str(o / "highway_log.tsv")],
                   check=True, stdout=sys.stderr)  # its summary line is not this probe's output
    identity, xavier = dev_ppl(pinned / "dev_log.tsv"), dev_ppl(o / "dev_log.tsv")
    print(f"concat, {a.layers} layer{'s' if a.layers > 1 else ''}, seed {a.seed}: dev perplexity by update, "
          "W started at [I I] (the pinned run) and at Xavier")
    print(f"{'update':>8} {'identity':>10} {'xavier':>10}")
    for step in sorted(identity.keys() | xavier.keys()):
        print(f"{step:>8} {identity.get(step, float('nan')):>10.3f} {xavier.get(step, float('nan')):>10.3f}")
    for name, where in (("identity", pinned), ("xavier", o)):
        x, f = w_halves(where / "highway_log.tsv")
        print(f"W at the last update, {name} start: x half {x:.3g}, f(x) half {f:.3g} (norm over sqrt(d_model))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
