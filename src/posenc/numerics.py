"""Portable numerics: the same float32 bits on every x86-64 CPU with AVX2, Intel or AMD.

The kernels that do posenc's arithmetic choose their code by the CPU they find, and each code
path sums in its own order:
- ATen's vectorised kernels (softmax, layer norm, reductions, Adam's foreach ops) pick AVX-512
  or AVX2; `ATEN_CPU_CAPABILITY=avx2` caps them.
- oneDNN picks its ISA likewise; `ONEDNN_MAX_CPU_ISA=AVX2` caps it (this model's float32 ops do
  not reach oneDNN in torch 2.13, README, Reproducibility; the cap keeps it so if one ever does).
- MKL's sgemm picks its path by vendor and ISA. Its Conditional Numerical Reproducibility (CNR)
  mode `MKL_CBWR=AVX2,STRICT` runs the AVX2 branch with fixed blocking on every Intel CPU with
  AVX2, but on other vendors MKL silently falls back to its own choice (oneMKL's developer
  guide, "Getting Started with CNR"). So on a non-Intel CPU posenc answers MKL's vendor check
  (`mkl_serv_intel_cpu_true`) with "Intel": a two-line C function, built once with `cc` and
  loaded globally before torch, so that libtorch's calls bind to it. MKL then runs the same AVX2
  branch as on an Intel CPU. The only branch MKL itself promises across vendors, COMPATIBLE
  (SSE2), ran the training step at 0.48x native on the AMD machine; the AVX2 branch at 1.14x
  (README, Reproducibility).

Every setting must be in place before torch loads its kernels, so `apply` runs before anything
imports torch (posenc.cli does it first). `native` leaves the libraries their own choice: the
fastest, and exact only on the CPU model that made a result.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path

MODES = ("portable", "native")
X86 = ("x86_64", "AMD64")  # platform.machine() of the CPUs the portable bits are for
PORTABLE = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2,STRICT"}
SHIM_SOURCE = b"""/* posenc: MKL's vendor check answered "Intel", so that MKL_CBWR's branch holds (posenc/numerics.py) */
int mkl_serv_intel_cpu_true(void) { return 1; }
int mkl_serv_intel_cpu(void) { return 1; }
"""

_applied: str | None = None   # the mode `apply` set in this process, before torch was imported
_problems: list[str] = []      # why portable bits cannot hold here, one line each


def cpu() -> dict[str, str]:
    """The CPU as lscpu names it: architecture, vendor, family, model, and whether it has AVX2."""
    info = {"arch": platform.machine(), "vendor": "", "family": "", "model": "", "avx2": "no"}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return info
    fields = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    info.update(vendor=fields.get("vendor_id", ""), family=fields.get("cpu family", ""),
                model=fields.get("model", ""),
                avx2="yes" if "avx2" in fields.get("flags", "").split() else "no")
    return info


def apply(mode: str) -> list[str]:
    """Set `mode`'s numerics for this process and its children; return (and print, one line
    each, before any work) the reasons why portable bits cannot hold here, if any."""
    global _applied
    if mode not in MODES:
        raise ValueError(f"numerics mode {mode!r}: one of {', '.join(MODES)}")
    problems = []
    if "torch" in sys.modules and _applied != mode:
        problems.append("torch was imported before posenc set the numerics; this run computes with "
                        "whatever its importer set (run posenc from its own command line)")
    for name in PORTABLE:
        os.environ.pop(name, None)
    if mode == "portable":
        os.environ.update(PORTABLE)
        info = cpu()
        if info["arch"] not in X86:
            problems.append(f"this is a {info['arch']} CPU; the portable bits are those of x86-64 "
                            f"CPUs with AVX2, and here match only CPUs of this kind")
        elif info["avx2"] != "yes":
            problems.append("this x86-64 CPU has no AVX2, the instruction set of the portable bits; "
                            "MKL and ATen fall back to older code with other sums")
        elif info["vendor"] != "GenuineIntel" and "torch" not in sys.modules:
            problem = _load_shim()
            if problem:
                problems.append(problem)
    if "torch" not in sys.modules:
        _applied = mode
    _problems[:] = problems
    for problem in problems:
        print(f"posenc: warning: numerics {mode}: portable bits cannot hold: {problem}",
              file=sys.stderr, flush=True)
    return problems


def mode_from_argv(argv: list[str]) -> str:
    """A script's `--numerics MODE` (default portable), read before torch is imported (benchmarks/)."""
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--numerics", choices=MODES, default="portable")
    return p.parse_known_args(argv)[0].numerics


