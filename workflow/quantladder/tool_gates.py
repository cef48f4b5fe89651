"""The offline anchor gates: the harness's perplexity and speed beside llama-perplexity and
llama-bench on the family's reference rung, on this card, with the same settings.

The rule (quantladder.anchors, judge_ppl / judge_speed) is said in docs/ladder.md. Both sides
get the same model file, threads, batch sizes, GPU layers and flash-attention setting (the
harness's resolved one for an f16 KV cache: llama-perplexity's and llama-bench's default `auto`
differs, and on a CPU it alone moves Q4_K_M's PPL by 0.4 %, docs/parity.md).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import statistics
import subprocess
import time
from pathlib import Path

from . import anchors, llama_tools
from .measures import speed
from .errors import QuantladderError

NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


class GateError(QuantladderError):
    pass


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _fa_flag(fa: bool) -> str:
    return "on" if fa else "off"


def perplexity_command(exe: str, model: str, corpus: str, *, n_ctx: int, n_batch: int, chunks: int, threads: int,
                       flash_attn: bool, gpu_layers: int = 0) -> list[str]:
    """llama-perplexity with the measures' settings (the gate's and benchmarks/ppl_parity.py's):
    full sliding-window KV streams, as quantladder's contexts keep them (its default, a window-sized
    cache, gives other figures on Gemma-3 rungs: docs/parity.md)."""
    return [exe, "-m", str(model), "-f", str(corpus), "-c", str(n_ctx), "-b", str(n_batch),
            "--chunks", str(chunks if chunks > 0 else -1), "-t", str(threads), "-fa", _fa_flag(flash_attn),
            "-ngl", str(gpu_layers), "--swa-full"]


def llama_perplexity(exe: str, model: str, corpus: str, *, n_ctx: int, n_batch: int, chunks: int, threads: int,
                     flash_attn: bool, gpu_layers: int = 0) -> dict:
    cmd = perplexity_command(exe, model, corpus, n_ctx=n_ctx, n_batch=n_batch, chunks=chunks, threads=threads,
                             flash_attn=flash_attn, gpu_layers=gpu_layers)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise GateError(f"llama-perplexity failed (exit {r.returncode}):\n{out[-2000:]}")
    m = re.search(r"Final estimate: PPL = " + NUM + r" \+/- " + NUM, out)
    if not m:
        raise GateError(f"llama-perplexity printed no final estimate:\n{out[-2000:]}")
    return {"ppl": float(m.group(1)), "ppl_err": float(m.group(2)), "seconds": time.perf_counter() - t0,
            "command": cmd[1:]}


def harness_perplexity(model: str, text: str, *, n_ctx: int, n_batch: int, chunks: int, threads: int,
                       flash_attn: bool, gpu_layers: int = 0) -> dict:
    from .engine import RawContext
    from .measures import perplexity as ppl

    proto = ppl.Protocol(n_ctx=n_ctx, n_batch=n_batch, max_chunks=chunks)
    n = proto.n_seq * proto.n_ctx
    t0 = time.perf_counter()
    with RawContext(model, n_ctx=n, n_batch=n, n_seq_max=proto.n_seq, kv="f16", n_threads=threads,
                    n_gpu_layers=gpu_layers, flash_attn=flash_attn) as ctx:
        res = ppl.run(ctx, text, proto)
        engine = ctx.resolved
    s = ppl.summarize(res)
    return {"ppl": s["ppl"], "ppl_err": s["ppl_err"], "n_tokens": s["n_tokens"], "n_chunks": s["n_chunks"],
            "seconds": time.perf_counter() - t0, "engine": engine}


def _resolved_fa(cfg: dict) -> bool:
    """The flash-attention setting the harness uses for the reference point (f16 KV cache)."""
    fa = cfg["flash_attn"]
    return bool(fa) if fa is not None else False


def _base(cfg, measure, family, card_label, tools, model, model_record, spec) -> dict:
    exe = anchors.tool_gates()[measure]
    return {"benchmark": measure, "family": family, "card": card_label, "checked_at": _now(), "spec": spec,
            "against": {"tool": exe, "binary_sha256": tools["tools"][exe]["sha256"],
                        "tools": llama_tools.identity(tools, exe),
                        "model": {"path": str(model), "rung": model_record.get("rung"),
                                  "sha256": model_record.get("sha256")}}}


def perplexity_gate(cfg: dict, *, family: str, card_label: str, tools: dict, model: str, model_record: dict,
                    corpus: str, threads: int, spec: str) -> dict:
    # the validated config carries the schema's defaults: none is restated here
    gate = anchors.tool_gate_settings(cfg, "perplexity")
    s = cfg["measures"]["perplexity"]
    kw = dict(n_ctx=int(s["n_ctx"]), n_batch=int(s["n_batch"]), chunks=int(s["max_chunks"]), threads=threads,
              flash_attn=_resolved_fa(cfg), gpu_layers=int(cfg["gpu_layers"]))
    doc = _base(cfg, "perplexity", family, card_label, tools, model, model_record, spec)
    theirs = llama_perplexity(llama_tools.tool(tools, "llama-perplexity"), model, corpus, **kw)
    ours = harness_perplexity(model, Path(corpus).read_text(encoding="utf-8"), **kw)
    verdict = anchors.judge_ppl(ours["ppl"], theirs["ppl"], float(gate["tolerance_pct"]))
    doc["against"].update({"settings": {**kw, "corpus": s["corpus"], "swa_full": True}, "ppl": theirs["ppl"],
                           "ppl_err": theirs["ppl_err"], "seconds": theirs["seconds"]})
    doc.update({"status": verdict["status"], "reason": verdict["reason"], "reproduced": ours["ppl"],
                "reproduced_err": ours["ppl_err"], "deviation_pct": verdict["deviation_pct"],
                "tolerance_pct": verdict["tolerance_pct"], "harness": ours})
    return doc


def llama_bench(exe: str, model: str, *, n_prompt: int, n_gen: int, reps: int, threads: int, flash_attn: bool,
                n_batch: int, n_ubatch: int, gpu_layers: int = 0, depths: tuple[int, ...] = ()) -> dict:
    """llama-bench's samples (tokens/s per repetition) by the harness's test key (speed.test_key: ``pp``,
    ``tg``, ``pp@d4096`` ...): depth 0 and each of ``depths`` (``-d``)."""
    cmd = [exe, "-m", str(model), "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "-t", str(threads),
           "-fa", "1" if flash_attn else "0", "-b", str(n_batch), "-ub", str(n_ubatch), "-ngl", str(gpu_layers),
           "-d", ",".join(str(d) for d in (0, *depths)), "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise GateError(f"llama-bench failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    out = {}
    try:
        for t in json.loads(r.stdout):
            kind = "pp" if t["n_prompt"] and not t["n_gen"] else "tg"
            out[speed.test_key(kind, int(t.get("n_depth") or 0))] = [float(x) for x in t["samples_ts"]]
    except (ValueError, KeyError) as e:
        raise GateError(f"llama-bench's JSON was not as expected ({e}):\n{r.stdout[-1000:]}") from e
    return out


def speed_gate(cfg: dict, *, family: str, card_label: str, tools: dict, model: str, model_record: dict,
               threads: int, spec: str) -> dict:
    gate = anchors.tool_gate_settings(cfg, "speed")
    s = cfg["measures"]["speed"]
    kw = dict(n_prompt=int(s["n_prompt"]), n_gen=int(s["n_gen"]), threads=threads, flash_attn=_resolved_fa(cfg),
              n_batch=int(s["n_batch"]), n_ubatch=int(s["n_ubatch"]), gpu_layers=int(cfg["gpu_layers"]),
              depths=tuple(int(d) for d in s["depths"]))
    keys = [speed.test_key(kind, d) for d in (0, *kw["depths"]) for kind in ("pp", "tg")]
    # the validated config carries the schema's defaults: none is restated here (it fell back to 3
    # repetitions where the schema says 5)
    reps = int(s["repetitions"] if gate["repetitions"] is None else gate["repetitions"])
    exe = llama_tools.tool(tools, "llama-bench")
    rounds = {key: ([], []) for key in keys}  # (ours, theirs) per-round means
    for _ in range(int(gate["rounds"])):  # interleaved: llama-bench, then the harness, each round
        lb = llama_bench(exe, model, reps=reps, **kw)
        ql = speed.measure(str(model), n_prompt=kw["n_prompt"], n_gen=kw["n_gen"], repetitions=reps,
                           depths=kw["depths"], n_batch=kw["n_batch"], n_ubatch=kw["n_ubatch"], n_threads=threads,
                           kv="f16", n_gpu_layers=kw["gpu_layers"], flash_attn=kw["flash_attn"])
        for key in rounds:
            if key in ql and key in lb:
                rounds[key][0].append(statistics.fmean(ql[key]["tokens_per_s"]))
                rounds[key][1].append(statistics.fmean(lb[key]))
    tests = []
    for key in keys:
        ours, theirs = rounds[key]
        kind, _, depth = key.partition("@")
        n = kw["n_prompt"] if kind == "pp" else kw["n_gen"]
        if ours:
            tests.append(anchors.judge_speed(ours, theirs, float(gate["tolerance_pct"]),
                                             f"{kind}{n}" + (f"@{depth}" if depth else "")))
    doc = _base(cfg, "speed", family, card_label, tools, model, model_record, spec)
    doc["against"]["settings"] = {**kw, "repetitions": reps, "rounds": int(gate["rounds"])}
    failed = [t for t in tests if t["status"] == "failed"]
    doc.update({"status": "failed" if failed else "passed", "tests": tests,
                "tolerance_pct": float(gate["tolerance_pct"]),
                "reason": "; ".join(t["reason"] for t in failed) or None})
    return doc
