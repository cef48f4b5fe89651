"""What the rules' jobs took here: Snakemake's ``benchmark:`` files, read back.

Every rule that costs time writes one TSV per job under ``logs/benchmarks/<rule>/<wildcards...>.tsv``
(its ``s`` column: the job's wall-clock seconds). A job's *kind* groups jobs that cost alike: the
benchmark of a generate or score job, the family of a point measure's. Three readers: the estimate of
what a run has left (quantladder.progress), the ``runtime`` a job asks its scheduler for
(quantladder.resources) and what a walk down the ladder cost (quantladder.find), each through
``finished``.
"""

from __future__ import annotations

import csv
import functools
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Iterator, NamedTuple

from . import measures

BENCHMARKS = "logs/benchmarks"
# rule -> the position of the kind among its benchmark file's path parts (after the rule's folder)
_KIND_PART = {"quantize": 0, "reference_rung": 0, "imatrix": 0, "generate": -1, "score": -1, "tool_anchor_gate": 1}
# rule -> the wildcard that names its kind (default: the family)
_KIND_WILDCARD = {"generate": "task", "score": "task", "tool_anchor_gate": "benchmark"}


@functools.cache
def _kinds() -> tuple[dict[str, int], dict[str, str]]:
    """The two tables above with the measures' rules, as each measure declares them (RuleCost.kind_part,
    RuleCost.kind): read on first use, so that importing this module loads no measure."""
    rules = measures.rules()
    return ({**_KIND_PART, **{r: rc.kind_part for r, rc in rules.items()}},
            {**_KIND_WILDCARD, **{r: rc.kind for r, rc in rules.items() if rc.kind != "family"}})

_cache: dict[str, dict] = {}


def _read_seconds(tsv: Path) -> float | None:
    try:
        with tsv.open() as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        return float(rows[-1]["s"]) if rows else None
    except (OSError, KeyError, ValueError):
        return None  # a benchmark file being written, or another format: no figure from it


class Job(NamedTuple):
    """One finished job's benchmark file: its rule, the parts of its path under the rule's folder
    (without .tsv), its wall-clock seconds and when the file was written (its mtime)."""

    rule: str
    parts: tuple[str, ...]
    s: float
    mtime: float


def finished(root: str | Path = ".") -> Iterator[Job]:
    """Every finished job under ``root``'s benchmark folder, in path order: the one walk over the
    files that the estimates here and the walk's cost (quantladder.find) read."""
    base = Path(root) / BENCHMARKS
    for tsv in sorted(base.rglob("*.tsv")) if base.is_dir() else []:
        s = _read_seconds(tsv)
        if s is not None:
            parts = tsv.relative_to(base).with_suffix("").parts
            yield Job(parts[0], parts[1:], s, tsv.stat().st_mtime)


class Seen(defaultdict):
    """(rule, kind) -> the seconds of its finished jobs; ``written`` holds, in the same order, when
    each job's benchmark file was written (its mtime)."""

    def __init__(self):
        super().__init__(list)
        self.written: dict[tuple[str, str], list[float]] = defaultdict(list)

    def add(self, key: tuple[str, str], s: float, mtime: float) -> None:
        self[key].append(s)
        self.written[key].append(mtime)


def seconds(root: str | Path = ".", *, fresh: bool = True) -> Seen:
    """Seconds of every finished job, by (rule, kind) and by (rule, "") for the whole rule.
    ``fresh=False`` reads the files once per process (a DAG build asks for every job)."""
    key = str(Path(root).resolve())
    if not fresh and key in _cache:
        return _cache[key]
    out = Seen()
    for job in finished(root):
        out.add((job.rule, ""), job.s, job.mtime)
        i = _kinds()[0].get(job.rule)
        if i is not None and len(job.parts) > max(i, -i - 1):
            out.add((job.rule, job.parts[i]), job.s, job.mtime)
    _cache[key] = out
    return out


def kind_of(rule: str, wildcards) -> str:
    """A job's kind from its wildcards (what ``seconds`` files it under)."""
    return str(getattr(wildcards, _kinds()[1].get(rule, "family"), "") or "")


def median_s(seen: dict, rule: str, kind: str = "", *, since: float | None = None) -> float | None:
    """The median seconds of the finished jobs of (rule, kind), else of the rule; None if none ran.
    ``since``: only jobs whose benchmark file was written after it (a job timed on other work, before
    its items were made again, says nothing of this job)."""
    for key in ((rule, kind), (rule, "")):
        took = seen.get(key) or []
        if since is not None and took:
            took = [s for s, t in zip(took, seen.written[key]) if t > since]
        if took:
            return statistics.median(took)
    return None
