"""Which source files a stage runs: the import closure of a posenc module, read from the source.

A training checkpoint records a digest of this closure (with the versions of the libraries that
fix the numerics), so a run never resumes from a checkpoint that other code wrote.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE = "posenc"
HERE = Path(__file__).resolve().parent


def imported(path: Path, package_dir: Path = HERE) -> set[str]:
    """The posenc modules that the file at `path` imports anywhere in its body (inside functions
    too: a stage imports some modules late, to keep start-up fast)."""
    names = set()
    for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from posenc import files`: each name may be a module of the package
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n.split(".")[0] == PACKAGE and _file(n, package_dir).is_file()}


def closure(module: str, package_dir: Path = HERE) -> list[Path]:
    """The files of `module` and of every posenc module it imports, transitively, sorted."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(imported(_file(name, package_dir), package_dir) - seen)
            # importing posenc.stages.train runs posenc/__init__.py and posenc/stages/__init__.py
            parts = name.split(".")
            todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(_file(n, package_dir) for n in seen)


def digest(module: str, package_dir: Path = HERE) -> str:
    """SHA-256 over the names and bytes of `closure(module)`."""
    h = hashlib.sha256()
    for path in closure(module, package_dir):
        h.update(path.relative_to(package_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _file(module: str, package_dir: Path) -> Path:
    """posenc.x -> x.py; a package (posenc, posenc.stages) -> its __init__.py."""
    path = package_dir.joinpath(*module.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
