# The two set-up commands of the README. Both create .venv from the repo's own files if needed.
#   make smoke   the main job: the smoke tier of the DAG on CPU
#   make test    the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: smoke test lint install

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

smoke: $(STAMP)
	$(BIN)/fp8rl config validate config/smoke.yaml
	$(BIN)/fp8rl matrix config/smoke.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
