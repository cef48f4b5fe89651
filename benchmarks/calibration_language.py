#!/usr/bin/env python3
"""Calibration language x evaluation language, measured: one rung quantized with an importance
matrix from English text and from Spanish text of the same guide (the Debian Reference's
calibration half, docs/corpora.md), and without one; mean KLD against the F16 reference on the
English and the Spanish evaluation half (same paragraphs). The difference between the two
matrices is paired on the same tokens (per-token KLD difference, its mean ± standard error), and
the overlap of every evaluation text with every calibration text is printed beside it.

The matrices are llama-imatrix's (the pipeline's rule imatrix: quantladder.imatrix with the
config's imatrix_settings), the rungs the pipeline's quantize path, the passes the harness's
(llama-perplexity's protocol against the reference's stored log-probs).

    .venv/bin/python benchmarks/calibration_language.py --family gemma3-270m --rung Q4_K_M --chunks 16
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
from _common import REPO, fmt_table

from quantladder import config as qconfig
from quantladder import corpora, imatrix, ladder, llama_tools, models
from quantladder.engine import RawContext
from quantladder.measures import perplexity as P


def _pass(model: Path, text: str, proto, threads: int, **kw) -> dict:
    with RawContext(str(model), n_ctx=proto.context_tokens, n_batch=proto.batch_tokens, n_seq_max=proto.n_seq,
                    n_threads=threads, flash_attn=False) as ctx:
        return P.run(ctx, text, proto, **kw)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="gemma3-270m", help="a family of config/config.yaml")
    ap.add_argument("--rung", default="Q4_K_M")
    ap.add_argument("--calibration", nargs="+", default=["manual-en.calib", "manual-es.calib"])
    ap.add_argument("--evaluation", nargs="+", default=["manual-en", "manual-es"])
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default=str(REPO / "build" / "calibration-language"))
    a = ap.parse_args()
    cfg = qconfig.load()
    fam = cfg["families"][a.family]
    work = Path(a.workdir) / a.family
    work.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}

    def timed(label, fn, *args, **kw):
        t0 = time.perf_counter()
        out = fn(*args, **kw)
        times[label] = time.perf_counter() - t0
        return out

    f16 = work / "F16.gguf"
    if not f16.exists():
        src = work / "source.gguf"
        if not src.exists():
            timed("acquire", models.acquire, fam["source"], src, sha256=fam.get("sha256"))
        timed("dequantize", models.dequantize_to_f16, src, f16)
    texts = {}
    for name in a.calibration + a.evaluation:
        path = work / f"{name}.txt"
        if not path.exists():
            path.write_text(corpora.build(cfg["corpora"][name]).text, encoding="utf-8")
        texts[name] = path
    settings = ladder.imatrix_settings(cfg)
    tools = llama_tools.ensure()
    rungs = {f"{a.rung} (no matrix)": None}
    for cal in a.calibration:
        im = work / imatrix.file_name(cal, settings)
        if not im.exists():
            timed(f"imatrix {cal}", imatrix.compute, llama_tools.tool(tools, "llama-imatrix"), f16, texts[cal], im,
                  settings=settings, threads=a.threads)
        rungs[f"{a.rung} + {cal}"] = im
    files = {}
    for label, im in rungs.items():
        out = work / (a.rung + ("" if im is None else "-" + im.stem) + ".gguf")
        if not out.exists():
            timed(f"quantize {label}", models.quantize, f16, out, a.rung, imatrix=str(im) if im else None,
                  n_threads=a.threads)
        files[label] = out
    proto = P.Protocol(n_ctx=a.n_ctx, n_batch=2048, max_chunks=a.chunks)
    res: dict[tuple[str, str], dict] = {}
    eval_tokens = {}
    for ev in a.evaluation:
        text = texts[ev].read_text(encoding="utf-8")
        base = work / f"{ev}-n{a.n_ctx}-c{a.chunks}.qlogits"
        if not base.exists():
            timed(f"reference pass {ev}", _pass, f16, text, proto, a.threads, write_reference=base)
        for label, model in files.items():
            r = timed(f"KLD pass {label} on {ev}", _pass, model, text, proto, a.threads, reference=P.ReferenceReader(base))
            res[(label, ev)] = r
            eval_tokens[ev] = r["tokens"]
    # what each matrix read (llama-imatrix: the first chunks x n_ctx tokens), in this model's tokens
    with RawContext(str(f16), n_ctx=512, n_batch=512, n_threads=a.threads) as ctx:
        cal_tokens = {c: P.calibration_tokens(ctx, texts[c].read_text(encoding="utf-8"), settings) for c in a.calibration}
    rows = []
    for label in files:
        row = [label]
        for ev in a.evaluation:
            s = P.summarize(res[(label, ev)])
            row.append(f"{s['kld_mean']:.5f} ± {s['kld_mean_err']:.5f}")
        rows.append(row)
    print(f"family {a.family}, rung {a.rung}; matrices: llama-imatrix, {settings['chunks']} x {settings['n_ctx']} tokens "
          f"of each calibration text; KLD vs F16 (nats, full vocabulary, llama-perplexity's protocol) on "
          f"{a.chunks} chunks x {a.n_ctx}, {a.threads} threads, flash attention off")
    print(fmt_table(["rung"] + [f"mean KLD on {ev}" for ev in a.evaluation], rows))
    if len(a.calibration) == 2:
        c1, c2 = (f"{a.rung} + {c}" for c in a.calibration)
        print(f"\npaired on the same tokens: KLD({c1}) − KLD({c2}), mean ± standard error (nats) and relative")
        prow = []
        for ev in a.evaluation:
            d = res[(c1, ev)]["kld"] - res[(c2, ev)]["kld"]
            m, se = _mean_se(d)
            rel = m / float(res[(c2, ev)]["kld"].mean())
            prow.append([ev, f"{m:+.5f} ± {se:.5f}", f"{100 * rel:+.1f} %", f"{m / se:+.1f}" if se else "n/a"])
        print(fmt_table(["evaluation", "Δ KLD", "Δ / KLD(second)", "z"], prow))
    orow = []
    for ev in a.evaluation:
        ev_t = eval_tokens[ev]
        orow.append([ev] + [f"{100 * corpora.ngram_overlap(ev_t, cal_tokens[c], P.OVERLAP_NGRAM)[0]:.2f} %"
                            for c in a.calibration])
    print(f"\ncalibration overlap ({P.OVERLAP_NGRAM}-grams of the model's tokens: share of each pass's n-grams in "
          "the calibration text)")
    print(fmt_table(["evaluation"] + a.calibration, orow))
    print("\nseconds per step (wall; a shared machine):")
    for k, v in times.items():
        print(f"  {k}: {v:.1f}")


if __name__ == "__main__":
    main()
