"""The benchmarks run on the tiny profile and print every figure they promise. Their speed is never
asserted here: README's Performance section quotes what they print on the real profile."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, posenc


def run(work: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=work,
                          capture_output=True, text=True)


def bench(work: Path, script: str, *args: str) -> str:
    r = run(work, script, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


# a model smaller than the tiny profile's, one synthetic step: the figures, not their size, matter
SMALL_STEP = ("--d-model", "32", "--d-ff", "64", "--layers", "1", "--heads", "2", "--sentences", "4",
              "--length", "5", "--steps", "1", "--threads", "1", "--arrays", "data/prepared/arrays")


def test_train_throughput_prints_the_peak_both_models_and_the_real_loop(tiny_data):
    out = bench(tiny_data, "train_throughput.py", *SMALL_STEP, "--vocab", "400", "--rounds", "2",
                "--real-batches", "2", "--real-steps", "24", "--real-rounds", "1", "--bf16", "--compile",
                "--parts", "--levers", "--profile")
    assert re.search(r"matmul peak: [\d.]+ GFLOP/s", out)
    for model in ("posenc", "torch.nn.Transformer"):  # synthetic, then real batches
        assert len(re.findall(rf"^{re.escape(model)} +median +\d+ target tokens/s.* = \d+% of the peak",
                              out, re.M)) == 2
    assert re.search(r"^ratio posenc / torch.nn.Transformer: median [\d.]+", out, re.M)
    assert re.search(r"^bfloat16 autocast: the step's products [\d.]+ GFLOP/s \([\d.]+x float32's\); "
                     r"posenc median \d+ target tokens/s, [\d.]+x float32's", out, re.M)
    assert re.search(r"^torch.compile: compiled in \d+ s; posenc median \d+ target tokens/s, [\d.]+x "
                     r"eager's", out, re.M)
    assert re.search(r"^posenc's step in parts \(perf_counter, median of 2 rounds x 1 steps\): forward "
                     r"\d+ ms, loss \d+, backward \d+, Adam \d+; \d+ in all", out, re.M)
    assert re.search(r"^  alone at its shapes: projection and loss forward \+ backward, fused \d+ ms \([\d.]+ "
                     r"GFLOP, [\d.]+ GFLOP/s = \d+%; \d+% of the step\), unfused \d+ ms; the rest of the step "
                     r"-?\d+ ms", out, re.M)
    for batches in ("synthetic batches", "the first 2 real batches"):
        assert re.search(rf"^training levers, posenc's step on {batches}, 2 interleaved rounds:", out, re.M)
    for lever in ("before: loss from the logits, Adam per tensor", "the projection fused into the loss",
                  "fused Adam", r"both \(posenc.training\)"):
        assert len(re.findall(rf"^  {lever} +median +\d+ target tokens/s, [\d.]+x before \(min", out, re.M)) == 2
    assert re.search(r"aten::mm", out)  # the profiler's table
    assert re.search(r"^profiled: \d+ ms a step, against \d+ ms unprofiled just before", out, re.M)
    assert re.search(r"real batches \(the first 2 that training sees, [\d,]+ target tokens", out)
    assert re.search(r"^ratio posenc / torch.nn.Transformer on real batches: median [\d.]+", out, re.M)
    assert re.search(r"^real loop \(params.yaml, 24 updates, 1 rounds\): .* = \d+% of the peak", out, re.M)


def test_train_throughput_refuses_real_batches_of_another_vocabulary(tiny_data):
    r = run(tiny_data, "train_throughput.py", *SMALL_STEP, "--rounds", "1")
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == (
        "data/prepared/arrays: vocabulary, pad and BOS ids (400, 0, 2) differ from the benchmark's "
        "(8000, 0, 2); pass --vocab 400")


def test_decode_speed_prints_the_four_searches_and_how_they_agree(tiny_data, tiny_model):
    out = bench(tiny_data, "decode_speed.py", "--model", "evalm/model.pt", "--arrays", "data/prepared/arrays",
                "--spm", "data/prepared/spm.model", "--raw", "data/raw/multi30k",
                "--sentences", "6", "--rounds", "1", "--threads", "1")
    assert "same outputs with and without the cache: True" in out
    work, peak = map(float, re.search(r"^work: ([\d.]+) GFLOP for the 6 sentences \(torch's count of posenc's "
                                      r"cached search\); GEMM peak ([\d.]+) GFLOP/s \(a training step's products "
                                      r"alone, 1 threads\)$", out, re.M).groups())
    for search in ("posenc, cached", "posenc, uncached", "CTranslate2 float32", "CTranslate2 int8"):
        row = re.search(rf"^{search} +median +([\d.]+) sentences/s \(min [\d.]+, max [\d.]+\) = ([\d.]+) GFLOP/s "
                        rf"= (\d+)% of the peak; \d/6 outputs as posenc's; BLEU [\d.]+$", out, re.M)
        assert row, search
        rate, speed, share = map(float, row.groups())
        assert speed == pytest.approx(rate * work / 6, rel=0.02, abs=0.06)  # the same work in every row
        assert share == pytest.approx(100 * speed / peak, abs=1)
    assert re.search(r"^speed-up from the cache: [\d.]+x$", out, re.M)
    assert re.search(r"^posenc cached / CTranslate2 float32: [\d.]+x; / int8: [\d.]+x$", out, re.M)


def test_record_keeps_the_output_under_the_machine_and_command_and_a_failure_writes_nothing(tmp_path):
    out = tmp_path / "records/cpu/x.md"
    r = run(tmp_path, "record.py", str(out), "--", sys.executable, "-c", "print('peak: 1.5 GFLOP/s')")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "peak: 1.5 GFLOP/s\n"  # echoed as it comes
    head, body = out.read_text().split("\n\n", 1)
    assert re.fullmatch(r"`.*python.* -c 'print\('\"'\"'peak: 1.5 GFLOP/s'\"'\"'\)'`, on \d{4}-\d\d-\d\d: "
                        r"\S* family \d* model \d* \(`lscpu`\), \d+ CPUs available, torch [\w.+]+\.", head), head
    assert body == "```text\npeak: 1.5 GFLOP/s\n```\n"
    r = run(tmp_path, "record.py", str(out), "--", sys.executable, "-c", "print('half'); raise SystemExit(3)")
    assert r.returncode == 1 and "exited with 3" in r.stderr
    assert body in out.read_text()  # the earlier record, whole
    assert run(tmp_path, "record.py", str(tmp_path / "y.md")).returncode == 2


def test_run_costs_sums_each_part_and_scales_a_resumed_run(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name, wall, resumed in (("train-sinusoidal-1", 600.0, 0), ("train-rope-1", 300.0, 600),
                                ("train-short-rope-1", 120.0, 0), ("train-residual-concat-6-1", 1200.0, 0)):
        (logs / f"{name}.json").write_text(f'{{"steps": 1200, "wall_s": {wall}, "resumed_from_step": {resumed}}}')
    out = bench(tmp_path, "run_costs.py", "--logs", "logs")
    assert re.search(r"^the positional table +train@<variant>-<seed> +2 +0\.33 +10\.0$", out, re.M), out
    assert re.search(r"^the short-training protocol \(§3\.5\) +train_short@<variant>-<seed> +1 +0\.03 +2\.0$", out, re.M)
    assert re.search(r"^the residual study +train_residual@, train_residual_sum@ +1 +0\.33 +20\.0$", out, re.M)
    assert re.search(r"^every training +4 +0\.70$", out, re.M)
    assert "1 of the runs resumed from a checkpoint" in out
    r = run(tmp_path, "run_costs.py", "--logs", "nothing")
    assert r.returncode == 2 and "no train-*.json" in r.stderr


def test_residual_init_reads_the_pinned_runs_logs_where_dvc_lock_says_they_are():
    """The pinned run's logs are found through dvc.lock, so a fresh clone has them however dvc.yaml
    lays the outputs out (they once moved from models/ to results/residual/runs/ under a fixed path)."""
    spec = importlib.util.spec_from_file_location("residual_init", ROOT / "benchmarks/residual_init.py")
    residual_init = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(residual_init)
    dev, highway = residual_init.pinned(ROOT / "dvc.lock", "train_residual@concat-3-1",
                                        ("dev_log.tsv", "highway_log.tsv"))
    train = yaml.safe_load((ROOT / "params.yaml").read_text())["train"]
    ppl = residual_init.dev_ppl(dev)
    assert sorted(ppl) == list(range(train["dev_every"], train["max_steps"] + 1, train["dev_every"]))
    metrics = json.loads((dev.parent / "metrics.json").read_text())  # what evaluate_residual reported
    assert round(ppl[train["max_steps"]], 4) == metrics["dev_ppl"]
    assert all(half > 0 for half in residual_init.w_halves(highway))


def test_residual_init_trains_concat_from_xavier_beside_the_pinned_identity_start(tiny_data, tmp_path):
    shutil.copy(tiny_data / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "data").symlink_to(tiny_data / "data")
    stage = "train_residual@concat-1-1"
    r = run(tmp_path, "residual_init.py", "--layers", "1", "--seed", "1", "--out", "x")
    assert r.returncode == 2 and r.stderr.strip() == (
        "residual_init: dvc.lock: missing; run from the project root or pass --lock")
    # a lock as DVC writes it, the study's stage at 1 layer: the real one's paths, another item
    real = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]["train_residual@concat-3-1"]
    entry = {kind: [{"path": o["path"].replace("concat-3-1", "concat-1-1")} for o in real[kind]]
             for kind in ("deps", "outs")}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"prepare": {}}}))
    r = run(tmp_path, "residual_init.py", "--layers", "1", "--seed", "1", "--out", "x")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"residual_init: dvc.lock: {stage} is not pinned; run `dvc repro --single-item {stage}` first")
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {stage: entry}}))
    out = {Path(o["path"]).name: o["path"] for o in entry["outs"]}
    r = run(tmp_path, "residual_init.py", "--layers", "1", "--seed", "1", "--out", "x")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"residual_init: {out['dev_log.tsv']}: missing; `git checkout {out['dev_log.tsv']}`")
    r = posenc("train", "--variant", "sinusoidal", "--seed", "1", "--residual", "concat", "--layers", "1",
               "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays",
               *(arg for flag, name in (("--model", "model.pt"), ("--last", "last.pt"), ("--train-log", "train_log.tsv"),
                                        ("--dev-log", "dev_log.tsv"), ("--digests", "digests.json"),
                                        ("--highway", "highway_log.tsv")) for arg in (flag, out[name])),
               "--checkpoints", "ck", "--timings", "t.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = bench(tmp_path, "residual_init.py", "--layers", "1", "--seed", "1", "--out", "x")
    assert out.startswith("concat, 1 layer, seed 1: dev perplexity by update, W started at [I I] (the pinned "
                          "run) and at Xavier\n")
    rows = re.findall(r"^ +(\d+) +([\d.]+) +([\d.]+)$", out, re.M)
    assert rows and all(identity != xavier for _, identity, xavier in rows)  # the start changes the run
    halves = dict(re.findall(r"^W at the last update, (\w+) start: x half ([\d.]+)", out, re.M))
    assert set(halves) == {"identity", "xavier"} and halves["xavier"] != halves["identity"]
    assert "residual_init: xavier" in (tmp_path / "x/params.yaml").read_text()


PEERS = ROOT / ".venv-peers"  # make peers: fairseq and eole beside the pinned set (benchmarks/peers.lock)


def test_peers_trains_and_decodes_with_posenc_fairseq_and_eole_and_prints_every_figure(tiny_data, tiny_model):
    if not (PEERS / ".installed").is_file():
        why = f"{PEERS}: the peers extra is not installed; `make peers` installs fairseq and eole"
        if os.environ.get("CI"):  # .ci/run installs it first: never a silent skip there
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    r = subprocess.run([str(PEERS / "bin/python"), str(ROOT / "benchmarks/peers.py"), "--updates", "2", "--rounds",
                        "1", "--flop-batches", "1", "--model", "evalm/model.pt", "--raw", "data/raw/multi30k",
                        "--sentences", "6"], cwd=tiny_data, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert re.search(r"^\S+ family \d+ model \d+, numerics portable, 1 thread, torch [\w.+]+; GEMM peak [\d.]+ "
                     r"GFLOP/s \(the step's products alone\); [\d.]+ MFLOP a target token", out, re.M), out
    assert re.search(r"^training: params.yaml \(d_model 32, d_ff 64, 2 heads, 1\+1 layers, max_tokens 1024\), 2 "
                     r"updates a round, 1 rounds interleaved$", out, re.M)
    parameters = {}
    for toolkit in ("posenc", "fairseq", "eole"):
        m = re.search(rf"^  {toolkit} +median +\d+ target tokens/s \(min \d+, max \d+\) = \d+% of the peak, "
                      rf"[\d.]+x posenc's; \d+ target tokens an update; ([\d,]+) parameters; dev perplexity "
                      rf"([\d.]+) after 2 updates$", out, re.M)
        assert m, (toolkit, out)
        parameters[toolkit] = int(m[1].replace(",", ""))
    # the same model: fairseq adds biases to the 4 projections of each attention (1 encoder, 2 decoder),
    # eole's pre-norm decoder a final LayerNorm (d_model 32)
    assert parameters["fairseq"] - parameters["posenc"] == 4 * 32 * 3
    assert parameters["eole"] - parameters["posenc"] == 2 * 32
    assert re.search(r"^decoding: 6 val sentences of evalm/model.pt, beam 2, length penalty 0.6, limit source \+ 5, "
                     r"1 thread, 1 rounds; eole: not run \(its decoder layers are pre-norm only: it cannot hold "
                     r"this post-norm model\); [\d.]+ MFLOP a sentence \(torch's count of posenc's cached search, "
                     r"the work of every row\)$", out, re.M)
    for search in ("posenc, cached", "CTranslate2 float32", "fairseq"):
        assert re.search(rf"^  {search} +median +[\d.]+ sentences/s \(min [\d.]+, max [\d.]+\) = \d+% of the peak, "
                         rf"[\d.]+x posenc's; \d/6 outputs as posenc's; BLEU [\d.]+$", out, re.M), (search, out)


def test_peers_refuses_a_model_the_peers_cannot_build_and_an_environment_without_them(tiny_data, tmp_path):
    """Checked before any toolkit loads: runs in the pipeline's environment, without the extra."""
    params = tmp_path / "params.yaml"
    params.write_text((tiny_data / "params.yaml").read_text().replace("norm: post", "norm: pre"))
    r = run(tiny_data, "peers.py", "--params", str(params))
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        f"{params}: model.norm pre and model.residual sum: the peers build the paper's post-norm summed "
        f"residuals; use norm: post, residual: sum")
    r = run(tiny_data, "peers.py", "--toolkits", "posenc,eole")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        f"eole: not installed beside {sys.executable}; `make peers` installs them in .venv-peers: run "
        f".venv-peers/bin/python benchmarks/peers.py")
