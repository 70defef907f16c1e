# Two commands: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= bindings.yaml
# Some machines set PYTHONDONTWRITEBYTECODE: then every `bot` process (and the tests start hundreds) compiles the
# project's modules again. Compiled once into __pycache__, they start about a third faster.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test lint docs flaky bench clean system-packages

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

# The bot runs every command under bubblewrap: `run` installs it when it can, and starts anyway when it cannot
# (commands are then refused with a message saying so). Without $(CONFIG) (a fresh checkout), `bot init` asks its
# questions at a terminal and the bot starts on what it wrote; elsewhere `run` stops with one line saying what to do.
run: $(VENV)/.installed
	@if [ ! -f "$(CONFIG)" ]; then \
		if [ -t 0 ] && [ -t 1 ]; then $(BIN)/bot init --config "$(CONFIG)" || exit 1; \
		else echo "$(CONFIG) does not exist: write it with $(BIN)/bot init --config $(CONFIG) (or run the example: make run CONFIG=bindings.example.yaml)" >&2; exit 1; fi; \
	fi
	@$(MAKE) --no-print-directory system-packages || echo "warning: without bubblewrap the agent's commands are refused" >&2
	$(BIN)/bot run --config "$(CONFIG)"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy bot channels routing agent tools tests/fakes

# The tests run real programs: bubblewrap (the sandbox), git (the exec policy's repository checks), prlimit, a
# throwaway PostgreSQL server (tests/postgres.py; Debian keeps initdb off PATH, in /usr/lib/postgresql/*/bin),
# systemd-analyze (the service unit is verified), man (the exec tables are checked against the man pages) and chromium
# (the web pages are tested in a real browser, tests/web_browser.py: Playwright drives Debian's Chromium).
# Whatever is missing is installed with apt-get, as root or through sudo; `run` needs none of the test-only ones.
SYSTEM_PACKAGES := bwrap:bubblewrap git:git prlimit:util-linux
test: SYSTEM_PACKAGES += initdb:postgresql systemd-analyze:systemd man:man-db chromium:chromium
HAVE = have() { command -v "$$1" >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/"$$1" >/dev/null 2>&1; }
system-packages:
	@$(HAVE); missing=; for pair in $(SYSTEM_PACKAGES); do \
		have $${pair%%:*} || missing="$$missing $${pair#*:}"; done; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
	else echo "missing:$$missing; install them (apt-get install$$missing) as root" >&2; exit 1; fi; \
	command -v apt-get >/dev/null 2>&1 || { echo "missing:$$missing, and there is no apt-get: install them" >&2; exit 1; }; \
	echo "installing$$missing"; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null
	@$(HAVE); for pair in $(SYSTEM_PACKAGES); do have $${pair%%:*} || \
		{ echo "$${pair#*:} could not be installed" >&2; exit 1; }; done

# Spread over the cores (tests/conftest.py: two workers per core); a worker that runs out of tests takes some of
# another's. `-n 0` in PYTEST_ARGS runs everything in one process.
PARALLEL := -n auto --dist worksteal
test: lint system-packages
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/docs-site
	$(BIN)/pytest $(PARALLEL) --durations=15 $(PYTEST_ARGS)

# The docs site (mkdocs.yml, docs/): the config and CLI references are made from the code at each build.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The flake hunt: the whole suite RUNS times, all runs after the first under a CPU hog on every core.
RUNS ?= 5
flaky: $(VENV)/.installed-dev
	$(BIN)/python tests/flake_hunt.py --runs $(RUNS) -- $(PARALLEL)

# The speed guard: the pipeline, start-up, idle-memory and Telegram figures beside bench/baseline.json, in under a
# minute (`$(BIN)/python bench/guard.py --runs 3 --save` records a new baseline from the median of three runs,
# `--readme` rewrites README.md's table). The
# other benchmarks run on their own: bench/routing.py alone takes longer than all of these.
bench: $(VENV)/.installed
	$(BIN)/python bench/guard.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
