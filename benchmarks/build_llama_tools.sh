#!/usr/bin/env bash
# Build (or find) llama.cpp's own tools -- llama-imatrix, llama-quantize, llama-perplexity,
# llama-bench -- from the llama.cpp source that the installed llama-cpp-python vendors, with the
# same backend: the one builder the workflow's llama_tools rule uses (quantladder.llama_tools).
# Prints the directory of the binaries. The build is cached once per version, backend and flags
# ($QUANTLADDER_TOOLS_DIR, else ~/.cache/quantladder/llama-tools).
#   usage: benchmarks/build_llama_tools.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
PYTHONPATH=workflow${PYTHONPATH:+:$PYTHONPATH} exec "$PY" -m quantladder.llama_tools
