"""The KV-cache and batch policy of the engine's context: which KV types, how many cells and
sequences, which batch sizes, whether flash attention is on.

Pure arithmetic on the config and the GGUF's metadata (no llama.cpp): the DAG reads it (KV types in
the manifest and the config checks), the resources and the generation policy size with it, and the
engine (:mod:`quantladder.engine`) makes its context from it, so the size predicted is the size
allocated (tests/test_engine.py checks it against what llama.cpp reports).
"""

from __future__ import annotations

from typing import Sequence

from .errors import ConfigError
from .gguf_meta import KV_GGML_TYPES, padded_ctx

# Sequences one context may hold (llama.cpp's LLAMA_MAX_SEQ).
MAX_PARALLEL = 256
# The n_parallel the automatic choice may pick, most first.
PARALLEL_CHOICES = (16, 8, 4, 2, 1)
# V-cache types llama.cpp runs without flash attention; a quantized V cache requires it.
UNQUANTIZED = ("f16", "f32", "bf16")
# llama.cpp's default micro-batch: the rows one graph run computes.
MAX_UBATCH = 512
# Batch-invariant generation: matrix products of fewer activation rows than this take ggml's
# per-row kernels (the project's llama.cpp patch; quantladder.llama_handle.check_batch_mode), so a
# batch-invariant engine decodes fewer sequences together than this.
BATCH_INVARIANT_ROWS = 64


def parse_kv(kv: str) -> tuple[str, str]:
    """'f16' -> (f16, f16); 'q8_0-q4_0' -> (q8_0, q4_0)."""
    parts = kv.split("-")
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or any(p not in KV_GGML_TYPES for p in parts):
        raise ConfigError(f"KV-cache type {kv!r}: use one of {sorted(KV_GGML_TYPES)} or 'K-V' (e.g. q8_0-q4_0)")
    return parts[0], parts[1]


def flash_attn_for(kv: str, flash_attn: bool | None) -> bool:
    """Flash attention as asked; None: on exactly when V is quantized (llama.cpp requires it then)."""
    _, v = parse_kv(kv)
    fa = flash_attn if flash_attn is not None else (v not in UNQUANTIZED)
    if v not in UNQUANTIZED and not fa:
        raise ConfigError(f"KV type {kv!r}: a quantized V cache requires flash attention")
    return fa


def check_sequences(n_parallel: int, n_ctx: int) -> None:
    if not 1 <= int(n_parallel) <= MAX_PARALLEL:
        raise ConfigError(f"n_parallel {n_parallel!r}: use 1 to {MAX_PARALLEL} sequences")
    if int(n_ctx) < 1:
        raise ConfigError(f"n_ctx {n_ctx!r}: a sequence needs a context of at least one token")


def batch_sizes(n_batch: int, n_ctx: int, n_parallel: int) -> tuple[int, int]:
    """(n_batch, n_ubatch) of the engine's context: no larger than one sequence's padded context
    (a prompt chunk never spans more), at least one row per sequence (a generation step decodes
    one token of each), and micro-batches of at most ``MAX_UBATCH`` rows."""
    nb = max(min(int(n_batch), padded_ctx(n_ctx)), int(n_parallel))
    return nb, min(nb, MAX_UBATCH)


def kv_cache_bytes(info, n_ctx: int, n_parallel: int = 1, kv: str = "f16") -> int:
    """The KV-cache bytes the engine's context allocates: ``n_parallel`` streams of
    ``padded_ctx(n_ctx)`` cells, each cell ``layers × kv_heads × (k_dim·bytes_k + v_dim·bytes_v)``
    (``info`` is a :class:`quantladder.gguf_meta.GGUFInfo`; the memory measure's formula).

    Exact for models whose layers all hold K and V of the same shape (llama.cpp's ``llama_kv_cache``
    with ``swa_full``, which the engine sets, so sliding-window layers hold full streams too);
    tests/test_engine.py checks it against the size llama.cpp reports when it allocates.
    """
    type_k, type_v = parse_kv(kv)
    return int(n_parallel) * info.kv_bytes(padded_ctx(n_ctx), type_k, type_v)


def default_n_parallel(info, n_ctx: int, budget_bytes: int, kv: str = "f16",
                       choices: Sequence[int] = PARALLEL_CHOICES) -> int:
    """The most sequences of ``choices`` whose KV cache (:func:`kv_cache_bytes`) fits ``budget_bytes``;
    1 when none does. It reads only the architecture (layers, KV heads, head sizes), the context and
    the budget, never the rung's weights, so every rung of a family gets the same value."""
    for n in sorted(choices, reverse=True):
        if n >= 1 and kv_cache_bytes(info, n_ctx, n, kv) <= budget_bytes:
            return int(n)
    return 1


def check_batch_invariant(n_parallel: int, flash_attn: bool, n_gpu_layers: int, kv: str = "f16") -> None:
    """What batch-invariant generation needs, refused with the reason where a setting breaks it."""
    where = "generation.batch_invariant"
    if n_gpu_layers:
        raise ConfigError(f"{where}: a CPU mode (the project's patch covers ggml's CPU kernels; a GPU's choose by "
                          f"batch size too): gpu_layers must be 0, got {n_gpu_layers}")
    if flash_attn:
        raise ConfigError(f"{where}: needs flash attention off (its CPU kernel chooses by the rows of a step), "
                          f"so an f16 V cache (llama.cpp needs flash attention for a quantized one); KV {kv!r}")
    if n_parallel >= BATCH_INVARIANT_ROWS:
        raise ConfigError(f"{where}: at most {BATCH_INVARIANT_ROWS - 1} sequences decoded together "
                          f"(products of fewer than {BATCH_INVARIANT_ROWS} rows are the invariant ones), got {n_parallel}")
