"""The exact reproduction check: the whole DVC pipeline on the tiny profile, in pieces and whole.

A copy of the project in a temporary git repository runs the pinning run as `make pin` schedules
it, in pieces: two units pinned and landed (`posenc pins --stage`), a third cut after its
training, then a clone without the DVC cache runs `make pin` for the rest (the cut unit retrained
with its dvc.lock entry unchanged, the landed ones never run). A `dvc repro` must then do nothing;
`dvc repro -f`, the whole run at once, must give the same dvc.lock (every output hash) and `dvc
metrics diff` must show no change; a clone without a single weight rebuilds every aggregate
byte for byte; a change to one variant's settings makes that variant's trainings stale and
nothing else, a change of the extrapolation's k the extrapolations, and of a report param the
report alone.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
import signal
import socket
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import MIRROR, ROOT, TINY
from posenc import pinning, records
from posenc.pinning import only_missing

BIN = Path(sys.executable).parent


# A command that runs longer than this has hung (a whole tiny-profile `dvc repro` takes about 3
# minutes on the 2-core machines): it is killed with every process it started and the test fails
# with what it printed, instead of CI running out of time.
TIMEOUT_S = 1200


def sh(*args: str, cwd: Path) -> str:
    mark = f"{os.getpid()}.{next(COMMANDS)}"  # in the environment of every process it starts
    env = {**os.environ, "POSENC_DATA_MIRROR": str(MIRROR), "PATH": f"{BIN}:{os.environ['PATH']}",
           "POSENC_TEST_COMMAND": mark}
    with subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_marked(f"POSENC_TEST_COMMAND={mark}".encode())
            stdout, stderr = proc.communicate()
            pytest.fail(f"{' '.join(args)} still ran after {TIMEOUT_S} s, killed:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    return stdout


COMMANDS = itertools.count()


def kill_marked(mark: bytes) -> None:
    """SIGKILL every process whose environment holds `mark`: the command and all it started,
    torchrun's workers too, which live in sessions of their own (os.killpg of the command's group
    misses them, and one left alive keeps the pipes open: communicate() would wait for ever).
    Again until none is left, for a child started while the last pass ran."""
    found = True
    while found:
        found = False
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if mark in environ.read_bytes().split(b"\0"):  # a dead process's reads empty
                    os.kill(int(environ.parent.name), signal.SIGKILL)
                    found = True
            except OSError:  # gone, or not ours
                continue


def test_a_command_that_hangs_is_killed_with_the_processes_it_started_in_sessions_of_their_own(
        tmp_path, monkeypatch):
    """As torchrun starts its workers: in a session of their own, out of the command's process
    group. One holds the command's pipes (the command's end waits for it), one does not (it
    outlives the command); both must be dead when sh gives up."""
    monkeypatch.setattr(sys.modules[__name__], "TIMEOUT_S", 3)
    start = ("import subprocess, time\n"
             "a = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
             "b = subprocess.Popen(['sleep', '600'], start_new_session=True,\n"
             "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
             "print(a.pid, b.pid, flush=True)\n"
             "time.sleep(300)\n")
    (tmp_path / "start.py").write_text(start)
    with pytest.raises(pytest.fail.Exception, match="still ran after 3 s, killed") as failed:
        sh(sys.executable, "start.py", cwd=tmp_path)
    pids = re.search(r"killed:\n(\d+) (\d+)", str(failed.value)).groups()
    for pid in pids:
        assert not running(int(pid)), pid


def running(pid: int) -> bool:
    """Whether the process runs: not reaped, and not a zombie on the way there."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_dvc_repro_twice_gives_identical_outputs(tmp_path, mirror):  # mirror: without the data, one line
    work = tmp_path / "project"
    work.mkdir()
    for name in ("src", "dvc.yaml", "pyproject.toml", ".gitignore", "Makefile", "results/earlier"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, work / name)
    shutil.copy(TINY, work / "params.yaml")
    sh("git", "init", "-q", cwd=work)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "root", cwd=work)
    sh("dvc", "init", "-q", cwd=work)
    sh("dvc", "config", "core.analytics", "false", cwd=work)
    shutil.copytree(ROOT / ".dvc" / "plots", work / ".dvc" / "plots")  # the plot templates
    sh("git", "add", "-A", cwd=work)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "code", cwd=work)

    work = pin_in_pieces(work, tmp_path)
    lock = (work / "dvc.lock").read_text()
    stages = yaml.safe_load(lock)["stages"]
    profile = yaml.safe_load(TINY.read_text())
    variants, seeds = profile["variants"], profile["seeds"]
    runs = [f"{v}-{s}" for v in variants for s in seeds]
    assert len(seeds) == 2 and "sinusoidal_narrow" in variants
    study, short = profile["residual_study"], profile["short_training"]
    residual = ({f"{stage}@{k}-{n}-{s}" for stage in ("train_residual", "evaluate_residual")
                 for k in study["kinds"] for n in study["depths"] for s in seeds}
                | {f"{stage}@sum-{n}-{s}" for stage in ("train_residual_sum", "evaluate_residual_sum")
                   for n in study["sum_depths"] for s in seeds})
    shorts = {f"{stage}@{v}-{s}" for stage in ("train_short", "evaluate_short") for v in short["variants"]
              for s in seeds}
    assert {"fetch", "prepare", "shorten", "report", "analyze", "residuals", "trained_short", "earlier_runs"} | residual | shorts | {
        f"{s}@{r}" for s in ("train", "evaluate", "extrapolate", "measure") for r in runs} == set(stages)
    table = (work / "results/table.md").read_text()
    assert all(f"| {v} |" in table for v in variants)
    assert "2 seeds per variant (mean ± standard deviation over seeds)" in table
    assert "two-level bootstrap" in table and "k = 8 (n = 12," in table
    assert "data/raw/multi30k" in table  # the data hash from dvc.lock is in the provenance
    assert "| concat vs sinusoidal_narrow |" in table  # the control pair, tested on real hypotheses
    residual_table = (work / "results/residual/table.md").read_text()  # the residual study, end to end
    assert "| sum | 1 |" in residual_table and "| concat | 1 |" in residual_table
    assert "concat vs sum, 1 layer" in residual_table
    assert "## §3.5 trained short, tested long: the table" in (work / "results/short/table.md").read_text()
    assert (work / "results/short/summary.md").read_text().startswith("Generated by `posenc trained-short`: ")
    findings = (work / "results/findings.md").read_text()
    assert "### Sum against concatenation" in findings and "holds here on" in findings
    summary = (work / "results/summary.md").read_text()  # README's front, generated
    assert "- **Table 3 (E), learned against sinusoidal positions**: `learned` minus `sinusoidal`" in summary
    # the earlier complete runs are the default profile's, on other data: said, not compared
    assert (work / "results/earlier_runs.md").read_text().count("Computed on other data") == 2
    for name in ("figures/learning_curves", "figures/bleu_by_length", "figures/extrapolation",
                 "analysis_figures/position_variance",
                 "analysis_figures/logit_terms", "analysis_figures/word_order", "residual/figures/highway", "short/figures/bleu_by_length"):
        assert (work / "results" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert b"<svg" in (work / "results" / f"{name}.svg").read_bytes()[:1000]  # a vector copy
    metrics = {p: (work / p).read_text() for p in ("results/table.json", "results/analysis.json")}

    # the units landed before the clone have no weights here: pinned, they are not run again
    assert "Data and pipelines are up to date" in sh("dvc", "repro", "--allow-missing", cwd=work)
    # posenc verify on a real dvc.lock: the first checkpoint retrained, and the dev hypotheses of the
    # batches that hold the first 10 sentences re-decoded, all equal to the pinned ones
    out = sh("posenc", "verify", "sinusoidal-2", "--sentences", "10", cwd=work).strip()  # trained in the clone
    assert out.startswith("verify: this machine reproduces the pinned bits of sinusoidal-2 (update 8, "
                          "sha256 "), out
    assert out.endswith(" of its 100 dev hypotheses (every batch that holds one of the first 10)"), out
    sh("git", "add", "-A", cwd=work)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "results", cwd=work)

    sh("dvc", "repro", "-f", cwd=work)
    assert (work / "dvc.lock").read_text() == lock
    assert {p: (work / p).read_text() for p in metrics} == metrics
    assert (work / "results/table.md").read_text() == table
    assert sh("dvc", "metrics", "diff", cwd=work).strip() in ("", "No changes.")
    assert sh("git", "status", "--porcelain", cwd=work).strip() == ""

    # `dvc plots show`: one chart with every run's learning curve, one of BLEU by length
    plots = json.loads(sh("dvc", "plots", "show", "--json", cwd=work))["data"]
    assert set(plots) == {"results/dev_curves.csv", "results/bleu_by_length.csv"}
    curves = plots["results/dev_curves.csv"][0]["content"]
    assert {v["run"] for v in curves["data"]["values"]} == set(runs)
    assert curves["encoding"]["color"]["field"] == "variant" and curves["encoding"]["strokeDash"]["field"] == "seed"
    bars = plots["results/bleu_by_length.csv"][0]["content"]
    assert {v["variant"] for v in bars["data"]["values"]} == set(variants)

    # A reader without a single weight rebuilds every table, figure and finding from the text
    rebuild_from_text_in_a_fresh_clone(work, tmp_path)

    # A reader pulls the pinned outputs from a remote served over HTTP and has nothing to re-run
    pull_into_a_fresh_clone(work, tmp_path)

    # An experiment from a fresh clone (no cache, no data): fetch is an ordinary stage of it
    experiment_in_a_fresh_clone(work, tmp_path)

    # The metrics are numbers only, one row per run, and a changed result shows as that change alone
    for path in (work / "results/runs").glob("*/metrics.json"):
        assert all(isinstance(v, (int, float)) for v in json.loads(path.read_text()).values()), path
    show = sh("dvc", "metrics", "show", cwd=work).splitlines()
    assert len(show) == 1 + len(runs) and max(map(len, show)) <= WIDTH, show
    params = (work / "params.yaml").read_text()

    # A variant's own setting makes that variant's trainings stale, and no other stage
    (work / "params.yaml").write_text(params.replace("    dim: 8 ", "    dim: 4 ", 1))
    assert (work / "params.yaml").read_text() != params
    assert set(json.loads(sh("dvc", "status", "--json", cwd=work))) == {f"train@concat-{s}" for s in seeds}
    # The extrapolation's k is its own stage's: evaluation does not re-run
    (work / "params.yaml").write_text(params.replace("joins: [1, 2, 4, 8]", "joins: [1, 2, 4]", 1))
    assert set(json.loads(sh("dvc", "status", "--json", cwd=work))) == {f"extrapolate@{r}" for r in runs}

    # A changed result shows in `dvc metrics diff` as that change alone (one run re-evaluated).
    # Evaluating the first 50 sentences instead of 100 surely moves the dev perplexity; shorter
    # outputs need not move a 24-update model's BLEU at two decimals (0.00-0.03 on some CPUs).
    assert "  max_sentences: 100 " in params
    (work / "params.yaml").write_text(params.replace("  max_sentences: 100 ", "  max_sentences: 50 ", 1))
    sh("dvc", "repro", "evaluate@sinusoidal-1", cwd=work)
    sh("git", "add", "-A", cwd=work)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "fewer sentences", cwd=work)
    diff = json.loads(sh("dvc", "metrics", "diff", "HEAD~1", "--json", cwd=work))
    changed = {key for metrics in diff.values() for key in metrics}
    assert set(diff) == {"results/runs/sinusoidal-1/metrics.json"}, diff
    assert "dev_ppl" in changed and all(k == "dev_ppl" or k.startswith("bleu_") for k in changed), changed


