"""dvc.yaml declares what each stage runs and reads, checked against the source.

A stage whose deps or params miss something that it reads is not re-run when that changes, and
`dvc status` calls a stale result up to date.
"""

from __future__ import annotations

import ast
import importlib
import dataclasses
import re
import shutil
import subprocess
import pytest
import yaml

from pathlib import Path

from posenc import cli, config, runs, sources

from conftest import ROOT

STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
PACKAGE = ROOT / "src" / "posenc"


def module_of(stage: dict) -> str:
    name = re.search(r"-m posenc ([\w-]+)|^posenc ([\w-]+)", stage["cmd"].strip())
    return cli.STAGES[name.group(1) or name.group(2)][0]


def reads(module: str) -> tuple[set[str], dict[str, set[str]], dict[str, set[str]]]:
    """In the stage's module: (top-level keys read with load_list or load_value, {section: the keys `load` can
    fill from it}, {section: the keys the module reads, as `<name>.<key>`}). `<name>` is what
    the loaded section is assigned to; a function that it is handed to reads it under the same
    name, as the stages are written. A stage that reads its variant's settings (load_positional)
    reads `positional.<variant>`, which a matrix stage declares as `positional.${item.variant}`;
    the fields that `load` fills from elsewhere (its keyword arguments) are not params."""
    lists, sections, names = set(), {}, {}
    source = PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "load" and isinstance(node.value.args[1], ast.Constant)):
            names[node.targets[0].id] = node.value.args[1].value
    used = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
            used.setdefault(names[node.value.id], set()).add(node.attr)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load_positional"):
            lists.add("positional.${item.variant}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) >= 3:
            key = node.args[1]
            if not isinstance(key, ast.Constant):
                continue
            if node.func.attr in ("load_list", "load_value"):
                lists.add(key.value)
            elif node.func.attr == "load":
                # config.X, or a name the stage's module holds (imported from config, or a
                # section of its own defined there)
                cls = node.args[2]
                cls = (getattr(config, cls.attr) if isinstance(cls, ast.Attribute)
                       else getattr(importlib.import_module(module), cls.id))
                fixed = {k.arg for k in node.keywords}
                sections[key.value] = set(config.param_fields(cls)) - fixed
    return lists, sections, {s: used.get(s, set()) & keys for s, keys in sections.items()}


def lists_of(name: str) -> set[str]:
    """The top-level keys and positional settings the stage reads: `positional.${item.variant}`
    for a matrix over variants, `positional.<v>` for a stage whose command names `--variant <v>`
    (the residual study's)."""
    lists, _, _ = reads(module_of(STAGES[name]))
    fixed = re.search(r"--variant (\w+)", STAGES[name]["cmd"])
    if fixed:
        lists = {f"positional.{fixed.group(1)}" if x == "positional.${item.variant}" else x for x in lists}
    return lists


@pytest.mark.parametrize("name", list(STAGES))
def test_every_list_a_stage_reads_is_declared(name):
    """report and analyze read `variants` and `seeds`: adding a seed must make them stale. A
    stage that names its variant in the command (the residual study's) declares that variant's
    settings."""
    lists = lists_of(name)
    assert lists <= set(STAGES[name].get("params", [])), f"{name}: declare {sorted(lists)}"


@pytest.mark.parametrize("name", list(STAGES))
def test_every_declared_param_is_a_key_the_stage_reads(name):
    _, sections, _ = reads(module_of(STAGES[name]))
    lists = lists_of(name)
    for param in STAGES[name].get("params", []):
        section, _, key = param.partition(".")
        if param in lists:
            continue
        if not key:
            assert section in lists, f"{name}: declares {param} but does not read it"
        else:
            assert section in sections, f"{name}: declares {param} but does not read section {section}"
            assert key in sections[section], f"{name}: {param}"


@pytest.mark.parametrize("name", list(STAGES))
def test_every_key_a_stage_reads_is_declared(name):
    """A stage re-runs when any key it reads changes: `eval.beam` for evaluate, and so on."""
    lists, _, used = reads(module_of(STAGES[name]))
    declared = set(STAGES[name].get("params", []))
    missing = sorted(f"{s}.{k}" for s, keys in used.items() for k in keys if f"{s}.{k}" not in declared)
    source = (ROOT / "src" / (module_of(STAGES[name]).replace(".", "/") + ".py")).read_text(encoding="utf-8")
    assert used or lists or "config." not in source, f"{name}: the test found no key the stage reads"
    assert not missing, f"{name}: declare {missing}"


@pytest.mark.parametrize("name", list(STAGES))
def test_code_deps_are_the_modules_the_stage_runs(name):
    """Every stage lists its modules exactly: the import closure of its entry point, read from
    the source. An edit to the report's wording re-runs the report, not beam search."""
    deps = {d for d in STAGES[name]["deps"] if d.startswith("src/")}
    closure = {p.relative_to(ROOT).as_posix() for p in sources.closure(module_of(STAGES[name]), PACKAGE)}
    assert deps == closure, f"{name}: missing {sorted(closure - deps)}, extra {sorted(deps - closure)}"


def test_no_stage_imports_another_and_every_stage_has_one_home():
    stage_files = {p for p in (PACKAGE / "stages").glob("*.py") if p.name != "__init__.py"}
    modules = {f"posenc.stages.{p.stem}" for p in stage_files}
    tools = {m for m in cli.TOOLS.values() if m.startswith("posenc.stages.")}  # translate, verify
    assert modules == {m for m, _, _ in cli.STAGES.values()} | tools
    for module in modules:
        runs = set(sources.closure(module, PACKAGE)) & stage_files
        assert runs == {PACKAGE / "stages" / f"{module.rsplit('.', 1)[1]}.py"}, f"{module} imports {runs}"
    for bench in (ROOT / "benchmarks").glob("*.py"):
        assert not {n for n in sources.imported(bench, PACKAGE) if n.startswith("posenc.stages")}, bench


def test_the_run_layout_in_dvc_yaml_is_the_librarys():
    """models/<run>/ holds the weights alone; every text file of a run is in its results directory."""
    item = ("${item.variant}", "${item.seed}")
    outs = [o if isinstance(o, str) else next(iter(o)) for o in STAGES["train"]["outs"]]
    runs_dir = re.search(r"--runs (\S+)", STAGES["report"]["cmd"]).group(1)
    where = runs.result_dir(Path(runs_dir), *item)
    assert runs.model_path(Path("models"), *item).as_posix() in outs
    assert runs.dev_log_path(Path(runs_dir), *item).as_posix() in outs
    assert {o for o in outs if o.startswith("models/")} == {f"models/{runs.run_name(*item)}/{f}"
                                                            for f in (runs.MODEL, runs.LAST)}
    assert {o for o in outs if not o.startswith("models/")} == {
        (where / f).as_posix() for f in (runs.TRAIN_LOG, runs.DEV_LOG, runs.DIGESTS, runs.HIGHWAY)}
    outs = [next(iter(o)) for o in STAGES["evaluate"]["outs"]]
    assert outs == [(where / f).as_posix() for f in (runs.HYPS, runs.SCORES, runs.SIGNATURES)]
    assert [next(iter(m)) for m in STAGES["evaluate"]["metrics"]] == [(where / runs.METRICS).as_posix()]
    assert f"--hyps {where / runs.HYPS}" in STAGES["evaluate"]["cmd"]
    assert [next(iter(o)) for o in STAGES["extrapolate"]["outs"]] == [(where / runs.EXTRAPOLATION).as_posix()]
    assert [next(iter(o)) for o in STAGES["measure"]["outs"]] == [(where / runs.ANALYSIS).as_posix()]


def paths(entries: list) -> list[str]:
    return [e if isinstance(e, str) else next(iter(e)) for e in entries]


def test_every_stage_that_reads_or_writes_weights_is_a_unit_stage_and_no_other():
    """A unit is one run's training and every stage that reads its weights (posenc.runs.PARTS):
    each such stage is a matrix stage of one part's chain, and every weight it touches is of its
    own run (models/<prefix><item>/), so that a unit can be pinned and landed alone."""
    chains = {stage: part for part in runs.PARTS for chain in part.chains for stage in chain}
    for name, stage in STAGES.items():
        weights = [p for p in paths(stage.get("deps", [])) + paths(stage.get("outs", [])) if p.startswith("models")]
        assert bool(weights) == (name in chains), f"{name}: weights {weights}"
        if weights:
            assert "matrix" in stage, name
            prefix = chains[name].prefix
            assert all(re.fullmatch(rf"models/{prefix}\$\{{item\..+\}}/(model|last)\.pt", w) for w in weights), weights


def test_aggregates_read_text_under_results_and_data_alone():
    """On a fresh clone without a single weight, every aggregate rebuilds from committed text
    (and the data that fetch and prepare make), so none of them may read models/."""
    for name, stage in STAGES.items():
        if "matrix" in stage or name in ("fetch", "prepare", "shorten"):
            continue
        deps = [d for d in paths(stage["deps"]) if not d.startswith("src/")]
        assert all(d.startswith(("results/", "data/")) for d in deps), f"{name}: {deps}"


@pytest.mark.parametrize("module", ["posenc.stages.train", "posenc.stages.evaluate", "posenc.stages.lengths",
                                    "posenc.stages.extrapolate", "posenc.stages.measure"])
def test_stages_that_make_pinned_bits_import_no_path_layout_and_no_aggregate_params(module):
    """An edit to the run layout or to a section that only the aggregates read (report, residual
    study) must leave every pinned training and evaluation up to date: their modules are not in
    these stages' import closure (whose files dvc.yaml hashes)."""
    names = {p.relative_to(PACKAGE).as_posix() for p in sources.closure(module, PACKAGE)}
    assert not names & {"runs.py", "report_config.py", "pinning.py", "tables.py", "significance.py"}, names
    sections = {c.__name__ for c in vars(config).values() if dataclasses.is_dataclass(c) and isinstance(c, type)}
    assert sections == {"Range", "DataConfig", "ModelConfig", "TrainConfig", *(c.__name__ for c in config.POSITIONAL.values())}


def test_only_flat_numeric_files_are_metrics():
    """`dvc metrics show` is a table of numbers: the per-run metrics.json files, nothing else
    (tests/test_pipeline.py checks what evaluate writes into them)."""
    declared = [next(iter(m)) for stage in STAGES.values() for m in stage.get("metrics", [])]
    assert declared == ["results/runs/${item.variant}-${item.seed}/metrics.json"]


def test_the_closure_follows_imports_and_the_digest_covers_every_file(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "posenc")
    names = {p.name for p in sources.closure("posenc.stages.train", tmp_path / "posenc")}
    # positional.py only through model.py; sources.py only through checkpoints.py
    assert {"train.py", "model.py", "positional.py", "checkpoints.py", "sources.py", "__init__.py"} <= names
    assert not names & {"evaluate.py", "report.py", "analyze.py", "cli.py"}
    before = sources.digest("posenc.stages.train", tmp_path / "posenc")
    (tmp_path / "posenc/stages/report.py").write_text("# not run by training\n")
    assert sources.digest("posenc.stages.train", tmp_path / "posenc") == before
    with open(tmp_path / "posenc/positional.py", "a") as f:
        f.write("\n")
    assert sources.digest("posenc.stages.train", tmp_path / "posenc") != before


def test_training_declares_every_model_and_train_key():
    """Every key of the model and train sections fixes the trained bits (build_model reads the
    model's, the checkpoint fingerprint all of them), so train declares them all."""
    _, sections, _ = reads(module_of(STAGES["train"]))
    declared = set(STAGES["train"]["params"])
    for section in ("model", "train"):
        assert {f"{section}.{k}" for k in sections[section]} <= declared


@pytest.mark.parametrize("profile", ["params.yaml", "profiles/tiny.yaml", "profiles/paper.yaml"])
def test_the_residual_study_trains_the_summed_model_at_its_own_depth_once(profile):
    """`sum` at model.layers is the positional table's sinusoidal run: train_residual_sum must
    not train it again, and the study's kinds are residual kinds other than sum."""
    raw = yaml.safe_load((ROOT / profile).read_text())
    study = raw["residual_study"]
    assert raw["model"]["layers"] not in study["sum_depths"]
    assert set(study["kinds"]) <= {"concat", "none"} and study["depths"]


def test_every_pinned_weight_has_its_gitignore_committed():
    """dvc.lock pins the weights and git ignores them through the .gitignore that DVC writes
    beside each one; a unit's landing commits that file too, so that on a clone `dvc pull` (or
    a retraining) leaves `git status` clean."""
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]
    weights = [Path(out["path"]) for stage in lock.values() for out in stage.get("outs", [])
               if out["path"].startswith("models/")]
    tracked = set(subprocess.run(["git", "ls-files", "models"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    assert weights
    for weight in weights:
        ignore = weight.parent / ".gitignore"
        assert ignore.as_posix() in tracked, f"{ignore}: not committed"
        assert f"/{weight.name}" in (ROOT / ignore).read_text().split(), f"{ignore}: does not ignore {weight.name}"
