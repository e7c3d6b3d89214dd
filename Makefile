# dpstream developer entry points. A fresh machine needs only `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

TYPECHECK := build/typecheck
LAYERS := accounting connectors pipelines examples

.PHONY: install dev-install bench-install lint test audit bench demo clean

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

# mypy cannot follow the editable install's import hook: it checks a tree of links that gives the layer
# folders their dpstream.* names.
lint: dev-install
	$(VENV)/bin/ruff check $(LAYERS) tests benchmarks
	@mkdir -p $(TYPECHECK)/dpstream
	@for d in $(LAYERS); do ln -sfn ../../../$$d $(TYPECHECK)/dpstream/$$d; done
	cd $(TYPECHECK) && ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml -p dpstream

# The suite runs in two parts: everything but tests/integration on TEST_WORKERS pytest-xdist workers (one test
# file per worker at a time), then tests/integration alone, whose streams follow the wall clock (Pub/Sub windows of
# a few seconds, leases, a SIGKILL mid-stream) and must not share the machine. Both parts always run.
TEST_WORKERS ?= 2

test: lint
	@status=0; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25 --ignore=tests/integration tests || status=1; \
	$(PY) -m pytest -q --durations=10 tests/integration || status=1; \
	exit $$status

audit: dev-install
	DPSTREAM_AUDIT=long $(PY) -m pytest -q -s tests/falsification/test_run_audit.py
	DPSTREAM_FUZZ_EXAMPLES=3000 $(PY) -m pytest -q tests/connectors/test_reader_fuzz.py tests/pipelines/test_jobfile_fuzz.py
	DPSTREAM_FUZZ_EXAMPLES=300 $(PY) -m pytest -q tests/pipelines/test_run_fuzz.py
	DPSTREAM_KILLS=30 $(PY) -m pytest -q -s tests/pipelines/test_kill_anywhere.py
	DPSTREAM_CSV_FUZZ_EXAMPLES=2000 $(PY) -m pytest -q tests/connectors/test_csv_strict.py
	DPSTREAM_STREAM_KILLS=30 $(PY) -m pytest -q -s tests/integration/test_stream_kill_anywhere.py
	DPSTREAM_RESUME_CASES=100 DPSTREAM_RESUME_PLANS=100000 $(PY) -m pytest -q -s tests/pipelines/test_resume_point_oracle.py

bench: bench-install
	$(PY) -m benchmarks

demo: install
	$(VENV)/bin/dpstream demo

clean:
	rm -rf $(VENV) build *.egg-info
