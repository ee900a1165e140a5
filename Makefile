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

# Two workers (pytest-xdist, in dev), then the tests marked `serial` alone: one process
# took 16.5 min here (2026-12-03), over CI's 15; two workers beside a CPU hog took 12.5
# min and tipped one regime test, and those seen tipped by load run after, alone
# (docs/testing.md). Both runs always run; either failing fails the target.
test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 -m "not serial"; a=$$?; \
	$(PY) -m pytest -q -m serial; b=$$?; \
	[ $$a -eq 0 ] && [ $$b -eq 0 ]

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy src

# Build the wheel and sdist, install the wheel with CPU torch into a fresh venv in a temp dir
# and run its console script (.ci/package-check says what it checks). CI runs it after tests.
package-check: $(VENV)/.installed
	PY=$(PY) TORCH_SPEC="$(TORCH_SPEC)" bash .ci/package-check

clean:
	rm -rf $(VENV) build dist src/*.egg-info
