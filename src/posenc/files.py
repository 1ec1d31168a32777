"""Atomic writes and hashing: a killed stage leaves the previous file or none, never half of one."""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from posenc.errors import UserError


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temporary file beside `path`, fsync, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temporary is named .<name>.<pid>.<random>.tmp: one left by a process that died (a kill cut
    # its write short) is removed; one of a live process is another writer's, at work right now.
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = stale.name[len(path.name) + 2:].split(".", 1)[0]
        if not pid.isdigit() or not _alive(int(pid)):
            stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def clear(*outputs: str | os.PathLike) -> None:
    """Remove a stage's previous outputs before it writes the first of its new ones. Each file is
    written atomically, but a set of files is not: cleared first, a stage that fails or is killed
    while writing leaves part of its new set and nothing of the old one, never a directory holding
    the outputs of two runs (a missing output every reader reports; a mixed set no reader could
    tell). DVC removes a stage's outs before running it; this holds outside DVC too. An output may
    end in a pattern (`hyps/*.de`): the files of that directory that the stage writes, never the
    directory itself, which may hold anything else of the user's."""
    for output in map(Path, outputs):
        if glob.has_magic(output.name):
            matches = output.parent.glob(output.name) if output.parent.is_dir() else []
        else:
            matches = [output]
        for path in matches:
            if not path.is_dir():
                path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> None:
    # sort_keys and a fixed indent: the same numbers always give the same bytes (dvc.lock hashes).
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_lines(path: str | os.PathLike, lines: list[str]) -> None:
    write_text(path, "".join(line + "\n" for line in lines))


def write_tsv(path: str | os.PathLike, header: list[str], rows: list[tuple]) -> None:
    write_lines(path, ["\t".join(header)] + ["\t".join(_cell(v) for v in row) for row in rows])


def split_lines(text: str) -> list[str]:
    """Lines split on "\n" only: str.splitlines would also split on U+2028, U+0085 and others,
    which occur inside WMT sentences."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def read_lines(path: str | os.PathLike) -> list[str]:
    return split_lines(Path(path).read_text(encoding="utf-8"))


def read_json(path: str | os.PathLike, fix: str) -> Any:
    """A JSON file that a stage wrote; missing, unreadable or corrupt, it is one line naming the
    file and `fix` (what makes it again)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: missing; {fix}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a JSON file; {fix}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({type(e).__name__}); {fix}") from None


def check_output_dir(path: str | os.PathLike, inputs: tuple = (), ours: tuple[str, ...] = ()) -> Path:
    """Refuse, before anything is touched, a directory that a command would replace but may not:
    the working directory or one above it, an input or a directory holding one, a file, or a
    non-empty directory holding anything but the names `ours` (glob patterns) that the command
    itself writes. A command replaces only what it wrote."""
    target, here = Path(os.path.abspath(path)), Path(os.path.abspath(os.curdir))
    if target == here or target in here.parents:
        raise UserError(f"{path}: the working directory or one above it, which the output would "
                        f"replace; name a new directory for it")
    for given in inputs:
        source = Path(os.path.abspath(given))
        if target == source or target in source.parents:
            raise UserError(f"{path}: holds the input {given}, which the output would replace; "
                            f"name another directory for the output")
    if target.exists() and not target.is_dir():
        raise UserError(f"{path}: a file, not a directory; name a directory for the output")
    if target.is_dir():
        foreign = sorted(p.name for p in target.iterdir()
                         if not any(fnmatch.fnmatch(p.name, pattern) for pattern in ours))
        if foreign:
            raise UserError(f"{path}: holds {foreign[0]!r}, which this command did not write; name a "
                            f"new directory, or empty it yourself")
    return target


def _cell(value: Any) -> str:
    """Floats in full (the shortest text that reads back to the same float): `posenc verify`
    compares logs update by update, and a rounded loss would hide a difference."""
    return repr(value) if isinstance(value, float) else str(value)


def save_torch(path: str | os.PathLike, obj: Any) -> None:
    """torch.save through memory so that the archive's inner name never depends on the temp name."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_bytes(path, buffer.getvalue())


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