def git_commit(message: str, cwd: Path) -> None:
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message, cwd=cwd)


def lock_of(work: Path, revision: str | None = None) -> dict:
    text = sh("git", "show", f"{revision}:dvc.lock", cwd=work) if revision else (work / "dvc.lock").read_text()
    return yaml.safe_load(text)["stages"]


def pin_in_pieces(work: Path, tmp_path: Path) -> Path:
    """Two units pinned and landed, a third cut after its training and committed as it is; then a
    clone without the cache continues with `make pin` (without creating .venv). Returns the clone."""
    out = sh("posenc", "pin", "--units", "2", cwd=work)
    assert "running 2, 2 at a time" in out and "[2/2] " in out, out
    assert "] sinusoidal-1: done in" in out and "] learned-1: done in" in out, out
    sh("dvc", "repro", "--single-item", "train@concat-1", cwd=work)  # the third unit, cut after training
    status = sh("posenc", "pins", cwd=work)
    assert "positional: 2 of 10 units pinned" in status and "cut after training (1): concat-1" in status, status
    assert max(map(len, status.splitlines())) <= WIDTH
    sh("posenc", "pins", "--stage", cwd=work)
    git_commit("two units", work)
    landed = {name for name in lock_of(work, "HEAD") if "@" in name}
    assert landed == {f"{s}@{r}" for s in ("train", "evaluate", "extrapolate", "measure")
                      for r in ("sinusoidal-1", "learned-1")}, landed  # never part of a unit
    assert not sh("git", "ls-files", "results/runs/concat-1", cwd=work).strip()
    assert sh("git", "status", "--porcelain", "dvc.lock", cwd=work).strip() == "M dvc.lock"  # it holds concat-1's too
    sh("git", "add", "dvc.lock", "results", cwd=work)  # the cut unit committed by hand, as an older landing would
    git_commit("a unit cut after training", work)
    before = lock_of(work)

    clone = tmp_path / "pinned"  # (pull_into_a_fresh_clone's is "clone")
    sh("git", "clone", "-q", str(work), str(clone), cwd=tmp_path)
    assert not (clone / "models/concat-1/model.pt").exists()
    for record in (clone / "docs/records/units").glob("*.json"):  # as if another CPU had made the two
        record.write_text(record.read_text().replace(records.cpu_name(), "GenuineIntel family 6 model 999"))
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "made elsewhere", cwd=clone)
    out = sh("make", "--no-print-directory", "pipeline", cwd=clone)
    # a CPU new to the run verifies a pinned unit first (no unit of the attention side is pinned
    # yet), and keeps what verify printed as a record that README's status block reads
    assert "made none of the pinned units: posenc verify sinusoidal-1 first" in out, out
    assert "posenc verify learned-1" not in out, out
    assert pinning.verifications(clone / "docs/records") == [(records.cpu_name(), "sinusoidal-1", True)]
    assert "pin: 2 of 14 units pinned; running 12, 2 at a time" in out, out
    assert "concat-1: done in" in out and "retrained: dvc.lock unchanged" in out, out
    assert "pin: sinusoidal-1 started" not in out and "pin: learned-1 started" not in out  # landed: never run again
    after = lock_of(clone)
    for name in landed | {"train@concat-1"}:
        assert after[name] == before[name], name
    return clone


