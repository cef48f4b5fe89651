#!/usr/bin/env python3
"""Batched generation: quantladder's aggregate decode tokens/s beside llama-batched-bench's S_TG,
and the default plan's generation wall time batched vs one sequence at a time.

``tg`` (the default): for each number of sequences B in ``--npl``, both sides decode B prompts of
``--npp`` random tokens and then generate ``--ntg`` tokens per sequence, all B together:

- llama-batched-bench (built from the llama.cpp that llama-cpp-python vendors, like the other
  parity scripts) with ``-npl B -npp P -ntg T``, split KV streams (its default, as the engine's),
  ``-c B × per-sequence context`` so each stream has the engine's ``padded(P + T)`` cells, the same
  threads, batch, micro-batch, flash-attention and GPU-layer settings. S_TG = B·T / t_TG.
- quantladder: ``Engine.run`` with B drivers on an engine of ``n_parallel = B`` and per-sequence
  context ``P + T``, greedy, budget T. Its generation phase starts after the last prompt is decoded
  (the engine decodes each prompt alone, then one token of every sequence per ``llama_decode``);
  S_TG = tokens generated in that phase / its wall time, Python's sampling and bookkeeping included.
  Every sequence runs its whole budget at any B: the engine's ``ignore_eog`` option never selects an
  end-of-generation token (its logit taken as -inf, as llama-server's ``ignore_eos`` does), because
  llama-batched-bench's sequences never stop either (it samples nothing). ``--selection`` picks
  where the greedy token is chosen (EngineSettings.selection: host, backend, auto).
- llama-server (``--server-npl``: the B it runs at), built from the same vendored source
  (quantladder.llama_tools.extra_tool, on demand, cached), ``-np B`` with the same GGUF, threads,
  ``-c B × per-sequence context`` with split KV streams (``--no-kv-unified``), batch, micro-batch,
  flash-attention and GPU-layer settings, its prompt cache off; driven over loopback with B
  concurrent ``/completion`` requests of the same random prompts (token ids), greedy
  (temperature 0), ``n_predict T``, ``ignore_eos``. S_TG = tokens predicted / the longest request's
  ``predicted_ms`` (the server's own timings: all B decode together after their prompts); beside it
  the end-to-end figure of both sides, B·T / the wall time from the first request to the last reply
  (the server decodes the B prompts in one batch, the engine one at a time).

``--both-selections``: the engine once more with llama.cpp's backend sampler selecting (no logits
row copied to the host; EngineSettings.selection), its S_TG beside the engine's with ``--selection``.

All sides run in interleaved rounds (the order rotates each round) and every round is a sample:
tokens/s mean ± sd over rounds, ratio of the means ± its standard error.

``modes``: ``tg`` in the default mode and in the batch-invariant one (``--batch-invariant``: the
project's llama.cpp patch asked for through GGML_CPU_BATCH_INVARIANT_ROWS and weight repacking
off, on both sides), a process per mode and round, interleaved: each mode's S_TG, their ratio, and
llama-batched-bench's under the same settings (docs/generation.md, "Batch invariance").

``plan``: the default config's enabled task benchmarks (HumanEval, RULER; BFCL when enabled), their
items built as the pipeline builds them, generated through the one generation loop on one rung at
``n_parallel = 1`` and at the n_parallel the pipeline would choose (``--vs batching``), or with the
prefix cache off and on at one n_parallel (``--vs cache``); wall time of each, the prompt tokens
decoded, and the share of byte-identical replies between the two sides (batching: the noise floor's
first half, verdict flips need scoring; the cache: all of them, it is exact).

    .venv/bin/python benchmarks/gen_throughput.py --rung Q4_K_M --npl 1 4 8 16 --rounds 5
    .venv/bin/python benchmarks/gen_throughput.py --rung Q4_K_M --npl 8 32 64 --server-npl 8 32 --rounds 2
    .venv/bin/python benchmarks/gen_throughput.py modes --rung Q4_K_M --npl 1 8 16 --rounds 3
    .venv/bin/python benchmarks/gen_throughput.py plan --rung Q4_K_M
    .venv/bin/python benchmarks/gen_throughput.py plan --vs cache --benchmarks ruler --config my.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from _common import REPO, embedded_ladder, fmt_table, mean_sd


def load_note() -> str:
    la = os.getloadavg()
    return f"load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} (1/5/15 min) on {os.cpu_count()} CPUs"


# -- llama-batched-bench --------------------------------------------------------------------------

def extra_exe(name: str, tools_dir: str | None) -> str:
    """llama-batched-bench or llama-server: from --tools-dir, else built like the workflow's other
    llama.cpp tools (quantladder.llama_tools.extra_tool: the same sdist, vendored source, patches,
    backend and CMake flags), on demand and cached beside them once."""
    if tools_dir:
        p = Path(tools_dir) / name
        if not p.exists():
            raise SystemExit(f"{p} not found (--tools-dir)")
        return str(p)
    from quantladder import llama_tools as lt

    t0 = time.perf_counter()
    try:
        exe = lt.extra_tool(name)
    except lt.ToolsError as e:
        raise SystemExit(str(e))
    if time.perf_counter() - t0 > 5:
        rec = json.loads((exe.parent.parent / "build.json").read_text())
        print(f"# built {name} in {rec.get('build_seconds')} s ({rec.get('jobs')} jobs)", flush=True)
    return str(exe)


def batched_bench_exe(tools_dir: str | None) -> str:
    return extra_exe("llama-batched-bench", tools_dir)


def batched_bench(exe, model, *, pp, tg, pl, n_ctx_seq, threads, fa, n_batch, n_ubatch, gpu_layers,
                  repack=True) -> dict:
    cmd = [exe, "-m", str(model), "-c", str(pl * n_ctx_seq), "-b", str(n_batch), "-ub", str(n_ubatch),
           "-npp", str(pp), "-ntg", str(tg), "-npl", str(pl), "-t", str(threads), "-fa", fa,
           "-ngl", str(gpu_layers), "--output-format", "jsonl"] + ([] if repack else ["--no-repack"])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"llama-batched-bench failed ({' '.join(cmd)}):\n{r.stderr[-3000:]}")
    for line in (r.stdout + "\n" + r.stderr).splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            d = json.loads(line)
            if d["pl"] == pl:
                return {"s_tg": d["speed_tg"], "s_pp": d["speed_pp"], "t_tg": d["t_tg"], "n_kv_max": d["n_kv_max"]}
    raise SystemExit(f"llama-batched-bench printed no result for pl={pl}:\n{r.stdout[-2000:]}")


# -- quantladder ----------------------------------------------------------------------------------

def vocab_facts(model) -> tuple[int, frozenset[int]]:
    """The GGUF's vocabulary size and end-of-generation ids (llama.cpp, vocabulary only)."""
    import llama_cpp as lc
    from llama_cpp import _logger

    from quantladder.llama_handle import _quiet_stderr

    _logger.set_verbose(False)  # llama-cpp-python's log callback prints every level until told
    mp = lc.llama_model_default_params()
    mp.vocab_only = True
    with _quiet_stderr(True):
        m = lc.llama_model_load_from_file(str(model).encode(), mp)
    if not m:
        raise SystemExit(f"{model}: llama.cpp could not read its vocabulary")
    try:
        v = lc.llama_model_get_vocab(m)
        n = lc.llama_vocab_n_tokens(v)
        return n, frozenset(t for t in range(n) if lc.llama_vocab_is_eog(v, t))
    finally:
        lc.llama_model_free(m)


