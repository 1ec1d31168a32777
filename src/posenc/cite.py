"""`posenc cite`: the BibTeX entry of this checkout, with the commit it is at and the dvc.lock md5
of the table it pins, so that a citation names the exact revision a reader used
(docs/reproducibility.md, "Citing the results")."""

from __future__ import annotations

import subprocess
from importlib.metadata import version
from pathlib import Path

from posenc.errors import UserError
from posenc.runs import lock_stages

TITLE = ("posenc: summed, concatenated or no positional encoding -- a DVC replication of\n"
         "            Table 3 (E) of Attention Is All You Need")


def commit(root: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"{root}: not a git checkout, so there is no commit to cite; cite the release "
                        f"you downloaded and its dvc.lock")
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" (with uncommitted changes: commit them to cite them)" if dirty else "")


def table_md5(lock: Path) -> str | None:
    """The md5 dvc.lock records for the report's table.json, if the report is pinned."""
    if not lock.is_file():
        return None
    stages = lock_stages(lock)
    return next((o.get("md5") for o in (stages.get("report") or {}).get("outs", [])
                 if str(o.get("path", "")).endswith("table.json")), None)


def run(args) -> None:
    root = Path(args.lock).resolve().parent
    at = commit(root)
    md5 = table_md5(Path(args.lock))
    print("@software{posenc,\n"
          f"  title   = {{{TITLE}}},\n"
          "  author  = {{The posenc developers}},\n"
          f"  version = {{{version('posenc')}}},\n"
          "  year    = {2026},\n"
          f"  note    = {{commit {at}" + (f"; results/table.json md5 {md5} (dvc.lock)" if md5 else "") + "}\n}")
