"""How translations are scored: sacreBLEU's BLEU and chrF of detokenized hypotheses against the
untouched references, the primary figures; beside them the tokenized, compound-split BLEU that
the paper's English-German numbers used (a model's perplexity is posenc.perplexity)."""

from __future__ import annotations

import re
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from posenc import files
from posenc.corpora import TGT
from posenc.errors import UserError


def hypothesis_path(hyps_dir: Path, split: str) -> Path:
    """A split's hypotheses in a stage's hyps/ directory: <split>.de, line by line with the
    references."""
    return Path(hyps_dir) / f"{split}.{TGT}"


def hypothesis_files(hyps_dir: Path) -> Path:
    """Every hypothesis file of `hyps_dir`, as a pattern (posenc.files.clear)."""
    return hypothesis_path(hyps_dir, "*")


def read_references(raw_dir: Path, split: str, count: int | None = None,
                    sources: int | None = None) -> list[str]:
    """The untouched references; the first `count` of them when only those were translated.
    With `sources` (how many sentences were translated), a file with another number of lines is
    refused: a cut or padded reference file would be scored without a word otherwise."""
    path = Path(raw_dir) / f"{split}.{TGT}"
    if not path.is_file():
        raise UserError(f"{path}: missing; run `dvc repro fetch` first")
    lines = files.read_lines(path)[:count]
    if sources is not None and len(lines) != sources:
        raise UserError(f"{path}: {len(lines)} references for {sources} translated sentences; "
                        f"fetch the references again (`dvc repro -f fetch`)")
    return lines


def score(hypotheses: list[str], references: list[str]) -> dict:
    """sacreBLEU's BLEU (13a tokenization, cased) and chrF, with their signatures, and BLEU's
    length ratio (output tokens over reference tokens: below 1, the outputs are short)."""
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    return {"bleu": round(b.score, 2), "length_ratio": round(b.sys_len / max(b.ref_len, 1), 3),
            "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
            "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature())}


def compound_split_bleu(hypotheses: list[str], references: list[str], lang: str = TGT) -> float:
    """The BLEU of Vaswani et al.'s Tables 2-3: tensor2tensor's get_ende_bleu.sh, with sacremoses
    and sacreBLEU in place of the Perl scripts. Moses' replace-unicode-punctuation and tokenizer
    (`-l de`, escaping as tokenizer.perl does), hyphenated compounds split as `a ##AT##-##AT## b`
    (the script's Perl substitution, left to right, non-overlapping), then case-sensitive BLEU of
    the tokens as they are (multi-bleu.perl; sacreBLEU with tokenize="none"). get_ende_bleu.sh
    takes a reference tokenized beforehand; here it goes through the same steps as the output.
    Not comparable with sacreBLEU's figures: compound splitting alone adds about 0.7-1 BLEU on
    newstest2014 (tensor2tensor issue 317)."""
    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)

    def prepare(line: str) -> str:
        tokens = tokenizer.tokenize(normalizer.replace_unicode_punct(line), return_str=True, escape=True)
        return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", tokens)

    bleu = BLEU(tokenize="none", force=True)
    return round(bleu.corpus_score([prepare(h) for h in hypotheses],
                                   [[prepare(r) for r in references]]).score, 2)
