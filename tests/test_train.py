"""Training: bit-identical re-runs, kill-and-resume, checkpoints that must not be resumed, 2-process
DDP, divergence, lengths a learned table cannot hold, unreadable inputs, averaging."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from posenc import checkpoints

from conftest import MIRROR, ROOT, error_line


def train_cmd(work: Path, name: str, params: str = "params.yaml", variant: str = "concat") -> list[str]:
    return ["-m", "posenc", "train", "--params", params, "--variant", variant, "--seed", "3",
            "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays",
            "--model", f"{name}/model.pt", "--last", f"{name}/last.pt", "--train-log", f"{name}/train_log.tsv",
            "--dev-log", f"{name}/dev_log.tsv", "--checkpoints", f"ck/{name}",
            "--timings", f"logs/{name}.json", "--digests", f"{name}/digests.json",
            "--highway", f"{name}/highway_log.tsv"]


def env(**extra: str) -> dict:
    return {**os.environ, "POSENC_DATA_MIRROR": str(MIRROR), **extra}


def run_train(work: Path, name: str, extra_env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *train_cmd(work, name, **kw)], cwd=work,
                          capture_output=True, text=True, env=env(**(extra_env or {})))


def kill_at_checkpoint(work: Path, name: str, params: str, step: int, extra_env: dict | None = None) -> None:
    """Start a training run and kill -9 it once the checkpoint of `step` is written."""
    proc = subprocess.Popen([sys.executable, *train_cmd(work, name, params)], cwd=work,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env(**(extra_env or {})))
    ck = work / "ck" / name / f"step-{step:08d}.pt"
    deadline = time.time() + 120
    while not ck.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert ck.exists() and not (work / name / "model.pt").exists(), "the run ended before the kill"


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
    assert same_bits(tiny_data / "run1/highway_log.tsv", tiny_data / "run2/highway_log.tsv")
    log = (tiny_data / "run1/train_log.tsv").read_text().split("\n")
    assert log[0] == "step\tlr\tloss\ttokens" and len(log) == 24 + 2
    assert not (tiny_data / "ck/run1").exists()  # checkpoints go once the run is complete
    assert "wall_s" in (tiny_data / "logs/run1.json").read_text()


@pytest.fixture(scope="module")
def whole(tiny_data) -> Path:
    """An uninterrupted 40-update run (long.yaml: checkpoints every 8, the last 2 averaged)."""
    with_params(tiny_data, "long.yaml", **{"max_steps: 24": "max_steps: 40"})
    r = run_train(tiny_data, "whole", params="long.yaml")
    assert r.returncode == 0, r.stderr
    return tiny_data / "whole"


def lr2_params(work: Path) -> str:
    """long.yaml with twice the learning rate: another run's settings."""
    return with_params(work, "lr2.yaml", **{"max_steps: 24": "max_steps: 40",
                                            "lr_scale: 1.0": "lr_scale: 2.0"})


def resumed_equals_whole(work: Path, name: str, whole: Path, extra_env: dict | None = None) -> str:
    r = run_train(work, name, params="long.yaml", extra_env=extra_env)
    assert r.returncode == 0, r.stderr
    assert same_bits(whole / "model.pt", work / name / "model.pt")
    assert same_bits(whole / "last.pt", work / name / "last.pt")
    assert same_bits(whole / "train_log.tsv", work / name / "train_log.tsv")
    assert same_bits(whole / "dev_log.tsv", work / name / "dev_log.tsv")
    assert same_bits(whole / "highway_log.tsv", work / name / "highway_log.tsv")
    assert not (work / "ck" / name).exists()
    return r.stdout


def test_kill_and_resume_gives_identical_weights(tiny_data, whole):
    """kill -9 after a checkpoint, start again: it resumes and ends with the same bits.
    Dropout is on, so the random state must be restored too."""
    kill_at_checkpoint(tiny_data, "killed", "long.yaml", 16)
    out = resumed_equals_whole(tiny_data, "killed", whole)
    assert "resuming from ck/killed/step-00000016.pt (step 16)" in out


def test_kill_9_at_a_random_moment_then_resume_gives_identical_weights(tiny_data, whole):
    """A kill anywhere: during start-up, between checkpoints, or while one is being written."""
    seed = random.randrange(2 ** 32)
    duration = json.loads((tiny_data / "logs/whole.json").read_text())["wall_s"] + 2.0  # + start-up
    delay = random.Random(seed).uniform(0.5, duration)
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, *train_cmd(tiny_data, "random", "long.yaml")],
                                cwd=tiny_data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env())
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        if proc.wait() == -signal.SIGKILL and not (tiny_data / "random/model.pt").exists():
            break
        (tiny_data / "random/model.pt").unlink(missing_ok=True)  # it finished first: sooner
        delay /= 2
    else:
        pytest.fail(f"the run always finished before the kill (seed {seed})")
    resumed_equals_whole(tiny_data, "random", whole)


