"""Where one run's files are: the rules behind dvc.yaml's `models/<variant>-<seed>/` and
`results/runs/<variant>-<seed>/{metrics.json, signatures.json, hyps/<split>.de}`. dvc.yaml
writes the top directories and hands them to the stages; a stage that reads every run (report,
analyze) finds each run's files here (tests/test_dvc.py checks that the two agree)."""

from __future__ import annotations

from pathlib import Path

from posenc.corpora import TGT

MODEL, DEV_LOG = "model.pt", "dev_log.tsv"
METRICS, SIGNATURES, HYPS = "metrics.json", "signatures.json", "hyps"


def run_name(variant: str, seed: int) -> str:
    """`<variant>-<seed>`: how dvc.yaml's train and evaluate matrices name a run's directories."""
    return f"{variant}-{seed}"


def model_path(models: Path, variant: str, seed: int) -> Path:
    return Path(models) / run_name(variant, seed) / MODEL


def dev_log_path(models: Path, variant: str, seed: int) -> Path:
    return Path(models) / run_name(variant, seed) / DEV_LOG


def result_dir(runs: Path, variant: str, seed: int) -> Path:
    """results/runs/<variant>-<seed>: metrics.json (numbers only: DVC's metrics), signatures.json
    (the run's variant, seed and sacreBLEU signatures) and hyps/."""
    return Path(runs) / run_name(variant, seed)


def hypothesis_path(hyps_dir: Path, split: str) -> Path:
    return Path(hyps_dir) / f"{split}.{TGT}"
