"""Snakemake's own plan: the jobs a run started now would run, and why.

What a run has left is not what is missing on disk. A finished point whose inputs changed (a user's
traffic file laid over the default's, a task file edited, a setting that enters a job's ``params``)
has every file in place, and Snakemake still plans it again: its params, code or inputs changed
(``--rerun-triggers``, all of them by default). Counting files said "26 of 29 finished, about 0.2 min
left" where Snakemake planned 24 jobs (26 min), and the partial report showed the default's traffic
figures as the user's. So the jobs left and the points a partial report may show come from the plan
Snakemake makes itself: its DAG, built as ``snakemake -n`` builds it (no job runs, no lock is taken,
the files of a running job count as not made yet).

The DAG is built in a child process (``python -m quantladder.dryrun``), which prints the plan as
JSON: Snakemake's API changes the working directory and its logging as it parses a workflow, and a
caller (``quantladder report``, the partial_report rule) should keep its own.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from .errors import QuantladderError

SNAKEFILE = Path(__file__).resolve().parents[2] / "Snakefile"  # the checkout this package sits in
# a plan of the full config takes about a minute on 2 cores; past this, the caller goes without
TIMEOUT_S = 600


class PlanError(QuantladderError):
    """Snakemake's plan could not be read (the workflow does not parse, a DAG error)."""


def plan(root: str | os.PathLike = ".", configfiles: Sequence[str | os.PathLike] = (), *,
         snakefile: str | os.PathLike | None = None, timeout: float = TIMEOUT_S) -> list[dict]:
    """The jobs Snakemake would run in ``root`` with ``configfiles`` laid over the default config:
    ``{rule, wildcards, output, reason}`` each, the target rule (``all``, which runs nothing) left
    out. ``snakefile``: the workflow's (default: this checkout's). Raises PlanError with
    Snakemake's own message when the DAG cannot be built."""
    cmd = [sys.executable, "-m", "quantladder.dryrun", "--directory", str(Path(root).resolve()),
           "--snakefile", str(Path(snakefile or SNAKEFILE).resolve())]
    for f in configfiles:
        cmd += ["--configfile", str(Path(f).resolve())]
    pkg = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (pkg, os.environ.get("PYTHONPATH")) if p)}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise PlanError(f"Snakemake's plan took over {timeout:.0f} s") from None
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(no message)"])[-12:]
        raise PlanError("Snakemake's plan could not be built: " + "\n".join(tail))
    return json.loads(r.stdout)


def _build(root: Path, configfiles: list[Path], snakefile: Path) -> list[dict]:
    """The plan, in this process (the child's work)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings(enable_file_logging=False, quiet={Quietness.ALL})) as api:
        wf_api = api.workflow(ResourceSettings(cores=1), ConfigSettings(configfiles=configfiles),
                              snakefile=snakefile, workdir=root)
        # Snakemake's public API plans only to run or print: its Workflow is reached as `--summary` and
        # `--list-changes` reach it (workflow.py), and the DAG built the way they build it
        workflow = wf_api.dag(DAGSettings()).workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        workflow._build_dag()
        dag = workflow.dag
        jobs = []
        for job in dag.needrun_jobs():
            if job.rule.norun:  # the target rule: it runs nothing
                continue
            jobs.append({"rule": job.rule.name, "wildcards": dict(job.wildcards_dict),
                         "output": [str(f) for f in job.output], "reason": _reason(dag.reason(job))})
    return sorted(jobs, key=lambda j: (j["rule"], j["output"]))


def _reason(reason) -> str:
    """Snakemake's reason for a job, in its own words, on one line (the first of them)."""
    text = " ".join(str(reason).split())
    return text[:300]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quantladder.dryrun", description=__doc__.split("\n")[0])
    ap.add_argument("--directory", default=".")
    ap.add_argument("--snakefile", default=str(SNAKEFILE))
    ap.add_argument("--configfile", action="append", default=[])
    args = ap.parse_args(argv)
    chatter = io.StringIO()
    # the workflow's own prints (a dry run's table, warnings) stay off stdout, which carries the JSON
    with contextlib.redirect_stdout(chatter):
        jobs = _build(Path(args.directory).resolve(), [Path(f).resolve() for f in args.configfile],
                      Path(args.snakefile).resolve())
    sys.stderr.write(chatter.getvalue())
    json.dump(jobs, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
