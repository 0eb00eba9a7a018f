# make run   - create .venv, install, start a local cluster under ./data (Ctrl-C stops it)
# make lint  - create .venv, install, run ruff (lint + format check) and mypy (config: pyproject.toml)
# make test  - make lint, then install everything the tests need and run the whole suite
# make bench - run the benchmarks (not part of make test)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run lint test bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/rmq dev --data ./data

# The paths mypy checks are `files` in pyproject.toml, so a bare `mypy` checks the same tree.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# lint first: a violation fails CI before the slow part starts; two workers (pytest-xdist),
# each running whole modules, so a module's fixtures (its cluster) stay in one process
test: lint
	scripts/install_test_deps.sh
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/e2e_bench.py
	$(BIN)/python bench/rebuild_bench.py
	$(BIN)/python bench/ha_bench.py
	$(BIN)/python bench/failover_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
