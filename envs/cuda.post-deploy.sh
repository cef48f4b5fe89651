#!/usr/bin/env bash
# Runs once inside the freshly created envs/cuda.yaml env (Snakemake post-deploy script):
# rebuilds llama-cpp-python 0.3.36 from source with the CUDA backend. The site sets the CUDA
# architectures of its cards (compute capability × 10, ';'-separated), e.g.
#   export QUANTLADDER_CUDA_ARCHITECTURES="80;90"    # A100 + H100/H200
# Without it the build targets "native": the card of the machine that builds (a GPU node).
# It does not carry the project's llama.cpp patches (quantladder/patches/llama.cpp): generation in
# the batch-invariant mode refuses this build and names `python -m quantladder.llama_tools library`.
set -euo pipefail
ARCHS=${QUANTLADDER_CUDA_ARCHITECTURES:-native}
# llama.cpp's AMX kernels stay out of the CPU side of this build too (quantladder/llama_tools.py,
# NO_AMX_FLAGS: they crash in llama_decode on AMX CPUs, ggml-org/llama.cpp#20824)
if [ "$(uname -m)" = "x86_64" ]; then
  export CFLAGS="${CFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  export CXXFLAGS="${CXXFLAGS:-} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${ARCHS}" \
  pip install --no-binary llama-cpp-python "llama-cpp-python==0.3.36" --force-reinstall --no-deps --no-cache-dir
python - <<'PY'
import llama_cpp
info = llama_cpp.llama_print_system_info().decode()
assert "CUDA" in info, f"llama-cpp-python was not built with CUDA: {info}"
assert "AMX_INT8 = 1" not in info, f"llama-cpp-python was built with AMX: {info}"
print("llama-cpp-python CUDA build:", info.split("|")[0])
PY
