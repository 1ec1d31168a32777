"""Stage extrapolate (§3.5): joined test sentences, scored as evaluation scores, and its bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.stages.extrapolate import joined

from conftest import error_line, posenc


def extrapolate(work: Path, params: str = "params.yaml", out: str = "extra/out.json"):
    return posenc("extrapolate", "--params", params, "--seed", "1", "--model", "evalm/model.pt",
                  "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays",
                  "--raw", "data/raw/multi30k", "--out", out, cwd=work)


def with_params(work: Path, name: str, old: str, new: str) -> str:
    text = (work / "params.yaml").read_text()
    assert old in text
    (work / name).write_text(text.replace(old, new))
    return name


def test_joining_keeps_order_and_leaves_out_a_short_remainder():
    lines = ["a", "b", "c", "d", "e"]
    assert joined(lines, 1) == lines
    assert joined(lines, 2) == ["a b", "c d"]
    assert joined(lines, 4) == ["a b c d"]


def test_k_1_scores_what_evaluate_scored_and_longer_inputs_are_counted(tiny_data, evaluated):
    r = extrapolate(tiny_data)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("extrapolate: sinusoidal seed 1: test_2016_flickr k=1 BLEU ")
    result = json.loads((tiny_data / "extra/out.json").read_text())
    metrics = json.loads((tiny_data / "evalm/metrics.json").read_text())
    by_k = result["splits"]["test_2016_flickr"]
    # k = 1 is the evaluate stage's own translation of the same 100 sentences
    assert by_k["1"]["bleu"] == metrics["bleu_test_2016_flickr"] and by_k["1"]["inputs"] == 100
    assert [by_k[k]["inputs"] for k in ("1", "2", "4", "8")] == [100, 50, 25, 12]
    longest = result["longest_training_source"]
    assert by_k["1"]["max_source_positions"] <= 2 * longest
    assert by_k["8"]["longer_than_training"] == 1.0 and by_k["8"]["max_source_positions"] > longest
    assert all(0 <= by_k[k]["at_length_limit"] <= by_k[k]["inputs"] for k in by_k)
    assert all(0 < by_k[k]["length_ratio"] < 5 for k in by_k)


def test_outputs_cut_at_the_limit_are_counted(tiny_data, tiny_model):
    params = with_params(tiny_data, "nolimit.yaml", "max_len_extra: 5", "max_len_extra: 0")
    r = extrapolate(tiny_data, params, "extra/limit.json")
    assert r.returncode == 0, r.stderr
    by_k = json.loads((tiny_data / "extra/limit.json").read_text())["splits"]["test_2016_flickr"]
    # a barely trained model rarely stops before the source's length when nothing more is allowed
    assert by_k["8"]["at_length_limit"] >= 1


@pytest.mark.parametrize("name, old, new, message", [
    ("badsplit.yaml", "splits: [test_2016_flickr]", "splits: [val]",
     "badsplit.yaml: extrapolate.splits: val is not a test set; choose from test_2016_flickr, "
     "test_2017_flickr, test_2017_mscoco"),
    ("bigk.yaml", "joins: [1, 2, 4, 8]", "joins: [1, 500]",
     "bigk.yaml: extrapolate.joins: k = 500 is more than the 100 sentences of test_2016_flickr; lower it"),
])
def test_bad_extrapolation_params_are_named(tiny_data, tiny_model, name, old, new, message):
    params = with_params(tiny_data, name, old, new)
    line = error_line(extrapolate(tiny_data, params, f"extra/{name}.json"), "extrapolate")
    assert line == f"posenc extrapolate: error: {message}"
    assert not (tiny_data / f"extra/{name}.json").exists()
