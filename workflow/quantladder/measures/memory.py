"""Memory at a point: file size, bits per weight, the engine's own buffer sizes, measured peak,
beside the prediction weights + KV cache(context) + compute buffers.

The prediction for the KV cache is 2 × layers × kv_heads × head_dim × bytes × context (from the
GGUF's metadata: ``GGUFInfo.kv_bytes``, the one formula); llama.cpp's log reports what it actually
allocated, which is read through its log callback. What was really used is the card's probe, under
one metric, ``peak_mem_bytes``, whose subset names the probe: the process's peak RSS on a CPU
(``rss``), NVML's per-process VRAM on a GPU (``nvml_process``, or the card's used-memory rise,
``nvml_device_delta``: quantladder.measures.vram).
"""

from __future__ import annotations

import ctypes
import re
import resource
import sys

from ..metrics import TASK, Metric, row
from ..metrics import declare as declare_figures
from . import GPU, Measure, RuleCost, declare


# -- What the workflow reads of this measure (quantladder.measures.Measure) and its figures.
NAME = "memory"
MEASURE = declare(Measure(
    NAME, "file size, bits per weight, predicted weights + KV cache + buffers, and the measured peak",
    rules={NAME: RuleCost(GPU, runtime=(10, 0.5), guess_s=10)},
    anchor="memory is computed and measured, not scored: no anchor", cost=("memory", True), cost_rank=1))

declare_figures(
    Metric("file_bytes", "bytes", "size of the rung's GGUF file", (NAME,), higher_is_better=False),
    Metric("weights_bytes", "bytes", "tensor bytes of the GGUF (what is loaded)", (NAME,), higher_is_better=False,
           pareto_cost=3),
    Metric("bits_per_weight", "bits", "tensor bits / parameters of the GGUF", (NAME,), higher_is_better=False),
    Metric("kv_bytes_predicted", "bytes",
           "KV cache of one sequence at n_ctx from GGUF metadata: layers × n_ctx × kv_heads × (k_dim·bytes_k + "
           "v_dim·bytes_v)", (NAME, TASK), higher_is_better=False),
    Metric("kv_bytes_allocated", "bytes", "KV cache llama.cpp allocated at n_ctx (its log)", (NAME,),
           higher_is_better=False),
    Metric("compute_buffer_bytes", "bytes", "llama.cpp's compute buffers at n_ctx (its log)", (NAME,),
           higher_is_better=False),
    Metric("predicted_total_bytes", "bytes", "weights + KV cache + compute buffers at n_ctx", (NAME,),
           higher_is_better=False, pareto_cost=2),
    Metric("peak_mem_bytes", "bytes",
           "measured peak memory of the process at n_ctx, by the card's probe (subset): peak RSS on a CPU "
           "(rss), NVML's per-process VRAM on a GPU (nvml_process) or the card's used-memory rise "
           "(nvml_device_delta)", (NAME, TASK), higher_is_better=False, whole="only", headline_for=(NAME,),
           pareto_cost=1, clocked=True),
    Metric("peak_over_predicted", "1", "measured peak / predicted total", (NAME,), clocked=True),
    Metric("n_ctx_train", "tokens", "the context the model was trained for (GGUF metadata)", (NAME,),
           higher_is_better=True),
)


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


