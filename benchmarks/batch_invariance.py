#!/usr/bin/env python3
"""Does a reply depend on its batch mates on this card? (docs/generation.md, "Batch invariance")

``kernel``: one decode step's logits, bit for bit. max(B) sequences of one context each decode a prompt
of their own (random tokens, lengths spread so the streams' attention widths differ), alone, as the
engine does; then one token of sequences 0..B-1 is decoded in one ``llama_decode`` for every B of
``--rows``, and each sequence's logits row is compared with the row it gets decoded alone (the
cells a step writes are removed after it, so every step sees the same KV state). Per llama.cpp
setting (``--knob``: weight repacking, flash attention, unified KV, micro-batch, threads; the build
is whichever libllama is loaded, LLAMA_CPP_LIB_PATH picks another): rows identical / rows compared,
and the largest |Δ logit|.

``replies``: the default config's task items (``--limit`` per exam) generated through the real
generation schedule (quantladder.generation.plan: waves, the engine's continuous batching) at every
n_parallel of ``--npl``; per exam, the share of replies byte-identical to n_parallel 1, and for the
first reply that differs, the logits at its first differing token, from a rerun of its wave at both
settings: values that differ, largest |Δ|, and the top-2 margin at n_parallel 1.

``identity``: random prompts on any GGUF (``--models``, ``--gpu-layers``: the GPU device check's),
one wave at each n_parallel: greedy replies identical to the first setting's.

    .venv/bin/python benchmarks/batch_invariance.py kernel --rungs F16 Q8_0 Q4_K_M Q2_K
    .venv/bin/python benchmarks/batch_invariance.py kernel --knob extra_bufts=off
    .venv/bin/python benchmarks/batch_invariance.py kernel --knob batch_invariant=on
    .venv/bin/python benchmarks/batch_invariance.py replies --rung Q4_K_M --npl 1 4 8 16 --limit 10
    python benchmarks/batch_invariance.py identity --models synth-Q4_K_M.gguf --gpu-layers 99 --npl 1 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import REPO, embedded_ladder, fmt_table

# what --knob may set, and how each reads its value
KNOBS = {"extra_bufts": lambda v: v == "on", "flash_attn": lambda v: v == "on", "kv_unified": lambda v: v == "on",
         "n_ubatch": int, "threads": int, "n_batch": int,
         # the engine's batch-invariant mode: the project's llama.cpp patch asked for, repacking off
         "batch_invariant": lambda v: v == "on"}


def parse_knobs(pairs: list[str]) -> dict:
    out = {}
    for p in pairs or []:
        k, _, v = p.partition("=")
        if k not in KNOBS or not v:
            raise SystemExit(f"--knob {p!r}: use one of {sorted(KNOBS)} as name=value")
        out[k] = KNOBS[k](v)
    return out


def build_note() -> str:
    import llama_cpp

    from quantladder import card

    ident = card.identity()
    lib = os.environ.get("LLAMA_CPP_LIB_PATH") or "the venv's libllama"
    return (f"card {ident['label']} (fingerprint {ident['fingerprint']}), {ident['isa']}, "
            f"llama-cpp-python {llama_cpp.__version__}, {lib}; system info: "
            f"{llama_cpp.llama_print_system_info().decode().strip()}")


# -- one decode step, bit for bit -------------------------------------------------------------------

def kernel(model: Path, knobs: dict, rows: list[int], seed: int = 0, gpu_layers: int = 0) -> dict:
    from quantladder.llama_handle import LlamaHandle

    n_ctx_seq = 1024
    n_seq = max(rows)
    threads = knobs.get("threads", 2)
    h = LlamaHandle(str(model), n_ctx=n_seq * n_ctx_seq, n_batch=knobs.get("n_batch", 512),
                    n_ubatch=knobs.get("n_ubatch", 512), n_seq_max=n_seq, type_k="f16", type_v="f16",
                    flash_attn=knobs.get("flash_attn", False), n_threads=threads, n_gpu_layers=gpu_layers,
                    extra_bufts=knobs.get("extra_bufts", not knobs.get("batch_invariant")),
                    kv_unified=knobs.get("kv_unified", False), batch_invariant=knobs.get("batch_invariant", False))
    lc = h.lc
    mem = lc.llama_get_memory(h.ctx)
    rng = np.random.default_rng(seed)
    nb = h.n_batch
    try:
        pos, nxt = [], []
        for s in range(n_seq):
            n = 24 + (s * 131) % 300  # widths of one and two padded 256-cell blocks
            toks = rng.integers(100, h.n_vocab - 100, size=n).astype(np.int32)
            for a in range(0, n, nb):
                m = min(nb, n - a)
                h._tok[:m] = toks[a:a + m]
                h._pos[:m] = np.arange(a, a + m, dtype=np.int32)
                h._set_seq(m, np.full(m, s, dtype=np.int32))
                h._out[:m] = 0
                h._out[m - 1] = int(a + m == n)
                h._decode(m)
            nxt.append(int(np.argmax(h._logits(1)[0])))
            pos.append(n)

        def step(seqs: list[int]) -> np.ndarray:
            m = len(seqs)
            h._tok[:m] = [nxt[s] for s in seqs]
            h._pos[:m] = [pos[s] for s in seqs]
            h._set_seq(m, np.asarray(seqs, dtype=np.int32))
            h._out[:m] = 1
            h._decode(m)
            out = h._logits(m).copy()
            for s in seqs:  # the next step sees the same cells again
                lc.llama_memory_seq_rm(mem, s, pos[s], -1)
            return out

        alone = {s: step([s])[0] for s in range(n_seq)}
        full = step(list(range(n_seq)))  # every sequence with all the others
        res = {}
        for b in rows:
            got = step(list(range(b)))
            same = [bool(np.array_equal(got[j], alone[j])) for j in range(b)]
            res[b] = {"identical_rows": sum(same), "rows": b,
                      "identical_to_full": sum(bool(np.array_equal(got[j], full[j])) for j in range(b)),
                      "max_abs_diff": float(max(np.max(np.abs(got[j] - alone[j])) for j in range(b))),
                      "argmax_same": sum(int(np.argmax(got[j])) == int(np.argmax(alone[j])) for j in range(b))}
        return res
    finally:
        h.close()


def run_kernel(a) -> None:
    knobs = parse_knobs(a.knob)
    ladder = ({Path(m).stem: Path(m) for m in a.models} if a.models
              else embedded_ladder([r for r in a.rungs if r != "F16"], Path(a.workdir) / "models"))
    print(f"# {build_note()}")
    print(f"# knobs: {knobs or 'none (the engine defaults: repacking on, split KV, flash attention off)'}")
    rows, raw = [], {}
    for r in (ladder if a.models else a.rungs):
        t0 = time.perf_counter()
        res = kernel(ladder[r], knobs, a.rows, gpu_layers=a.gpu_layers)
        raw[r] = res
        cells = [f"{v['identical_rows']}/{v['rows']}" + ("" if v["identical_rows"] == v["rows"]
                                                       else f" (≤{v['max_abs_diff']:.2g})")
                 + f" [{v['identical_to_full']}]" for v in res.values()]
        rows.append([r, *cells, f"{time.perf_counter() - t0:.0f}"])
        print(f"  {r}: {cells}", flush=True)
    print(fmt_table(["rung", *[f"B={b}" for b in a.rows], "s"], rows))
    print("# cell: rows of a B-row decode step bit-identical to the same sequence decoded alone "
          f"(largest |Δ logit| where not) [and to its row in the {max(a.rows)}-row step]")
    if a.json:
        Path(a.json).write_text(json.dumps({"knobs": knobs, "build": build_note(), "rungs": raw}, indent=1))


# -- replies ----------------------------------------------------------------------------------------

def traced(driver, log: list):
    """Forward a benchmark's driver, keeping every request's generated tokens (in request order)."""
    req = next(driver)
    while True:
        g = yield req
        log.append(g.tokens)
        try:
            req = driver.send(g)
        except StopIteration as e:
            return e.value


def _build_items(cfg, names, limit, ladder, threads):
    from quantladder.benchmarks import create

    family = next(iter(cfg["families"].values()))
    out = {}
    for name, section in cfg["benchmarks"].items():
        if not section.get("enabled") or (names and name not in names):
            continue
        bench = create(name, section)
        tmp = tempfile.mkdtemp(prefix=f"batchinv-{name}-")
        source = bench.fetch_source(os.path.join(tmp, "source"))
        items, _ = bench.build_items(source, reference_gguf=str(ladder["F16"]), family=family, threads=threads)
        out[name] = (items[:limit] if limit else items, source)
    return out


def load_items(cfg, names, limit, ladder, threads):
    """Each exam's items, built in a process of its own (RULER tokenizes with a default-mode engine,
    and a process keeps the batch mode of its first model load), with its benchmark object."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from quantladder.benchmarks import create

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        built = ex.submit(_build_items, cfg, names, limit, ladder, threads).result()
    return {name: (create(name, cfg["benchmarks"][name]), items, source) for name, (items, source) in built.items()}


