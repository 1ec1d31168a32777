"""`posenc --help` and `--version`, written for a user."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

from conftest import TINY


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


def test_a_file_size_limit_during_a_stage_is_one_line(tiny_data):
    """`ulimit -f`: the write fails with EFBIG (Python ignores SIGXFSZ); one line, exit 2."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000)); "
            "from posenc import cli; sys.exit(cli.main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "prepare", "--raw", "data/raw/multi30k", "--spm",
                        "limit/spm.model", "--arrays", "limit/arrays", "--stats", "limit/stats.json"],
                       cwd=tiny_data, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("posenc prepare: error: ") and "File too large" in line, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_every_command_that_sets_up_torch_gets_its_numerics_before_torch_loads():
    """A stage that computes (posenc.runtime.setup) must be in cli.COMPUTES, which applies the
    params' numerics before anything imports torch; otherwise it would compute with the CPU's own
    choice of kernels and its outputs would not be the portable bits (posenc.numerics)."""
    import importlib.util

    from posenc import cli

    commands = {name: spec[0] for name, spec in cli.STAGES.items()} | {
        name: module for name, module in cli.TOOLS.items() if name != "verify"}  # verify: the run's mode
    computing = {name for name, module in commands.items()
                 if "runtime.setup(" in open(importlib.util.find_spec(module).origin, encoding="utf-8").read()}
    assert "lengths" in computing and "train" in computing
    assert computing == cli.COMPUTES


def test_a_torchrun_process_sets_its_numerics_before_torch_loads_and_exits_with_its_code(tmp_path):
    """Under torchrun (WORLD_SIZE set) posenc ends the process itself, past torch's teardown of
    the process group (cli.keep_process_groups): torch must still load only after the numerics
    are set (else portable bits cannot hold: a warning), and the stage's exit code must come out."""
    outputs = [x for name in ("model", "last", "train-log", "dev-log", "checkpoints", "timings", "digests",
                              "highway") for x in (f"--{name}", str(tmp_path / name))]
    r = subprocess.run([sys.executable, "-m", "posenc", "train", "--params", str(TINY), "--variant",
                        "sinusoidal", "--seed", "1", "--spm", str(tmp_path / "missing.model"),
                        "--arrays", str(tmp_path), *outputs],
                       env={**os.environ, "WORLD_SIZE": "2", "RANK": "1"}, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.splitlines() == [r.stderr.strip()], r.stderr[-2000:]  # the one line, no warning
    assert r.stderr.startswith("posenc train: error: ") and "missing.model" in r.stderr


def test_in_a_torchrun_process_a_destroyed_group_is_torn_down_only_with_the_process(tmp_path):
    """cli.keep_process_groups: after destroy_process_group the gloo group's threads still run
    (their join, in the group's destructor, is what can hang) until os._exit ends the process;
    without it the same destroy joins them at once. Thread counts from /proc/self/task."""
    script = ("import os, sys\n"
              "from posenc import cli\n"
              "if sys.argv[1] == 'kept':\n"
              "    cli.keep_process_groups()\n"
              "import torch.distributed as dist\n"
              "dist.init_process_group('gloo', init_method='file://' + sys.argv[2], rank=0, world_size=1)\n"
              "before = len(os.listdir('/proc/self/task'))\n"
              "dist.destroy_process_group()\n"
              "print(before, len(os.listdir('/proc/self/task')), flush=True)\n"
              "os._exit(0)\n")
    counts = {}
    for how in ("kept", "plain"):
        r = subprocess.run([sys.executable, "-c", script, how, str(tmp_path / f"store-{how}")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        counts[how] = [int(n) for n in r.stdout.split()]
    assert counts["kept"][1] == counts["kept"][0], counts
    assert counts["plain"][1] < counts["plain"][0], counts


def test_pip_show_names_the_authors_and_the_licence():
    """The package metadata a user sees (`pip show posenc`, with the pip that `make` pins)."""
    r = subprocess.run([sys.executable, "-m", "pip", "show", "posenc"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fields = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    assert fields["Author"] == "The posenc developers"
    assert fields.get("License-Expression") == "MIT", r.stdout


def test_a_file_error_says_what_happened_to_the_path_the_user_gave(tmp_path):
    """Issue 49: every file error read "free the space or lift the limit", and named the temporary
    file written beside the output instead of the output."""
    import json

    from posenc import cli

    assert cli.given("/x/.table.md.4242.k3j_9x.tmp") == "/x/table.md" and cli.given("/x/table.md") == "/x/table.md"
    table = {"table": {"sinusoidal": {"bleu_test_a": {"mean": 1.0}}}, "significance": {},
             "provenance": {"code_revision": "r", "data_md5_from_dvc_lock": {}}}
    (tmp_path / "t.json").write_text(json.dumps(table))
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "old.json").write_text(json.dumps(table))
    (tmp_path / "out.md").mkdir()  # a directory where the output file goes
    r = subprocess.run([sys.executable, "-m", "posenc", "earlier-runs", "--table", "t.json", "--earlier", "earlier",
                        "--md", "out.md"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("posenc earlier-runs: error: out.md: Is a directory; a directory stands where a "
                               "file is expected; give a file's path"), r.stderr
    assert "free the space" not in r.stderr


def test_every_help_fits_a_terminal():
    """Issue 51: `posenc --help` had a 133-column line. Each command's help fits 120 columns."""
    from posenc.cli import STAGES, TOOLS

    for command in ([], *([c] for c in (*STAGES, *TOOLS))):
        r = posenc(*command, "--help")
        assert r.returncode == 0, command
        wide = [line for line in r.stdout.splitlines() if len(line) > 120]
        assert not wide, (command, wide[0])


def test_cite_carries_the_commit_of_the_checkout(tmp_path):
    """Issue 51: README's BibTeX had no field for the revision a reader used."""
    from conftest import ROOT

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    r = subprocess.run([sys.executable, "-m", "posenc", "cite"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("@software{posenc,") and f"commit {head}" in r.stdout, r.stderr
    assert "version = {" in r.stdout
    r = subprocess.run([sys.executable, "-m", "posenc", "cite"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("posenc cite: error: ") and "not a git checkout" in r.stderr
