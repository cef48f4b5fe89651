#!/usr/bin/env python3
"""Perplexity and KL divergence: quantladder beside llama.cpp's own llama-perplexity.

Same GGUF files, same corpus, same n_ctx and batch, same threads. llama-perplexity first writes
its KL base from the reference rung (--kl-divergence-base), then each rung is run in its
--kl-divergence mode; quantladder stores its reference log-probs once and runs each rung once.
Prints both figures and both wall times side by side, and the deviations against the targets
(PPL within 0.1 %, mean KLD within 2 %, same-top within 0.2 points, time ≤ 1.10×).

    .venv/bin/python benchmarks/ppl_parity.py --chunks 20 --rungs Q8_0 Q4_K_M Q2_K
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time
from pathlib import Path

from _common import REPO, embedded_ladder, fmt_table, mean_sd, tool

from quantladder.corpora import pydoc_topics_text
from quantladder.engine import RawContext
from quantladder.measures import perplexity as P

NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


def llama_perplexity(exe, model, corpus, n_ctx, n_batch, chunks, threads, fa, kl_base=None, kl=False):
    cmd = [exe, "-m", str(model), "-f", str(corpus), "-c", str(n_ctx), "-b", str(n_batch),
           "--chunks", str(chunks), "-t", str(threads), "-fa", fa]
    if kl_base:
        cmd += ["--kl-divergence-base", str(kl_base)]
    if kl:
        cmd += ["--kl-divergence"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise SystemExit(f"llama-perplexity failed:\n{out[-3000:]}")
    res = {"seconds": dt}
    m = re.search(r"Final estimate: PPL = " + NUM + r" \+/- " + NUM, out)
    if m:
        res["ppl"], res["ppl_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"Mean PPL\(Q\)\s*:\s*" + NUM + r"\s*±\s*" + NUM, out)
    if m:
        res["ppl"], res["ppl_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"Mean\s+KLD:\s*" + NUM + r"\s*±\s*" + NUM, out)
    if m:
        res["kld"], res["kld_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"99\.9%\s+KLD:\s*" + NUM, out)
    if m:
        res["kld_p99_9"] = float(m.group(1))
    m = re.search(r"Same top p:\s*" + NUM + r"\s*±\s*" + NUM, out)
    if m:
        res["same_top"], res["same_top_err"] = float(m.group(1)), float(m.group(2))
    return res


def ours(model, text, proto, threads, fa, write_reference=None, reference=None):
    t0 = time.perf_counter()
    n = proto.n_seq * proto.n_ctx
    with RawContext(str(model), n_ctx=n, n_batch=n, n_seq_max=proto.n_seq, n_threads=threads,
                    flash_attn=fa == "on") as ctx:
        res = P.run(ctx, text, proto, write_reference=write_reference,
                    reference=P.ReferenceReader(reference) if reference else None)
    s = P.summarize(res)
    s["seconds"] = time.perf_counter() - t0
    return s


def _fmt_times(xs) -> str:
    m, sd, n = mean_sd(xs)
    return f"{m:.1f} ± {sd:.1f}" if n > 1 else f"{m:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rungs", nargs="+", default=["Q8_0", "Q4_K_M", "Q2_K"])
    ap.add_argument("--models", nargs="*", help="GGUF files: the first is the reference (default: the embedded ladder)")
    ap.add_argument("--corpus", help="text file (default: CPython's pydoc topics)")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--flash-attn", choices=["on", "off"], default="off",
                    help="both sides alike: flash attention alone moves PPL by ~0.4%% on Q4_K_M here")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run both sides this many times, interleaved; times are reported as mean ± sd")
    ap.add_argument("--tools-dir")
    ap.add_argument("--workdir", default=str(REPO / "build" / "parity"))
    a = ap.parse_args()
    exe = tool("llama-perplexity", a.tools_dir)
    work = Path(a.workdir)
    if a.models:
        files = {Path(m).stem: Path(m) for m in a.models}
    else:
        files = embedded_ladder(a.rungs, work / "models")
    names = list(files)
    corpus = Path(a.corpus) if a.corpus else work / "corpus.txt"
    if not a.corpus:
        corpus.write_text(pydoc_topics_text())
    text = corpus.read_text()
    proto = P.Protocol(n_ctx=a.n_ctx, n_batch=a.batch, max_chunks=a.chunks)
    with tempfile.TemporaryDirectory() as tmp:
        kl_base = Path(tmp) / "base.kld"
        our_ref = Path(tmp) / "base.qlogits"
        ref = names[0]
        lc, ql, base_lc, base_ql = {}, {}, {}, {}

        def timed(store, name, res):
            # the figures of every repeat are the same; keep the first, collect the times
            store.setdefault(name, {**res, "times": []})["times"].append(res["seconds"])

        for _ in range(a.repeats):
            timed(base_lc, ref, llama_perplexity(exe, files[ref], corpus, a.n_ctx, a.batch, a.chunks, a.threads,
                                                 a.flash_attn, kl_base=kl_base))
            timed(base_ql, ref, ours(files[ref], text, proto, a.threads, a.flash_attn, write_reference=our_ref))
        base_sizes = (kl_base.stat().st_size, our_ref.stat().st_size)
        for n in names:
            for _ in range(a.repeats):
                timed(lc, n, llama_perplexity(exe, files[n], corpus, a.n_ctx, a.batch, a.chunks, a.threads,
                                              a.flash_attn, kl_base=kl_base, kl=True))
                timed(ql, n, ours(files[n], text, proto, a.threads, a.flash_attn, reference=our_ref))
    rows = []
    for n in names:
        q, l = ql[n], lc[n]
        rows.append([
            n, f"{q['ppl']:.4f}±{q['ppl_err']:.4f}", f"{l['ppl']:.4f}±{l['ppl_err']:.4f}",
            f"{100 * (q['ppl'] / l['ppl'] - 1):+.3f}%",
            f"{q['kld_mean']:.6f}", f"{l.get('kld', float('nan')):.6f}",
            f"{100 * (q['kld_mean'] / l['kld'] - 1):+.2f}%" if l.get("kld") else "n/a",
            f"{100 * q['same_top']:.3f}%", f"{l.get('same_top', float('nan')):.3f}%",
            f"{100 * q['same_top'] - l.get('same_top', float('nan')):+.3f}",
            _fmt_times(q["times"]), _fmt_times(l["times"]), f"{mean_sd(q['times'])[0] / mean_sd(l['times'])[0]:.2f}x",
        ])
    print(f"corpus {corpus} ({len(text)} chars), n_ctx {a.n_ctx}, batch {a.batch}, chunks {a.chunks}, "
          f"threads {a.threads}, flash attention {a.flash_attn}")
    print(f"KL base files: llama.cpp {base_sizes[0] / 2**20:.1f} MiB, quantladder {base_sizes[1] / 2**20:.1f} MiB")
    print(f"reference pass (write base): quantladder {_fmt_times(base_ql[ref]['times'])} s, "
          f"llama-perplexity {_fmt_times(base_lc[ref]['times'])} s ({a.repeats} run(s) each, interleaved)")
    print(fmt_table(["rung", "PPL ours", "PPL llama.cpp", "ΔPPL", "KLD ours (nats)", "KLD llama.cpp",
                     "ΔKLD", "same-top ours", "same-top llama.cpp", "Δ (pts)", "ours s", "llama.cpp s", "time ratio (means)"], rows))


if __name__ == "__main__":
    main()