def test_checkpoints_of_another_configuration_are_not_resumed(tiny_data, whole):
    """Checkpoints of the base settings, where a run with another learning rate looks: it must start
    afresh and end with the bits of a clean run with its own settings (not a hybrid of the two)."""
    lr2 = lr2_params(tiny_data)
    r = run_train(tiny_data, "lr2-clean", params=lr2)
    assert r.returncode == 0, r.stderr
    kill_at_checkpoint(tiny_data, "mixed", "long.yaml", 16)
    r = run_train(tiny_data, "mixed", params=lr2)
    assert r.returncode == 0, r.stderr
    assert "resuming" not in r.stdout
    assert "written by another run (different settings): removed; starting afresh" in r.stdout
    assert same_bits(tiny_data / "lr2-clean/model.pt", tiny_data / "mixed/model.pt")


def test_checkpoints_of_other_code_are_not_resumed(tiny_data, whole, tmp_path):
    """Interrupt a run, change a module that training runs, run again: it starts afresh."""
    shutil.copytree(ROOT / "src", tmp_path / "src")
    code = {"PYTHONPATH": str(tmp_path / "src")}  # this copy of posenc, not the installed one
    kill_at_checkpoint(tiny_data, "edited", "long.yaml", 16, extra_env=code)
    with open(tmp_path / "src/posenc/positional.py", "a") as f:
        f.write("\n# an edit\n")
    out = resumed_equals_whole(tiny_data, "edited", whole, extra_env=code)
    assert "written by another run (different code): removed; starting afresh" in out
    assert json.loads((tiny_data / "logs/edited.json").read_text())["resumed_from_step"] == 0


def test_a_truncated_latest_checkpoint_falls_back_to_the_one_before(tiny_data, whole):
    kill_at_checkpoint(tiny_data, "cut", "long.yaml", 16)
    latest = tiny_data / "ck/cut/step-00000016.pt"
    latest.write_bytes(latest.read_bytes()[:5000])
    out = resumed_equals_whole(tiny_data, "cut", whole)
    assert "step-00000016.pt unreadable" in out
    assert "resuming from ck/cut/step-00000008.pt (step 8)" in out


def test_a_foreign_latest_checkpoint_is_named_and_set_aside(tiny_data, whole):
    kill_at_checkpoint(tiny_data, "foreign", "long.yaml", 16)
    kill_at_checkpoint(tiny_data, "donor", lr2_params(tiny_data), 16)
    shutil.copy(tiny_data / "ck/donor/step-00000016.pt", tiny_data / "ck/foreign/step-00000024.pt")
    out = resumed_equals_whole(tiny_data, "foreign", whole)
    assert "step-00000024.pt written by another run (different settings)" in out
    assert "resuming from ck/foreign/step-00000016.pt (step 16)" in out


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
    params = with_params(tiny_data, "nan.yaml", **{"lr_scale: 1.0": "lr_scale: 1.0e+30"})
    r = run_train(tiny_data, "nan", params=params)
    assert error_line(r, "train") == ("posenc train: error: step 2: the training loss is nan; "
                                      "the run diverged: lower train.lr_scale or raise train.warmup")
    assert not (tiny_data / "nan/model.pt").exists()


def test_bad_variant_fails_before_training(tiny_data):
    r = run_train(tiny_data, "bad", variant="rotary")
    assert ("invalid choice: 'rotary' (choose from 'sinusoidal', 'learned', 'concat', 'sinusoidal_narrow', 'none', "
            "'rope', 'alibi', 'relative')") in error_line(r, "train")


def test_sentences_longer_than_a_learned_table_fail_before_training(tiny_data):
    params = with_params(tiny_data, "short.yaml", **{"max_positions: 512": "max_positions: 20"})
    r = run_train(tiny_data, "short", params=params, variant="learned")
    line = error_line(r, "train")
    assert "data/prepared/arrays/train.en.npy: sentence " in line
    assert "more than the learned position table's 20 rows" in line
    assert "raise positional.learned.max_positions to at least " in line
    assert not (tiny_data / "ck/short").exists() and not (tiny_data / "short").exists()
    # sinusoids have no such bound
    assert run_train(tiny_data, "short-sin", params=params, variant="sinusoidal").returncode == 0


def test_a_truncated_tokenizer_names_the_file_and_the_stage(tiny_data, tmp_path):
    good = tiny_data / "data/prepared/spm.model"
    (tiny_data / "cut").mkdir(exist_ok=True)
    (tiny_data / "cut/spm.model").write_bytes(good.read_bytes()[:1000])
    cmd = train_cmd(tiny_data, "cutspm")
    cmd[cmd.index("--spm") + 1] = "cut/spm.model"
    r = subprocess.run([sys.executable, *cmd], cwd=tiny_data, capture_output=True, text=True, env=env())
    line = error_line(r, "train")
    assert "cut/spm.model: not a readable SentencePiece model" in line
    assert line.endswith("train it again with `dvc repro -f prepare`")


@pytest.mark.parametrize("seed", ["-1"])
def test_a_negative_seed_is_refused(tiny_data, seed):
    cmd = train_cmd(tiny_data, "neg")
    cmd[cmd.index("--seed") + 1] = seed
    r = subprocess.run([sys.executable, *cmd], cwd=tiny_data, capture_output=True, text=True, env=env())
    assert "--seed -1: a seed is an int >= 0" in error_line(r, "train")


