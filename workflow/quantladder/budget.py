"""No job outlives its budget: a deadline for the running job, checked between items.

The seed lost ~18 hours to jobs hung past their limit. A generation or measurement loop here
asks ``budget.expired()`` before each item; when the next item would not finish before the
deadline (minus a safety margin), it stops, keeps what it finished, and the job fails with one
clear line ("budget reached, N/M items done, resumable"). Failing is what makes the next run
resume by itself: Snakemake reruns a job whose outputs are missing, whereas a job that "succeeded"
with partial outputs would never be rerun. So the per-item results must live in a file that is
NOT a declared output (Snakemake deletes a failed job's outputs, and every output before a job
starts): the generation loop (quantladder.generation) appends to a store beside its outputs and
writes the outputs only at the end; the score stage does the same with its verdicts.

A budget stops only what a scheduler would stop. Its point is to end a job on its own terms (what
it finished kept, exit 75, resumable) before a scheduler kills it at its time limit; on one machine
no scheduler kills anything, and a job stopped there at a runtime learned from a smaller file (the
example's 8 conversations gave ``reply_logits`` a minute; the user's 20 needed more) only costs a
rerun, or, for a pass that keeps nothing, the run. So where the deadline comes from (the earliest
wins):
- under Slurm, the scheduler's own word: ``squeue -j $SLURM_JOB_ID -o %L`` (time left). Slurm 22.05
  exports no end time to the job, so it is asked once, when the budget is made. The Slurm executor
  submits each job with its ``runtime`` as ``--time``, so this is the runtime where Snakemake
  submitted the job, and the allocation's limit where Snakemake runs inside one (``salloc``), where
  nothing stops a job at its runtime.
- the job's ``runtime`` resource (minutes), counted from the job's start, where a scheduler limits
  the job's time and cannot be asked: Slurm without an answer from ``squeue``, and PBS, LSF, Grid
  Engine and Flux jobs (a cluster profile hands them the runtime as the walltime). On one machine
  the runtime is not enforced.
- ``QUANTLADDER_DEADLINE`` (epoch seconds), for wrappers that know better.
``QUANTLADDER_BUDGET=off`` turns the budget off (an interactive debugging run);
``QUANTLADDER_BUDGET=on`` enforces the runtime on one machine too (a wrapper that kills jobs at it).

A stop's message says how to give the job more time (``more_time``): Snakemake's
``--set-resources RULE:runtime=MINUTES``, or the config's ``resources.runtime_min.RULE``.

Use in a loop::

    bud = budget.from_snakemake(snakemake)
    for wave in waves:
        bud.check(done=n_done, total=n_items)            # raises BudgetReached when out of time
        with bud.item():                                   # times the wave: the next must fit
            ... generate the wave, append its records to the store ...
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import subprocess
import time
from typing import Iterator, Mapping

from .errors import QuantladderError

log = logging.getLogger("quantladder.budget")

# The margin keeps time for flushing, writing metrics and Snakemake's own bookkeeping after the
# loop: a share of the budget, at least MIN_MARGIN_S, never more than MAX_MARGIN_SHARE of it.
MARGIN_SHARE = 0.05
MIN_MARGIN_S = 60.0
MAX_MARGIN_SHARE = 0.5
# The next item is assumed to take as long as the slowest one so far, times this.
ITEM_SAFETY = 1.5


class BudgetReached(QuantladderError):
    """The job stopped itself before its deadline; what it finished is kept and a rerun resumes.

    Its message ends with how to give the job more time, wherever in the job it is raised (the
    perplexity and fidelity passes raise it with a bare deadline): ``from_snakemake`` sets the
    sentence for the job's process."""

    exit_code = 75  # EX_TEMPFAIL: try again later

    def __init__(self, msg: str = ""):
        if _more_time and _more_time not in msg:
            msg = f"{msg.rstrip('. ')}. {_more_time}"
        super().__init__(msg)


# How to give the running job more time (set by from_snakemake; a sentence, or "" outside a rule job)
_more_time = ""

# A scheduler that stops a job at its time limit, by the variable it exports to the job. Grid
# Engine's JOB_ID is too common a name alone: its SGE_ROOT comes with it.
SCHEDULERS = (("SLURM_JOB_ID", "Slurm"), ("PBS_JOBID", "PBS"), ("LSB_JOBID", "LSF"),
              ("FLUX_JOB_ID", "Flux"), ("SGE_ROOT", "Grid Engine"))
ON = ("on", "1", "true", "yes", "runtime")
OFF = ("off", "0", "false", "no")


def scheduler(env: Mapping[str, str] | None = None) -> str | None:
    """The scheduler that limits this job's time (its name), or None on one machine."""
    env = os.environ if env is None else env
    for var, name in SCHEDULERS:
        if env.get(var) and (var != "SGE_ROOT" or env.get("JOB_ID")):
            return name
    return None


