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
