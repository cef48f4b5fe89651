#!/usr/bin/env python3
"""DAG scale: how long Snakemake takes to plan a seed-scale ladder (300 GGUF points x 6 measures).

The seed ran ~300 GGUF files as 1,184 one-GPU jobs. Every Slurm job re-parses the Snakefile and
every `snakemake --profile slurm` starts with a DAG build, so planning must stay cheap:
- target: a dry run of the full plan (no files present) in <= 2x the time of a bare Snakefile of
  the same shape (the same points, measures and rule chains, plain patterns, no input functions or
  params), both measured in this run, alternating;
- target: a re-run with nothing to do (every output present) in <= 10 s.
Both are judged on CPU seconds (the wall clock of a shared machine counts other people's load).

    .venv/bin/python benchmarks/dag_scale.py [--families 20] [--rungs 15] [--profile]

It writes a generated config (hub sources, which a dry run never fetches) into a temporary
working directory, times `snakemake -n`, creates every planned output as an empty file (the same
mtime for all, so none is older than its inputs), times `snakemake -n` again, and prints both.
`--profile` runs the first dry run under cProfile and prints where the time goes.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

# Rungs llama-quantize makes without an importance matrix (the IQ series needs one).
PLAIN_RUNGS = ["Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1",
               "Q4_0", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K", "Q2_K_S"]
CARD = "h100-80gb"


def default_config() -> dict:
    """config/config.yaml as a run reads it: the schema's defaults filled in (the file says only what
    differs from the schema)."""
    sys.path.insert(0, str(REPO / "workflow"))
    from quantladder import config as qconfig

    return qconfig.load(qconfig.DEFAULT_CONFIG)


def default_measures() -> tuple[list[str], dict]:
    """The per-point measures of the default config, and every registered task benchmark (all
    switched on, their settings left at the defaults)."""
    sys.path.insert(0, str(REPO / "workflow"))
    from quantladder import benchmarks as registry

    cfg = default_config()
    measures = list(cfg.get("measures", {}))
    benchmarks = {name: dict(sec, enabled=True) for name, sec in (cfg.get("benchmarks") or {}).items()}
    for name in registry.names():
        benchmarks.setdefault(name, {"enabled": True})
    return measures, benchmarks


BARE = """# A bare Snakefile of the same shape: the same points, measures and rule chains as the workflow's
# plan (model acquired then quantized, per-family reference log-probs and anchor gates, one
# perplexity pass per point joined per point, items per family, generate then score), with plain
# patterns only: no input functions, params, resources, scripts or conda environments.
POINTS = {points!r}
MEASURES = {measures!r}
TASKS = {tasks!r}
GATED = ["perplexity", "speed"]
FAMILIES = sorted({{p[0] for p in POINTS}})
METRICS = [f"results/c/points/{{f}}/{{r}}/{{k}}/{{m}}/metrics.json" for f, r, k in POINTS for m in MEASURES + TASKS]


rule all:
    input:
        METRICS,
        "results/c/points.parquet",


rule aggregate:
    input:
        METRICS,
    output:
        "results/c/points.parquet",
    shell:
        "touch {{output}}"


rule source:
    output:
        "resources/models/{{family}}/source.gguf",
    shell:
        "touch {{output}}"


rule model:
    input:
        "resources/models/{{family}}/source.gguf",
    output:
        "resources/models/{{family}}/rungs/{{rung}}.gguf",
    shell:
        "touch {{output}}"


rule corpus:
    output:
        "resources/corpora/text.txt",
    shell:
        "touch {{output}}"


rule reference_logits:
    input:
        "resources/models/{{family}}/source.gguf",
        "resources/corpora/text.txt",
    output:
        "results/c/reference_logits/{{family}}.qlogits",
    shell:
        "touch {{output}}"


rule family_gate:
    input:
        "resources/models/{{family}}/source.gguf",
    output:
        "results/c/anchors/{{gate}}/{{family}}.json",
    wildcard_constraints:
        gate="|".join(GATED),
    shell:
        "touch {{output}}"


rule gate:
    output:
        "results/c/anchors/{{gate}}.json",
    wildcard_constraints:
        gate="[^/]+",
    shell:
        "touch {{output}}"


rule perplexity_pass:
    input:
        "resources/models/{{family}}/rungs/{{rung}}.gguf",
        "resources/corpora/text.txt",
        "results/c/reference_logits/{{family}}.qlogits",
        "results/c/anchors/perplexity/{{family}}.json",
    output:
        "results/c/points/{{family}}/{{rung}}/{{kv}}/perplexity/text/metrics.json",
    shell:
        "touch {{output}}"


rule perplexity_point:
    input:
        "results/c/points/{{family}}/{{rung}}/{{kv}}/perplexity/text/metrics.json",
    output:
        "results/c/points/{{family}}/{{rung}}/{{kv}}/perplexity/metrics.json",
    shell:
        "touch {{output}}"