def _process_start_time() -> float:
    """When this process started (epoch seconds), from /proc; now, where /proc is absent."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat, counted after the ")"
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()


_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")


def parse_slurm_duration(text: str) -> float | None:
    """Seconds in a Slurm duration ('[days-][hours:]minutes:seconds'); None for UNLIMITED/blank."""
    text = text.strip()
    m = _SLURM_TIME.match(text)
    if not m:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def slurm_time_left(job_id: str | None = None, timeout: float = 10.0) -> float | None:
    """Seconds the scheduler gives this job, or None when not under Slurm or not answerable."""
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id or not shutil.which("squeue"):
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%L"], capture_output=True,
                             text=True, timeout=timeout, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return parse_slurm_duration(lines[0]) if lines else None


def margin_for(budget_s: float) -> float:
    return min(max(MARGIN_SHARE * budget_s, MIN_MARGIN_S), MAX_MARGIN_SHARE * budget_s)


class Budget:
    """A deadline (epoch seconds, or None for no limit) and the item timings seen so far."""

    def __init__(self, deadline: float | None, *, source: str = "", clock=time.time):
        self.deadline = deadline
        self.source = source
        self.clock = clock
        self.slowest_item_s = 0.0
        self.n_items = 0

    def __repr__(self) -> str:
        if self.deadline is None:
            return "Budget(unlimited)"
        return f"Budget({self.remaining():.0f} s left, from {self.source})"

    def remaining(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - self.clock()

    def expired(self, next_item_s: float | None = None) -> bool:
        """True when the next item would not finish before the deadline."""
        if self.deadline is None:
            return False
        need = self.slowest_item_s * ITEM_SAFETY if next_item_s is None else next_item_s
        return self.clock() + need >= self.deadline

    @contextlib.contextmanager
    def item(self) -> Iterator[None]:
        """Time one item, so that ``expired()`` can tell whether the next one still fits."""
        t0 = self.clock()
        yield
        self.slowest_item_s = max(self.slowest_item_s, self.clock() - t0)
        self.n_items += 1

    def check(self, done: int, total: int, what: str = "items") -> None:
        """Raise BudgetReached (after the caller's appends are on disk) when out of time."""
        if self.expired():
            raise BudgetReached(
                f"budget reached ({self.source}), {done}/{total} {what} done, resumable: "
                "what finished is kept, and the next snakemake run resumes this job from it"
            )


def more_time(rule: str, runtime_min: float | None, source: str = "") -> str:
    """The sentence a budget stop ends with: how to give rule ``rule`` more time, in words a user
    can type (Snakemake's ``--set-resources``, which the Slurm executor turns into ``--time``, or
    the config's floor under every learned runtime)."""
    more = max(2 * int(math.ceil(runtime_min)), 2) if runtime_min else 60
    how = (f"To give it more time, run snakemake again with `--set-resources {rule}:runtime={more}` "
           f"(minutes), or set `resources: {{runtime_min: {{{rule}: {more}}}}}` in your config (a floor "
           "under the runtime learned from earlier jobs)")
    if source.startswith("slurm") and "runtime" not in source:
        how += "; where Snakemake runs inside a Slurm allocation, the allocation's own --time is the limit"
    elif source == "QUANTLADDER_DEADLINE":
        how = "To give it more time, set a later QUANTLADDER_DEADLINE (epoch seconds) in the job's environment"
    return how + "."


def deadline_from(runtime_min: float | None = None, *, start: float | None = None,
                  env: Mapping[str, str] | None = None, now: float | None = None,
                  slurm_left_s: float | None | bool = True) -> tuple[float | None, str]:
    """The job's deadline (already less the safety margin) and where it came from.

    ``slurm_left_s``: True asks squeue when under Slurm; a number is used as given; None/False
    skips it.
    """
    env = os.environ if env is None else env
    now = time.time() if now is None else now
    switch = env.get("QUANTLADDER_BUDGET", "").lower()
    if switch in OFF:
        return None, "QUANTLADDER_BUDGET=off"
    candidates: list[tuple[float, str]] = []
    sched = scheduler(env)
    if slurm_left_s is True:
        slurm_left_s = slurm_time_left() if env.get("SLURM_JOB_ID") else None
    if slurm_left_s:
        candidates.append((now + slurm_left_s - margin_for(slurm_left_s),
                           f"slurm job {env.get('SLURM_JOB_ID', '?')} time left {slurm_left_s:.0f} s"))
    # the runtime where a scheduler holds the job to it and cannot be asked (squeue's answer, where
    # there is one, is the runtime the executor submitted, or a limit above it that nothing enforces)
    unenforced = None
    if runtime_min and ((sched and not slurm_left_s) or switch in ON):
        start = _process_start_time() if start is None else start
        total = float(runtime_min) * 60.0
        candidates.append((start + total - margin_for(total), f"runtime {runtime_min:g} min"))
    elif runtime_min and not sched:
        unenforced = (f"runtime {runtime_min:g} min not enforced: no scheduler limits this job's time "
                      "(QUANTLADDER_BUDGET=on enforces it)")
    if env.get("QUANTLADDER_DEADLINE"):
        dl = float(env["QUANTLADDER_DEADLINE"])
        candidates.append((dl - margin_for(max(dl - now, 0.0)), "QUANTLADDER_DEADLINE"))
    if not candidates:
        return None, unenforced or "no runtime resource"
    return min(candidates)


def from_snakemake(smk, **kw) -> Budget:
    """The budget of the rule job running this script (its ``runtime`` resource, Slurm's limit).
    A stop raised in this process from now on says how to give the rule more time."""
    global _more_time
    runtime = getattr(smk.resources, "runtime", None) if getattr(smk, "resources", None) else None
    try:
        runtime = float(runtime) if runtime not in (None, "") else None
    except (TypeError, ValueError):
        runtime = None
    deadline, source = deadline_from(runtime, **kw)
    bud = Budget(deadline, source=source)
    _more_time = more_time(str(getattr(smk, "rule", "") or "RULE"), runtime, source)
    log.info("job budget: %r%s", bud, f" ({source})" if deadline is None else "")
    return bud


def from_runtime(runtime_min: float | None, **kw) -> Budget:
    deadline, source = deadline_from(runtime_min, **kw)
    return Budget(deadline, source=source)
