import json
import shutil

import numpy as np
import sentencepiece as spm

from posenc import tokens
from posenc.stages.prepare import BOS, EOS, PAD, keep_pair

from conftest import posenc


def test_prepare_writes_arrays_stats_and_special_ids(tiny_data):
    sp = spm.SentencePieceProcessor(model_file=str(tiny_data / "data/prepared/spm.model"))
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.vocab_size()) == (PAD, BOS, EOS, 400)
    stats = json.loads((tiny_data / "data/prepared/stats.json").read_text())
    assert stats["splits"]["val"] == {**stats["splits"]["val"], "pairs": 1014, "dropped": 0}
    assert stats["splits"]["train"]["pairs"] + stats["splits"]["train"]["dropped"] == 300
    val_en = tokens.load(tokens.array_path(tiny_data / "data/prepared/arrays", "val", "en"), EOS)
    raw = (tiny_data / "data/raw/multi30k/val.en").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(val_en) == 1014 and all(s[-1] == EOS for s in val_en)
    assert list(val_en[5][:-1]) == sp.encode(raw[5])
    assert abs(stats["splits"]["val"]["mean_len_en"] - np.mean([len(s) - 1 for s in val_en])) < 1e-3


def test_two_runs_give_a_byte_identical_tokenizer(tiny_data):
    r = posenc("prepare", "--raw", "data/raw/multi30k", "--spm", "again/spm.model", "--arrays",
               "again/arrays", "--stats", "again/stats.json", cwd=tiny_data)
    assert r.returncode == 0, r.stderr
    for name in ("spm.model", "stats.json", "arrays/train.de.npy", "arrays/test_2016_flickr.en.npy"):
        assert (tiny_data / "again" / name).read_bytes() == (tiny_data / "data/prepared" / name).read_bytes()


def test_length_and_ratio_filter():
    assert keep_pair(10, 12, 100, 1.5)
    assert not keep_pair(101, 90, 100, 3.0)   # too long
    assert not keep_pair(10, 31, 100, 3.0)    # ratio above 3
    assert not keep_pair(0, 3, 100, 3.0)      # empty side


def test_token_arrays_round_trip(tmp_path):
    sentences = [[5, 6, 7], [8], [9, 10]]
    tokens.save(tmp_path / "x.npy", sentences, EOS, 400)
    assert np.load(tmp_path / "x.npy").dtype == np.uint16
    assert [list(s) for s in tokens.load(tmp_path / "x.npy", EOS)] == [s + [EOS] for s in sentences]


def test_vocabulary_too_large_for_the_text_fails_clearly(tiny_data):
    params = (tiny_data / "params.yaml").read_text().replace("vocab_size: 400", "vocab_size: 90000")
    (tiny_data / "big.yaml").write_text(params)
    r = posenc("prepare", "--params", "big.yaml", "--raw", "data/raw/multi30k", "--spm", "big/spm.model",
               "--arrays", "big/arrays", "--stats", "big/stats.json", cwd=tiny_data)
    assert r.returncode == 2 and "big.yaml: tokenizer.vocab_size 90000" in r.stderr, r.stderr  # the file named
    assert not (tiny_data / "big").exists()


def test_a_failed_prepare_keeps_the_previous_tokenizer_arrays_and_stats(tiny_data, tmp_path):
    """A new vocabulary is trained, then encoding fails: the old set stays whole, never a new
    spm.model beside arrays encoded with the old one; a killed run's staging is cleaned."""
    shutil.copytree(tiny_data / "data", tmp_path / "data")
    prepared = tmp_path / "data/prepared"
    before = {p.relative_to(prepared): p.read_bytes() for p in prepared.rglob("*") if p.is_file()}
    (prepared / ".prepare.tmp").mkdir()
    (prepared / ".prepare.tmp/model").write_bytes(b"left by a kill")
    (tmp_path / "params.yaml").write_text(
        (tiny_data / "params.yaml").read_text().replace("vocab_size: 400", "vocab_size: 300"))
    (tmp_path / "data/raw/multi30k/test_2017_mscoco.de").unlink()
    r = posenc("prepare", "--raw", "data/raw/multi30k", "--spm", "data/prepared/spm.model",
               "--arrays", "data/prepared/arrays", "--stats", "data/prepared/stats.json", cwd=tmp_path)
    assert r.returncode == 2
    assert "test_2017_mscoco.de: missing; run `dvc repro fetch` first" in r.stderr
    after = {p.relative_to(prepared): p.read_bytes() for p in prepared.rglob("*") if p.is_file()}
    assert after == before