rule measure_gated:
    input:
        "resources/models/{{family}}/rungs/{{rung}}.gguf",
        "results/c/anchors/{{measure}}/{{family}}.json",
    output:
        "results/c/points/{{family}}/{{rung}}/{{kv}}/{{measure}}/metrics.json",
    wildcard_constraints:
        measure="|".join(m for m in MEASURES if m in GATED and m != "perplexity") or "none",
    shell:
        "touch {{output}}"


rule measure:
    input:
        "resources/models/{{family}}/rungs/{{rung}}.gguf",
        "results/c/anchors/{{measure}}.json",
    output:
        "results/c/points/{{family}}/{{rung}}/{{kv}}/{{measure}}/metrics.json",
    wildcard_constraints:
        measure="|".join(m for m in MEASURES if m not in GATED) or "none",
    shell:
        "touch {{output}}"


rule benchmark_source:
    output:
        "resources/benchmarks/{{task}}/source.json",
    shell:
        "touch {{output}}"


rule items:
    input:
        "resources/benchmarks/{{task}}/source.json",
        "resources/models/{{family}}/source.gguf",
    output:
        "resources/benchmarks/{{task}}/{{family}}/items.jsonl",
    shell:
        "touch {{output}}"


rule generate:
    input:
        "resources/models/{{family}}/rungs/{{rung}}.gguf",
        "resources/benchmarks/{{task}}/source.json",
        "resources/benchmarks/{{task}}/{{family}}/items.jsonl",
        "results/c/anchors/{{task}}.json",
    output:
        "results/c/points/{{family}}/{{rung}}/{{kv}}/{{task}}/generations.jsonl",
    wildcard_constraints:
        task="|".join(TASKS),
    shell:
        "touch {{output}}"


rule score:
    input:
        "results/c/points/{{family}}/{{rung}}/{{kv}}/{{task}}/generations.jsonl",
        "resources/benchmarks/{{task}}/source.json",
        "resources/benchmarks/{{task}}/{{family}}/items.jsonl",
        "results/c/anchors/{{task}}.json",
    output:
        "results/c/points/{{family}}/{{rung}}/{{kv}}/{{task}}/metrics.json",
    wildcard_constraints:
        task="|".join(TASKS),
    shell:
        "touch {{output}}"
