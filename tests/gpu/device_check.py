"""GPU device check (issue 9): a 7B-class rung through generation, speed, memory and energy on the
card, each figure printed beside the reference tool's (llama-bench tokens/s, nvidia-smi memory),
plus the memory-bandwidth roofline (bandwidth ÷ bytes read per generated token).

Run by tests/gpu/device_check.sh after it has built the CUDA backend; the pure parts (argument
parsing, the timing loop on a CPU context, the roofline) are tested on the CPU by
tests/test_synth_gguf.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "workflow"))

# Vendor datasheet memory bandwidths (bytes/s), a lead beside the measured copy bandwidth.
DATASHEET_BW = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12, "H100 PCIe": 2.0e12, "A100-SXM4-80GB": 2.039e12,
                "A100-SXM4-40GB": 1.555e12, "A100-PCIE-40GB": 1.555e12, "L40S": 0.864e12, "RTX 4090": 1.008e12}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="quantladder GPU device check")
    ap.add_argument("--work", required=True, help="scratch folder for the synthetic model files")
    ap.add_argument("--llama-bin", help="folder with llama-bench and llama-quantize (the CUDA build)")
    ap.add_argument("--size", default="7b", help="synthetic model preset (tests/gpu/synth_gguf.py PRESETS)")
    ap.add_argument("--tokenizer", help="GGUF with the tokenizer metadata (default: the embedded SmolLM2)")
    ap.add_argument("--rungs", default="Q4_K_M", type=lambda s: [r.strip().upper() for r in s.split(",") if r.strip()])
    ap.add_argument("--n-prompt", type=int, default=512)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n-gpu-layers", type=int, default=99)
    ap.add_argument("--fa", choices=("on", "off"), default="on", help="flash attention, for both tools")
    ap.add_argument("--interval", type=float, default=0.05, help="power sampling interval (s)")
    ap.add_argument("--idle-window", type=float, default=10.0, help="idle baseline window (s)")
    ap.add_argument("--gen-tokens", type=int, default=64, help="tokens for the Engine generation run")
    ap.add_argument("--json-out", help="write every figure here as JSON")
    ap.add_argument("--threads", type=int, default=0)
    return ap.parse_args(argv)


def roofline_tokens_per_s(bandwidth_bytes_per_s: float, bytes_per_token: float) -> float:
    """Generation ceiling when every generated token reads ``bytes_per_token`` from memory."""
    return bandwidth_bytes_per_s / bytes_per_token


def bytes_per_token(info, n_ctx_mean: float, tensor_bytes_by_name: dict | None = None) -> float:
    """Weights read per generated token (all tensors but the embedding table, of which one row is
    read) plus the F16 KV cache read at the mean context of the tg run."""
    names = tensor_bytes_by_name or {}
    # with tied embeddings the table is also the output matrix, read whole for every token
    emb = names.get("token_embd.weight", 0) if "output.weight" in names else 0
    weights = info.tensor_bytes - emb + (emb / info.n_vocab if info.n_vocab else 0)
    return weights + info.kv_bytes(int(round(n_ctx_mean)))


def tensor_bytes(path) -> dict:
    import gguf

    r = gguf.GGUFReader(str(path), "r")
    return {t.name: int(t.n_bytes) for t in r.tensors}


def pp_tg(ctx, n_prompt: int, n_gen: int, reps: int, mark=None, seed: int = 0) -> dict:
    """llama-bench's protocol on a RawContext: pp = n_prompt random tokens in n_batch chunks from
    an empty cache, synchronised; tg = n_gen single-token decodes from an empty cache, each
    synchronised. One warm-up of each; ``mark()`` is called between the pp and tg repetitions."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n_vocab = ctx.n_vocab

    def run_pp():
        ctx.clear()
        done = 0
        while done < n_prompt:
            n = min(ctx.n_batch, n_prompt - done)
            toks = rng.integers(0, n_vocab, n, dtype=np.int32)
            if done == 0 and ctx.add_bos:
                toks[0] = ctx.bos
            mask = np.zeros(n, dtype=np.int8)
            mask[-1] = 1
            ctx.decode(toks, np.arange(done, done + n, dtype=np.int32), np.zeros(n, dtype=np.int32), mask)
            done += n
        ctx.synchronize()

    one = np.ones(1, dtype=np.int8)
    zero = np.zeros(1, dtype=np.int32)

    def run_tg(n):
        ctx.clear()
        tok = np.array([ctx.bos if ctx.add_bos else int(rng.integers(0, n_vocab))], dtype=np.int32)
        for p in range(n):
            ctx.decode(tok, np.array([p], dtype=np.int32), zero, one)
            ctx.synchronize()
            tok[0] = int(rng.integers(0, n_vocab))

    run_pp()  # warm-up
    run_tg(1)
    pps, tgs = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        run_pp()
        pps.append(time.perf_counter() - t0)
    if mark:
        mark()
    for _ in range(reps):
        t0 = time.perf_counter()
        run_tg(n_gen)
        tgs.append(time.perf_counter() - t0)
    pp_ts = [n_prompt / s for s in pps]
    tg_ts = [n_gen / s for s in tgs]
    return {"pp_seconds": pps, "tg_seconds": tgs, "pp_tokens_per_s": sum(pp_ts) / len(pp_ts),
            "pp_tokens_per_s_sd": _sd(pp_ts), "tg_tokens_per_s": sum(tg_ts) / len(tg_ts), "tg_tokens_per_s_sd": _sd(tg_ts),
            "n_prompt_tokens": n_prompt * reps, "n_gen_tokens": n_gen * reps}


