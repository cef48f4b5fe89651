#!/usr/bin/env python3
"""Perplexity and KL divergence: quantladder beside llama.cpp's own llama-perplexity.

Same GGUF files, same corpus (any corpus of the config, or a file), same n_ctx and batch, same
threads, full sliding-window KV streams on both sides (llama-perplexity ``--swa-full``).
llama-perplexity first writes its KL base from the reference rung (--kl-divergence-base), then each
rung is run in its --kl-divergence mode; quantladder stores its reference log-probs once and runs
each rung once. Every run is its own process, so each has its own peak RSS (from wait4).
Prints both figures, both wall times and both peak RSS side by side, and the deviations against
the targets (PPL within 0.1 %, mean KLD within 2 %, same-top within 0.2 points, time ≤ 1.10×).

    .venv/bin/python benchmarks/ppl_parity.py --chunks 20 --rungs Q8_0 Q4_K_M Q2_K
    .venv/bin/python benchmarks/ppl_parity.py --corpus manual-ja --chunks 8
    # long documents at the model's trained context (n_ctx > batch: scored piece by piece here)
    .venv/bin/python benchmarks/ppl_parity.py --family gemma3-270m --corpus manual-en.full \\
        --n-ctx 32768 --batch 512 --chunks 1 --rungs Q4_K_M

A chat corpus is rendered through the reference rung's template; llama-perplexity cannot parse the
template's special tokens (it tokenizes plain text), so both sides read that text without special
parsing here, for the same tokens (the measure itself parses them: docs/corpora.md).

Every run has an address-space limit (--max-mem-gib), so that no run can push the machine into
the OOM killer: llama-perplexity reserves n_ctx x n_vocab float32 for the logits of a chunk when
n_ctx > n_batch and, writing its KL base, n_ctx x n_vocab uint16 more; where that exceeds the
limit its allocation fails at once and the table says so, beside what it would have needed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, embedded_ladder, fmt_table, mean_sd, tool

NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
GIB = 2**30


def _wait_rss(cmd: list[str], limit_bytes: int | None) -> tuple[int, str, float, int]:
    """Run cmd; returns (returncode, output, seconds, peak RSS bytes of that process alone)."""
    import resource

    def limit():
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))  # never the OOM killer

    import threading

    from quantladder.measures.memory import vm_hwm_bytes

    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit)
        # The child's own high-water mark, read while it runs: wait4's ru_maxrss would start from this
        # driver's resident set (ru_maxrss survives fork and exec). VmHWM only grows, so the last reading
        # before exit is its peak to within the 20 ms between readings after the last allocation.
        hwm = [0]
        done = threading.Event()

        def poll():
            while not done.wait(0.02):
                hwm[0] = max(hwm[0], vm_hwm_bytes(p.pid) or 0)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        _, status, ru = os.wait4(p.pid, 0)
        done.set()
        th.join()
        dt = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    return p.returncode, text, dt, hwm[0] or ru.ru_maxrss * 1024


def llama_perplexity(exe, model, corpus, n_ctx, n_batch, chunks, threads, fa, limit, kl_base=None, kl=False):
    from quantladder.tool_gates import perplexity_command

    cmd = perplexity_command(exe, model, corpus, n_ctx=n_ctx, n_batch=n_batch, chunks=chunks, threads=threads,
                             flash_attn=fa == "on")
    if kl_base:
        cmd += ["--kl-divergence-base", str(kl_base)]
    if kl:
        cmd += ["--kl-divergence"]
    rc, out, dt, rss = _wait_rss(cmd, limit)
    res = {"seconds": dt, "peak_rss": rss}
    if rc != 0:
        tail = " | ".join(out.strip().splitlines()[-3:])
        res["failed"] = f"rc {rc}: {tail[-300:]}"
        return res
    m = re.search(r"Final estimate: PPL = " + NUM + r" \+/- " + NUM, out)
    if m:
        res["ppl"], res["ppl_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"Mean PPL\(Q\)\s*:\s*" + NUM + r"\s*±\s*" + NUM, out)
    if m:
        res["ppl"], res["ppl_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"Mean\s+KLD:\s*" + NUM + r"\s*±\s*" + NUM, out)
    if m:
        res["kld"], res["kld_err"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"Same top p:\s*" + NUM + r"\s*±\s*" + NUM, out)
    if m:
        res["same_top"], res["same_top_err"] = float(m.group(1)), float(m.group(2))
    return res


def worker(job: dict) -> dict:
    """One quantladder pass in this process (run as a child: its peak RSS is its own)."""
    sys.path.insert(0, str(REPO / "workflow"))
    from quantladder.engine import RawContext
    from quantladder.measures import perplexity as P

    proto = P.Protocol(n_ctx=job["n_ctx"], n_batch=job["n_batch"], max_chunks=job["chunks"])
    text = Path(job["corpus"]).read_text(encoding="utf-8")
    t0 = time.perf_counter()
    with RawContext(job["model"], n_ctx=proto.context_tokens, n_batch=proto.batch_tokens, n_seq_max=proto.n_seq,
                    n_threads=job["threads"], flash_attn=job["fa"] == "on") as ctx:
        res = P.run(ctx, text, proto, write_reference=job.get("write_reference"),
                    reference=P.ReferenceReader(job["reference"]) if job.get("reference") else None)
    s = P.summarize(res)
    s["seconds"] = time.perf_counter() - t0
    return s


def ours(model, corpus, proto_args, threads, fa, limit, write_reference=None, reference=None):
    job = {"model": str(model), "corpus": str(corpus), **proto_args, "threads": threads, "fa": fa,
           "write_reference": str(write_reference) if write_reference else None,
           "reference": str(reference) if reference else None}
    with tempfile.NamedTemporaryFile("r", suffix=".json") as res_file:
        cmd = [sys.executable, __file__, "--worker", json.dumps(job), "--worker-out", res_file.name]
        rc, out, dt, rss = _wait_rss(cmd, limit)
        if rc != 0:
            return {"failed": f"rc {rc}: {out.strip().splitlines()[-1:]}", "seconds": dt, "peak_rss": rss}
        s = json.loads(Path(res_file.name).read_text())
    s["peak_rss"] = rss
    return s


def family_ladder(name: str, rungs: list[str], work: Path) -> dict[str, Path]:
    """A family of the config: its source acquired (packages, parts, hub), the F16 reference, rungs."""
    sys.path.insert(0, str(REPO / "workflow"))
    from quantladder import config as qconfig
    from quantladder import models

    if name == "smollm2-135m-instruct":
        return embedded_ladder(rungs, work / "models")
    cfg = qconfig.load()
    if name not in cfg["families"]:
        raise SystemExit(f"--family {name}: not a family of config/config.yaml ({sorted(cfg['families'])})")
    fam = cfg["families"][name]
    d = work / "models" / name
    d.mkdir(parents=True, exist_ok=True)
    src = d / "source.gguf"
    if not src.exists():
        models.acquire(fam["source"], src, fam.get("sha256"))
    out = {"F16": d / "F16.gguf"}
    if not out["F16"].exists():
        models.dequantize_to_f16(src, out["F16"])
    for r in rungs:
        out[r] = d / f"{r}.gguf"
        if not out[r].exists():
            models.quantize(out["F16"], out[r], r)
    return out


def corpus_text(name: str | None, path: str | None, reference_model: Path, work: Path) -> Path:
    """The text both sides read: a file as given, or a corpus of the config materialized (a chat
    corpus rendered through the reference rung's template, its markers left as plain text)."""
    if path:
        return Path(path)
    sys.path.insert(0, str(REPO / "workflow"))
    from quantladder import config as qconfig
    from quantladder import corpora

    name = name or "prose-en"
    cfg = qconfig.load()
    if name not in cfg["corpora"]:
        raise SystemExit(f"--corpus {name}: not a corpus of config/config.yaml ({sorted(cfg['corpora'])})")
    c = corpora.build(cfg["corpora"][name])
    text = c.text
    if c.kind == "chat":
        text = corpora.render_chat(text, *corpora.chat_template_of(reference_model), where=name)
    out = work / f"corpus-{name}.txt"
    out.write_text(text, encoding="utf-8")
    return out


def _fmt_times(xs) -> str:
    m, sd, n = mean_sd(xs)
    return f"{m:.1f} ± {sd:.1f}" if n > 1 else f"{m:.1f}"


def _gib(x) -> str:
    return f"{x / GIB:.2f}" if x else "—"


def _kld_delta(ours: float, theirs: float | None) -> str:
    """Relative ΔKLD, or the absolute difference where the reference figure is noise-sized (the
    reference rung against its own base: ~1e-6 nats on both sides, whose ratio means nothing)."""
    if theirs is None:
        return "n/a"
    if abs(theirs) < 1e-4:
        return f"{ours - theirs:+.1e} nats"
    return f"{100 * (ours / theirs - 1):+.2f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rungs", nargs="+", default=["Q8_0", "Q4_K_M", "Q2_K"])
    ap.add_argument("--models", nargs="*", help="GGUF files: the first is the reference (default: the family's ladder)")
    ap.add_argument("--family", default="smollm2-135m-instruct", help="a family of config/config.yaml")
    ap.add_argument("--corpus", help="a corpus of config/config.yaml (default prose-en: CPython's pydoc topics)")
    ap.add_argument("--corpus-file", help="a text file instead")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--flash-attn", choices=["on", "off"], default="off",
                    help="both sides alike: flash attention alone moves PPL by ~0.4%% on Q4_K_M here")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run both sides this many times, interleaved; times are reported as mean ± sd")
    ap.add_argument("--no-self", action="store_true",
                    help="skip the reference rung's pass against its own base (only the base is written)")
    ap.add_argument("--max-mem-gib", type=float, default=16.0,
                    help="address-space limit of every run (no run can push the machine into the OOM killer); "
                         "llama-perplexity is not started where its predicted buffers exceed it")
    ap.add_argument("--tools-dir")
    ap.add_argument("--workdir", default=str(REPO / "build" / "parity"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        Path(a.worker_out).write_text(json.dumps(worker(json.loads(a.worker))))
        return
    exe = tool("llama-perplexity", a.tools_dir)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    files = {Path(m).stem: Path(m) for m in a.models} if a.models else family_ladder(a.family, a.rungs, work)
    names = list(files)
    ref = names[0]
    if a.no_self:  # the reference rung against its own base is a check, not a figure: skip its pass
        names = names[1:]
    corpus = corpus_text(a.corpus, a.corpus_file, files[ref], work)
    text = corpus.read_text(encoding="utf-8")
    proto_args = {"n_ctx": a.n_ctx, "n_batch": a.batch, "chunks": a.chunks}
    limit = int(a.max_mem_gib * GIB)
    sys.path.insert(0, str(REPO / "workflow"))
    from quantladder.gguf_meta import read_info

    info = read_info(files[ref])
    # llama-perplexity's own buffers: logits.reserve(n_ctx x n_vocab) float32 when n_ctx > n_batch,
    # its KL base rows n_ctx x (n_vocab + 4) uint16; plus the model.
    lc_need_base = info.file_bytes + (4 * a.n_ctx * info.n_vocab if a.n_ctx > a.batch else 0) + 2 * a.n_ctx * (info.n_vocab + 4)
    lc_need_kl = info.file_bytes + (4 * a.n_ctx * info.n_vocab if a.n_ctx > a.batch else 0)
    lc_runs = True
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        kl_base = Path(tmp) / "base.kld"
        our_ref = Path(tmp) / "base.qlogits"
        lc, ql, base_lc, base_ql = {}, {}, {}, {}

        def timed(store, name, res):
            # the figures of every repeat are the same; keep the first, collect the times and RSS
            rec = store.setdefault(name, {**res, "times": [], "rss": []})
            rec["times"].append(res["seconds"])
            rec["rss"].append(res.get("peak_rss") or 0)

        for _ in range(a.repeats):
            if lc_runs:
                timed(base_lc, ref, llama_perplexity(exe, files[ref], corpus, a.n_ctx, a.batch, a.chunks, a.threads,
                                                     a.flash_attn, limit, kl_base=kl_base))
            timed(base_ql, ref, ours(files[ref], corpus, proto_args, a.threads, a.flash_attn, limit,
                                     write_reference=our_ref))
        lc_runs = "failed" not in base_lc.get(ref, {})
        base_sizes = (kl_base.stat().st_size if kl_base.exists() else 0, our_ref.stat().st_size if our_ref.exists() else 0)
        for n in names:
            for _ in range(a.repeats):
                if lc_runs:
                    timed(lc, n, llama_perplexity(exe, files[n], corpus, a.n_ctx, a.batch, a.chunks, a.threads,
                                                  a.flash_attn, limit, kl_base=kl_base, kl=True))
                timed(ql, n, ours(files[n], corpus, proto_args, a.threads, a.flash_attn, limit, reference=our_ref))
    rows = []
    for n in names:
        q, l = ql[n], lc.get(n, {})
        if "failed" in q:
            rows.append([n, f"failed: {q['failed']}"] + [""] * 12)
            continue
        l_ok = l and "failed" not in l and "ppl" in l
        why = (f"failed ({l['failed'][:60]})" if l.get("failed") else
               f"not run: its KL base failed (needs {_gib(lc_need_base)} GiB)" if not l else "")
        rows.append([
            n, f"{q['ppl']:.4f}±{q['ppl_err']:.4f}", f"{l['ppl']:.4f}±{l['ppl_err']:.4f}" if l_ok else why,
            f"{100 * (q['ppl'] / l['ppl'] - 1):+.3f}%" if l_ok else "n/a",
            f"{q['kld_mean']:.6f}", f"{l.get('kld', float('nan')):.6f}" if l_ok else "n/a",
            _kld_delta(q["kld_mean"], l.get("kld")) if l_ok else "n/a",
            f"{100 * q['same_top']:.3f}%", f"{l.get('same_top', float('nan')):.3f}%" if l_ok else "n/a",
            f"{100 * q['same_top'] - l.get('same_top', float('nan')):+.3f}" if l_ok else "n/a",
            _fmt_times(q["times"]), _fmt_times(l["times"]) if l_ok else "n/a",
            _gib(max(q["rss"])), _gib(max(l["rss"])) if l else "n/a",
        ])
    print(f"corpus {corpus.name} ({len(text)} chars), n_ctx {a.n_ctx}, batch {a.batch}, chunks {a.chunks}, "
          f"threads {a.threads}, flash attention {a.flash_attn}, vocab {info.n_vocab}, address-space limit "
          f"{a.max_mem_gib} GiB")
    print(f"KL base files: llama.cpp {base_sizes[0] / 2**20:.1f} MiB, quantladder {base_sizes[1] / 2**20:.1f} MiB; "
          f"llama-perplexity's predicted buffers: {_gib(lc_need_base)} GiB writing its base, {_gib(lc_need_kl)} GiB "
          "in --kl-divergence (model + logits reserve + base rows)")
    b_lc = base_lc.get(ref, {})
    lc_base_txt = (f"{_fmt_times(b_lc['times'])} s, peak RSS {_gib(max(b_lc['rss']))} GiB" if "failed" not in b_lc
                   else f"failed after {b_lc['times'][0]:.1f} s: {b_lc['failed']}")
    print(f"reference pass (write base): quantladder {_fmt_times(base_ql[ref]['times'])} s, peak RSS "
          f"{_gib(max(base_ql[ref]['rss']))} GiB; llama-perplexity {lc_base_txt} ({a.repeats} run(s) each, interleaved)")
    print(fmt_table(["rung", "PPL ours", "PPL llama.cpp", "ΔPPL", "KLD ours (nats)", "KLD llama.cpp",
                     "ΔKLD", "same-top ours", "same-top llama.cpp", "Δ (pts)", "ours s", "llama.cpp s",
                     "ours peak RSS GiB", "llama.cpp peak RSS GiB"], rows))


if __name__ == "__main__":
    main()
