#!/usr/bin/env python3
"""Generation under CPU contention: the thread settings ggml offers, side by side, replies compared.

A generate job on a 2-core host with other work on it ran 15x slower at 2 threads than at 1 (issue
41, case 9): ggml's worker threads meet at a barrier after every graph node, and this build's
threads are OpenMP's (libgomp), which spin at that barrier before they sleep; when the host
deschedules one of them, the others spin through their time slices waiting for it. The settings
measured here, each in a fresh process (libgomp reads its environment once, at load):

- ``threads`` N (``EngineSettings.n_threads``), and N from the process's real CPU allowance
  (``quantladder.engine.usable_cores``: affinity and the cgroup's CPU quota);
- ``OMP_WAIT_POLICY=PASSIVE``: a thread at a barrier sleeps at once instead of spinning;
- ``GOMP_SPINCOUNT=N``: how long it spins first (libgomp's default is 300,000 iterations unless
  OMP_WAIT_POLICY says otherwise).

Under ``--load K`` busy processes (the contention: K CPU-bound loops beside the job, as another job,
a browser or a CI runner would be), each setting decodes the same prompts greedily, rounds
interleaved (the order rotates every round); it prints wall seconds per setting (median, min, max
over rounds), and whether every setting's replies are byte-identical to the first's.

    .venv/bin/python benchmarks/contention.py --rung Q4_K_M --load 1 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, embedded_ladder, fmt_table

PROMPTS = ["Write a short story about a lighthouse keeper.", "Explain how a compiler works, step by step.",
           "List ten uses of a paperclip and say why each works."]

SETTINGS = {  # name -> (threads, extra environment)
    "2 threads (spin, today's default)": (2, {}),
    "2 threads, OMP_WAIT_POLICY=PASSIVE": (2, {"OMP_WAIT_POLICY": "PASSIVE"}),
    "2 threads, GOMP_SPINCOUNT=1000": (2, {"GOMP_SPINCOUNT": "1000"}),
    "1 thread": (1, {}),
}


def child(model: str, threads: int, n_tokens: int) -> None:
    sys.path.insert(0, str(REPO / "workflow"))
    from quantladder.engine import Engine, EngineSettings

    eng = Engine(model, EngineSettings(n_ctx=512, n_threads=threads))
    t0 = time.perf_counter()
    texts = [eng.generate(eng.chat_prompt([{"role": "user", "content": p}]), n_tokens).text for p in PROMPTS]
    dt = time.perf_counter() - t0
    print(json.dumps({"seconds": dt, "replies_sha256": hashlib.sha256("\0".join(texts).encode()).hexdigest()}))


def busy() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rung", default="Q4_K_M")
    ap.add_argument("--model", help="a GGUF file (default: the embedded SmolLM2 rung)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per prompt")
    ap.add_argument("--load", type=int, default=1, help="busy processes beside the job")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], int(a.child[1]), a.tokens)
    model = a.model or str(embedded_ladder([a.rung], REPO / "resources" / "bench-models")[a.rung])
    names = list(SETTINGS)
    times: dict[str, list[float]] = {n: [] for n in names}
    hashes: dict[str, set[str]] = {n: set() for n in names}
    loads = [busy() for _ in range(a.load)]
    try:
        for r in range(a.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                threads, extra = SETTINGS[n]
                env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
                out = subprocess.run([sys.executable, __file__, "--tokens", str(a.tokens), "--child", model, str(threads)],
                                     env={**env, **extra}, capture_output=True, text=True, check=True)
                rec = json.loads(out.stdout.strip().splitlines()[-1])
                times[n].append(rec["seconds"])
                hashes[n].add(rec["replies_sha256"])
    finally:
        for p in loads:
            p.kill()
    first = next(iter(hashes[names[0]]))
    rows = []
    for n in names:
        ts = sorted(times[n])
        rows.append([n, f"{ts[len(ts) // 2]:.2f}", f"{ts[0]:.2f}", f"{ts[-1]:.2f}",
                     "yes" if hashes[n] == {first} else f"no ({len(hashes[n])} variants)"])
    print(f"{Path(model).name}: {len(PROMPTS)} prompts x {a.tokens} tokens, {a.load} busy process(es) beside, "
          f"{a.rounds} rounds, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(fmt_table(["setting", "median s", "min s", "max s", "replies identical to the first"], rows))


if __name__ == "__main__":
    main()
