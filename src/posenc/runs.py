"""Where one run's files are: the rules behind dvc.yaml's `models/<variant>-<seed>/` and
`results/runs/<variant>-<seed>/{metrics.json, scores.json, signatures.json, hyps/<split>.de,
extrapolation.json}`. dvc.yaml
writes the top directories and hands them to the stages; a stage that reads every run (report,
analyze) finds each run's files here (tests/test_dvc.py checks that the two agree)."""

from __future__ import annotations

from pathlib import Path

import yaml

from posenc.config import POSITIONAL
from posenc.corpora import TGT
from posenc.errors import UserError

MODEL, DEV_LOG = "model.pt", "dev_log.tsv"
METRICS, SCORES, SIGNATURES, HYPS = "metrics.json", "scores.json", "signatures.json", "hyps"
EXTRAPOLATION = "extrapolation.json"   # the extrapolate stage's, beside the evaluate stage's


def run_name(variant: str, seed: int) -> str:
    """`<variant>-<seed>`: how dvc.yaml's train and evaluate matrices name a run's directories."""
    return f"{variant}-{seed}"


def model_path(models: Path, variant: str, seed: int) -> Path:
    return Path(models) / run_name(variant, seed) / MODEL


def dev_log_path(models: Path, variant: str, seed: int) -> Path:
    return Path(models) / run_name(variant, seed) / DEV_LOG


def result_dir(runs: Path, variant: str, seed: int) -> Path:
    """results/runs/<variant>-<seed>: metrics.json (DVC's metrics: parameters, dev PPL and
    sacreBLEU per split, numbers only, so that `dvc metrics show` fits a terminal), scores.json
    (chrF and tok+compound-split BLEU per split), signatures.json (the run's variant, seed and
    sacreBLEU signatures) and hyps/ from `evaluate`;
    extrapolation.json from `extrapolate`."""
    return Path(runs) / run_name(variant, seed)


def residual_name(kind: str, layers: int, seed: int) -> str:
    """`<kind>-<layers>-<seed>`: a run of the residual study (dvc.yaml's train_residual and
    train_residual_sum): its model in models/residual-<name>/, its evaluation in
    results/residual/runs/<name>/ (the files of `result_dir`)."""
    return f"{kind}-{layers}-{seed}"


def hypothesis_path(hyps_dir: Path, split: str) -> Path:
    return Path(hyps_dir) / f"{split}.{TGT}"


def hypothesis_files(hyps_dir: Path) -> Path:
    """Every hypothesis file of `hyps_dir`, as a pattern (posenc.files.clear)."""
    return hypothesis_path(hyps_dir, "*")


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
    for stage in (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages", {}).values():
        if any(out.get("path") == wanted for out in stage.get("outs", [])):
            for dep in stage.get("deps", []):
                if dep["path"].endswith(".model"):
                    return root / dep["path"]
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
