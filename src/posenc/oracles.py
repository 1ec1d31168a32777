"""The original scripts the paper's BLEU is checked against (tests/test_scoring.py): Moses'
tokenizer, punctuation normaliser and multi-bleu.perl, and tensor2tensor's get_ende_bleu.sh, the
script that scored the paper's English-German. Each comes from its official repository at a
pinned commit, checked against a pinned SHA-256, or from a local mirror of the same layout named
by POSENC_ORACLE_MIRROR (.ci/run points it at ../shared/oracles). Test oracles only: the pipeline
never runs them.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

from posenc import files
from posenc.errors import UserError

MIRROR_ENV = "POSENC_ORACLE_MIRROR"
MOSES = "https://raw.githubusercontent.com/moses-smt/mosesdecoder/34452895f350bf097b21ee514a529a1dc542243c"
T2T = "https://raw.githubusercontent.com/tensorflow/tensor2tensor/bafdc1b67730430d38d6ab802cbd51f9d053ba2e"

# path in the layout -> (official URL, SHA-256)
FILES = {
    "moses/scripts/generic/multi-bleu.perl": (
        f"{MOSES}/scripts/generic/multi-bleu.perl",
        "af2580098301798d36e4f9209118310bb9558d9f781c671409498dc7975df1c0"),
    "moses/scripts/tokenizer/tokenizer.perl": (
        f"{MOSES}/scripts/tokenizer/tokenizer.perl",
        "631dd7cf710d27a14b0801f8f43b37099a52d574a3a488b36a40bec9b1e8caeb"),
    "moses/scripts/tokenizer/replace-unicode-punctuation.perl": (
        f"{MOSES}/scripts/tokenizer/replace-unicode-punctuation.perl",
        "2a4bf9b58a66fd58931ce54b89b6e9912e3177552b6bfedf3d7ce8a89aaa71de"),
    "moses/scripts/share/nonbreaking_prefixes/nonbreaking_prefix.de": (
        f"{MOSES}/scripts/share/nonbreaking_prefixes/nonbreaking_prefix.de",
        "caec29277f3cb15748430cdcd41dc341d3d01aab7ef849cda131818b3e52df83"),
    "moses/scripts/share/nonbreaking_prefixes/nonbreaking_prefix.en": (
        f"{MOSES}/scripts/share/nonbreaking_prefixes/nonbreaking_prefix.en",
        "7bc4b62cb97fef5f85f283365f2e045b12ef2cc4f946d39d100b9955d8f42ab1"),
    "get_ende_bleu.sh": (
        f"{T2T}/tensor2tensor/utils/get_ende_bleu.sh",
        "e68a3f56738253ab96d18875ed846598ba24514c876fa389031242f662b76f94"),
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def get(cache: Path) -> Path:
    """The directory holding every file of FILES, checked: the mirror where POSENC_ORACLE_MIRROR
    names one, else `cache`, filled from the official sources on first use."""
    mirror = os.environ.get(MIRROR_ENV)
    if mirror:
        root = Path(mirror)
        for name, (url, sha256) in FILES.items():
            if not (root / name).is_file():
                raise UserError(f"{root / name}: missing from the oracle mirror ({MIRROR_ENV}); copy it "
                                f"from {url}, or unset {MIRROR_ENV} to download it")
            if _sha256(root / name) != sha256:
                raise UserError(f"{root / name}: not the pinned file (SHA-256 differs); copy it again from {url}")
        return root
    for name, (url, sha256) in FILES.items():
        target = Path(cache) / name
        if target.is_file() and _sha256(target) == sha256:
            continue
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        except (urllib.error.URLError, OSError) as e:
            raise UserError(f"{url}: could not be downloaded ({getattr(e, 'reason', e)}); set {MIRROR_ENV} "
                            f"to a copy of the oracle scripts (the layout of ../shared/oracles)") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise UserError(f"{url}: not the pinned file (SHA-256 differs); set {MIRROR_ENV} to a checked copy")
        files.write_bytes(target, data)
    return Path(cache)