def _sd(xs):
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5


def llama_bench(binary: str, model: str, a) -> dict:
    cmd = [binary, "-m", model, "-p", str(a.n_prompt), "-n", str(a.n_gen), "-r", str(a.reps), "-ngl", str(a.n_gpu_layers),
           "-fa", a.fa, "-b", "2048", "-ub", "512", "-o", "json"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr[-1500:], "cmd": cmd}
    out = {"cmd": " ".join(cmd), "seconds": time.perf_counter() - t0}
    for t in json.loads(r.stdout):
        key = "pp" if t["n_prompt"] and not t["n_gen"] else "tg"
        out[f"{key}_tokens_per_s"] = t["avg_ts"]
        out[f"{key}_tokens_per_s_sd"] = t["stddev_ts"]
    return out


def nvidia_smi(pid: int) -> dict:
    """nvidia-smi's view at this instant: this process's memory and the card's used memory / power."""
    if not shutil.which("nvidia-smi"):
        return {"error": "nvidia-smi not found"}
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,power.draw,name,driver_version",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip().splitlines()
    proc = None
    rows = [ln.split(",") for ln in apps.strip().splitlines() if ln.strip()]
    for p, m in rows:
        if int(p) == pid:
            proc = int(m) * 2**20
    if proc is None and len(rows) == 1:  # a PID namespace hides our PID: the one compute app is us
        proc = int(rows[0][1]) * 2**20
    used, power, name, driver = [x.strip() for x in gpu[0].split(",")] if gpu else (None,) * 4
    return {"proc_mem_bytes": proc, "dev_mem_used_bytes": int(float(used)) * 2**20 if used else None,
            "power_w": float(power) if power not in (None, "[N/A]") else None, "name": name, "driver": driver,
            "apps": rows}


_BW_SNIPPET = """
import time, torch
x = torch.empty(2**30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize(); t0 = time.perf_counter(); n = 20
for _ in range(n): y.copy_(x)
torch.cuda.synchronize(); print(2 * 2**30 * n / (time.perf_counter() - t0))
"""


