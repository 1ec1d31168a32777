"""`posenc pin` (make pin) and `posenc pins` on bad input: one line each, a non-zero exit, and
nothing changed. The pinning run itself, in pieces and whole, is tests/test_pipeline.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import MIRROR, ROOT, TINY, error_line, posenc
from posenc import files, pinning, runs
from posenc.errors import UserError

BIN = Path(sys.executable).parent


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path) -> Path:
    """The tiny profile's project in a fresh git repository, nothing run yet."""
    work = tmp_path / "project"
    work.mkdir()
    for name in ("src", "dvc.yaml", "pyproject.toml", ".gitignore", "Makefile"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, work / name)
    shutil.copy(TINY, work / "params.yaml")
    git("init", "-q", cwd=work)
    subprocess.run([BIN / "dvc", "init", "-q"], cwd=work, check=True)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "code", cwd=work)
    return work


def env() -> dict:
    return {"PATH": f"{BIN}:{os.environ['PATH']}", "POSENC_DATA_MIRROR": str(MIRROR)}


def snapshot(work: Path) -> dict[str, bytes]:
    return {p.relative_to(work).as_posix(): p.read_bytes() for p in work.rglob("*")
            if p.is_file() and ".git" not in p.parts and ".dvc" not in p.parts}


def test_pin_refuses_uncommitted_code_or_params(project):
    params = project / "params.yaml"
    params.write_text(params.read_text().replace("max_steps: 24", "max_steps: 25"))
    before = snapshot(project)
    line = error_line(posenc("pin", cwd=project, env=env()), "pin")
    assert "params.yaml: uncommitted change" in line and "commit or stash" in line
    assert snapshot(project) == before


def test_pin_refuses_a_lock_of_another_profile(project):
    """A dvc.lock whose prepare stage was made with the default profile's tokenizer, beside the
    tiny profile's params: every unit would be re-pinned on other data."""
    lock = {"schema": "2.0", "stages": {"prepare": {"cmd": "posenc prepare", "params": {"params.yaml": {
        "data.corpus": "multi30k", "tokenizer.vocab_size": 8000}}}}}
    (project / "dvc.lock").write_text(yaml.safe_dump(lock))
    git("add", "dvc.lock", cwd=project)
    git("commit", "-q", "-m", "lock", cwd=project)
    before = snapshot(project)
    line = error_line(posenc("pin", cwd=project, env=env()), "pin")
    assert "dvc.lock: prepare was made with tokenizer.vocab_size = 8000" in line and "400" in line
    assert snapshot(project) == before


def test_pins_and_pin_refuse_a_corrupt_lock(project):
    (project / "dvc.lock").write_text("stages: [unclosed\n")
    git("add", "dvc.lock", cwd=project)
    git("commit", "-q", "-m", "lock", cwd=project)
    before = snapshot(project)
    for command in ("pin", "pins"):
        line = error_line(posenc(command, cwd=project, env=env()), command)
        assert "dvc.lock" in line, line
    assert snapshot(project) == before


def test_pins_outside_a_project_is_one_line(tmp_path):
    line = error_line(posenc("pins", cwd=tmp_path, env=env()), "pins")
    assert "dvc.yaml: missing" in line


def test_units_are_ordered_seed_by_seed_then_residual_then_short():
    stages = ["fetch", "train@sinusoidal-1", "train@sinusoidal-2", "train@rope-1", "train@rope-2",
              "train_residual@concat-3-1", "train_residual@concat-3-2", "train_short@rope-1",
              "evaluate@rope-1", "evaluate@sinusoidal-1", "measure@rope-1", "train_residual_sum@sum-6-1",
              "evaluate_residual_sum@sum-6-1", "evaluate_short@rope-1", "report"]
    got = pinning.units(stages)
    assert [u.name for u in got] == ["sinusoidal-1", "rope-1", "sinusoidal-2", "rope-2", "residual-concat-3-1",
                                     "residual-sum-6-1", "residual-concat-3-2", "short-rope-1"]
    assert got[1].stages == ("train@rope-1", "evaluate@rope-1", "measure@rope-1")
    assert got[5].stages == ("train_residual_sum@sum-6-1", "evaluate_residual_sum@sum-6-1")
    assert runs.unit_of("report") is None and runs.unit_of("fetch") is None


