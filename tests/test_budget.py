"""No job outlives its budget: the deadline arithmetic, and a real Snakemake job given a tiny
runtime that stops itself, keeps its finished items, fails with a clear line, and resumes. A budget
stops only what a scheduler would stop: on one machine the runtime is not enforced, and every stop
says how to give the job more time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quantladder import budget

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


class FakeClock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def test_parse_slurm_duration():
    assert budget.parse_slurm_duration("5:00") == 300
    assert budget.parse_slurm_duration("1:02:03") == 3723
    assert budget.parse_slurm_duration("2-00:00:10") == 2 * 86400 + 10
    assert budget.parse_slurm_duration("UNLIMITED") is None
    assert budget.parse_slurm_duration("INVALID") is None


def test_margin_scales_with_budget():
    assert budget.margin_for(60) == 30  # half of a tiny budget at most
    assert budget.margin_for(600) == 60  # at least a minute
    assert budget.margin_for(10 * 3600) == 1800  # 5 % of a long one


def test_deadline_takes_the_earliest_source():
    env = {"SLURM_JOB_ID": "7"}
    dl, src = budget.deadline_from(60, start=0.0, env=env, now=0.0, slurm_left_s=600)
    assert src.startswith("slurm job 7") and dl == 600 - 60
    # squeue's answer is the limit Slurm enforces: a runtime under it (Snakemake inside an allocation,
    # the local executor) stops nothing Slurm would stop
    dl, src = budget.deadline_from(5, start=0.0, env=env, now=0.0, slurm_left_s=3600)
    assert src.startswith("slurm job 7") and dl == 3600 - 180
    # Slurm without an answer from squeue, and the other schedulers: the runtime, as the job's limit
    for sched in ({"SLURM_JOB_ID": "7"}, {"PBS_JOBID": "1.pbs"}, {"LSB_JOBID": "3"},
                  {"JOB_ID": "4", "SGE_ROOT": "/opt/sge"}):
        dl, src = budget.deadline_from(5, start=0.0, env=sched, now=0.0, slurm_left_s=None)
        assert src == "runtime 5 min" and dl == 300 - 60, sched
    assert budget.deadline_from(None, env={}, slurm_left_s=None) == (None, "no runtime resource")
    assert budget.deadline_from(5, env={"QUANTLADDER_BUDGET": "off"})[0] is None
    assert budget.deadline_from(5, start=0.0, env={"QUANTLADDER_BUDGET": "on"}, slurm_left_s=None)[0] == 240


def test_on_one_machine_no_job_stops_at_its_runtime():
    """No scheduler limits a job's time on one machine: a runtime learned from a smaller file (the
    example's 8 conversations gave reply_logits a minute) stopped the user's 20 there twice, and the
    fidelity jobs never ran. The runtime stays what a scheduler would be asked for."""
    dl, src = budget.deadline_from(1, start=0.0, env={"JOB_ID": "9"}, now=0.0, slurm_left_s=None)
    assert dl is None and src.startswith("runtime 1 min not enforced: no scheduler")  # JOB_ID alone: no Grid Engine
    bud = budget.from_runtime(1, env={}, slurm_left_s=None)
    assert bud.deadline is None and not bud.expired(next_item_s=1e9)
    assert budget.scheduler({}) is None and budget.scheduler({"SLURM_JOB_ID": "1"}) == "Slurm"
    # a wrapper's own deadline still counts
    dl, src = budget.deadline_from(1, env={"QUANTLADDER_DEADLINE": "5000"}, now=0.0, slurm_left_s=None)
    assert src == "QUANTLADDER_DEADLINE" and dl == 5000 - 250


def test_a_stop_says_how_to_give_the_job_more_time(smollm_q8, monkeypatch):
    """The perplexity/fidelity pass's stop ("nothing is kept; rerun with a larger runtime") said no
    more: raised with a bare deadline inside rule reply_logits, it now names the option and the
    config key, with a runtime that is more than the one that ran out."""
    from types import SimpleNamespace

    from quantladder.engine import RawContext
    from quantladder.measures import perplexity as P
    from quantladder.corpora import pydoc_topics_text

    monkeypatch.setattr(budget, "_more_time", "")
    monkeypatch.setenv("QUANTLADDER_BUDGET", "on")  # as a scheduler would hold the job to its runtime
    smk = SimpleNamespace(rule="reply_logits", resources=SimpleNamespace(runtime=1))
    bud = budget.from_snakemake(smk, slurm_left_s=None)
    assert bud.deadline is not None and bud.source == "runtime 1 min"
    proto = P.Protocol(n_ctx=256, n_batch=1024, max_chunks=4)
    with RawContext(str(smollm_q8), n_ctx=proto.n_seq * proto.n_ctx, n_batch=proto.n_seq * proto.n_ctx,
                    n_seq_max=proto.n_seq, n_threads=2) as ctx:
        with pytest.raises(budget.BudgetReached) as stop:
            P.run(ctx, pydoc_topics_text()[:20000], proto, deadline=time.time() - 1)
    msg = str(stop.value)
    assert "nothing is kept" in msg
    assert "--set-resources reply_logits:runtime=2" in msg and "resources: {runtime_min: {reply_logits: 2}}" in msg
    # the loops' own stop says it too, once
    clock = FakeClock()
    b = budget.Budget(clock.t, source="runtime 1 min", clock=clock)
    with pytest.raises(budget.BudgetReached) as stop:
        b.check(done=1, total=3)
    assert str(stop.value).count("--set-resources reply_logits:runtime=2") == 1


def test_expired_accounts_for_the_next_item():
    clock = FakeClock()
    bud = budget.Budget(clock.t + 100, source="test", clock=clock)
    assert not bud.expired()
    with bud.item():
        clock.t += 39  # one slow item: the next needs 58.5 s and 61 s are left
    assert not bud.expired()
    clock.t += 3
    assert bud.expired()
    with pytest.raises(budget.BudgetReached, match=r"3/9 items done, resumable"):
        bud.check(done=3, total=9)
    assert not budget.Budget(None).expired()


SNAKEFILE = """
import sys
sys.path.insert(0, {workflow_dir!r})

