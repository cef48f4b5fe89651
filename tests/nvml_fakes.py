"""Fake NVML readings for the energy and VRAM tests: the only place a fake is acceptable (issue 9),
because no GPU is attached to the machines the suite runs on. Only the readings are fake; the
sampler thread, the arithmetic and the caches that consume them are the real code."""

from __future__ import annotations

import threading
import time

from quantladder.measures.energy import Sample


class TraceReader:
    """Fake NVML readings (the only place a fake is acceptable): power follows ``busy`` (idle or
    busy watts) and the energy counter is its exact integral since construction."""

    uuid = "GPU-fake-0000"

    def __init__(self, idle_w=55.0, busy_w=255.0, counter=True, start_mj=2**64 - 100_000, util_busy=95.0,
                 proc_visible=True, other_mem=10**9):
        self.idle_w, self.busy_w = idle_w, busy_w
        self.counter, self.start_mj, self.util_busy = counter, start_mj, util_busy
        self.lock = threading.Lock()
        self.t_last = time.perf_counter()
        self.e_mj = 0.0  # float from 0; the int start is added on reading (2**64 is beyond float's mJ)
        self.busy = False
        self.proc_mem = 0
        self.proc_visible = proc_visible  # False: NVML does not list our PID (a container)
        self.other_mem = other_mem  # memory others hold on the card

    def _advance(self):
        now = time.perf_counter()
        self.e_mj += 1000.0 * (self.busy_w if self.busy else self.idle_w) * (now - self.t_last)
        self.t_last = now
        return now

    def set_busy(self, busy: bool):
        with self.lock:
            self._advance()
            self.busy = busy

    def read(self, memory=True):
        with self.lock:
            now = self._advance()
            w = self.busy_w if self.busy else self.idle_w
            e = (self.start_mj + int(self.e_mj)) % 2**64 if self.counter else None
            proc = self.proc_mem if (memory and self.proc_visible) else None
            return Sample(now, w, e, proc, (self.other_mem + self.proc_mem) if memory else None,
                          self.util_busy if self.busy else 0.0)

    def dev_mem_used_bytes(self):
        return self.other_mem + self.proc_mem

    def close(self):
        pass


def fake_pynvml(*, power_mw=123_000, energy_mj=5_000, energy_supported=True, procs=(), used=7 * 2**30,
                n_devices=2, init_error=None):
    """A stand-in for the pynvml module (fake NVML readings, the only place a fake is acceptable)
    with the calls NvmlReader makes, so its handling of them runs without a GPU."""
    import types

    class NVMLError(Exception):
        pass

    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.calls = []

    def init():
        if init_error:
            raise NVMLError(init_error)
    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: n_devices
    m.nvmlDeviceGetHandleByIndex = lambda i: m.calls.append(("index", i)) or ("h", i)
    m.nvmlDeviceGetHandleByUUID = lambda u: m.calls.append(("uuid", u)) or ("h", u)
    m.nvmlDeviceGetUUID = lambda h: b"GPU-" + str(h[1]).encode()
    m.nvmlDeviceGetName = lambda h: b"Fake H200"
    m.nvmlDeviceGetPowerUsage = lambda h: power_mw

    def energy(h):
        if not energy_supported:
            raise NVMLError("Not Supported")
        return energy_mj
    m.nvmlDeviceGetTotalEnergyConsumption = energy
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=p, usedGpuMemory=u) for p, u in procs]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=used, total=141 * 2**30)
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=3, memory=1)
    return m
