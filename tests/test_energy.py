"""Energy arithmetic on synthetic power traces whose energy is known analytically.

NVML readings are faked here (``TraceReader``) because no GPU is attached to this machine: this is
the only place a fake is acceptable (issue 9). The arithmetic itself, the sampler thread, the idle
cache and the no-NVML path all run for real; the no-NVML test uses this machine's real NVML state.
"""

from __future__ import annotations

import json
import math
import random
import time

import pytest

from quantladder.measures import energy
from quantladder.measures.energy import Sample

from nvml_fakes import TraceReader


def grid(t0, t1, dt):
    n = int(round((t1 - t0) / dt))
    return [t0 + i * dt for i in range(n + 1)]


# -- trapezoid on power samples ---------------------------------------------------------------
def test_constant_power_integrates_exactly_with_zero_sampling_error():
    ts = grid(0.0, 10.0, 0.05)
    r = energy.trapezoid_energy(ts, [300.0] * len(ts), 0.0, 10.0, interval_s=0.05)
    assert r["energy_j"] == pytest.approx(3000.0, rel=1e-12)
    assert r["sampling_err_j"] == pytest.approx(0.0, abs=1e-9)
    assert r["n_gaps"] == 0 and r["n_missing"] == 0


def test_ramp_is_exact_even_with_phase_boundaries_between_samples():
    # P(t) = 100 + 20 t; ∫_a^b = 100(b−a) + 10(b²−a²)
    ts = grid(0.0, 5.0, 0.1)
    pw = [100 + 20 * t for t in ts]
    a, b = 0.037, 4.961
    r = energy.trapezoid_energy(ts, pw, a, b, interval_s=0.1)
    assert r["energy_j"] == pytest.approx(100 * (b - a) + 10 * (b * b - a * a), rel=1e-12)
    # each interval's ΔP is 2 W over 0.1 s: the error estimate is small but not zero
    assert 0 < r["sampling_err_j"] < 0.5


def test_sampling_error_estimate_covers_the_true_error_of_a_fast_signal():
    # P(t) = 200 + 80 sin(2π t / 0.7): sampled at 50 ms the trapezoid is off; the stated error covers it
    f = lambda t: 200 + 80 * math.sin(2 * math.pi * t / 0.7)
    exact = lambda a, b: 200 * (b - a) - 80 * 0.7 / (2 * math.pi) * (math.cos(2 * math.pi * b / 0.7) - math.cos(2 * math.pi * a / 0.7))
    ts = grid(0.0, 6.0, 0.05)
    r = energy.trapezoid_energy(ts, [f(t) for t in ts], 0.0, 6.0, interval_s=0.05)
    true_err = abs(r["energy_j"] - exact(0.0, 6.0))
    assert true_err > 0
    assert true_err < 3 * r["sampling_err_j"]


def test_missing_samples_are_bridged_and_gaps_counted():
    ts = grid(0.0, 10.0, 0.05)
    pw = [100 + 20 * t for t in ts]
    # one long outage (2.0 s .. 3.0 s) and scattered single drop-outs
    rng = random.Random(1)
    holes = 0
    for i, t in enumerate(ts):
        if 2.0 < t < 3.0:
            pw[i] = None
            holes += 1
        elif 0 < i < len(ts) - 1 and rng.random() < 0.1 and pw[i - 1] is not None:
            pw[i] = None
            holes += 1
    r = energy.trapezoid_energy(ts, pw, 0.0, 10.0, interval_s=0.05)
    assert r["energy_j"] == pytest.approx(100 * 10 + 10 * 100, rel=1e-12)  # linear: bridging is exact
    assert r["n_missing"] == holes
    assert r["n_gaps"] == 1  # single drop-outs (0.1 s) are under 2.5 × interval; the outage is one gap
    assert r["gap_s"] == pytest.approx(1.05, abs=0.051)


def test_a_gap_on_a_step_widens_the_error_to_cover_it():
    # 100 W until t=5, 400 W after; the samples from 4 s to 6 s are lost
    ts = grid(0.0, 10.0, 0.05)
    pw = [None if 4.0 < t < 6.0 else (100.0 if t < 5.0 else 400.0) for t in ts]
    r = energy.trapezoid_energy(ts, pw, 0.0, 10.0, interval_s=0.05)
    exact = 100 * 5 + 400 * 5
    assert r["n_gaps"] == 1
    assert abs(r["energy_j"] - exact) <= 2 * r["sampling_err_j"]
    assert r["sampling_err_j"] > 100  # 300 W × 2 s / (2√3) ≈ 173 J


