"""`posenc verify` on what a user may hand it: every form of a run's name, a lock or a pinned file
that is corrupt or edited (one line each, naming the file and the fix), and an edit named as the
cause before the CPU is blamed. Its verdict on real pins is tests/test_portable.py's."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import yaml

from posenc import tokens
from posenc.decode import batches

from conftest import MIRROR, posenc

RUN = "sinusoidal-1"
CMD = (f"python -m posenc train --variant sinusoidal --seed 1 --spm data/prepared/spm.model "
       f"--arrays data/prepared/arrays --model vpins/{RUN}/model.pt --last vpins/{RUN}/last.pt "
       f"--train-log vpins/{RUN}/train_log.tsv --dev-log vpins/{RUN}/dev_log.tsv "
       f"--checkpoints checkpoints/v{RUN} --timings logs/vpins-{RUN}.json --digests vpins/{RUN}/digests.json "
       f"--highway vpins/{RUN}/highway_log.tsv")


@pytest.fixture(scope="module")
def pinned(tiny_data):
    """A tiny run trained as dvc.lock's command says, and the lock's text for it."""
    if not (tiny_data / f"vpins/{RUN}/digests.json").is_file():
        r = subprocess.run([sys.executable, *CMD.split()[1:]], cwd=tiny_data, capture_output=True, text=True,
                           env={**os.environ, "POSENC_DATA_MIRROR": str(MIRROR)})
        assert r.returncode == 0, r.stderr[-2000:]
    digests = tiny_data / f"vpins/{RUN}/digests.json"
    md5 = hashlib.md5(digests.read_bytes()).hexdigest()
    return (f"schema: '2.0'\nstages:\n  train@{RUN}:\n    cmd: {CMD}\n    params:\n      params.yaml:\n"
            f"        train.lr_scale: 1.0\n    outs:\n    - path: vpins/{RUN}/digests.json\n      md5: {md5}\n")


def verify(work, *args):
    return posenc("verify", *args, "--sentences", "0", cwd=work)


def one_line(r) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    # what verify itself says: one line, and no warning (the retraining's progress bars aside)
    lines = [line for line in r.stderr.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
    assert len(lines) == 1 and lines[0].startswith("posenc verify: error: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("text, said", [
    ("stages: [unclosed\n", "v.lock: not a DVC lock file (ParserError)"),
    ("- a\n- b\n", "v.lock: no mapping of stages"),
    ("stages: 5\n", "v.lock: no mapping of stages"),
    (f"stages:\n  train@{RUN}:\n    deps: []\n", f"v.lock: train@{RUN}'s cmd runs no `posenc train`"),
    (f"stages:\n  train@{RUN}:\n    cmd: echo hello\n", f"v.lock: train@{RUN}'s cmd runs no `posenc train`"),
    (f"stages:\n  train@{RUN}:\n    cmd: python -m posenc train --variant 'sin\n",
     f"v.lock: train@{RUN}'s cmd is not a command line (No closing quotation)"),
])
def test_a_corrupt_lock_is_one_line(tiny_data, text, said):
    (tiny_data / "v.lock").write_text(text)
    line = one_line(verify(tiny_data, RUN, "--lock", "v.lock"))
    assert said in line and "`git checkout dvc.lock` restores the committed one" in line, line


def test_a_lock_that_is_not_utf8_is_one_line(tiny_data):
    (tiny_data / "v.lock").write_bytes(b"stages:\n  caf\xe9: 1\n")
    assert "v.lock: not a DVC lock file (UnicodeDecodeError)" in one_line(verify(tiny_data, RUN, "--lock", "v.lock"))


@pytest.mark.parametrize("content, said", [
    ('{"checkpoints": [', "not valid JSON"), ("", "not valid JSON"), ("[]", "not the digests train writes"),
    ('{"checkpoints": [{"step": 8, "sha256": "x"}]}', "not the digests train writes"),
    ('{"checkpoints": [{"step": 8, "sha256": "x"}], "numerics": {"mode": "fast"}}', "not the digests train writes"),
])
def test_corrupt_digests_are_one_line(tiny_data, pinned, content, said):
    (tiny_data / "v.lock").write_text(pinned.replace(f"vpins/{RUN}/digests.json", "vpins/bad-digests.json"))
    (tiny_data / "vpins/bad-digests.json").write_text(content)
    line = one_line(verify(tiny_data, RUN, "--lock", "v.lock"))
    assert f"vpins/bad-digests.json: {said}" in line and "git checkout" in line, line


@pytest.mark.parametrize("name", [RUN, f"train@{RUN}", f"evaluate@{RUN}", f"measure@{RUN}"])
def test_every_form_of_a_runs_name_finds_its_pins(tiny_data, pinned, name):
    (tiny_data / "v.lock").write_text(pinned)
    r = verify(tiny_data, name, "--lock", "v.lock")
    assert r.returncode == 0 and r.stdout.startswith(f"verify: this machine reproduces the pinned bits of {name}"), (
        r.stdout + r.stderr[-2000:])


def test_the_residual_and_short_forms_name_their_own_training(tiny_data):
    (tiny_data / "v.lock").write_text("stages:\n  train_residual@concat-1-1:\n    cmd: python -m posenc train "
                                      "--variant sinusoidal --seed 1\n  train_short@rope-2:\n    cmd: python -m "
                                      "posenc train --variant rope --seed 2\n")
    for name in ("concat-1-1", "residual-concat-1-1", "train_residual@concat-1-1", "evaluate_residual@concat-1-1"):
        assert "v.lock: train_residual@concat-1-1 was pinned before posenc recorded digests" in one_line(
            verify(tiny_data, name, "--lock", "v.lock")), name
    for name in ("short-rope-2", "train_short@rope-2", "evaluate_short@rope-2"):
        assert "v.lock: train_short@rope-2 was pinned before" in one_line(verify(tiny_data, name, "--lock", "v.lock"))


def test_an_edited_digest_and_an_edited_param_are_named_before_the_cpu(tiny_data, pinned, tmp_path):
    digests = tiny_data / f"vpins/{RUN}/digests.json"
    original = digests.read_text()
    edited = json.loads(original)
    edited["checkpoints"][0]["sha256"] = "0" * 64
    params = (tiny_data / "params.yaml").read_text()
    try:
        digests.write_text(json.dumps(edited))
        (tiny_data / "params.yaml").write_text(params.replace("lr_scale: 1.0", "lr_scale: 1.5", 1))
        (tiny_data / "v.lock").write_text(pinned)
        r = verify(tiny_data, RUN, "--lock", "v.lock")
        assert r.returncode == 1, r.stdout + r.stderr[-2000:]
        cause = r.stdout.split("likely cause: ", 1)[1]
        assert cause.startswith(f"params.yaml's train.lr_scale is 1.5 here, 1.0 in dvc.lock's train@{RUN} "
                                f"(`git checkout params.yaml`); vpins/{RUN}/digests.json is not the file "
                                f"dvc.lock's train@{RUN} records"), cause
        assert "the CPU's arithmetic" not in cause
    finally:
        digests.write_text(original)
        (tiny_data / "params.yaml").write_text(params)


def test_a_dev_log_with_a_non_numeric_step_is_one_line(tiny_data, pinned):
    dev_log = tiny_data / f"vpins/{RUN}/dev_log.tsv"
    original = dev_log.read_text()
    try:
        dev_log.write_text(original + "eight\t1.0\t2.0\n")
        (tiny_data / "v.lock").write_text(pinned)
        line = one_line(verify(tiny_data, RUN, "--lock", "v.lock"))
        assert f"vpins/{RUN}/dev_log.tsv: a row whose step is not a number ('eight')" in line
    finally:
        dev_log.write_text(original)


def test_a_train_log_cut_to_one_column_is_named_before_the_cpu(tiny_data, pinned):
    """Issue 49: a pinned train log of one column is the edited file, never the CPU's arithmetic."""
    log = tiny_data / f"vpins/{RUN}/train_log.tsv"
    original = log.read_text()
    lock = pinned + f"    - path: vpins/{RUN}/train_log.tsv\n      md5: {hashlib.md5(log.read_bytes()).hexdigest()}\n"
    try:
        log.write_text("".join(line.split("\t")[0] + "\n" for line in original.splitlines()))
        (tiny_data / "v.lock").write_text(lock)
        r = verify(tiny_data, RUN, "--lock", "v.lock")
        assert r.returncode == 1, r.stdout + r.stderr[-2000:]
        cause = r.stdout.split("likely cause: ", 1)[1]
        assert cause.startswith(f"vpins/{RUN}/train_log.tsv is not the file dvc.lock's train@{RUN} records "
                                f"(`git checkout vpins/{RUN}/train_log.tsv`)"), cause
        assert "the CPU's arithmetic" not in cause
    finally:
        log.write_text(original)


