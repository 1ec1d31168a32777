"""How translations are scored: sacreBLEU's BLEU and chrF of detokenized hypotheses against the
untouched references (a model's perplexity is posenc.perplexity)."""

from __future__ import annotations

from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

from posenc import files
from posenc.corpora import TGT
from posenc.errors import UserError


def read_references(raw_dir: Path, split: str, count: int | None = None) -> list[str]:
    """The untouched references; the first `count` of them when only those were translated."""
    path = Path(raw_dir) / f"{split}.{TGT}"
    if not path.is_file():
        raise UserError(f"{path}: missing; run `dvc repro fetch` first")
    return files.read_lines(path)[:count]


def score(hypotheses: list[str], references: list[str]) -> dict:
    """sacreBLEU's BLEU (13a tokenization, cased) and chrF, with their signatures."""
    bleu, chrf = BLEU(), CHRF()
    return {"bleu": round(bleu.corpus_score(hypotheses, [references]).score, 2),
            "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
            "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature())}
