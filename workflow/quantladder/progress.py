"""Where a run stands: which planned point-measures are finished, which jobs are left, and what
they should cost, from the time the same rules took on this machine.

A job left is priced at the median of the finished jobs of its rule and kind (quantladder.timings:
the rules' benchmark files), else of its rule, else at the rule's guess below ("estimate", not
"measured").
Read by ``snakemake -n`` (rules/common.smk prints the table), the partial report and
``quantladder report``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from . import anchors
from . import config as qconfig
from . import resources, targets, timings
from .measures import perplexity as qppl

# Guesses (seconds) for a rule no job of which has finished here yet: SmolLM2-135M on 2 CPU cores
# (the default run, 2026-12-03). A measured figure replaces each as soon as one job of the rule ends.
GUESS_S = {
    "reference_rung": 10, "quantize": 15, "imatrix": 60, "reference_logits": 15, "perplexity": 15,
    "perplexity_point": 1, "tool_anchor_gate": 60, "speed": 30, "memory": 10, "energy": 30, "generate": 120, "score": 10,
    "reply_logits": 10, "fidelity": 10,
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


def pending(cfg: dict, card: str, root: str | Path = ".") -> dict:
    """What a report built now lacks: the planned point-measures not finished, and the jobs left
    per rule with their estimated minutes (the shape quantladder.report renders)."""
    root = Path(root)
    planned = targets.planned(cfg, card)
    missing = [t for t in planned if not (root / t.path).exists()]
    seen = timings.seconds(root)
    per_rule: dict[str, dict] = {}
    for rule, kind in jobs_left(cfg, card, root):
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
        "missing": [{"family": t.family, "rung": t.rung, "kv": t.kv, "measure": t.measure, "series": t.series}
                    for t in missing],
        "jobs_left": rows,
        "est_min_left": round(sum(e["est_min"] for e in rows), 1),
        "as_of": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def summary_text(p: dict) -> str:
    """The table ``snakemake -n`` prints: per rule, jobs left and their estimated minutes."""
    lines = [f"quantladder: {p['finished']} of {p['planned']} point-measures finished; "
             f"about {p['est_min_left']:.1f} min of jobs left (one job at a time)"]
    if p["jobs_left"]:
        lines.append(f"  {'rule':<18} {'jobs':>5} {'est. min':>9}  {'host':<7}  basis")
        for e in p["jobs_left"]:
            lines.append(f"  {e['rule']:<18} {e['jobs']:>5} {e['est_min']:>9.1f}  {e['host']:<7}  {e['basis']}")
    return "\n".join(lines)


def load_config(configfiles: list[str] | None = None) -> dict:
    """The config a run uses: config/config.yaml with each further file laid over it as Snakemake's
    ``--configfile`` lays it (a mapping merged key by key, anything else replaced), then validated
    with the schema's defaults filled in."""
    cfg = qconfig.load(qconfig.DEFAULT_CONFIG, validate=False)
    for path in configfiles or []:
        _merge(cfg, qconfig.load(path, validate=False))
    return qconfig.validate_config(cfg, source=" + ".join(["config/config.yaml", *(configfiles or [])]))


def _merge(base: dict, over: dict) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def partial_paths(card: str) -> tuple[str, str]:
    return f"results/{card}/partial/points.parquet", f"results/{card}/partial/report.html"


def partial_report(cfg: dict, card: str, root: str | Path = ".") -> tuple[Path, Path, dict]:
    """The dataset and the report of whatever planned points are finished now, with what is left:
    for a run still going (it reads finished files only: every metrics file is written whole, by a
    rename). With every point finished, both equal the final ones byte for byte."""
    from . import aggregate, dataset, report

    root = Path(root)
    done = [str(root / t.path) for t in targets.planned(cfg, card) if (root / t.path).exists()]
    p = pending(cfg, card, root)
    parquet, html = (root / x for x in partial_paths(card))
    dataset.write(aggregate.collect(done), parquet)
    report.build(parquet, html, card=card, pending=p)
    return parquet, html, p
