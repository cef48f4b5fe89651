"""What every rule script does: log to the rule's log file, fail with a readable message, and run
alone for debugging (``python scripts/speed.py card=... family=... rung=Q4_K_M kv=f16``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Sequence

from .errors import ConfigError, QuantladderError

log = logging.getLogger("quantladder")
_saved_stderr_fd: int | None = None
SNAKEFILE = Path(__file__).resolve().parents[2] / "Snakefile"  # the checkout this package sits in


def console(msg: str) -> None:
    """A line for the person watching Snakemake (the real stderr), besides the log."""
    if _saved_stderr_fd is not None:
        os.write(_saved_stderr_fd, (msg + "\n").encode())
    else:
        print(msg, file=sys.__stderr__)


def start(snakemake) -> logging.Logger:
    """Send this script's stderr and logging to the rule's log (progress stays visible there)."""
    if snakemake.log:
        os.makedirs(os.path.dirname(snakemake.log[0]) or ".", exist_ok=True)
        logf = open(snakemake.log[0], "w", buffering=1)
        # llama.cpp writes to file descriptor 2 directly: point it at the log as well.
        sys.__stderr__.flush()
        global _saved_stderr_fd
        _saved_stderr_fd = os.dup(2)
        os.dup2(logf.fileno(), 2)
        sys.stderr = logf
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    return log


def _same_checkout(snakemake) -> None:
    """A script runs the package of the workflow it belongs to: one installed from another checkout
    (a shared venv) would run other code than the rules were parsed with."""
    workflow = Path(snakemake.scriptdir).resolve().parent
    if workflow != SNAKEFILE.parent:
        raise ConfigError(f"this script imports quantladder from {SNAKEFILE.parent}, but belongs to {workflow}: "
                          f"pip install -e {workflow} (or PYTHONPATH={workflow / 'workflow'})")


def main(fn, snakemake) -> None:
    """Run ``fn(snakemake)``; a QuantladderError is reported as one clear line naming the rule."""
    start(snakemake)
    try:
        _same_checkout(snakemake)
        fn(snakemake)
    except QuantladderError as e:
        msg = f"rule {snakemake.rule}: {e}"
        log.error(msg)
        console(msg)
        sys.exit(getattr(e, "exit_code", 1))  # a budget stop exits 75: "try again", resumable
    except Exception:
        log.error("rule %s failed:\n%s", snakemake.rule, traceback.format_exc())
        raise


# ---------------------------------------------------------------------------------------------
# Running a script alone: the object Snakemake would inject, made from the real workflow.
# After PyPSA-Eur's scripts/_helpers.py ``mock_snakemake``, written for Snakemake 9's API.
# ---------------------------------------------------------------------------------------------
def _script_path(rule) -> Path:
    return Path(rule.basedir.get_path_or_uri(secret_free=True), rule.script).resolve()


def _pick_rule(workflow, rule: str | None, script: str | os.PathLike | None):
    """The rule named ``rule`` (one that runs ``script``, where given), or the one rule running ``script``."""
    rules = [r for r in workflow.rules
             if script is None or (r.script and _script_path(r) == Path(script).resolve())]
    where = f"{script} is the script of rules" if script else f"{SNAKEFILE} has the rules"
    names = ", ".join(r.name for r in rules) or "none"
    if rule is None and len(rules) != 1:
        raise ConfigError(f"{where} {names}: name one (--rule)")
    picked = [r for r in rules if rule is None or r.name == rule]
    if not picked:
        raise ConfigError(f"no rule {rule} here: {where} {names}")
    return picked[0]


def mock_snakemake(rule: str | None = None, *, script: str | os.PathLike | None = None,
                   configfiles: Sequence[str | os.PathLike] = (), **wildcards):
    """The ``snakemake`` object Snakemake injects into a rule's script, for the job of ``rule`` with
    these ``wildcards``: input, output, params, wildcards, threads, resources, log, config, rule.

    Built from the real workflow (the Snakefile beside this package, its default config, then
    ``configfiles`` over it as ``snakemake --configfile`` lays them) in the working directory, so
    the paths are those a job gets. Without ``rule``: the one rule whose script is ``script``.
    The job's inputs must exist (Snakemake would make them first); its output and log folders are
    made, as Snakemake makes them before a job.
    """
    from snakemake.api import SnakemakeApi
    from snakemake.dag import DAG
    from snakemake.iocontainers import Snakemake
    from snakemake.jobs import Job
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    configs = [Path(f).resolve() for f in configfiles]
    with SnakemakeApi(OutputSettings(enable_file_logging=False)) as api:
        # --cores all, as `make run` runs it
        wf_api = api.workflow(ResourceSettings(cores=os.cpu_count()), ConfigSettings(configfiles=configs),
                              snakefile=SNAKEFILE, workdir=Path.cwd())
        # Snakemake's public API has no call for one job: its Workflow is reached as PyPSA-Eur reaches it
        workflow = wf_api.dag(DAGSettings()).workflow_api._workflow
        r = _pick_rule(workflow, rule, script)
        if set(wildcards) != r.wildcard_names:
            raise ConfigError(f"rule {r.name} takes the wildcards {', '.join(sorted(r.wildcard_names)) or '(none)'}; "
                              f"given: {', '.join(sorted(wildcards)) or '(none)'}")
        target = r.output[0].apply_wildcards(wildcards)
        if not r.is_producer(target):
            raise ConfigError(f"rule {r.name} does not make {target}: a wildcard value breaks its constraint")
        job = Job(r, DAG(workflow, rules=[r]), wildcards)
        missing = [f for f in job.input if not os.path.exists(f)]
        if missing:
            raise ConfigError(f"rule {r.name}: inputs not made yet (make them first with snakemake): "
                              + " ".join(missing))
        smk = Snakemake(job.input, job.output, job.params, job.wildcards, job.threads, job.resources, job.log,
                        workflow.config, r.name, None, str(_script_path(r).parent))
    for f in [*smk.output, *smk.log]:
        Path(f).parent.mkdir(parents=True, exist_ok=True)
    return smk


def mock_from_argv(argv: Sequence[str] | None = None):
    """``python scripts/<script>.py [--rule R] [--configfile F] WILDCARD=VALUE ...``: the
    ``snakemake`` object of that job (``mock_snakemake``), run from the workflow's working directory."""
    script = sys.argv[0]
    p = argparse.ArgumentParser(prog=f"python {script}",
                                description="Run this rule script alone on one job of the workflow (for debugging).")
    p.add_argument("wildcards", nargs="*", metavar="WILDCARD=VALUE", help="the job's wildcards, e.g. rung=Q4_K_M")
    p.add_argument("--rule", help="the rule, where this script serves more than one")
    p.add_argument("--configfile", action="append", default=[], metavar="FILE",
                   help="a config file over the default one, as snakemake --configfile (repeatable)")
    a = p.parse_args(argv)
    bad = [w for w in a.wildcards if "=" not in w]
    if bad:
        p.error(f"a wildcard is NAME=VALUE: {' '.join(bad)}")
    try:
        smk = mock_snakemake(a.rule, script=script, configfiles=a.configfile,
                             **dict(w.split("=", 1) for w in a.wildcards))
    except QuantladderError as e:
        p.error(str(e))
    if smk.log:
        print(f"rule {smk.rule}: logging to {smk.log[0]}", file=sys.stderr)
    return smk
