# torchinspect — developer entry points. `make demo` and `make test` work on a fresh clone:
# they create .venv, install torch/torchvision, the package and (when missing) Graphviz and
# chromium (the headless browser that checks `inspect report` pages; Playwright drives it).
VENV        ?= .venv
PYTHON      ?= python3
PY          := $(VENV)/bin/python
# Pinned for this environment (the wheels on this machine's disk); pyproject asks torch>=2.10.
TORCH_PINS  ?= torch==2.14.1 torchvision==0.29.1
STAMP       := $(VENV)/.torchinspect-installed
PYTEST_ARGS ?=

.PHONY: install demo test test-slow test-all lint bench bench-report docs clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PINS)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,docs]' $(TORCH_PINS)
	@command -v dot >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null) \
	      || echo "warning: could not install graphviz; graph output falls back to .dot files"; \
	  else echo "note: Graphviz 'dot' not found; graph output falls back to .dot files"; fi; }
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium; the report browser tests will skip"; \
	  else echo "note: chromium not found; the report browser tests will skip"; fi; }
	@touch $(STAMP)

demo: install
	$(VENV)/bin/inspect summary resnet18 --input 3,224,224

# `make test`: everything but the slow sweeps, in parallel (pytest-xdist); CI runs test-slow too.
PYTEST_WORKERS ?= auto
test: install
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) -m "not slow" $(PYTEST_ARGS)

test-slow: install
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) -m slow $(PYTEST_ARGS)

test-all: test test-slow

lint: install
	$(VENV)/bin/ruff check src models_zoo tests benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy  # [tool.mypy] in pyproject.toml: src/torchinspect and models_zoo, strict on the public API

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
