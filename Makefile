# `make repro` and `make test` start from a bare python3: they create .venv, install the pinned
# dependency set (requirements.lock) and the project, then run DVC or pytest.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# tcmalloc is a little faster than glibc as posenc tunes it (posenc/allocator.py) and gives the same
# bits (README.md, Performance); used when Debian's libtcmalloc-minimal4 is installed, recorded in
# each run's timings log.
TCMALLOC := $(firstword $(wildcard /usr/lib/*/libtcmalloc_minimal.so.4))
export PATH := $(abspath $(BIN)):$(PATH)
export LD_PRELOAD := $(TCMALLOC)

# The training stages run TRAIN_JOBS at a time, each with train.threads threads (params.yaml): on a
# 2-core machine two one-thread trainings side by side finish in 0.80x the time of two two-thread
# trainings in turn (README, Performance). DVC runs stages side by side when each is its own
# `dvc repro` (it releases the repository lock while a stage's command runs); --wait-for-lock has
# them take turns at dvc.lock, so one dvc.lock comes out. The bits do not depend on the schedule:
# the thread count is a param. Seed 1 of every variant trains first, then seed 2, ...: a run cut
# short has whole seeds of the table.
TRAIN_JOBS ?= 2
# Then `analyze` and the evaluate@ and extrapolate@ stages run EVAL_JOBS at a time, each with
# eval.threads threads: on the 2-core machine two one-thread evaluations side by side took 0.68x
# the wall time of the same two with two threads in turn, with the same hypotheses (README,
# Performance). `report` needs them all and runs last, in the closing `dvc repro`.
EVAL_JOBS ?= 2

# requirements.lock pins torch==2.13.0. pip's default index (PyPI) serves it on Linux as the CUDA
# build (several GB); PyTorch's own CPU index serves 2.13.0+cpu, which meets the same pin and which
# pip then prefers: `make TORCH_INDEX=https://download.pytorch.org/whl/cpu test`. Empty: PyPI's.
TORCH_INDEX ?=

.PHONY: repro pipeline test readme verify clean-venv

# pip itself, pinned: from 25.1 `pip show` prints the licence as pyproject.toml declares it
# (PEP 639's License-Expression), which the pip a fresh venv brings does not.
PIP_VERSION := 25.3

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check pip==$(PIP_VERSION)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock \
	  $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

repro: $(STAMP)
	$(MAKE) --no-print-directory pipeline

pipeline:
	dvc repro prepare shorten
	dvc stage list --name-only | grep -E '^train(_short|_residual|_residual_sum)?@' | awk -F- '{print $$NF, $$0}' | sort -s -n -k1,1 | \
	  cut -d' ' -f2 | xargs -r -n 1 -P $(TRAIN_JOBS) dvc --wait-for-lock repro --single-item
	{ echo analyze; dvc stage list --name-only | grep -E '^(evaluate|evaluate_short|evaluate_residual|evaluate_residual_sum|extrapolate)@'; } | \
	  xargs -r -n 1 -P $(EVAL_JOBS) dvc --wait-for-lock repro --single-item
	dvc repro

test: $(STAMP)
	$(BIN)/python -m pytest

readme: $(STAMP)
	posenc readme

# Does this machine reproduce the pinned bits? Retrains sinusoidal-1's first checkpoint (minutes).
verify: $(STAMP)
	posenc verify

clean-venv:
	rm -rf $(VENV)