def vm_hwm_bytes(pid: int | str = "self") -> int | None:
    """The high-water mark of a process's resident set (Linux's VmHWM), or None where /proc does not say
    (another system, or a process that has exited)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_bytes() -> int:
    """Peak resident set size of this process's own memory.

    On Linux this is VmHWM, not getrusage's ru_maxrss: ru_maxrss survives exec, so a job started by a
    process larger than itself (Snakemake's scheduler, pytest) reports its parent's resident set at the
    fork until its own grows past it. VmHWM belongs to the address space the exec made. Elsewhere
    ru_maxrss (bytes on macOS, KiB on the BSDs)."""
    hwm = vm_hwm_bytes()
    if hwm is not None:
        return hwm
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def measure(model_path: str, info, *, n_ctx: int, kv: str = "f16", n_threads: int = 0, n_gpu_layers: int = 0,
            flash_attn: bool | None = None, n_batch: int = 512, gpu: bool | None = None, reader=None) -> dict:
    """Load the model at ``n_ctx``, run one full batch so every buffer is touched, read the peak
    with the card's probe (NVML on a GPU: ``gpu`` None asks whether layers are offloaded; ``reader``
    an NVML reader other than device 0's)."""
    import numpy as np

    from ..engine import RawContext
    from ..kv_policy import parse_kv
    from . import vram

    type_k, type_v = parse_kv(kv)
    rss_before = peak_rss_bytes()
    holder: dict = {}

    def work():
        with LlamaLog() as lg:
            with RawContext(model_path, n_ctx=n_ctx, n_batch=n_batch, kv=kv, n_threads=n_threads,
                            n_gpu_layers=n_gpu_layers, flash_attn=flash_attn) as ctx:
                n = min(n_batch, n_ctx)
                toks = np.random.default_rng(0).integers(0, ctx.n_vocab, size=n, dtype=np.int32)
                mask = np.zeros(n, dtype=np.int8)
                mask[-1] = 1
                ctx.decode(toks, np.arange(n, dtype=np.int32), np.zeros(n, dtype=np.int32), mask)
                ctx.synchronize()
                holder["rss"] = peak_rss_bytes()
        holder["buffers"] = lg.buffers()

    on_gpu = bool(n_gpu_layers) if gpu is None else gpu
    probe = {"method": "rss", "status": "ok", "status_reason": None}
    if on_gpu:
        res = vram.measure_memory(work, reader=reader)
        if res.get("status") == "ok":
            probe = {"method": res["method"], "status": "ok", "status_reason": res.get("status_reason"),
                     "peak": res["peak_mem_bytes"], "n_samples": res.get("n_samples")}
        else:  # no NVML on a GPU run: the figure is absent with the reason, never the RSS in its place
            probe = {"method": None, "status": "absent", "status_reason": res.get("status_reason"), "peak": None}
    else:
        work()
        probe["peak"] = holder["rss"]
    buffers = holder["buffers"]
    kv_pred = info.kv_bytes(n_ctx, type_k, type_v)
    return {
        "n_ctx": n_ctx, "file_bytes": info.file_bytes, "weights_bytes": info.tensor_bytes,
        "bits_per_weight": info.bits_per_weight, "n_params": info.n_params, "n_ctx_train": info.n_ctx_train,
        "kv_bytes_predicted": kv_pred, "kv_bytes_allocated": buffers["kv_bytes"] or None,
        "compute_buffer_bytes": buffers["compute_bytes"] or None,
        "predicted_total_bytes": info.tensor_bytes + kv_pred + buffers["compute_bytes"],
        "peak_mem_bytes": probe["peak"], "probe": probe, "peak_rss_bytes": holder.get("rss"),
        "rss_before_load_bytes": rss_before,
    }


def metric_rows(r: dict) -> list[dict]:
    n_ctx = r["n_ctx"]
    probe = r.get("probe") or {"method": "rss", "status": "ok"}
    rows = [
        row("file_bytes", r["file_bytes"]),
        row("weights_bytes", r["weights_bytes"]),
        row("bits_per_weight", r["bits_per_weight"]),
        row("kv_bytes_predicted", r["kv_bytes_predicted"], n_ctx=n_ctx),
        row("predicted_total_bytes", r["predicted_total_bytes"], n_ctx=n_ctx),
        row("peak_mem_bytes", r["peak_mem_bytes"], n_ctx=n_ctx, subset=probe.get("method"),
            status=None if probe.get("status") == "ok" else probe.get("status"),
            status_reason=probe.get("status_reason")),
    ]
    if r["peak_mem_bytes"] and r["predicted_total_bytes"]:
        rows.append(row("peak_over_predicted", r["peak_mem_bytes"] / r["predicted_total_bytes"], n_ctx=n_ctx))
    if r.get("n_ctx_train"):
        rows.append(row("n_ctx_train", r["n_ctx_train"]))
    if r.get("kv_bytes_allocated") is not None:
        rows.append(row("kv_bytes_allocated", r["kv_bytes_allocated"], n_ctx=n_ctx))
    if r.get("compute_buffer_bytes") is not None:
        rows.append(row("compute_buffer_bytes", r["compute_buffer_bytes"], n_ctx=n_ctx))
    return rows
