"""The paper's BLEU (tok+compound-split, tensor2tensor's get_ende_bleu.sh) against the original
Perl scripts in ../shared/oracles, run as that script runs them; and sacreBLEU's primary figures."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from posenc import files
from posenc.scoring import compound_split_bleu, score

from conftest import MIRROR, ROOT

ORACLES = ROOT.parent / "shared" / "oracles"
MOSES = ORACLES / "moses" / "scripts"


def _perl(script: Path, text: str, *args: str) -> str:
    return subprocess.run(["perl", str(script), *args], input=text, capture_output=True, text=True,
                          check=True).stdout


def get_ende_bleu(hypotheses: list[str], references: list[str], tmp_path: Path) -> str:
    """get_ende_bleu.sh's steps with the original scripts; the reference is tokenized the same
    way first (the script expects it tokenized). Returns multi-bleu.perl's BLEU as printed."""
    assert MOSES.is_dir(), f"{ORACLES}: the oracle scripts are missing; CI puts ../shared beside the clone"

    def tokenized_atat(lines: list[str]) -> str:
        text = "".join(f"{line}\n" for line in lines)
        text = _perl(MOSES / "tokenizer" / "replace-unicode-punctuation.perl", text, "-l", "de")
        text = _perl(MOSES / "tokenizer" / "tokenizer.perl", text, "-l", "de", "-q")
        return subprocess.run(["perl", "-ple", r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g"], input=text,
                              capture_output=True, text=True, check=True).stdout

    (tmp_path / "ref.atat").write_text(tokenized_atat(references), encoding="utf-8")
    out = subprocess.run(["perl", str(MOSES / "generic" / "multi-bleu.perl"), str(tmp_path / "ref.atat")],
                         input=tokenized_atat(hypotheses), capture_output=True, text=True, check=True).stdout
    return re.match(r"BLEU = ([\d.]+),", out).group(1)


def _pinned_hypotheses() -> list[Path]:
    return sorted(ROOT.glob("results/runs/sinusoidal-1/hyps/test_*.de"))


@pytest.mark.parametrize("split", ["test_2016_flickr", "test_2017_mscoco"])
def test_compound_split_bleu_of_the_pinned_hypotheses_equals_the_perl_scripts(split, tmp_path):
    hyps = files.read_lines(ROOT / "results" / "runs" / "sinusoidal-1" / "hyps" / f"{split}.de")
    refs = files.read_lines(MIRROR / "multi30k" / f"{split}.de")
    assert len(hyps) == len(refs)
    assert f"{compound_split_bleu(hyps, refs):.2f}" == get_ende_bleu(hyps, refs, tmp_path)


def test_compound_split_bleu_on_newstest2014_equals_the_perl_scripts(tmp_path):
    """WMT news text has what Multi30k lacks: typographic quotes, dashes, hyphenated compounds,
    numbers. The 'hypotheses' are the reference with every fifth word dropped and two adjacent
    words swapped in every third line, so that BLEU is far from 100."""
    refs = files.read_lines(MIRROR / "wmt14-en-de" / "newstest2014.de")
    hyps = []
    for i, line in enumerate(refs):
        words = [w for j, w in enumerate(line.split(" ")) if j % 5 != 4]
        if i % 3 == 0 and len(words) > 3:
            words[1], words[2] = words[2], words[1]
        hyps.append(" ".join(words))
    assert sum("-" in r for r in refs) > 500 and any("„" in r for r in refs)
    ours = compound_split_bleu(hyps, refs)
    assert 20 < ours < 90
    assert f"{ours:.2f}" == get_ende_bleu(hyps, refs, tmp_path)


def test_compound_splitting_raises_bleu_where_hyphens_match():
    refs = ["Ein E-Mail-Programm für Open-Source-Software ."]
    hyps = ["Ein E-Mail-Programm für Open-Source-Software ."]
    assert compound_split_bleu(hyps, refs) == 100.0
    # a wrong compound loses one token in 13a, but only its last part once split
    wrong = ["Ein E-Mail-Programm für Open-Source-Programme ."]
    assert compound_split_bleu(wrong, refs) > score(wrong, refs)["bleu"]
