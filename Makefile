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

# The pinning run goes unit by unit (posenc pin, docs/pipeline.md): a unit is one run's training
# and every stage that reads its weights, and JOBS units run side by side, each stage with
# train.threads or eval.threads threads (params.yaml): on a 2-core machine two one-thread
# trainings side by side finish in 0.80x the time of two two-thread trainings in turn (README,
# Performance). The bits do not depend on the schedule: the thread count is a param. Seed 1 of
# every variant first, then seed 2, ...; then the residual study, then the short runs. A unit
# pinned in dvc.lock is never run again, its weights here or not. REPIN=1 re-pins units that
# the current code or params made stale.
JOBS ?= 2
REPIN ?=

# requirements.lock pins torch==2.13.0. pip's default index (PyPI) serves it on Linux as the CUDA
# build (several GB); PyTorch's own CPU index serves 2.13.0+cpu, which meets the same pin and which
# pip then prefers: `make TORCH_INDEX=https://download.pytorch.org/whl/cpu test`. Empty: PyPI's.
TORCH_INDEX ?=

.PHONY: pin repro pipeline setup peers test readme verify clean-venv

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

# The environment alone: .venv with the pinned dependency set and the project.
setup: $(STAMP)

# benchmarks/peers.py's own environment: fairseq and eole on the pinned set (benchmarks/peers.lock).
# Never the pipeline's: eole caps sentencepiece below requirements.lock's. CI builds it beside .venv
# (make -j2 setup peers) so that tests/test_benchmarks.py runs the peers benchmark too.
PEERS := .venv-peers
PEERS_STAMP := $(PEERS)/.installed

$(PEERS_STAMP): benchmarks/peers.lock pyproject.toml
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --disable-pip-version-check pip==$(PIP_VERSION)
	$(PEERS)/bin/python -m pip install --quiet --disable-pip-version-check -r benchmarks/peers.lock \
	  $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PEERS)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

peers: $(PEERS_STAMP)

pin repro: $(STAMP)
	$(MAKE) --no-print-directory pipeline

pipeline:
	posenc pin --jobs $(JOBS) $(if $(REPIN),--repin)

# The suite on TEST_JOBS pytest-xdist workers, each test file whole on one worker (its session
# fixtures made once there). The two end-to-end tests (pytest's `slow` marker) are handed out
# first (tests/conftest.py), so that on 2 cores the pipeline's, about half the suite's time and
# mostly one process at a time, runs beside the rest instead of after it.
TEST_JOBS ?= 2

test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder

readme: $(STAMP)
	posenc readme

# Does this machine reproduce the pinned bits? Retrains sinusoidal-1's first checkpoint (minutes).
verify: $(STAMP)
	posenc verify

clean-venv:
	rm -rf $(VENV) $(PEERS)
