"""Peak memory of this process on the card during a phase: the GPU probe of the memory measure.

Read by the same sampler thread as power (``energy.PowerSampler``): NVML's per-process figure
(``nvmlDeviceGetComputeRunningProcesses`` → usedGpuMemory) where NVML lists this process, else the
rise of the card's used memory over its value before the phase (``nvmlDeviceGetMemoryInfo``), which
also counts anything else that allocated on the card meanwhile: the method is recorded with it.
Without NVML the figure is absent with a reason, never zero.
"""

from __future__ import annotations

from typing import Callable, Sequence

from . import energy


def peak_from_samples(samples: Sequence, *, baseline_dev_used_bytes: int | None = None,
                      interval_s: float | None = None) -> dict:
    """Peak process memory from a sampled trace (pure).

    ``baseline_dev_used_bytes``: the card's used memory before the model was loaded (for the
    device-delta method); default the first sample's.
    """
    proc = [s.proc_mem_bytes for s in samples if s.proc_mem_bytes is not None]
    dev = [s.dev_mem_used_bytes for s in samples if s.dev_mem_used_bytes is not None]
    n = len(samples)
    if proc:
        return {"status": "ok", "status_reason": None, "method": "nvml_process",
                "peak_mem_bytes": max(proc), "n_samples": len(proc), "n_missing": n - len(proc),
                "interval_s": interval_s,
                "peak_dev_used_bytes": max(dev) if dev else None}
    if dev:
        base = baseline_dev_used_bytes
        if base is None:
            first = next(s for s in samples if s.dev_mem_used_bytes is not None)
            base = first.dev_mem_used_bytes
        return {"status": "ok", "status_reason": "NVML does not list this process: card used-memory rise instead "
                "(counts other processes' allocations too)", "method": "nvml_device_delta",
                "peak_mem_bytes": max(0, max(dev) - base), "baseline_dev_used_bytes": base,
                "n_samples": len(dev), "n_missing": n - len(dev), "interval_s": interval_s,
                "peak_dev_used_bytes": max(dev)}
    return {"status": "absent", "status_reason": "no NVML memory readings in the trace", "method": None,
            "peak_mem_bytes": None, "n_samples": 0, "n_missing": n, "interval_s": interval_s}


def measure_memory(fn: Callable[[], object], *, reader=None, device_index: int = 0,
                   interval_s: float = 0.05) -> dict:
    """Run ``fn()`` (load the model and run the point's context) under the sampler; its peak
    memory on the card. Start before the model loads, so the device baseline is the empty card.
    Without NVML ``fn`` still runs and the result is absent with the reason. ``interval_s``: the memory
    probe's own sampling interval, which no config key sets (``measures.energy.interval_s`` is the
    energy sampler's, read by its rule from the validated config)."""
    own = False
    reason = None
    if reader is None:
        reader, reason = energy.nvml_reader(device_index)
        own = reader is not None
    if reader is None:
        value = fn()
        return {"status": "absent", "status_reason": reason.replace("power readings", "memory readings"),
                "method": None, "peak_mem_bytes": None, "n_samples": 0, "interval_s": None, "value": value}
    try:
        base = reader.dev_mem_used_bytes()
        sampler = energy.PowerSampler(reader, interval_s=interval_s, memory=True)
        with sampler:
            value = fn()
        res = peak_from_samples(sampler.samples, baseline_dev_used_bytes=base, interval_s=interval_s)
        res["value"] = value
        res["card_uuid"] = getattr(reader, "uuid", None)
        return res
    finally:
        if own:
            reader.close()
