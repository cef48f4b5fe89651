#!/usr/bin/env bash
# Runs once inside the freshly created envs/quantladder.yaml env (Snakemake post-deploy script):
# rebuilds llama-cpp-python 0.3.36 from source with llama.cpp's AMX kernels left out, as `make setup`
# builds it (quantladder/llama_tools.py, NO_AMX_FLAGS: they crash in llama_decode on AMX CPUs,
# ggml-org/llama.cpp#20824). pip's wheel cache is bypassed: it is keyed by the sdist, not the flags.
# It does not carry the project's llama.cpp patches (quantladder/patches/llama.cpp): generation in
# the batch-invariant mode refuses this build and names `python -m quantladder.llama_tools library`.
set -euo pipefail
if [ "$(uname -m)" = "x86_64" ]; then
  export CFLAGS="${CFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  export CXXFLAGS="${CXXFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
pip install --no-binary llama-cpp-python "llama-cpp-python==0.3.36" --force-reinstall --no-deps --no-cache-dir
python - <<'PY'
import llama_cpp
info = llama_cpp.llama_print_system_info().decode()
assert "AMX_INT8 = 1" not in info, f"llama-cpp-python was built with AMX: {info}"
print("llama-cpp-python CPU build:", info)
PY
