"""dvc.yaml declares what each stage runs and reads, checked against the source.

A stage whose deps or params miss something that it reads is not re-run when that changes, and
`dvc status` calls a stale result up to date.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shutil
import pytest
import yaml

from posenc import cli, config, sources

from conftest import ROOT

STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
PACKAGE = ROOT / "src" / "posenc"


def module_of(stage: dict) -> str:
    name = re.search(r"-m posenc (\w+)|^posenc (\w+)", stage["cmd"].strip())
    return cli.STAGES[name.group(1) or name.group(2)][0]


def reads(module: str) -> tuple[set[str], dict[str, type]]:
    """(top-level keys read with load_list, {section: dataclass} read with load) in the stage's
    module; a stage that reads its variant's settings (load_positional) reads `positional.<variant>`,
    which a matrix stage declares as `positional.${item.variant}`."""
    lists, sections = set(), {}
    source = (PACKAGE / f"{module.split('.')[1]}.py").read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load_positional"):
            lists.add("positional.${item.variant}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) >= 3:
            key = node.args[1]
            if not isinstance(key, ast.Constant):
                continue
            if node.func.attr == "load_list":
                lists.add(key.value)
            elif node.func.attr == "load":
                cls = node.args[2]
                sections[key.value] = getattr(config, cls.attr if isinstance(cls, ast.Attribute) else cls.id)
    return lists, sections


@pytest.mark.parametrize("name", list(STAGES))
def test_every_list_a_stage_reads_is_declared(name):
    """report and analyze read `variants` and `seeds`: adding a seed must make them stale."""
    lists, _ = reads(module_of(STAGES[name]))
    assert lists <= set(STAGES[name].get("params", [])), f"{name}: declare {sorted(lists)}"


@pytest.mark.parametrize("name", list(STAGES))
def test_every_declared_param_is_a_key_the_stage_reads(name):
    lists, sections = reads(module_of(STAGES[name]))
    for param in STAGES[name].get("params", []):
        section, _, key = param.partition(".")
        if param in lists:
            continue
        if not key:
            assert section in lists, f"{name}: declares {param} but does not read it"
        else:
            assert section in sections, f"{name}: declares {param} but does not read section {section}"
            assert key in {f.name for f in dataclasses.fields(sections[section])}, f"{name}: {param}"


@pytest.mark.parametrize("name", list(STAGES))
def test_code_deps_are_the_modules_the_stage_runs(name):
    """fetch, prepare and train list their modules exactly (the import closure, read from the
    source); the cheaper stages may depend on the whole package."""
    deps = {d for d in STAGES[name]["deps"] if d.startswith("src/")}
    closure = {p.relative_to(ROOT).as_posix() for p in sources.closure(module_of(STAGES[name]), PACKAGE)}
    assert deps == closure or deps == {"src/posenc"}, (
        f"{name}: missing {sorted(closure - deps)}, extra {sorted(deps - closure)}")


def test_the_closure_follows_imports_and_the_digest_covers_every_file(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "posenc")
    names = {p.name for p in sources.closure("posenc.train", tmp_path / "posenc")}
    # positional.py only through model.py; sources.py only through checkpoints.py
    assert {"train.py", "model.py", "positional.py", "checkpoints.py", "sources.py"} <= names
    assert not names & {"evaluate.py", "report.py", "analysis.py", "cli.py"}
    before = sources.digest("posenc.train", tmp_path / "posenc")
    (tmp_path / "posenc/report.py").write_text("# not run by training\n")
    assert sources.digest("posenc.train", tmp_path / "posenc") == before
    with open(tmp_path / "posenc/positional.py", "a") as f:
        f.write("\n")
    assert sources.digest("posenc.train", tmp_path / "posenc") != before
