#!/usr/bin/env bash
# Build llama.cpp's own reference tools (llama-perplexity, llama-bench, llama-quantize) from the
# llama.cpp source that the installed llama-cpp-python vendors, so that both sides of a parity
# benchmark run the same llama.cpp. Output: build/llama-tools/bin/. Reuses a finished build.
#   usage: benchmarks/build_llama_tools.sh [extra cmake args, e.g. -DGGML_CUDA=on]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ver=$($PY -c "import llama_cpp; print(llama_cpp.__version__)")
out=build/llama-tools
if [ -x "$out/bin/llama-perplexity" ] && [ -x "$out/bin/llama-bench" ] && [ "$(cat $out/VERSION 2>/dev/null)" = "$ver" ]; then
  echo "$out/bin (llama-cpp-python $ver)"; exit 0
fi
mkdir -p build/sdist
if [ ! -f "build/sdist/llama_cpp_python-$ver.tar.gz" ]; then
  # pip prepares the sdist's metadata first (it installs the build backend): minutes, once
  $PY -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$ver" -d build/sdist
fi
rm -rf build/src && mkdir -p build/src
tar -xzf "build/sdist/llama_cpp_python-$ver.tar.gz" -C build/src
src=$(ls -d build/src/llama_cpp_python-*/vendor/llama.cpp)
cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF "$@" >/dev/null
cmake --build "$out" -j"$(nproc)" --target llama-perplexity llama-bench llama-quantize >/dev/null
echo "$ver" > "$out/VERSION"
echo "$out/bin (llama-cpp-python $ver)"
