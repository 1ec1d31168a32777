"""`posenc earlier-runs`: the pinned table beside the earlier complete runs of the same profile.

The earlier runs (docs/reproducibility.md, "Earlier complete runs") trained the same variants and
seeds in `native` numerics, each on its own CPU model, so their bits differ from the pinned run's
and from each other: the same experiment run again with other rounding. This stage says, per cell,
how far the mean test BLEU moved, and whether a conclusion that is significant after Holm's
adjustment in one run changes sign, or significance, in the other. Its inputs are report's
`table.json` and the earlier runs' `table.json`, kept as `results/earlier/<name>.json`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from posenc import files
from posenc.errors import UserError
from posenc.tables import VERDICTS, markdown_table, verdict

SIGNIFICANT = VERDICTS[0]


def read_table(path: Path) -> dict:
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        table["table"], table["significance"], table["provenance"]
        table["provenance"]["code_revision"]
        if not table["table"]:
            raise KeyError("table: empty")
        if not all(isinstance(c["seeds"]["delta"], (int, float)) for comparisons in table["significance"].values()
                   for c in comparisons.values()):
            raise TypeError("seeds: delta")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"{path}: not a table.json of `posenc report` ({e}); copy one from the run's "
                        "revision: git show <revision>:results/table.json") from None
    return table


def conclusions(now: dict, then: dict) -> dict[str, list[str]]:
    """Every comparison and test set significant after Holm's adjustment in either run, sorted by
    what became of it in the other."""
    out = {"the same sign, significant in both": [], "opposite signs": [],
           "significant in the pinned run only": [], "significant in the earlier run only": []}
    for test, comparisons in now["significance"].items():
        for name, s in comparisons.items():
            earlier = then["significance"].get(test, {}).get(name)
            if earlier is None:
                continue
            a, b = s["seeds"], earlier["seeds"]
            here, there = verdict(a) == SIGNIFICANT, verdict(b) == SIGNIFICANT
            if not (here or there):
                continue
            cell = f"`{name}` on {test} ({a['delta']:+.2f} against {b['delta']:+.2f})"
            if a["delta"] * b["delta"] < 0:
                out["opposite signs"].append(cell)
            elif here and there:
                out["the same sign, significant in both"].append(cell)
            else:
                out["significant in the pinned run only" if here else "significant in the earlier run only"].append(cell)
    return out


def compare(now: dict, name: str, then: dict) -> list[str]:
    prov = then["provenance"]
    numerics = prov.get("numerics") or {"mode": "native (before numerics modes)"}
    head = [f"### Against `{name}`", "",
            f"Its code revision `{prov['code_revision']}`, numerics {numerics['mode']}."]
    data_now, data_then = now["provenance"]["data_md5_from_dvc_lock"], prov["data_md5_from_dvc_lock"]
    if data_now != data_then:
        return head + ["", "Computed on other data (the dvc.lock md5 of data/ differ): another profile "
                           "or corpus, so no cell is compared.", ""]
    variants = [v for v in now["table"] if v in then["table"]]
    tests = [k[len("bleu_"):] for k in next(iter(now["table"].values())) if k.startswith("bleu_test")]
    deltas = {(v, t): now["table"][v][f"bleu_{t}"]["mean"] - then["table"][v][f"bleu_{t}"]["mean"]
              for v in variants for t in tests if f"bleu_{t}" in then["table"][v]}
    if not deltas:
        raise UserError(f"results/earlier/{name}.json shares no variant and test set with the pinned table")
    lines = head + ["", "Mean test BLEU over seeds, the pinned run minus this one:", ""]
    lines += markdown_table(["variant", *tests], [[v, *(f"{deltas[v, t]:+.2f}" if (v, t) in deltas else "—"
                                                       for t in tests)] for v in variants])
    worst = max(deltas, key=lambda c: abs(deltas[c]))
    lines += ["", f"Over the {len(deltas)} cells the difference is {statistics.median(map(abs, deltas.values())):.2f} "
                  f"BLEU in the median (absolute), at most {abs(deltas[worst]):.2f} (`{worst[0]}` on {worst[1]}).", "",
              "Comparisons significant after Holm's adjustment in either run:", ""]
    for what, cells in conclusions(now, then).items():
        lines.append(f"- {what}: " + ("; ".join(cells) if cells else "none") + ".")
    return lines + [""]


def run(args) -> None:
    now = read_table(Path(args.table))
    earlier = sorted(Path(args.earlier).glob("*.json"))
    if not earlier:
        raise UserError(f"{args.earlier}: no earlier table.json; keep each earlier run's as <name>.json there")
    lines = ["Generated by `posenc earlier-runs` from `results/table.json` and the earlier runs' tables "
             f"(`{args.earlier}/`): the same variants and seeds, trained again with other rounding.", ""]
    for path in earlier:
        lines += compare(now, path.stem, read_table(path))
    files.write_text(args.md, "\n".join(lines))
    print(f"earlier-runs: the pinned table against {len(earlier)} earlier runs -> {args.md}")
