#!/usr/bin/env python3
"""Speed: quantladder's pp/tg tokens/s beside llama-bench's on the same files and threads.

    .venv/bin/python benchmarks/speed_parity.py --rungs Q8_0 Q4_K_M --reps 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from _common import REPO, embedded_ladder, fmt_table, tool

from quantladder.measures import speed


def llama_bench(exe, model, n_prompt, n_gen, reps, threads):
    cmd = [exe, "-m", str(model), "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "-t", str(threads),
           "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"llama-bench failed:\n{r.stderr[-3000:]}")
    out = {}
    for t in json.loads(r.stdout):
        key = "pp" if t["n_prompt"] and not t["n_gen"] else "tg"
        out[key] = (t["avg_ts"], t["stddev_ts"])
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
    ap.add_argument("--tools-dir")
    ap.add_argument("--workdir", default=str(REPO / "build" / "parity"))
    a = ap.parse_args()
    exe = tool("llama-bench", a.tools_dir)
    files = {Path(m).stem: Path(m) for m in a.models} if a.models else embedded_ladder(a.rungs, Path(a.workdir) / "models")
    rows = []
    for name, path in files.items():
        lb = llama_bench(exe, path, a.n_prompt, a.n_gen, a.reps, a.threads)
        ql = speed.measure(str(path), n_prompt=a.n_prompt, n_gen=a.n_gen, repetitions=a.reps, n_threads=a.threads,
                           n_gpu_layers=a.gpu_layers)
        for key, label in (("pp", f"pp{a.n_prompt}"), ("tg", f"tg{a.n_gen}")):
            q = (ql[key]["mean_tokens_per_s"], ql[key]["sd_tokens_per_s"])
            l = lb[key]
            rows.append([name, label, f"{q[0]:.1f} ± {q[1]:.1f}", f"{l[0]:.1f} ± {l[1]:.1f}", f"{100 * (q[0] / l[0] - 1):+.1f}%"])
    print(f"threads {a.threads}, repetitions {a.reps} (tokens/s, mean ± sd over repetitions)")
    print(fmt_table(["model", "test", "quantladder tokens/s", "llama-bench tokens/s", "Δ"], rows))


if __name__ == "__main__":
    main()
