#!/usr/bin/env python3
"""Find my rung against the full ladder, on the embedded default (docs/find.md).

In a scratch working directory (or --workdir, which a second run reuses), with the default config
and the search of config/examples/find.yaml (or --accept / --family / --mem / --ctx over it):

1. `snakemake results/<card>/find/<family>.json`: the walk, measuring only the rungs it visits;
2. the full ladder on the same items: every candidate's figure files (the walk's points reused);
3. the full ladder's answer: the fixed sequence from the largest candidate down at the whole α
   (quantladder.find.fixed_sequence), and the walk replayed over the full ladder's points.

It prints both answers and what each cost: rungs measured and the job-hours of Snakemake's benchmark
files (the full ladder's measured, not estimated, once step 2 ran).

    .venv/bin/python benchmarks/find_cost.py [--accept "kld:manual-es<=0.1"] [--workdir DIR] [--cores 2]
        [--mtime-only]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from _common import REPO, fmt_table

from quantladder import card as qcard  # noqa: E402  (_common puts the package on the path)
from quantladder import find as qfind  # noqa: E402
from quantladder.io import read_json  # noqa: E402
from quantladder.config import load_config  # noqa: E402

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def _snakemake(workdir: Path, configfile: Path, a, *targets: str) -> None:
    cmd = [SNAKEMAKE, *targets, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--cores", a.cores, *(["--rerun-triggers", "mtime"] if a.mtime_only else []), "--configfile", str(configfile)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    subprocess.run(cmd, check=True, env=env)


def _job_hours(sp: dict, card: str, measured: list[str], candidates: list[str], workdir: Path) -> float:
    """The figures' jobs of the rungs measured, the shared ones, every candidate's quantize (measured)."""
    seen = qfind.benchmark_files(workdir)
    rungs = {r: qfind.job_seconds(sp, card, r, seen) for r in {*candidates, sp["reference"]}}
    total = sum(s for r in measured for rule, s in rungs[r].items() if rule != "quantize")
    total += sum(rungs[r].get("quantize", 0.0) for r in candidates) + sum(rungs[sp["reference"]].values())
    return (total + sum(qfind.job_seconds(sp, card, None, seen).values())) / 3600


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accept", help="the losses accepted (default: the config's find.accept)")
    ap.add_argument("--family")
    ap.add_argument("--mem")
    ap.add_argument("--ctx")
    ap.add_argument("--workdir", help="working directory (default: a new temporary one)")
    ap.add_argument("--cores", default="2")
    ap.add_argument("--mtime-only", action="store_true",
                    help="rerun by file times only (a workdir copied from another run, without its .snakemake)")
    a = ap.parse_args()
    find = dict(yaml.safe_load((REPO / "config" / "examples" / "find.yaml").read_text())["find"])
    find.update({k: v for k, v in (("accept", a.accept), ("family", a.family), ("mem", a.mem), ("ctx", a.ctx)) if v})
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="find-cost-"))
    workdir.mkdir(parents=True, exist_ok=True)
    over = workdir / "find-cost.yaml"
    over.write_text(yaml.safe_dump({"find": find}))
    cfg = load_config([str(over)])
    sp = qfind.spec(cfg)
    card = qcard.label(cfg.get("card"))
    target = qfind.ANSWER.format(card=card, family=sp.family)

    _snakemake(workdir, over, a, target)
    walk = read_json(workdir / target)
    visited = [p["rung"] for p in walk["path"]]
    fit = [c["rung"] for c in walk["candidates"] if c["fits"]]
    walk_h = _job_hours(sp.as_dict(), card, visited, fit, workdir)

    files = [p for r in fit for p in qfind.figure_files(sp, cfg, card, r)] + qfind.reference_files(sp, cfg, card)
    _snakemake(workdir, over, a, *files)
    infos = {r: read_json(workdir / qfind.sidecar(cfg, sp.family, r))["info"] for r in (*sp.rungs, sp.reference)}
    full = qfind.fixed_sequence(sp, cfg, card, infos, workdir)
    replayed = qfind.answer(qfind.replay(sp, cfg, card, infos, workdir))
    full_h = _job_hours(sp.as_dict(), card, fit, fit, workdir)

    print(f"find {sp.family}: accept {', '.join(f.text for f in sp.figures)}; {sp.mem} at {sp.ctx} tokens; "
          f"reference {sp.reference}; one-sided α {sp.alpha:g}; card {card}; workdir {workdir}")
    print("job-hours: the figures' jobs (perplexity passes, generation, scoring) of the rungs measured and the "
          "reference's, plus every candidate's quantize (Snakemake's benchmark files)\n")
    print(fmt_table(["", "answer", "rungs measured", "job-hours", "path / sequence"], [
        ["walk", walk["rung"] or walk["verdict"], f"{len(visited)} of {len(fit)}", f"{walk_h:.4f}",
         " → ".join(f"{p['rung']} ({p['verdict']})" for p in walk["path"])],
        ["full ladder", full["rung"] or "none", f"{len(fit)} of {len(fit)}", f"{full_h:.4f}",
         " → ".join(f"{s['rung']} ({s['verdict']})" for s in full["sequence"])],
        ["walk replayed on the full ladder", replayed["rung"] or replayed["verdict"], "-", "-", "same points"],
    ]))
    print(f"\nthe walk's own estimate of the full ladder: {walk['cost']['full_ladder_job_hours']:.4f} job-hours "
          f"({walk['cost']['full_ladder_estimated_job_hours']:.4f} of it estimated)")
    print("same answer" if full["rung"] == walk["rung"] else
          "answers differ: the walk stops at its first failure below the start, and a step up is tested at a "
          "split level (docs/find.md)")


if __name__ == "__main__":
    main()
