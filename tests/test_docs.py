"""README.md and docs/: generated blocks up to date, links that resolve, a front door of about 250
lines, and no figure typed by hand."""

from __future__ import annotations

import pytest

from conftest import ROOT
from posenc.errors import UserError
from posenc.readme import allowed, hand_typed, pages, sync


def test_readme_blocks_are_copied_from_their_files(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results/t.md").write_text("| a |\n")
    text = "intro\n<!-- begin: results/t.md -->\nold\n<!-- end: results/t.md -->\noutro\n"
    assert sync(text, tmp_path) == "intro\n<!-- begin: results/t.md -->\n| a |\n<!-- end: results/t.md -->\noutro\n"


def test_readme_and_docs_show_the_committed_results():
    from posenc.readme import pages

    shown = ""
    for page in pages(ROOT / "README.md"):
        text = page.read_text(encoding="utf-8")
        assert sync(text, ROOT) == text, f"{page} is stale: run `make readme`"
        shown += text
    for block in ("results/table.md", "results/findings.md", "results/analysis.md", "results/earlier_runs.md"):
        assert f"<!-- begin: {block} -->" in shown
    assert "<!-- begin: results/summary.md -->" in (ROOT / "README.md").read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_of_readme_and_docs_resolves():
    """Relative links name a file that exists and, after #, a heading of it."""
    import re

    from posenc.readme import pages

    checked = 0
    for page in pages(ROOT / "README.md"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name}: {target}: no such file"
            if anchor:
                headings = [_slug(line.lstrip("#")) for line in linked.read_text(encoding="utf-8").split("\n")
                            if line.startswith("#")]
                assert anchor in headings, f"{page.name}: {target}: no such heading in {linked.name}"
            checked += 1
    assert checked > 30


def test_the_readme_is_a_front_door():
    """Under about 250 lines; the rest is in docs/, one page a subject, every page linked from it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "README.md":
            assert f"(docs/{page.name})" in text, f"README does not link docs/{page.name}"


def test_no_figure_in_readme_or_docs_is_typed_by_hand():
    """Every number of the prose around the blocks is one that a generated file (a pipeline
    output, a benchmark record) or a setting carries: regenerating the pins cannot leave a stale
    figure behind."""
    texts = {page: page.read_text(encoding="utf-8") for page in pages(ROOT / "README.md")}
    numbers = allowed(ROOT, list(texts.values()))
    for page, text in texts.items():
        assert hand_typed(text, numbers) == [], f"{page}: typed by hand"


def test_a_hand_typed_figure_is_found_and_code_references_and_citations_are_not(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results/t.md").write_text("| rope | 34.20 ± 2.00 | 1,200 |\n")
    block = "<!-- begin: results/t.md -->\n| rope | 34.20 ± 2.00 | 1,200 |\n<!-- end: results/t.md -->\n"
    ok = (block + "rope reaches 34.20 BLEU after 1200 updates (Vaswani et al. 2017, §3.5, Table 3); "
          "`--rounds 7` and\n```sh\nposenc verify --sentences 50\n```\n1. a list item\n")
    numbers = allowed(tmp_path, [ok])
    assert hand_typed(ok, numbers) == []
    stale = block + "rope gains 1.9-3.4 BLEU, 0.240 ± 0.013 of the variance.\n"
    assert hand_typed(stale, numbers) == ["1.9", "3.4", "0.240", "0.013"]


def test_make_readme_check_names_the_page_with_a_hand_typed_figure(tmp_path):
    from types import SimpleNamespace

    from posenc.readme import run

    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# x\n\nThe table says 8.975 here.\n")
    with pytest.raises(UserError, match=r"README.md: 8.975 typed by hand .*generated block"):
        run(SimpleNamespace(readme=str(tmp_path / "README.md"), check=True))


def test_make_readme_writes_every_page_or_none(tmp_path):
    """A docs page that names a missing file stops `posenc readme` before README is rewritten,
    and a begin marker without its end is named, with --check too."""
    from types import SimpleNamespace

    from posenc.readme import run

    (tmp_path / "docs").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "results/t.md").write_text("| new |\n")
    readme = "# x\n<!-- begin: results/t.md -->\n| old |\n<!-- end: results/t.md -->\n"
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs/a.md").write_text("<!-- begin: results/gone.md -->\n<!-- end: results/gone.md -->\n")
    with pytest.raises(UserError, match=r"names results/gone.md, which does not exist"):
        run(SimpleNamespace(readme=str(tmp_path / "README.md"), check=False))
    assert (tmp_path / "README.md").read_text() == readme
    (tmp_path / "docs/a.md").write_text("<!-- begin: results/t.md -->\nno end\n")
    for check in (True, False):
        with pytest.raises(UserError, match=r"a.md: `<!-- begin: results/t.md -->` has no `<!-- end: results/t.md -->`"):
            run(SimpleNamespace(readme=str(tmp_path / "README.md"), check=check))
    assert (tmp_path / "README.md").read_text() == readme
    (tmp_path / "docs/a.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(UserError, match=r"a.md: not UTF-8 text"):
        run(SimpleNamespace(readme=str(tmp_path / "README.md"), check=True))


def headings() -> set[str]:
    return {line.lstrip("#").strip() for page in pages(ROOT / "README.md")
            for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#") and " " in line}


REFERENCE = r"README(?:\.md)?, [\"“]?([A-Z][^)\"”;:]*?)[\"”]?(?:\)|$|;|:)"
PAGE = r"docs/([\w-]+\.md)"


def test_every_reference_to_a_section_or_a_page_resolves():
    """Comments and help texts say "README, <section>" (a heading of README or of a docs page, as
    README's Documentation section says) or name a docs page: each must exist, in the code, the
    params files, dvc.yaml, the Makefile, CITATION.cff and `posenc --help`."""
    import re
    import subprocess
    import sys

    sources = [*ROOT.glob("src/posenc/**/*.py"), *ROOT.glob("benchmarks/*.py"), ROOT / "params.yaml",
               *ROOT.glob("profiles/*.yaml"), ROOT / "dvc.yaml", ROOT / "Makefile", ROOT / "CITATION.cff"]
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sources}
    texts["posenc --help"] = subprocess.run([sys.executable, "-m", "posenc", "--help"], capture_output=True,
                                            text=True).stdout
    known, bad, checked = headings(), [], 0
    for where, text in texts.items():
        for section in re.findall(REFERENCE, text, re.M):
            checked += 1
            if not any(h == section or h.startswith(section) for h in known):
                bad.append(f"{where}: README, {section}")
        for page in re.findall(PAGE, text):
            checked += 1
            if not (ROOT / "docs" / page).is_file():
                bad.append(f"{where}: docs/{page}")
    assert checked > 20 and not bad, bad