def generate(bench, items, source, model, n_par, wave_factor, settings_kw, probe=None):
    """Every item's replies (token tuples per request) through generation.plan's waves at ``n_par``.
    ``probe``: (item id, request index, token index) whose logits row is kept (returned too)."""
    from quantladder import generation
    from quantladder.engine import EngineSettings

    env = bench.open_env(source, "generate")
    replies, texts, kept = {}, {}, {}
    waves = generation.plan(items, bench, n_par, wave_factor)
    engine, ctx = None, None
    try:
        for w in waves:
            if probe and probe[0] not in {it.id for it in w.items}:
                continue
            if ctx != w.n_ctx:
                if engine is not None:
                    engine.close()
                engine = _Probed(str(model), EngineSettings(n_ctx=w.n_ctx, n_parallel=n_par,
                                                            prefix_cache=True, **settings_kw))
                ctx = w.n_ctx
            logs = {it.id: [] for it in w.items}
            drivers = [traced(bench.drive(it, engine, env), logs[it.id]) for it in w.items]
            if probe:
                engine.target = (drivers[[it.id for it in w.items].index(probe[0])], probe[1], probe[2], logs[probe[0]])
            engine.run(drivers, lambda i, rec: texts.__setitem__(w.items[i].id, rec))
            replies.update(logs)
            if probe:
                kept = engine.caught
    finally:
        if engine is not None:
            engine.close()
    return replies, texts, kept


