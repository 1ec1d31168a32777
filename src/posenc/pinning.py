"""The pinning run, unit by unit: which units dvc.lock pins, and the order that runs the rest.

A unit is one run's training and every stage that reads its weights (posenc.runs.PARTS): it is
pinned when dvc.lock holds every one of its stages under the current code, params and data. Which
stages are not is DVC's own answer (the stages `dvc repro --allow-missing` would run,
a stage whose only change is missing weights or data being skipped: `dvc status --json` read
for missing data), never kept in a file of our own. `make pin` (posenc.stages.pin) runs the
units that are not pinned; `posenc pins` (posenc.stages.pins) says where the run stands.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from posenc import files, records
from posenc.errors import UserError
from posenc.runs import PARTS, lock_stages, read_object, unit_of


@dataclass(frozen=True)
class Unit:
    part: str                     # a name of posenc.runs.PARTS
    name: str                     # its run's models/ directory: sinusoidal-1, residual-concat-3-1, ...
    seed: int
    stages: tuple[str, ...]       # dvc.yaml's stages of the unit, in the order they run


@dataclass(frozen=True)
class State:
    """Each unit as DVC sees it: `pinned` (every stage in dvc.lock and up to date, its weights
    here or not), `missing` (no stage in dvc.lock), `partial` (its first stages pinned, the rest
    not yet run: a unit cut short), `stale` (a stage in dvc.lock under other code, params or data)."""
    units: tuple[Unit, ...]
    pinned: frozenset[str]
    missing: frozenset[str]
    partial: frozenset[str]
    stale: frozenset[str]
    to_run: frozenset[str]        # the stages `dvc repro --allow-missing` would run
    locked: frozenset[str]        # the stages dvc.lock holds
    order: tuple[str, ...]        # every stage of dvc.yaml, in its order


def dvc(*args: str, root: Path) -> str:
    """A DVC command's standard output; a failure is one line with DVC's own last error line."""
    try:
        done = subprocess.run(["dvc", *args], cwd=root, capture_output=True, text=True,
                              env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    except FileNotFoundError:
        raise UserError("dvc: not on PATH; `source .venv/bin/activate` (or run `make pin`, which puts "
                        ".venv/bin first)") from None
    if done.returncode != 0:
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.startswith("ERROR")]
        raise UserError(f"`dvc {' '.join(args)}` failed: {said[0] if said else f'exit {done.returncode}'}")
    return done.stdout


def units(stage_names: list[str]) -> list[Unit]:
    """The units of dvc.yaml's stages, in the pinning run's order: seed 1 of every positional
    variant, then seed 2, ...; then the residual study, then the short-training runs (each by
    seed, then in dvc.yaml's order)."""
    found: dict[str, tuple] = {}
    for position, stage in enumerate(stage_names):
        unit = unit_of(stage)
        if unit is None:
            continue
        part, name, chain = unit
        seed = int(stage.rpartition("-")[2])
        key = found.setdefault(name, (PARTS.index(part), seed, position, part.name, name, chain, []))
        key[6].append(stage)
    ordered = sorted(found.values(), key=lambda k: k[:3])
    return [Unit(part, name, seed, tuple(sorted(stages, key=lambda s: chain.index(s.partition("@")[0]))))
            for _, seed, _, part, name, chain, stages in ordered]


def read_lock(root: Path) -> dict:
    """dvc.lock's stages, {} where there is none; a corrupt file is one line."""
    path = root / "dvc.lock"
    return lock_stages(path) if path.is_file() else {}


def unit_record(path: Path) -> dict:
    """A unit's record (`make pin` writes it when the unit ends: the CPU, threads, wall time of
    each stage); {} where there is none; a corrupt one is one line."""
    if not path.is_file():
        return {}
    record = read_object(path, f"`git checkout {path}`", "make pin")
    if not isinstance(record.get("cpu", ""), str):
        raise UserError(f"{path}: not a unit's record (its cpu is not a name); `git checkout {path}`")
    return record


# The checks of pinned units on other CPUs that are kept as records docs/records/<cpu>/<kind>-<unit>.md:
# `posenc verify` of a unit, and a whole unit retrained by hand (docs/reproducibility.md).
CHECKS = ("verify", "retrain")


def check_records(records_root: Path, kinds: tuple[str, ...] = CHECKS) -> list[Path]:
    """The kept records of `kinds` of check under records_root (docs/records), kind by kind."""
    return [path for kind in kinds for path in sorted(records_root.glob(f"*/{kind}-*.md"))]


def _kept(records_root: Path, prefix: str, passed) -> list[tuple[str, str, bool]]:
    """(CPU, unit, passed(printed, unit)) of every record docs/records/<cpu>/<prefix>-<unit>.md."""
    found = []
    for path in check_records(records_root, (prefix,)):
        unit = path.stem.removeprefix(f"{prefix}-")
        cpu, printed = records.read(path)
        found.append((cpu, unit, passed(printed, unit)))
    return found


def verifications(records_root: Path) -> list[tuple[str, str, bool]]:
    """(CPU, unit, reproduced) of every kept `posenc verify` of a unit: the records
    docs/records/<cpu>/verify-<unit>.md that `posenc pin` writes on a CPU new to the run."""
    return _kept(records_root, "verify", records.reproduced)


RETRAINED = "dvc.lock unchanged"  # the last line of the retraining recipe's record when its bits held


def retrainings(records_root: Path) -> list[tuple[str, str, bool]]:
    """(CPU, unit, dvc.lock unchanged) of every kept whole retraining of a pinned unit by hand: the
    records docs/records/<cpu>/retrain-<unit>.md of docs/reproducibility.md's recipe, whose
    command prints "dvc.lock unchanged" last when the retrained outputs have the pinned md5s."""
    return _kept(records_root, "retrain", lambda printed, unit: RETRAINED in printed)


MISSING = ("deleted", "not in cache")


def only_missing(changes: list) -> bool:
    """Whether a stage's `dvc status` changes are missing data alone (weights not pulled, data not
    made here): what `dvc repro --allow-missing` skips. A changed command, dep, param or out, or
    a stage never run, is more."""
    return all(isinstance(change, dict) and all(
        isinstance(paths, dict) and all(state in MISSING for state in paths.values())
        for paths in change.values()) for change in changes)


def state(root: Path) -> State:
    locked = frozenset(read_lock(root))  # first: a corrupt lock is named as such, not as DVC's error
    names = dvc("stage", "list", "--name-only", root=root).split()
    every = units(names)
    to_run = frozenset(name for name, changes in json.loads(dvc("status", "--json", root=root) or "{}").items()
                       if not only_missing(changes))
    groups = {"pinned": set(), "missing": set(), "partial": set(), "stale": set()}
    for unit in every:
        mine = set(unit.stages)
        if not mine & locked:
            group = "missing"
        elif mine & locked & to_run:
            group = "stale"
        else:
            group = "pinned" if mine <= locked else "partial"
        groups[group].add(unit.name)
    return State(tuple(every), **{k: frozenset(v) for k, v in groups.items()}, to_run=to_run,
                 locked=locked, order=tuple(names))


def _ordered(stages: dict, order: list[str]) -> str:
    """dvc.lock's text with `stages` in dvc.yaml's `order` (DVC's own YAML writer, so that DVC
    rewrites nothing): DVC appends a stage where it first ran, so two runs that finished their
    units in other orders would otherwise give two locks of one content."""
    from dvc.utils.serialize import dumps_yaml

    return dumps_yaml({"schema": "2.0", "stages": {name: stages[name] for name in order if name in stages}})


def _round_trip(text: str, where: str) -> dict:
    from dvc.utils.serialize import parse_yaml_for_update

    return (parse_yaml_for_update(text, where) or {}).get("stages", {})


def canonical_lock(root: Path) -> None:
    """Put dvc.lock's stages in dvc.yaml's order (nothing else changes)."""
    path = root / "dvc.lock"
    if path.is_file():
        order = dvc("stage", "list", "--name-only", root=root).split()
        files.write_text(path, _ordered(_round_trip(path.read_text(encoding="utf-8"), str(path)), order))


def landing(root: Path, st: State) -> tuple[str, list[str]]:
    """What a commit of the finished units holds: (dvc.lock's text, the paths to add). The lock is
    the committed one (HEAD's) with the entries of every whole pinned unit and of every stage
    outside the units that is up to date taken from the working dvc.lock; a unit only partly
    done keeps HEAD's entries, and its files are not added: a unit lands whole or not at all."""
    head = subprocess.run(["git", "show", "HEAD:dvc.lock"], cwd=root, capture_output=True, text=True)
    committed = _round_trip(head.stdout, "HEAD:dvc.lock") if head.returncode == 0 else {}
    working = _round_trip((root / "dvc.lock").read_text(encoding="utf-8"), "dvc.lock")
    in_units = {stage for unit in st.units for stage in unit.stages}
    take = [name for name in st.order if name in working and (
        (name not in in_units and name not in st.to_run)
        or any(name in u.stages for u in st.units if u.name in st.pinned))]
    paths = []
    for name in take:
        for out in working[name].get("outs", []):
            ignored = subprocess.run(["git", "check-ignore", "-q", out["path"]], cwd=root).returncode == 0
            paths.append((Path(out["path"]).parent / ".gitignore").as_posix() if ignored else out["path"])
    merged = {**committed, **{name: working[name] for name in take}}
    return _ordered(merged, list(st.order)), sorted({p for p in paths if (root / p).exists()})
