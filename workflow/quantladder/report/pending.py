"""A report at any moment: what a running or unfinished run still lacks, as the report shows it.

The caller hands ``render``/``build`` a ``pending`` dict (the point-measures the configuration plans,
those finished, the ones missing, the jobs left per rule and their estimated minutes). With nothing
missing the report is the full run's, unchanged. Otherwise a banner heads the page, the answer says it
is built on a partial run, the "Not measured yet" section lists what is missing, and in the family
tables a point or rung the configuration plans and the dataset has no row of yet reads *not measured
yet*: never 0, never a loss, with no delta and no verdict.

A point-measure whose file is there but which Snakemake plans again (its inputs differ from the
config's: a user's traffic file laid over the default's finished run) is missing too, never shown
as measured; the section says it runs again and why, and whether the jobs left are Snakemake's own
plan or a count of the files present (quantladder.progress).
"""

from __future__ import annotations

from dataclasses import dataclass

from .markup import esc, table

NOT_YET = '<span class="pending">not measured yet</span>'
BASIS = {"measured": "measured <small>(the rule's benchmark files)</small>",
         "estimate": "guessed <small>(no job of the rule has finished here yet)</small>"}
CSS = """
.banner{background:#eef3fb;border:1px solid #9bb3d6;padding:6px 8px;border-radius:6px;font-weight:600;margin:4px 0}
.pending{font-style:italic;color:#555}tr.pending td{background:#f6f6f6}
table[id^=table-pending] td:nth-child(3){white-space:normal;min-width:24em}
"""


@dataclass(frozen=True)
class Pending:
    planned: int
    finished: int
    missing: tuple[dict, ...]  # {family, rung, kv, measure, series}
    jobs_left: tuple[dict, ...]  # {rule, jobs, est_min, basis}
    est_min_left: float | None
    as_of: str | None
    counted_from: str | None = None  # "snakemake" (its plan), else "files[: why the plan was not read]"

    @classmethod
    def of(cls, pending: dict | None) -> Pending | None:
        """The run's pending work, or None when nothing is missing (the report is then the full run's)."""
        if not pending or not pending.get("missing"):
            return None
        return cls(int(pending["planned"]), int(pending["finished"]), tuple(pending["missing"]),
                   tuple(pending.get("jobs_left") or ()), pending.get("est_min_left"), pending.get("as_of"),
                   pending.get("counted_from"))

    def lacks(self, family: str, rung: str, kv: str, measure: str) -> bool:
        return any(m["family"] == family and m["rung"] == rung and m["kv"] == kv and m["measure"] == measure
                   for m in self.missing)

    def measures(self, family: str) -> set[str]:
        return {m["measure"] for m in self.missing if m["family"] == family}

    def points(self, family: str) -> list[tuple[str, str]]:
        """The family's points (rung, KV type) with a measure missing, in the order listed; a noise run
        is the reference's again, not a point of its own."""
        return list(dict.fromkeys((m["rung"], m["kv"]) for m in self.missing
                                  if m["family"] == family and m.get("series", "points") == "points"))


def mark(p: Pending | None, family: str, rung: str, kv: str, measure: str) -> str:
    """The cell of a figure that has no row: not measured yet if the run still lacks it, else a dash."""
    return NOT_YET if p is not None and p.lacks(family, rung, kv, measure) else "—"


def unmeasured_points(p: Pending | None, family: str, have) -> list[tuple[str, str]]:
    """The family's points the run lacks and the dataset has no row of (``have``: its (rung, KV type)s)."""
    have = set(have)
    return [] if p is None else [pt for pt in p.points(family) if pt not in have]


def unmeasured_rungs(p: Pending | None, family: str, have) -> list[str]:
    """The family's rungs the run lacks and the dataset has no row of (``have``: its rungs)."""
    have = set(have)
    return [] if p is None else [r for r in dict.fromkeys(r for r, _ in p.points(family)) if r not in have]