def _probed_class():
    from quantladder.engine import Engine

    class Probed(Engine):
        """The engine, keeping the logits row of one (driver, request, token index)."""

        target = None
        caught: dict = {}
        _rows = None
        _live = None

        def _logits(self, n_rows):
            self._rows = super()._logits(n_rows)
            return self._rows

        def _generate_step(self, live, slots, step, on_finish):
            self._live = list(live)
            try:
                super()._generate_step(live, slots, step, on_finish)
            finally:
                self._live = None

        def _accept(self, k, slots, token, on_finish):
            t = self.target
            s = slots[k]
            if t is not None and s.driver is t[0] and len(t[3]) == t[1] and len(s.tokens) == t[2]:
                row = self._rows[0] if self._live is None else self._rows[self._live.index(k)]
                self.caught = {"logits": row.copy(), "token": token}
            return super()._accept(k, slots, token, on_finish)

    return Probed


_Probed = None


def first_diff(a: list, b: list):
    """(request index, token index) of the first token where two items' replies differ, else None."""
    for r, (x, y) in enumerate(zip(a, b)):
        for t, (p, q) in enumerate(zip(x, y)):
            if p != q:
                return r, t
        if len(x) != len(y):
            return r, min(len(x), len(y))
    return None if len(a) == len(b) else (min(len(a), len(b)), 0)


def run_replies(a) -> None:
    global _Probed
    from quantladder import config as qconfig
    from quantladder.generation_policy import GenerationPolicy

    _Probed = _probed_class()
    knobs = parse_knobs(a.knob)
    kw = {k: v for k, v in {"n_threads": knobs.get("threads", a.threads), "flash_attn": knobs.get("flash_attn"),
                            "n_batch": knobs.get("n_batch"), "extra_bufts": knobs.get("extra_bufts"),
                            "batch_invariant": knobs.get("batch_invariant")}.items()
          if v is not None}
    cfg = qconfig.load(a.config)
    ladder = embedded_ladder([a.rung] if a.rung != "F16" else [], Path(a.workdir) / "models")
    model = ladder[a.rung]
    print(f"# {build_note()}")
    print(f"# rung {a.rung}, knobs {knobs or 'none'}, items: first {a.limit} of each exam", flush=True)
    exams = load_items(cfg, a.benchmarks, a.limit, ladder, a.threads)
    rows, raw = [], {}
    for name, (bench, items, source) in exams.items():
        wf = a.wave_factor or GenerationPolicy.of(cfg, name).wave_factor
        by = {}
        for n in a.npl:
            t0 = time.perf_counter()
            by[n], _, _ = generate(bench, items, source, model, n, wf, kw)
            toks = sum(len(t) for r in by[n].values() for t in r)
            print(f"  {name} n_parallel {n}: {toks} tokens, {time.perf_counter() - t0:.0f} s", flush=True)
        base = by[a.npl[0]]
        cells, probes = [], []
        for n in a.npl[1:]:
            diff = {i: first_diff(base[i], by[n][i]) for i in base}
            same = sum(d is None for d in diff.values())
            cells.append(f"{same}/{len(base)}")
            bad = [(i, d) for i, d in diff.items() if d is not None]
            if bad and a.probe:
                i, (r, t) = bad[0]
                la = generate(bench, items, source, model, a.npl[0], wf, kw, probe=(i, r, t))[2]
                lb = generate(bench, items, source, model, n, wf, kw, probe=(i, r, t))[2]
                if la and lb:
                    x, y = la["logits"], lb["logits"]
                    top = np.sort(x)[-2:]
                    probes.append({"n_parallel": n, "item": i, "request": r, "token": t,
                                   "values_differ": int(np.count_nonzero(x != y)), "of": int(x.size),
                                   "max_abs_diff": float(np.max(np.abs(x - y))),
                                   "top2_margin_alone": float(top[1] - top[0]),
                                   "tokens": [la["token"], lb["token"]]})
                    print(f"    first difference at n_parallel {n}: {probes[-1]}", flush=True)
        rows.append([name, len(base), *cells])
        raw[name] = {"identical": dict(zip(a.npl[1:], cells)), "probes": probes}
    print(fmt_table(["exam", "items", *[f"n_parallel {n} = 1" for n in a.npl[1:]]], rows))
    print(f"# cell: replies byte-identical (every request's tokens) to n_parallel {a.npl[0]}")
    if a.json:
        Path(a.json).write_text(json.dumps({"rung": a.rung, "knobs": knobs, "build": build_note(), "exams": raw},
                                           indent=1, default=str))


