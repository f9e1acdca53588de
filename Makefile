# make install | run | test | lint  — see README.md
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
# Running needs the runtime dependencies only; the tests and linters (Playwright,
# schemathesis, mypy, ruff...) come with the `test` extra, on their own stamp.
STAMP      := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: install install-test run test lint bench clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# The install compiles routing/chain/_fastrecord.c (gcc and Python's headers; optional).
$(STAMP): $(PY) pyproject.toml setup.py routing/chain/_fastrecord.c
	$(PY) -m pip install --upgrade pip >/dev/null
	# torch first, pinned, so nothing pulls a CUDA build.
	$(PY) -m pip install "torch==2.13.0"
	$(PY) -m pip install -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install -e ".[test]"
	touch $(TEST_STAMP)

install: $(STAMP)

install-test: $(TEST_STAMP)

run: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/search serve --config config.yaml

test: install-test
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

lint: install-test
	$(VENV)/bin/ruff check search routing sources tests bench
	$(VENV)/bin/ruff format --check search routing sources tests bench
	$(VENV)/bin/mypy

bench: install-test  # needs wrk (Debian: apt-get install -y wrk) and valgrind; see bench/README.md
	HF_HUB_OFFLINE=1 $(PY) bench/run_all.py

clean:
	rm -rf $(VENV) data traces.db* routing/chain/*.so  # (the data directory, ~/.local/share/search-router, is kept)
