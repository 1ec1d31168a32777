"""`posenc readme`: copy generated files into README.md and docs/*.md between their markers.

README.md and the pages of docs/ show the pipeline's tables, findings and analysis only through
blocks like

    <!-- begin: results/table.md -->
    ...(the file's contents, copied here)...
    <!-- end: results/table.md -->

so none of them is typed by hand; a block names its file relative to the project root, wherever
the page is. `--check` fails when a block is stale (a test runs it). The prose around them in
docs/results.md quotes some of their figures by hand, and is retyped when the pins are regenerated.
"""

from __future__ import annotations

import re
from pathlib import Path

from posenc import files
from posenc.errors import UserError

BLOCK = re.compile(r"(<!-- begin: (?P<path>[^ ]+) -->\n)(?P<body>.*?)(<!-- end: (?P=path) -->)", re.S)


def sync(text: str, root: Path) -> str:
    def fill(match: re.Match) -> str:
        source = root / match["path"]
        if not source.is_file():
            raise UserError(f"a page names {match['path']}, which does not exist; run `dvc repro`")
        return match[1] + source.read_text(encoding="utf-8") + match[4]
    return BLOCK.sub(fill, text)


def pages(readme: Path) -> list[Path]:
    """README.md and every page of docs/ beside it."""
    return [readme, *sorted((readme.parent / "docs").glob("*.md"))]


def run(args) -> int:
    root = Path(args.readme).parent
    stale, blocks = [], 0
    for path in pages(Path(args.readme)):
        text = path.read_text(encoding="utf-8")
        updated = sync(text, root)
        blocks += len(BLOCK.findall(text))
        if updated != text:
            stale.append(path)
            if not args.check:
                files.write_text(path, updated)
    if args.check:
        if stale:
            raise UserError(f"{stale[0]}: generated blocks are out of date; run `make readme`")
        print(f"readme: {args.readme} and docs/ are up to date")
        return 0
    print(f"readme: {blocks} blocks copied ({len(stale)} pages changed)")
    return 0
