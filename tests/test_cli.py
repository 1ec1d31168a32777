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
    assert "{sinusoidal,learned,concat,sinusoidal_narrow,none,rope,alibi,relative}" in r.stdout


def test_make_takes_torch_from_the_index_it_is_given():
    """`make TORCH_INDEX=...` adds PyTorch's index for the pinned torch; without it, pip's own."""
    from conftest import ROOT

    def install_command(*args: str) -> str:
        r = subprocess.run(["make", "-n", "-W", "requirements.lock", ".venv/.installed", *args], cwd=ROOT,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.replace("\\\n", " ")

    cpu = "https://download.pytorch.org/whl/cpu"
    assert f"-r requirements.lock --extra-index-url {cpu}" in " ".join(install_command(f"TORCH_INDEX={cpu}").split())
    assert "--extra-index-url" not in install_command()