EVALUATE = (f"posenc evaluate --seed 1 --model vpins/{RUN}/model.pt --last vpins/{RUN}/last.pt "
            f"--spm data/prepared/spm.model --arrays data/prepared/arrays --raw data/raw/multi30k "
            f"--metrics vpins/{RUN}/metrics.json --scores vpins/{RUN}/scores.json "
            f"--signatures vpins/{RUN}/signatures.json --hyps vpins/{RUN}/hyps")


@pytest.mark.parametrize("content, said", [
    (b"", "a hypothesis for only 0 of the "),
    (b"ein Mann\n", "a hypothesis for only 1 of the "),
    (b"ein Mann\nein Caf\xe9\n", "not UTF-8 text"),
])
def test_pinned_dev_hypotheses_cut_short_or_not_utf8_are_one_line(tiny_data, pinned, content, said):
    """Issue 49: the pinned hypotheses verify compares its decoding with, damaged: one line naming
    the file and `git checkout`, never an IndexError or the CPU blamed, and before the minutes of
    retraining (no training progress printed)."""
    hyps = tiny_data / f"vpins/{RUN}/hyps"
    hyps.mkdir(exist_ok=True)
    (hyps / "val.de").write_bytes(content)
    (tiny_data / "v.lock").write_text(pinned + f"  evaluate@{RUN}:\n    cmd: {EVALUATE}\n")
    r = posenc("verify", RUN, "--lock", "v.lock", "--sentences", "2", cwd=tiny_data)
    assert "%|" not in r.stderr, r.stderr[-2000:]
    line = one_line(r)
    assert f"vpins/{RUN}/hyps/val.de: {said}" in line and f"`git checkout vpins/{RUN}/hyps/val.de`" in line, line


