"""`posenc plots-page`: DVC's offline plots template, self-contained (Vega inlined), so that the
page `dvc plots show --html-template ... -o DIR` writes draws wherever DIR is."""

from __future__ import annotations

from dvc_render.html import HTML

from conftest import ROOT, error_line, posenc

SCRIPTS = ("vega/build/vega.min.js", "vega-lite/build/vega-lite.min.js", "vega-embed/build/vega-embed.min.js")


def test_the_page_inlines_every_script_and_dvc_fills_it(tmp_path):
    modules = tmp_path / "node_modules"
    for i, name in enumerate(SCRIPTS):
        (modules / name).parent.mkdir(parents=True)
        # braces (DVC fills the template by text replacement) and a closing tag inside a string
        (modules / name).write_text(f'var s{i} = {{a: "</script>"}}; function f{i}() {{ return {i}; }}\n')
    r = posenc("plots-page", "--node-modules", str(modules), "--out", str(tmp_path / "page.html"), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "page.html").read_text()
    assert "<script src=" not in page  # nothing left to load by a path
    for i, name in enumerate(SCRIPTS):
        assert f"function f{i}() {{ return {i}; }}" in page and f"/* {name} */" in page
    assert page.count("</script>") == len(SCRIPTS)  # the string's closing tag escaped
    filled = HTML(page).with_element('<div id="plot">x</div>').embed()  # as `dvc plots show` fills it
    assert '<div id="plot">x</div>' in filled and "function f2() { return 2; }" in filled


def test_missing_vega_says_how_to_install_it(tmp_path):
    r = posenc("plots-page", "--node-modules", str(tmp_path / "nm"), "--out", str(tmp_path / "page.html"), cwd=ROOT)
    line = error_line(r, "plots-page")
    assert line.endswith("vega/build/vega.min.js: missing; install Vega first: npm install --no-save vega@5 "
                         "vega-lite@5 vega-embed@6")
    assert not (tmp_path / "page.html").exists()


def test_a_script_that_is_not_utf8_is_one_line(tmp_path):
    """Issue 49: a non-UTF-8 file gave a traceback."""
    modules = tmp_path / "node_modules"
    for name in SCRIPTS:
        (modules / name).parent.mkdir(parents=True)
        (modules / name).write_bytes(b"var s = '\xe9';\n")
    r = posenc("plots-page", "--node-modules", str(modules), "--out", str(tmp_path / "page.html"), cwd=ROOT)
    assert "vega/build/vega.min.js: not UTF-8 text; install Vega again" in error_line(r, "plots-page")
    assert not (tmp_path / "page.html").exists()
