# ffcv-pairs: `make demo` runs the main job, `make test` runs the checks.
# Both install what they need on first use (apt libraries, .venv, pinned wheels);
# a second run finds the stamp and installs nothing.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS := pkg-config g++ libopencv-dev libturbojpeg0-dev
TORCH := torch==2.13.0
PEERS := albumentations==2.0.8 albucore==0.0.24 simsimd==6.5.16 stringzilla==5.3.2

.PHONY: install test test-long lint demo bench bench-quick bench-extras translators-check gpu-check gpu-bundle clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@# FFCV's C++ extension finds OpenCV and libjpeg-turbo through pkg-config. Every library
	@# that `pkg-config --libs opencv4 libturbojpeg` names comes with these packages' Depends;
	@# their Recommends (37 packages on Debian 12: GTK 3, Qt Quick, VA drivers, Java) are skipped.
	@if command -v g++ >/dev/null && command -v pkg-config >/dev/null \
	    && pkg-config --exists opencv4 libturbojpeg; then \
	  echo "system libraries: present"; \
	else \
	  echo "system libraries: installing $(APT_PKGS)"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $(APT_PKGS); \
	fi
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# torch first and pinned: a bare `torch` requirement pulls a multi-GB CUDA build.
	@# pip byte-compiles what it installs on one core (about half of a 70 s install on 2 cores);
	@# here it does not, and compileall does it on all cores, torch's part while pip installs
	@# the rest. compileall's status is ignored: it fails on the files pip's own compile step
	@# skips too (torch/testing/_internal/py312_intrinsics.py is Python 3.12 syntax).
	$(PY) -m pip install -q --no-compile $(TORCH)
	@$(PY) -m compileall -qq -j 0 $(VENV)/lib/python*/site-packages/torch > /dev/null 2>&1 & compile=$$!; \
	  $(PY) -m pip install -q --no-compile -e '.[dev,demo,bench,remote]'; pip=$$?; \
	  wait $$compile; $(PY) -m compileall -qq -j 0 $(VENV)/lib > /dev/null 2>&1; exit $$pip
	@# Albumentations, the reference of the translator's and some ops' tests, without its
	@# dependencies: its opencv-python-headless would overwrite FFCV's cv2 (the rest are here).
	$(PY) -m pip install -q --no-deps $(PEERS)
	@touch $@

lint: install
	$(PY) -m ruff check ffcv_pairs writers bench tests
	$(PY) -m ruff format --check ffcv_pairs writers bench tests
	$(PY) -m mypy

# Three test processes (pytest-xdist), tests handed out as each finishes. The suite keeps
# 2 cores about three quarters busy with two (tests waiting on subprocesses and on the
# benchmark smoke test's time boxes); a third fills that: from a fresh clone on 2 cores,
# make test took 11.9 min with two, 10.4 with three (7.8 and 8.1 min on 2026-12-05, an empty
# kernel cache, the install about a minute of it).
# The tests marked slow start first (tests/conftest.py). Lint runs beside the tests; its
# output follows theirs.
# Tests marked long (the whole benchmark at its smoke sizes, about 2.5 minutes; the plain-kernel
# pass, about 1 minute) are left out:
# `make test-long` runs them.
# tests/test_plain_pass.py runs the reference tests again with the plain-numba twins of the
# LLVM intrinsics (FFCV_PAIRS_PLAIN_KERNELS=1), as one test of this run.
test: install
	@$(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & lint=$$!; \
	  $(PY) -m pytest -n 3 --dist worksteal -m "not long"; tests=$$?; \
	  wait $$lint; lint=$$?; echo "--- lint"; cat $(VENV)/lint.log; \
	  exit $$(( tests || lint ))

test-long: install
	$(PY) -m pytest -m long

demo: install
	$(PY) -m ffcv_pairs.demo --compare

bench: install
	$(PY) -m bench

bench-quick: install
	$(PY) -m bench --quick

# Optional rivals in their own venvs (bench/.venv-litdata, bench/.venv-streaming);
# see bench/extras/venvs.py.
bench-extras: install
	$(PY) -m bench --setup-extras

# The translator and policy tests against the real torchvision (0.29.1, which needs torch
# 2.14.1: its own venv, bench/.venv-torchvision, about 5.5 GB from pip's local cache, made on
# first use); see bench/extras/translators_check.py.
translators-check: install
	$(PY) -m bench.extras.translators_check

# The GPU path on a CUDA machine, about 6 minutes: the CPU simulation, CUDA tests, pairs/s into GPU
# memory, a time-boxed training run, 2 ranks; writes bench/results/gpu-<date>.md. Without CUDA:
# the simulation, then a line that the CUDA steps were skipped.
gpu-check: install
	$(PY) -m bench.gpu.check

# Everything an offline GPU machine lacks, in gpu-bundle/ (git-ignored, < 60 MiB); there:
# PYTHON=python3 bash gpu-bundle/run.sh OUT
gpu-bundle: install
	$(PY) -m bench.gpu.bundle

clean:
	rm -rf $(VENV) demo_out build gpu-bundle *.egg-info .pytest_cache .mypy_cache .ruff_cache
