"""A stage's outputs are one set: run directly (not under DVC), a stage that fails or is killed
while writing leaves part of its new set and nothing of the old one, never a directory holding the
outputs of two runs (posenc.files.clear). Shown for evaluate and report, by a write that fails and
by kills at random moments."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posenc import files

from conftest import MIRROR, posenc


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` but the temporaries of a write cut short (.<name>.<pid>.<random>.tmp)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".tmp"))}


def assert_one_run(present: dict[str, bytes], old: dict[str, bytes], new: dict[str, bytes]) -> str:
    """No file of the old set beside a file of the new one; "old", "new" or "none" (what is there).
    A file with the same bytes in both sets belongs to either."""
    olds = {p for p, b in present.items() if b == old.get(p) and b != new.get(p)}
    news = {p for p, b in present.items() if b != old.get(p)}
    assert not (olds and news), f"old {sorted(olds)} beside new {sorted(news)}"
    assert all(present[p] == new.get(p) for p in news), f"files of neither run: {sorted(news)}"
    return "old" if olds else "new" if news else "none"


def kill_at_random_moments(command: list[str], cwd: Path, target: Path, old: dict[str, bytes],
                           new: dict[str, bytes], seconds: float, tries: int, seed: int) -> list[str]:
    """Lay the old set into `target`, start `command` (which writes the new set there), kill it after
    a random time within its running time; check the directory after each kill."""
    rng, seen = random.Random(seed), []
    for _ in range(tries):
        shutil.rmtree(target, ignore_errors=True)
        for name, data in old.items():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(data)
        proc = subprocess.Popen([sys.executable, "-m", "posenc", *command], cwd=cwd,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "POSENC_DATA_MIRROR": str(MIRROR)})
        time.sleep(rng.uniform(0.5, 1.0) * seconds)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        seen.append(assert_one_run(snapshot(target), old, new))
    return seen


def test_clear_removes_files_and_pattern_matches_but_never_a_directory(tmp_path):
    (tmp_path / "hyps").mkdir()
    for name in ("a.de", "b.de", "notes.txt"):
        (tmp_path / "hyps" / name).write_text("x")
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "sub.json").mkdir()
    files.clear(tmp_path / "hyps" / "*.de", tmp_path / "metrics.json", tmp_path / "sub.json",
                tmp_path / "absent.json", tmp_path / "nodir" / "*.de")
    assert sorted(p.name for p in (tmp_path / "hyps").iterdir()) == ["notes.txt"]  # the user's file stays
    assert not (tmp_path / "metrics.json").exists() and (tmp_path / "sub.json").is_dir()


def evaluate_args(out: str, params: str = "params.yaml", metrics: str | None = None) -> list[str]:
    return ["evaluate", "--params", params, "--seed", "1", "--model", "evalm/model.pt",
            "--last", "evalm/last.pt", "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays",
            "--raw", "data/raw/multi30k", "--metrics", metrics or f"{out}/metrics.json",
            "--scores", f"{out}/scores.json", "--signatures", f"{out}/signatures.json", "--hyps", f"{out}/hyps"]


@pytest.fixture(scope="module")
def two_evaluations(tiny_data, evaluated):
    """The evaluate stage's set for the tiny model twice: of 100 sentences a split (old) and of 50
    (new, params fewer.yaml), and the seconds the second took."""
    text = (tiny_data / "params.yaml").read_text()
    assert "  max_sentences: 100 " in text
    (tiny_data / "fewer.yaml").write_text(text.replace("  max_sentences: 100 ", "  max_sentences: 50 ", 1))
    assert posenc(*evaluate_args("sets/old"), cwd=tiny_data).returncode == 0
    started = time.perf_counter()
    r = posenc(*evaluate_args("sets/new", "fewer.yaml"), cwd=tiny_data)
    assert r.returncode == 0, r.stderr[-2000:]
    return snapshot(tiny_data / "sets/old"), snapshot(tiny_data / "sets/new"), time.perf_counter() - started


def test_an_evaluation_whose_metrics_cannot_be_written_leaves_nothing_of_the_old_set(tiny_data, two_evaluations):
    old, new, _ = two_evaluations
    target = tiny_data / "sets/failed"
    for name, data in old.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes(data)
    (target / "metrics.json").unlink()
    (target / "metrics.json").mkdir()  # a directory where the metrics go: the write fails
    r = posenc(*evaluate_args("sets/failed", "fewer.yaml"), cwd=tiny_data)
    assert r.returncode == 2 and "metrics.json" in r.stderr.strip().splitlines()[-1], r.stderr[-2000:]
    present = snapshot(target)
    assert assert_one_run(present, old, new) == "new"
    assert "scores.json" not in present  # the old run's scores, which it would have left beside new hyps


def test_evaluate_killed_at_random_moments_never_leaves_two_runs_outputs(tiny_data, two_evaluations):
    old, new, seconds = two_evaluations
    seen = kill_at_random_moments(evaluate_args("sets/killed", "fewer.yaml"), tiny_data,
                                  tiny_data / "sets/killed", old, new, seconds, tries=6, seed=1)
    assert len(seen) == 6


def test_report_killed_at_random_moments_never_leaves_two_runs_outputs(tiny_data, evaluated):
    """Two variants' results, made from the tiny model's evaluation (the second's hypotheses one word
    shorter), reported twice with other bootstrap sample counts: the old and the new set differ in
    the table, which names the count."""
    work = tiny_data / "report-sets"
    for variant in ("sinusoidal", "learned"):
        run = work / f"results/runs/{variant}-1"
        shutil.copytree(tiny_data / "evalm/hyps", run / "hyps")
        for name in ("metrics.json", "scores.json", "signatures.json"):
            shutil.copy(tiny_data / "evalm" / name, run / name)
        if variant == "learned":
            for hyp in (run / "hyps").iterdir():
                hyp.write_text("".join(" ".join(line.split()[:-1]) + "\n" for line in files.read_lines(hyp)))
        (run / "extrapolation.json").write_text(json.dumps({"longest_training_source": 10,
            "longest_training_target": 10, "table_rows": None, "splits": {"test_2016_flickr": {"1": {
                "inputs": 100, "bleu": 1.0, "chrf": 10.0, "bleu_signature": "s", "length_ratio": 1.0,
                "mean_source_positions": 10.0, "max_source_positions": 20, "max_output_positions": 20,
                "longer_than_training": 0.0, "at_length_limit": 0}}}}))
        shutil.copy(tiny_data / "evalm/dev_log.tsv", run / "dev_log.tsv")
    shutil.copytree(tiny_data / "data/raw", work / "data/raw")
    text = (tiny_data / "params.yaml").read_text()
    text = re.sub(r"^variants: .*$", "variants: [sinusoidal, learned]", text, count=1, flags=re.M)
    text = re.sub(r"^seeds: .*$", "seeds: [1]", text, count=1, flags=re.M)
    (work / "params.yaml").write_text(text)
    samples = int(re.search(r"bootstrap_samples: (\d+)", text).group(1))  # the table names the count
    (work / "other.yaml").write_text(text.replace(f"bootstrap_samples: {samples}", f"bootstrap_samples: {samples + 50}", 1))

    def report(params: str, out: str) -> list[str]:
        return ["report", "--params", params, "--runs", "results/runs",
                "--raw", "data/raw/multi30k", "--lock", "dvc.lock", "--table-md", f"{out}/table.md",
                "--findings-md", f"{out}/findings.md", "--summary-md", f"{out}/summary.md",
                "--table-json", f"{out}/table.json",
                "--table-csv", f"{out}/table.csv", "--by-length-csv", f"{out}/bleu_by_length.csv",
                "--curves-csv", f"{out}/dev_curves.csv", "--extrapolation-csv", f"{out}/extrapolation.csv",
                "--figures", f"{out}/figures"]

    r = posenc(*report("params.yaml", "old"), cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    started = time.perf_counter()
    r = posenc(*report("other.yaml", "new"), cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    seconds = time.perf_counter() - started
    old, new = snapshot(work / "old"), snapshot(work / "new")
    assert old["table.md"] != new["table.md"]  # the two sets can be told apart
    seen = kill_at_random_moments(report("other.yaml", "killed"), work, work / "killed", old, new,
                                  seconds, tries=6, seed=2)
    assert len(seen) == 6
