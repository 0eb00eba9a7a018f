# make run   - create .venv, install, start a local cluster under ./data (Ctrl-C stops it)
# make test  - create .venv, install everything the tests need, run the whole suite
# make bench - run the benchmarks (not part of make test)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/rmq dev --data ./data

test: $(STAMP)
	scripts/install_test_deps.sh
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/e2e_bench.py
	$(BIN)/python bench/rebuild_bench.py
	$(BIN)/python bench/ha_bench.py
	$(BIN)/python bench/failover_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
