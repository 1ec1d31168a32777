"""Stage fetch: both corpora through the mirror, the download path through a loopback server,
and every bad input, each with a one-line error, exit status 2 and no partial output."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import shutil
import threading
from functools import partial
from pathlib import Path

import pytest

from posenc import corpora, downloads
from posenc.errors import UserError
from posenc.stages.fetch import fetch

from conftest import MIRROR, TINY, posenc


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_multi30k_from_the_mirror_keeps_references_byte_for_byte(tmp_path, mirror):
    counts = fetch(corpora.get("multi30k"), tmp_path / "raw", mirror, None, 1)
    assert counts == {"train": 29000, "val": 1014, "test_2016_flickr": 1000,
                      "test_2017_flickr": 1000, "test_2017_mscoco": 461}
    for split in ("val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"):
        for lang in ("en", "de"):
            assert _sha(tmp_path / "raw" / f"{split}.{lang}") == _sha(mirror / "multi30k" / f"{split}.{lang}")


def test_wmt14_from_the_mirror(tmp_path, mirror):
    counts = fetch(corpora.get("wmt14"), tmp_path / "raw", mirror, 20_000, 1)
    assert counts["newstest2013"] == 3000 and counts["newstest2014"] == 3003
    # the mirror's two 10k training samples, empty pairs dropped
    assert 19_000 < counts["train"] <= 20_000
    en = (tmp_path / "raw" / "train.en").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(en) == counts["train"] and all(line == line.strip() and line for line in en)
    assert _sha(tmp_path / "raw" / "newstest2014.de") == downloads.SOURCES["wmt14"].splits["newstest2014"].sha256["de"]


def test_a_subset_is_seeded_and_deterministic(tmp_path, mirror):
    a = fetch(corpora.get("multi30k"), tmp_path / "a", mirror, 500, 7)
    fetch(corpora.get("multi30k"), tmp_path / "b", mirror, 500, 7)
    fetch(corpora.get("multi30k"), tmp_path / "c", mirror, 500, 8)
    assert a["train"] == 500
    assert (tmp_path / "a/train.de").read_bytes() == (tmp_path / "b/train.de").read_bytes()
    assert (tmp_path / "a/train.de").read_bytes() != (tmp_path / "c/train.de").read_bytes()
    # pairs stay aligned: every subset line is the same pair of the full corpus
    full_en = (mirror / "multi30k/train.en").read_text(encoding="utf-8").split("\n")
    full_de = (mirror / "multi30k/train.de").read_text(encoding="utf-8").split("\n")
    pairs = {(e.strip(), d.strip()) for e, d in zip(full_en, full_de)}  # training lines are stripped
    sub = zip((tmp_path / "a/train.en").read_text().split("\n")[:-1],
              (tmp_path / "a/train.de").read_text().split("\n")[:-1])
    assert all(p in pairs for p in sub)


@pytest.fixture
def loopback(tmp_path, mirror):
    """An HTTP server on 127.0.0.1 serving Multi30k's gzipped files in the upstream layout."""
    root = tmp_path / "www"
    raw = root / "data" / "task1" / "raw"
    raw.mkdir(parents=True)
    for path in (mirror / "multi30k").iterdir():
        (raw / f"{path.name}.gz").write_bytes(gzip.compress(path.read_bytes()))
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/data/task1/raw", raw
    server.shutdown()
    server.server_close()


def test_download_path_through_a_loopback_server(tmp_path, loopback, mirror):
    url, _ = loopback
    counts = fetch(corpora.get("multi30k"), tmp_path / "raw", None, None, 1, multi30k_url=url)
    assert counts["val"] == 1014 and counts["train"] == 29000
    assert _sha(tmp_path / "raw/test_2016_flickr.de") == _sha(mirror / "multi30k/test_2016_flickr.de")


def test_download_of_a_missing_file_fails_clearly(tmp_path, loopback):
    url, raw = loopback
    (raw / "val.de.gz").unlink()
    with pytest.raises(UserError, match=r"val\.de\.gz: download failed"):
        fetch(corpora.get("multi30k"), tmp_path / "raw", None, None, 1, multi30k_url=url)
    assert not (tmp_path / "raw").exists()


# Bad input through the command line: one line naming the file or key, exit 2, nothing written.
def _fails(tmp_path, env_mirror, expect, params_text=None):
    (tmp_path / "params.yaml").write_text(params_text or TINY.read_text())
    r = posenc("fetch", "--out", "data/raw/multi30k", cwd=tmp_path, env={"POSENC_DATA_MIRROR": str(env_mirror)})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().split("\n")
    assert len(lines) == 1 and expect in lines[0], r.stderr
    assert not (tmp_path / "data" / "raw" / "multi30k").exists()
    assert not list((tmp_path / "data" / "raw").glob("*")) if (tmp_path / "data/raw").exists() else True
    return lines[0]


def test_mirror_variable_pointing_nowhere(tmp_path):
    _fails(tmp_path, tmp_path / "nowhere", "POSENC_DATA_MIRROR=")