# -- the cumulative energy counter ------------------------------------------------------------
def counter_trace(power, ts, start_mj):
    """Counter readings (integer mJ) of a piecewise-constant or smooth power ∫ by fine steps."""
    out, e, last = [], 0.0, ts[0]  # float from 0, the (possibly huge) start added as an int
    for t in ts:
        n = 50
        for k in range(n):  # midpoint rule on fine steps: exact for constant/ramp power
            a = last + (t - last) * k / n
            b = last + (t - last) * (k + 1) / n
            e += 1000.0 * power((a + b) / 2) * (b - a)
        last = t
        out.append(start_mj + int(round(e)))
    return out


def test_counter_energy_of_constant_power():
    ts = grid(0.0, 4.0, 0.1)
    mj = counter_trace(lambda t: 250.0, ts, 123_456_789)
    r = energy.counter_energy(ts, mj, 0.0, 4.0)
    assert r["energy_j"] == pytest.approx(1000.0, abs=0.002)
    assert r["counter_wraps"] == 0 and r["counter_resets"] == 0


def test_counter_wrap_is_unwrapped_at_the_counter_modulus():
    ts = grid(0.0, 4.0, 0.1)
    modulus = 2**32
    raw = counter_trace(lambda t: 250.0, ts, modulus - 300_000)  # wraps after 1.2 s
    mj = [v % modulus for v in raw]
    assert any(b < a for a, b in zip(mj, mj[1:]))
    r = energy.counter_energy(ts, mj, 0.0, 4.0, modulus=modulus)
    assert r["energy_j"] == pytest.approx(1000.0, abs=0.002)
    assert r["counter_wraps"] == 1 and r["counter_resets"] == 0


def test_counter_wrap_of_nvml_64_bit_counter():
    ts = grid(0.0, 2.0, 0.05)
    raw = counter_trace(lambda t: 100.0, ts, 2**64 - 50_000)
    mj = [v % 2**64 for v in raw]
    r = energy.counter_energy(ts, mj, 0.0, 2.0)
    assert r["energy_j"] == pytest.approx(200.0, abs=0.002)
    assert r["counter_wraps"] == 1


def test_counter_reset_is_bridged_with_power_samples():
    ts = grid(0.0, 4.0, 0.1)
    raw = counter_trace(lambda t: 200.0, ts, 9_000_000)
    # driver reload at 2.0 s: the counter restarts from 0 between the samples at 2.0 and 2.1 s
    i_reset = ts.index(min(ts, key=lambda t: abs(t - 2.1)))
    lost_after_reset = 1000  # mJ accumulated between the reset and the next reading
    mj = raw[:i_reset] + [lost_after_reset + (v - raw[i_reset]) for v in raw[i_reset:]]
    pw = [200.0] * len(ts)
    r = energy.counter_energy(ts, mj, 0.0, 4.0, power_w=pw)
    assert r["counter_resets"] == 1 and r["counter_wraps"] == 0
    assert r["energy_j"] == pytest.approx(800.0, abs=0.01)
    # without power samples the reset interval is a lower bound (the reading since the reset)
    r2 = energy.counter_energy(ts, mj, 0.0, 4.0)
    assert r2["energy_j"] == pytest.approx(800.0 - 20.0 + lost_after_reset / 1000, abs=0.01)


def test_counter_with_missing_readings_and_interpolated_boundaries():
    ts = grid(0.0, 4.0, 0.1)
    mj = counter_trace(lambda t: 100 + 50 * t, ts, 0)
    mj = [None if i % 3 == 1 else v for i, v in enumerate(mj)]
    a, b = 0.55, 3.45
    r = energy.counter_energy(ts, mj, a, b)
    exact = 100 * (b - a) + 25 * (b * b - a * a)
    # the counter is linearly interpolated between readings: off by at most a quadratic term
    assert r["energy_j"] == pytest.approx(exact, abs=1.0)
    assert r["n_missing"] == sum(1 for i in range(len(ts)) if i % 3 == 1)


# -- idle baseline and net energy -------------------------------------------------------------
def test_idle_stats_mean_sd_and_effective_n():
    xs = [60.0, 62.0] * 50
    s = energy.idle_stats(xs)
    assert s["idle_power_w"] == pytest.approx(61.0)
    assert s["idle_power_sd_w"] == pytest.approx(math.sqrt(100 / 99), rel=1e-9)
    assert s["n_samples"] == 100
    # a slowly drifting (autocorrelated) trace has far fewer effective samples
    drift = [60 + 0.01 * i for i in range(100)]
    d = energy.idle_stats(drift)
    assert d["n_eff"] < 5
    assert d["idle_power_sem_w"] > d["idle_power_sd_w"] / 3


