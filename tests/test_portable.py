"""Portable numerics (posenc.numerics): the same bits on Intel and AMD, proved by digests.

The digests below were made on one vendor's machine and must come out on the other's: a run of
the tiny profile for three variants (one summed table, one rotation, one bias with values), its
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

# Made on: AMD EPYC (AuthenticAMD, family 25, model 17, AVX2 without AVX-512), torch 2.13.0+cpu,
# MKL 2024.2, at the commit that added this file.
DIGESTS = {
    "sinusoidal": {
        "step 40": "e404fed8c2d9fb6f081c0bd8f0c17dee6886761cea0a3f3ea96c90e27ff2311c",
        "step 80": "b7ce199bb27de0ae1e409169c4d37d7b4828d08c27eb777570ea10e6b907df4d",
        "step 120": "766cd51a8a836771b97df00405042103f3bb976b5bd8f2a23758453a64c3a043",
        "averaged model": "0730e840030381c91ea3a4c56cd6e9f0c362dfddbd087572ab77b639bcf828a6",
        "train_log.tsv": "072ae553deec0cbb8c08270dafc60596b003d68a47e28c885556bd56dbb96d04",
        "hypotheses": "c652845132f8f60a2c4262c61d9111d5b0029ebd0cd7e058c3b1164ee71be0e8",
    },
    "rope": {
        "step 40": "891769d3127aed007fcd20aa515221bd9d33eff64a2f0c1d2ab655cda03884b6",
        "step 80": "221c28f79d626b6d8ed2ecdc66e6b2b1252f586154c108b49a4e5ad49bc5b752",
        "step 120": "40b932e4093f17e4b905bae778022b42fb531ab1f67c6b9a77781485588f67d7",
        "averaged model": "b3ec7895a94e1f5d5ecc6bcc4f9d0331839910cdb056d798b63ea18f1121ce96",
        "train_log.tsv": "911d4bd8d1dde7aa5e22303c361fcd7e5d309365b0e26c6c75731dcb1f8f2f18",
        "hypotheses": "23b8d968a1cd73e74e1fca0ef3c7c4f1d0ecccd6d94dff8e275044d4c0f24788",
    },
    "relative": {
        "step 40": "3dc28618c0ea3c800bc5d0c2ac01b126cd9cf8b65a1ecf64ca61bdea98d65f2a",
        "step 80": "e7bc82fb879b7f5523b87d08428a4f13dd09e683794bc378201ebc53e2df4438",
        "step 120": "0d0c6381f04a80aea422ea74bc5947f21e8ae5b22fd8cab7bad7d986d1d6a19b",
        "averaged model": "8909aa16ea3305f80664e3dbab7ebcc8e1f0d1eebd392e5d5214c54959f96680",
        "train_log.tsv": "a1dbbced1304d84f8eabad635b67b8e597ab62427507216145d44b6e525e0446",
        "hypotheses": "0e92c12e64622096b7804eeab03328a60eaa8af8d11ff3d63d5bb0c95a1dbf5f",
    },
}
SENTENCES = 20  # val sentences decoded per run
# The tiny profile trained 120 updates instead of 24, so that its models output words (at 24 they
# output an empty line for every input, and the hypotheses would test nothing).
LONGER = {"max_steps: 24": "max_steps: 120", "warmup: 8": "warmup: 40", "save_every: 8": "save_every: 40",
          "dev_every: 8": "dev_every: 40"}


def train_and_decode(work, variant: str) -> dict[str, str]:
    name = f"portable-{variant}"
    text = (work / "params.yaml").read_text(encoding="utf-8")
    for old, new in LONGER.items():
        assert old in text
        text = text.replace(old, new)
    (work / "portable.yaml").write_text(text, encoding="utf-8")
    r = posenc("train", "--params", "portable.yaml", "--variant", variant, "--seed", "1", "--spm", "data/prepared/spm.model",
               "--arrays", "data/prepared/arrays", "--model", f"{name}/model.pt", "--last", f"{name}/last.pt",
               "--train-log", f"{name}/train_log.tsv", "--dev-log", f"{name}/dev_log.tsv",
               "--checkpoints", f"ck/{name}", "--timings", f"logs/{name}.json",
               "--digests", f"{name}/digests.json", cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    val = (work / "data/raw/multi30k/val.en").read_text(encoding="utf-8").split("\n")[:SENTENCES]
    (work / f"{name}/val.en").write_text("\n".join(val) + "\n", encoding="utf-8")
    r = posenc("translate", "--params", "portable.yaml", "--model", f"{name}/model.pt", "--spm", "data/prepared/spm.model",
               "-i", f"{name}/val.en", "-o", f"{name}/val.de", cwd=work)
    assert r.returncode == 0, r.stderr[-2000:]
    pinned = json.loads((work / f"{name}/digests.json").read_text())
    model = torch.load(work / f"{name}/model.pt", weights_only=True)["model"]
    return {**{f"step {c['step']}": c["sha256"] for c in pinned["checkpoints"]},
            "averaged model": checkpoints.weights_digest(model),
            "train_log.tsv": hashlib.sha256((work / f"{name}/train_log.tsv").read_bytes()).hexdigest(),
            "hypotheses": hashlib.sha256((work / f"{name}/val.de").read_bytes()).hexdigest()}


@pytest.mark.parametrize("variant", list(DIGESTS))
def test_portable_bits_equal_the_committed_digests(tiny_data, variant):
    got = train_and_decode(tiny_data, variant)
    assert (tiny_data / f"portable-{variant}/val.de").read_text().count("\n\n") < SENTENCES // 2
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
           f"--checkpoints checkpoints/{run} --timings logs/pins-{run}.json --digests pins/{run}/digests.json")
    lock = tiny_data / "verify.lock"
    lock.write_text(f"schema: '2.0'\nstages:\n  train@{run}:\n    cmd: {cmd}\n", encoding="utf-8")
    r = subprocess.run([sys.executable, *cmd.split()[1:]], cwd=tiny_data, capture_output=True, text=True,
                       env={**os.environ, "POSENC_DATA_MIRROR": str(MIRROR)})
    assert r.returncode == 0, r.stderr[-2000:]
    first = json.loads((tiny_data / f"pins/{run}/digests.json").read_text())["checkpoints"][0]

    r = posenc("verify", run, "--lock", "verify.lock", cwd=tiny_data)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == (f"verify: this machine reproduces the pinned bits of {run} (update "
                                f"{first['step']}, sha256 {first['sha256']}); its models are not here "
                                f"(`dvc pull`), so decoding was not compared")

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
        "there is nothing to compare with; the pins are regenerated by `make repro`"]
    r = posenc("verify", "y-1", "--lock", "old.lock", cwd=tiny_data)
    assert r.stderr.strip() == "posenc verify: error: old.lock: no stage train@y-1; pinned runs: x-1"


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
                             "--checkpoints", "--timings", "--digests") for x in (o, "unused")), cwd=tiny_data)
    assert r.returncode == 2
    assert r.stderr.strip() == ("posenc train: error: bad_numerics.yaml: numerics: 'fast' is not one of "
                                "'portable', 'native'")
