"""What each corpus is: its splits and their roles (train, dev, test).

Where the files come from (mirror layout, official URLs, pinned hashes) is posenc.downloads,
which only `fetch` reads: every other stage knows a corpus by its split names alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from posenc.errors import UserError

SRC, TGT = "en", "de"


@dataclass(frozen=True)
class Split:
    name: str                                  # file stem under data/raw/<corpus>/
    role: Literal["train", "dev", "test"]


@dataclass(frozen=True)
class Corpus:
    name: str
    splits: tuple[Split, ...]

    @property
    def dev(self) -> str:
        return next(s.name for s in self.splits if s.role == "dev")

    @property
    def tests(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.splits if s.role == "test")

    @property
    def scored(self) -> tuple[str, ...]:
        """Dev first, then the tests: every split that is translated and scored."""
        return (self.dev, *self.tests)


CORPORA = {
    # Multi30k task 1 (WMT16 multimodal): the default profile.
    "multi30k": Corpus("multi30k", (
        Split("train", "train"), Split("val", "dev"), Split("test_2016_flickr", "test"),
        Split("test_2017_flickr", "test"), Split("test_2017_mscoco", "test"))),
    # WMT14 en-de as in the paper (§5.1): 4.5M training pairs, newstest2013 dev, newstest2014 test.
    "wmt14": Corpus("wmt14", (
        Split("train", "train"), Split("newstest2013", "dev"), Split("newstest2014", "test"))),
}


def get(name: str) -> Corpus:
    try:
        return CORPORA[name]
    except KeyError:
        raise UserError(f"params.yaml: data.corpus '{name}' is unknown; "
                        f"valid corpora: {', '.join(CORPORA)}") from None