def copy_bandwidth() -> float | None:
    """Device-to-device copy bandwidth (bytes read + written per second) through torch, in a child
    process so that torch's CUDA context does not count in this process's card memory."""
    try:
        r = subprocess.run([sys.executable, "-c", _BW_SNIPPET], capture_output=True, text=True, timeout=120)
        return float(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
    except Exception:
        return None


def datasheet_bandwidth(name: str) -> float | None:
    for k, v in DATASHEET_BW.items():
        if k.lower() in (name or "").lower():
            return v
    return None


def line(label, ours, ref=None, unit="", ref_label=""):
    def f(v):
        if v is None:
            return "n/a"
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        return str(v)
    ratio = f"  ({ours / ref:.3f}×)" if isinstance(ours, (int, float)) and isinstance(ref, (int, float)) and ref else ""
    refs = f"   | {ref_label}: {f(ref)} {unit}{ratio}" if ref_label else ""
    print(f"  {label:<40} {f(ours):>14} {unit}{refs}", flush=True)


def main(argv=None) -> int:
    a = parse_args(argv)
    import synth_gguf
    from quantladder import card, models
    from quantladder.engine import Engine, EngineSettings, RawContext, library_info
    from quantladder.gguf_meta import read_info
    from quantladder.measures import energy, vram

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"args": vars(a)}
    ident = card.identity()
    lib = library_info()
    report.update(card=ident, library={k: v for k, v in lib.items() if k != "system_info"},
                  system_info=lib.get("system_info"))
    print(f"== card: {ident.get('name')} uuid={ident.get('uuid')} driver={ident.get('driver')} "
          f"mem={ident.get('memory_total_bytes')} B power_limit={ident.get('power_limit_w')} W", flush=True)
    print(f"== llama.cpp: {lib.get('system_info')}", flush=True)
    print(f"   gpu offload supported: {lib.get('gpu_offload_supported')}; libllama {lib.get('libllama_path')}", flush=True)

    reader, why = energy.nvml_reader()
    idle = None
    if reader is not None:
        t0 = time.perf_counter()
        idle = energy.idle_baseline(work / "idle.json", reader, window_s=a.idle_window, interval_s=0.1)
        print(f"== idle baseline: {idle['idle_power_w']:.2f} ± {idle['idle_power_sd_w']:.2f} W (sd), "
              f"sem {idle['idle_power_sem_w']:.3f} W, n={idle['n_samples']}, util max {idle['max_util_pct']}% "
              f"[{time.perf_counter() - t0:.1f} s]", flush=True)
        print(f"   nvidia-smi power now: {nvidia_smi(os.getpid()).get('power_w')} W", flush=True)
    else:
        print(f"== no NVML: {why}", flush=True)
    report["idle"] = idle

    bw_measured = copy_bandwidth()
    bw_sheet = datasheet_bandwidth(ident.get("name", ""))
    report["bandwidth"] = {"measured_copy_bytes_per_s": bw_measured, "datasheet_bytes_per_s": bw_sheet}

    t0 = time.perf_counter()
    f16 = work / f"synth-{a.size}-F16.gguf"
    syn = synth_gguf.synthesize(f16, a.size, tokenizer=a.tokenizer)
    print(f"== synthesised {a.size}: {syn['n_params'] / 1e9:.2f} B params, {syn['bytes'] / 1e9:.2f} GB F16 "
          f"[{time.perf_counter() - t0:.1f} s]", flush=True)
    qbin = str(Path(a.llama_bin) / "llama-quantize") if a.llama_bin else None
    bench_bin = str(Path(a.llama_bin) / "llama-bench") if a.llama_bin else shutil.which("llama-bench")

    report["rungs"] = {}
    for rung in a.rungs:
        t0 = time.perf_counter()
        q = work / f"synth-{a.size}-{rung}.gguf"
        models.quantize(f16, q, rung, binary=qbin, n_threads=os.cpu_count() or 0)
        info = read_info(q)
        tb = tensor_bytes(q)
        print(f"\n== rung {rung}: {info.file_bytes / 1e9:.3f} GB, {info.bits_per_weight:.3f} bits/weight "
              f"[quantized in {time.perf_counter() - t0:.1f} s]", flush=True)
        r = {"file_bytes": info.file_bytes, "bits_per_weight": info.bits_per_weight}

        # generation through the harness's own engine (chat template, greedy)
        with Engine(str(q), EngineSettings(n_ctx=1024, n_gpu_layers=a.n_gpu_layers, n_threads=a.threads,
                                           flash_attn=a.fa == "on")) as eng:
            g = eng.generate(eng.chat_prompt([{"role": "user", "content": "Say something."}]), max_tokens=a.gen_tokens)
            r["engine_generation"] = {"n_prompt_tokens": g.n_prompt_tokens, "n_gen_tokens": g.n_gen_tokens,
                                      "seconds": g.seconds, "tokens_per_s": g.n_gen_tokens / g.seconds}
        print(f"  engine generate: {g.n_gen_tokens} tokens in {g.seconds:.3f} s "
              f"({g.n_gen_tokens / g.seconds:.1f} tokens/s incl. prompt)", flush=True)

        smi_during = {}

        def run_point():
            ctx = RawContext(str(q), n_ctx=a.n_prompt + a.n_gen + 16, n_batch=2048, n_ubatch=512,
                             n_gpu_layers=a.n_gpu_layers, n_threads=a.threads, flash_attn=a.fa == "on")
            try:
                def work_fn(mark):
                    return pp_tg(ctx, a.n_prompt, a.n_gen, a.reps, mark=mark)
                if reader is not None:
                    res = energy.measure_generation(work_fn, n_gen_tokens=lambda v: v["n_gen_tokens"],
                                                    n_prompt_tokens=lambda v: v["n_prompt_tokens"],
                                                    idle_cache_path=work / "idle.json", idle=idle, reader=reader,
                                                    interval_s=a.interval, idle_window_s=a.idle_window)
                else:
                    res = energy.measure_generation(work_fn, n_gen_tokens=1, n_prompt_tokens=1, idle_cache_path=None,
                                                    interval_s=a.interval)
                smi_during.update(nvidia_smi(os.getpid()))
                return res
            finally:
                ctx.close()

        mem = vram.measure_memory(run_point, reader=reader, interval_s=a.interval) if reader is not None \
            else {"status": "absent", "value": run_point(), "peak_mem_bytes": None}
        en = mem["value"]
        speed = en["value"]
        ref = llama_bench(bench_bin, str(q), a) if bench_bin else {"error": "no llama-bench"}
        bpt = bytes_per_token(info, a.n_gen / 2.0, tb)
        # the copy's bytes read + written per second is what the memory sustains, reads alone included
        roof_m = roofline_tokens_per_s(bw_measured, bpt) if bw_measured else None
        roof_s = roofline_tokens_per_s(bw_sheet, bpt) if bw_sheet else None
        trace = en.pop("trace", None)
        r.update(speed=speed, llama_bench=ref, energy={k: v for k, v in en.items() if k != "value"},
                 memory={k: v for k, v in mem.items() if k != "value"}, nvidia_smi=smi_during,
                 bytes_per_token=bpt, roofline_tokens_per_s={"measured_bw": roof_m, "datasheet_bw": roof_s},
                 predicted_kv_bytes=info.kv_bytes(a.n_prompt + a.n_gen + 16))
        if trace:
            (work / f"trace-{rung}.json").write_text(json.dumps([list(s) for s in trace]))
        report["rungs"][rung] = r

        print(f"  {'figure':<40} {'quantladder':>14}       | reference", flush=True)
        line(f"pp{a.n_prompt} tokens/s", speed["pp_tokens_per_s"], ref.get("pp_tokens_per_s"), "t/s", "llama-bench")
        line(f"tg{a.n_gen} tokens/s", speed["tg_tokens_per_s"], ref.get("tg_tokens_per_s"), "t/s", "llama-bench")
        line("peak process memory", mem.get("peak_mem_bytes"), smi_during.get("proc_mem_bytes"), "B", "nvidia-smi")
        line("  (method)", mem.get("method"))
        line("card used memory at peak", mem.get("peak_dev_used_bytes"), smi_during.get("dev_mem_used_bytes"), "B", "nvidia-smi")
        line("predicted weights + KV", float(info.tensor_bytes + r["predicted_kv_bytes"]), None, "B")
        line("bytes read per generated token", bpt, None, "B")
        line("tg roofline (measured copy bw)", roof_m, None, "t/s")
        line("tg roofline (datasheet bw)", roof_s, None, "t/s")
        if roof_m:
            line("tg / roofline (measured bw)", speed["tg_tokens_per_s"] / roof_m)
        if roof_s:
            line("tg / roofline (datasheet bw)", speed["tg_tokens_per_s"] / roof_s)
        if en.get("status") == "absent":
            print(f"  energy: absent ({en.get('status_reason')})", flush=True)
        else:
            line("energy method", en.get("method"))
            line("mean power (whole run)", en.get("mean_power_w"), smi_during.get("power_w"), "W", "nvidia-smi now")
            line("idle power", (en.get("idle") or {}).get("idle_power_w"), None, "W")
            line("net energy", en.get("net_energy_j"), None, "J")
            line("  ± (1 s.e.)", en.get("net_err_j"), None, "J")
            line("J per prompt token", en.get("joules_per_prompt_token"), None, "J/token")
            line("  ±", en.get("joules_per_prompt_token_err"), None, "J/token")
            line("J per generated token", en.get("joules_per_generated_token"), None, "J/token")
            line("  ±", en.get("joules_per_generated_token_err"), None, "J/token")
            line("samples / gaps / wraps / resets",
                 f"{en.get('n_samples')}/{en.get('n_gaps')}/{en.get('counter_wraps')}/{en.get('counter_resets')}")
        ok_pp = ref.get("pp_tokens_per_s") and abs(speed["pp_tokens_per_s"] / ref["pp_tokens_per_s"] - 1) <= 0.05
        ok_tg = ref.get("tg_tokens_per_s") and abs(speed["tg_tokens_per_s"] / ref["tg_tokens_per_s"] - 1) <= 0.05
        print(f"  targets: pp within ±5% of llama-bench: {bool(ok_pp)}; tg within ±5%: {bool(ok_tg)}; "
              f"tg ≥ 70% of roofline (datasheet bw): {bool(roof_s and speed['tg_tokens_per_s'] >= 0.7 * roof_s)}",
              flush=True)
        q.unlink(missing_ok=True) if len(a.rungs) > 1 else None
    if reader is not None:
        reader.close()
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
