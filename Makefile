# dpstream developer entry points. A fresh machine needs only `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: install dev-install bench-install test bench demo clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): setup.py | $(PY)
	$(PIP) install --quiet -e '.[demo]'
	touch $@

install: $(STAMP)

$(VENV)/.dev-installed: setup.py $(STAMP)
	$(PIP) install --quiet -e '.[dev,demo]'
	touch $@

dev-install: $(VENV)/.dev-installed

$(VENV)/.bench-installed: setup.py $(STAMP)
	$(PIP) install --quiet -e '.[dev,demo,bench]'
	touch $@

bench-install: $(VENV)/.bench-installed

test: dev-install
	$(PY) -m pytest -q tests

bench: bench-install
	$(PY) -m benchmarks

demo: install
	$(VENV)/bin/dpstream demo

clean:
	rm -rf $(VENV) build *.egg-info
