"""Run a command and keep what it printed, with the machine it ran on, as a Markdown file.

docs/ shows measurements (the benchmarks, `posenc verify`, the pinning run's costs) only through
these records, copied in by `make readme`, so that no figure there is typed by hand and each one
says which CPU, torch and command gave it. Run from the project root:

    python benchmarks/record.py docs/records/<vendor>-<family>-<model>/<name>.md -- \\
        python benchmarks/train_throughput.py --threads 1 ...

The command's standard output is echoed and kept; its standard error (progress bars) passes
through. A command that fails leaves the record as it was.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from posenc import records


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the record to write (Markdown)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("give the command to record after --")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    kept = []
    for line in process.stdout:  # echoed as it comes: a long benchmark shows its progress
        sys.stdout.write(line)
        kept.append(line)
    if process.wait() != 0:
        print(f"record: `{shlex.join(command)}` exited with {process.returncode}; {a.out} left as it was",
              file=sys.stderr)
        return 1
    records.write(a.out, command, kept)
    print(f"record: {a.out} ({len(kept)} lines)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
