"""Energy of a measured phase on an NVIDIA card, net of the node's idle power.

The seeds' protocol: measure each node's power at idle and subtract it from the power drawn
during generation. So a result has three parts:

- an idle baseline: power sampled with the card idle for a window before work, cached per node and
  job (JSON: timestamp, node, job, card UUID, mean ± sd W, samples, interval) and reused while young;
- the phase's total energy: from NVML's cumulative energy counter (mJ) where the card has one,
  unwrapped across counter wraps and resets; else trapezoid-integrated power samples, with missing
  samples bridged and counted;
- net energy = total − idle power × duration, per generated token and per prompt token, with the
  sampling interval and a standard error that propagates the idle baseline's error and the sampling
  error of the total.

Without NVML (CPU runs, no driver) nothing is measured: results are *absent with a reason*, never
zero. The arithmetic is pure functions of (time, value) traces so that it is testable on traces
whose energy is known analytically; ``PowerSampler`` is the one thing that talks to NVML.
``measure_bench_workload`` is the energy rule's run: llama-bench's workload (speed.py) under it.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from ..engine import RawContext
from ..io import read_json, write_json
from ..metrics import Metric
from ..metrics import declare as declare_figures
from ..metrics import row as metric_row
from . import GPU, Measure, RuleCost, declare
from .speed import bench_gen, bench_prompt


# -- What the workflow reads of this measure (quantladder.measures.Measure) and its figures.
NAME = "energy"
MEASURE = declare(Measure(
    NAME, "energy per generated and prompt token on an NVIDIA card, net of the node's idle power",
    # llama-bench's workload under the power sampler: a speed job's cost
    rules={NAME: RuleCost(GPU, runtime=(15, 1), guess_s=30)},
    anchor="energy is measured, not scored: no anchor", cost=("energy per token", True), cost_rank=3,
    alone=True))

declare_figures(
    Metric("joules_per_generated_token", "J/token",
           "energy per generated token: NVML power minus the node's idle power, integrated over generation "
           "(subset incl_prompt where prompt and generation could not be told apart)", (NAME,),
           higher_is_better=False, stderr="se", whole="only", headline_for=(NAME,), pareto_cost=1, clocked=True),
    Metric("joules_per_prompt_token", "J/token", "energy per prompt token, net of idle power", (NAME,),
           higher_is_better=False, stderr="se", clocked=True),
    Metric("net_energy_j", "J", "energy of the measured work net of idle power", (NAME,), higher_is_better=False,
           stderr="se", clocked=True),
    Metric("total_energy_j", "J", "energy of the measured work including idle power (subset: counter or "
           "integrated power)", (NAME,), higher_is_better=False, stderr="se", whole="only", clocked=True),
    Metric("mean_power_w", "W", "mean card power during the measured work", (NAME,), clocked=True),
    Metric("idle_power_w", "W", "the node's idle card power (baseline)", (NAME,), stderr="se", clocked=True),
    Metric("duration_s", "s", "duration of the measured work", (NAME,), clocked=True),
    Metric("sampling_interval_s", "s", "power sampling interval", (NAME,), clocked=True),
    Metric("sample_gaps", "1", "power samples missed (gaps longer than twice the interval)", (NAME,),
           higher_is_better=False, clocked=True),
)


NVML_COUNTER_MODULUS = 2**64  # nvmlDeviceGetTotalEnergyConsumption is an unsigned long long (mJ)
DEFAULT_IDLE_WINDOW_S = 10.0
DEFAULT_IDLE_MAX_AGE_S = 3600.0
IDLE_UTIL_MAX_PCT = 5.0  # above this the "idle" window saw work: the baseline is flagged
GAP_FACTOR = 2.5  # consecutive valid samples further apart than this × interval form a gap


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here; the message is the reason recorded with absent figures."""


class Sample(NamedTuple):
    """One sampler reading. The first three fields are the (t, W, energy_mJ|None) triple; any
    field NVML could not read at that instant is None (a missing sample, bridged later)."""

    t: float  # time.perf_counter() seconds
    power_w: float | None
    energy_mj: int | None
    proc_mem_bytes: int | None = None  # this process's memory on the card (NVML per-process)
    dev_mem_used_bytes: int | None = None  # the whole card's used memory
    util_pct: float | None = None  # GPU utilization


