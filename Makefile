# make install | run | test  — see README.md
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run test lint bench clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --upgrade pip >/dev/null
	# torch first, pinned, so nothing pulls a CUDA build.
	$(PY) -m pip install "torch==2.13.0"
	$(PY) -m pip install -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

run: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/search serve --config config.yaml

test: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check search routing sources tests bench
	$(VENV)/bin/ruff format --check search routing sources tests bench
	$(VENV)/bin/mypy

bench: install
	HF_HUB_OFFLINE=1 $(PY) bench/run_all.py

clean:
	rm -rf $(VENV) data traces.db*  # (the data directory, ~/.local/share/search-router, is kept)