def test_missing_data_alone_is_what_allow_missing_skips():
    assert pinning.only_missing([{"changed outs": {"models/a/model.pt": "not in cache"}},
                                 {"changed deps": {"data/raw/multi30k": "deleted"}}])
    assert not pinning.only_missing([{"changed deps": {"src/posenc/model.py": "modified"}}])
    assert not pinning.only_missing(["always changed"])
    assert not pinning.only_missing([{"changed deps": {"params.yaml": "new"}}])


def test_the_plan_runs_a_unit_from_its_first_stale_stage_to_its_end(tmp_path):
    """A stage after the first one DVC would run may be up to date now and stale once that has run,
    so the rest of the unit runs too; a unit cut after its training, whose weights are not here,
    is retrained first."""
    from posenc.stages.pin import plan

    stages = ["train@a-1", "evaluate@a-1", "extrapolate@a-1", "measure@a-1",
              "train@b-1", "evaluate@b-1", "extrapolate@b-1", "measure@b-1",
              "train@c-1", "evaluate@c-1", "extrapolate@c-1", "measure@c-1"]
    units = pinning.units(stages)
    lock = {name: {"outs": [{"path": f"models/{name.split('@')[1]}/model.pt"}]} for name in stages[:1] + stages[4:5]}
    (tmp_path / "models/b-1").mkdir(parents=True)
    (tmp_path / "models/b-1/model.pt").write_bytes(b"weights")
    st = pinning.State(tuple(units), pinned=frozenset(), missing=frozenset({"c-1"}), partial=frozenset({"a-1"}),
                       stale=frozenset({"b-1"}), to_run=frozenset({"evaluate@a-1", "extrapolate@a-1", "measure@a-1",
                                                                   "evaluate@b-1", *stages[8:]}),
                       locked=frozenset(lock), order=tuple(stages))
    got = {unit.name: (todo, force) for unit, todo, force in plan(tmp_path, st, lock)}
    assert got["a-1"] == (stages[:4], "train@a-1")          # cut after training, weights gone: retrained
    assert got["b-1"] == (stages[5:8], None)                # weights here: from its evaluation on
    assert got["c-1"] == (stages[8:], None)                 # never run: the whole unit


def state_of(stages: list[str], pinned: set[str]) -> pinning.State:
    units = pinning.units(stages)
    return pinning.State(tuple(units), pinned=frozenset(pinned), missing=frozenset(u.name for u in units) - pinned,
                         partial=frozenset(), stale=frozenset(), to_run=frozenset(), locked=frozenset(),
                         order=tuple(stages))


RUN_ORDER = ["train@sinusoidal-1", "train@learned-1", "train@rope-1", "train@relative-1",
             "train_residual@concat-3-1", "train_short@rope-1"]


def test_the_cross_cpu_check_takes_one_unit_of_each_side():
    from posenc.stages.pin import to_check

    every = {"sinusoidal-1", "learned-1", "rope-1", "relative-1", "residual-concat-3-1", "short-rope-1"}
    assert to_check(state_of(RUN_ORDER, every)) == ["sinusoidal-1", "rope-1"]
    assert to_check(state_of(RUN_ORDER, {"learned-1", "residual-concat-3-1"})) == ["learned-1", "residual-concat-3-1"]
    assert to_check(state_of(RUN_ORDER, {"sinusoidal-1", "learned-1"})) == ["sinusoidal-1"]
    assert to_check(state_of(RUN_ORDER, set())) == []


