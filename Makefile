# Two entry points a fresh machine needs: `make demo` and `make test`.
# The CPU build of torch 2.13.0 lies on this machine kind's disk and installs in seconds;
# a bare `torch` requirement would pull a multi-GB CUDA build. Override with TORCH_SPEC=...
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test lint setup clean package-check

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/gobrrr doctor

# One process. `pytest -n 2` (pytest-xdist, in dev) halves the time on two idle cores
# (8.2 min against ~16 here), but each worker is the other's CPU hog: beside one more busy
# core, three to four timing tests failed in each of two runs (docs/testing.md), so CI
# keeps one process until those are robust under that load.
test: $(VENV)/.installed
	$(PY) -m pytest -q

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy src

# Build the wheel and sdist, install the wheel with CPU torch into a fresh venv in a temp dir
# and run its console script (.ci/package-check says what it checks). CI runs it after tests.
package-check: $(VENV)/.installed
	PY=$(PY) TORCH_SPEC="$(TORCH_SPEC)" bash .ci/package-check

clean:
	rm -rf $(VENV) build dist src/*.egg-info
