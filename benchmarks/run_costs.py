"""What each part of a pipeline run cost, from the wall-clock figures its trainings left in logs/.

Every training writes `logs/train-<run>.json` (untracked: wall time is not a pinned output). This
sums them by part, so that a reader who wants one part only knows its cost before starting:

    python benchmarks/run_costs.py --logs logs

A run resumed from a checkpoint recorded only the updates it ran after resuming; its time is
scaled up to all its updates (`wall_s x steps / (steps - resumed_from_step)`), and the count of
such runs is printed. The trainings ran as `make repro` runs them, TRAIN_JOBS at a time with
train.threads threads each, so the elapsed time is about the sum over TRAIN_JOBS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# part -> (the stages, the file name prefix of their logs)
PARTS = {
    "the positional table": ("train@<variant>-<seed>", "train-"),
    "the short-training protocol (§3.5)": ("train_short@<variant>-<seed>", "train-short-"),
    "the residual study": ("train_residual@, train_residual_sum@", "train-residual-"),
}


def part_of(name: str) -> str:
    """The longest prefix wins: train-short-rope-1 is the short protocol's, not the table's."""
    return max((p for p, (_, prefix) in PARTS.items() if name.startswith(prefix)),
               key=lambda p: len(PARTS[p][1]))


def full_wall_s(t: dict) -> float:
    done = t["steps"] - t.get("resumed_from_step", 0)
    return t["wall_s"] * t["steps"] / done if done > 0 else 0.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--logs", type=Path, default=Path("logs"))
    a = p.parse_args()
    found = sorted(a.logs.glob("train-*.json"))
    if not found:
        print(f"run_costs: {a.logs}: no train-*.json; run the trainings first (make repro)", file=sys.stderr)
        return 2
    runs = {part: [] for part in PARTS}
    resumed = 0
    for path in found:
        t = json.loads(path.read_text(encoding="utf-8"))
        runs[part_of(path.stem)].append(full_wall_s(t))
        resumed += t.get("resumed_from_step", 0) > 0
    print(f"{'part':36s} {'stages':40s} {'runs':>4s} {'hours, summed':>13s} {'minutes a run (median)':>22s}")
    for part, times in runs.items():
        if times:
            print(f"{part:36s} {PARTS[part][0]:40s} {len(times):4d} {sum(times) / 3600:13.2f} "
                  f"{statistics.median(times) / 60:22.1f}")
    every = [w for times in runs.values() for w in times]
    print(f"{'every training':36s} {'':40s} {len(every):4d} {sum(every) / 3600:13.2f}")
    print(f"{resumed} of the runs resumed from a checkpoint (their time scaled to all their updates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
