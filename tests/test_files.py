"""Atomic writes: what a killed write leaves is cleaned by the next write of the same file."""

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