def test_missing_file(tmp_path, copy_mirror):
    (copy_mirror / "multi30k/test_2017_mscoco.de").unlink()
    _fails(tmp_path, copy_mirror, "test_2017_mscoco.de: missing from the mirror")


def _wmt_test_sets(mirror: Path) -> Path:
    """The real WMT14 dev and test sets in a writable mirror (fetch checks them first)."""
    wmt = mirror / "wmt14-en-de"
    wmt.mkdir()
    for name in ("newstest2013", "newstest2014"):
        for lang in ("en", "de"):
            shutil.copy(MIRROR / "wmt14-en-de" / f"{name}.{lang}", wmt)
    return wmt


def _wmt_training_files(mirror: Path, **files: bytes) -> None:
    """WMT14 training text in the mirror (train-*.{en,de}): an aligned file pair, and `files`."""
    wmt = _wmt_test_sets(mirror)
    (wmt / "train-a.en").write_text("one\ntwo\n")
    (wmt / "train-a.de").write_text("eins\nzwei\n")
    for name, data in files.items():
        (wmt / name.replace("_", ".")).write_bytes(data)


def test_line_counts_differ_names_the_file_not_the_glob(tmp_path, copy_mirror):
    # an unpinned corpus reaches the alignment check: the wmt14 training text, several files
    _wmt_training_files(copy_mirror, **{"train-b_en": b"one\ntwo\n", "train-b_de": b"eins\n"})
    with pytest.raises(UserError, match=r"/train-b\.en has 2 lines but .*/train-b\.de has 1;"):
        fetch(corpora.get("wmt14"), tmp_path / "raw", copy_mirror, None, 1)
    assert not (tmp_path / "raw").exists()


def test_a_training_file_without_its_other_side_is_named(tmp_path, copy_mirror):
    _wmt_training_files(copy_mirror, **{"train-b_de": b"eins\n"})
    with pytest.raises(UserError, match=r"/train-b\.en: missing from the mirror"):
        fetch(corpora.get("wmt14"), tmp_path / "raw", copy_mirror, None, 1)


def test_line_counts_differ_in_a_pinned_file_is_a_checksum_error(tmp_path, copy_mirror):
    path = copy_mirror / "multi30k/val.de"
    path.write_bytes(path.read_bytes() + b"extra line\n")
    line = _fails(tmp_path, copy_mirror, "val.de: SHA-256")
    assert "does not match the pinned 660e09eb" in line


def test_not_utf8(tmp_path, copy_mirror):
    _wmt_training_files(copy_mirror, **{"train-b_en": b"caf\xe9\n", "train-b_de": b"Kaffee\n"})
    with pytest.raises(UserError, match=r"/train-b\.en: line 1 is not UTF-8 \(byte 0xe9\)"):
        fetch(corpora.get("wmt14"), tmp_path / "raw", copy_mirror, None, 1)


def test_empty_training_set(tmp_path, copy_mirror):
    wmt = _wmt_test_sets(copy_mirror)
    (wmt / "train-a.en").write_text("  \n\n")
    (wmt / "train-a.de").write_text("x\n\n")
    with pytest.raises(UserError, match="no non-empty pairs"):
        fetch(corpora.get("wmt14"), tmp_path / "raw", copy_mirror, None, 1)
    assert not (tmp_path / "raw").exists()


def test_unknown_corpus(tmp_path, mirror):
    _fails(tmp_path, mirror, "data.corpus 'multi31k' is unknown; valid corpora: multi30k, wmt14",
           TINY.read_text().replace("corpus: multi30k", "corpus: multi31k"))


def test_misspelled_param_on_the_command_line(tmp_path, mirror):
    _fails(tmp_path, mirror, "data.max_train_pair: unknown key",
           TINY.read_text().replace("max_train_pairs:", "max_train_pair:"))


def test_a_failed_fetch_keeps_the_previous_output(tmp_path, copy_mirror, mirror):
    out = tmp_path / "raw"
    fetch(corpora.get("multi30k"), out, mirror, 100, 1)
    before = (out / "train.en").read_bytes()
    (copy_mirror / "multi30k/val.en").write_text("tampered\n")
    with pytest.raises(UserError):
        fetch(corpora.get("multi30k"), out, copy_mirror, None, 1)
    assert (out / "train.en").read_bytes() == before


# WMT14: the mirror never stands in silently for the corpus, and the official path, offline.
def test_the_mirrors_sample_is_refused_unless_a_subset_is_asked_for(tmp_path, mirror):
    with pytest.raises(UserError, match=r"train-sample-10k\.en: 20,000 training pairs, but wmt14 has "
                                        r"4,508,785 \(posenc/downloads.py\): this source holds a sample\. "
                                        r"Set data.max_train_pairs"):
        fetch(corpora.get("wmt14"), tmp_path / "raw", mirror, None, 1)
    assert not (tmp_path / "raw").exists()


