# The two commands a newcomer needs:  `make run`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
CORES  ?= all

.PHONY: run test setup system-packages lint clean-results

run: setup
	$(BIN)/snakemake --cores $(CORES)

test: setup
	$(BIN)/python -m pytest -ra

setup: $(VENV)/.installed system-packages

system-packages:
	bash .ci/install-system-packages.sh

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

lint: setup
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile rules/

clean-results:
	rm -rf results/* .snakemake/metadata
