#!/usr/bin/env bash
# quantladder GPU device check (issue 9). On a machine with an NVIDIA GPU, nvcc, cmake and ninja
# and no network:
#   1. builds llama.cpp's CUDA backend (libllama, llama-bench, llama-quantize, llama-batched-bench,
#      llama-server) from the trimmed source that tests/gpu/prepare_carry.sh put in build/gpu-carry
#      (carried, ≤ 64 MiB);
#   2. synthesises a 7B-class llama GGUF with random weights and the SmolLM2 tokenizer, quantizes
#      it (Q4_K_M), and runs generation, speed (pp/tg), memory and energy through quantladder's own
#      code, printing each figure beside llama-bench's tokens/s and nvidia-smi's memory, and the
#      memory-bandwidth roofline;
#   3. benchmarks/gen_throughput.py on that model (issue 46): batched decode at 1/32/128 sequences
#      beside llama-batched-bench, llama-server -np B at 32 and 128 (B concurrent requests on
#      loopback), and the engine's greedy selection on the host against llama.cpp's backend sampler
#      (the B × vocab logits copy it saves), interleaved rounds;
#   4. benchmarks/batch_invariance.py on that model: the noise floor, greedy replies at 1 against
#      32 sequences, and one decode step's logits bit for bit at 1..32 rows (issues 34, 46).
# Budget: about 10 minutes including the build (one CUDA architecture; flash-attention kernels off
# unless QL_CUDA_FA=ON, the slowest part of the build). Not yet run on a device.
#
#   bash tests/gpu/device_check.sh [--dry] [extra device_check.py args, e.g. --rungs Q4_K_M,Q8_0 --size 1b]
# --dry (or QL_DRY=1): on a CPU host, every step that does not need CUDA, at tiny sizes, so the
#   script is known to run before the one run a lent device allows: no nvidia-smi, nvcc or CUDA
#   build (the project's CPU library and its llama.cpp tools instead: quantladder.llama_tools,
#   built once and cached), no GPU layers; the carried tree, where build/gpu-carry holds one, is
#   configured (not built) for the CPU with the device run's targets. Each skipped step is named.
#   tests/test_device_check_dry.py runs it.
# Environment: CUDA_ARCH (default: native, i.e. the card present; a site sets its list, "80;90"),
#   QL_GPU_CARRY (default build/gpu-carry), QL_WORK (default /tmp/ql-device), OUT (logs + JSON),
#   PY (default python3; dry: .venv/bin/python where it exists), QL_CUDA_FA (OFF), QL_GEN_NPL
#   ("1 32 128"), QL_SERVER_NPL ("32 128"), QL_NOISE_NPL ("1 32"), QL_ROUNDS (2).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DRY=${QL_DRY:-0}
if [ "${1:-}" = --dry ]; then DRY=1; shift; fi
CARRY=${QL_GPU_CARRY:-$ROOT/build/gpu-carry}
WORK=${QL_WORK:-/tmp/ql-device}
OUTDIR=${OUT:-$WORK/out}
PYDEF=python3; [ "$DRY" = 1 ] && [ -x "$ROOT/.venv/bin/python" ] && PYDEF=$ROOT/.venv/bin/python
PY=${PY:-$PYDEF}
ARCH=${CUDA_ARCH:-native}
FA=${QL_CUDA_FA:-OFF}
JOBS=$(nproc)
mkdir -p "$WORK" "$OUTDIR"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
skip() { echo "[$(( $(date +%s) - T0 )) s] SKIPPED (dry run, needs CUDA): $*"; }

# the sizes: a device run's, or a dry run's tiny ones (seconds each on 2 CPU cores)
if [ "$DRY" = 1 ]; then
  GEN_NPL=${QL_GEN_NPL:-"1 4"}; SERVER_NPL=${QL_SERVER_NPL:-"4"}; NOISE_NPL=${QL_NOISE_NPL:-"1 4"}
  ROUNDS=${QL_ROUNDS:-1}; NPP=16; NTG=8; NGL=0; KROWS="1 2 4"
  CHECK_ARGS=(--size tiny --n-prompt 32 --n-gen 8 --reps 1 --gen-tokens 8 --n-gpu-layers 0 --idle-window 0.5)