def test_net_energy_subtracts_idle_and_propagates_errors():
    net, err = energy.net_energy(1000.0, 3.0, 4.0, 60.0, 0.5)
    assert net == pytest.approx(1000 - 240)
    assert err == pytest.approx(math.sqrt(9 + 4))


def _idle(w=60.0, sem=0.0):
    return {"idle_power_w": w, "idle_power_sd_w": sem, "idle_power_sem_w": sem, "n_samples": 100,
            "idle_verified": True}


def test_summary_splits_prompt_and_generation_and_divides_per_token():
    # 0–1 s prompt processing at 350 W, 1–5 s generation at 260 W, idle 60 W
    power = lambda t: 350.0 if t < 1.0 else 260.0
    ts = grid(0.0, 5.0, 0.05)
    mj = counter_trace(power, ts, 10**9)
    samples = [Sample(t, power(t), e) for t, e in zip(ts, mj)]
    res = energy.summarize(samples, 0.0, 5.0, _idle(60.0, 0.2), interval_s=0.05,
                           n_gen_tokens=400, n_prompt_tokens=512, t_mark=1.0)
    assert res["method"] == "nvml_energy_counter"
    assert res["net_energy_j"] == pytest.approx(290 + 800, abs=0.01)
    assert res["joules_per_prompt_token"] == pytest.approx(290 / 512, rel=1e-4)
    assert res["joules_per_generated_token"] == pytest.approx(800 / 400, rel=1e-4)
    # idle sem 0.2 W over 4 s is 0.8 J of the generation phase's error
    assert res["joules_per_generated_token_err"] >= 0.8 / 400
    assert res["status"] == "ok"


def test_summary_without_counter_uses_power_and_without_mark_includes_prompt():
    ts = grid(0.0, 5.0, 0.05)
    samples = [Sample(t, 160.0, None) for t in ts]
    res = energy.summarize(samples, 0.0, 5.0, _idle(60.0), interval_s=0.05, n_gen_tokens=250, n_prompt_tokens=100)
    assert res["method"] == "power_trapezoid"
    assert res["joules_per_generated_token"] == pytest.approx(500 / 250)
    assert res["joules_per_prompt_token"] is None and "mark" in res["prompt_reason"]
    rows = {r["metric"]: r for r in energy.metric_rows(res)}
    assert rows["joules_per_generated_token"]["subset"] == "incl_prompt"
    assert rows["joules_per_prompt_token"]["value"] is None
    assert rows["joules_per_prompt_token"]["status"] == "absent"
    assert rows["idle_power_w"]["value"] == 60.0 and rows["idle_power_w"]["unit"] == "W"
    assert rows["joules_per_generated_token"]["unit"] == "J/token"
    assert rows["net_energy_j"]["unit"] == "J"