def prompts_for(facts: tuple[int, frozenset[int]], pl: int, pp: int, seed: int) -> list[tuple[int, ...]]:
    """Random prompts, like llama-batched-bench's (rand() % n_vocab), end-of-generation ids left out;
    the same for the engine and llama-server in a round."""
    n_vocab, eog = facts
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < pl:
        t = rng.integers(0, n_vocab, size=pp)
        if not eog.intersection(int(x) for x in t):
            out.append(tuple(int(x) for x in t))
    return out


def ours(model, *, pp, tg, pl, threads, fa, n_batch, gpu_layers, seed, repack=True, batch_invariant=False,
         selection="auto", prompts=None) -> dict:
    from quantladder.engine import Engine, EngineSettings, Request

    s = EngineSettings(n_ctx=pp + tg, n_parallel=pl, n_threads=threads, flash_attn=fa == "on",
                       n_batch=n_batch, n_gpu_layers=gpu_layers, extra_bufts=repack, batch_invariant=batch_invariant,
                       selection=selection, ignore_eog=True)  # every sequence runs T tokens, as llama-batched-bench's
    with Engine(str(model), s) as eng:
        def one(p):
            return (yield Request(p, tg))

        facts = (eng.n_vocab, frozenset(int(t) for t in (eng._eog_ids if eng._eog_ids is not None else ())))
        warm = prompts_for(facts, 1, 16, seed + 1)
        eng.run([one(warm[0][:16])], lambda i, g: None)  # warm-up, like llama-batched-bench's
        marks: list[tuple[float, int, int]] = []
        gens = {}
        t0 = time.perf_counter()
        eng.run([one(p) for p in (prompts or prompts_for(facts, pl, pp, seed))], gens.__setitem__,
                lambda n_prompt, n_gen: marks.append((time.perf_counter(), n_prompt, n_gen)))
        t_end = time.perf_counter()
        short = [g.n_gen_tokens for g in gens.values() if g.n_gen_tokens != tg]
        if short:  # ignore_eog makes this impossible: say so rather than measure a smaller batch
            raise SystemExit(f"{len(short)} of {pl} sequences generated fewer than {tg} tokens: {short[:8]}")
        last_pp = max(i for i, m in enumerate(marks) if m[1] > 0)
        t_pp_end = marks[last_pp][0]
        tg_marks = marks[last_pp + 1:]
        n_tg = sum(m[2] for m in tg_marks)
        t_tg = tg_marks[-1][0] - t_pp_end
        return {"s_tg": n_tg / t_tg, "s_pp": pl * pp / (t_pp_end - t0), "t_tg": t_tg, "n_tg": n_tg,
                "s_e2e": pl * tg / (t_end - t0), "gen_steps": eng.last_run["gen_steps"], "resolved": eng.resolved}


