#!/usr/bin/env python3
"""DAG scale: how long Snakemake takes to plan a seed-scale ladder (300 GGUF points x 6 measures).

The seed ran ~300 GGUF files as 1,184 one-GPU jobs. Every Slurm job re-parses the Snakefile and
every `snakemake --profile slurm` starts with a DAG build, so planning must stay cheap:
- target: a dry run of the full plan (no files present) in <= 20 s on this machine,
- target: a re-run with nothing to do (every output present) in <= 10 s.

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


def default_measures() -> tuple[list[str], dict]:
    """The per-point measures of the default config, and every task benchmark that has a rule file
    reading its config section (all switched on, their settings left at the schema defaults)."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    measures = list(cfg.get("measures", {}))
    benchmarks = {name: dict(sec, enabled=True) for name, sec in (cfg.get("benchmarks") or {}).items()}
    rules_text = "\n".join(p.read_text() for p in (REPO / "rules").glob("*.smk"))
    for m in re.finditer(r"config\[\"benchmarks\"\]\[\"([a-z_0-9]+)\"\]", rules_text):
        benchmarks.setdefault(m.group(1), {"enabled": True})
    return measures, benchmarks


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
    cfg = {"card": CARD, "families": families,
           "measures": {m: {"enabled": True} for m in measures}}
    if benchmarks:
        cfg["benchmarks"] = benchmarks
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
    ap.add_argument("--max-plan-s", type=float, default=20.0)
    ap.add_argument("--max-noop-s", type=float, default=10.0)
    args = ap.parse_args()

    cfg = scale_config(args.families, args.rungs, args.measures.split(","))
    n_points = sum(1 + len(f["rungs"]) + len(f.get("prebuilt", {})) for f in cfg["families"].values())
    n_measures = len(cfg["measures"]) + len(cfg.get("benchmarks", {}))
    work = Path(tempfile.mkdtemp(prefix="quantladder-dagscale-"))
    try:
        (work / "config").symlink_to(REPO / "config")
        (work / "scale.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        base = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--configfile", "scale.yaml",
                "--cores", "1", "--dry-run"]
        env_note = f"{n_points} points x {n_measures} measures ({', '.join(list(cfg['measures']) + list(cfg.get('benchmarks', {})))})"
        print(f"plan: {env_note}, card {CARD}, workdir {work}")

        if args.profile:
            prof = work / "plan.prof"
            cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), SNAKEMAKE] + base[1:] + ["--quiet"]
            t, proc = run(cmd, work)
            print(f"profiled dry run: {t:.1f} s (rc {proc.returncode})")
            import pstats
            pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(35)

        t_plan, proc = run(base + ["--quiet", "all"], work)
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
            print(f"dry run FAILED after {t_plan:.1f} s")
            return 1
        jobs = job_total(proc.stdout + proc.stderr)
        cpu_plan = CPU_S[id(proc)]
        print(f"dry run, nothing present: {t_plan:.1f} s wall, {cpu_plan:.1f} s CPU, for {jobs} jobs "
              f"(target <= {args.max_plan_s:.0f} s)")

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
              f"(target <= {args.max_noop_s:.0f} s)")
        ok = proc.returncode == 0 and nothing and t_plan <= args.max_plan_s and t_noop <= args.max_noop_s
        load = os.getloadavg()[0]
        print(f"load average {load:.1f} on {os.cpu_count()} CPUs"
              + ("" if ok else "; with a load above the CPU count, compare the CPU seconds with the targets"))
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
