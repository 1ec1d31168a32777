"""Where one run's files are, and which stages make up its unit.

A run is `models/<run>/` (its weights only, `model.pt` and `last.pt`, cached by DVC) and one
text directory under `results/` that git tracks (`<part's results>/<item>/`): train's logs,
digests and highway log, evaluate's metrics, scores, signatures and hypotheses, extrapolate's and
measure's files. dvc.yaml writes the top directories and hands them to the stages; a stage that
reads every run (report, analyze, residuals, trained_short) finds each run's files here
(tests/test_dvc.py checks that the two agree).

A unit is one run's training and every stage that reads its weights, in order (`PARTS`): the
pinning run lands whole units (posenc.pinning), so that every aggregate is rebuilt from text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from posenc import files
from posenc.config import POSITIONAL
from posenc.errors import UserError

MODEL, LAST = "model.pt", "last.pt"                        # models/<run>/: the weights
TRAIN_LOG, DEV_LOG = "train_log.tsv", "dev_log.tsv"        # the run's text: train's
DIGESTS, HIGHWAY = "digests.json", "highway_log.tsv"
METRICS, SCORES, SIGNATURES, HYPS = "metrics.json", "scores.json", "signatures.json", "hyps"  # evaluate's
EXTRAPOLATION = "extrapolation.json"                       # extrapolate's
ANALYSIS = "analysis.json"                                 # measure's
LENGTHS = "lengths.json"                                   # evaluate_short's


@dataclass(frozen=True)
class Part:
    """One part of the pinning run: its runs' models/ prefix and each unit's stages in order (one
    chain per dvc.yaml matrix; the summed residual runs are a matrix of their own)."""
    name: str
    prefix: str
    chains: tuple[tuple[str, ...], ...]


PARTS = (Part("positional", "", (("train", "evaluate", "extrapolate", "measure"),)),
         Part("residual", "residual-", (("train_residual", "evaluate_residual"),
                                        ("train_residual_sum", "evaluate_residual_sum"))),
         Part("short", "short-", (("train_short", "evaluate_short"),)))


def unit_of(stage: str) -> tuple[Part, str, tuple[str, ...]] | None:
    """(part, unit name, the unit's chain of stages) of a dvc.yaml stage `<name>@<item>`; None for
    a stage outside every unit (fetch, prepare, the aggregates). The unit's name is its run's
    models/ directory: `sinusoidal-1`, `residual-concat-3-1`, `short-rope-2`."""
    name, _, item = stage.partition("@")
    for part in PARTS:
        for chain in part.chains:
            if name in chain and item:
                return part, part.prefix + item, chain
    return None


def run_name(variant: str, seed: int) -> str:
    """`<variant>-<seed>`: how dvc.yaml's train and evaluate matrices name a run's directories."""
    return f"{variant}-{seed}"


def residual_name(kind: str, layers: int, seed: int) -> str:
    """`<kind>-<layers>-<seed>`: a run of the residual study (dvc.yaml's train_residual and
    train_residual_sum): its weights in models/residual-<name>/, its text in
    results/residual/runs/<name>/."""
    return f"{kind}-{layers}-{seed}"


def model_path(models: Path, variant: str, seed: int) -> Path:
    return Path(models) / run_name(variant, seed) / MODEL


def result_dir(runs: Path, variant: str, seed: int) -> Path:
    """results/runs/<variant>-<seed>: train's logs and digests, evaluate's metrics.json (DVC's
    metrics: parameters, dev PPL, dev and first test set's sacreBLEU, numbers only), scores.json
    (the other scores per split), signatures.json and hyps/, extrapolate's extrapolation.json and
    measure's analysis.json."""
    return Path(runs) / run_name(variant, seed)


def dev_log_path(runs: Path, variant: str, seed: int) -> Path:
    return result_dir(runs, variant, seed) / DEV_LOG


def read_object(path: Path, fix: str, writer: str = "its stage") -> dict:
    """A JSON object that `writer` wrote (a run's metrics, scores, signatures; a unit's record):
    a file that is missing, not JSON or not an object is one line naming it and `fix`."""
    got = files.read_json(path, fix)
    if not isinstance(got, dict):
        raise UserError(f"{path}: not the JSON object {writer} writes; {fix}")
    return got


RESTORE_LOCK = "`git checkout dvc.lock` restores the committed one"


def lock_stages(lock: Path, fix: str = RESTORE_LOCK) -> dict:
    """dvc.lock's stages, read in the one place that reads them ({} for a lock without any); a
    corrupt file, one that is not UTF-8 or holds no mapping of stages is one line naming it and
    `fix`. What a missing lock means is the caller's to say."""
    try:
        raw = yaml.safe_load(lock.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise UserError(f"{lock}: not a DVC lock file ({type(e).__name__}); {fix}") from None
    stages = raw.get("stages", {}) if isinstance(raw, dict) else None
    if not isinstance(stages, dict):
        raise UserError(f"{lock}: no mapping of stages; {fix}")
    return stages


def trained_with(model: Path, lock: Path) -> Path:
    """The SentencePiece model that dvc.lock records as a dependency of the stage that wrote
    `model` (paths relative to the project root, where dvc.lock is)."""
    if not lock.is_file():
        raise UserError(f"{lock}: missing, so the SentencePiece model of {model} is unknown; "
                        f"pass --spm (e.g. --spm data/prepared/spm.model)")
    root = lock.resolve().parent
    try:
        wanted = model.resolve().relative_to(root).as_posix()
    except ValueError:
        wanted = None
    fix = "`git checkout dvc.lock` restores it, or pass --spm"
    stages = lock_stages(lock, fix)
    try:
        for stage in stages.values():
            if any(out.get("path") == wanted for out in stage.get("outs", [])):
                for dep in stage.get("deps", []):
                    if dep["path"].endswith(".model"):
                        return root / dep["path"]
    except (AttributeError, TypeError, KeyError):  # a stage that is not what DVC writes
        raise UserError(f"{lock}: not a DVC lock file; {fix}") from None
    raise UserError(f"{lock}: no stage writes {model}, so its SentencePiece model is unknown; "
                    f"pass --spm (e.g. --spm data/prepared/spm.model)")


def train_stage_of(model: Path) -> str | None:
    """The dvc.yaml stage that writes `model` (models/<run>/<file>), or None when the path is not
    a pipeline output: `train@<variant>-<seed>`, `train_short@<variant>-<seed>` for
    models/short-*, `train_residual@<kind>-<layers>-<seed>` for models/residual-* (and
    `train_residual_sum@` for the summed ones)."""
    model = Path(model)
    if model.parent.parent.name != "models":
        return None
    name = model.parent.name
    kind, _, item = name.partition("-")
    if kind == "short":
        return f"train_short@{item}"
    if kind == "residual":
        return f"train_residual{'_sum' if item.startswith('sum-') else ''}@{item}"
    variant, _, seed = name.rpartition("-")
    return f"train@{name}" if variant in POSITIONAL and seed.isdigit() else None


def require_model(model: Path) -> None:
    """For the tools that take a model by path (translate, export, verify): a missing one is one
    line naming the stage that trains it. The stages themselves get their models from DVC."""
    model = Path(model)
    if not model.is_file():
        stage = train_stage_of(model)
        raise UserError(f"{model}: missing; " + (f"`dvc repro {stage}` trains it (or `dvc pull {model}` "
                        f"fetches it, once a DVC remote holding the pinned outputs is set)" if stage else
                        "give the model.pt of a trained run (posenc train writes one)"))