# -- the sampler thread, idle cache and measure_generation (fake NVML readings) ----------------
def test_sampler_brackets_the_phase_on_its_interval():
    r = TraceReader()
    s = energy.PowerSampler(r, interval_s=0.02)
    with s:
        time.sleep(0.3)
        s.mark("half")
        time.sleep(0.1)
    assert s.samples[0].t == s.t_start and s.samples[-1].t == s.t_stop
    assert s.t_start < s.marks["half"] < s.t_stop
    steps = [b.t - a.t for a, b in zip(s.samples, s.samples[1:])]
    assert len(s.samples) >= 12
    assert sorted(steps)[len(steps) // 2] == pytest.approx(0.02, abs=0.01)


def test_idle_baseline_is_cached_per_node_and_job_and_expires(tmp_path):
    r = TraceReader(idle_w=58.0)
    path = tmp_path / "idle" / "node1-job7.json"
    a = energy.idle_baseline(path, r, window_s=0.25, interval_s=0.02, node="node1", job="7")
    assert a["cached"] is False and a["idle_power_w"] == pytest.approx(58.0)
    rec = json.loads(path.read_text())
    for key in ("timestamp", "node", "job", "card_uuid", "idle_power_w", "idle_power_sd_w", "n_samples", "interval_s"):
        assert key in rec
    assert rec["card_uuid"] == "GPU-fake-0000" and rec["n_samples"] >= 8
    b = energy.idle_baseline(path, r, window_s=0.25, interval_s=0.02, node="node1", job="7")
    assert b["cached"] is True and b["timestamp"] == a["timestamp"]
    c = energy.idle_baseline(path, r, window_s=0.05, interval_s=0.02, node="node1", job="8")
    assert c["cached"] is False and c["job"] == "8"
    d = energy.idle_baseline(path, r, window_s=0.05, interval_s=0.02, node="node1", job="8",
                             max_age_s=10, now=time.time() + 60)
    assert d["cached"] is False
    other = TraceReader(idle_w=70.0)
    other.uuid = "GPU-fake-1111"  # another card on the same node and job: its own baseline
    e = energy.idle_baseline(path, other, window_s=0.1, interval_s=0.02, node="node1", job="8")
    assert e["cached"] is False and e["idle_power_w"] == pytest.approx(70.0)


def test_idle_window_with_load_is_flagged_not_idle():
    samples = [Sample(0.1 * i, 200.0, None, None, None, 90.0) for i in range(20)]
    rec = energy.idle_from_samples(samples, interval_s=0.1, node="n", job="j", uuid="u")
    assert rec["idle_verified"] is False and "90" in rec["idle_note"]


def test_measure_generation_end_to_end_with_counter_wrap(tmp_path):
    r = TraceReader(idle_w=55.0, busy_w=255.0, counter=True)  # the counter wraps within the first second

    def work(mark):
        r.set_busy(True)
        time.sleep(0.3)
        mark()
        time.sleep(0.6)
        r.set_busy(False)
        return {"n_gen": 120, "n_prompt": 300}

    res = energy.measure_generation(work, n_gen_tokens=lambda v: v["n_gen"], n_prompt_tokens=lambda v: v["n_prompt"],
                                    idle_cache_path=tmp_path / "idle.json", reader=r, interval_s=0.02,
                                    idle_window_s=0.2)
    assert res["status"] == "ok" and res["method"] == "nvml_energy_counter"
    assert res["counter_wraps"] == 1
    assert res["idle"]["idle_power_w"] == pytest.approx(55.0)
    gen = res["generation_phase"]
    # busy for the whole generation phase up to set_busy(False), then idle (net 0) until stop
    assert res["joules_per_generated_token"] == pytest.approx(200.0 * gen["duration_s"] / 120, rel=0.05)
    assert res["joules_per_prompt_token"] == pytest.approx(200.0 * res["prompt_phase"]["duration_s"] / 300, rel=0.05)
    assert res["value"] == {"n_gen": 120, "n_prompt": 300}


def test_measure_generation_uses_a_baseline_taken_before_loading(tmp_path):
    r = TraceReader(idle_w=40.0, busy_w=140.0, counter=True, start_mj=0)
    idle = energy.idle_baseline(tmp_path / "idle.json", r, window_s=0.1, interval_s=0.02, node="n", job="j")

    def work(mark):
        t0 = time.perf_counter()
        r.set_busy(True)
        time.sleep(0.2)
        r.set_busy(False)
        return time.perf_counter() - t0

    res = energy.measure_generation(work, n_gen_tokens=20, n_prompt_tokens=0, idle_cache_path=None, idle=idle,
                                    reader=r, interval_s=0.02)
    assert res["idle"]["idle_power_w"] == pytest.approx(40.0) and res["status"] == "ok"
    busy_s = res["value"]
    assert res["net_energy_j"] == pytest.approx(100.0 * busy_s, rel=0.01)
    assert res["joules_per_generated_token"] == pytest.approx(100.0 * busy_s / 20, rel=0.01)


def test_measure_generation_without_counter_integrates_power(tmp_path):
    r = TraceReader(idle_w=50.0, busy_w=150.0, counter=False)

    def work(mark):
        r.set_busy(True)
        time.sleep(0.5)
        r.set_busy(False)

    res = energy.measure_generation(work, n_gen_tokens=100, n_prompt_tokens=10, idle_cache_path=tmp_path / "i.json",
                                    reader=r, interval_s=0.01, idle_window_s=0.1)
    assert res["method"] == "power_trapezoid"
    assert res["net_energy_j"] == pytest.approx(100.0 * 0.5, rel=0.25)  # steps smeared over one interval
    assert abs(res["net_energy_j"] - 50.0) < 3 * res["net_err_j"] + 1.0


def test_no_nvml_gives_absent_energy_with_a_reason_never_zero(tmp_path):
    # the real state of this machine: no NVIDIA driver, so NVML cannot initialise
    reader, reason = energy.nvml_reader()
    if reader is not None:
        reader.close()
        pytest.skip("this machine has a working NVML")
    assert reason and "NVML" in reason
    ran = []
    res = energy.measure_generation(lambda mark: ran.append(1) or "out", n_gen_tokens=10, n_prompt_tokens=5,
                                    idle_cache_path=tmp_path / "idle.json", interval_s=0.05)
    assert ran == [1] and res["value"] == "out"
    assert res["status"] == "absent" and "NVML" in res["status_reason"]
    assert res["joules_per_generated_token"] is None and res["net_energy_j"] is None
    assert not (tmp_path / "idle.json").exists()
    rows = energy.metric_rows(res)
    assert rows and all(r["value"] is None for r in rows)
    assert all(r["status"] == "absent" and "NVML" in r["status_reason"] for r in rows)
    assert {r["unit"] for r in rows} >= {"J/token", "J", "W"}


# -- NvmlReader over a stand-in pynvml (fake NVML readings, the only place a fake is acceptable) ---
from nvml_fakes import fake_pynvml  # noqa: E402


def test_nvml_reader_reads_power_counter_and_this_process(monkeypatch):
    import os
    import sys

    m = fake_pynvml(procs=[(12345, 2**30), (os.getpid(), 3 * 2**30)])
    monkeypatch.setitem(sys.modules, "pynvml", m)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    r = energy.NvmlReader(0)
    s = r.read()
    assert (s.power_w, s.energy_mj, s.proc_mem_bytes, s.dev_mem_used_bytes, s.util_pct) == (123.0, 5000, 3 * 2**30, 7 * 2**30, 3.0)
    assert r.uuid == "GPU-0" and r.has_energy_counter
    r.close()
    assert "shutdown" in m.calls


def test_nvml_reader_honours_cuda_visible_devices_and_missing_features(monkeypatch):
    import sys

    m = fake_pynvml(energy_supported=False, procs=[(1, 2**30)])
    monkeypatch.setitem(sys.modules, "pynvml", m)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    r = energy.NvmlReader(0)
    assert ("index", 1) in m.calls and r.uuid == "GPU-1"
    s = r.read()
    assert s.energy_mj is None and not r.has_energy_counter  # no counter: power is integrated instead
    assert s.proc_mem_bytes is None  # our PID is not listed (a container): vram falls back to the device
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert energy.NvmlReader(0).uuid == "GPU-GPU-abc" and ("uuid", "GPU-abc") in m.calls
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(energy.NvmlUnavailable, match="hides every GPU"):
        energy.NvmlReader(0)


def test_nvml_reader_unavailable_reasons(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error="Driver Not Loaded"))
    reader, why = energy.nvml_reader()
    assert reader is None and "Driver Not Loaded" in why
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(n_devices=0))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    reader, why = energy.nvml_reader()
    assert reader is None and "no GPU 0" in why


