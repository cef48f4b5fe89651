"""What the rules' jobs took here: Snakemake's ``benchmark:`` files, read back.

Every rule that costs time writes one TSV per job under ``logs/benchmarks/<rule>/<wildcards...>.tsv``
(its ``s`` column: the job's wall-clock seconds). A job's *kind* groups jobs that cost alike: the
benchmark of a generate or score job, the family of a point measure's. Two readers: the estimate of
what a run has left (quantladder.progress) and the ``runtime`` a job asks its scheduler for
(quantladder.resources).
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

BENCHMARKS = "logs/benchmarks"
# rule -> the position of the kind among its benchmark file's path parts (after the rule's folder)
_KIND_PART = {"quantize": 0, "reference_rung": 0, "imatrix": 0, "generate": -1, "score": -1, "perplexity": 1, "reference_logits": 1, "speed": 1, "memory": 1,
              "energy": 1, "tool_anchor_gate": 1}
_KIND_WILDCARD = {"generate": "task", "score": "task", "tool_anchor_gate": "benchmark"}

_cache: dict[str, dict] = {}


def _read_seconds(tsv: Path) -> float | None:
    try:
        with tsv.open() as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        return float(rows[-1]["s"]) if rows else None
    except (OSError, KeyError, ValueError):
        return None  # a benchmark file being written, or another format: no figure from it


def seconds(root: str | Path = ".", *, fresh: bool = True) -> dict[tuple[str, str], list[float]]:
    """Seconds of every finished job, by (rule, kind) and by (rule, "") for the whole rule.
    ``fresh=False`` reads the files once per process (a DAG build asks for every job)."""
    key = str(Path(root).resolve())
    if not fresh and key in _cache:
        return _cache[key]
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    base = Path(root) / BENCHMARKS
    for tsv in sorted(base.rglob("*.tsv")) if base.is_dir() else []:
        parts = tsv.relative_to(base).with_suffix("").parts
        s = _read_seconds(tsv)
        if s is None:
            continue
        rule, rest = parts[0], parts[1:]
        out[(rule, "")].append(s)
        i = _KIND_PART.get(rule)
        if i is not None and len(rest) > max(i, -i - 1):
            out[(rule, rest[i])].append(s)
    _cache[key] = out
    return out


def kind_of(rule: str, wildcards) -> str:
    """A job's kind from its wildcards (what ``seconds`` files it under)."""
    return str(getattr(wildcards, _KIND_WILDCARD.get(rule, "family"), "") or "")


def median_s(seen: dict, rule: str, kind: str = "") -> float | None:
    """The median seconds of the finished jobs of (rule, kind), else of the rule; None if none ran."""
    for key in ((rule, kind), (rule, "")):
        if seen.get(key):
            return statistics.median(seen[key])
    return None
