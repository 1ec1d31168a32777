"""`posenc translate` as a user runs it: the evaluate stage's hypotheses, line for line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import MIRROR, error_line


def translate(work: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posenc", "translate", *args], cwd=work, input=stdin,
                          capture_output=True, text=True, env={"POSENC_DATA_MIRROR": str(MIRROR),
                                                               "PATH": "/usr/bin:/bin"})


def test_a_file_translates_to_exactly_the_hypotheses_evaluate_scored(tiny_data, evaluated):
    """The dev set is scored with the last checkpoint (Table 3's protocol), so its hypotheses are
    last.pt's; the test sets' are the averaged model's (next test)."""
    sources = (tiny_data / "data/raw/multi30k/val.en").read_text().splitlines()[:100]
    (tiny_data / "val100.en").write_text("".join(s + "\n" for s in sources))
    r = translate(tiny_data, "--model", "evalm/last.pt", "--spm", "data/prepared/spm.model",
                  "-i", "val100.en", "-o", "translated/val100.de")
    assert r.returncode == 0, r.stderr
    assert (tiny_data / "translated/val100.de").read_text() == (evaluated / "val.de").read_text()
    assert "translate: 100 lines (0 empty) -> translated/val100.de" in r.stderr


def test_stdin_to_stdout_keeps_empty_lines_in_place(tiny_data, evaluated):
    sources = (tiny_data / "data/raw/multi30k/val.en").read_text().splitlines()[:2]
    r = translate(tiny_data, "--model", "evalm/model.pt", "--spm", "data/prepared/spm.model",
                  stdin=f"{sources[0]}\n\n{sources[1]}\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout.split("\n")
    assert len(out) == 4 and out[1] == "" and out[3] == ""
    assert all(out[i] for i in (0, 2))
    assert "translate" not in r.stderr  # no progress bar when reading stdin


def test_the_spm_model_is_the_one_dvc_lock_records(tiny_data, evaluated, tmp_path):
    lock = {"schema": "2.0", "stages": {"train@sinusoidal-1": {
        "cmd": "…", "deps": [{"path": "data/prepared/spm.model", "md5": "x"}],
        "outs": [{"path": "evalm/model.pt", "md5": "y"}]}}}
    (tiny_data / "dvc.lock").write_text(yaml.safe_dump(lock))
    try:
        line = (tiny_data / "data/raw/multi30k/test_2016_flickr.en").read_text().splitlines()[0]
        r = translate(tiny_data, "--model", "evalm/model.pt", stdin=line + "\n")
        assert r.returncode == 0, r.stderr
        assert r.stdout == (evaluated / "test_2016_flickr.de").read_text().splitlines()[0] + "\n"
        r = translate(tiny_data, "--model", "evalm/model.pt", "--lock", "none.lock", stdin=line)
        assert "none.lock: missing, so the SentencePiece model of evalm/model.pt is unknown; pass --spm" \
            in error_line(r, "translate")
    finally:
        (tiny_data / "dvc.lock").unlink()


def test_a_missing_model_names_the_command_that_makes_it(tiny_data):
    r = translate(tiny_data, "--model", "models/rope-1/model.pt", stdin="A man.\n")
    assert error_line(r, "translate") == (
        "posenc translate: error: models/rope-1/model.pt: missing; `dvc repro train@rope-1` trains it "
        "(or `dvc pull models/rope-1/model.pt` fetches it, once a DVC remote holding the pinned outputs is set)")
    assert r.stdout == ""


@pytest.mark.parametrize("path, advice", [
    ("models/short-rope-2/model.pt", "`dvc repro train_short@rope-2` trains it"),
    ("models/residual-none-6-1/model.pt", "`dvc repro train_residual@none-6-1` trains it"),
    ("models/residual-sum-6-1/model.pt", "`dvc repro train_residual_sum@sum-6-1` trains it"),
    ("p/model.pt", "give the model.pt of a trained run (posenc train writes one)"),
    ("models/model.pt", "give the model.pt of a trained run (posenc train writes one)")])
def test_a_missing_model_names_a_stage_only_where_one_writes_it(tiny_data, path, advice):
    r = translate(tiny_data, "--model", path, "--spm", "data/prepared/spm.model", stdin="A man.\n")
    assert error_line(r, "translate") == f"posenc translate: error: {path}: missing; " + (
        advice if advice.startswith("give") else f"{advice} (or `dvc pull {path}` fetches it, once a DVC "
                                                 f"remote holding the pinned outputs is set)")


def test_bad_options_stop_with_one_line(tiny_data, tiny_model):
    r = translate(tiny_data, "--model", "evalm/model.pt", "--spm", "data/prepared/spm.model",
                  "--beam", "0", stdin="A man.\n")
    assert error_line(r, "translate") == "posenc translate: error: --beam 0: must be >= 1"
    r = translate(tiny_data, "--model", "evalm/model.pt", "--spm", "data/prepared/spm.model",
                  "--threads", "0", stdin="A man.\n")
    assert error_line(r, "translate") == "posenc translate: error: --threads 0: must be >= 1"
    r = translate(tiny_data, "--model", "evalm/model.pt", "--spm", "data/prepared/spm.model",
                  "-i", "nothing.en")
    assert "nothing.en: no such file" in error_line(r, "translate")


def test_a_search_the_model_cannot_run_stops_with_one_line(tiny_data, tiny_model, tmp_path):
    """A beam over half the vocabulary, a length penalty that is NaN or would overflow, and a
    SentencePiece model of another vocabulary: one line each, before any decoding."""
    common = ("--model", "evalm/model.pt", "--spm", "data/prepared/spm.model")
    r = translate(tiny_data, *common, "--beam", "201", stdin="A man.\n")
    assert error_line(r, "translate") == ("posenc translate: error: --beam 201: more than half the model's "
                                          "vocabulary of 400 (the search ranks 2 x beam candidates); lower --beam")
    for lenpen in ("nan", "1e308"):
        r = translate(tiny_data, *common, "--lenpen", lenpen, stdin="A man.\n")
        assert error_line(r, "translate") == f"posenc translate: error: --lenpen {float(lenpen)}: must be in [0, 10]"
    import sentencepiece as spm

    raw = tiny_data / "data/raw/multi30k/train.en"
    spm.SentencePieceTrainer.train(input=str(raw), model_prefix=str(tmp_path / "other"), vocab_size=300,
                                   pad_id=0, unk_id=1, bos_id=2, eos_id=3, minloglevel=2)
    r = translate(tiny_data, "--model", "evalm/model.pt", "--spm", str(tmp_path / "other.model"), stdin="A man.\n")
    assert error_line(r, "translate") == (f"posenc translate: error: {tmp_path / 'other.model'}: a vocabulary of "
                                          f"300, but evalm/model.pt was trained with 400; pass the SentencePiece "
                                          f"model of its run (--spm)")


def test_input_that_is_not_utf8_is_one_line_from_a_file_and_from_stdin(tiny_data, tiny_model):
    common = ("--model", "evalm/model.pt", "--spm", "data/prepared/spm.model")
    (tiny_data / "latin1.en").write_bytes("A man.\nA caf\xe9.\n".encode("latin-1"))
    r = translate(tiny_data, *common, "-i", "latin1.en")
    assert error_line(r, "translate") == ("posenc translate: error: latin1.en: line 2 is not UTF-8; convert "
                                          "the input (e.g. iconv -f latin1 -t utf-8)")
    r = subprocess.run([sys.executable, "-m", "posenc", "translate", *common], cwd=tiny_data,
                       input="A man.\nA caf\xe9.\n".encode("latin-1"), capture_output=True,
                       env={"POSENC_DATA_MIRROR": str(MIRROR), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert r.stderr.decode().strip().splitlines()[-1] == (
        "posenc translate: error: stdin: line 2 is not UTF-8; convert the input (e.g. iconv -f latin1 -t utf-8)")
    r = translate(tiny_data, *common, "-o", "data", stdin="A man.\n")
    assert error_line(r, "translate") == ("posenc translate: error: -o data: not a file that can be written "
                                          "here; give a path in a writable directory")


@pytest.mark.parametrize("text, said", [("stages: [unclosed\n", "not a DVC lock file (ParserError)"),
                                        ("stages: 5\n", "no mapping of stages"), ("- a\n", "no mapping of stages")])
def test_a_corrupt_lock_is_one_line(tiny_data, tiny_model, text, said):
    """Issue 49: `--lock` of a corrupt or foreign file gave a traceback."""
    (tiny_data / "bad.lock").write_text(text)
    r = translate(tiny_data, "--model", "evalm/model.pt", "--lock", "bad.lock", stdin="A man.\n")
    assert f"bad.lock: {said}; `git checkout dvc.lock` restores it, or pass --spm" in error_line(r, "translate")