def verify_printing(said: str, code: int):
    """`posenc verify`, as pin runs it, having printed `said` with exit `code`."""
    calls = []

    def fake(command, **kwargs):
        calls.append(command[-1])
        return subprocess.CompletedProcess(command, code, stdout=said.format(run=command[-1]))
    return fake, calls


def test_on_a_cpu_new_to_the_run_pin_verifies_first_keeps_the_records_and_stops_on_a_difference(tmp_path, monkeypatch):
    """The checks run only where this CPU made no pinned unit; each verify is kept as a record in
    the CPU's directory; a pass recorded is not run again; a difference stops the run in one line,
    its record kept."""
    from posenc import records
    from posenc.stages import pin

    units = tmp_path / "docs/records/units"
    st = state_of(RUN_ORDER, {"sinusoidal-1", "rope-1"})
    for name in st.pinned:
        files.write_json(units / f"{name}.json", {"unit": name, "cpu": "GenuineIntel family 6 model 999"})
    fake, calls = verify_printing(records.REPRODUCES + "update 100, sha256 ab)\n", 0)
    monkeypatch.setattr(pin.subprocess, "run", fake)
    pin.check_this_cpu(tmp_path, st, units)
    assert calls == ["sinusoidal-1", "rope-1"]
    kept = tmp_path / "docs/records" / records.cpu_dir() / "verify-rope-1.md"
    cpu, printed = records.read(kept)
    assert cpu == records.cpu_name() and records.reproduced(printed, "rope-1")
    assert pinning.verifications(tmp_path / "docs/records") == [
        (records.cpu_name(), "rope-1", True), (records.cpu_name(), "sinusoidal-1", True)]
    pin.check_this_cpu(tmp_path, st, units)
    assert calls == ["sinusoidal-1", "rope-1"]  # both recorded as passing: not run again

    kept.unlink()
    fake, calls = verify_printing("verify: this machine does not reproduce the pinned bits of {run}: update 3 "
                                  "differs first\n", 1)
    monkeypatch.setattr(pin.subprocess, "run", fake)
    with pytest.raises(UserError, match=r"verify-rope-1.md: rope-1 does not reproduce its pinned bits on .*stops"):
        pin.check_this_cpu(tmp_path, st, units)
    assert calls == ["rope-1"] and not pinning.verifications(tmp_path / "docs/records")[0][2]

    files.write_json(units / "rope-1.json", {"unit": "rope-1", "cpu": records.cpu_name()})
    fake, calls = verify_printing("", 1)
    monkeypatch.setattr(pin.subprocess, "run", fake)
    pin.check_this_cpu(tmp_path, st, units)
    assert calls == []  # this CPU made a pinned unit: the run is already on it


def test_a_units_record_counts_the_cpu_time_of_its_stages_not_the_time_they_waited(tmp_path, monkeypatch):
    """A unit's record has each stage's wall time and the CPU time of the stages' processes, a
    child's child included (posenc under dvc): a stage that computes for a while and then waits
    (as a unit paused by kill -STOP, or one beside other work) counts the computing alone."""
    from posenc.stages import pin

    stage = ("import subprocess, sys, time; subprocess.run([sys.executable, '-c', "
             "'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.5: pass']); time.sleep(1)")
    real = subprocess.Popen
    monkeypatch.setattr(pin.subprocess, "Popen", lambda command, **kw: real([sys.executable, "-c", stage], **kw))
    unit = pinning.Unit("positional", "sinusoidal-1", 1, ("train@sinusoidal-1", "evaluate@sinusoidal-1"))
    said = pin.run_unit(tmp_path, unit, list(unit.stages), None, {}, tmp_path / "logs", tmp_path / "units",
                        {"train": 1, "eval": 1})
    record = pinning.unit_record(tmp_path / "units/sinusoidal-1.json")
    assert said.startswith("done in ") and set(record["stages_s"]) == set(unit.stages), said
    assert all(wall >= 1.5 for wall in record["stages_s"].values()), record
    assert 1.0 <= record["cpu_s"] < 2.0 < record["wall_s"], record  # 2 x 0.5 s computing, plus start-up