# -- llama-server ---------------------------------------------------------------------------------

def server(exe, model, prompts, *, tg, pl, n_ctx_seq, threads, fa, n_batch, n_ubatch, gpu_layers,
           repack=True, timeout=1800.0) -> dict:
    """llama-server -np B on loopback, B concurrent greedy /completion requests of ``prompts``
    (token ids), each to T tokens; S_TG from the server's own timings, the end-to-end figure from
    the wall time of the whole set."""
    from quantladder.llama_server import LlamaServer, ServerError

    args = ["-m", str(model), "-np", str(pl), "-c", str(pl * n_ctx_seq), "--no-kv-unified", "-b", str(n_batch),
            "-ub", str(n_ubatch), "-t", str(threads), "-tb", str(threads), "-fa", fa, "-ngl", str(gpu_layers),
            "-cram", "0", "--no-webui", "-fit", "off", "--threads-http", str(max(4, min(pl, 64)))]
    try:
        srv = LlamaServer(exe, args + ([] if repack else ["--no-repack"]), ready_s=300).start()
    except ServerError as e:
        raise SystemExit(str(e)) from None
    try:
        body = {"n_predict": tg, "ignore_eos": True, "temperature": 0.0, "top_k": 1, "cache_prompt": False,
                "stream": False}
        srv.post("/completion", {**body, "prompt": list(prompts[0][:16]), "n_predict": 4}, timeout)  # warm-up
        out: list = [None] * pl
        errors: list[str] = []

        def one(i):
            try:
                out[i] = srv.post("/completion", {**body, "prompt": list(prompts[i])}, timeout)
            except Exception as e:  # noqa: BLE001 -- reported below with the server's log
                errors.append(f"request {i}: {type(e).__name__}: {e}")

        threads_ = [threading.Thread(target=one, args=(i,)) for i in range(pl)]
        t0 = time.perf_counter()
        for t in threads_:
            t.start()
        for t in threads_:
            t.join()
        wall = time.perf_counter() - t0
        if errors:
            raise SystemExit(f"llama-server: {len(errors)} of {pl} requests failed ({errors[0]}):\n{srv.tail()}")
        n = [int(r["timings"]["predicted_n"]) for r in out]
        if any(x != tg for x in n):
            raise SystemExit(f"llama-server generated {n} tokens, not {tg} each")
        t_gen = max(float(r["timings"]["predicted_ms"]) for r in out) / 1000
        return {"s_tg": sum(n) / t_gen, "s_e2e": sum(n) / wall, "t_tg": t_gen,
                "s_pp": pl * len(prompts[0]) / (max(float(r["timings"]["prompt_ms"]) for r in out) / 1000)}
    finally:
        srv.close()


