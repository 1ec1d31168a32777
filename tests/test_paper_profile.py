"""The paper profile's own code path through `dvc repro`, at toy sizes.

`profiles/paper.yaml` with only the keys of TOY changed: sizes (updates, widths, layers, sentence
counts), the size of the matrix (one seed of two variants: Table 3 row (E)'s pair), and the
machine (two torchrun processes and their threads instead of eight GPUs). Everything else, the WMT14 corpus,
the launcher, the paper's optimizer, schedule, decoding and scoring, is the profile's own; the
test checks that no other key differs. WMT14 comes from the mirror, whose training text is a
sample, so `data.max_train_pairs` asks for a subset (the profile refuses the sample otherwise).
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from conftest import ROOT
from test_pipeline import sh

TOY = {
    "variants": ["sinusoidal", "learned"],
    "seeds": [1],
    "launcher": "torchrun --standalone --nproc_per_node 2",
    "data": {"max_train_pairs": 400},
    "tokenizer": {"vocab_size": 600, "threads": 2},
    "model": {"d_model": 32, "d_ff": 64, "layers": 1},
    "residual_study": {"depths": [1]},  # the paper's depth is model.layers, so the toy's is too
    "positional": {"concat": {"dim": 8}, "sinusoidal_narrow": {"dim": 8}},
    "train": {"max_tokens": 1500, "max_steps": 6, "warmup": 3, "save_every": 3, "dev_every": 3,
              "average_last": 2, "threads": 1},
    # an untrained model decodes to the length limit, so every sentence costs the most it can
    "eval": {"batch_tokens": 8000, "threads": 2, "max_sentences": 16},
    "extrapolate": {"max_sentences": 16},
    "report": {"bootstrap_samples": 100},
    "analyze": {"max_sentences": 16, "random_trials": 20},
}


def merged(base: dict, changes: dict) -> dict:
    out = dict(base)
    for key, value in changes.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) else value
    return out


def flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_only_size_keys_differ_from_the_paper_profile():
    paper = yaml.safe_load((ROOT / "profiles" / "paper.yaml").read_text())
    toy = merged(paper, TOY)
    differ = {k for k in flat(paper) if flat(paper)[k] != flat(toy)[k]}
    assert differ == set(flat(TOY)) and set(flat(toy)) == set(flat(paper))


@pytest.mark.slow
def test_the_paper_profile_runs_through_dvc_repro_with_two_torchrun_processes(tmp_path, mirror):  # mirror: without the data, one line
    work = tmp_path / "paper"
    work.mkdir()
    for name in ("src", "dvc.yaml", "pyproject.toml", ".gitignore", "results/earlier"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, work / name)
    paper = yaml.safe_load((ROOT / "profiles" / "paper.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(merged(paper, TOY), sort_keys=False))
    sh("git", "init", "-q", cwd=work)
    sh("dvc", "init", "-q", cwd=work)
    sh("dvc", "config", "core.analytics", "false", cwd=work)
    shutil.copytree(ROOT / ".dvc" / "plots", work / ".dvc" / "plots")
    sh("dvc", "repro", cwd=work)

    stats = json.loads((work / "data/prepared/stats.json").read_text())
    train = stats["fetch"]["splits"]["train"]
    assert train["origin"] == "mirror: wmt14-en-de/train-*" and train["subset"] == 400 and train["pairs"] == 400
    for variant in TOY["variants"]:
        timings = json.loads((work / f"logs/train-{variant}-1.json").read_text())
        assert timings["processes"] == 2 and timings["steps"] == 6
        metrics = json.loads((work / f"results/runs/{variant}-1/metrics.json").read_text())
        scores = json.loads((work / f"results/runs/{variant}-1/scores.json").read_text())
        assert set(metrics) == {"parameters", "dev_ppl", "bleu_newstest2013", "bleu_newstest2014"}
        assert set(scores) == {f"{m}_{s}" for m in ("chrf", "bleu_tok") for s in ("newstest2013", "newstest2014")}
        extrapolation = json.loads((work / f"results/runs/{variant}-1/extrapolation.json").read_text())
        assert list(extrapolation["splits"]["newstest2014"]) == ["1", "2", "4", "8"]
    table = (work / "results/table.md").read_text()
    assert "| learned |" in table and "tok BLEU newstest2014" in table and "newstest2014:" in table
    assert "dev tok+compound-split BLEU (newstest2013)" in table
    # the earlier complete runs are the default profile's: another corpus, so no cell is compared
    assert (work / "results/earlier_runs.md").read_text().count("Computed on other data") == 2
    # the residual study compares each kind with the sum at the same depth, as at the paper's size
    assert "concat vs sum, 1 layer" in (work / "results/residual/table.md").read_text()
