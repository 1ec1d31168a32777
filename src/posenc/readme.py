"""`posenc readme`: copy generated files into README.md and docs/*.md between their markers.

README.md and the pages of docs/ show the pipeline's tables, findings and analysis only through
blocks like

    <!-- begin: results/table.md -->
    ...(the file's contents, copied here)...
    <!-- end: results/table.md -->

so none of them is typed by hand; a block names its file relative to the project root, wherever
the page is: the pipeline's outputs, and the records of benchmarks/record.py (measurements, with
the CPU they ran on). `--check` fails when a block is stale, and when the prose around the blocks
carries a number that none of the generated files does (`hand_typed`): prose says what the figures
mean, the blocks give them, so regenerating the pins cannot leave a stale figure behind.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from posenc import files
from posenc.errors import UserError

BLOCK = re.compile(r"(<!-- begin: (?P<path>[^ ]+) -->\n)(?P<body>.*?)(<!-- end: (?P=path) -->)", re.S)
NUMBER = re.compile(r"(?<![\w.])(?<!e-)\d[\d,]*(?:\.\d+)?")
# Prose that is not a figure: code and commands, links, HTML comments, list markers, references to
# the paper's sections, tables and equations, citation years.
NOT_PROSE = [re.compile(p, re.S | re.M) for p in (
    r"^```.*?^```", r"`[^`\n]*`", r"\]\([^)]*\)", r"<!--.*?-->", r"^\s*\d+\.\s",
    r"§\s*\d+(?:\.\d+)*", r"\b(?:Table|Tables|Figure|Eq\.|eq\.|Section|section|row|issue) \(?\d+\)?",
    r"\b(?:19[5-9]\d|20[0-3]\d)\b(?![.,]\d)")]
# Files whose numbers prose may name besides the generated ones: the settings (update counts,
# widths, seeds) and the pinned versions.
SETTINGS = ("params.yaml", "profiles/*.yaml", "pyproject.toml", "requirements.lock", "benchmarks/peers.lock")
# The short allow-list: conventions and goals that prose may name, each with why.
CONVENTIONS = {"0.05": "the significance level of a 95% interval",
               "120": "the terminal width that the README's DVC recipes fit (a test measures it)",
               "70": "the share of the GEMM peak that the speed goal asks for",
               "1.15": "the cost of portable numerics over native that their goal allows"}


BEGIN = re.compile(r"<!-- begin: ([^ ]+) -->")


def check_markers(path: Path, text: str) -> None:
    """Every begin marker has its end: one without would leave its block unfilled and unchecked."""
    closed = {m["path"] for m in BLOCK.finditer(text)}
    lone = next((m[1] for m in BEGIN.finditer(text) if m[1] not in closed), None)
    if lone:
        raise UserError(f"{path}: `<!-- begin: {lone} -->` has no `<!-- end: {lone} -->`; add it after the block")


def sync(text: str, root: Path) -> str:
    def fill(match: re.Match) -> str:
        source = root / match["path"]
        if not source.is_file():
            raise UserError(f"a page names {match['path']}, which does not exist; run `dvc repro` (a "
                            "pipeline output) or benchmarks/record.py (a measurement, docs/performance.md)")
        return match[1] + _read(source) + match[4]
    return BLOCK.sub(fill, text)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; make it again (or save it as UTF-8)") from None


def _numbers(text: str) -> set[Decimal]:
    return {Decimal(n.rstrip(",").replace(",", "")).normalize() for n in NUMBER.findall(text)}


def allowed(root: Path, texts: list[str]) -> set[Decimal]:
    """Every number of the files the pages' blocks name, and of the settings."""
    sources = {root / m["path"] for text in texts for m in BLOCK.finditer(text)}
    sources |= {f for pattern in SETTINGS for f in root.glob(pattern)}
    found = set().union(*(_numbers(_read(f)) for f in sources if f.is_file()))
    return found | _numbers(" ".join(CONVENTIONS))


def hand_typed(text: str, allowed_numbers: set[Decimal]) -> list[str]:
    """The numbers of `text`'s prose (outside blocks, code and references) that no generated file
    or setting carries: a figure typed by hand, which goes stale when the pins are regenerated."""
    prose = BLOCK.sub(" ", text)
    for pattern in NOT_PROSE:
        prose = pattern.sub(" ", prose)
    return [n for n in NUMBER.findall(prose) if _numbers(n) - allowed_numbers]


def pages(readme: Path) -> list[Path]:
    """README.md and every page of docs/ beside it."""
    return [readme, *sorted((readme.parent / "docs").glob("*.md"))]


def run(args) -> int:
    root = Path(args.readme).parent
    blocks = 0
    texts = {path: _read(path) for path in pages(Path(args.readme))}
    numbers = allowed(root, list(texts.values()))
    # every page checked and filled before any is written: never README rewritten and a page failed
    updated = {}
    for path, text in texts.items():
        check_markers(path, text)
        typed = hand_typed(text, numbers)
        if typed:
            raise UserError(f"{path}: {', '.join(typed[:5])} typed by hand (no generated file or setting "
                            "carries them); show the figure through a generated block, or say it in words")
        updated[path] = sync(text, root)
        blocks += len(BLOCK.findall(text))
    stale = [path for path, text in texts.items() if updated[path] != text]
    if not args.check:
        for path in stale:
            files.write_text(path, updated[path])
    if args.check:
        if stale:
            raise UserError(f"{stale[0]}: generated blocks are out of date; run `make readme`")
        print(f"readme: {args.readme} and docs/ are up to date")
        return 0
    print(f"readme: {blocks} blocks copied ({len(stale)} pages changed)")
    return 0
