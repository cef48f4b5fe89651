"""What a config plans: every point's metrics files, whole and per series.

One list for its three readers: the default target and the aggregates (rules/common.smk), the
partial report and the estimate of what is left (quantladder.progress). A path here is the path
the rules write, so "finished" is "its metrics file exists".
"""

from __future__ import annotations

from typing import NamedTuple

from . import config as qconfig

POINT_METRICS = "results/{card}/{series}/{family}/{rung}/{kv}/{measure}/metrics.json"
# A task point's teacher-forced fidelity rows (quantladder.measures.fidelity) sit beside its
# benchmark's directory, as the measure `fidelity-<task>` (a hyphen: no measure or task is named so).
FIDELITY = "fidelity-"


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
    return [m for m, sec in (cfg.get("measures") or {}).items() if sec["enabled"]]


def tasks(cfg: dict) -> list[str]:
    """The task benchmarks switched on, in config order."""
    return [b for b, sec in (cfg.get("benchmarks") or {}).items() if (sec or {}).get("enabled")]


def point_measures(cfg: dict, family: str, rung: str) -> list[str]:
    """A point's measures and benchmarks: every measure the family takes (all, unless it lists its
    `measures`); the task benchmarks on the family's `task_rungs` (and its reference) that the family
    can take (a base model takes no chat exam; a family that lists its `benchmarks` takes those)."""
    out = [m for m in measures(cfg) if qconfig.measure_runs_for(cfg, m, family)]
    if qconfig.runs_tasks(cfg, family, rung):
        out += [t for t in tasks(cfg) if qconfig.task_runs_for(cfg, t, family)]
    return out


def fidelity_tasks(cfg: dict) -> list[str]:
    """The enabled task benchmarks whose points get teacher-forced fidelity rows (``fidelity.benchmarks``)."""
    listed = cfg["fidelity"]["benchmarks"]
    return [t for t in tasks(cfg) if t in listed]


def fidelity_measures(cfg: dict, family: str, rung: str, kv: str) -> list[str]:
    """A task point's fidelity measures: every point of a listed benchmark but the one it is
    measured against (the reference rung at the family's first KV type)."""
    if rung == qconfig.reference_rung(cfg, family) and kv == qconfig.kv_types(cfg, family)[0]:
        return []
    return [FIDELITY + t for t in fidelity_tasks(cfg)
            if qconfig.runs_tasks(cfg, family, rung) and qconfig.task_runs_for(cfg, t, family)]


def planned(cfg: dict, card: str, family: str | None = None) -> list[Target]:
    """Every metrics file the config plans on a card (one family's, if named): the ladder's points,
    then the noise series (the reference rung, first KV type, every task benchmark)."""
    fams = [family] if family else qconfig.families(cfg)
    out = [Target(card, "points", fam, rung, kv, m)
           for fam in fams for rung in qconfig.rungs(cfg, fam) for kv in qconfig.all_kv_types(cfg, fam)
           for m in point_measures(cfg, fam, rung) if kv in qconfig.kv_types(cfg, fam, m)]
    out += [Target(card, "points", fam, rung, kv, m)
            for fam in fams for rung in qconfig.rungs(cfg, fam) for kv in qconfig.kv_types(cfg, fam)
            for m in fidelity_measures(cfg, fam, rung, kv)]
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


ITEM_FILES = ("resources/benchmarks/{task}/{family}/items.jsonl", "resources/benchmarks/{task}/{family}/items.json")


def item_files(cfg: dict, targets: list[Target]) -> list[str]:
    """The items files the task benchmarks' points are generated from, once each."""
    task_names = set(tasks(cfg))
    pairs = dict.fromkeys((t.measure, t.family) for t in targets if t.measure in task_names)
    return [f.format(task=task, family=fam) for task, fam in pairs for f in ITEM_FILES]