rule all:
    input: "out/generations.jsonl"

rule generate:
    output: "out/generations.jsonl"
    resources: runtime=1
    log: "logs/generate.log"
    script: "gen.py"
"""

SCRIPT = """
import os, sys, time
sys.path.insert(0, {workflow_dir!r})
from quantladder import budget
from quantladder.io import JsonlFile
sys.stderr = open(snakemake.log[0], "a", buffering=1)
bud = budget.from_snakemake(snakemake)
print("budget", repr(bud), file=sys.stderr)
# the generation loop's pattern: a store that is not a declared output, the output written at the end
store = JsonlFile(snakemake.output[0] + ".partial")
done = {{r["item_id"] for r in store.repair()}}
try:
    for i in range({n_items}):
        if i in done:
            continue
        bud.check(done=len(done), total={n_items})
        with bud.item():
            time.sleep({item_s})
            store.append({{"item_id": i, "pid": os.getpid()}})
            done.add(i)
except budget.BudgetReached as e:
    print(e, file=sys.stderr)
    sys.exit(e.exit_code)
JsonlFile(snakemake.output[0]).write(sorted(store.read(), key=lambda r: r["item_id"]))
os.unlink(snakemake.output[0] + ".partial")
"""


def test_snakemake_job_with_tiny_runtime_stops_and_resumes(tmp_path):
    """A real Snakemake job with runtime=1 (minute): it stops itself well before 60 s, the items it
    finished stay on disk, Snakemake sees a failed job (output missing), and the next plain
    `snakemake` run resumes from the kept items instead of starting over."""
    n_items, item_s = 20, 2.0
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(workflow_dir=str(REPO / "workflow")))
    (tmp_path / "gen.py").write_text(SCRIPT.format(workflow_dir=str(REPO / "workflow"),
                                                   n_items=n_items, item_s=item_s))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QUANTLADDER_"))}
    env["QUANTLADDER_BUDGET"] = "on"  # the runtime enforced, as a scheduler holds a job to it
    cmd = [SNAKEMAKE, "--cores", "1", "--directory", str(tmp_path), "--snakefile",
           str(tmp_path / "Snakefile")]

    t0 = time.monotonic()
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    first_s = time.monotonic() - t0
    log = (tmp_path / "logs" / "generate.log").read_text()
    assert first.returncode != 0, first.stdout + first.stderr
    assert first_s < 60, f"the job outlived its 1-minute budget ({first_s:.0f} s)"
    assert "budget reached" in log and "resumable" in log, log
    assert "--set-resources generate:runtime=2" in log, log  # how to give it more time
    assert not (tmp_path / "out" / "generations.jsonl").exists()
    partial = tmp_path / "out" / "generations.jsonl.partial"  # the store: not a declared output
    kept = [json.loads(ln) for ln in partial.read_text().splitlines()]
    assert 5 <= len(kept) < n_items, len(kept)
    assert [r["item_id"] for r in kept] == list(range(len(kept)))

    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    final = [json.loads(ln) for ln in (tmp_path / "out" / "generations.jsonl").read_text().splitlines()]
    assert [r["item_id"] for r in final] == list(range(n_items))
    # Resumed, not redone: the first run's items keep the first run's process id.
    assert final[: len(kept)] == kept
    assert {r["pid"] for r in final[len(kept):]}.isdisjoint({r["pid"] for r in kept})
    assert not partial.exists()


def test_a_snakemake_job_on_one_machine_is_not_held_to_its_runtime(tmp_path):
    """The same job with runtime=1, run by a plain `snakemake` (no scheduler): its budget is
    unlimited, and its log says why."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(workflow_dir=str(REPO / "workflow")))
    (tmp_path / "gen.py").write_text(SCRIPT.format(workflow_dir=str(REPO / "workflow"), n_items=2, item_s=0.1))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "QUANTLADDER_", "PBS_", "LSB_", "FLUX_", "SGE_"))}
    r = subprocess.run([SNAKEMAKE, "--cores", "1", "--directory", str(tmp_path), "--snakefile",
                        str(tmp_path / "Snakefile")], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    log = (tmp_path / "logs" / "generate.log").read_text()
    assert "budget Budget(unlimited)" in log, log


def test_make_runs_retry_a_budget_stopped_job_within_the_same_run(tmp_path):
    """`make run`'s Snakemake flags (read from the Makefile): a job that stops at its budget in the
    first attempt (runtime 1 min) is tried again in the same invocation with the attempt's larger
    budget, resumes the items it kept, and the run ends with exit 0 (it used to end the whole run)."""
    flags = next(ln for ln in (REPO / "Makefile").read_text().splitlines() if ln.startswith("SNAKEMAKE_RUN"))
    flags = flags.split("--cores $(CORES)", 1)[1].split()
    assert "--retries" in flags and "--keep-going" in flags
    n_items, item_s = 20, 2.0
    snakefile = SNAKEFILE.format(workflow_dir=str(REPO / "workflow")).replace(
        "resources: runtime=1", "resources: runtime=lambda wildcards, attempt: attempt")
    (tmp_path / "Snakefile").write_text(snakefile)
    (tmp_path / "gen.py").write_text(SCRIPT.format(workflow_dir=str(REPO / "workflow"),
                                                   n_items=n_items, item_s=item_s))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QUANTLADDER_"))}
    env["QUANTLADDER_BUDGET"] = "on"  # the runtime enforced, as a scheduler holds a job to it
    cmd = [SNAKEMAKE, "--cores", "1", *flags, "--directory", str(tmp_path), "--snakefile", str(tmp_path / "Snakefile")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    log = (tmp_path / "logs" / "generate.log").read_text()  # Snakemake keeps the last attempt's log
    assert "from runtime 2 min" in log, log  # the second attempt, with twice the budget
    final = [json.loads(ln) for ln in (tmp_path / "out" / "generations.jsonl").read_text().splitlines()]
    assert [r["item_id"] for r in final] == list(range(n_items))
    pids = [r["pid"] for r in final]
    assert len(set(pids)) == 2 and pids == sorted(pids, key=pids.index)  # two attempts, the second resumed
