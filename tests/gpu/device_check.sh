#!/usr/bin/env bash
# quantladder GPU device check (issue 9). On a machine with an NVIDIA GPU, nvcc, cmake and ninja
# and no network:
#   1. builds llama.cpp's CUDA backend (libllama, llama-bench, llama-quantize, llama-batched-bench) from the trimmed
#      source that tests/gpu/prepare_carry.sh put in build/gpu-carry (carried, ≤ 64 MiB);
#   2. synthesises a 7B-class llama GGUF with random weights and the SmolLM2 tokenizer, quantizes
#      it (Q4_K_M), and runs generation, speed (pp/tg), memory and energy through quantladder's own
#      code, printing each figure beside llama-bench's tokens/s and nvidia-smi's memory, and the
#      memory-bandwidth roofline;
#   3. benchmarks/gen_throughput.py on that model: batched decode at 1/4/8/16 sequences beside
#      llama-batched-bench (issue 14's H200 figure: S_TG at 16 sequences beside llama-batched-bench's);
#   4. benchmarks/batch_invariance.py on that model: replies identical at 1 and 16 sequences, and
#      one decode step's logits bit for bit at 1..16 rows (issue 34).
# Budget: about 10 minutes including the build (one CUDA architecture; flash-attention kernels off
# unless QL_CUDA_FA=ON, the slowest part of the build).
#
#   bash tests/gpu/device_check.sh [extra device_check.py args, e.g. --rungs Q4_K_M,Q8_0 --size 1b]
# Environment: CUDA_ARCH (default: native, i.e. the card present; a site sets its list, "80;90"),
#   QL_GPU_CARRY (default build/gpu-carry), QL_WORK (default /tmp/ql-device), OUT (logs + JSON),
#   PY (default python3), QL_CUDA_FA (OFF).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CARRY=${QL_GPU_CARRY:-$ROOT/build/gpu-carry}
WORK=${QL_WORK:-/tmp/ql-device}
OUTDIR=${OUT:-$WORK/out}
PY=${PY:-python3}
ARCH=${CUDA_ARCH:-native}
FA=${QL_CUDA_FA:-OFF}
JOBS=$(nproc)
mkdir -p "$WORK" "$OUTDIR"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

for need in nvidia-smi nvcc cmake; do
  command -v "$need" >/dev/null || { echo "device check: $need not found: needs an NVIDIA GPU machine with CUDA" >&2; exit 2; }
done
[ -d "$CARRY/llama.cpp" ] || { echo "device check: $CARRY/llama.cpp missing: run tests/gpu/prepare_carry.sh here and carry build/gpu-carry" >&2; exit 2; }
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,power.limit,clocks.sm,clocks.mem --format=csv
nvcc --version | tail -1

stamp "python packages (gguf, diskcache) from carried wheels"
SITE=$WORK/site
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$CARRY"/wheels/*.whl
export PYTHONPATH=$SITE:$CARRY:$ROOT/workflow:$ROOT/tests/gpu${PYTHONPATH:+:$PYTHONPATH}

stamp "configure llama.cpp (CUDA, archs=$ARCH, FA kernels=$FA)"
BUILD=$WORK/build
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
# llama.cpp's AMX kernels stay out, as in every build of the project (quantladder/llama_tools.py
# NO_AMX_FLAGS; a GPU node's host CPU usually has AMX, and the engine refuses such a library)
NOAMX=""; [ "$(uname -m)" = x86_64 ] && NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$CARRY/llama.cpp" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$NOAMX" -DCMAKE_CXX_FLAGS="$NOAMX" \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGGML_CUDA_FA="$FA" -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >"$OUTDIR/cmake.log" 2>&1 \
  || { tail -40 "$OUTDIR/cmake.log"; exit 3; }
stamp "build (-j$JOBS)"
cmake --build "$BUILD" -j "$JOBS" --target llama llama-bench llama-quantize llama-batched-bench >"$OUTDIR/build.log" 2>&1 \
  || { tail -60 "$OUTDIR/build.log"; exit 3; }
BIN=$BUILD/bin
LIB=$(dirname "$(find "$BUILD" -name 'libllama.so' | head -1)")
export LLAMA_CPP_LIB_PATH=$LIB
export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
stamp "built: $(ls "$BIN" | tr '\n' ' ')"

FA_ARG=off; [ "$FA" = ON ] && FA_ARG=on
stamp "device_check.py"
PYTHONUNBUFFERED=1 "$PY" "$ROOT/tests/gpu/device_check.py" --work "$WORK/models" --llama-bin "$BIN" \
  --tokenizer "$CARRY/tokenizer.gguf" --fa "$FA_ARG" --json-out "$OUTDIR/device_check.json" "$@" \
  2>"$OUTDIR/device_check.stderr" | tee "$OUTDIR/device_check.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || tail -40 "$OUTDIR/device_check.stderr"

# batched decode (issue 14): the engine's aggregate tokens/s at 1/4/8/16 sequences beside
# llama-batched-bench's S_TG on the first quantized synthetic model, interleaved rounds
# (QL_GEN_THROUGHPUT=0 skips it; about 2 minutes on an H200 for a 7B)
QMODEL=$(ls "$WORK"/models/synth-*.gguf 2>/dev/null | grep -v -- '-F16.gguf' | head -1 || true)
if [ "$rc" = 0 ] && [ "${QL_GEN_THROUGHPUT:-1}" != 0 ] && [ -n "$QMODEL" ]; then
  stamp "gen_throughput.py on $(basename "$QMODEL")"
  PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/gen_throughput.py" --models "$QMODEL" --npl 1 4 8 16 \
    --npp 128 --ntg 64 --rounds 3 --gpu-layers 99 --flash-attn "$FA_ARG" --threads "$JOBS" \
    --tools-dir "$BIN" --json "$OUTDIR/gen_throughput.json" 2>"$OUTDIR/gen_throughput.stderr" \
    | tee "$OUTDIR/gen_throughput.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || tail -40 "$OUTDIR/gen_throughput.stderr"
fi
# batch invariance (issue 34): greedy replies of 16 random prompts at 1 and 16 sequences, and one
# decode step's logits bit for bit with 1..16 rows (QL_BATCH_CHECK=0 skips it; about a minute)
if [ "$rc" = 0 ] && [ "${QL_BATCH_CHECK:-1}" != 0 ] && [ -n "$QMODEL" ]; then
  stamp "batch_invariance.py on $(basename "$QMODEL")"
  PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/batch_invariance.py" identity --models "$QMODEL" --npl 1 16 \
    --prompts 16 --npp 128 --ntg 64 --gpu-layers 99 --knob flash_attn="$FA_ARG" --threads "$JOBS" \
    2>"$OUTDIR/batch_invariance.stderr" | tee "$OUTDIR/batch_invariance.log"
  PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/batch_invariance.py" kernel --models "$QMODEL" --rows 1 2 4 8 16 \
    --gpu-layers 99 --knob flash_attn="$FA_ARG" threads="$JOBS" --json "$OUTDIR/batch_invariance.json" \
    2>>"$OUTDIR/batch_invariance.stderr" | tee -a "$OUTDIR/batch_invariance.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || tail -40 "$OUTDIR/batch_invariance.stderr"
fi
stamp "done (rc=$rc)"
rm -f "$WORK"/models/*.gguf
exit "$rc"