def applied() -> str | None:
    """The mode `apply` set before torch was imported, or None."""
    return _applied


def check(mode: str) -> None:
    """Called once torch runs (posenc.runtime.setup): say in one line where the numerics of `mode`
    are not what this process computes with."""
    import torch

    if mode != _applied and not _problems:
        print(f"posenc: warning: numerics {mode}: portable bits cannot hold: this process did not "
              f"set them before torch loaded (it set {_applied or 'nothing'})", file=sys.stderr, flush=True)
    if mode == "portable" and torch.cuda.is_available():
        print("posenc: warning: numerics portable: on a GPU the bits are the same only on the same "
              "GPU model, driver and CUDA/cuDNN versions; the CPU settings cover CPU arithmetic",
              file=sys.stderr, flush=True)
    if mode == "portable" and not torch.backends.mkl.is_available() and cpu()["arch"] in X86:
        print("posenc: warning: numerics portable: this torch has no MKL, so its matrix products "
              "are not those of the portable bits", file=sys.stderr, flush=True)


def record(mode: str) -> dict[str, str]:
    """What fixes the bits of a run under `mode`, for its fingerprint and signatures. Portable: the
    mode, ATen's capability, MKL's branch and the versions. Native: the CPU model as well, since
    native bits hold on that model only. Nothing host-dependent in portable mode."""
    import torch

    out = {"mode": mode, "aten": torch.backends.cpu.get_cpu_capability(),
           "mkl_cbwr": os.environ.get("MKL_CBWR", "default"), "torch": torch.__version__,
           "mkl": mkl_version()}
    if mode == "native":
        info = cpu()
        out["cpu"] = f"{info['vendor']} family {info['family']} model {info['model']}"
    return out


def mkl_version() -> str:
    """MKL's version as torch's build configuration names it ("2024.2"), or "none"."""
    import torch

    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library Version" in line:
            return line.split("Version", 1)[1].strip().split("-")[0].strip()
    return "none"


def _load_shim() -> str | None:
    """Build (once, cached) and load MKL's vendor answer globally; a problem line, or None."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "posenc"
    lib = cache / f"mkl-vendor-{hashlib.sha256(SHIM_SOURCE).hexdigest()[:12]}.so"
    if not lib.is_file():
        try:
            cache.mkdir(parents=True, exist_ok=True)
            src, tmp = lib.with_suffix(f".{os.getpid()}.c"), lib.with_suffix(f".{os.getpid()}.tmp")
            src.write_bytes(SHIM_SOURCE)
            r = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(tmp), str(src)],
                               capture_output=True, text=True)
            src.unlink()
            if r.returncode != 0:
                return (f"cc could not build MKL's vendor shim ({r.stderr.strip().splitlines()[-1:]}); "
                        f"MKL runs its own AMD path: install a C compiler (apt-get install gcc)")
            tmp.replace(lib)
        except FileNotFoundError:
            return ("no C compiler (cc) to build MKL's vendor shim, so MKL runs its own path for this "
                    "vendor: install one (apt-get install gcc)")
        except OSError as e:
            return f"{cache}: cannot write MKL's vendor shim ({e.strerror}); set XDG_CACHE_HOME to a writable directory"
    ctypes.CDLL(str(lib), mode=os.RTLD_GLOBAL)
    return None