# ---------------------------------------------------------------------------------------------
# NVML access
# ---------------------------------------------------------------------------------------------
def _visible_device(pynvml, index: int):
    """The handle of the index-th visible GPU, honouring CUDA_VISIBLE_DEVICES (indices or UUIDs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible not in (None, ""):
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if not entries or entries[0] in ("-1", "NoDevFiles"):
            raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU")
        if index >= len(entries):
            raise NvmlUnavailable(f"GPU {index} is not among CUDA_VISIBLE_DEVICES={visible!r}")
        e = entries[index]
        if e.isdigit():
            return pynvml.nvmlDeviceGetHandleByIndex(int(e))
        return pynvml.nvmlDeviceGetHandleByUUID(e)
    if index >= pynvml.nvmlDeviceGetCount():
        raise NvmlUnavailable(f"no GPU {index}: NVML sees {pynvml.nvmlDeviceGetCount()}")
    return pynvml.nvmlDeviceGetHandleByIndex(index)


class NvmlReader:
    """Readings of one card through pynvml. Each read returns None for a field it cannot get."""

    def __init__(self, device_index: int = 0, pid: int | None = None):
        try:
            import pynvml
        except ImportError as e:
            raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed") from e
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded on CPU-only hosts
            raise NvmlUnavailable(f"NVML could not initialise: {e}") from e
        self.nv = pynvml
        self.pid = pid or os.getpid()
        try:
            self.handle = _visible_device(pynvml, device_index)
            self.uuid = _s(pynvml.nvmlDeviceGetUUID(self.handle))
            self.name = _s(pynvml.nvmlDeviceGetName(self.handle))
        except NvmlUnavailable:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise NvmlUnavailable(f"NVML sees no usable GPU {device_index}: {e}") from e
        self.has_energy_counter = self._try(lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) is not None
        self.has_power = self._try(lambda: pynvml.nvmlDeviceGetPowerUsage(self.handle)) is not None
        if not self.has_power and not self.has_energy_counter:
            self.close()
            raise NvmlUnavailable(f"{self.name}: NVML reports neither power nor an energy counter")

    @staticmethod
    def _try(fn):
        try:
            return fn()
        except Exception:
            return None

    def power_w(self) -> float | None:
        mw = self._try(lambda: self.nv.nvmlDeviceGetPowerUsage(self.handle))
        return None if mw is None else mw / 1000.0

    def energy_mj(self) -> int | None:
        if not self.has_energy_counter:
            return None
        v = self._try(lambda: self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        return None if v is None else int(v)

    def process_mem_bytes(self) -> int | None:
        """This process's memory on the card, or None when NVML does not list it (WDDM, a container
        whose PID namespace hides host PIDs)."""
        procs = self._try(lambda: self.nv.nvmlDeviceGetComputeRunningProcesses(self.handle))
        if not procs:
            return None
        for p in procs:
            if int(p.pid) == self.pid:
                used = getattr(p, "usedGpuMemory", None)
                if used is None or used >= 2**64 - 1:  # NVML_VALUE_NOT_AVAILABLE
                    return None
                return int(used)
        return None

    def dev_mem_used_bytes(self) -> int | None:
        m = self._try(lambda: self.nv.nvmlDeviceGetMemoryInfo(self.handle))
        return None if m is None else int(m.used)

    def util_pct(self) -> float | None:
        u = self._try(lambda: self.nv.nvmlDeviceGetUtilizationRates(self.handle))
        return None if u is None else float(u.gpu)

    def read(self, memory: bool = True) -> Sample:
        t = time.perf_counter()
        return Sample(t, self.power_w(), self.energy_mj(),
                      self.process_mem_bytes() if memory else None,
                      self.dev_mem_used_bytes() if memory else None,
                      self.util_pct())

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def nvml_reader(device_index: int = 0) -> tuple[NvmlReader | None, str | None]:
    """(reader, None) where NVML works; (None, reason) where it does not (a CPU run)."""
    try:
        return NvmlReader(device_index), None
    except NvmlUnavailable as e:
        return None, f"no NVML power readings: {e}"


# ---------------------------------------------------------------------------------------------
# The sampler
# ---------------------------------------------------------------------------------------------
class PowerSampler:
    """Samples power, the energy counter and memory on a background thread.

        with PowerSampler(reader, interval_s=0.05) as s:
            ... work ...          # s.mark("prompt") splits phases
        s.samples                 # [Sample(t, W, energy_mJ|None, proc_mem, dev_mem, util), ...]

    A reading is taken synchronously on entry and on exit, so the trace brackets the phase
    exactly; between them the thread reads every ``interval_s`` on a fixed grid (a slot it could
    not keep is skipped, and shows as a gap, rather than shifting the grid).
    """

    def __init__(self, reader, interval_s: float, memory: bool = True):
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.reader = reader
        self.interval_s = float(interval_s)
        self.memory = memory
        self.samples: list[Sample] = []
        self.marks: dict[str, float] = {}
        self.t_start: float | None = None
        self.t_stop: float | None = None
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _read(self) -> None:
        try:
            s = self.reader.read(memory=self.memory)
        except Exception:
            self.errors += 1
            s = Sample(time.perf_counter(), None, None)
        with self._lock:
            self.samples.append(s)

    def _run(self) -> None:
        k = 1
        while True:
            target = self.t_start + k * self.interval_s
            delay = target - time.perf_counter()
            if delay > 0 and self._stop.wait(delay):
                return
            if self._stop.is_set():
                return
            self._read()
            now = time.perf_counter()
            k = max(k + 1, int((now - self.t_start) / self.interval_s) + 1)

    def start(self) -> "PowerSampler":
        self._read()
        self.t_start = self.samples[-1].t
        self._thread = threading.Thread(target=self._run, name="quantladder-power-sampler", daemon=True)
        self._thread.start()
        return self

    def mark(self, name: str) -> float:
        t = time.perf_counter()
        self.marks[name] = t
        return t

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()
        self.t_stop = self.samples[-1].t
        self.samples.sort(key=lambda s: s.t)
        return self.samples

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------------------------
# Pure arithmetic on traces
# ---------------------------------------------------------------------------------------------
def _interp(ts: Sequence[float], ys: Sequence[float], t: float) -> float:
    """Linear interpolation; constant extrapolation outside the trace."""
    if t <= ts[0]:
        return ys[0]
    if t >= ts[-1]:
        return ys[-1]
    lo, hi = 0, len(ts) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ts[mid] <= t:
            lo = mid
        else:
            hi = mid
    if ts[hi] == ts[lo]:
        return ys[hi]
    f = (t - ts[lo]) / (ts[hi] - ts[lo])
    return ys[lo] + f * (ys[hi] - ys[lo])


def unwrap_counter(ts: Sequence[float], mj: Sequence[int | None], *, modulus: int = NVML_COUNTER_MODULUS,
                   power_w: Sequence[float | None] | None = None) -> dict:
    """Turn raw counter readings into a monotone cumulative energy (mJ) from the first reading.

    A reading below its predecessor is a *wrap* when the predecessor sat in the top half of the
    counter's range (the increment is then taken modulo ``modulus``), else a *reset* (driver
    reload; the counter restarted near 0). Across a reset the lost interval is bridged with the
    power samples at its two ends where both exist (trapezoid), else with the new reading alone
    (a lower bound), and counted. Missing readings (None) are skipped.
    """
    pts = [(t, int(v), (power_w[i] if power_w is not None else None))
           for i, (t, v) in enumerate(zip(ts, mj)) if v is not None]
    if not pts:
        return {"t": [], "cum_mj": [], "wraps": 0, "resets": 0, "n_missing": len(ts)}
    out_t, out_c = [pts[0][0]], [0.0]
    wraps = resets = 0
    for (t0, v0, p0), (t1, v1, p1) in zip(pts, pts[1:]):
        d = v1 - v0
        if d < 0:
            if v0 >= modulus // 2:
                d += modulus
                wraps += 1
            else:
                resets += 1
                if p0 is not None and p1 is not None:
                    d = 1000.0 * 0.5 * (p0 + p1) * (t1 - t0)
                else:
                    d = v1
        out_t.append(t1)
        out_c.append(out_c[-1] + d)
    return {"t": out_t, "cum_mj": out_c, "wraps": wraps, "resets": resets, "n_missing": len(ts) - len(pts)}


def counter_energy(ts: Sequence[float], mj: Sequence[int | None], t0: float, t1: float, *,
                   modulus: int = NVML_COUNTER_MODULUS, power_w=None) -> dict:
    """Energy (J) over [t0, t1] from cumulative counter readings.

    Sampling error: the counter only changes when the driver updates it, so each phase boundary is
    known to within one update period u (uniform: sd u/√12); the error in joules is the mean power
    times √2 · u/√12. u is estimated as the median time between distinct counter values.
    """
    u = unwrap_counter(ts, mj, modulus=modulus, power_w=power_w)
    if len(u["t"]) < 2:
        raise ValueError("the energy counter needs at least two readings in the phase")
    e0 = _interp(u["t"], u["cum_mj"], t0)
    e1 = _interp(u["t"], u["cum_mj"], t1)
    energy_j = (e1 - e0) / 1000.0
    changes = [t for (t, c), (_, cp) in zip(zip(u["t"][1:], u["cum_mj"][1:]), zip(u["t"], u["cum_mj"])) if c != cp]
    steps = sorted(b - a for a, b in zip(changes, changes[1:]))
    if steps:
        update_s = steps[len(steps) // 2]
    else:  # fewer than two changes: the update period is at least the trace's span
        update_s = u["t"][-1] - u["t"][0]
    duration = t1 - t0
    mean_w = energy_j / duration if duration > 0 else 0.0
    err_j = abs(mean_w) * math.sqrt(2.0) * update_s / math.sqrt(12.0)
    return {"energy_j": energy_j, "sampling_err_j": err_j, "counter_update_s": update_s,
            "counter_wraps": u["wraps"], "counter_resets": u["resets"], "n_missing": u["n_missing"],
            "n_samples": len(u["t"])}


def trapezoid_energy(ts: Sequence[float], power_w: Sequence[float | None], t0: float, t1: float, *,
                     interval_s: float, gap_factor: float = GAP_FACTOR) -> dict:
    """Energy (J) over [t0, t1] by the trapezoid rule on power samples.

    Missing samples (None) are dropped and the trapezoid bridges them linearly; an interval longer
    than ``gap_factor × interval_s`` between valid samples counts as a gap. Sampling error: between
    two samples the true power may sit anywhere between them, so each interval's integral is known
    to ±|ΔP|Δt/2 (uniform: sd |ΔP|Δt/(2√3)); intervals add in quadrature. Gaps therefore widen it.
    """
    pts = [(t, float(p)) for t, p in zip(ts, power_w) if p is not None and math.isfinite(p)]
    if len(pts) < 2:
        raise ValueError("power integration needs at least two valid samples")
    pt, pw = [p[0] for p in pts], [p[1] for p in pts]
    # the integration grid: t0, the samples strictly inside, t1 (boundary values interpolated)
    grid = [t0] + [t for t in pt if t0 < t < t1] + [t1]
    vals = [_interp(pt, pw, t) for t in grid]
    energy = 0.0
    var = 0.0
    for (a, pa), (b, pb) in zip(zip(grid, vals), zip(grid[1:], vals[1:])):
        dt = b - a
        energy += 0.5 * (pa + pb) * dt
        var += ((pb - pa) * dt) ** 2 / 12.0
    inside = [t for t in pt if t0 <= t <= t1]
    gaps = [(b - a) for a, b in zip(inside, inside[1:]) if b - a > gap_factor * interval_s]
    # stretches at the boundaries without a sample count as gaps too
    for edge in ((inside[0] - t0) if inside else (t1 - t0), (t1 - inside[-1]) if inside else 0.0):
        if edge > gap_factor * interval_s:
            gaps.append(edge)
    return {"energy_j": energy, "sampling_err_j": math.sqrt(var), "n_gaps": len(gaps),
            "gap_s": sum(gaps), "n_missing": len(ts) - len(pts), "n_samples": len(inside)}


def idle_stats(power_w: Sequence[float | None]) -> dict:
    """Mean ± sd of idle power, and the mean's standard error with an effective sample count that
    allows for autocorrelation (NVML's power reading is itself a running average):
    n_eff = n (1 − ρ₁)/(1 + ρ₁), ρ₁ the lag-1 autocorrelation (clipped to [0, 0.99])."""
    xs = [float(p) for p in power_w if p is not None and math.isfinite(p)]
    n = len(xs)
    if n < 2:
        raise ValueError("an idle baseline needs at least two power samples")
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    sd = math.sqrt(var)
    if var > 0:
        rho = sum((a - mean) * (b - mean) for a, b in zip(xs, xs[1:])) / ((n - 1) * var)
        rho = min(max(rho, 0.0), 0.99)
    else:
        rho = 0.0
    n_eff = max(1.0, n * (1 - rho) / (1 + rho))
    return {"idle_power_w": mean, "idle_power_sd_w": sd, "idle_power_sem_w": sd / math.sqrt(n_eff),
            "n_samples": n, "n_eff": n_eff, "lag1_autocorr": rho}


def net_energy(total_j: float, total_err_j: float, duration_s: float, idle_w: float, idle_sem_w: float) -> tuple[float, float]:
    """net = total − idle × duration; errors add in quadrature (the idle term's is duration × sem)."""
    net = total_j - idle_w * duration_s
    err = math.sqrt(total_err_j ** 2 + (duration_s * idle_sem_w) ** 2)
    return net, err


def phase_energy(samples: Sequence[Sample], t0: float, t1: float, idle: dict | None, *,
                 interval_s: float, n_tokens: int | None = None,
                 modulus: int = NVML_COUNTER_MODULUS) -> dict:
    """Total and net energy over [t0, t1] of a sampled trace: the counter where it has readings,
    else the power samples. ``idle`` is an idle-baseline record (``idle_baseline``)."""
    ts = [s[0] for s in samples]
    pw = [s[1] for s in samples]
    mj = [s[2] for s in samples]
    duration = t1 - t0
    if duration <= 0:
        raise ValueError(f"phase of non-positive duration {duration} s")
    res: dict = {"duration_s": duration, "interval_s": interval_s}
    if sum(v is not None for v in mj) >= 2:
        c = counter_energy(ts, mj, t0, t1, modulus=modulus, power_w=pw)
        res.update(method="nvml_energy_counter", total_energy_j=c["energy_j"], total_err_j=c["sampling_err_j"],
                   counter_update_s=c["counter_update_s"], counter_wraps=c["counter_wraps"],
                   counter_resets=c["counter_resets"], n_missing=c["n_missing"], n_samples=c["n_samples"],
                   n_gaps=0, gap_s=0.0)
    else:
        tr = trapezoid_energy(ts, pw, t0, t1, interval_s=interval_s)
        res.update(method="power_trapezoid", total_energy_j=tr["energy_j"], total_err_j=tr["sampling_err_j"],
                   n_gaps=tr["n_gaps"], gap_s=tr["gap_s"], n_missing=tr["n_missing"], n_samples=tr["n_samples"],
                   counter_wraps=0, counter_resets=0)
    res["mean_power_w"] = res["total_energy_j"] / duration
    if idle is None:
        res.update(status="incomplete", status_reason="no idle baseline: net energy not computed",
                   net_energy_j=None, net_err_j=None)
    else:
        net, err = net_energy(res["total_energy_j"], res["total_err_j"], duration,
                              idle["idle_power_w"], idle["idle_power_sem_w"])
        res.update(status="ok", status_reason=None, net_energy_j=net, net_err_j=err,
                   idle_power_w=idle["idle_power_w"], idle_power_sem_w=idle["idle_power_sem_w"])
        if not idle.get("idle_verified", True):
            res["status_reason"] = "idle baseline was not verified idle: " + str(idle.get("idle_note"))
    if n_tokens is not None:
        res["n_tokens"] = int(n_tokens)
        if n_tokens > 0 and res["net_energy_j"] is not None:
            res["joules_per_token"] = res["net_energy_j"] / n_tokens
            res["joules_per_token_err"] = res["net_err_j"] / n_tokens
        else:
            res["joules_per_token"] = res["joules_per_token_err"] = None
    return res


# ---------------------------------------------------------------------------------------------
# The idle baseline, cached per node and job
# ---------------------------------------------------------------------------------------------
def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def job_id() -> str:
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("QUANTLADDER_JOB_ID") or f"local-{os.getppid()}"


def idle_from_samples(samples: Sequence[Sample], *, interval_s: float, node: str, job: str, uuid: str | None,
                      util_max_pct: float = IDLE_UTIL_MAX_PCT) -> dict:
    """An idle-baseline record from a trace taken with the card idle."""
    st = idle_stats([s[1] for s in samples])
    utils = [s.util_pct for s in samples if getattr(s, "util_pct", None) is not None]
    max_util = max(utils) if utils else None
    verified = max_util is None or max_util <= util_max_pct
    return {
        "timestamp": time.time(), "node": node, "job": job, "card_uuid": uuid,
        **st, "interval_s": interval_s, "window_s": samples[-1][0] - samples[0][0],
        "max_util_pct": max_util, "idle_verified": verified,
        "idle_note": None if verified else f"GPU utilization reached {max_util}% during the idle window",
    }


def _cache_usable(rec: dict, *, node: str, job: str, uuid: str | None, max_age_s: float, now: float) -> bool:
    return (rec.get("node") == node and rec.get("job") == job and rec.get("card_uuid") == uuid
            and 0 <= now - float(rec.get("timestamp", -1e18)) <= max_age_s)


def idle_baseline(cache_path: str | os.PathLike, reader, *, window_s: float = DEFAULT_IDLE_WINDOW_S,
                  interval_s: float = 0.1, max_age_s: float = DEFAULT_IDLE_MAX_AGE_S,
                  node: str | None = None, job: str | None = None, now: float | None = None) -> dict:
    """The node's idle power: reused from ``cache_path`` when that record is for this node, job and
    card and younger than ``max_age_s``; else measured for ``window_s`` (the card must be idle:
    call before loading the model) and written there. ``cached`` says which."""

    node = node or node_name()
    job = job or job_id()
    uuid = getattr(reader, "uuid", None)
    now = time.time() if now is None else now
    p = Path(cache_path)
    if p.is_file():
        try:
            rec = read_json(p)
        except Exception:
            rec = None
        if rec and _cache_usable(rec, node=node, job=job, uuid=uuid, max_age_s=max_age_s, now=now):
            return {**rec, "cached": True, "age_s": now - rec["timestamp"]}
    sampler = PowerSampler(reader, interval_s=interval_s, memory=False)
    with sampler:
        time.sleep(window_s)
    rec = idle_from_samples(sampler.samples, interval_s=interval_s, node=node, job=job, uuid=uuid)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_json(p, rec)
    return {**rec, "cached": False, "age_s": 0.0}


# ---------------------------------------------------------------------------------------------
# What a speed/energy script calls
# ---------------------------------------------------------------------------------------------
def absent(reason: str, **extra) -> dict:
    """A result with no energy figures and the reason why (never zeros)."""
    return {"status": "absent", "status_reason": reason, "total_energy_j": None, "net_energy_j": None,
            "joules_per_generated_token": None, "joules_per_prompt_token": None, **extra}


def measure_generation(fn: Callable, *, n_gen_tokens: int | Callable[[object], int],
                       n_prompt_tokens: int | Callable[[object], int],
                       idle_cache_path: str | os.PathLike | None, reader=None, device_index: int = 0,
                       interval_s: float, idle_window_s: float = DEFAULT_IDLE_WINDOW_S,
                       idle_max_age_s: float = DEFAULT_IDLE_MAX_AGE_S, prompt_mark: str = "prompt_done",
                       idle: dict | None = None) -> dict:
    """Run ``fn(mark)`` under the power sampler and return the energy of its phases.

    ``fn`` receives ``mark``, a callable: call ``mark()`` once the prompt has been processed (after
    the prompt decode is synchronised), and the trace splits into a prompt phase (start → mark) and
    a generation phase (mark → end): J per prompt token is the prompt phase's net energy ÷ prompt
    tokens, J per generated token the generation phase's ÷ generated tokens. Without a mark the
    whole run is one phase: J per generated token then includes the prompt, and J per prompt token
    is absent with that reason. Token counts may be callables of ``fn``'s return value.

    ``idle``: a baseline the caller took with ``idle_baseline`` before loading the model (the
    right order when ``fn`` only runs an already loaded model); else it is taken (or reused from
    ``idle_cache_path``) here, before ``fn`` runs. Without NVML: ``fn`` still runs and the
    result is ``absent`` with the reason; ``result["value"]`` is fn's return value either way.
    """
    own_reader = False
    reason = None
    if reader is None:
        reader, reason = nvml_reader(device_index)
        own_reader = reader is not None
    if reader is None:
        value = fn(lambda: None)
        return absent(reason, value=value, interval_s=None)
    try:
        idle_reason = None
        if idle is None and idle_cache_path is not None:
            idle = idle_baseline(idle_cache_path, reader, window_s=idle_window_s, max_age_s=idle_max_age_s)
        elif idle is None:
            idle_reason = "no idle cache path given: idle power not measured"
        sampler = PowerSampler(reader, interval_s=interval_s)
        with sampler:
            value = fn(lambda: sampler.mark(prompt_mark))
        n_gen = n_gen_tokens(value) if callable(n_gen_tokens) else n_gen_tokens
        n_prompt = n_prompt_tokens(value) if callable(n_prompt_tokens) else n_prompt_tokens
        return summarize(sampler.samples, sampler.t_start, sampler.t_stop, idle, interval_s=interval_s,
                         n_gen_tokens=n_gen, n_prompt_tokens=n_prompt, t_mark=sampler.marks.get(prompt_mark),
                         card_uuid=getattr(reader, "uuid", None), idle_reason=idle_reason,
                         value=value, sampler_errors=sampler.errors, trace=sampler.samples)
    finally:
        if own_reader:
            reader.close()


def measure_bench_workload(model_path: str, *, n_prompt: int, n_gen: int, idle_cache_path: str | os.PathLike,
                           kv: str = "f16", n_threads: int = 0, n_gpu_layers: int = 0,
                           flash_attn: bool | None = None, interval_s: float,
                           idle_window_s: float = DEFAULT_IDLE_WINDOW_S,
                           idle_max_age_s: float = DEFAULT_IDLE_MAX_AGE_S,
                           device_index: int = 0) -> tuple[dict, dict | None]:
    """The energy of llama-bench's workload on one model (speed.py): a prompt of ``n_prompt``
    random tokens in one batch, then ``n_gen`` single-token decodes, split at the prompt's end.

    The idle baseline comes first, with no model loaded (reused from ``idle_cache_path`` while
    young). Returns (result, the context's resolved engine settings); without NVML the result is
    ``absent`` with the reason and nothing is loaded (engine None). The sample trace is dropped:
    metrics.json keeps the summary.
    """
    import numpy as np

    reader, why = nvml_reader(device_index)
    if reader is None:
        return absent(why or "NVML is not available on this card"), None
    try:
        idle = idle_baseline(idle_cache_path, reader, window_s=idle_window_s, max_age_s=idle_max_age_s)
        rng = np.random.default_rng(0)
        with RawContext(model_path, n_ctx=n_prompt + n_gen, n_batch=max(n_prompt, 1), kv=kv, n_threads=n_threads,
                        n_gpu_layers=n_gpu_layers, flash_attn=flash_attn) as ctx:
            bench_prompt(ctx, 16, 16, rng)  # warm-up, as llama-bench does
            ctx.clear()

            def work(mark):
                if n_prompt:
                    bench_prompt(ctx, n_prompt, n_prompt, rng)
                mark()
                bench_gen(ctx, n_gen, n_prompt, rng)

            res = measure_generation(work, n_gen_tokens=n_gen, n_prompt_tokens=n_prompt, idle_cache_path=None,
                                     reader=reader, interval_s=interval_s, idle=idle)
            engine = ctx.resolved
    finally:
        reader.close()
    res.pop("trace", None)
    res.pop("value", None)
    return res, engine


def summarize(samples: Sequence[Sample], t_start: float, t_stop: float, idle: dict | None, *,
              interval_s: float, n_gen_tokens: int, n_prompt_tokens: int, t_mark: float | None = None,
              card_uuid: str | None = None, idle_reason: str | None = None, **extra) -> dict:
    """The energy result of one sampled run (pure: used by measure_generation and by tests)."""
    whole = phase_energy(samples, t_start, t_stop, idle, interval_s=interval_s)
    res = {"status": "ok", "status_reason": None, "card_uuid": card_uuid, "interval_s": interval_s,
           "method": whole["method"], "duration_s": whole["duration_s"],
           "total_energy_j": whole["total_energy_j"], "total_err_j": whole["total_err_j"],
           "net_energy_j": whole["net_energy_j"], "net_err_j": whole["net_err_j"],
           "mean_power_w": whole["mean_power_w"], "n_samples": whole["n_samples"],
           "n_missing": whole["n_missing"], "n_gaps": whole["n_gaps"], "gap_s": whole["gap_s"],
           "counter_wraps": whole["counter_wraps"], "counter_resets": whole["counter_resets"],
           "idle": idle, "n_gen_tokens": n_gen_tokens, "n_prompt_tokens": n_prompt_tokens,
           "split_at_prompt": t_mark is not None}
    if idle is None:
        res.update(status="incomplete", status_reason=idle_reason or "no idle baseline")
    elif not idle.get("idle_verified", True):
        res["status_reason"] = "idle baseline not verified idle: " + str(idle.get("idle_note"))
    if t_mark is not None and t_start < t_mark < t_stop:
        pp = phase_energy(samples, t_start, t_mark, idle, interval_s=interval_s, n_tokens=n_prompt_tokens)
        tg = phase_energy(samples, t_mark, t_stop, idle, interval_s=interval_s, n_tokens=n_gen_tokens)
        res.update(prompt_phase=pp, generation_phase=tg,
                   joules_per_prompt_token=pp.get("joules_per_token"),
                   joules_per_prompt_token_err=pp.get("joules_per_token_err"),
                   joules_per_generated_token=tg.get("joules_per_token"),
                   joules_per_generated_token_err=tg.get("joules_per_token_err"),
                   prompt_reason=None)
    else:
        per = (res["net_energy_j"] / n_gen_tokens) if (n_gen_tokens and res["net_energy_j"] is not None) else None
        res.update(joules_per_generated_token=per,
                   joules_per_generated_token_err=(res["net_err_j"] / n_gen_tokens) if per is not None else None,
                   joules_per_prompt_token=None, joules_per_prompt_token_err=None,
                   prompt_reason="no prompt/generation mark: prompt energy is included in the generated-token figure")
    res.update(extra)
    return res


def metric_rows(result: dict, *, n_ctx: int | None = None) -> list[dict]:
    """Metric rows for metrics.json. Absent figures are rows with value None and the reason in
    ``status``/``status_reason`` (never zeros). Units: J, J/token, W, s."""

    def row(metric, value, unit, stderr=None, n=None, subset=None, status=None, reason=None):
        if value is None:
            return metric_row(metric, None, unit=unit, n=n, subset=subset, n_ctx=n_ctx, status="absent",
                              status_reason=reason or "not measured")
        return metric_row(metric, value, unit=unit, stderr=stderr, n=n, subset=subset, n_ctx=n_ctx,
                          status=status if status and status != "ok" else None, status_reason=reason)

    if result.get("status") == "absent":
        why = result.get("status_reason")
        return [row(m, None, u, status="absent", reason=why) for m, u in (
            ("joules_per_generated_token", "J/token"), ("joules_per_prompt_token", "J/token"),
            ("net_energy_j", "J"), ("idle_power_w", "W"))]
    st, why = result.get("status", "ok"), result.get("status_reason")
    idle = result.get("idle") or {}
    rows = [
        row("joules_per_generated_token", result.get("joules_per_generated_token"), "J/token",
            result.get("joules_per_generated_token_err"), result.get("n_gen_tokens"),
            subset=None if result.get("split_at_prompt") else "incl_prompt", status=st, reason=why),
        row("joules_per_prompt_token", result.get("joules_per_prompt_token"), "J/token",
            result.get("joules_per_prompt_token_err"), result.get("n_prompt_tokens"),
            status=st if result.get("joules_per_prompt_token") is not None else "absent",
            reason=why if result.get("joules_per_prompt_token") is not None else (result.get("prompt_reason") or why)),
        row("net_energy_j", result.get("net_energy_j"), "J", result.get("net_err_j"), result.get("n_samples"),
            status=st, reason=why),
        row("total_energy_j", result.get("total_energy_j"), "J", result.get("total_err_j"), result.get("n_samples"),
            subset=result.get("method")),
        row("mean_power_w", result.get("mean_power_w"), "W", n=result.get("n_samples")),
        row("idle_power_w", idle.get("idle_power_w"), "W", idle.get("idle_power_sem_w"), idle.get("n_samples"),
            status="ok" if idle else "absent", reason=None if idle else why),
        row("duration_s", result.get("duration_s"), "s"),
        row("sampling_interval_s", result.get("interval_s"), "s"),
        row("sample_gaps", float(result.get("n_gaps") or 0), "1", n=result.get("n_samples")),
    ]
    return rows