def test_average_of_checkpoints_is_the_elementwise_mean(tmp_path):
    for step, value in ((1, 1.0), (2, 2.0), (3, 6.0)):
        torch.save({"model": {"w": torch.full((2,), value)}}, tmp_path / f"step-{step:08d}.pt")
    assert torch.equal(checkpoints.average(tmp_path, [2, 3])["w"], torch.full((2,), 4.0))


def _fake_run(directory: Path, steps: list[int], fingerprint: dict) -> None:
    for step in steps:
        checkpoints.save(directory, step, {"fingerprint": fingerprint, "model": {"w": torch.zeros(1)},
                                           "optimizer": {}, "rng": torch.get_rng_state(),
                                           "train_rows": [], "dev_rows": [], "digests": [],
                                           "highway_rows": []}, keep=10)


def test_resume_needs_every_checkpoint_of_the_final_average_before_it(tmp_path, capsys):
    """Steps 8..40, the last 2 averaged (32, 40): with 32 unreadable, 40 cannot be resumed (its
    average would lack 32); the run goes back to 24 and remakes 32 and 40."""
    fp = {"settings": "s", "data": "d", "code": "c", "libraries": "l"}
    _fake_run(tmp_path, [8, 16, 24, 32, 40], fp)
    (tmp_path / "step-00000032.pt").write_bytes(b"PK\x03\x04 cut")
    (tmp_path / ".step-00000048.pt.abc.tmp").write_bytes(b"half a write")
    state = checkpoints.resume(tmp_path, fp, [32, 40], "cpu")
    assert state["step"] == 24
    out = capsys.readouterr().out
    assert "step-00000032.pt unreadable" in out and "step-00000040.pt unusable" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step-{s:08d}.pt" for s in (8, 16, 24)]
    # nothing usable at all: start afresh, and say so
    assert checkpoints.resume(tmp_path, {**fp, "code": "other"}, [32, 40], "cpu") is None
    assert "written by another run (different code): removed; starting afresh" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_a_residual_study_run_logs_the_highway_at_every_dev_evaluation(tiny_data):
    """--residual and --layers replace model.residual and model.layers (dvc.yaml's
    train_residual); highway_log.tsv has each measure at every dev evaluation."""
    name = "residual-concat-2-3"
    r = subprocess.run([sys.executable, *train_cmd(tiny_data, name, variant="sinusoidal"),
                        "--residual", "concat", "--layers", "2"], cwd=tiny_data, capture_output=True,
                       text=True, env=env())
    assert r.returncode == 0, r.stderr
    config = torch.load(tiny_data / name / "model.pt", weights_only=True)["config"]
    assert (config["residual"], config["layers"]) == ("concat", 2)
    rows = [line.split("\t") for line in (tiny_data / name / "highway_log.tsv").read_text().splitlines()]
    assert rows[0] == ["step", "part", "measure", "value"]
    dev_steps = [line.split("\t")[0] for line in (tiny_data / name / "dev_log.tsv").read_text().splitlines()[1:]]
    assert sorted({row[0] for row in rows[1:]}, key=int) == dev_steps
    at_first = {(part, measure) for step, part, measure, _ in rows[1:] if step == dev_steps[0]}
    assert ("decoder layer 2 input", "grad_ratio") in at_first
    assert ("encoder layer 1 feed-forward", "w_x") in at_first
    assert all(float(value) > 0 for *_, value in rows[1:])
    r = subprocess.run([sys.executable, *train_cmd(tiny_data, "bad", variant="sinusoidal"), "--layers", "0"],
                       cwd=tiny_data, capture_output=True, text=True, env=env())
    assert error_line(r, "train") == "posenc train: error: --layers 0: a layer count >= 1"


@pytest.mark.parametrize("old, new, message", [
    ("heads: 2", "heads: 3", "other.yaml: model.heads (3) must divide model.d_model (32)"),
    ("    dim: 8 ", "    dim: 32 ", "other.yaml: positional.concat.dim (32) must be below model.d_model (32)"),
    ("d_ff: 64", "d_ff: 1000000000", "other.yaml: model.d_ff (1,000,000,000) makes a model whose training state"),
    ("accum: 1", "accum: 100000", "other.yaml: train.accum (100000) x processes (1) exceeds the"),
])
def test_checks_across_keys_name_the_params_file_given(tiny_data, old, new, message):
    """--params other.yaml: the one-line error names other.yaml, not params.yaml."""
    text = (tiny_data / "params.yaml").read_text()
    assert old in text
    if old == "    dim: 8 ":  # concat and its control share one width
        text = text.replace("    dim: 8 ", "    dim: 32 ")
    (tiny_data / "other.yaml").write_text(text.replace(old, new, 1))
    r = subprocess.run([sys.executable, *train_cmd(tiny_data, "other", params="other.yaml")], cwd=tiny_data,
                       capture_output=True, text=True, env=env())
    assert error_line(r, "train").startswith(f"posenc train: error: {message}"), r.stderr[-2000:]
    assert not (tiny_data / "other").exists()
