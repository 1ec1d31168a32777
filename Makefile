# `make repro` and `make test` start from a bare python3: they create .venv, install the pinned
# dependency set (requirements.lock) and the project, then run DVC or pytest.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# tcmalloc is a little faster than glibc as posenc tunes it (posenc/allocator.py) and gives the same
# bits (README.md, Benchmarks); used when Debian's libtcmalloc-minimal4 is installed, recorded in
# each run's timings log.
TCMALLOC := $(firstword $(wildcard /usr/lib/*/libtcmalloc_minimal.so.4))
export PATH := $(abspath $(BIN)):$(PATH)
export LD_PRELOAD := $(TCMALLOC)

.PHONY: repro test readme clean-venv

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

repro: $(STAMP)
	dvc repro

test: $(STAMP)
	$(BIN)/python -m pytest

readme: $(STAMP)
	posenc readme

clean-venv:
	rm -rf $(VENV)