else
  GEN_NPL=${QL_GEN_NPL:-"1 32 128"}; SERVER_NPL=${QL_SERVER_NPL:-"32 128"}; NOISE_NPL=${QL_NOISE_NPL:-"1 32"}
  ROUNDS=${QL_ROUNDS:-2}; NPP=128; NTG=64; NGL=99; KROWS="1 2 4 8 16 32"
  CHECK_ARGS=()
fi
NOISE_MAX=$(echo $NOISE_NPL | tr ' ' '\n' | sort -n | tail -1)

if [ "$DRY" = 1 ]; then
  echo "== device check, DRY RUN on a CPU host ($(nproc) cores): tiny sizes, no GPU layers"
  skip "nvidia-smi, nvcc, the CUDA build of llama.cpp (the project's CPU library and tools instead), NVML power, energy and the card's copy bandwidth"
  command -v cmake >/dev/null || { echo "device check: cmake not found" >&2; exit 2; }
  if [ -d "$CARRY/llama.cpp" ]; then
    stamp "configure the carried llama.cpp for the CPU with the device run's targets (not built)"
    cmake -S "$CARRY/llama.cpp" -B "$WORK/carry-configure" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF \
      -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >"$OUTDIR/cmake.log" 2>&1 || { tail -40 "$OUTDIR/cmake.log"; exit 3; }
    cmake --build "$WORK/carry-configure" --target help >"$OUTDIR/targets.txt" 2>&1 || true
    for t in llama llama-bench llama-quantize llama-batched-bench llama-server; do
      grep -Eq "(^|[ .:])$t(:|$| )" "$OUTDIR/targets.txt" \
        || { echo "device check: the carried tree has no target $t (tests/gpu/prepare_carry.sh)" >&2; exit 3; }
    done
    rm -rf "$WORK/carry-configure"
  else
    echo "   (no $CARRY/llama.cpp here: tests/gpu/prepare_carry.sh makes it; its configure check skipped)"
  fi
  stamp "llama.cpp tools (quantladder.llama_tools: the workflow's four, llama-batched-bench, llama-server)"
  BIN=$WORK/bin
  mkdir -p "$BIN"
  PYTHONPATH=$ROOT/workflow "$PY" - "$BIN" <<'PYEOF'
import os, sys
from pathlib import Path
from quantladder import llama_tools as lt
out = Path(sys.argv[1])
paths = {n: lt.tool(lt.ensure(), n) for n in ("llama-bench", "llama-quantize")}
paths.update({n: str(lt.extra_tool(n)) for n in ("llama-batched-bench", "llama-server")})
for n, p in paths.items():
    (out / n).unlink(missing_ok=True)
    (out / n).symlink_to(p)
print(" ".join(sorted(paths)))
PYEOF
  export PYTHONPATH=$ROOT/workflow:$ROOT/tests/gpu${PYTHONPATH:+:$PYTHONPATH}
  TOKENIZER=()
  FA_ARG=off
else
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
# llama-server: its web UI stays out (no npm, no download of prebuilt assets: no network here)
cmake -S "$CARRY/llama.cpp" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$NOAMX" -DCMAKE_CXX_FLAGS="$NOAMX" \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGGML_CUDA_FA="$FA" -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >"$OUTDIR/cmake.log" 2>&1 \
  || { tail -40 "$OUTDIR/cmake.log"; exit 3; }
stamp "build (-j$JOBS)"
cmake --build "$BUILD" -j "$JOBS" --target llama llama-bench llama-quantize llama-batched-bench llama-server \
  >"$OUTDIR/build.log" 2>&1 || { tail -60 "$OUTDIR/build.log"; exit 3; }
BIN=$BUILD/bin
LIB=$(dirname "$(find "$BUILD" -name 'libllama.so' | head -1)")
export LLAMA_CPP_LIB_PATH=$LIB
export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
stamp "built: $(ls "$BIN" | tr '\n' ' ')"

