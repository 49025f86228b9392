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

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