def test_a_short_run_is_redecoded_with_the_model_its_lengths_stage_scored(tiny_data, pinned):
    """§3.5's short runs are evaluated by `posenc lengths` (dvc.yaml's evaluate_short), which
    decodes every split with the averaged model.pt: verify re-decodes dev with those weights and
    compares with that stage's hypotheses, instead of refusing the unit for running no `posenc
    evaluate` (the command docs/reproducibility.md gives, `posenc verify short-rope-1`, failed so)."""
    lengths = (f"posenc lengths --seed 1 --model vpins/{RUN}/model.pt --spm data/prepared/spm.model "
               f"--arrays data/prepared/arrays --raw data/raw/multi30k --out vpins/short/lengths.json "
               f"--hyps vpins/short/hyps")
    r = posenc(*lengths.split()[1:], cwd=tiny_data)
    assert r.returncode == 0, r.stderr[-2000:]
    train = pinned.replace(f"  train@{RUN}:", f"  train_short@{RUN}:")
    (tiny_data / "v.lock").write_text(train + f"  evaluate_short@{RUN}:\n    cmd: {lengths}\n")
    # the batches translate makes of the first 3 val sentences, every sentence of them compared
    sp = tokens.load_tokenizer(tiny_data / "data/prepared/spm.model")
    cfg = yaml.safe_load((tiny_data / "params.yaml").read_text())["eval"]
    val = tokens.load(tokens.array_path(tiny_data / "data/prepared/arrays", "val", "en"), sp.eos_id())
    val = val[:cfg["max_sentences"]]
    decoded = sorted(i for idx in batches(val, cfg["beam"], cfg["batch_tokens"]) if {0, 1, 2} & set(idx) for i in idx)
    assert len(decoded) > 3
    r = posenc("verify", f"short-{RUN}", "--lock", "v.lock", "--sentences", "3", cwd=tiny_data)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert r.stdout.startswith(f"verify: this machine reproduces the pinned bits of short-{RUN} (update 8, "), r.stdout
    assert r.stdout.strip().endswith(f", and {len(decoded)} of its {len(val)} dev hypotheses (every batch "
                                     f"that holds one of the first 3)"), r.stdout

    hyps = tiny_data / "vpins/short/hyps/val.de"
    lines = hyps.read_text(encoding="utf-8").split("\n")
    for i in (0, decoded[-1]):  # one of the first 3, and one only its batch brought (an empty output too)
        hyps.write_text("\n".join(lines[:i] + ["ein anderer Satz"] + lines[i + 1:]), encoding="utf-8")
        r = posenc("verify", f"short-{RUN}", "--lock", "v.lock", "--sentences", "3", cwd=tiny_data)
        assert r.returncode == 1, r.stdout + r.stderr[-2000:]
        assert f"reproduces the training bits of short-{RUN}" in r.stdout, r.stdout
        assert f"but not its decoding: val sentence {i + 1}: {lines[i]!r} here, 'ein anderer Satz' pinned" in r.stdout, r.stdout

    # the weights it compares are lengths' --model: recorded with another md5, the hypotheses are not theirs
    (tiny_data / "v.lock").write_text(train + f"  evaluate_short@{RUN}:\n    cmd: {lengths}\n    deps:\n"
                                      f"    - path: vpins/{RUN}/model.pt\n      md5: {'0' * 32}\n")
    r = posenc("verify", f"short-{RUN}", "--lock", "v.lock", "--sentences", "3", cwd=tiny_data)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert r.stdout.strip().endswith(f"decoded from another vpins/{RUN}/model.pt than the one here "
                                     f"(evaluate_short@{RUN} is stale: `dvc repro evaluate_short@{RUN}`), "
                                     f"so decoding was not compared"), r.stdout
