"""Portable numerics (posenc.numerics): the same bits on Intel and AMD, proved by digests.

The digests below were made on one vendor's machine and must come out on the other's: a run of
the tiny profile (conftest's `longer`: 120 updates) for three variants (one summed table, one rotation, one bias with values), its
weights after every checkpoint and after averaging, and the hypotheses its model decodes. README
(Reproducibility) lists the CPU models on which this test has passed. When the training or
decoding code changes on purpose, the digests change with it: the failure message prints the new
ones, and README's list starts again from the machine that made them.

Also here: `posenc verify` on a pinned tiny run, and the one-line warnings where portable bits
cannot hold.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

from posenc import checkpoints

from conftest import MIRROR, ROOT, posenc

# Made on: AMD EPYC (AuthenticAMD, family 25, model 17, AVX-512 exposed), torch 2.13.0+cpu, MKL
# 2024.2, at the commit that fused the projection into the loss and Adam's step (issue 32).
DIGESTS = {
    "sinusoidal": {
        "step 40": "43394fd52cd12dcca94554fa48d6a5c32659a33cacc12c8b7891975431248b58",
        "step 80": "071629b8101683a411cc265875eae09076dedca58b2525ec4e33d803abd016c4",
        "step 120": "964c1cbb1b392801148acf927f8e00cabeb90afe904ee4a183d5b5ec51f79b42",
        "averaged model": "b03b07c6fe6bf343cec773af16a064c20d20fe4e462973c71f7576cfc9512626",
        "train_log.tsv": "acf7e8a8fbaa877d7eee8c58fb98ae4adeba2978bac7daf44392415108124165",
        "hypotheses": "aa77209783da432241bcdf1d97bb7a3ba1b748c3d4a7feae262beae5949e882b",
    },
    "rope": {
        "step 40": "1665cac8762d4888c2178defc0f70ad701ce1278018df0d94a0efc9bbde2d7d6",
        "step 80": "f7c0a26ff5fb1acab930af7846816d174a35ec079f02edfaa2876fd465ec877a",
        "step 120": "13b3d082a240575dc84252cd80402f9dc2349dbab1acf05c4729eca930998186",
        "averaged model": "29f16a4582a9bad4dfb1a2a3d436b73280b989a67a3ba7a0926bd46f5d189a40",
        "train_log.tsv": "92ca1e9a1db3609af495a0159529b7869574371cef800e17aea56b815616a21f",
        "hypotheses": "04bdcb95bcc5a6e810097ba409d4efe0fbeb1ba1e497a6ab6dc3362d6e0ac0fe",
    },
    "relative": {
        "step 40": "2d09680226be0e03837afdfc3901f428a0ad85f84d06ab4a11bf65de1d844cae",
        "step 80": "41d9dba1967088fde9c19e1677cbf49f65ea7f7109a05091e76a62dd89afd570",
        "step 120": "feeae98ec79e04a71db2d7c4f9cc639fd149ba48f7a4406e3b75493aede7cc62",
        "averaged model": "48ef67d6cdc4a40d19117d0d249019bd907f5636d2155aa06a49e193e73dee8b",
        "train_log.tsv": "1ce22b2c7f90be3d85a089d5ea66e3361da9ed5002852814cb62bffa4e6509cb",
        "hypotheses": "77b60d0f6e588c92b93b891ba65b984f6c24f763ac34bd22526616e0e3b597cc",
    },
}
SENTENCES = 20  # val sentences decoded per run


def train_and_decode(work, longer, variant: str) -> dict[str, str]:
    run = longer(variant)
    name = run.name
    val = (work / "data/raw/multi30k/val.en").read_text(encoding="utf-8").split("\n")[:SENTENCES]
    (run / "val.en").write_text("\n".join(val) + "\n", encoding="utf-8")
    r = posenc("translate", "--params", "longer.yaml", "--model", f"{name}/model.pt", "--spm",
               "data/prepared/spm.model", "-i", f"{name}/val.en", "-o", f"{name}/val.de", cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    pinned = json.loads((run / "digests.json").read_text())
    model = torch.load(run / "model.pt", weights_only=True)["model"]
    return {**{f"step {c['step']}": c["sha256"] for c in pinned["checkpoints"]},
            "averaged model": checkpoints.weights_digest(model),
            "train_log.tsv": hashlib.sha256((run / "train_log.tsv").read_bytes()).hexdigest(),
            "hypotheses": hashlib.sha256((run / "val.de").read_bytes()).hexdigest()}


@pytest.mark.parametrize("variant", list(DIGESTS))
def test_portable_bits_equal_the_committed_digests(tiny_data, longer, variant):
    got = train_and_decode(tiny_data, longer, variant)
    assert (tiny_data / f"longer-{variant}/val.de").read_text().count("\n\n") < SENTENCES // 2
    assert got == DIGESTS[variant], (
        f"{variant}: this machine's portable bits differ from the committed ones "
        f"({os.uname().machine}); the digests here:\n{json.dumps(got, indent=4)}")


def test_verify_says_reproduces_and_names_the_first_difference_in_another_mode(tiny_data):
    """A pinned tiny run (dvc.lock's command, as DVC writes it): verify reproduces it in its own
    mode, and in native mode names what differs and why (native takes other code paths: MKL's
    own for the vendor, or AVX-512, wherever the machine has them)."""
    run = "sinusoidal-1"
    cmd = (f"python -m posenc train --variant sinusoidal --seed 1 --spm data/prepared/spm.model "
           f"--arrays data/prepared/arrays --model pins/{run}/model.pt --last pins/{run}/last.pt "
           f"--train-log pins/{run}/train_log.tsv --dev-log pins/{run}/dev_log.tsv "
           f"--checkpoints checkpoints/{run} --timings logs/pins-{run}.json --digests pins/{run}/digests.json --highway pins/{run}/highway_log.tsv")
    lock = tiny_data / "verify.lock"
    lock.write_text(f"schema: '2.0'\nstages:\n  train@{run}:\n    cmd: {cmd}\n", encoding="utf-8")
    r = subprocess.run([sys.executable, *cmd.split()[1:]], cwd=tiny_data, capture_output=True, text=True,
                       env={**os.environ, "POSENC_DATA_MIRROR": str(MIRROR)})
    assert r.returncode == 0, r.stderr[-2000:]
    first = json.loads((tiny_data / f"pins/{run}/digests.json").read_text())["checkpoints"][0]

    r = posenc("verify", run, "--lock", "verify.lock", cwd=tiny_data)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == (f"verify: this machine reproduces the pinned bits of {run} (update "
                                f"{first['step']}, sha256 {first['sha256']}); dvc.lock pins no evaluation "
                                f"of it, so decoding was not compared")

    # Its evaluation pinned from another last.pt (a pinning run under way, before its evaluate
    # stage): the pinned hypotheses are not this model's, and verify says so instead of blaming
    # the CPU for the difference.
    (tiny_data / f"pins/{run}/hyps").mkdir()
    (tiny_data / f"pins/{run}/hyps/val.de").write_text("an older model's hypothesis\n", encoding="utf-8")
    evaluate = (f"posenc evaluate --seed 1 --model pins/{run}/model.pt --last pins/{run}/last.pt "
                f"--spm data/prepared/spm.model --arrays data/prepared/arrays --raw data/raw/multi30k "
                f"--metrics pins/{run}/metrics.json --scores pins/{run}/scores.json "
                f"--signatures pins/{run}/signatures.json --hyps pins/{run}/hyps")
    (tiny_data / "stale.lock").write_text(
        lock.read_text(encoding="utf-8") + f"  evaluate@{run}:\n    cmd: {evaluate}\n    deps:\n"
        f"    - path: pins/{run}/last.pt\n      md5: 0123456789abcdef0123456789abcdef\n", encoding="utf-8")
    r = posenc("verify", run, "--lock", "stale.lock", cwd=tiny_data)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert r.stdout.strip().endswith(f"; its pinned dev hypotheses were decoded from another pins/{run}/last.pt "
                                     f"than the one here (evaluate@{run} is stale: `dvc repro evaluate@{run}`), "
                                     f"so decoding was not compared"), r.stdout

    r = posenc("verify", run, "--lock", "verify.lock", "--numerics", "native", cwd=tiny_data)
    assert r.returncode == 1, r.stderr[-2000:]
    line = r.stdout.strip()
    assert line.startswith(f"verify: this machine does not reproduce the pinned bits of {run}: "), line
    assert "update " in line and "likely cause: numerics mode: native here, portable pinned" in line, line
    assert "params differ" not in line  # the mode is the numerics fingerprint's, not the settings'


def test_verify_refuses_a_run_without_digests_in_one_line(tiny_data):
    (tiny_data / "old.lock").write_text("stages:\n  train@x-1:\n    cmd: python -m posenc train --variant "
                                        "sinusoidal --seed 1\n", encoding="utf-8")
    r = posenc("verify", "x-1", "--lock", "old.lock", cwd=tiny_data)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "posenc verify: error: old.lock: train@x-1 was pinned before posenc recorded digests, so "
        "there is nothing to compare with; the pins are regenerated by `make pin`"]
    r = posenc("verify", "y-1", "--lock", "old.lock", cwd=tiny_data)
    assert r.stderr.strip() == "posenc verify: error: old.lock: no training of y-1 is pinned; pinned: train@x-1"


WARNING = "posenc: warning: numerics portable: portable bits cannot hold: "


def warnings_of(code: str, env: dict | None = None) -> list[str]:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return [line for line in r.stderr.splitlines() if line.startswith("posenc: warning:")]


def test_portable_mode_sets_the_caps_before_torch_and_warns_for_nothing_here():
    code = ("from posenc import numerics; numerics.apply('portable'); import torch, os; "
            "print(torch.backends.cpu.get_cpu_capability(), os.environ['MKL_CBWR'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.split() == ["AVX2", "AVX2,STRICT"], r.stderr
    assert r.stderr == ""  # this x86-64 machine has AVX2 (and a C compiler where MKL needs its shim)


def test_torch_imported_first_is_said_in_one_line():
    got = warnings_of("import torch; from posenc import numerics; numerics.apply('portable')")
    assert got == [WARNING + "torch was imported before posenc set the numerics; this run computes with "
                   "whatever its importer set (run posenc from its own command line)"]


@pytest.mark.parametrize("cpu, expected", [
    ({"arch": "aarch64", "vendor": "", "family": "", "model": "", "avx2": "no"},
     "this is a aarch64 CPU; the portable bits are those of x86-64 CPUs with AVX2, and here match "
     "only CPUs of this kind"),
    ({"arch": "x86_64", "vendor": "GenuineIntel", "family": "6", "model": "58", "avx2": "no"},
     "this x86-64 CPU has no AVX2, the instruction set of the portable bits; MKL and ATen fall back "
     "to older code with other sums"),
])
def test_a_cpu_without_the_portable_instruction_set_is_said_in_one_line(cpu, expected):
    code = (f"from posenc import numerics; numerics.cpu = lambda: {cpu!r}; numerics.apply('portable')")
    assert warnings_of(code) == [WARNING + expected]


def test_no_compiler_for_the_mkl_shim_is_said_in_one_line(tmp_path):
    code = ("from posenc import numerics; numerics.cpu = lambda: {'arch': 'x86_64', 'vendor': "
            "'AuthenticAMD', 'family': '25', 'model': '17', 'avx2': 'yes'}; numerics.apply('portable')")
    got = warnings_of(code, {"PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)})
    assert got == [WARNING + "no C compiler (cc) to build MKL's vendor shim, so MKL runs its own path "
                   "for this vendor: install one (apt-get install gcc)"]


def test_a_gpu_is_said_in_one_line():
    code = ("from posenc import numerics; numerics.apply('portable'); import torch; "
            "torch.cuda.is_available = lambda: True; numerics.check('portable')")
    assert warnings_of(code) == [
        "posenc: warning: numerics portable: on a GPU the bits are the same only on the same GPU "
        "model, driver and CUDA/cuDNN versions; the CPU settings cover CPU arithmetic"]


def test_a_bad_numerics_value_is_one_line(tiny_data):
    text = (tiny_data / "params.yaml").read_text().replace("numerics: portable", "numerics: fast")
    (tiny_data / "bad_numerics.yaml").write_text(text)
    r = posenc("train", "--params", "bad_numerics.yaml", "--variant", "sinusoidal", "--seed", "1",
               *(x for o in ("--spm", "--arrays", "--model", "--last", "--train-log", "--dev-log",
                             "--checkpoints", "--timings", "--digests", "--highway") for x in (o, "unused")), cwd=tiny_data)
    assert r.returncode == 2
    assert r.stderr.strip() == ("posenc train: error: bad_numerics.yaml: numerics: 'fast' is not one of "
                                "'portable', 'native'")
