# Two commands: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= bindings.yaml

.PHONY: run test lint flaky bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the project's metadata changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/bot run --config $(CONFIG)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/mypy bot channels routing agent tools

test: lint
	$(BIN)/pytest --durations=15

# The flake hunt: the whole suite RUNS times, all runs after the first under a CPU hog on every core.
RUNS ?= 5
flaky: $(VENV)/.installed-dev
	$(BIN)/python tests/flake_hunt.py --runs $(RUNS)

bench: $(VENV)/.installed
	$(BIN)/python bench/routing.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
