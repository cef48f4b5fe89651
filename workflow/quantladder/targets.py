"""What a config plans: every point's metrics files, whole and per series.

One list for its three readers: the default target and the aggregates (rules/common.smk), the
partial report and the estimate of what is left (quantladder.progress). A path here is the path
the rules write, so "finished" is "its metrics file exists".
"""

from __future__ import annotations

from typing import NamedTuple

from . import config as qconfig

POINT_METRICS = "results/{card}/{series}/{family}/{rung}/{kv}/{measure}/metrics.json"


class Target(NamedTuple):
    """One planned metrics file: a point (card, family, rung, KV type) and one measure or benchmark;
    series ``points`` (the ladder) or ``noise`` (the reference rung again at another batch setting)."""

    card: str
    series: str
    family: str
    rung: str
    kv: str
    measure: str

    @property
    def path(self) -> str:
        return POINT_METRICS.format(**self._asdict())


def measures(cfg: dict) -> list[str]:
    """The per-point measures switched on (perplexity, speed, memory, energy), in config order."""
    return [m for m, sec in (cfg.get("measures") or {}).items() if (sec or {}).get("enabled", True)]


def tasks(cfg: dict) -> list[str]:
    """The task benchmarks switched on, in config order."""
    return [b for b, sec in (cfg.get("benchmarks") or {}).items() if (sec or {}).get("enabled")]


def point_measures(cfg: dict, family: str, rung: str) -> list[str]:
    """A point's measures and benchmarks: every measure; the task benchmarks on the family's
    `task_rungs` (and its reference) that the family can take (a base model takes no chat exam)."""
    out = measures(cfg)
    if qconfig.runs_tasks(cfg, family, rung):
        out += [t for t in tasks(cfg) if qconfig.task_runs_for(cfg, t, family)]
    return out


def planned(cfg: dict, card: str, family: str | None = None) -> list[Target]:
    """Every metrics file the config plans on a card (one family's, if named): the ladder's points,
    then the noise series (the reference rung, first KV type, every task benchmark)."""
    fams = [family] if family else qconfig.families(cfg)
    out = [Target(card, "points", fam, rung, kv, m)
           for fam in fams for rung in qconfig.rungs(cfg, fam) for kv in qconfig.all_kv_types(cfg, fam)
           for m in point_measures(cfg, fam, rung) if kv in qconfig.kv_types(cfg, fam, m)]
    if qconfig.noise_floor_enabled(cfg):
        for fam in fams:
            rung, kv = qconfig.reference_rung(cfg, fam), qconfig.kv_types(cfg, fam)[0]
            out += [Target(card, "noise", fam, rung, kv, t) for t in tasks(cfg) if qconfig.task_runs_for(cfg, t, fam)]
    return out


def per_item_files(cfg: dict, targets: list[Target]) -> list[str]:
    """The per-item files beside the task benchmarks' metrics (flips and identity read them)."""
    task_names = set(tasks(cfg))
    out = []
    for t in targets:
        if t.measure in task_names:
            d = t.path.rsplit("/", 1)[0]
            out += [f"{d}/verdicts.jsonl", f"{d}/generations.jsonl"]
    return out