FA_ARG=off; [ "$FA" = ON ] && FA_ARG=on
TOKENIZER=(--tokenizer "$CARRY/tokenizer.gguf")
fi

stamp "device_check.py"
PYTHONUNBUFFERED=1 "$PY" "$ROOT/tests/gpu/device_check.py" --work "$WORK/models" --llama-bin "$BIN" \
  "${TOKENIZER[@]}" --fa "$FA_ARG" --json-out "$OUTDIR/device_check.json" "${CHECK_ARGS[@]}" "$@" \
  2>"$OUTDIR/device_check.stderr" | tee "$OUTDIR/device_check.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || tail -40 "$OUTDIR/device_check.stderr"

# batched decode (issues 14, 46): the engine's aggregate tokens/s at $GEN_NPL sequences beside
# llama-batched-bench's S_TG, llama-server -np B at $SERVER_NPL (B concurrent requests on loopback),
# and the engine with llama.cpp's backend sampler selecting (no B × vocab logits copy) beside its
# host selection, on the first quantized synthetic model, interleaved rounds; every sequence runs
# its whole budget (QL_GEN_THROUGHPUT=0 skips it; about 4 minutes on an H100 for a 7B, estimated)
QMODEL=$(ls "$WORK"/models/synth-*.gguf 2>/dev/null | grep -v -- '-F16.gguf' | head -1 || true)
if [ "$rc" = 0 ] && [ "${QL_GEN_THROUGHPUT:-1}" != 0 ] && [ -n "$QMODEL" ]; then
  stamp "gen_throughput.py on $(basename "$QMODEL"): B = $GEN_NPL, llama-server at $SERVER_NPL"
  # shellcheck disable=SC2086  # the lists split into arguments
  PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/gen_throughput.py" --models "$QMODEL" --npl $GEN_NPL \
    --server-npl $SERVER_NPL --selection host --both-selections \
    --npp "$NPP" --ntg "$NTG" --rounds "$ROUNDS" --gpu-layers "$NGL" --flash-attn "$FA_ARG" --threads "$JOBS" \
    --tools-dir "$BIN" --json "$OUTDIR/gen_throughput.json" 2>"$OUTDIR/gen_throughput.stderr" \
    | tee "$OUTDIR/gen_throughput.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || tail -40 "$OUTDIR/gen_throughput.stderr"
fi
# the noise floor (issues 34, 46): greedy replies of random prompts at $NOISE_NPL sequences (the
# first is the base), and one decode step's logits bit for bit with $KROWS rows
# (QL_BATCH_CHECK=0 skips it; about a minute)
if [ "$rc" = 0 ] && [ "${QL_BATCH_CHECK:-1}" != 0 ] && [ -n "$QMODEL" ]; then
  stamp "batch_invariance.py on $(basename "$QMODEL"): replies at $NOISE_NPL sequences"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/batch_invariance.py" identity --models "$QMODEL" --npl $NOISE_NPL \
    --prompts "$NOISE_MAX" --npp "$NPP" --ntg "$NTG" --gpu-layers "$NGL" --knob flash_attn="$FA_ARG" \
    --threads "$JOBS" 2>"$OUTDIR/batch_invariance.stderr" | tee "$OUTDIR/batch_invariance.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 0 ]; then
    # shellcheck disable=SC2086
    PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/batch_invariance.py" kernel --models "$QMODEL" --rows $KROWS \
      --gpu-layers "$NGL" --knob flash_attn="$FA_ARG" threads="$JOBS" --json "$OUTDIR/batch_invariance.json" \
      2>>"$OUTDIR/batch_invariance.stderr" | tee -a "$OUTDIR/batch_invariance.log"
    rc=${PIPESTATUS[0]}
  fi
  [ "$rc" = 0 ] || tail -40 "$OUTDIR/batch_invariance.stderr"
fi
stamp "done (rc=$rc)"
rm -f "$WORK"/models/*.gguf
exit "$rc"
