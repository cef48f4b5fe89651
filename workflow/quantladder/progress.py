"""Where a run stands: which planned point-measures are finished, which jobs are left, and what
they should cost, from the time the same rules took on this machine.

The jobs left are Snakemake's own plan where it can be read (quantladder.dryrun: the jobs a run
started now would run, those whose params, code or inputs changed among them), and a point-measure
is finished only when its file is there and Snakemake does not plan it again: a point measured from
other inputs than the config's (the default's traffic under a user's traffic file) is not the
config's figure, and the partial report leaves it out. Where the plan cannot be read, the files
alone, and the table says so.

A job left is priced at the median of the finished jobs of its rule and kind (quantladder.timings:
the rules' benchmark files), else of its rule, else at the rule's guess below ("estimate", not
"measured").
Read by ``snakemake -n`` (rules/common.smk prints the table once Snakemake has planned), the
partial report and ``quantladder report``.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import yaml

from . import anchors
from . import config as qconfig
from . import measures, resources, targets, timings
from .measures import perplexity as qppl

# Guesses (seconds) for a rule no job of which has finished here yet: SmolLM2-135M on 2 CPU cores
# (the default run, 2026-12-03). A measured figure replaces each as soon as one job of the rule ends.
# A measure's rules say their own guess (quantladder.measures: RuleCost.guess_s).
GUESS_S = {
    "reference_rung": 10, "quantize": 15, "imatrix": 60, "tool_anchor_gate": 60, "generate": 120, "score": 10,
    **{rule: rc.guess_s for rule, rc in measures.rules().items()},
    # the rest of Snakemake's plan, not timed (no benchmark file) or not yet: guesses, a job's start
    # and a few seconds of work, a download or generation where the rule does one
    "anchor_generate": 120, "anchor_gate": 10, "benchmark_source": 5, "benchmark_items": 10, "corpus": 5,
    "acquire_source": 60, "acquire_prebuilt": 60, "llama_tools": 60, "aggregate": 5, "curves": 5, "report": 10,
    "recommend": 5, "find": 5, "find_step": 5, "partial_report": 10,
}


def price(rule: str, kind: str, seen: dict) -> tuple[float, str]:
    """Seconds one job of (rule, kind) should take, and whether that is measured or a guess."""
    s = timings.median_s(seen, rule, kind)
    return (s, "measured") if s is not None else (float(GUESS_S.get(rule, 60)), "estimate")


def _rung_file(cfg: dict, family: str, rung: str) -> str:
    kind = qconfig.rung_kind(cfg, family, rung)
    return f"resources/models/{family}/{kind}/{rung}.gguf"


def jobs_left(cfg: dict, card: str, root: str | Path = ".") -> list[tuple[str, str]]:
    """(rule, kind) of each job still needed for the planned metrics files, from the files that
    exist: a missing rung file is a quantize job, a missing pass a perplexity job, a task point
    without replies a generate job, and so on. What it cannot see (an outdated file Snakemake
    would redo) it does not count: ``snakemake -n`` lists those jobs."""
    root = Path(root)
    have = lambda p: (root / p).exists()  # noqa: E731
    jobs: list[tuple[str, str]] = []
    made: set[str] = set()

    def once(path: str, job: tuple[str, str]) -> None:
        if path not in made and not have(path):
            made.add(path)
            jobs.append(job)

    task_names = set(targets.tasks(cfg))
    for t in targets.planned(cfg, card):
        if have(t.path):
            continue
        rung_kind = qconfig.rung_kind(cfg, t.family, t.rung)
        if rung_kind == "quantized" and not have(_rung_file(cfg, t.family, t.rung)):
            matrix = qconfig.rung_options(cfg, t.family, t.rung).get("imatrix") or {}
            if matrix.get("corpus"):  # computed in the DAG (a named file is the user's)
                once(matrix["file"], ("imatrix", t.family))
        once(_rung_file(cfg, t.family, t.rung), ("reference_rung" if rung_kind == "reference" else "quantize", t.family))
        if anchors.tool_gate_enabled(cfg, t.measure):  # perplexity and speed: per (card, family)
            once(f"results/{card}/anchors/{t.measure}/{t.family}.json", ("tool_anchor_gate", t.measure))
        point = t.path.rsplit("/", 1)[0]
        if t.measure == "perplexity":
            for corpus, ctx in qppl.family_passes(cfg, t.family)[0]:
                name = qppl.pass_name(corpus, ctx)
                once(f"results/{card}/reference_logits/{t.family}/{name}.qlogits", ("reference_logits", t.family))
                once(f"{point}/{name}/metrics.json", ("perplexity", t.family))
            jobs.append(("perplexity_point", t.family))
        elif t.measure in task_names:
            once(f"{point}/generations.json", ("generate", t.measure))
            jobs.append(("score", t.measure))
        elif t.measure.startswith(targets.FIDELITY):
            task = t.measure[len(targets.FIDELITY):]
            once(f"results/{card}/reference_logits/{t.family}/replies-{task}.qlogits", ("reply_logits", task))
            jobs.append(("fidelity", task))
        else:
            jobs.append((t.measure, t.family))
    return jobs


def planned_jobs(plan: list[dict]) -> list[tuple[str, str]]:
    """(rule, kind) of each job in Snakemake's plan (quantladder.dryrun), the kind as its benchmark
    files are filed (quantladder.timings)."""
    return [(j["rule"], timings.kind_of(j["rule"], SimpleNamespace(**j["wildcards"]))) for j in plan]


def read_plan(cfg: dict, root: str | Path = ".", configfiles: list[str] | None = None,
              snakefile: str | Path | None = None) -> tuple[list[dict] | None, str]:
    """Snakemake's plan for ``cfg`` in ``root`` (quantladder.dryrun), and where the count comes from:
    ``(jobs, "snakemake")``, or ``(None, "files: <why the plan could not be read>")``. Without
    ``configfiles`` the config itself is handed over (laid over the default, a whole config is
    itself). The workflow is ``root``'s Snakefile where it has one, else this checkout's."""
    from . import dryrun

    root = Path(root)
    if snakefile is None and (root / "Snakefile").is_file():
        snakefile = root / "Snakefile"
    tmp = None
    try:
        if configfiles is None:
            fd, tmp = tempfile.mkstemp(prefix="quantladder-plan-", suffix=".yaml")
            with os.fdopen(fd, "w") as f:
                yaml.safe_dump(cfg, f)
            configfiles = [tmp]
        return dryrun.plan(root, configfiles, snakefile=snakefile), "snakemake"
    except dryrun.PlanError as e:
        return None, f"files: {e}"
    finally:
        if tmp:
            os.unlink(tmp)


def pending(cfg: dict, card: str, root: str | Path = ".", plan: list[dict] | None = None,
            basis: str | None = None) -> dict:
    """What a report built now lacks: the planned point-measures not finished, and the jobs left
    per rule with their estimated minutes (the shape quantladder.report renders).

    ``plan``: Snakemake's (``read_plan``): its jobs are the jobs left, and a point-measure whose file
    is there but which it plans again (its inputs changed) is missing, with Snakemake's reason
    (``rerun``). Without it, the files present alone (``jobs_left``); ``basis`` says why."""
    root = Path(root)
    planned = targets.planned(cfg, card)
    again: dict[str, str] = {}
    if plan is not None:
        made_by = {o: j for j in plan for o in j["output"]}
        again = {t.path: made_by[t.path]["reason"] for t in planned
                 if t.path in made_by and (root / t.path).exists()}
        left = planned_jobs(plan)
    else:
        left = jobs_left(cfg, card, root)
    missing = [t for t in planned if t.path in again or not (root / t.path).exists()]
    seen = timings.seconds(root)
    per_rule: dict[str, dict] = {}
    for rule, kind in left:
        s, basis = price(rule, kind, seen)
        e = per_rule.setdefault(rule, {"rule": rule, "jobs": 0, "est_min": 0.0, "basis": basis,
                                       "host": resources.host(rule)})
        e["jobs"] += 1
        e["est_min"] += s / 60
        if basis == "estimate":
            e["basis"] = "estimate"  # one guessed job makes the rule's sum a guess
    rows = sorted(per_rule.values(), key=lambda e: -e["est_min"])
    for e in rows:
        e["est_min"] = round(e["est_min"], 1)
    return {
        "planned": len(planned),
        "finished": len(planned) - len(missing),
        "missing": [{"family": t.family, "rung": t.rung, "kv": t.kv, "measure": t.measure, "series": t.series,
                     **({"rerun": again[t.path]} if t.path in again else {})}
                    for t in missing],
        "rerun": len(again),
        "jobs_left": rows,
        "est_min_left": round(sum(e["est_min"] for e in rows), 1),
        "counted_from": "snakemake" if plan is not None else (basis or "files"),
        "as_of": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def counted_note(p: dict) -> str:
    """Where the jobs left were counted from, and the finished files Snakemake plans again."""
    how = p.get("counted_from") or "files"
    if how == "snakemake":
        note = "jobs left: Snakemake's own plan"
    else:
        why = how.partition(": ")[2]
        note = ("jobs left: from the files present only (an outdated file Snakemake would redo is not counted"
                + (f"; Snakemake's plan could not be read: {why.splitlines()[-1] if why else ''}" if why else "")
                + ")")
    if p.get("rerun"):
        note += (f"; {p['rerun']} finished point-measure(s) were measured from other inputs than the config's "
                 "(Snakemake runs them again) and count as not measured")
    return note


def summary_text(p: dict) -> str:
    """The table ``snakemake -n`` prints: per rule, jobs left and their estimated minutes."""
    lines = [f"quantladder: {p['finished']} of {p['planned']} point-measures finished; "
             f"about {p['est_min_left']:.1f} min of jobs left (one job at a time)"]
    if p["jobs_left"]:
        lines.append(f"  {'rule':<18} {'jobs':>5} {'est. min':>9}  {'host':<7}  basis")
        for e in p["jobs_left"]:
            lines.append(f"  {e['rule']:<18} {e['jobs']:>5} {e['est_min']:>9.1f}  {e['host']:<7}  {e['basis']}")
    lines.append(f"  ({counted_note(p)})")
    return "\n".join(lines)


_printed_after: set[int] = set()


def print_after_plan(workflow, cfg: dict, card: str) -> None:
    """In ``snakemake -n``: print the table once Snakemake has made its plan (at the process's exit,
    after its own job list), counting the jobs it plans, those whose params, code or inputs changed
    among them. Called while the DAG is being built (the target's input function), where the plan
    is not made yet; once per workflow."""
    if id(workflow) in _printed_after:
        return
    _printed_after.add(id(workflow))
    root = Path.cwd()  # the workflow's directory now; Snakemake changes back to the caller's before exit

    def _print() -> None:
        dag = getattr(workflow, "dag", None)
        try:
            plan = [{"rule": j.rule.name, "wildcards": dict(j.wildcards_dict), "output": [str(f) for f in j.output],
                     "reason": " ".join(str(dag.reason(j)).split())[:300]}
                    for j in dag.needrun_jobs(exclude_finished=False) if not j.rule.norun]
        except Exception:  # no plan: Snakemake has said why it could not make one
            return
        print(summary_text(pending(cfg, card, root, plan=plan)), file=sys.stderr)

    atexit.register(_print)


def partial_paths(card: str) -> tuple[str, str]:
    return f"results/{card}/partial/points.parquet", f"results/{card}/partial/report.html"


def partial_report(cfg: dict, card: str, root: str | Path = ".", *, configfiles: list[str] | None = None,
                   plan: list[dict] | None = None, basis: str | None = None) -> tuple[Path, Path, dict]:
    """The dataset and the report of whatever planned points are finished now, with what is left:
    for a run still going (it reads finished files only: every metrics file is written whole, by a
    rename). With every point finished, both equal the final ones byte for byte.

    Finished means the file is there and Snakemake's plan (``read_plan``, made here unless given) does
    not run it again; ``configfiles``: those ``cfg`` was read from, handed to Snakemake as given."""
    from . import aggregate, dataset, report

    root = Path(root)
    if plan is None:
        plan, basis = read_plan(cfg, root, configfiles)
    p = pending(cfg, card, root, plan, basis)
    again = {(m["family"], m["rung"], m["kv"], m["measure"], m["series"]) for m in p["missing"]}
    # a file Snakemake plans again holds figures of other inputs than the config's: not shown as measured
    done = [str(root / t.path) for t in targets.planned(cfg, card)
            if (root / t.path).exists() and (t.family, t.rung, t.kv, t.measure, t.series) not in again]
    parquet, html = (root / x for x in partial_paths(card))
    dataset.write(aggregate.collect(done), parquet)
    report.build(parquet, html, card=card, pending=p)
    return parquet, html, p