def _minutes(x) -> str:
    return "no estimate" if x is None else f"{x:.0f} min" if x >= 10 else f"{x:.1f} min"


def banner(p: Pending) -> str:
    return (f'<p class="banner" id="partial">partial report: {p.finished} of {p.planned} point-measures measured, '
            f"about {esc(_minutes(p.est_min_left))} of jobs left</p>")


def answer_note(p: Pending | None, families, card: str) -> str:
    """The answer's first line on a partial run (``families``: those with rows on the card)."""
    if p is None:
        return ""
    absent = [f for f in dict.fromkeys(m["family"] for m in p.missing) if f not in set(families)]
    return (f'<p class="warn partial">Built on a partial run: {p.finished} of {p.planned} point-measures measured'
            + (f" (as of {esc(p.as_of)})" if p.as_of else "") + ". A rung or benchmark marked <i>not measured "
            "yet</i> has no figure yet, not a 0 and not a loss; the verdicts (Holm's correction counts the "
            "comparisons measured), the plan and the recommendation weigh what is measured only."
            + (f" No figure yet for {esc(', '.join(absent))}." if absent else "")
            + f' What is missing: <a href="#pending-{esc(card)}">not measured yet</a>.</p>')


def pending_section(p: Pending, card: str) -> str:
    """The missing point-measures grouped by family and rung, and the jobs left per rule with their minutes."""
    groups: dict[tuple[str, str], dict[str, list[str]]] = {}
    for m in p.missing:
        what = esc(m["measure"]) + ("" if m.get("series", "points") == "points" else
                                    f" <small>({esc(m['series'])} run)</small>")
        if m.get("rerun"):  # its file is there, from other inputs than the config's
            what += (f' <small class="rerun" title="{esc(m["rerun"])}">(measured from other inputs than the '
                     "configuration's: runs again)</small>")
        groups.setdefault((m["family"], m["rung"]), {}).setdefault(m["kv"], []).append(what)
    rows = [[esc(fam), esc(rung), "; ".join(f"KV {esc(kv)}: {', '.join(ms)}" for kv, ms in by_kv.items()),
             str(sum(len(ms) for ms in by_kv.values()))] for (fam, rung), by_kv in groups.items()]
    again = sum(bool(m.get("rerun")) for m in p.missing)
    out = [f'<p class="how">{p.finished} of {p.planned} point-measures the configuration plans are measured'
           + (f" as of {esc(p.as_of)}" if p.as_of else "") + f"; these {len(p.missing)} are not yet"
           + (f" ({again} of them measured from other inputs than the configuration's, which Snakemake runs "
              "again: their figures are not shown)" if again else "") + ".</p>",
           table(["family", "rung", "not measured yet <small>(per KV type)</small>", "point-measures"], rows,
                 f"table-pending-{card}")]
    if p.jobs_left:
        jobs = [[esc(j["rule"]), str(j["jobs"]), esc(_minutes(j.get("est_min"))),
                 BASIS.get(j.get("basis"), esc(j.get("basis")))] for j in p.jobs_left]
        kinds = {b: sum(j.get("basis") == b for j in p.jobs_left) for b in BASIS}
        out.append(f'<p class="how">The jobs left per rule ({esc(_counted(p.counted_from))}): about '
                   f"{esc(_minutes(p.est_min_left))} in all; "
                   f"{kinds['measured']} rule(s) timed from the benchmark files of their jobs that ran, "
                   f"{kinds['estimate']} guessed (none of their jobs has finished here yet).</p>"
                   + table(["rule", "jobs left", "estimated time", "basis"], jobs, f"table-jobs-left-{card}"))
    return "".join(out)


def _counted(how: str | None) -> str:
    if how == "snakemake":
        return "Snakemake's own plan, jobs whose inputs changed among them"
    if how and how.startswith("files: "):
        return ("the files present only: Snakemake's plan could not be read ("
                + how[len("files: "):].strip().splitlines()[-1][:200] + ")")
    return "the files present only"