def test_the_status_block_says_where_units_were_checked_on_another_cpu(tmp_path):
    from posenc.stages import pins

    units = tmp_path / "units"
    st = state_of(RUN_ORDER, {"sinusoidal-1", "rope-1"})
    files.write_json(units / "sinusoidal-1.json", {"cpu": "AuthenticAMD family 25 model 1", "wall_s": 3600})
    files.write_json(units / "rope-1.json", {"cpu": "GenuineIntel family 6 model 207", "wall_s": 7200, "retrained": {
        "stage": "train@rope-1", "lock_unchanged": True, "first_made_on": "AuthenticAMD family 25 model 1"}})
    (tmp_path / "intel-6-167").mkdir()
    (tmp_path / "intel-6-167/verify-sinusoidal-1.md").write_text(
        "`posenc verify sinusoidal-1`, on 2026-12-07: GenuineIntel family 6 model 167 (`lscpu`), 2 CPUs available, "
        "torch 2.13.0+cpu.\n\n```text\nverify: this machine reproduces the pinned bits of sinusoidal-1 (update 100, "
        "sha256 ab)\n```\n")
    (tmp_path / "intel-6-167/retrain-sinusoidal-1.md").write_text(
        "`sh -c 'dvc repro ...'`, on 2026-12-07: GenuineIntel family 6 model 167 (`lscpu`), 2 CPUs available, "
        "torch 2.13.0+cpu.\n\n```text\n0123  models/sinusoidal-1/model.pt\ndvc.lock unchanged\n```\n")
    (tmp_path / "intel-6-167/verify-rope-1.md").write_text(
        "`posenc verify rope-1`, on 2026-12-07: GenuineIntel family 6 model 167 (`lscpu`), 2 CPUs available, "
        "torch 2.13.0+cpu.\n\n```text\nverify: this machine does not reproduce the pinned bits of rope-1: update "
        "3 differs first\n```\n")
    text = pins.markdown(st, units)
    # per CPU and part, the units made there (wall seconds are in the records and the cost column)
    assert "- AuthenticAMD family 25 model 1: positional, 1 of 4: sinusoidal-1\n" in text, text
    # what the part cost so far: a pinned unit's mean wall time, and the sum
    assert "| positional | 2 of 4 | 5,400 s; 3.0 h | learned-1, relative-1 |" in text, text
    # per CPU, the units of each verdict
    assert ("- GenuineIntel family 6 model 167: verify DOES NOT reproduce: rope-1; verify reproduces: "
            "sinusoidal-1; retrained whole, dvc.lock unchanged: sinusoidal-1\n") in text, text
    assert ("- GenuineIntel family 6 model 207: retrained whole after AuthenticAMD family 25 model 1, "
            "dvc.lock unchanged: rope-1\n") in text
    for unit in ("learned-1", "rope-1", "relative-1"):  # every unit of the part on one CPU: "all"
        files.write_json(units / f"{unit}.json", {"cpu": "AuthenticAMD family 25 model 1", "wall_s": 60})
    assert "- AuthenticAMD family 25 model 1: positional, all 4\n" in pins.markdown(
        state_of(RUN_ORDER, {"sinusoidal-1", "learned-1", "rope-1", "relative-1"}), units)
    (tmp_path / "intel-6-167/verify-sinusoidal-1.md").write_text("a note by hand\n")
    with pytest.raises(UserError, match="verify-sinusoidal-1.md: not a record"):
        pins.markdown(st, units)
    files.write_json(units / "rope-1.json", ["a list"])
    with pytest.raises(UserError, match="rope-1.json: not the JSON object make pin writes"):
        pins.markdown(st, units)
