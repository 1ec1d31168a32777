"""The pinned table beside earlier complete runs: per-cell differences and what became of each
Holm-significant conclusion."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from posenc.errors import UserError
from posenc.stages.earlier_runs import compare, read_table

DATA = {"data/prepared/arrays": "abc.dir"}


def table(bleu: dict, deltas: dict, data=DATA) -> dict:
    """bleu: variant -> mean test BLEU; deltas: comparison -> (delta, p_holm)."""
    def seeds(delta, p_holm):
        return {"delta": delta, "p_holm": p_holm, "ci": [delta - 0.5, delta + 0.5]}
    return {"table": {v: {"bleu_test_a": {"mean": b}, "bleu_val": {"mean": 0}} for v, b in bleu.items()},
            "significance": {"test_a": {c: {"seeds": seeds(*d)} for c, d in deltas.items()}},
            "provenance": {"code_revision": "r1", "data_md5_from_dvc_lock": data}}


def test_each_cell_and_each_significant_conclusion_is_compared():
    now = table({"sinusoidal": 30.0, "rope": 33.0, "none": 25.0, "alibi": 31.0},
                {"rope vs sinusoidal": (3.0, 0.001), "none vs sinusoidal": (-5.0, 0.001),
                 "alibi vs sinusoidal": (1.0, 0.2)})
    then = table({"sinusoidal": 30.5, "rope": 32.0, "none": 25.0, "alibi": 30.0},
                 {"rope vs sinusoidal": (1.5, 0.3), "none vs sinusoidal": (-4.0, 0.01),
                  "alibi vs sinusoidal": (-1.2, 0.01)})
    text = "\n".join(compare(now, "amd-native", then))
    assert "| rope | +1.00 |" in text and "| sinusoidal | -0.50 |" in text and "| none | +0.00 |" in text
    assert "at most 1.00 (`rope` on test_a)" in text
    assert "- the same sign, significant in both: `none vs sinusoidal` on test_a (-5.00 against -4.00)." in text
    assert "- opposite signs: `alibi vs sinusoidal` on test_a (+1.00 against -1.20)." in text
    assert "- significant in the pinned run only: `rope vs sinusoidal` on test_a (+3.00 against +1.50)." in text
    assert "- significant in the earlier run only: none." in text


def test_runs_on_other_data_are_not_compared():
    now = table({"sinusoidal": 30.0}, {})
    then = table({"sinusoidal": 20.0}, {}, data={"data/prepared/arrays": "other.dir"})
    text = "\n".join(compare(now, "tiny", then))
    assert "Computed on other data" in text and "| sinusoidal |" not in text


def test_a_file_that_is_not_a_table_is_named(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"runs": []}))
    with pytest.raises(UserError, match=r"x.json: not a table.json of `posenc report`.*git show"):
        read_table(tmp_path / "x.json")


@pytest.mark.parametrize("change", ["no code_revision", "no seeds", "empty", "a list"])
def test_a_table_without_what_the_comparison_reads_is_named(tmp_path, change):
    """Issue 49: tables without code_revision or seeds, or empty, gave a traceback."""
    t = table({"sinusoidal": 20.0, "rope": 21.0}, {"rope vs sinusoidal": (1.0, 0.01)})
    if change == "no code_revision":
        del t["provenance"]["code_revision"]
    elif change == "no seeds":
        del t["significance"]["test_a"]["rope vs sinusoidal"]["seeds"]
    elif change == "empty":
        t["table"] = {}
    else:
        t = [t]
    (tmp_path / "x.json").write_text(json.dumps(t))
    with pytest.raises(UserError, match=r"x.json: not a table.json of `posenc report`"):
        read_table(tmp_path / "x.json")


def test_the_command_writes_one_section_per_earlier_run(tmp_path):
    (tmp_path / "earlier").mkdir()
    (tmp_path / "table.json").write_text(json.dumps(table({"sinusoidal": 30.0}, {})))
    for name in ("amd-native", "intel-native"):
        (tmp_path / "earlier" / f"{name}.json").write_text(json.dumps(table({"sinusoidal": 29.0}, {})))
    r = subprocess.run([sys.executable, "-m", "posenc", "earlier-runs", "--table", "table.json",
                        "--earlier", "earlier", "--md", "out.md"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "out.md").read_text()
    assert text.count("### Against `") == 2 and "| sinusoidal | +1.00 |" in text
    (tmp_path / "empty").mkdir()
    r = subprocess.run([sys.executable, "-m", "posenc", "earlier-runs", "--table", "table.json",
                        "--earlier", "empty", "--md", "out2.md"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2 and "empty: no earlier table.json" in r.stderr and not (tmp_path / "out2.md").exists()