SIDE_NAMES = {"lb": "llama-batched-bench", "ql": "quantladder", "qb": "quantladder (backend selection)",
              "srv": "llama-server"}


def _ratio(x: list[float], y: list[float]) -> tuple[float, float]:
    """The ratio of the means of x and y, ± from the two standard errors (first-order propagation;
    nan with one round)."""
    (xm, xs, xn), (ym, ys, yn) = mean_sd(x), mean_sd(y)
    ratio = xm / ym
    se = ratio * np.sqrt((xs / xm) ** 2 / xn + (ys / ym) ** 2 / yn) if xn > 1 and yn > 1 else float("nan")
    return ratio, se


def run_tg(a) -> None:
    from quantladder.gguf_meta import padded_ctx

    if a.batch_invariant:  # both sides: the variable before anything is loaded, repacking off
        from quantladder.kv_policy import BATCH_INVARIANT_ROWS
        from quantladder.llama_handle import BATCH_INVARIANT_VAR

        os.environ[BATCH_INVARIANT_VAR] = str(BATCH_INVARIANT_ROWS)
        a.repack = False
    exe = batched_bench_exe(a.tools_dir)
    srv_exe = extra_exe("llama-server", a.tools_dir) if a.server_npl else None
    files = {Path(m).stem: Path(m) for m in a.models} if a.models else {
        a.rung: embedded_ladder([a.rung], Path(a.workdir) / "models")[a.rung]}
    n_ctx_seq = padded_ctx(a.npp + a.ntg)
    n_ubatch = min(a.n_batch, 512)
    print(f"# {load_note()} at the start", flush=True)
    rows, srows, raw = [], [], {}
    for name, path in files.items():
        facts = vocab_facts(path)
        for pl in sorted(set(a.npl) | set(a.server_npl or [])):
            sides = (["lb", "ql"] if pl in a.npl else ["ql"]) + (["qb"] if a.both_selections else []) \
                + (["srv"] if pl in (a.server_npl or []) else [])
            got: dict[str, list[dict]] = {k: [] for k in sides}
            for rnd in range(a.rounds):
                prompts = prompts_for(facts, pl, a.npp, a.seed + rnd)
                order = sides[rnd % len(sides):] + sides[:rnd % len(sides)]  # who goes first rotates
                for side in order:
                    if side == "lb":
                        r = batched_bench(exe, path, pp=a.npp, tg=a.ntg, pl=pl, n_ctx_seq=n_ctx_seq,
                                          threads=a.threads, fa=a.flash_attn, n_batch=a.n_batch,
                                          n_ubatch=n_ubatch, gpu_layers=a.gpu_layers, repack=a.repack)
                    elif side == "srv":
                        r = server(srv_exe, path, prompts, tg=a.ntg, pl=pl, n_ctx_seq=n_ctx_seq, threads=a.threads,
                                   fa=a.flash_attn, n_batch=a.n_batch, n_ubatch=n_ubatch, gpu_layers=a.gpu_layers,
                                   repack=a.repack)
                    else:
                        r = ours(path, pp=a.npp, tg=a.ntg, pl=pl, threads=a.threads, fa=a.flash_attn,
                                 n_batch=a.n_batch, gpu_layers=a.gpu_layers, seed=a.seed + rnd, repack=a.repack,
                                 batch_invariant=a.batch_invariant, prompts=prompts,
                                 selection="backend" if side == "qb" else a.selection)
                    got[side].append({k: v for k, v in r.items() if k != "resolved"})
                print(f"  {name} B={pl} round {rnd + 1}: " + ", ".join(
                    f"{SIDE_NAMES[k]} {got[k][-1]['s_tg']:.1f}" for k in sides) + " tokens/s (S_TG)", flush=True)
            s_tg = {k: [r["s_tg"] for r in v] for k, v in got.items()}
            raw[f"{name}/B{pl}"] = got
            for ref in ("lb", "qb"):
                if ref not in sides:
                    continue
                q, l = s_tg["ql"] if ref == "lb" else s_tg["qb"], s_tg["lb"] if ref == "lb" else s_tg["ql"]
                ratio, se = _ratio(q, l) if ref == "lb" else _ratio(l, q)
                if ref == "lb":
                    rows.append([name, pl, "{:.1f} ± {:.1f}".format(*mean_sd(q)[:2]),
                                 "{:.1f} ± {:.1f}".format(*mean_sd(l)[:2]), f"{ratio:.3f} ± {se:.3f}",
                                 f"{mean_sd([r['s_pp'] for r in got['ql']])[0]:.0f}",
                                 f"{mean_sd([r['s_pp'] for r in got['lb']])[0]:.0f}"])
                else:
                    rows.append([name, pl, "host {:.1f} ± {:.1f}".format(*mean_sd(s_tg["ql"])[:2]),
                                 "backend {:.1f} ± {:.1f}".format(*mean_sd(s_tg["qb"])[:2]),
                                 f"host/backend {ratio:.3f} ± {se:.3f}", "", ""])
            if "srv" in sides:
                e2e = {k: [r["s_e2e"] for r in got[k]] for k in ("ql", "srv")}
                r1, e1 = _ratio(s_tg["ql"], s_tg["srv"])
                r2, e2 = _ratio(e2e["ql"], e2e["srv"])
                srows.append([name, pl, "{:.1f} ± {:.1f}".format(*mean_sd(s_tg["ql"])[:2]),
                              "{:.1f} ± {:.1f}".format(*mean_sd(s_tg["srv"])[:2]), f"{r1:.3f} ± {e1:.3f}",
                              "{:.1f} ± {:.1f}".format(*mean_sd(e2e["ql"])[:2]),
                              "{:.1f} ± {:.1f}".format(*mean_sd(e2e["srv"])[:2]), f"{r2:.3f} ± {e2:.3f}"])
    print(f"\n# {load_note()} at the end")
    print(f"# npp {a.npp}, ntg {a.ntg} (every sequence runs all {a.ntg}: llama-batched-bench samples nothing, the "
          f"engine and llama-server never select an end-of-generation token), per-sequence context {n_ctx_seq} "
          f"cells, threads {a.threads}, flash attention {a.flash_attn}, n_batch {a.n_batch}, gpu layers "
          f"{a.gpu_layers}, engine selection {a.selection}, weight repacking "
          f"{'on' if a.repack else 'off (all sides)'}, batch-invariant "
          f"{'on (all sides: GGML_CPU_BATCH_INVARIANT_ROWS)' if a.batch_invariant else 'off'}, {a.rounds} interleaved "
          "rounds (tokens/s: mean ± sd over rounds; ratio of the means ± its standard error; S_PP: mean, "
          "prompts decoded one by one on our side, all together on llama-batched-bench's)")
    if rows:
        print(fmt_table(["model", "B", "quantladder S_TG", "llama-batched-bench S_TG", "ratio", "ours S_PP",
                         "llama S_PP"], rows))
    if srows:
        print("\n# beside llama-server -np B (B concurrent requests on loopback): S_TG from the server's timings "
              "(tokens / the longest predicted_ms); end to end: B·T / wall time from the first request to the last "
              "reply (the engine: from its first prompt decode, model loaded)")
        print(fmt_table(["model", "B", "quantladder S_TG", "llama-server S_TG", "ratio", "quantladder end to end",
                         "llama-server end to end", "ratio"], srows))
    if a.json:
        Path(a.json).write_text(json.dumps(raw, indent=1))


