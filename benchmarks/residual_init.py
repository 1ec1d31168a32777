"""concat's W started at Xavier against the pinned start at the identity pair (docs/residual-study.md).

The residual study pins `model.residual_init: identity`: W = [I I], so a concat model starts as the
summed one and the comparison isolates what learning W changes. Does the start matter? This trains
the study's concat run of one depth and seed with `residual_init: xavier` (every other setting as
params.yaml says) into --out, and prints its dev perplexity at every `train.dev_every` update beside
the pinned run's, then W's two halves at the last update. The pinned run's logs are read where
dvc.lock says its stage `train_residual@concat-<layers>-<seed>` wrote them (text tracked in git, so
a fresh clone has them). Run from the project root; a training cut short resumes from --out.

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
from posenc.errors import UserError
from posenc.runs import lock_stages, residual_name


def dev_ppl(path: Path) -> dict[int, float]:
    """{update: dev perplexity} of a dev log (step, dev_loss, dev_ppl)."""
    return {int(step): float(ppl) for step, _, ppl in (line.split("\t") for line in files.read_lines(path)[1:])}


def w_halves(path: Path) -> tuple[float, float]:
    """The mean over sub-layers of W's x half and f(x) half at the last logged update (posenc.highway)."""
    rows = [line.split("\t") for line in files.read_lines(path)[1:]]
    last = max(int(r[0]) for r in rows)
    return tuple(statistics.fmean(float(v) for step, _, m, v in rows if int(step) == last and m == measure)
                 for measure in ("w_x", "w_f"))


def pinned(lock: Path, stage: str, names: tuple[str, ...]) -> list[Path]:
    """The dependencies and outputs named `names` (file or folder names) that dvc.lock records for
    `stage`, in that order: the paths are dvc.yaml's, read from the lock, not written here again."""
    if not lock.is_file():
        raise UserError(f"{lock}: missing; run from the project root or pass --lock")
    stages = lock_stages(lock)
    if stage not in stages:
        raise UserError(f"{lock}: {stage} is not pinned; run `dvc repro --single-item {stage}` first")
    try:
        deps, outs = ([o["path"] for o in stages[stage][kind]] for kind in ("deps", "outs"))
        writers = {o["path"]: name for name, entry in stages.items() for o in entry.get("outs", [])}
    except (AttributeError, KeyError, TypeError):
        raise UserError(f"{lock}: {stage} is not what DVC writes; `git checkout dvc.lock` restores it") from None
    found = {Path(path).name: path for path in deps + outs}
    for name in names:
        if name not in found:
            raise UserError(f"{lock}: {stage} records no {name}; `git checkout dvc.lock` restores it")
        path = found[name]
        if not (lock.parent / path).exists():
            fix = f"`dvc repro {writers.get(path, stage)}` makes it" if path in deps else f"`git checkout {path}`"
            raise UserError(f"{lock.parent / path}: missing; {fix}")
    return [lock.parent / found[name] for name in names]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, required=True, help="a depth of residual_study.depths")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", type=Path, required=True, help="the Xavier run's directory (resumed when it exists)")
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--lock", type=Path, default=Path("dvc.lock"), help="the pins, at the project root")
    a = p.parse_args()
    stage = f"train_residual@{residual_name('concat', a.layers, a.seed)}"
    try:
        spm, arrays, pinned_dev, pinned_highway = pinned(
            a.lock, stage, ("spm.model", "arrays", "dev_log.tsv", "highway_log.tsv"))
    except UserError as e:
        print(f"residual_init: {e}", file=sys.stderr)
        return 2
    params = yaml.safe_load(a.params.read_text(encoding="utf-8"))
    params["model"]["residual_init"] = "xavier"
    a.out.mkdir(parents=True, exist_ok=True)
    files.write_text(a.out / "params.yaml", yaml.safe_dump(params, sort_keys=False))
    o = a.out
    subprocess.run([sys.executable, "-m", "posenc", "train", "--params", str(o / "params.yaml"),
                    "--variant", "sinusoidal", "--seed", str(a.seed), "--residual", "concat",
                    "--layers", str(a.layers), "--spm", str(spm), "--arrays", str(arrays),
                    "--model", str(o / "model.pt"), "--last", str(o / "last.pt"),
                    "--train-log", str(o / "train_log.tsv"), "--dev-log", str(o / "dev_log.tsv"),
                    "--checkpoints", str(o / "checkpoints"), "--timings", str(o / "timings.json"),
                    "--digests", str(o / "digests.json"), "--highway", str(o / "highway_log.tsv")],
                   check=True, stdout=sys.stderr)  # its summary line is not this probe's output
    identity, xavier = dev_ppl(pinned_dev), dev_ppl(o / "dev_log.tsv")
    print(f"concat, {a.layers} layer{'s' if a.layers > 1 else ''}, seed {a.seed}: dev perplexity by update, "
          "W started at [I I] (the pinned run) and at Xavier")
    print(f"{'update':>8} {'identity':>10} {'xavier':>10}")
    for step in sorted(identity.keys() | xavier.keys()):
        print(f"{step:>8} {identity.get(step, float('nan')):>10.3f} {xavier.get(step, float('nan')):>10.3f}")
    for name, highway in (("identity", pinned_highway), ("xavier", o / "highway_log.tsv")):
        x, f = w_halves(highway)
        print(f"W at the last update, {name} start: x half {x:.3g}, f(x) half {f:.3g} (norm over sqrt(d_model))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
