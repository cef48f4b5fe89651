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

Both sides run in interleaved rounds (the side that goes first alternates) and every round is a
sample: tokens/s mean ± sd over rounds, ratio of the means ± its standard error.

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
import time
from pathlib import Path

import numpy as np

from _common import REPO, embedded_ladder, fmt_table, mean_sd


def load_note() -> str:
    la = os.getloadavg()
    return f"load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} (1/5/15 min) on {os.cpu_count()} CPUs"


# -- llama-batched-bench --------------------------------------------------------------------------

def batched_bench_exe(tools_dir: str | None) -> str:
    """llama-batched-bench, built like the workflow's other llama.cpp tools (quantladder.llama_tools:
    the same sdist, vendored source, backend and CMake flags), cached beside them once."""
    if tools_dir:
        p = Path(tools_dir) / "llama-batched-bench"
        if not p.exists():
            raise SystemExit(f"{p} not found (--tools-dir)")
        return str(p)
    import shutil
    import tarfile

    from quantladder import llama_tools as lt
    from quantladder.io import sha256_file

    version, backend = lt.library_version(), lt.library_backend()
    args = lt.cmake_args(backend)
    root = lt.cache_root()
    out = root / f"{lt.build_key(version, backend, args)}-batched-bench"
    exe = out / "bin" / "llama-batched-bench"
    if exe.is_file():
        return str(exe)
    sdist = lt.fetch_sdist(version, root / "sdist")
    work = Path(tempfile.mkdtemp(prefix=".batched-bench.", dir=root))
    try:
        with tarfile.open(sdist) as tar:
            tar.extractall(work, members=[m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name],
                           filter="data")
        src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        lt.apply_patches(src)  # the project's patches, as the library and the tools carry them
        for cmd in (["cmake", "-S", str(src), "-B", str(work / "build"), *args],
                    ["cmake", "--build", str(work / "build"), "-j", str(os.cpu_count() or 1),
                     "--target", "llama-batched-bench"]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"building llama-batched-bench failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
        (out / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / "build" / "bin" / "llama-batched-bench", exe)
        (out / "build.json").write_text(json.dumps({
            "llama_cpp_python": version, "backend": backend, "cmake_args": args,
            "sdist_sha256": sha256_file(sdist), "llama-batched-bench": sha256_file(exe)}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return str(exe)


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

def prompts_for(eng, pl: int, pp: int, seed: int) -> list[tuple[int, ...]]:
    """Random prompts, like llama-batched-bench's (rand() % n_vocab), end-of-generation ids left out."""
    rng = np.random.default_rng(seed)
    lc = eng.lc
    out = []
    while len(out) < pl:
        t = rng.integers(0, eng.n_vocab, size=pp)
        if not any(lc.llama_vocab_is_eog(eng.vocab, int(x)) for x in t):
            out.append(tuple(int(x) for x in t))
    return out


def ours(model, *, pp, tg, pl, threads, fa, n_batch, gpu_layers, seed, repack=True, batch_invariant=False) -> dict:
    from quantladder.engine import Engine, EngineSettings, Request

    s = EngineSettings(n_ctx=pp + tg, n_parallel=pl, n_threads=threads, flash_attn=fa == "on",
                       n_batch=n_batch, n_gpu_layers=gpu_layers, extra_bufts=repack, batch_invariant=batch_invariant)
    with Engine(str(model), s) as eng:
        def one(p):
            return (yield Request(p, tg))

        warm = prompts_for(eng, 1, 16, seed + 1)
        eng.run([one(warm[0][:16])], lambda i, g: None)  # warm-up, like llama-batched-bench's
        # a draw whose greedy replies run the whole budget (a sequence that ends early would leave
        # the batch smaller than B for the rest of the phase)
        for attempt in range(8):
            marks: list[tuple[float, int, int]] = []
            gens = {}
            t0 = time.perf_counter()
            eng.run([one(p) for p in prompts_for(eng, pl, pp, seed + 97 * attempt)], gens.__setitem__,
                    lambda n_prompt, n_gen: marks.append((time.perf_counter(), n_prompt, n_gen)))
            if all(g.n_gen_tokens == tg for g in gens.values()):
                break
        else:
            raise SystemExit(f"no draw of {pl} random prompts ran {tg} tokens without an end-of-generation token")
        last_pp = max(i for i, m in enumerate(marks) if m[1] > 0)
        t_pp_end = marks[last_pp][0]
        tg_marks = marks[last_pp + 1:]
        n_tg = sum(m[2] for m in tg_marks)
        t_tg = tg_marks[-1][0] - t_pp_end
        return {"s_tg": n_tg / t_tg, "s_pp": pl * pp / (t_pp_end - t0), "t_tg": t_tg, "n_tg": n_tg,
                "gen_steps": eng.last_run["gen_steps"], "resolved": eng.resolved}


def run_tg(a) -> None:
    from quantladder.gguf_meta import padded_ctx

    if a.batch_invariant:  # both sides: the variable before anything is loaded, repacking off
        from quantladder.kv_policy import BATCH_INVARIANT_ROWS
        from quantladder.llama_handle import BATCH_INVARIANT_VAR

        os.environ[BATCH_INVARIANT_VAR] = str(BATCH_INVARIANT_ROWS)
        a.repack = False
    exe = batched_bench_exe(a.tools_dir)
    files = {Path(m).stem: Path(m) for m in a.models} if a.models else {
        a.rung: embedded_ladder([a.rung], Path(a.workdir) / "models")[a.rung]}
    n_ctx_seq = padded_ctx(a.npp + a.ntg)
    print(f"# {load_note()} at the start", flush=True)
    rows, raw = [], {}
    for name, path in files.items():
        for pl in a.npl:
            lb, ql, lpp, qpp = [], [], [], []
            for rnd in range(a.rounds):
                order = ("lb", "ql") if rnd % 2 == 0 else ("ql", "lb")
                for side in order:
                    if side == "lb":
                        r = batched_bench(exe, path, pp=a.npp, tg=a.ntg, pl=pl, n_ctx_seq=n_ctx_seq,
                                          threads=a.threads, fa=a.flash_attn, n_batch=a.n_batch,
                                          n_ubatch=min(a.n_batch, 512), gpu_layers=a.gpu_layers,
                                          repack=a.repack)
                        lb.append(r["s_tg"])
                        lpp.append(r["s_pp"])
                    else:
                        r = ours(path, pp=a.npp, tg=a.ntg, pl=pl, threads=a.threads, fa=a.flash_attn,
                                 n_batch=a.n_batch, gpu_layers=a.gpu_layers, seed=a.seed + rnd, repack=a.repack,
                                 batch_invariant=a.batch_invariant)
                        ql.append(r["s_tg"])
                        qpp.append(r["s_pp"])
                print(f"  {name} B={pl} round {rnd + 1}: quantladder {ql[-1]:.1f}, llama-batched-bench "
                      f"{lb[-1]:.1f} tokens/s", flush=True)
            qm, qs, qn = mean_sd(ql)
            lm, ls, ln = mean_sd(lb)
            ratio = qm / lm
            # ratio of the means, ± from the two standard errors (first-order propagation)
            se = ratio * np.sqrt((qs / qm) ** 2 / qn + (ls / lm) ** 2 / ln) if qn > 1 and ln > 1 else float("nan")
            rows.append([name, pl, f"{qm:.1f} ± {qs:.1f}", f"{lm:.1f} ± {ls:.1f}", f"{ratio:.3f} ± {se:.3f}",
                         f"{mean_sd(qpp)[0]:.0f}", f"{mean_sd(lpp)[0]:.0f}"])
            raw[f"{name}/B{pl}"] = {"quantladder_s_tg": ql, "llama_batched_bench_s_tg": lb,
                                    "quantladder_s_pp": qpp, "llama_batched_bench_s_pp": lpp}
    print(f"\n# {load_note()} at the end")
    print(f"# npp {a.npp}, ntg {a.ntg}, per-sequence context {n_ctx_seq} cells, threads {a.threads}, "
          f"flash attention {a.flash_attn}, n_batch {a.n_batch}, gpu layers {a.gpu_layers}, weight repacking "
          f"{'on' if a.repack else 'off (both sides)'}, batch-invariant "
          f"{'on (both sides: GGML_CPU_BATCH_INVARIANT_ROWS)' if a.batch_invariant else 'off'}, {a.rounds} interleaved "
          "rounds (S_TG tokens/s: mean ± sd over rounds; ratio of the means ± its standard error; S_PP: mean, "
          "prompts decoded one by one on our side, all together on llama-batched-bench's)")
    print(fmt_table(["model", "B", "quantladder S_TG", "llama-batched-bench S_TG", "ratio", "ours S_PP",
                     "llama S_PP"], rows))
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
        ours_d = [x for g in got["default"] for x in g[key]["quantladder_s_tg"]]
        ours_i = [x for g in got["batch-invariant"] for x in g[key]["quantladder_s_tg"]]
        lb_d = [x for g in got["default"] for x in g[key]["llama_batched_bench_s_tg"]]
        lb_i = [x for g in got["batch-invariant"] for x in g[key]["llama_batched_bench_s_tg"]]
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
    ap.add_argument("--tools-dir")
    ap.add_argument("--workdir", default=str(REPO / "build" / "parity"))
    ap.add_argument("--json", help="write every round's figures here")
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