# -- random prompts on any GGUF (the device check's; no benchmark data needed) ---------------------

def run_identity(a) -> None:
    """``--prompts`` random prompts of ``--npp`` tokens, ``--ntg`` greedy tokens each, one wave at every
    n_parallel of ``--npl``: replies identical to the first setting's."""
    from quantladder.engine import Engine, EngineSettings, Request

    knobs = parse_knobs(a.knob)
    files = [Path(m) for m in a.models] if a.models else [embedded_ladder([a.rung], Path(a.workdir) / "models")[a.rung]]
    print(f"# {build_note()}")
    rows = []
    for model in files:
        by = {}
        for n in a.npl:
            s = EngineSettings(n_ctx=a.npp + a.ntg, n_parallel=n, n_threads=knobs.get("threads", a.threads),
                               n_gpu_layers=a.gpu_layers, flash_attn=knobs.get("flash_attn"),
                               extra_bufts=knobs.get("extra_bufts", True),
                               batch_invariant=knobs.get("batch_invariant", False))
            with Engine(str(model), s) as eng:
                rng = np.random.default_rng(a.seed)
                prompts = [tuple(int(x) for x in rng.integers(100, eng.n_vocab - 100, size=a.npp))
                           for _ in range(a.prompts)]

                def one(p):
                    return (yield Request(p, a.ntg))

                got = {}
                t0 = time.perf_counter()
                eng.run([one(p) for p in prompts], lambda i, g: got.__setitem__(i, g.tokens))
                by[n] = [got[i] for i in range(len(prompts))]
                print(f"  {model.name} n_parallel {n}: {sum(map(len, by[n]))} tokens, "
                      f"{time.perf_counter() - t0:.1f} s", flush=True)
        base = by[a.npl[0]]
        rows.append([model.name, *[f"{sum(x == y for x, y in zip(base, by[n]))}/{len(base)}" for n in a.npl[1:]]])
    print(fmt_table(["model", *[f"n_parallel {n} = {a.npl[0]}" for n in a.npl[1:]]], rows))
    print(f"# cell: replies (greedy token ids) identical to n_parallel {a.npl[0]}; {a.prompts} random prompts of "
          f"{a.npp} tokens, {a.ntg} tokens each, gpu layers {a.gpu_layers}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["kernel", "replies", "identity"])
    ap.add_argument("--rungs", nargs="+", default=["F16", "Q8_0", "Q4_K_M", "Q2_K"], help="kernel: the rungs")
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 2, 3, 4, 5, 8], help="kernel: rows per step")
    ap.add_argument("--rung", default="Q4_K_M", help="replies: the rung")
    ap.add_argument("--npl", nargs="+", type=int, default=[1, 4, 8, 16], help="replies: n_parallel, the first is the base")
    ap.add_argument("--limit", type=int, default=10, help="replies: the first N items of each exam")
    ap.add_argument("--benchmarks", nargs="*", help="replies: only these exams")
    ap.add_argument("--wave-factor", type=int, help="replies: waves of n_parallel × this (default: the config's)")
    ap.add_argument("--no-probe", dest="probe", action="store_false", help="replies: skip the logits at the first difference")
    ap.add_argument("--models", nargs="*", help="kernel, identity: GGUF files instead of the embedded ladder's rungs")
    ap.add_argument("--prompts", type=int, default=16, help="identity: random prompts")
    ap.add_argument("--npp", type=int, default=64, help="identity: prompt tokens")
    ap.add_argument("--ntg", type=int, default=64, help="identity: tokens generated per prompt")
    ap.add_argument("--gpu-layers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--knob", nargs="*", help=f"llama.cpp settings, name=value: {sorted(KNOBS)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", default=str(REPO / "config" / "config.yaml"))
    ap.add_argument("--workdir", default=str(REPO / "build" / "parity"))
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    {"kernel": run_kernel, "replies": run_replies, "identity": run_identity}[a.what](a)


if __name__ == "__main__":
    main()
