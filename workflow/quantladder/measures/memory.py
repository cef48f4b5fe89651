"""Memory at a point: file size, bits per weight, the engine's own buffer sizes, measured peak,
beside the prediction weights + KV cache(context) + compute buffers.

The prediction for the KV cache is 2 × layers × kv_heads × head_dim × bytes × context (from the
GGUF's metadata); llama.cpp's log reports what it actually allocated, which is read through
its log callback, and the process peak RSS (VRAM via NVML on a GPU) is what was really used.
"""

from __future__ import annotations

import ctypes
import re
import resource

from ..dataset import metric_row

_BUF = re.compile(r"(\w+)\s+compute buffer size\s*=\s*([\d.]+)\s*MiB")
_KV = re.compile(r"llama_kv_cache(?:_unified)?:\s+(\w+) KV buffer size\s*=\s*([\d.]+)\s*MiB")
_MODEL = re.compile(r"(\w+)(?:_Mapped)? model buffer size\s*=\s*([\d.]+)\s*MiB")
MIB = 1 << 20


class LlamaLog:
    """Collect llama.cpp's log lines while a context is created (buffer sizes are only logged)."""

    def __init__(self):
        import llama_cpp

        self.lc = llama_cpp
        self.lines: list[str] = []

        @llama_cpp.llama_log_callback
        def _cb(level, text, user_data):
            try:
                self.lines.append(text.decode(errors="replace"))
            except Exception:
                pass

        self._cb = _cb

    def __enter__(self):
        self.lc.llama_log_set(self._cb, ctypes.c_void_p(0))
        return self

    def __exit__(self, *exc):
        # hand the log back to llama-cpp-python's default handler
        from llama_cpp import _logger

        self.lc.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))

    def buffers(self) -> dict:
        text = "".join(self.lines)
        out = {"compute_bytes": 0, "kv_bytes": 0, "model_bytes": 0}
        for m in _BUF.finditer(text):
            out["compute_bytes"] += int(float(m.group(2)) * MIB)
        for m in _KV.finditer(text):
            out["kv_bytes"] += int(float(m.group(2)) * MIB)
        for m in _MODEL.finditer(text):
            out["model_bytes"] += int(float(m.group(2)) * MIB)
        return out


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def measure(model_path: str, info, *, n_ctx: int, kv: str = "f16", n_threads: int = 0, n_gpu_layers: int = 0,
            flash_attn: bool | None = None, n_batch: int = 512) -> dict:
    """Load the model at ``n_ctx``, run one full batch so every buffer is touched, read the peak."""
    import numpy as np

    from ..engine import RawContext, parse_kv

    type_k, type_v = parse_kv(kv)
    rss_before = peak_rss_bytes()
    with LlamaLog() as lg:
        with RawContext(model_path, n_ctx=n_ctx, n_batch=n_batch, kv=kv, n_threads=n_threads,
                        n_gpu_layers=n_gpu_layers, flash_attn=flash_attn) as ctx:
            n = min(n_batch, n_ctx)
            toks = np.random.default_rng(0).integers(0, ctx.n_vocab, size=n, dtype=np.int32)
            mask = np.zeros(n, dtype=np.int8)
            mask[-1] = 1
            ctx.decode(toks, np.arange(n, dtype=np.int32), np.zeros(n, dtype=np.int32), mask)
            ctx.synchronize()
            # touch every weight page: the mmapped file counts once it is read
            peak = peak_rss_bytes()
    buffers = lg.buffers()
    kv_pred = info.kv_bytes(n_ctx, type_k, type_v)
    return {
        "n_ctx": n_ctx, "file_bytes": info.file_bytes, "weights_bytes": info.tensor_bytes,
        "bits_per_weight": info.bits_per_weight, "n_params": info.n_params,
        "kv_bytes_predicted": kv_pred, "kv_bytes_allocated": buffers["kv_bytes"] or None,
        "compute_buffer_bytes": buffers["compute_bytes"] or None,
        "predicted_total_bytes": info.tensor_bytes + kv_pred + buffers["compute_bytes"],
        "peak_rss_bytes": peak, "rss_before_load_bytes": rss_before,
        "peak_rss_delta_bytes": peak - rss_before,
    }


def metric_rows(r: dict) -> list[dict]:
    n_ctx = r["n_ctx"]
    rows = [
        metric_row("file_bytes", r["file_bytes"], "bytes", higher_is_better=False),
        metric_row("weights_bytes", r["weights_bytes"], "bytes", higher_is_better=False),
        metric_row("bits_per_weight", r["bits_per_weight"], "bits", higher_is_better=False),
        metric_row("kv_bytes_predicted", r["kv_bytes_predicted"], "bytes", n_ctx=n_ctx, higher_is_better=False),
        metric_row("predicted_total_bytes", r["predicted_total_bytes"], "bytes", n_ctx=n_ctx, higher_is_better=False),
        metric_row("peak_rss_bytes", r["peak_rss_bytes"], "bytes", n_ctx=n_ctx, higher_is_better=False),
        metric_row("peak_rss_delta_bytes", r["peak_rss_delta_bytes"], "bytes", n_ctx=n_ctx, higher_is_better=False),
    ]
    if r.get("kv_bytes_allocated") is not None:
        rows.append(metric_row("kv_bytes_allocated", r["kv_bytes_allocated"], "bytes", n_ctx=n_ctx, higher_is_better=False))
    if r.get("compute_buffer_bytes") is not None:
        rows.append(metric_row("compute_buffer_bytes", r["compute_buffer_bytes"], "bytes", n_ctx=n_ctx, higher_is_better=False))
    return rows
