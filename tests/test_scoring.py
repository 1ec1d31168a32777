"""The paper's BLEU (tok+compound-split, tensor2tensor's get_ende_bleu.sh) against the original
Perl scripts (posenc.oracles: the official sources at pinned commits, or POSENC_ORACLE_MIRROR), run
as that script runs them; and sacreBLEU's primary figures."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from posenc import files
from posenc.scoring import compound_split_bleu, score

from conftest import ROOT



def _perl(script: Path, text: str, *args: str) -> str:
    return subprocess.run(["perl", str(script), *args], input=text, capture_output=True, text=True,
                          check=True).stdout


def get_ende_bleu(hypotheses: list[str], references: list[str], tmp_path: Path, oracles: Path) -> str:
    """get_ende_bleu.sh's steps with the original scripts; the reference is tokenized the same
    way first (the script expects it tokenized). Returns multi-bleu.perl's BLEU as printed."""
    MOSES = oracles / "moses" / "scripts"

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
def test_compound_split_bleu_of_the_pinned_hypotheses_equals_the_perl_scripts(split, tmp_path, mirror, oracles):
    hyps = files.read_lines(ROOT / "results" / "runs" / "sinusoidal-1" / "hyps" / f"{split}.de")
    refs = files.read_lines(mirror / "multi30k" / f"{split}.de")
    assert len(hyps) == len(refs)
    assert f"{compound_split_bleu(hyps, refs):.2f}" == get_ende_bleu(hyps, refs, tmp_path, oracles)


def test_compound_split_bleu_on_newstest2014_equals_the_perl_scripts(tmp_path, mirror, oracles):
    """WMT news text has what Multi30k lacks: typographic quotes, dashes, hyphenated compounds,
    numbers. The 'hypotheses' are the reference with every fifth word dropped and two adjacent
    words swapped in every third line, so that BLEU is far from 100."""
    refs = files.read_lines(mirror / "wmt14-en-de" / "newstest2014.de")
    hyps = []
    for i, line in enumerate(refs):
        words = [w for j, w in enumerate(line.split(" ")) if j % 5 != 4]
        if i % 3 == 0 and len(words) > 3:
            words[1], words[2] = words[2], words[1]
        hyps.append(" ".join(words))
    assert sum("-" in r for r in refs) > 500 and any("„" in r for r in refs)
    ours = compound_split_bleu(hyps, refs)
    assert 20 < ours < 90
    assert f"{ours:.2f}" == get_ende_bleu(hyps, refs, tmp_path, oracles)


def test_compound_splitting_raises_bleu_where_hyphens_match():
    refs = ["Ein E-Mail-Programm für Open-Source-Software ."]
    hyps = ["Ein E-Mail-Programm für Open-Source-Software ."]
    assert compound_split_bleu(hyps, refs) == 100.0
    # a wrong compound loses one token in 13a, but only its last part once split
    wrong = ["Ein E-Mail-Programm für Open-Source-Programme ."]
    assert compound_split_bleu(wrong, refs) > score(wrong, refs)["bleu"]


def test_the_oracle_download_checks_the_official_files_and_the_mirror(tmp_path, monkeypatch):
    """posenc.oracles, the real download code, against a server of the mirror's layout (as the data's
    download is tested): it fetches and checks every file; a tampered file or an unreachable source
    is one line naming it and the variable to set."""
    import http.server
    import shutil
    import socketserver
    import threading

    from posenc import oracles
    from posenc.errors import UserError

    source = Path(os.environ.get(oracles.MIRROR_ENV) or ROOT.parent / "shared" / "oracles")
    if not (source / "get_ende_bleu.sh").is_file():
        pytest.fail(f"{source}: no oracle mirror to serve; set {oracles.MIRROR_ENV} (.ci/run sets it)", pytrace=False)
    served = tmp_path / "served"
    shutil.copytree(source, served)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))  # noqa: E731
    with socketserver.TCPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        monkeypatch.delenv(oracles.MIRROR_ENV, raising=False)
        monkeypatch.setattr(oracles, "FILES", {name: (f"{base}/{name}", sha) for name, (_, sha) in oracles.FILES.items()})
        got = oracles.get(tmp_path / "cache")
        assert all((got / name).read_bytes() == (source / name).read_bytes() for name in oracles.FILES)
        (served / "get_ende_bleu.sh").write_text("echo tampered\n")
        with pytest.raises(UserError, match=r"get_ende_bleu.sh: not the pinned file \(SHA-256 differs\); set "
                                            r"POSENC_ORACLE_MIRROR"):
            oracles.get(tmp_path / "other-cache")
        server.shutdown()
    monkeypatch.setattr(oracles, "FILES", {"x.perl": ("http://127.0.0.1:9/x.perl", "0" * 64)})
    with pytest.raises(UserError, match=r"http://127.0.0.1:9/x.perl: could not be downloaded .*set POSENC_ORACLE_MIRROR"):
        oracles.get(tmp_path / "third-cache")
    monkeypatch.setenv(oracles.MIRROR_ENV, str(tmp_path / "empty"))
    with pytest.raises(UserError, match=r"empty/x.perl: missing from the oracle mirror \(POSENC_ORACLE_MIRROR\)"):
        oracles.get(tmp_path / "cache")
