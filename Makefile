# SparkOps: `make up` brings the stack up with demo engines; `make test` runs the tests.
# The interpreter the venv is made from: the distribution's /usr/bin/python3 when it is 3.11 or newer
# and can make a venv (Debian and Ubuntu build it with profile-guided and link-time optimisation),
# else python3 on PATH. pyenv's and a plain source build have neither unless configured for them:
# pure Python work costs them 1.36x the CPU, a process start 1.11x (bench/interpreter.py).
# `make install PYTHON=python3.12` chooses another; an existing .venv is kept (`make clean` first).
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' \
  >/dev/null 2>&1 && echo /usr/bin/python3 || echo python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# `make up PORT=8123` serves on another port.
PORT   ?= 8000
# Test workers (pytest-xdist), each with its own test database and Redis database: 2.5 per core,
# rounded down, at most 8 (a test waits on servers, units and browsers it started: on 2 cores 4
# workers left the box 12 % idle, 5 leave it 4 % idle for the same CPU); `make test
# PYTEST_WORKERS=0` runs in one process.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); n=$$((n * 5 / 2)); [ $$n -lt 1 ] && n=1; [ $$n -gt 8 ] && n=8; echo $$n)

.PHONY: up install bytecode test test-fast lint redis-server chromium check clean vendor-plotly

up: install bytecode redis-server
	$(VENV)/bin/sparkops up --demo --port $(PORT)

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
	  echo "$(PYTHON) -m venv failed: install it with 'sudo apt-get install python3-venv' (Debian/Ubuntu)"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# The project's modules compiled once (an editable install has no bytecode, and where
# PYTHONDONTWRITEBYTECODE is set no process writes it): each process SparkOps or its tests start
# then skips compiling what it imports (bench/process_start.py: 7-31 % less CPU a start).
bytecode: install
	@$(PY) -m compileall -q -j 0 dashboard sparkops simulator tests >/dev/null

# A private Redis is started when REDIS_URL is not set; it needs redis-server.
redis-server:
	@if [ -z "$$REDIS_URL" ] && ! command -v redis-server >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "redis-server is missing: installing Debian's redis-server package"; \
	    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null; \
	  else \
	    echo "redis-server is missing: install it with 'sudo apt-get install redis-server', or set REDIS_URL"; exit 1; \
	  fi; \
	fi

# Browser tests drive Debian's Chromium headless shell (tests/chromium.py): the same pages at 0.42
# of the CPU of chromium's headless mode (bench/chromium_shell.py); the paging tests need the whole
# browser (`chromium`: the shell denies every page the Notification API). Like redis-server both are
# installed when missing and run as root; else the tests run in what is there, or are skipped with
# one line that says how to get them.
CHROMIUM_PACKAGES := chromium-headless-shell chromium
chromium:
	@missing=$$(for p in $(CHROMIUM_PACKAGES); do command -v $$p >/dev/null 2>&1 || printf '%s ' $$p; done); missing=$${missing% }; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "$$missing: missing, installing Debian's packages (for the browser tests)"; \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; } \
	      || echo "could not install $$missing: the browser tests that need it are skipped, saying so"; \
	  else \
	    echo "$$missing: missing, so the browser tests that need it are skipped ('sudo apt-get install $$missing')"; \
	  fi; \
	fi

# pytest caches the test modules it rewrites for its assertions only where bytecode may be written:
# a machine with PYTHONDONTWRITEBYTECODE set would rewrite them all in every worker of every run.
test: install bytecode redis-server chromium
	PYTHONDONTWRITEBYTECODE= $(PY) -m sparkops.redisproc -- $(PY) -m tests.suite $(PYTEST_WORKERS) $(PYTEST_ARGS)

# The inner loop: the tests that start no stack, browser, systemd manager (a real one or a simulated
# box), real engine or web server, and wait out no real time by design; tests/conftest.py marks the
# others `slow`. 1,013 of 1,390 tests (2026-12-06): 66 s of CPU in all, 62-64 s here with 5 workers
# on 2 cores shared at load 5 (3 workers: 73 s); `make test` runs them all.
test-fast: install bytecode redis-server
	PYTHONDONTWRITEBYTECODE= $(PY) -m sparkops.redisproc -- $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -m "not slow" $(PYTEST_ARGS)

# What CI checks before the tests: ruff's lint and format, mypy (their scope is in pyproject.toml), and
# import-linter's contracts (.importlinter: which package may import which; docs/contributing.md).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

check: install
	$(PY) manage.py check

# The documentation site (docs/, mkdocs.yml): the CLI reference written from the commands' own
# parsers, then the site built into site/ with --strict (a broken link or anchor fails), which
# SparkOps serves at /docs/. The `docs` extra pins MkDocs and Material for MkDocs.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): pyproject.toml | $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) tools/cli_reference.py --write
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# `make docs-serve DOCS_PORT=8002` serves on another port.
DOCS_PORT ?= 8001
docs-serve: $(DOCS_STAMP)
	$(PY) tools/cli_reference.py --write
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve -a 127.0.0.1:$(DOCS_PORT)

# plotly.js's "basic" partial bundle (scatter, bar, pie: all SparkOps draws), vendored as
# static/vendor/plotly-basic-$(PLOTLY_JS_VERSION).min.js; this fetches it again from the npm
# registry and refuses a file whose sha256 is not the pinned one (static/vendor/README.md).
PLOTLY_JS_VERSION := 4.1.1
PLOTLY_JS_SHA256  := 99784e3abfb07b142a15e521a439e6d9addceadb3f79553fd24c72774f0649ba
vendor-plotly:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  (cd "$$tmp" && npm pack --silent plotly.js-basic-dist-min@$(PLOTLY_JS_VERSION) >/dev/null && tar xzf *.tgz) && \
	  echo "$(PLOTLY_JS_SHA256)  $$tmp/package/plotly-basic.min.js" | sha256sum --check --quiet && \
	  cp "$$tmp/package/plotly-basic.min.js" static/vendor/plotly-basic-$(PLOTLY_JS_VERSION).min.js && \
	  echo "static/vendor/plotly-basic-$(PLOTLY_JS_VERSION).min.js: plotly.js-basic-dist-min@$(PLOTLY_JS_VERSION), sha256 checked"

clean:
	rm -rf $(VENV) var build site *.egg-info
	find dashboard sparkops simulator tests -name __pycache__ -prune -exec rm -rf {} +
