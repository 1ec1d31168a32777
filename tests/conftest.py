"""Shared fixtures: the data mirror, the tiny profile, and its prepared data (made once)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dataclasses

import pytest
import torch

from posenc import config
from posenc.config import ModelConfig
from posenc.model import build_model

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("POSENC_DATA_MIRROR") or ROOT.parent / "shared" / "data" / "wmt")
TINY = ROOT / "profiles" / "tiny.yaml"

# Each variant's settings in the unit tests' small model.
SETTINGS = {"sinusoidal": config.SinusoidalSettings(), "learned": config.LearnedSettings(64),
            "concat": config.ConcatSettings(8, "sinusoidal", 64),
            "sinusoidal_narrow": config.SinusoidalNarrowSettings(8), "none": config.NoneSettings(),
            "rope": config.RopeSettings(10000.0), "alibi": config.AlibiSettings(),
            "relative": config.RelativeSettings(3)}
# A small model for unit tests: vocabulary 60, special ids as SentencePiece gives them (prepare.py).
SMALL = ModelConfig(positional="sinusoidal", position=SETTINGS["sinusoidal"], vocab_size=60, pad_id=0,
                    bos_id=2, eos_id=3, d_model=32, d_ff=64, heads=4, layers=2, dropout=0.0, norm="post")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end tests (marked `slow`) first, the rest in file order: under `make test`'s
    workers (pytest-xdist, a file to a worker) they start at once and run beside the rest."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def model_of(variant: str, **changes) -> torch.nn.Module:
    """SMALL with `variant` (and its SETTINGS unless `position` is given) and `changes`, seeded,
    in eval mode."""
    torch.manual_seed(0)
    changes.setdefault("position", SETTINGS[variant])
    return build_model(dataclasses.replace(SMALL, positional=variant, **changes)).eval()


def posenc(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the command line as a user would, in `cwd`."""
    return subprocess.run([sys.executable, "-m", "posenc", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "POSENC_DATA_MIRROR": str(MIRROR), **(env or {})})


def error_line(r: subprocess.CompletedProcess, stage: str) -> str:
    """The one error line of a failed stage, on a line of its own (not after a progress bar)."""
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [line for line in r.stderr.replace("\r", "\n").split("\n") if "error:" in line]
    assert len(lines) == 1 and lines[0].startswith(f"posenc {stage}: error: "), r.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The WMT data the tests read (references, the tiny profile's corpus), laid out as
    ../shared/data/wmt; without it, one line naming the variable and the official source."""
    from posenc.downloads import MIRROR_ENV, MULTI30K_URL

    if not (MIRROR / "SHA256SUMS").is_file():
        pytest.fail(f"{MIRROR}: no data mirror; set {MIRROR_ENV} to a copy of the WMT data (the layout of "
                    f"../shared/data/wmt: SOURCES.md there names each file's official source, Multi30k's "
                    f"being {MULTI30K_URL})", pytrace=False)
    return MIRROR


@pytest.fixture(scope="session")
def oracles(tmp_path_factory) -> Path:
    """The original scoring scripts (posenc.oracles): from POSENC_ORACLE_MIRROR, else downloaded
    from their official sources at the pinned commits; else one line naming the source."""
    from posenc import oracles as sources
    from posenc.errors import UserError

    try:
        return sources.get(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "posenc" / "oracles")
    except UserError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory, mirror) -> Path:
    """A directory holding params.yaml (the tiny profile), data/raw/multi30k and data/prepared."""
    work = tmp_path_factory.mktemp("tiny")
    shutil.copy(TINY, work / "params.yaml")
    r = posenc("fetch", "--out", "data/raw/multi30k", cwd=work)
    assert r.returncode == 0, r.stderr
    r = posenc("prepare", "--raw", "data/raw/multi30k", "--spm", "data/prepared/spm.model",
               "--arrays", "data/prepared/arrays", "--stats", "data/prepared/stats.json", cwd=work)
    assert r.returncode == 0, r.stderr
    return work


@pytest.fixture(scope="session")
def tiny_model(tiny_data) -> Path:
    """A model of the tiny profile (sinusoidal, seed 1), trained once: tiny_data/evalm/model.pt
    (averaged) and evalm/last.pt (the last checkpoint)."""
    r = posenc("train", "--variant", "sinusoidal", "--seed", "1", "--spm", "data/prepared/spm.model",
               "--arrays", "data/prepared/arrays", "--model", "evalm/model.pt", "--last", "evalm/last.pt",
               "--train-log", "evalm/train_log.tsv", "--dev-log", "evalm/dev_log.tsv",
               "--checkpoints", "ck/evalm", "--timings", "logs/evalm.json",
               "--digests", "evalm/digests.json", "--highway", "evalm/highway_log.tsv", cwd=tiny_data)
    assert r.returncode == 0, r.stderr
    return tiny_data / "evalm/model.pt"


@pytest.fixture(scope="session")
def evaluated(tiny_data, tiny_model) -> Path:
    """The hypotheses that `evaluate` wrote for the tiny model (the first 100 lines of each split),
    beside its metrics.json and scores.json in tiny_data/evalm."""
    r = posenc("evaluate", "--seed", "1", "--model", "evalm/model.pt", "--last", "evalm/last.pt",
               "--spm", "data/prepared/spm.model",
               "--arrays", "data/prepared/arrays", "--raw", "data/raw/multi30k",
               "--metrics", "evalm/metrics.json", "--scores", "evalm/scores.json",
               "--signatures", "evalm/signatures.json", "--hyps", "evalm/hyps", cwd=tiny_data)
    assert r.returncode == 0, r.stderr
    return tiny_data / "evalm/hyps"


@pytest.fixture
def copy_mirror(tmp_path, mirror) -> Path:
    """A writable copy of the mirror's Multi30k part, to damage in bad-input tests."""
    dest = tmp_path / "mirror"
    shutil.copytree(mirror / "multi30k", dest / "multi30k")
    return dest


# The tiny profile trained 120 updates instead of 24, so that its models output words (at 24 they
# output an empty line for every input, and decoding tests would test nothing).
LONGER = {"max_steps: 24": "max_steps: 120", "warmup: 8": "warmup: 40", "save_every: 8": "save_every: 40",
          "dev_every: 8": "dev_every: 40"}


@pytest.fixture(scope="session")
def longer(tiny_data):
    """`longer(variant)`: tiny_data/longer-<variant>/, a seed-1 run of the tiny profile with the
    LONGER settings (params in tiny_data/longer.yaml), trained once per session and variant: its
    model.pt, train_log.tsv and digests.json."""
    text = (tiny_data / "params.yaml").read_text(encoding="utf-8")
    for old, new in LONGER.items():
        assert old in text
        text = text.replace(old, new)
    (tiny_data / "longer.yaml").write_text(text, encoding="utf-8")

    def run(variant: str) -> Path:
        name = f"longer-{variant}"
        if not (tiny_data / name / "model.pt").is_file():
            r = posenc("train", "--params", "longer.yaml", "--variant", variant, "--seed", "1",
                       "--spm", "data/prepared/spm.model", "--arrays", "data/prepared/arrays",
                       "--model", f"{name}/model.pt", "--last", f"{name}/last.pt",
                       "--train-log", f"{name}/train_log.tsv", "--dev-log", f"{name}/dev_log.tsv",
                       "--checkpoints", f"ck/{name}", "--timings", f"logs/{name}.json",
                       "--digests", f"{name}/digests.json", "--highway", f"{name}/highway_log.tsv", cwd=tiny_data)
            assert r.returncode == 0, r.stderr[-2000:]
        return tiny_data / name
    return run
