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
from posenc import pinning, runs

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