"""


def bare_snakefile(cfg: dict) -> str:
    points = []
    for fam, f in cfg["families"].items():
        if not f.get("enabled", True):
            continue
        for r in [f.get("reference", "F16")] + list(f["rungs"]) + list(f.get("prebuilt", {})):
            points.append((fam, r, "f16"))
    measures = [m for m, sec in cfg["measures"].items() if sec.get("enabled", True)]
    tasks = [b for b, sec in cfg.get("benchmarks", {}).items() if sec.get("enabled")]
    return BARE.format(points=points, measures=measures, tasks=tasks)


def scale_config(n_families: int, n_rungs: int, only: list[str] | None = None) -> dict:
    """Half the families quantize their rungs from a hub F16; half take prebuilt hub GGUFs."""
    measures, benchmarks = default_measures()
    if only is not None:
        measures = [m for m in measures if m in only]
        benchmarks = {b: {"enabled": True} for b in only if b not in measures}
    made = PLAIN_RUNGS[: n_rungs - 1]
    families = {}
    for i in range(n_families):
        name = f"fam{i:02d}-{7 + i}b"
        src = {"hf": {"repo_id": f"org{i}/{name}-GGUF", "filename": f"{name}-F16.gguf", "revision": "main"}}
        if i % 2 == 0:
            families[name] = {"source": src, "reference": "F16", "chat": True, "rungs": made}
        else:
            families[name] = {
                "source": src, "reference": "F16", "chat": True, "rungs": [],
                "prebuilt": {r: {"source": {"hf": {"repo_id": f"org{i}/{name}-GGUF",
                                                   "filename": f"{name}-{r}.gguf", "revision": "main"}}}
                             for r in made},
            }
    # Snakemake merges the default config under this one: its own families are switched off, and
    # perplexity takes one pass per point (the bare Snakefile's one job per measure and point)
    default = default_config()
    for name in default.get("families", {}):
        families.setdefault(name, {**default["families"][name], "enabled": False})
    cfg = {"card": CARD, "families": families,
           "measures": {m: {"enabled": m in measures} for m in default.get("measures", {})}}
    if "perplexity" in measures:
        ppl = default["measures"]["perplexity"]
        cfg["measures"]["perplexity"].update(corpus=ppl["corpus"], corpora=[ppl["corpus"]])
    cfg["benchmarks"] = {b: {"enabled": False} for b in default.get("benchmarks", {})}
    cfg["benchmarks"].update(benchmarks)
    return cfg


CPU_S: dict[int, float] = {}


def run(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds (and, in CPU_S[id(proc)], the CPU seconds the command used: on a shared
    machine the wall clock also counts other people's load)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_S[id(proc)] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, proc


def job_total(text: str) -> int | None:
    m = re.search(r"^total\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def planned_outputs(text: str) -> list[str]:
    """Output paths from a verbose dry run's job listing (`    output: a, b`)."""
    outs: list[str] = []
    for m in re.finditer(r"^\s+output: (.+)$", text, re.M):
        outs += [p.strip() for p in m.group(1).split(",") if p.strip()]
    return outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", type=int, default=20)
    ap.add_argument("--rungs", type=int, default=15, help="rungs per family, the reference included")
    ap.add_argument("--measures", default="perplexity,speed,memory,humaneval,bfcl,ruler",
                    help="comma-separated measures and task benchmarks (six, as in the seed's plan)")
    ap.add_argument("--profile", action="store_true", help="cProfile the first dry run")
    ap.add_argument("--keep", action="store_true", help="keep the temporary working directory")
    ap.add_argument("--max-ratio", type=float, default=2.0, help="dry run / bare Snakefile's dry run")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of both dry runs")
    ap.add_argument("--max-noop-s", type=float, default=10.0)
    args = ap.parse_args()

    cfg = scale_config(args.families, args.rungs, args.measures.split(","))
    n_points = sum(1 + len(f["rungs"]) + len(f.get("prebuilt", {})) for f in cfg["families"].values() if f.get("enabled", True))
    on = [m for m, sec in cfg["measures"].items() if sec.get("enabled", True)] + [
        b for b, sec in cfg.get("benchmarks", {}).items() if sec.get("enabled")]
    n_measures = len(on)
    work = Path(tempfile.mkdtemp(prefix="quantladder-dagscale-"))
    try:
        (work / "config").symlink_to(REPO / "config")
        (work / "scale.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        base = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--configfile", "scale.yaml",
                "--cores", "1", "--dry-run"]
        env_note = f"{n_points} points x {n_measures} measures ({', '.join(on)})"
        print(f"plan: {env_note}, card {CARD}, workdir {work}")

        if args.profile:
            prof = work / "plan.prof"
            cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), SNAKEMAKE] + base[1:] + ["--quiet"]
            t, proc = run(cmd, work)
            print(f"profiled dry run: {t:.1f} s (rc {proc.returncode})")
            import pstats
            pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(35)

        bare_dir = work / "bare"
        bare_dir.mkdir()
        (bare_dir / "Snakefile").write_text(bare_snakefile(cfg))
        bare = [SNAKEMAKE, "--snakefile", "Snakefile", "--cores", "1", "--dry-run", "--quiet", "all"]
        plan_s, bare_s, plan_cpu, bare_cpu = [], [], [], []
        for _ in range(max(1, args.rounds)):  # alternating: both see the same machine load
            t, proc = run(base + ["--quiet", "all"], work)
            if proc.returncode != 0:
                print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
                print(f"dry run FAILED after {t:.1f} s")
                return 1
            plan_s.append(t)
            plan_cpu.append(CPU_S[id(proc)])
            jobs = job_total(proc.stdout + proc.stderr)
            tb, pb = run(bare, bare_dir)
            if pb.returncode != 0:
                print(pb.stdout[-3000:], pb.stderr[-3000:], sep="\n")
                return 1
            bare_s.append(tb)
            bare_cpu.append(CPU_S[id(pb)])
            bare_jobs = job_total(pb.stdout + pb.stderr)
        t_plan, t_bare = min(plan_s), min(bare_s)
        ratio = min(plan_cpu) / min(bare_cpu)
        print(f"dry run, nothing present: {t_plan:.1f} s wall, {min(plan_cpu):.1f} s CPU, for {jobs} jobs")
        print(f"bare Snakefile of the same shape: {t_bare:.1f} s wall, {min(bare_cpu):.1f} s CPU, for {bare_jobs} jobs")
        print(f"ratio (CPU seconds, best of {len(plan_s)}): {ratio:.2f}x (target <= {args.max_ratio:.1f}x)")

        # Make every planned output, all with one mtime, then plan again: nothing to do.
        _, verbose = run(base, work)
        outs = planned_outputs(verbose.stdout)
        stamp = time.time() - 60
        for rel in outs:
            p = work / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch()
            os.utime(p, (stamp, stamp))
        t_noop, proc = run(base + ["--quiet", "all"], work)
        text = proc.stdout + proc.stderr
        nothing = "Nothing to be done" in text or job_total(text) in (None, 0)
        cpu_noop = CPU_S[id(proc)]
        print(f"dry run, every output present ({len(outs)} files): {t_noop:.1f} s wall, {cpu_noop:.1f} s CPU, "
              f"{'nothing to do' if nothing else 'jobs left: ' + str(job_total(text))} "
              f"(target <= {args.max_noop_s:.0f} s CPU)")
        # CPU seconds for both targets: on a shared machine the wall clock also counts other load
        ok = proc.returncode == 0 and nothing and ratio <= args.max_ratio and cpu_noop <= args.max_noop_s
        load = os.getloadavg()[0]
        print(f"load average {load:.1f} on {os.cpu_count()} CPUs (targets judged on CPU seconds)")
        print("PASS" if ok else "FAIL")
        if not nothing:
            print(text[-3000:])
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
