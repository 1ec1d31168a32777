"""Where each corpus's files come from: the mirror's layout, the official sources, pinned hashes.

Sources are tried in order: a local mirror named by POSENC_DATA_MIRROR (laid out like
../shared/data/wmt), else the official download: Multi30k's own files; for WMT14 the dev and
test sets from sacreBLEU's copies (what the community scores against) and the training text
from Hugging Face `datasets`. The SHA-256 of every dev/test file (and of the Multi30k training
files) is pinned here; BLEU is scored against exactly these bytes. Only the `fetch` stage reads
this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from posenc.errors import UserError

MIRROR_ENV = "POSENC_DATA_MIRROR"
RECORD = "fetch.json"  # what `fetch` wrote into data/raw/<corpus>/ besides the splits

# Multi30k task 1, raw (cased, untokenized) files, pinned to the commit the mirror was made from.
MULTI30K_URL = ("https://raw.githubusercontent.com/multi30k/dataset/"
                "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw")


@dataclass(frozen=True)
class Source:
    """One split's files."""
    mirror: str                                # path stem in the mirror; may hold a glob
    sha256: dict[str, str] | None              # per language; None: not pinned
    hf_split: str | None = None                # split name in the HF `datasets` copy
    sacrebleu: str | None = None               # sacreBLEU's test set name (its en-de pair)


@dataclass(frozen=True)
class CorpusSource:
    kind: Literal["multi30k", "wmt"]           # how the real download works (see above)
    splits: dict[str, Source]                  # by split name (posenc.corpora)
    hf_name: tuple[str, str] | None = None     # (path, config) for datasets.load_dataset
    train_pairs: int | None = None             # the training split's known size (None: pinned)


def _m30k(name: str, en: str, de: str) -> tuple[str, Source]:
    return name, Source(f"multi30k/{name}", {"en": en, "de": de})


SOURCES = {
    "multi30k": CorpusSource("multi30k", dict((
        _m30k("train",
              "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
              "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72"),
        _m30k("val",
              "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
              "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660"),
        _m30k("test_2016_flickr",
              "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
              "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16"),
        _m30k("test_2017_flickr",
              "ce1450ddc5ab0834502579d77a170849952e15a2938b34cc503bdc25ebb4fb98",
              "c3078bc3b36808bf9d20eb2347ed6137016179ef59ec0d2b9b8ecc3fb2880081"),
        _m30k("test_2017_mscoco",
              "43051fdfa86fd5395182e718a94ca67b1b227b9f7c79596ff0f6b813216981d2",
              "58277df3c75f92f7145a11b910b553d1cf82c439249d4dc237c899609eafac22"),
    ))),
    # The test set is the FULL 3,003-line newstest2014 (sacreBLEU's wmt14/full), not the filtered
    # 2,737. The pinned hashes are the mirror's files, made by sacreBLEU's processing of the
    # official SGML (../shared/data/wmt/SOURCES.md): what sacreBLEU's copies deliver.
    "wmt14": CorpusSource("wmt", {
        # The mirror holds only a 20k-pair sample of the training text (train-*.en/.de).
        "train": Source("wmt14-en-de/train-*", None, hf_split="train"),
        "newstest2013": Source("wmt14-en-de/newstest2013", {
            "en": "ace268a1d9724ca76f6d8e5c720ffdc08f01bdce45630ed8b269dc7918e1c16e",
            "de": "d7ea35ab91ff3709e03ad9cb6bf5b4f2cc775cd2d72efd5254c4aec5e69663ca"},
            sacrebleu="wmt13"),
        "newstest2014": Source("wmt14-en-de/newstest2014", {
            "en": "7294bccf2879a97b3706b95c9595f1459617a8ee7130d5d8581c910e69736971",
            "de": "ae5d110486bc33d7175e9e28c7d0051eb3e5fcd2166dd93371089852c091a20e"},
            sacrebleu="wmt14/full"),
    }, hf_name=("wmt14", "de-en"), train_pairs=4_508_785),  # HF's wmt14 de-en train split
}


def read_record(raw_dir: Path) -> dict:
    """What `fetch` recorded in <raw_dir>/fetch.json: each split's pairs, and for a split whose
    files are not pinned, where they came from (prepare copies it into its stats)."""
    path = Path(raw_dir) / RECORD
    if not path.is_file():
        raise UserError(f"{path}: missing; run `dvc repro fetch` first")
    return json.loads(path.read_text(encoding="utf-8"))
