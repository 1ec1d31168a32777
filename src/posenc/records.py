"""Records: what a command printed, with the machine it ran on, kept as Markdown in git.

A record is `docs/records/<vendor>-<family>-<model>/<name>.md` (the CPU as lscpu names it): one
header line (the command, the date, the CPU, the CPUs available, torch's version), then what the
command printed. benchmarks/record.py writes one around any command; `posenc pin` writes one for
each `posenc verify` it runs on a CPU that made none of the pinned units (issue 50's cross-CPU
check); docs/ and README show measurements only through them (posenc.readme).
"""

from __future__ import annotations

import datetime
import os
import re
import shlex
from importlib.metadata import version
from pathlib import Path

from posenc import files, numerics
from posenc.errors import UserError

# lscpu's vendor ids, shortened for a directory name
VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}
# the header's CPU, as header() writes it
_CPU = re.compile(r"^`.*`, on \d{4}-\d\d-\d\d: (\S+ family \S+ model \S+) \(`lscpu`\)")


# `posenc verify`'s verdict when this machine gives the pinned bits: `posenc pin` and README's
# status block read a kept record of verify by these words (reproduced()).
REPRODUCES = "verify: this machine reproduces the pinned bits of {run} ("


def reproduced(printed: list[str], run: str) -> bool:
    """Whether what `posenc verify RUN` printed says this machine reproduces RUN's pinned bits."""
    return any(line.startswith(REPRODUCES.format(run=run)) for line in printed)


def cpu_name(cpu: dict | None = None) -> str:
    """`AuthenticAMD family 25 model 1`: how records, unit records and README name a CPU."""
    c = cpu or numerics.cpu()
    return f"{c['vendor']} family {c['family']} model {c['model']}"


def cpu_dir(cpu: dict | None = None) -> str:
    """`amd-25-1`: the directory of this CPU's records under docs/records/."""
    c = cpu or numerics.cpu()
    return f"{VENDORS.get(c['vendor'], c['vendor'].lower() or 'unknown')}-{c['family']}-{c['model']}"


def header(command: list[str]) -> str:
    return (f"`{shlex.join(command)}`, on {datetime.date.today().isoformat()}: {cpu_name()} (`lscpu`), "
            f"{len(os.sched_getaffinity(0))} CPUs available, torch {version('torch')}.")


def write(path: Path, command: list[str], printed: list[str]) -> None:
    """The record of `command`, which printed `printed` (lines, each with its newline)."""
    files.write_text(path, header(command) + "\n\n```text\n" + "".join(printed).rstrip("\n") + "\n```\n")


def read(path: Path) -> tuple[str, list[str]]:
    """(the CPU that made it, the lines its command printed); a file that is not a record is one line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        text = ""
    found = _CPU.match(text)
    body = text.partition("```text\n")[2].rpartition("```")[0]
    if not found or not body:
        raise UserError(f"{path}: not a record (a header naming the CPU, then the printed text); "
                        f"`git checkout {path}` or make it again")
    return found.group(1), body.splitlines()
