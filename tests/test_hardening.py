"""Issue 49's cases that the train and evaluation code answers: one line, a non-zero exit, and
every file as it was. (The aggregates' cases are in their own tests: test_residuals, test_analysis.)"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import SMALL, error_line, posenc
from posenc import checkpoints, model, tokens
from posenc.cli import STAGES
from posenc.config import ModelConfig
from posenc.errors import UserError


def snapshot(root):
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_an_absurd_depth_is_refused_before_anything_is_built():
    """`posenc train --residual concat --layers 100000` hung, its memory growing, while the check
    built the layers on the meta device: two layers are built, whatever the depth."""
    start = time.monotonic()
    with pytest.raises(UserError, match=r"params.yaml: model.layers \(100,000\) makes a model whose training "
                                        r"state .* needs about [\d.,]+ GiB, more than this machine's"):
        model.check(dataclasses.replace(SMALL, residual="concat", layers=100_000))
    assert time.monotonic() - start < 30
    model.check(dataclasses.replace(SMALL, residual="concat", layers=6))  # a real depth passes


def test_train_with_an_absurd_depth_is_one_line(tiny_data):
    r = subprocess.run([sys.executable, "-m", "posenc", "train", "--variant", "sinusoidal", "--seed", "1",
                        "--residual", "concat", "--layers", "100000", "--spm", "data/prepared/spm.model",
                        "--arrays", "data/prepared/arrays", "--model", "deep/model.pt", "--last", "deep/last.pt",
                        "--train-log", "deep/t.tsv", "--dev-log", "deep/d.tsv", "--checkpoints", "ck/deep",
                        "--timings", "logs/deep.json", "--digests", "deep/g.json", "--highway", "deep/h.tsv"],
                       cwd=tiny_data, capture_output=True, text=True, timeout=120)
    assert "model.layers (100,000)" in error_line(r, "train")
    assert not (tiny_data / "deep").exists()


@pytest.fixture
def foreign_vocabulary(tiny_data, tiny_model, tmp_path):
    """The tiny model, saved as if trained with a SentencePiece model of other pieces."""
    saved = torch.load(tiny_model, weights_only=True)
    config = dataclasses.replace(ModelConfig.from_dict(saved["config"]), vocabulary="0" * 64)
    path = tiny_data / "foreign/model.pt"
    checkpoints.save_model(path, config, saved["model"])
    shutil.copy(path, tiny_data / "foreign/last.pt")
    yield "foreign/model.pt"
    shutil.rmtree(path.parent)


def test_the_model_records_its_vocabulary(tiny_data, tiny_model):
    saved = torch.load(tiny_model, weights_only=True)
    sp = tokens.load_tokenizer(tiny_data / "data/prepared/spm.model")
    assert saved["config"]["vocabulary"] == tokens.vocabulary_digest(sp)


def test_a_sentencepiece_model_of_other_pieces_is_refused_wherever_both_are_read(tiny_data, foreign_vocabulary):
    r = subprocess.run([sys.executable, "-m", "posenc", "translate", "--model", foreign_vocabulary, "--spm",
                        "data/prepared/spm.model"], cwd=tiny_data, input="A man.\n", capture_output=True, text=True)
    line = error_line(r, "translate")
    assert line == ("posenc translate: error: data/prepared/spm.model: not the SentencePiece model that "
                    "foreign/model.pt was trained with (other pieces); pass the --spm of its training run "
                    "(dvc.lock's train stage names it)")
    assert r.stdout == ""
    before = snapshot(tiny_data / "foreign")
    r = posenc("evaluate", "--seed", "1", "--model", foreign_vocabulary, "--last", "foreign/last.pt",
               "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays", "--raw", "data/raw/multi30k",
               "--metrics", "foreign/m.json", "--scores", "foreign/s.json", "--signatures", "foreign/g.json",
               "--hyps", "foreign/hyps", cwd=tiny_data)
    assert "not the SentencePiece model that foreign/model.pt was trained with" in error_line(r, "evaluate")
    assert snapshot(tiny_data / "foreign") == before


def test_arrays_beyond_the_models_vocabulary_are_one_line(tiny_data, tiny_model, tmp_path):
    arrays = tmp_path / "arrays"
    shutil.copytree(tiny_data / "data/prepared/arrays", arrays)
    flat = np.load(arrays / "val.en.npy")
    flat[0] = 999  # beyond the tiny vocabulary of 400
    np.save(arrays / "val.en.npy", flat.astype(np.int32))
    r = posenc("lengths", "--seed", "1", "--model", "evalm/model.pt", "--spm", "data/prepared/spm.model",
               "--arrays", str(arrays), "--raw", "data/raw/multi30k", "--out", str(tmp_path / "l.json"),
               "--hyps", str(tmp_path / "hyps"), cwd=tiny_data)
    line = error_line(r, "lengths")
    assert f"{arrays}/val.en.npy: holds id 999, beyond the model's vocabulary of 400" in line
    assert not (tmp_path / "l.json").exists()


@pytest.mark.parametrize("command", ["lengths", "evaluate", "extrapolate", "measure"])
def test_a_negative_seed_is_refused_by_every_stage(tiny_data, command):
    options = STAGES[command][2]
    r = posenc(command, *[a for o in options for a in (o, "-1" if o == "--seed" else "x")], cwd=tiny_data)
    assert error_line(r, command) == f"posenc {command}: error: --seed -1: a seed is an int >= 0 (params.yaml: seeds)"


@pytest.mark.parametrize("out", [".", "sub/..", "data", "data/prepared/arrays"])
def test_shorten_never_replaces_the_project_an_input_or_a_foreign_directory(tiny_data, out):
    (tiny_data / "sub").mkdir(exist_ok=True)
    (tiny_data / "data/keep.txt").write_text("the user's\n")
    before = snapshot(tiny_data / "data")
    r = posenc("shorten", "--arrays", "data/prepared/arrays", "--spm", "data/prepared/spm.model", "--out", out,
               "--stats", "s/stats.json", cwd=tiny_data)
    line = error_line(r, "shorten")
    assert line.startswith(f"posenc shorten: error: {out}: ") and ("name a new directory" in line
                                                                     or "name another directory" in line), line
    assert snapshot(tiny_data / "data") == before and (tiny_data / "params.yaml").is_file()
    (tiny_data / "data/keep.txt").unlink()


def test_two_shortens_at_once_both_finish_whole(tiny_data, tmp_path):
    """Each run stages in a directory of its own: neither removes the other's."""
    def start(out):
        return subprocess.Popen([sys.executable, "-m", "posenc", "shorten", "--arrays", "data/prepared/arrays",
                                 "--spm", "data/prepared/spm.model", "--out", str(tmp_path / out),
                                 "--stats", str(tmp_path / f"{out}.json")], cwd=tiny_data,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    a, b = start("a"), start("a")
    assert a.wait() == 0 and b.wait() == 0, (a.stderr.read(), b.stderr.read())
    made = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert made == sorted(p.name for p in (tiny_data / "data/prepared/arrays").glob("*.npy"))
    assert not list(tmp_path.glob(".shorten.*"))


@pytest.mark.parametrize("out", [".", "sub/..", "evalm", "data"])
def test_export_never_replaces_the_project_an_input_or_a_foreign_directory(tiny_data, tiny_model, out):
    (tiny_data / "sub").mkdir(exist_ok=True)
    before = snapshot(tiny_data / "data") | snapshot(tiny_data / "evalm")
    r = posenc("export", "--model", "evalm/model.pt", "--spm", "data/prepared/spm.model", "--out", out, cwd=tiny_data)
    line = error_line(r, "export")
    assert line.startswith(f"posenc export: error: {out}: "), line
    assert snapshot(tiny_data / "data") | snapshot(tiny_data / "evalm") == before
    assert (tiny_data / "params.yaml").is_file()
