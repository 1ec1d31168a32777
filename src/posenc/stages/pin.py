"""`posenc pin` (`make pin`): continue the pinning run on this machine, unit by unit.

1. Refuse, before anything runs: uncommitted code or params (a pin is made by committed code), a
   dvc.lock whose data stages were made under other data or tokenizer params (another profile),
   and, unless --repin, a dvc.lock whose pinned units the current code or params would all re-pin.
2. `dvc repro fetch prepare shorten`: the data, byte for byte what dvc.lock records (checked).
   On a CPU that made none of the pinned units (their records say which did), `posenc verify`
   two of them first, one with positions at the first layer and one with positions inside
   attention, each kept as a record (docs/records/<cpu>/verify-<unit>.md); if either does not
   reproduce, stop: units made here would not be the bits of those pinned (issue 50).
3. Every unit that is not pinned (posenc.pinning: DVC's own answer), JOBS at a time, each unit's
   stages in order, each as `dvc --wait-for-lock repro --allow-missing --single-item STAGE`
   (without --single-item two processes would collide on the skipped stages' outputs). A unit
   whose training is pinned but whose weights are not here, and whose later stages are not
   pinned, is retrained first (`--force`); dvc.lock then shows whether the bits came out equal.
4. When every unit is pinned: the aggregates (`dvc repro --allow-missing`), and dvc.lock's stages
   put in dvc.yaml's order, so that the lock does not depend on the order units finished in.

For each unit it finishes it writes a record (the CPU as lscpu names it, threads, wall time per
stage, and the CPU time of the unit's processes) to --records, never into a pinned output; README
says from them which CPU made which unit.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from posenc import config, files, pinning, records
from posenc.errors import UserError

COMMITTED = ("src", "dvc.yaml", "params.yaml", "pyproject.toml", "requirements.lock")
DATA_STAGES = ("fetch", "prepare", "shorten")


def check_committed(root: Path) -> None:
    changed = subprocess.run(["git", "status", "--porcelain", "--", *COMMITTED], cwd=root,
                             capture_output=True, text=True)
    if changed.returncode != 0:
        raise UserError(f"{root}: not a git checkout; the pinning run pins committed code (git clone the project)")
    lines = changed.stdout.splitlines()
    if lines:
        raise UserError(f"{lines[0][3:]}: uncommitted change ({len(lines)} in all); commit or stash it "
                        f"first: a pin must name the commit whose code made it")


def check_profile(params: Path, lock: dict) -> None:
    """The data stages in dvc.lock were made under these data and tokenizer params, or there are
    none: a lock from another profile would have every unit re-pinned on other data."""
    raw = config.read_params(params)
    for stage in DATA_STAGES:
        recorded = ((lock.get(stage) or {}).get("params") or {}).get(params.name) or {}
        for key, value in recorded.items():
            section, _, name = key.partition(".")
            now = raw.get(section, {}).get(name) if name else raw.get(section)
            if now != value:
                raise UserError(f"dvc.lock: {stage} was made with {key} = {value!r}, {params} says {now!r} "
                                f"(a lock of another profile?); `git checkout dvc.lock params.yaml` "
                                f"restores the committed pair")


def data_outs(lock: dict) -> dict[str, str]:
    return {out["path"]: out.get("md5") for stage in DATA_STAGES
            for out in (lock.get(stage) or {}).get("outs", [])}


def make_data(root: Path) -> None:
    """Step 2; the data outputs must be the ones dvc.lock records (else the lock is put back)."""
    path = root / "dvc.lock"
    before_text = path.read_text(encoding="utf-8") if path.is_file() else None
    before = data_outs(pinning.read_lock(root))
    print("pin: dvc repro fetch prepare shorten", flush=True)
    pinning.dvc("repro", *DATA_STAGES, root=root)
    after = data_outs(pinning.read_lock(root))
    changed = [p for p, md5 in before.items() if after.get(p) != md5]
    if changed:
        if before_text is not None:
            files.write_text(path, before_text)
        raise UserError(f"{changed[0]}: made again with another md5 than dvc.lock records (dvc.lock put "
                        f"back); the data differ on this machine: see docs/troubleshooting.md")


# The cross-CPU check verifies the first pinned unit (in the run's order) of each side: positions
# summed or set beside the tokens at the first layer, and positions inside attention (other
# kernels: rotated queries and keys, biased logits, Shaw's terms); while no unit of the second
# side is pinned, a unit of the residual study stands for it.
INPUT_SIDE = ("sinusoidal", "learned", "concat", "sinusoidal_narrow", "none")
ATTENTION_SIDE = ("rope", "alibi", "relative")


def to_check(st: pinning.State) -> list[str]:
    """The pinned units the cross-CPU check verifies: one of each side, where one is pinned."""
    pinned = [u for u in st.units if u.name in st.pinned]
    variant = {u.name: u.name.rpartition("-")[0] for u in pinned if u.part == "positional"}
    first = [u for u in pinned if variant.get(u.name) in INPUT_SIDE][:1]
    second = ([u for u in pinned if variant.get(u.name) in ATTENTION_SIDE]
              or [u for u in pinned if u.part == "residual"])[:1]
    return [u.name for u in first + second]


def check_this_cpu(root: Path, st: pinning.State, units_records: Path) -> None:
    """On a CPU that made none of the pinned units, verify two of them first (see the docstring)."""
    here = records.cpu_name()
    made = {pinning.unit_record(units_records / f"{unit}.json").get("cpu") for unit in st.pinned}
    if not st.pinned or here in made:
        return
    for unit in to_check(st):
        record = units_records.parent / records.cpu_dir() / f"verify-{unit}.md"
        if record.is_file() and records.reproduced(records.read(record)[1], unit):
            continue
        print(f"pin: {here} made none of the pinned units: posenc verify {unit} first ({record})", flush=True)
        done = subprocess.run([sys.executable, "-m", "posenc", "verify", unit], cwd=root, stdout=subprocess.PIPE,
                              text=True)  # stderr (its progress) passes through
        sys.stdout.write(done.stdout)
        records.write(record, ["posenc", "verify", unit], done.stdout.splitlines(keepends=True))
        if done.returncode != 0 or not records.reproduced(done.stdout.splitlines(), unit):
            raise UserError(f"{record}: {unit} does not reproduce its pinned bits on {here}, so units made here "
                            f"would not be the pinned run's; the run stops (docs/troubleshooting.md)")


def run_unit(root: Path, unit: pinning.Unit, todo: list[str], force: str | None, lock_before: dict,
             logs: Path, unit_records: Path, threads: dict) -> str:
    """Run one unit's stages in order; a record when it ends whole. Returns its one-line summary."""
    log = logs / f"{unit.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # one write per line: two units' threads print side by side
    sys.stdout.write(f"pin: {unit.name} started: {', '.join(todo)}" + (f" ({force} forced)" if force else "") + "\n")
    sys.stdout.flush()
    took, cpu, start = {}, 0.0, time.monotonic()
    with open(log, "a", encoding="utf-8") as out:
        for stage in todo:
            command = ["dvc", "--wait-for-lock", "repro", "--allow-missing", "--single-item",
                       *(["--force"] if stage == force else []), stage]
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            began = time.monotonic()
            done = subprocess.Popen(command, cwd=root, stdout=out, stderr=subprocess.STDOUT)
            # wait4's usage counts the stage's own processes (posenc under dvc) and nothing else: unlike
            # the wall time, it does not grow while the run is paused (kill -STOP) or beside other work
            _, status, usage = os.wait4(done.pid, 0)
            done.returncode = os.waitstatus_to_exitcode(status)
            took[stage] = round(time.monotonic() - began, 1)
            cpu += usage.ru_utime + usage.ru_stime
            if done.returncode != 0:
                return f"FAILED at {stage} (exit {done.returncode}; {log})"
    lock = pinning.read_lock(root)
    record = {"unit": unit.name, "part": unit.part, "cpu": records.cpu_name(), "threads": threads,
              "stages_s": took, "wall_s": round(time.monotonic() - start, 1), "cpu_s": round(cpu, 1),
              "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    path = unit_records / f"{unit.name}.json"
    if force:  # its earlier record (committed with the unit) named the CPU that first made it
        first = pinning.unit_record(path).get("cpu")
        record["retrained"] = {"stage": force, "lock_unchanged": lock.get(force) == lock_before.get(force),
                               "first_made_on": first}
    files.write_json(path, record)
    retrained = ""
    if force:
        retrained = ", retrained: dvc.lock " + ("unchanged" if record["retrained"]["lock_unchanged"] else "CHANGED")
    return f"done in {record['wall_s']:,.0f} s{retrained}"


def plan(root: Path, st: pinning.State, lock: dict) -> list[tuple[pinning.Unit, list[str], str | None]]:
    """(unit, the stages to run, the stage to force) for every unit not pinned."""
    out = []
    for unit in st.units:
        if unit.name in st.pinned:
            continue
        # from the first stage DVC would run to the unit's end: a stage after it may be up to date
        # now and stale once that one has run (an evaluation of weights retrained under new code)
        first = next((i for i, name in enumerate(unit.stages) if name in st.to_run), len(unit.stages))
        todo, force = list(unit.stages[first:]), None
        train = unit.stages[0]
        if first > 0 and todo:  # the training pinned, a later stage not: are the weights here?
            weights = [root / o["path"] for o in (lock.get(train) or {}).get("outs", [])]
            if not all(p.exists() for p in weights):
                force, todo = train, list(unit.stages)
        out.append((unit, todo, force))
    return out


def run(args) -> int:
    root = Path.cwd()
    if args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: at least 1")
    params = Path(args.params)
    check_committed(root)
    lock = pinning.read_lock(root)
    check_profile(params, lock)
    make_data(root)
    lock = pinning.read_lock(root)
    st = pinning.state(root)
    check_this_cpu(root, st, Path(args.records))
    stale_pins = sorted(st.stale)
    if stale_pins and not st.pinned and not args.repin:
        raise UserError(f"dvc.lock: all {len(stale_pins)} pinned units (first {stale_pins[0]}) are stale "
                        f"under the current code and params; check `git diff`, or re-pin them all "
                        f"with `make pin REPIN=1` (posenc pin --repin)")
    work = plan(root, st, lock)
    if args.units is not None:
        work = work[:args.units]
    threads = {"train": config.load_value(params, "train.threads", config.Positive),
               "eval": config.load_value(params, "eval.threads", config.Positive)}
    print(f"pin: {len(st.pinned)} of {len(st.units)} units pinned; running {len(work)}, {args.jobs} at a "
          f"time, on {records.cpu_name()} (logs in {args.logs}/)", flush=True)
    failed = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_unit, root, unit, todo, force, lock, Path(args.logs), Path(args.records),
                               threads): unit for unit, todo, force in work}
        for i, future in enumerate(as_completed(futures), 1):  # as each unit ends, whatever its order
            said = future.result()
            failed += said.startswith("FAILED")
            print(f"pin: [{i}/{len(futures)}] {futures[future].name}: {said}", flush=True)
    if failed:
        print(f"pin: {failed} unit(s) failed; the others are pinned (see the logs)", file=sys.stderr)
        return 1
    st = pinning.state(root)
    left = len(st.units) - len(st.pinned)
    if left == 0:
        print("pin: every unit pinned; the aggregates: dvc repro --allow-missing", flush=True)
        pinning.dvc("repro", "--allow-missing", root=root)
    pinning.canonical_lock(root)
    print(f"pin: {len(st.pinned)} of {len(st.units)} units pinned" + (f", {left} left" if left else
          ", and the aggregates") + "; `posenc pins --stage` stages the whole units for a commit")
    os.sync()  # dvc.lock and the records on disk before anything ends the machine (a session's stop)
    return 0