def rebuild_from_text_in_a_fresh_clone(work: Path, tmp_path: Path) -> None:
    """A clone without the DVC cache: `dvc repro --allow-missing` runs nothing; with the data made
    again (fetch, prepare: no weights), each aggregate forced gives the committed bytes; an edit to a
    report param leaves every training and evaluation up to date; a params change that would re-pin
    every unit is refused by `posenc pin` in one line."""
    clone = tmp_path / "text-clone"
    sh("git", "clone", "-q", str(work), str(clone), cwd=tmp_path)
    assert "Data and pipelines are up to date" in sh("dvc", "repro", "--allow-missing", cwd=clone)
    assert "pins: 14 of 14 units pinned" in sh("posenc", "pins", cwd=clone)
    sh("dvc", "repro", "prepare", "shorten", cwd=clone)
    for aggregate in ("report", "earlier_runs", "analyze", "residuals", "trained_short"):
        sh("dvc", "repro", "--allow-missing", "--force", "--single-item", aggregate, cwd=clone)
    assert sh("git", "status", "--porcelain", cwd=clone).strip() == ""  # every byte as committed
    assert not list((clone / "models").glob("*/model.pt"))
    params = (clone / "params.yaml").read_text()
    (clone / "params.yaml").write_text(params.replace("length_buckets: [10, 15, 20, 30]", "length_buckets: [10, 20]", 1))
    status = json.loads(sh("dvc", "status", "--json", cwd=clone))
    assert {name for name, changes in status.items() if not only_missing(changes)} == {"report"}
    (clone / "params.yaml").write_text(params.replace("lr_scale: 1.0", "lr_scale: 2.0", 1))
    git_commit_all = ("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "lr")
    sh(*git_commit_all, cwd=clone)
    lock = (clone / "dvc.lock").read_text()
    r = subprocess.run([str(BIN / "posenc"), "pin"], cwd=clone, capture_output=True, text=True,
                       env={**os.environ, "POSENC_DATA_MIRROR": str(MIRROR), "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert r.returncode == 2 and "are stale under the current code and params" in r.stderr and "REPIN=1" in r.stderr, r.stderr
    assert (clone / "dvc.lock").read_text() == lock


def pull_into_a_fresh_clone(work: Path, tmp_path: Path) -> None:
    """As README's "Pinned results without training": the maintainer pushes the DVC cache to a
    directory, a static file server publishes it (DVC's HTTP remote reads the cache's plain
    layout), and a fresh clone pulls every pinned output and finds nothing to reproduce."""
    store = tmp_path / "store"
    sh("dvc", "remote", "add", "--local", "-d", "publish", str(store), cwd=work)
    sh("dvc", "push", cwd=work)
    with socket.socket() as s:  # a free loopback port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(store)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # until it listens
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        clone = tmp_path / "clone"
        sh("git", "clone", "-q", str(work), str(clone), cwd=tmp_path)
        assert not (clone / "models/rope-2/model.pt").exists()  # the logs are in git, not the model
        sh("dvc", "remote", "add", "--local", "-d", "pinned", f"http://127.0.0.1:{port}", cwd=clone)
        sh("dvc", "pull", cwd=clone)
    finally:
        server.terminate()
        server.wait()
    stages = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    for stage in stages.values():
        for out in stage.get("outs", []):
            path = clone / out["path"]
            if path.is_file():
                assert hashlib.md5(path.read_bytes()).hexdigest() == out["md5"], out["path"]
            else:
                assert path.is_dir() and out["md5"].endswith(".dir"), out["path"]
    assert (clone / "models/rope-2/model.pt").is_file()
    assert "Data and pipelines are up to date" in sh("dvc", "repro", cwd=clone)
    assert sh("git", "status", "--porcelain", cwd=clone).strip() == ""


def experiment_in_a_fresh_clone(work: Path, tmp_path: Path) -> None:
    """README's `dvc exp run -S ... <target>` then `dvc exp show` with a column selection, in a
    clone that has neither the DVC cache nor the data."""
    clone = tmp_path / "exp-clone"
    sh("git", "clone", "-q", str(work), str(clone), cwd=tmp_path)
    # a target: only what sinusoidal-1's metrics need (fetch, prepare, its training and evaluation)
    sh("dvc", "exp", "run", "-S", "train.max_steps=16", "evaluate@sinusoidal-1", cwd=clone)
    show = sh("dvc", "exp", "show", "--no-pager", "--csv", "--drop", ".*", "--keep",
              r"Experiment|train\.max_steps|.*sinusoidal-1.*:bleu_val", cwd=clone).splitlines()
    assert show[0] == "Experiment,results/runs/sinusoidal-1/metrics.json:bleu_val,train.max_steps", show
    rows = [line.split(",") for line in show[1:]]
    # the experiment (named), applied to the workspace; the commit it started from keeps 24
    assert [r[2] for r in rows if r[0]] == ["16"] and "24" in [r[2] for r in rows if not r[0]], show
    float(rows[-1][1])  # the experiment's BLEU is there
    compare_recipes_fit_a_terminal(clone)


WIDTH = 120


def compare_recipes_fit_a_terminal(clone: Path) -> None:
    """README's "Compare runs" commands, run on the experiment above, print nothing wider than a
    120-column terminal (DVC does not wrap its tables). `dvc exp run` ran above at the tiny
    profile's size; `dvc plots` prints a file path, not a table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^## Compare runs\n\n```sh\n(.*?)^```", text, re.S | re.M).group(1)
    recipes = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    measured = 0
    for recipe in recipes:
        args = shlex.split(recipe)
        if args[:3] == ["dvc", "exp", "run"] or args[:2] == ["dvc", "plots"]:
            continue
        out = sh(*args, cwd=clone)
        assert out.strip(), f"{recipe}: printed nothing"
        wide = [line for line in out.splitlines() if len(line) > WIDTH]
        assert not wide, f"{recipe}: {len(wide)} lines wider than {WIDTH} columns, the first {len(wide[0])}:\n{wide[0]}"
        measured += 1
    assert measured >= 2, recipes
