"""Atomic writes: what a killed write leaves is cleaned by the next write of the same file; the
allocator set-up of the stages that run a model."""

import os
import platform
import subprocess
import sys

import pytest

from posenc import files


def test_a_write_removes_the_temporaries_a_killed_write_left(tmp_path):
    stale = tmp_path / ".metrics.json.k3j2l1.tmp"
    stale.write_text("half")
    other = tmp_path / ".other.json.k3j2l1.tmp"  # another file's: not this write's to remove
    other.write_text("half")
    files.write_json(tmp_path / "metrics.json", {"bleu": 1.0})
    assert not stale.exists() and other.exists()
    assert (tmp_path / "metrics.json").read_text() == '{\n  "bleu": 1.0\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.k3j2l1.tmp", "metrics.json"]


def test_a_write_leaves_the_temporary_of_a_live_writer_alone(tmp_path):
    """Two processes writing one path: each removes only what dead processes left, so neither
    deletes the other's temporary mid-write (they used to: FileNotFoundError)."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    left = tmp_path / f".metrics.json.{dead}.abc.tmp"
    live = tmp_path / f".metrics.json.{os.getppid()}.def.tmp"  # pytest's parent: alive
    left.write_text("half")
    live.write_text("being written")
    files.write_json(tmp_path / "metrics.json", {"bleu": 1.0})
    assert not left.exists() and live.read_text() == "being written"
    code = ("import sys; from posenc import files\n"
            "for i in range(300): files.write_text(sys.argv[1], sys.argv[2] * 1000)")
    writers = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "shared.txt"), c],
                                stderr=subprocess.PIPE, text=True) for c in "ab"]
    for w in writers:
        assert w.wait() == 0, w.stderr.read()
    assert (tmp_path / "shared.txt").read_text() in ("a" * 1000, "b" * 1000)


PROBE = """
import ctypes, sys, torch
from posenc import allocator
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
if sys.argv[1] == "tuned":
    assert allocator.tune()
before = mallinfo2().hblkhd
x = torch.ones(200 << 20, dtype=torch.uint8)  # a block as big as a step's logits
print(mallinfo2().hblkhd - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_the_tuned_allocator_serves_large_blocks_from_the_heap():
    """glibc maps a 200 MB block afresh (and zeroes its pages on every use); tuned, it does not."""
    glibc = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # not `make`'s tcmalloc
    mapped = {how: int(subprocess.run([sys.executable, "-c", PROBE, how], capture_output=True,
                                      text=True, check=True, env=glibc).stdout)
              for how in ("as-it-is", "tuned")}
    assert mapped["as-it-is"] >= 200 << 20 and mapped["tuned"] == 0
