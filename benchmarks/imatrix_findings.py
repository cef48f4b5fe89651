#!/usr/bin/env python3
"""What an importance matrix buys, measured: mean KLD (and PPL) against the F16 reference on a
corpus disjoint from the calibration text, for IQ2_XXS with a matrix vs Q2_K without, and Q4_K_M
with vs without — the issue-15 findings — plus the time each step of the new rungs costs.

The matrix is llama-imatrix's over the config's calibration corpus (quantize.calibration,
imatrix_settings); rungs are quantized through the pipeline's own path (quantladder.models); the
KLD pass is the harness's (llama-perplexity's protocol, the reference's stored log-probs).

    .venv/bin/python benchmarks/imatrix_findings.py --family smollm2-135m-instruct --chunks 16
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _common import REPO, fmt_table

from quantladder import config as qconfig
from quantladder import imatrix, ladder, llama_tools, models
from quantladder.corpora import materialize
from quantladder.engine import RawContext
from quantladder.gguf_meta import read_info
from quantladder.measures import perplexity as P

RUNGS = [("Q2_K", None), ("IQ2_XXS", "matrix"), ("Q4_K_M", None), ("Q4_K_M", "matrix")]


def reference(family: dict, work: Path) -> Path:
    f16 = work / "F16.gguf"
    if not f16.exists():
        src = work / "source.gguf"
        if not src.exists():
            models.acquire(family["source"], src, sha256=family.get("sha256"))
        models.dequantize_to_f16(src, f16)
    return f16


def kld_pass(model: Path, text: str, proto, threads: int, write_reference=None, reference=None) -> dict:
    n = proto.n_seq * proto.n_ctx
    t0 = time.perf_counter()
    with RawContext(str(model), n_ctx=n, n_batch=n, n_seq_max=proto.n_seq, n_threads=threads, flash_attn=False) as ctx:
        res = P.run(ctx, text, proto, write_reference=write_reference,
                    reference=P.ReferenceReader(reference) if reference else None)
    s = P.summarize(res)
    s["seconds"] = time.perf_counter() - t0
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="smollm2-135m-instruct", help="a family of config/config.yaml")
    ap.add_argument("--corpus", default="pydoc-topics", help="the KLD corpus (a corpus of config/config.yaml)")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default=str(REPO / "build" / "findings"))
    a = ap.parse_args()
    cfg = qconfig.load()
    fam = cfg["families"][a.family]
    work = Path(a.workdir) / a.family
    work.mkdir(parents=True, exist_ok=True)
    times = {}
    t0 = time.perf_counter()
    f16 = reference(fam, work)
    times["reference (acquire + dequantize)"] = time.perf_counter() - t0
    tools = llama_tools.ensure()
    calib_name = cfg["quantize"]["calibration"]
    settings = ladder.imatrix_settings(cfg)
    calib = work / f"{calib_name}.txt"
    calib.write_text(materialize(cfg["corpora"][calib_name]), encoding="utf-8")
    evaluation = work / f"{a.corpus}.txt"
    evaluation.write_text(materialize(cfg["corpora"][a.corpus]), encoding="utf-8")
    im = work / imatrix.file_name(calib_name, settings)
    t0 = time.perf_counter()
    if not im.exists():
        imatrix.compute(llama_tools.tool(tools, "llama-imatrix"), f16, calib, im, settings=settings, threads=a.threads)
    times[f"imatrix ({settings['chunks']} x {settings['n_ctx']} tokens)"] = time.perf_counter() - t0
    proto = P.Protocol(n_ctx=a.n_ctx, n_batch=2048, max_chunks=a.chunks)
    text = evaluation.read_text(encoding="utf-8")
    base = work / f"{a.corpus}-n{a.n_ctx}-c{a.chunks}.qlogits"
    if not base.exists():
        ref_summary = kld_pass(f16, text, proto, a.threads, write_reference=base)
        times["reference log-probs pass"] = ref_summary["seconds"]
    rows = []
    for rung, with_matrix in RUNGS:
        name = rung + ("-imat" if with_matrix else "")
        out = work / f"{name}.gguf"
        t0 = time.perf_counter()
        if not out.exists():
            models.quantize(f16, out, rung, imatrix=str(im) if with_matrix else None, n_threads=a.threads)
        times[f"quantize {name}"] = time.perf_counter() - t0
        info = read_info(out)
        s = kld_pass(out, text, proto, a.threads, reference=base)
        times[f"KLD pass {name}"] = s["seconds"]
        rows.append([name, "yes" if with_matrix else "none", f"{info.bits_per_weight:.3f}",
                     ", ".join(f"{k} {v}" for k, v in info.tensor_types.items() if k != "F32"),
                     f"{s['ppl']:.4f} ± {s['ppl_err']:.4f}", f"{s['kld_mean']:.5f} ± {s['kld_mean_err']:.5f}",
                     f"{100 * s['same_top']:.2f} ± {100 * s['same_top_err']:.2f} %"])
        print(" | ".join(rows[-1]), f"| {s['seconds']:.0f} s", flush=True)  # a long run shows its rows as they come
    print(f"family {a.family}; matrix: llama-imatrix over {calib_name} ({settings['chunks']} chunks x "
          f"{settings['n_ctx']}); KLD vs F16 on {a.corpus} ({a.chunks} chunks x {a.n_ctx}, second halves "
          f"scored), flash attention off, {a.threads} threads")
    print(fmt_table(["rung", "matrix", "bits/weight", "tensor types", "PPL", "mean KLD (nats)", "same top"], rows))
    print("\nseconds per step (wall; a shared machine):")
    for k, v in times.items():
        print(f"  {k}: {v:.1f}")


if __name__ == "__main__":
    main()
