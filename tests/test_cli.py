"""`posenc --help` and `--version`, written for a user."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version


def posenc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posenc", *args], capture_output=True, text=True)


def test_version_and_help():
    r = posenc("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"posenc {version('posenc')}"
    r = posenc("--help")
    assert r.returncode == 0
    assert "Sum, concatenate or drop the positional encoding?" in r.stdout
    for command in ("fetch", "prepare", "train", "evaluate", "report", "analyze", "translate"):
        assert f"    {command}" in r.stdout
    assert "argument parsing" not in r.stdout  # the tool, not the code
    r = posenc("train", "--help")
    assert "{sinusoidal,learned,concat,none,rope,alibi,relative}" in r.stdout