# -- the batch-invariant mode beside the default ----------------------------------------------------

def run_modes(a) -> None:
    """``tg`` in the default mode and in the batch-invariant one (a process each: ggml reads the
    mode once per process), interleaved round by round, the mode that goes first alternating."""
    from quantladder.llama_handle import BATCH_INVARIANT_VAR

    base = [sys.executable, __file__, "tg", "--rounds", "1", "--npl", *map(str, a.npl), "--npp", str(a.npp),
            "--ntg", str(a.ntg), "--threads", str(a.threads), "--n-batch", str(a.n_batch), "--rung", a.rung,
            "--workdir", a.workdir, *(["--models", *a.models] if a.models else [])]
    got: dict[str, list[dict]] = {"default": [], "batch-invariant": []}
    print(f"# {load_note()} at the start", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            order = ["default", "batch-invariant"][::1 if rnd % 2 == 0 else -1]
            for mode in order:
                out = Path(tmp) / f"{mode}-{rnd}.json"
                env = {k: v for k, v in os.environ.items() if k != BATCH_INVARIANT_VAR}
                cmd = base + ["--seed", str(a.seed + rnd), "--json", str(out)]
                cmd += ["--batch-invariant"] if mode == "batch-invariant" else []
                r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
                got[mode].append(json.loads(out.read_text()))
                print(f"  round {rnd + 1} {mode}: done", flush=True)
    rows, raw = [], {}
    for key in got["default"][0]:
        ours_d = [r["s_tg"] for g in got["default"] for r in g[key]["ql"]]
        ours_i = [r["s_tg"] for g in got["batch-invariant"] for r in g[key]["ql"]]
        lb_d = [r["s_tg"] for g in got["default"] for r in g[key]["lb"]]
        lb_i = [r["s_tg"] for g in got["batch-invariant"] for r in g[key]["lb"]]
        (dm, ds, dn), (im, is_, in_) = mean_sd(ours_d), mean_sd(ours_i)
        ratio = im / dm
        se = ratio * np.sqrt((is_ / im) ** 2 / in_ + (ds / dm) ** 2 / dn) if dn > 1 and in_ > 1 else float("nan")
        lm = mean_sd(lb_i)[0]
        rows.append([key, f"{dm:.1f} ± {ds:.1f}", f"{im:.1f} ± {is_:.1f}", f"{ratio:.3f} ± {se:.3f}",
                     f"{mean_sd(lb_d)[0]:.1f}", f"{lm:.1f}", f"{im / lm:.3f}"])
        raw[key] = {"default": ours_d, "batch_invariant": ours_i, "llama_batched_bench_default": lb_d,
                    "llama_batched_bench_batch_invariant": lb_i}
    print(f"\n# {load_note()} at the end")
    print(f"# npp {a.npp}, ntg {a.ntg}, threads {a.threads}; {a.rounds} interleaved rounds, a process per mode and "
          "round; S_TG tokens/s mean ± sd; batch-invariant: the project's patch (GGML_CPU_BATCH_INVARIANT_ROWS) "
          "and weight repacking off, on both sides")
    print(fmt_table(["model/B", "ours S_TG default", "ours S_TG batch-invariant", "invariant / default",
                     "llama-batched-bench default", "llama-batched-bench invariant", "ours / llama (invariant)"],
                    rows))
    if a.json:
        Path(a.json).write_text(json.dumps(raw, indent=1))


# -- the default plan -----------------------------------------------------------------------------

def _side(side: tuple[int, bool]) -> str:
    return f"n_parallel {side[0]}, cache {'on' if side[1] else 'off'}"


def run_plan(a) -> None:
    from quantladder import config as qconfig
    from quantladder import generation
    from quantladder.benchmarks import create
    from quantladder.engine import Engine, EngineSettings
    from quantladder.generation_policy import GenerationPolicy
    from quantladder.gguf_meta import read_info

    cfg = qconfig.load(a.config)
    ladder = embedded_ladder([a.rung], Path(a.workdir) / "models")
    model = ladder[a.rung]
    info = read_info(model)
    family = next(iter(cfg["families"].values()))
    print(f"# {load_note()} at the start", flush=True)
    rows = []
    for name, section in cfg["benchmarks"].items():
        if not section.get("enabled") or (a.benchmarks and name not in a.benchmarks):
            continue
        bench = create(name, section)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                source = bench.fetch_source(os.path.join(tmp, "source"))
                items, _ = bench.build_items(source, reference_gguf=str(ladder["F16"]), family=family,
                                             threads=a.threads)
            except Exception as e:  # a benchmark whose data is not here: say so, go on
                print(f"# {name}: skipped ({type(e).__name__}: {e})")
                continue
            if a.limit:
                items = items[:a.limit]
            policy = GenerationPolicy.of(cfg, name)
            n_auto = policy.n_parallel_for(info, max(bench.n_ctx(it) for it in items), "f16")
            cache = policy.prefix_cache
            if a.vs == "batching":  # (n_parallel, prefix_cache) of side A, side B
                sides = [(1, cache), (n_auto, cache)]
            else:
                n_sel = a.n_parallel or n_auto
                sides = [(n_sel, False), (n_sel, True)]
            env = bench.open_env(source, "generate")
            out = {}
            for side in (sides if a.first == "a" else sides[::-1]):
                n_par, pc = side
                store = Path(tmp) / f"store-{n_par}-{pc}"
                store.mkdir()
                loop = generation.Loop(
                    bench, items, key=f"plan-{n_par}", store_dir=store, n_parallel=n_par,
                    wave_factor=policy.wave_factor,
                    engine_for=lambda n_ctx, n_par=n_par, pc=pc: Engine(str(model), EngineSettings(
                        n_ctx=n_ctx, n_parallel=n_par, n_threads=a.threads, prefix_cache=pc)),
                    label=f"{name} n_parallel={n_par} prefix_cache={pc}", env=env)
                t0 = time.perf_counter()
                res = loop.run()
                groups = res.meta["groups"].values()
                decoded = sum(g["prompt_tokens"] - g["kept_tokens"] - g["cached_tokens"] for g in groups)
                out[side] = (time.perf_counter() - t0, {r["item_id"]: r for r in res.records}, decoded,
                             sum(g["prompt_tokens"] for g in groups))
                print(f"  {name} n_parallel={n_par} prefix_cache={pc}: {out[side][0]:.1f} s, "
                      f"{sum(int(r.get('n_gen_tokens') or 0) for r in res.records)} tokens generated, "
                      f"{decoded} of {out[side][3]} prompt tokens decoded", flush=True)
        (t1, r1, d1, _), (tn, rn, dn, _) = out[sides[0]], out[sides[1]]
        same = sum(1 for k in r1 if k in rn and r1[k]["text"] == rn[k]["text"])
        rows.append([name, len(items), _side(sides[0]), f"{t1:.1f}", _side(sides[1]), f"{tn:.1f}",
                     f"{t1 / tn:.2f}×", f"{d1} → {dn}", f"{same}/{len(r1)} ({100 * same / max(1, len(r1)):.0f} %)"])
    print(f"\n# {load_note()} at the end")
    print(f"# rung {a.rung} of the embedded SmolLM2-135M ladder, threads {a.threads}, flash attention off, "
          "each side run once (wall time of the generation loop, model loads included)")
    print(fmt_table(["benchmark", "items", "side A", "A s", "side B", "B s", "speed-up",
                     "prompt tokens decoded", "byte-identical replies"], rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", choices=["tg", "modes", "plan"], default="tg")
    ap.add_argument("--rung", default="Q4_K_M")
    ap.add_argument("--models", nargs="*", help="GGUF files instead of the embedded ladder's rung")
    ap.add_argument("--npl", nargs="+", type=int, default=[1, 4, 8, 16])
    ap.add_argument("--npp", type=int, default=128)
    ap.add_argument("--ntg", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--gpu-layers", type=int, default=0)
    ap.add_argument("--flash-attn", choices=["on", "off"], default="off")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-repack", dest="repack", action="store_false",
                    help="tg: llama.cpp's CPU weight repacking off on both sides (the batch-invariant setting)")
    ap.add_argument("--batch-invariant", action="store_true",
                    help="tg: the batch-invariant mode on both sides (the project's patch, repacking off)")
    ap.add_argument("--server-npl", nargs="*", type=int, default=[],
                    help="tg: the B at which llama-server -np B runs beside the others (B concurrent requests)")
    ap.add_argument("--selection", choices=["auto", "host", "backend"], default="auto",
                    help="tg: where the engine picks the greedy token (EngineSettings.selection)")
    ap.add_argument("--both-selections", action="store_true",
                    help="tg: the engine with backend selection as one more side (its effect on S_TG)")
    ap.add_argument("--tools-dir", help="a folder with llama-batched-bench (and llama-server), instead of building")
    ap.add_argument("--workdir", default=str(REPO / "build" / "parity"))
    ap.add_argument("--json", help="write every round's figures here: {model/B<n>: {side: [round, ...]}}, sides "
                                   "lb (llama-batched-bench), ql (quantladder), qb (backend selection), srv (llama-server)")
    ap.add_argument("--config", default=str(REPO / "config" / "config.yaml"), help="plan: the config whose plan runs")
    ap.add_argument("--benchmarks", nargs="*", help="plan: only these benchmarks")
    ap.add_argument("--limit", type=int, help="plan: the first N items of each benchmark")
    ap.add_argument("--vs", choices=["batching", "cache"], default="batching",
                    help="plan: n_parallel 1 vs the pipeline's choice (batching), or the prefix cache off vs on")
    ap.add_argument("--n-parallel", type=int, help="plan --vs cache: at this n_parallel (default: the pipeline's)")
    ap.add_argument("--first", choices=["a", "b"], default="a", help="plan: which side runs first")
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    {"plan": run_plan, "modes": run_modes, "tg": run_tg}[a.what](a)


if __name__ == "__main__":
    main()
