"""Training: bit-identical re-runs, kill-and-resume, 2-process DDP, divergence, averaging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from posenc.train import average_checkpoints

from conftest import MIRROR


def train_cmd(work: Path, name: str, params: str = "params.yaml", variant: str = "concat") -> list[str]:
    return ["-m", "posenc", "train", "--params", params, "--variant", variant, "--seed", "3",
            "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays",
            "--model", f"{name}/model.pt", "--train-log", f"{name}/train_log.tsv",
            "--dev-log", f"{name}/dev_log.tsv", "--checkpoints", f"ck/{name}",
            "--timings", f"logs/{name}.json"]


def run_train(work: Path, name: str, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *train_cmd(work, name, **kw)], cwd=work, capture_output=True,
                       text=True, env={**os.environ, "POSENC_DATA_MIRROR": str(MIRROR)})
    return r


def with_params(work: Path, name: str, **changes: str) -> str:
    text = (work / "params.yaml").read_text()
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    (work / name).write_text(text)
    return name


def weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)["model"]


def same_bits(a: Path, b: Path) -> bool:
    return a.read_bytes() == b.read_bytes()


def test_two_runs_give_bit_identical_weights_and_logs(tiny_data):
    for name in ("run1", "run2"):
        r = run_train(tiny_data, name)
        assert r.returncode == 0, r.stderr
    assert same_bits(tiny_data / "run1/model.pt", tiny_data / "run2/model.pt")
    assert same_bits(tiny_data / "run1/train_log.tsv", tiny_data / "run2/train_log.tsv")
    assert same_bits(tiny_data / "run1/dev_log.tsv", tiny_data / "run2/dev_log.tsv")
    log = (tiny_data / "run1/train_log.tsv").read_text().split("\n")
    assert log[0] == "step\tlr\tloss\ttokens" and len(log) == 24 + 2
    assert not (tiny_data / "ck/run1").exists()  # checkpoints go once the run is complete
    assert "wall_s" in (tiny_data / "logs/run1.json").read_text()


def test_kill_and_resume_gives_identical_weights(tiny_data):
    """kill -9 after a checkpoint, start again: it resumes and ends with the same bits.
    Dropout is on, so the random state must be restored too."""
    params = with_params(tiny_data, "long.yaml", **{"max_steps: 24": "max_steps: 40"})
    r = run_train(tiny_data, "whole", params=params)
    assert r.returncode == 0, r.stderr
    proc = subprocess.Popen([sys.executable, *train_cmd(tiny_data, "killed", params)], cwd=tiny_data,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (tiny_data / "ck/killed/step-00000016.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (tiny_data / "ck/killed/step-00000016.pt").exists() and not (tiny_data / "killed/model.pt").exists()
    r = run_train(tiny_data, "killed", params=params)
    assert r.returncode == 0, r.stderr
    assert "resuming from ck/killed/step-000000" in r.stdout
    assert same_bits(tiny_data / "whole/model.pt", tiny_data / "killed/model.pt")
    assert same_bits(tiny_data / "whole/train_log.tsv", tiny_data / "killed/train_log.tsv")


def test_checkpoints_of_another_configuration_are_not_resumed(tiny_data):
    params = with_params(tiny_data, "lr.yaml", **{"lr_scale: 1.0": "lr_scale: 2.0"})
    (tiny_data / "ck/other").mkdir(parents=True, exist_ok=True)
    r = run_train(tiny_data, "base")
    assert r.returncode == 0, r.stderr
    # leave a checkpoint of the base configuration where the lr=2 run will look
    proc = run_train(tiny_data, "other")
    assert proc.returncode == 0
    r = run_train(tiny_data, "other", params=params)
    assert r.returncode == 0 and "resuming" not in r.stdout
    assert not same_bits(tiny_data / "base/model.pt", tiny_data / "other/model.pt")


def test_two_ddp_processes_match_one_process_with_the_same_global_batch(tiny_data):
    """torchrun, 2 CPU processes (gloo), accum 1 against 1 process with accum 2; dropout off so that
    the only difference is the arithmetic order."""
    one = with_params(tiny_data, "one.yaml", **{"dropout: 0.1": "dropout: 0.0", "accum: 1": "accum: 2"})
    two = with_params(tiny_data, "two.yaml", **{"dropout: 0.1": "dropout: 0.0"})
    r = run_train(tiny_data, "single", params=one)
    assert r.returncode == 0, r.stderr
    torchrun = Path(sys.executable).with_name("torchrun")
    r = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2",
                        *train_cmd(tiny_data, "ddp", two)], cwd=tiny_data, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = weights(tiny_data / "single/model.pt"), weights(tiny_data / "ddp/model.pt")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-5), key
    # and the per-update losses agree
    la = [l.split("\t")[2] for l in (tiny_data / "single/train_log.tsv").read_text().split("\n")[1:-1]]
    lb = [l.split("\t")[2] for l in (tiny_data / "ddp/train_log.tsv").read_text().split("\n")[1:-1]]
    assert la == lb


def test_a_diverging_run_stops_naming_the_step(tiny_data):
    params = with_params(tiny_data, "nan.yaml", **{"lr_scale: 1.0": "lr_scale: .nan"})
    r = run_train(tiny_data, "nan", params=params)
    assert r.returncode == 2
    # one error line (the progress bar may share its terminal line)
    assert r.stderr.count("error:") == 1
    assert ("posenc train: error: step 2: the training loss is nan; the run diverged: "
            "lower train.lr_scale or raise train.warmup\n") in r.stderr
    assert not (tiny_data / "nan/model.pt").exists()


def test_bad_variant_fails_before_training(tiny_data):
    r = run_train(tiny_data, "bad", variant="rotary")
    assert r.returncode == 2 and "valid variants: sinusoidal, learned, concat, none" in r.stderr


def test_average_of_checkpoints_is_the_elementwise_mean(tmp_path):
    for step, value in ((1, 1.0), (2, 2.0), (3, 6.0)):
        torch.save({"model": {"w": torch.full((2,), value)}}, tmp_path / f"step-{step:08d}.pt")
    assert torch.equal(average_checkpoints(tmp_path, 2)["w"], torch.full((2,), 4.0))
