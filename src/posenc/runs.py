"""Where one run's files are: the rules behind dvc.yaml's `models/<variant>-<seed>/` and
`results/runs/<variant>-<seed>/{metrics.json, scores.json, signatures.json, hyps/<split>.de,
extrapolation.json}`. dvc.yaml
writes the top directories and hands them to the stages; a stage that reads every run (report,
analyze) finds each run's files here (tests/test_dvc.py checks that the two agree)."""

from __future__ import annotations

from pathlib import Path

from posenc.corpora import TGT

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


def hypothesis_path(hyps_dir: Path, split: str) -> Path:
    return Path(hyps_dir) / f"{split}.{TGT}"
