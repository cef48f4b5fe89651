#!/usr/bin/env python3
"""Speed: quantladder's pp/tg tokens/s beside llama-bench's on the same files, threads, batch and
flash-attention setting (llama-bench's default `-fa auto` turns it on for a CPU; quantladder's
default is off, and on this CPU it alone moves F16 pp512 by ~20 %, so both sides get `--flash-attn`).

The two sides run in interleaved rounds (llama-bench, then quantladder, `--rounds` times) and every
repetition of every round is pooled: on a shared vCPU the run-to-run drift is as large as the
differences being measured, so one back-to-back pair says little.

    .venv/bin/python benchmarks/speed_parity.py --rungs Q8_0 Q4_K_M --reps 5 --rounds 3

``--depth D`` runs both sides after D tokens in the cache (llama-bench ``-d D``: measures.speed.depths).
``--parallel B ...`` compares the speed measure's tg at B sequences together (``speed.run_parallel``:
measures.speed.parallel) with llama-batched-bench ``-npl B -npp D -ntg N`` (split KV streams of D + N
cells each, built like the workflow's tools: quantladder.llama_tools.extra_tool), S_TG = B·N / t_TG on
both sides; D is ``--depth`` (at least 1: llama-batched-bench decodes a prompt).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np

from _common import REPO, embedded_ladder, fmt_table, mean_sd, tool

from quantladder.measures import speed


def llama_bench(exe, model, n_prompt, n_gen, reps, threads, fa, depth=0):
    cmd = [exe, "-m", str(model), "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "-t", str(threads),
           "-fa", "1" if fa == "on" else "0", "-d", str(depth), "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"llama-bench failed:\n{r.stderr[-3000:]}")
    out = {}
    for t in json.loads(r.stdout):
        key = "pp" if t["n_prompt"] and not t["n_gen"] else "tg"
        out[key] = list(t["samples_ts"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rungs", nargs="+", default=["Q8_0", "Q4_K_M", "Q2_K"])
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--n-prompt", type=int, default=512)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gpu-layers", type=int, default=0)
    ap.add_argument("--flash-attn", choices=["on", "off"], default="off")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of both sides (samples pooled)")
    ap.add_argument("--depth", type=int, default=0, help="tokens in the cache before each test (llama-bench -d)")
    ap.add_argument("--parallel", type=int, nargs="*", default=[],
                    help="also tg at B sequences together beside llama-batched-bench -npl B")
    ap.add_argument("--tools-dir")
    ap.add_argument("--workdir", default=str(REPO / "build" / "parity"))
    a = ap.parse_args()
    exe = tool("llama-bench", a.tools_dir)
    files = {Path(m).stem: Path(m) for m in a.models} if a.models else embedded_ladder(a.rungs, Path(a.workdir) / "models")
    rows = []
    at = f"@d{a.depth}" if a.depth else ""
    bb = None
    if a.parallel:
        from gen_throughput import batched_bench, batched_bench_exe

        bb = batched_bench_exe(a.tools_dir)
        if a.depth < 1:
            raise SystemExit("--parallel needs --depth >= 1 (llama-batched-bench decodes a prompt of that length)")
    for name, path in files.items():
        lb = {"pp": [], "tg": [], **{f"x{b}": [] for b in a.parallel}}
        ql = {"pp": [], "tg": [], **{f"x{b}": [] for b in a.parallel}}
        for _ in range(a.rounds):
            for k, v in llama_bench(exe, path, a.n_prompt, a.n_gen, a.reps, a.threads, a.flash_attn, a.depth).items():
                lb[k] += v
            r = speed.measure(str(path), n_prompt=a.n_prompt, n_gen=a.n_gen, repetitions=a.reps, n_threads=a.threads,
                              n_gpu_layers=a.gpu_layers, flash_attn=a.flash_attn == "on",
                              depths=[a.depth] if a.depth else [])
            for k, res in r.items():  # the tests at the depth llama-bench ran (the empty cache's only without one)
                if ("@" in k) == bool(a.depth):
                    ql[k.split("@")[0]] += res["tokens_per_s"]
            for b in a.parallel:  # S_TG of the whole batch on both sides, one run of reps each
                lb[f"x{b}"].append(batched_bench(bb, path, pp=a.depth, tg=a.n_gen, pl=b, n_ctx_seq=a.depth + a.n_gen,
                                                 threads=a.threads, fa=a.flash_attn, n_batch=2048, n_ubatch=512,
                                                 gpu_layers=a.gpu_layers)["s_tg"])
                q = speed.run_parallel(str(path), n_gen=a.n_gen, n_parallel=b, repetitions=a.reps, n_depth=a.depth,
                                       n_threads=a.threads, n_gpu_layers=a.gpu_layers, flash_attn=a.flash_attn == "on")
                ql[f"x{b}"].append(float(np.mean(q["batch_tokens_per_s"])))
        tests = [("pp", f"pp{a.n_prompt}{at}"), ("tg", f"tg{a.n_gen}{at}")]
        tests += [(f"x{b}", f"tg{a.n_gen}@d{a.depth}x{b} (S_TG)") for b in a.parallel]
        for key, label in tests:
            if not ql[key]:
                continue
            qm, qs, qn = mean_sd(ql[key])
            lm, ls, ln = mean_sd(lb[key])
            # Δ of the means, ± from the two standard errors (first-order propagation)
            d = qm / lm - 1
            de = (qm / lm) * np.sqrt((qs / qm) ** 2 / qn + (ls / lm) ** 2 / ln)
            rows.append([name, label, f"{qm:.1f} ± {qs:.1f}", f"{lm:.1f} ± {ls:.1f}",
                         f"{100 * d:+.1f} ± {100 * de:.1f} %"])
    print(f"threads {a.threads}, flash attention {a.flash_attn}, {a.rounds} interleaved rounds x {a.reps} "
          "repetitions per side (tokens/s: mean ± sd over all repetitions; Δ: difference of the means ± its "
          "standard error)")
    print(fmt_table(["model", "test", "quantladder tokens/s", "llama-bench / llama-batched-bench tokens/s",
                     "Δ of means"], rows))


if __name__ == "__main__":
    main()