# -- the energy rule's run: llama-bench's workload under the sampler ----------------------------

def test_bench_workload_on_the_real_model(monkeypatch, tmp_path, smollm_q8):
    """Idle first (and cached), then a prompt phase and a generation phase of real decodes; the
    trace is dropped and the context's settings come back (NVML's readings faked)."""
    monkeypatch.setattr(energy, "nvml_reader", lambda index=0: (TraceReader(), None))
    res, engine = energy.measure_bench_workload(str(smollm_q8), n_prompt=32, n_gen=8, n_threads=2,
                                                idle_cache_path=tmp_path / "idle.json", interval_s=0.01,
                                                idle_window_s=0.2)
    assert res["status"] == "ok" and res["split_at_prompt"], res
    assert (res["n_prompt_tokens"], res["n_gen_tokens"]) == (32, 8)
    assert res["joules_per_prompt_token"] is not None and res["joules_per_generated_token"] is not None
    assert "trace" not in res and "value" not in res
    assert res["idle"]["cached"] is False and (tmp_path / "idle.json").is_file()
    assert engine["n_batch"] == 32 and engine["n_threads"] == 2


def test_bench_workload_without_nvml_is_absent_and_loads_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(energy, "nvml_reader", lambda index=0: (None, "no NVML power readings: Driver Not Loaded"))
    res, engine = energy.measure_bench_workload(str(tmp_path / "no-model.gguf"), n_prompt=32, n_gen=8,
                                                idle_cache_path=tmp_path / "idle.json", interval_s=0.05)
    assert engine is None and res["status"] == "absent" and "Driver Not Loaded" in res["status_reason"]
    assert not (tmp_path / "idle.json").exists()
