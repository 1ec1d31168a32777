"""`posenc readme`: copy generated files into README.md between their markers.

README.md shows the pipeline's tables, findings and analysis only through blocks like

    <!-- begin: results/table.md -->
    ...(the file's contents, copied here)...
    <!-- end: results/table.md -->

so none of them is typed by hand. `--check` fails when a block is stale (a test runs it). The prose
around them (Results, "In short", "Two platforms") quotes some of their figures by hand, and is
retyped when the pins are regenerated.
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
            raise UserError(f"README.md names {match['path']}, which does not exist; run `dvc repro`")
        return match[1] + source.read_text(encoding="utf-8") + match[4]
    return BLOCK.sub(fill, text)


def run(args) -> int:
    path = Path(args.readme)
    text = path.read_text(encoding="utf-8")
    updated = sync(text, path.parent)
    if args.check:
        if updated != text:
            raise UserError(f"{path}: generated blocks are out of date; run `make readme`")
        print(f"readme: {path} is up to date")
        return 0
    files.write_text(path, updated)
    print(f"readme: {len(BLOCK.findall(text))} blocks copied into {path}")
    return 0
