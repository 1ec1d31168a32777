"""What training leaves on disk: working checkpoints while it runs, the final model when it ends.

A checkpoint holds the weights, the optimizer, the random state and the logs so far, and a
fingerprint of everything that fixes its bits: the settings, the training data, the source of the
code that training runs and the versions of the libraries that do the arithmetic. A run resumes
only from checkpoints of its own fingerprint; a truncated, foreign or stale file is named, removed,
and the run falls back to the newest good checkpoint, or starts afresh, and says which.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from posenc import files, sources
from posenc.config import ModelConfig
from posenc.errors import UserError
from posenc.model import build_model

STATE_KEYS = {"fingerprint", "step", "model", "optimizer", "rng", "train_rows", "dev_rows", "digests",
              "highway_rows"}


def fingerprint(settings: list, data: str, code_module: str, numerics: dict) -> dict[str, str]:
    """What must match for a checkpoint to be resumed, part by part, so a mismatch can say which:
    the settings, the data, the code, the library versions and the numerics (posenc.numerics)."""
    return {"settings": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest(),
            "data": data,
            "code": sources.digest(code_module),
            "libraries": f"torch {torch.__version__}, numpy {np.__version__}",
            "numerics": hashlib.sha256(json.dumps(numerics, sort_keys=True).encode()).hexdigest()}


def weights_digest(weights: dict) -> str:
    """SHA-256 of a state dict's tensors, name by name in sorted order (names, dtypes, shapes
    and bytes): the same weights give the same digest whatever file holds them."""
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name].detach().cpu().contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def checkpoint_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step-{step:08d}.pt"


def save(directory: Path, step: int, state: dict, keep: int) -> None:
    """Write the checkpoint of `step` (atomically) and remove all but the newest `keep`."""
    files.save_torch(checkpoint_path(directory, step), {**state, "step": step})
    for old in sorted(Path(directory).glob("step-*.pt"))[:-keep]:
        old.unlink()


def resume(directory: Path, expected: dict[str, str], window: list[int], device,
           clean: bool = True) -> dict | None:
    """The state of the newest usable checkpoint in `directory`, or None to start afresh.

    Usable: readable, of the `expected` fingerprint, and with every checkpoint of the final
    average (`window`, §6.1) up to its step present and usable too, so that the average is made of
    the same checkpoints as an uninterrupted run's. With `clean`, every other file is removed and
    one line says what was found and what happens next.
    """
    directory = Path(directory)
    good, problems = {}, {}
    for path in sorted(directory.glob("step-*.pt")) if directory.is_dir() else []:
        problem, step = _check(path, expected)
        if problem is None:
            good[step] = path
        else:
            problems.setdefault(problem, []).append(path.name)
    usable = [s for s in good if all(w in good for w in window if w <= s)]
    chosen = max(usable, default=None)
    if clean:
        for step in sorted(s for s in good if chosen is None or s > chosen):
            problems.setdefault("unusable (a checkpoint of the final average before it is missing)",
                                []).append(good[step].name)
        for problem, names in problems.items():
            for name in names:
                (directory / name).unlink()
        for partial in directory.glob(".step-*.tmp") if directory.is_dir() else []:
            partial.unlink()  # a write that a kill cut short (files.write_bytes)
        notes = [f"{', '.join(names)} {problem}" for problem, names in problems.items()]
        outcome = (f"resuming from {good[chosen]} (step {chosen})" if chosen is not None
                   else "starting afresh" if notes else None)
        if notes:
            print(f"{directory}: {'; '.join(notes)}: removed; {outcome}", flush=True)
        elif outcome:
            print(outcome, flush=True)
        directory.mkdir(parents=True, exist_ok=True)
    if chosen is None:
        return None
    state = torch.load(good[chosen], map_location=device, weights_only=True)
    state["train_rows"] = [tuple(r) for r in state["train_rows"]]
    state["dev_rows"] = [tuple(r) for r in state["dev_rows"]]
    state["digests"] = [tuple(r) for r in state["digests"]]
    return state


def _check(path: Path, expected: dict[str, str]) -> tuple[str | None, int | None]:
    """(None, step) for a good checkpoint, else (what is wrong with it, None). Read on the CPU:
    only the chosen checkpoint goes to the device."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, not a zip, refused by weights_only: unusable all the same
        return f"unreadable ({type(e).__name__}: truncated or not a checkpoint)", None
    if not isinstance(state, dict) or not STATE_KEYS <= set(state):
        return "not a training checkpoint", None
    found = state["fingerprint"]
    if not isinstance(found, dict):
        return "written by an older posenc", None
    differing = [part for part in expected if found.get(part) != expected[part]]
    if differing:
        return f"written by another run (different {', '.join(differing)})", None
    if path.name != checkpoint_path(path.parent, state["step"]).name:
        return f"holds step {state['step']}, not the step its name says", None
    return None, int(state["step"])


def average(directory: Path, steps: list[int]) -> dict:
    """§6.1: the element-wise mean of the weights of the checkpoints of `steps`."""
    total, weights = None, {}
    for step in steps:
        path = checkpoint_path(directory, step)
        if not path.is_file():
            raise UserError(f"{path}: missing, so the average of the last checkpoints cannot be "
                            f"made; remove {directory} and train again")
        weights = torch.load(path, map_location="cpu", weights_only=True)["model"]
        if total is None:
            total = {k: v.double() for k, v in weights.items()}
        else:
            for k, v in weights.items():
                total[k] += v.double()
    return {k: (v / len(steps)).to(weights[k].dtype) for k, v in total.items()}


def save_model(path: Path, config: ModelConfig, weights: dict) -> None:
    """The final model: weights and the config they are rebuilt from (nanoGPT's layout)."""
    files.save_torch(path, {"config": dataclasses.asdict(config), "model": weights})


def load_model(path: Path, device: torch.device | str = "cpu"):
    """Rebuild a model from the config saved beside its weights, in eval mode."""
    path = Path(path)
    if not path.is_file():
        # A fresh clone has no DVC remote (README, "Pinned results without training"): training is
        # the way that always works; `posenc pins` names the stage that writes each model.
        raise UserError(f"{path}: missing; train it (`posenc pins` names the stage that writes it, "
                        f"`dvc pull {path}` fetches it where a DVC remote holds the pinned weights)")
    try:
        saved = torch.load(path, map_location=device, weights_only=True)
        model = build_model(ModelConfig.from_dict(saved["config"]))
        model.load_state_dict(saved["model"])
    except UserError:
        raise
    except Exception as e:  # truncated, or not a model of this code: the same fix either way
        raise UserError(f"{path}: not a readable posenc model ({type(e).__name__}); train it again "
                        f"(`dvc repro -f` its train stage, or posenc train)") from None
    return model.to(device).eval()
