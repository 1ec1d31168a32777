"""`posenc plots-page`: DVC's HTML template for drawing the plots without a network, made
self-contained. `.dvc/plots/offline.html` loads Vega from the project's node_modules by a relative
path, which holds only where DVC writes the page by default (dvc_plots/); this writes a copy with
the three scripts inlined, so that `dvc plots show --html-template <it> -o <anywhere>` draws
wherever the page is written or moved to. DVC fills the template by plain text replacement of
`{plot_divs}` (dvc_render), so the braces of the inlined code are safe.
"""

from __future__ import annotations

import re
from pathlib import Path

from posenc import files
from posenc.errors import UserError

SCRIPT = re.compile(r'<script src="[^"]*node_modules/([^"]+)"></script>')


def inline(template: str, node_modules: Path) -> str:
    """`template` with each <script src=".../node_modules/X"> replaced by X's code, read from
    `node_modules`."""
    def code(match: re.Match) -> str:
        path = Path(node_modules) / match.group(1)
        if not path.is_file():
            raise UserError(f"{path}: missing; install Vega first: npm install --no-save vega@5 "
                            f"vega-lite@5 vega-embed@6")
        # "</script" inside the code would end the element early; "<\/" reads the same in JS
        text = _read(path, "install Vega again: npm install --no-save vega@5 vega-lite@5 vega-embed@6")
        text = text.replace("</script", "<\\/script")
        return f"<script>/* {match.group(1)} */\n{text}\n</script>"

    if not SCRIPT.search(template):
        raise UserError("the template loads no script from node_modules: nothing to inline")
    return SCRIPT.sub(code, template)


def _read(path: Path, fix: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; {fix}") from None


def run(args) -> None:
    template = Path(args.template)
    if not template.is_file():
        raise UserError(f"{template}: missing; it is the project's .dvc/plots/offline.html")
    page = inline(_read(template, "`git checkout .dvc/plots/offline.html` restores it"), Path(args.node_modules))
    files.write_text(args.out, page)
    print(f"plots-page: {args.out} ({len(page.encode()) / 1e6:.1f} MB, Vega inlined): "
          f"dvc plots show --html-template {args.out} -o DIR")
