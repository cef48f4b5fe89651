# The two commands a newcomer needs:  `make run`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
CORES  ?= all

.PHONY: run run-full report test setup system-packages lint clean-results

# A run that was killed (Ctrl-C twice, a reboot) resumes: the jobs it cut short are redone from their
# resume stores (--rerun-incomplete), every finished job is kept. A job that fails is tried once more
# in the same run, resuming its items (--retries 1, as the Slurm profile does), and the other jobs go
# on meanwhile (--keep-going): one failed job no longer ends a run of hours. On one machine no job
# stops at its `runtime` (quantladder.budget: only a scheduler's limit stops a job).
SNAKEMAKE_RUN = $(BIN)/snakemake --cores $(CORES) --rerun-incomplete --retries 1 --keep-going

run: setup
	$(SNAKEMAKE_RUN)

# The whole embedded ladder (every rung, corpus and larger samples): hours, see the README.
run-full: setup
	$(SNAKEMAKE_RUN) --configfile config/full.yaml

# The report of whatever is finished, with what is left (works while a run goes on).
report:
	$(BIN)/quantladder report $(if $(CONFIGFILE),--configfile $(CONFIGFILE))

test: setup
	$(BIN)/python -m pytest -ra

setup: system-packages $(VENV)/.installed

system-packages:
	bash .ci/install-system-packages.sh

# llama-cpp-python is compiled by the project (AMX off, cached per CPU: quantladder/llama_tools.py),
# then the package and its other dependencies go in beside it, then llama.cpp's own tools are built
# from the same source (cached too; rule llama_tools finds them), so that a run starts measuring.
$(VENV)/.installed: pyproject.toml workflow/quantladder/llama_tools.py $(wildcard workflow/quantladder/patches/llama.cpp/*.patch)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	PYTHONPATH=workflow $(BIN)/python -m quantladder.llama_tools library pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m quantladder.llama_tools
	touch $@

lint: setup
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile rules/

clean-results:
	rm -rf results/* .snakemake/metadata
