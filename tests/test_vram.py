"""Peak process memory on the card from sampled NVML readings.

NVML readings are faked (``nvml_fakes.TraceReader``) because no GPU is attached here: the only
place a fake is acceptable (issue 9). The no-NVML test uses this machine's real NVML state.
"""

from __future__ import annotations

import time

import pytest

from quantladder.gguf_meta import read_info
from quantladder.measures import energy, memory, vram
from quantladder.measures.energy import Sample

from nvml_fakes import TraceReader

GiB = 2**30


def test_peak_prefers_the_per_process_figure():
    s = [Sample(i * 0.1, 100.0, None, m, 5 * GiB + m) for i, m in enumerate([0, GiB, 3 * GiB, 2 * GiB])]
    r = vram.peak_from_samples(s, interval_s=0.1)
    assert r["method"] == "nvml_process" and r["peak_mem_bytes"] == 3 * GiB
    assert r["peak_dev_used_bytes"] == 8 * GiB and r["n_samples"] == 4


def test_peak_falls_back_to_the_device_rise_over_its_baseline():
    s = [Sample(i * 0.1, 100.0, None, None, d) for i, d in enumerate([5 * GiB, 6 * GiB, 9 * GiB, 7 * GiB, None])]
    r = vram.peak_from_samples(s)
    assert r["method"] == "nvml_device_delta" and r["peak_mem_bytes"] == 4 * GiB
    assert r["n_missing"] == 1 and "other processes" in r["status_reason"]
    r2 = vram.peak_from_samples(s, baseline_dev_used_bytes=4 * GiB)
    assert r2["peak_mem_bytes"] == 5 * GiB


def test_no_memory_readings_is_absent():
    r = vram.peak_from_samples([Sample(0.0, 100.0, None), Sample(0.1, 100.0, None)])
    assert r["status"] == "absent" and r["peak_mem_bytes"] is None


@pytest.mark.parametrize("visible", [True, False])
def test_measure_memory_catches_a_transient_peak(visible):
    rd = TraceReader(proc_visible=visible, other_mem=2 * GiB)

    def load_and_run():
        rd.proc_mem = GiB  # weights
        time.sleep(0.1)
        rd.proc_mem = 3 * GiB  # compute buffers at their largest
        time.sleep(0.1)
        rd.proc_mem = 2 * GiB
        time.sleep(0.05)
        return "done"

    r = vram.measure_memory(load_and_run, reader=rd, interval_s=0.01)
    assert r["value"] == "done" and r["peak_mem_bytes"] == 3 * GiB
    assert r["method"] == ("nvml_process" if visible else "nvml_device_delta")


def test_memory_without_nvml_is_absent_with_a_reason(smollm_q8):
    """A GPU point's memory on a machine without NVML: the real measure runs the model, and its
    peak_mem_bytes row is absent with the reason (never the RSS in its place, never zero)."""
    reader, _ = energy.nvml_reader()
    if reader is not None:
        reader.close()
        pytest.skip("this machine has a working NVML")
    r = vram.measure_memory(lambda: 42)
    assert r["value"] == 42 and r["status"] == "absent" and "NVML" in r["status_reason"]
    res = memory.measure(str(smollm_q8), read_info(smollm_q8), n_ctx=256, n_batch=64, gpu=True)
    rows = {x["metric"]: x for x in memory.metric_rows(res)}
    peak = rows["peak_mem_bytes"]
    assert peak["value"] is None and peak["status"] == "absent" and "NVML" in peak["status_reason"]
    assert peak["unit"] == "bytes" and "peak_over_predicted" not in rows
    assert rows["kv_bytes_predicted"]["value"] > 0 and res["peak_rss_bytes"] > 0  # the run itself happened


def test_rows_put_the_prediction_beside_the_measurement(smollm_q8):
    info = read_info(smollm_q8)
    kv = info.kv_bytes(4096)
    total = info.tensor_bytes + kv + 64 * 2**20
    res = {"n_ctx": 4096, "file_bytes": info.file_bytes, "weights_bytes": info.tensor_bytes,
           "bits_per_weight": info.bits_per_weight, "n_ctx_train": info.n_ctx_train, "kv_bytes_predicted": kv,
           "kv_bytes_allocated": kv, "compute_buffer_bytes": 64 * 2**20, "predicted_total_bytes": total,
           "peak_mem_bytes": int(total * 1.1),
           "probe": {"method": "nvml_process", "status": "ok", "status_reason": None, "n_samples": 50}}
    rows = {r["metric"]: r for r in memory.metric_rows(res)}
    assert rows["predicted_total_bytes"]["value"] == pytest.approx(total)
    assert rows["peak_over_predicted"]["value"] == pytest.approx(1.1, rel=1e-6)
    assert rows["peak_mem_bytes"]["subset"] == "nvml_process" and rows["peak_mem_bytes"]["n_ctx"] == 4096
    assert rows["n_ctx_train"]["value"] == info.n_ctx_train
    assert all(r["unit"] in ("bytes", "1", "bits", "tokens") for r in rows.values()), {r["unit"] for r in rows.values()}


def test_a_jobs_peak_rss_is_its_own_not_its_parents(repo_root):
    """A measuring job is a child of Snakemake's scheduler (or of pytest), often larger than the job: its
    peak must be its own address space's. getrusage's ru_maxrss survives fork and exec and would report
    the parent's resident set; peak_rss_bytes must not."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/proc/self/status"):
        pytest.skip("VmHWM is Linux's; elsewhere ru_maxrss is the only reading")
    big = bytearray(768 << 20)
    big[::4096] = b"\1" * len(range(0, len(big), 4096))  # resident, not only reserved
    child = ("import resource, sys; from quantladder.measures.memory import peak_rss_bytes; "
             "print(peak_rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(repo_root / "workflow")}).stdout.split()
    own, inherited = int(out[0]), int(out[1])
    assert inherited >= len(big)  # the trap is real on this kernel
    assert own < 256 << 20, own  # the child's own interpreter and imports
    assert memory.peak_rss_bytes() >= len(big)  # and our own peak still counts what we touched
