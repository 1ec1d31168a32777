"""Evaluation's bad inputs: an unreadable model, and sources that a learned table cannot hold."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch

from posenc import checkpoints
from posenc.config import LearnedSettings, ModelConfig
from posenc.model import build_model

from conftest import error_line, posenc


def evaluate(work: Path, model: str):
    return posenc("evaluate", "--seed", "1", "--model", model, "--last", model, "--spm", "data/prepared/spm.model",
                  "--arrays", "data/prepared/arrays", "--raw", "data/raw/multi30k",
                  "--metrics", "out/metrics.json", "--scores", "out/scores.json",
                  "--signatures", "out/signatures.json",
                  "--hyps", "out/hyps", cwd=work)


@pytest.fixture
def trained(tiny_model) -> Path:
    return tiny_model


def test_a_truncated_model_names_the_file_and_how_to_make_it(tiny_data, trained):
    cut = tiny_data / "models/sinusoidal-1/model.pt"
    cut.parent.mkdir(parents=True, exist_ok=True)
    cut.write_bytes(trained.read_bytes()[:3000])
    line = error_line(evaluate(tiny_data, "models/sinusoidal-1/model.pt"), "evaluate")
    assert line.startswith("posenc evaluate: error: models/sinusoidal-1/model.pt: not a readable posenc model")
    assert line.endswith("train it again (`dvc repro -f` its train stage, or posenc train)")
    assert not (tiny_data / "out").exists()


def test_a_missing_model_says_how_to_make_it(tiny_data):
    """The evaluation stages import no path layout (it would make every pinned evaluation stale
    when the layout's code changes): `posenc pins` names the unit's stages."""
    line = error_line(evaluate(tiny_data, "models/none-9/model.pt"), "evaluate")
    assert line == ("posenc evaluate: error: models/none-9/model.pt: missing; train it (`posenc pins` names the "
                    "stage that writes it, `dvc pull models/none-9/model.pt` fetches it where a DVC remote "
                    "holds the pinned weights)")


def test_a_source_longer_than_a_learned_table_stops_before_decoding(tiny_data, trained):
    """Evaluation does not cut a source to fit (that would score a translation of part of it)."""
    saved = torch.load(trained, weights_only=True)
    config = dataclasses.replace(ModelConfig.from_dict(saved["config"]), positional="learned",
                                 position=LearnedSettings(max_positions=20))
    path = tiny_data / "models/learned-short/model.pt"
    checkpoints.save_model(path, config, build_model(config).state_dict())
    line = error_line(evaluate(tiny_data, "models/learned-short/model.pt"), "evaluate")
    assert "data/prepared/arrays/val.de.npy: sentence " in line
    assert "more than the learned position table's 20 rows" in line
    assert "raise positional.learned.max_positions to at least" in line
    assert not (tiny_data / "out").exists()
    shutil.rmtree(path.parent)


def test_the_train_stage_writes_the_last_checkpoint_beside_the_average(tiny_model):
    """Table 3's dev columns come from the last checkpoint (§6.2), the test sets from the average
    of the last train.average_last (§6.1): two models, both rebuilt from their own config."""
    average = checkpoints.load_model(tiny_model)
    last = checkpoints.load_model(tiny_model.with_name("last.pt"))
    a, b = average.state_dict(), last.state_dict()
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)


def test_references_cut_short_are_refused_in_one_line(tiny_data, trained, tmp_path):
    """A reference file of 50 lines for 100 translated sentences is not scored."""
    raw = tmp_path / "raw"
    shutil.copytree(tiny_data / "data/raw/multi30k", raw)
    refs = raw / "test_2016_flickr.de"
    refs.write_text("\n".join(refs.read_text().split("\n")[:50]) + "\n")
    r = posenc("evaluate", "--seed", "1", "--model", "evalm/model.pt", "--last", "evalm/last.pt",
               "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays", "--raw", str(raw),
               "--metrics", "cut/metrics.json", "--scores", "cut/scores.json",
               "--signatures", "cut/signatures.json", "--hyps", "cut/hyps", cwd=tiny_data)
    assert error_line(r, "evaluate") == (f"posenc evaluate: error: {refs}: 50 references for 100 translated "
                                         f"sentences; fetch the references again (`dvc repro -f fetch`)")
    assert not (tiny_data / "cut/metrics.json").exists()