def test_the_record_names_the_source_of_unpinned_text_only(tmp_path, mirror, loopback):
    fetch(corpora.get("wmt14"), tmp_path / "wmt", mirror, 20_000, 1)
    record = json.loads((tmp_path / "wmt" / "fetch.json").read_text())
    train = record["splits"]["train"]
    assert train["origin"] == "mirror: wmt14-en-de/train-*" and train["read"] == 20_000
    assert train["known"] == 4_508_785 and train["subset"] == 20_000 and 19_000 < train["pairs"] <= 20_000
    assert record["splits"]["newstest2014"] == {"pairs": 3003}
    # Multi30k is pinned throughout: the record, and so data/raw's hash, is the same from any source
    url, _ = loopback
    fetch(corpora.get("multi30k"), tmp_path / "a", mirror, None, 1)
    fetch(corpora.get("multi30k"), tmp_path / "b", None, None, 1, multi30k_url=url)
    assert (tmp_path / "a/fetch.json").read_bytes() == (tmp_path / "b/fetch.json").read_bytes()


class FakeTestSet:
    """sacreBLEU's dataset interface over two local files (no download)."""

    def __init__(self, src: Path, ref: Path, fail: bool = False):
        self.src, self.ref, self.fail = src, ref, fail

    def process_to_text(self, pair):
        assert pair == "en-de"
        if self.fail:
            raise SystemExit(1)  # what sacreBLEU does when a download fails

    def get_source_file(self, pair):
        return str(self.src)

    def get_reference_files(self, pair):
        return [str(self.ref)]


@pytest.fixture
def official_wmt14(monkeypatch, mirror):
    """The WMT14 path without a network: sacreBLEU's test sets served from the mirror's files, and
    HF `datasets` returning a small local dataset in the format load_dataset returns."""
    import datasets
    from sacrebleu.dataset import DATASETS

    wmt = mirror / "wmt14-en-de"
    monkeypatch.setitem(DATASETS, "wmt13", FakeTestSet(wmt / "newstest2013.en", wmt / "newstest2013.de"))
    monkeypatch.setitem(DATASETS, "wmt14/full", FakeTestSet(wmt / "newstest2014.en", wmt / "newstest2014.de"))
    rows = [{"de": "  Erster Satz. ", "en": "First sentence. "}, {"de": "", "en": "no German"},
            {"de": "Zweiter\nSatz.", "en": "Second sentence."}, {"de": "Dritter.", "en": "Third."}]
    calls = []

    def load_dataset(path, config, split):
        calls.append((path, config, split))
        return datasets.Dataset.from_dict({"translation": rows})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_wmt14_through_sacrebleu_and_hf_datasets(tmp_path, official_wmt14, mirror):
    counts = fetch(corpora.get("wmt14"), tmp_path / "raw", None, 10, 1)
    assert official_wmt14 == [("wmt14", "de-en", "train")]
    assert counts == {"train": 3, "newstest2013": 3000, "newstest2014": 3003}
    # row order kept, sides stripped, the pair with an empty side dropped, a line break made a space
    assert (tmp_path / "raw/train.en").read_text() == "First sentence.\nSecond sentence.\nThird.\n"
    assert (tmp_path / "raw/train.de").read_text() == "Erster Satz.\nZweiter Satz.\nDritter.\n"
    assert _sha(tmp_path / "raw/newstest2013.de") == _sha(mirror / "wmt14-en-de/newstest2013.de")
    train = json.loads((tmp_path / "raw/fetch.json").read_text())["splits"]["train"]
    assert train["origin"] == "hf: wmt14/de-en [train]" and train["read"] == 4 and train["pairs"] == 3


def test_a_bad_test_set_checksum_stops_before_the_training_download(tmp_path, official_wmt14, monkeypatch):
    from sacrebleu.dataset import DATASETS

    bad = tmp_path / "newstest2014.de"
    bad.write_text("not the reference\n")
    monkeypatch.setitem(DATASETS, "wmt14/full", FakeTestSet(DATASETS["wmt14/full"].src, bad))
    with pytest.raises(UserError, match=r"newstest2014.de: SHA-256 \w+ does not match the pinned ae5d1104"):
        fetch(corpora.get("wmt14"), tmp_path / "raw", None, 10, 1)
    assert official_wmt14 == [] and not (tmp_path / "raw").exists()


def test_a_failed_sacrebleu_download_is_one_line(tmp_path, official_wmt14, monkeypatch, mirror):
    from sacrebleu.dataset import DATASETS

    monkeypatch.setitem(DATASETS, "wmt13", FakeTestSet(Path("x"), Path("y"), fail=True))
    with pytest.raises(UserError, match=r"^sacreBLEU test set wmt13 \(en-de\): download failed \(SystemExit\); "
                                        r"retry, or set POSENC_DATA_MIRROR to a local mirror$"):
        fetch(corpora.get("wmt14"), tmp_path / "raw", None, 10, 1)
