"""Find my rung: the ladder walked for the user, down to the smallest rung shown to lose no more than
they accept (docs/find.md).

The procedure is the seeds' (start at Q4_K_M, Q8_0 as the reference, "if the difference on your tasks
is acceptable, go down one level and repeat; if not, go up"), made a claim with a stated error rate:

- **A rung is acceptable** when every accepted figure is *shown* within its bound
  (``stats.noninferiority.decide``: the bad-side bound of the paired interval is within the accepted
  loss). "Every figure" is an intersection–union test: the claim is rejected unless each figure's own
  one-sided test rejects, and that test has level α with no correction over the figures (Berger 1982,
  *Technometrics* 24:295–300; Berger & Hsu 1996, *Stat Sci* 11:283–319). A figure shown beyond its bound
  makes the rung *not acceptable*; otherwise it is *undetermined*, with the items that would settle it.
- **The walk's level** α (one-sided, ``find.alpha``, 0.025: the one-sided half of the project's 95 %
  intervals) holds over every rung and figure it looks at. Going *down* from the start rung is a fixed
  sequence (the start, then each rung below while the one above is shown acceptable): its claims need no
  split along the way (Maurer, Hothorn & Lehmacher 1995; Westfall & Krishen 2001). Going *up* after the
  start is not shown acceptable is no fixed sequence (each step up is a fresh chance of a false claim),
  so the rungs above the start share their part of α by Bonferroni. When the walk can go up, the two
  parts get α/2 each: down, each rung at α/2; up, each of the k rungs above the start at α/(2k). By the
  union bound the chance of any false claim is at most α, whatever the losses along the ladder.
- **Bisection** (``find.strategy``: ``bisect``, or ``auto`` with at least ``BISECT_FROM`` fitting
  candidates): on a long ladder the walk probes the start, then the middle of the rungs still in
  question (below the lowest rung shown acceptable, above the highest shown not to be), until the two
  are neighbours. It measures at most ``m = 1 + ceil(log2(r + 1))`` rungs, r the larger side of the
  start, a number fixed before any result; its probes are no fixed sequence, so each is tested at
  α/m (Bonferroni): the chance of any false claim is again at most α. It trades the fixed
  sequence's full level per rung for fewer rungs measured: 12 candidates with the start third from
  the top, at most 5 rungs where stepping down may measure 10.
- **Monotonicity** is assumed only for *where to look*: below the first rung not shown acceptable the
  walk measures nothing (bisection: between two probes), on the assumption that smaller rungs lose at
  least as much. Losses need not fall with bits (IQ against K types, recipes), so the rung below the
  answer is always measured and its evidence is part of the answer, and the answer says that the rungs
  below it were not visited.

- **Objectives.** The candidates are every rung of the family's ladder, a third-party file
  (``families.<f>.prebuilt``) at its own measured size like a rung made here, each with its ``source``
  (made here, or the uploader). Memory at the stated context and, with ``find.min_tps``, a speed floor
  (the rung's measured generation tokens/s at the context and concurrency, ``dataset_view.speed_at``,
  never its size: IQ types run slower than K types of more bits on a CPU) decide which candidates the
  walk may visit; the answer says which constraint binds (memory, speed, or the accepted loss).
- **Matched size.** Every comparison of two rungs the answer makes states their size gap (bits per
  weight and bytes), and a third-party rung the walk measured is put beside the family's own ladder
  read at its size (``dataset_view.at_bpw``: linear between the two measured neighbours, said to be
  interpolated), so "their file beats ours" means at the same bytes.

The state of a walk is a plain dict (one JSON file per step under ``results/<card>/find/<family>/``):
the candidates in order of measured bits per weight, their memory at the stated context, the levels,
the rungs visited with their evidence, and the next rung to measure. ``advance`` is the one step
function; the Snakemake checkpoints (rules/find.smk) and ``replay`` (the same walk over points that
already exist, for a full ladder) both call it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import yaml

from . import benchmarks, catalog  # noqa: F401  -- catalog: every figure declared before one is looked up
from . import card as qcard
from . import config as qconfig
from . import dataset_view as dv
from . import deltas
from . import metrics as qmetrics
from . import schemas, sizes
from . import status as qstatus
from . import targets as qtargets
from . import thinking
from . import timings
from .dataset import provenance_label
from .errors import ConfigError, DataError
from .gguf_meta import GGUFInfo
from .io import atomic_path, hash_obj, read_json, read_jsonl
from .kv_policy import parse_kv
from .measures.perplexity import pass_name, passes
from .scriptutil import SNAKEFILE
from .stats import noninferiority as ni

log = logging.getLogger(__name__)

# The request's keys, their types and defaults (reference Q8_0, start Q4_K_M, alpha 0.025, strategy auto,
# parallel 1) are the config schema's `find:` section, the one home of them; spec validates a section
# against it and fills the defaults in.
REQUIRED = ("family", "mem", "ctx", "accept")
BISECT_FROM = 8  # auto: bisection from this many fitting candidates (the stepping walk's worst case grows linearly)
ACCEPTABLE, NOT_ACCEPTABLE, UNDETERMINED = "acceptable", "not acceptable", "undetermined"
ANSWER = "results/{card}/find/{family}.json"
# what the token figures accept: the name a user writes -> (metric, what the bound is written in)
TOKEN_FIGURES = {"kld": ("kld_mean", "nats"), "ppl_ratio": ("ln_ppl_ratio", "ratio")}
_ACCEPT = re.compile(r"^\s*([A-Za-z_0-9]+)(?::([A-Za-z0-9._-]+))?\s*(<=|>=)\s*([+-]?(?:\d+\.?\d*|\.\d+))\s*"
                     r"(pt|pts|points?|nats?|x)?\s*$")


# ------------------------------------------------------------------------------------------ the request

@dataclass(frozen=True)
class Figure:
    """One accepted loss: a figure of a benchmark (a corpus's pass for KLD / PPL ratio) and its bound."""

    text: str  # as the user wrote it
    benchmark: str  # "perplexity" or a task benchmark
    metric: str
    corpus: str | None
    tolerance: float  # the loss accepted, in the metric's unit (> 0)
    unit: str
    higher_is_better: bool

    @property
    def key(self) -> str:
        return f"{self.benchmark}:{self.metric}" + (f":{self.corpus}" if self.corpus else "")


def parse_accept(text, cfg: dict, family: str, where: str = "find.accept") -> list[Figure]:
    """``"tasks:all_checks_pass>=-2pt, kld:manual-es<=0.05, ppl_ratio:prose-en<=1.05"`` (or a list of
    such) → the figures, each checked against the config (a corpus with a perplexity pass, a task
    benchmark switched on for the family, a paired figure it declares)."""
    parts = [p for t in ([text] if isinstance(text, str) else list(text or [])) for p in str(t).split(",")]
    parts = [p.strip() for p in parts if p.strip()]
    if not parts:
        raise ConfigError(f"{where}: name at least one figure and its accepted loss, e.g. "
                          "'kld:manual-es<=0.05' or 'tasks>=-2pt'")
    out = []
    for p in parts:
        m = _ACCEPT.match(p)
        if not m:
            raise ConfigError(f"{where}: cannot read {p!r}: write BENCHMARK[:METRIC]>=-LOSSpt (a task figure, in "
                              "points), kld:CORPUS<=NATS, ppl_ratio:CORPUS<=RATIO, think_close>=-LOSSpt, "
                              "think_cap<=LOSSpt or think_tokens<=RATIOx")
        name, sub, op, value, unit = m.group(1), m.group(2), m.group(3), float(m.group(4)), m.group(5)
        if name in thinking.ACCEPT:  # the thinking's figures: one per task benchmark named or on (issue 43)
            out += _thinking_figures(p, name, sub, op, value, unit, cfg, family, where)
            continue
        out.append(_token_figure(p, name, sub, op, value, cfg, where) if name in TOKEN_FIGURES
                   else _task_figure(p, name, sub, op, value, unit, cfg, family, where))
    keys = [f.key for f in out]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{where}: a figure is named twice ({keys})")
    return out


def _token_figure(p, name, corpus, op, value, cfg, where) -> Figure:
    metric, unit = TOKEN_FIGURES[name]
    if not corpus:
        raise ConfigError(f"{where}: {p!r}: name the corpus, e.g. {name}:manual-es")
    passes = [c for c, ctx in _short_passes(cfg)]
    if corpus not in passes:
        raise ConfigError(f"{where}: {p!r}: {corpus!r} is not a corpus of measures.perplexity (its passes: "
                          f"{passes}); add it to measures.perplexity.corpora")
    if op != "<=":
        raise ConfigError(f"{where}: {p!r}: a {name} bound is an upper one: write {name}:{corpus}<=…")
    if name == "ppl_ratio":
        if not value > 1:
            raise ConfigError(f"{where}: {p!r}: the accepted PPL ratio must be > 1 (e.g. 1.05: 5 % higher perplexity)")
        tol = math.log(value)  # the figure compared is ln(PPL_rung / PPL_ref), paired per token
    else:
        if not value > 0:
            raise ConfigError(f"{where}: {p!r}: the accepted KLD must be > 0 nats")
        tol = value
    return Figure(p, "perplexity", metric, corpus, tol, qmetrics.get(metric).unit, False)


def _task_figure(p, bench, metric, op, value, unit, cfg, family, where) -> Figure:
    on = qtargets.tasks(cfg)
    if bench not in on:
        raise ConfigError(f"{where}: {p!r}: {bench!r} is no task benchmark switched on (on: {on}; or kld / ppl_ratio)")
    if not qconfig.task_runs_for(cfg, bench, family):
        raise ConfigError(f"{where}: {p!r}: {bench} does not run for {family} (a chat exam on a base model)")
    paired = [m for m in qmetrics.headlines(bench) if qmetrics.get(m).paired == "items"]
    if metric is None:
        if not paired:
            raise ConfigError(f"{where}: {p!r}: {bench} declares no paired headline figure; name one")
        metric = paired[0]
    m = qmetrics.registry().get(metric)
    if m is None or m.paired != "items" or bench not in m.writers:
        known = sorted(x.name for x in qmetrics.registry().values() if x.paired == "items" and bench in x.writers)
        raise ConfigError(f"{where}: {p!r}: {bench} has no paired figure {metric!r} (its figures: {known}; "
                          f"{bench}>=… alone names its headline {paired[0] if paired else None})")
    if op != ">=" or not value < 0:
        raise ConfigError(f"{where}: {p!r}: a task loss is a lower bound below zero, in points: {bench}:{metric}>=-2pt")
    if unit not in (None, "pt", "pts", "point", "points"):
        raise ConfigError(f"{where}: {p!r}: a task figure's loss is in points (pt), not {unit}")
    return Figure(p, bench, metric, None, -value, m.unit, True)


def _thinking_figures(p, name, bench, op, value, unit, cfg, family, where) -> list[Figure]:
    """``think_close>=-2pt``, ``think_cap<=2pt``, ``think_tokens<=1.25x`` (``name:BENCHMARK`` for one task
    benchmark; without it, every task benchmark on for the family): the thinking's paired figures
    (quantladder.thinking), read from the replies of the rung and the reference."""
    metric, tol, hib = thinking.bound(p, name, op, value, unit, where)
    on = [b for b in qtargets.tasks(cfg) if qconfig.task_runs_for(cfg, b, family)]
    if bench is not None and bench not in on:
        raise ConfigError(f"{where}: {p!r}: {bench!r} is no task benchmark that runs for {family} (on: {on})")
    if not on:
        raise ConfigError(f"{where}: {p!r}: no task benchmark runs for {family}: the thinking is read from its replies")
    return [Figure(p, b, metric, None, tol, qmetrics.get(metric).unit, hib) for b in ([bench] if bench else on)]


def _short_passes(cfg: dict) -> list[tuple[str, str]]:
    p = cfg["measures"]["perplexity"]
    if not p["enabled"] or not p["kld"]:
        return []
    return [(c, ctx) for c, ctx in passes(cfg) if ctx == f"n{int(p['n_ctx'])}"]


@dataclass(frozen=True)
class Spec:
    family: str
    reference: str
    mem_bytes: int
    mem: str
    ctx: int
    kv: str
    figures: tuple[Figure, ...]
    rungs: tuple[str, ...]  # the candidates as named (order decided by measured bits per weight)
    start: str
    alpha: float  # one-sided
    strategy: str  # auto, step or bisect
    min_tps: float | None  # the speed floor: generation tokens/s of one sequence, at ctx and parallel
    parallel: int  # sequences generated at a time the floor is for

    def as_dict(self) -> dict:
        d = asdict(self)
        d["figures"] = [asdict(f) | {"key": f.key} for f in self.figures]
        return d

    @property
    def key(self) -> str:
        """What the walk's every step depends on (a Snakemake param: a change reruns the walk). A walk
        without a speed floor keeps the key it had before the floor existed."""
        d = self.as_dict()
        if d["min_tps"] is None and d["parallel"] == _schema()["properties"]["parallel"]["default"]:
            d.pop("min_tps"), d.pop("parallel")
        return hash_obj(d)[:16]


def spec(cfg: dict, section: dict | None = None, where: str = "find") -> Spec:
    """The search the config's ``find:`` section (or ``section``) asks for; errors name the key."""
    s = request(cfg.get("find") if section is None else section, where)
    fam = str(s["family"])
    fams = qconfig.families(cfg)
    if fam not in fams:
        raise ConfigError(f"{where}.family: {fam!r} is not a family of this config (families: {fams})")
    ladder = qconfig.rungs(cfg, fam)
    ref = str(s["reference"])
    if ref not in ladder and ref == _schema()["properties"]["reference"]["default"]:
        ref = qconfig.reference_rung(cfg, fam)  # a ladder without Q8_0 walks against the family's own reference
    if ref not in ladder:
        raise ConfigError(f"{where}.reference: {ref!r} is not a rung of {fam} (its ladder: {ladder}); Q8_0, or the "
                          "family's F16/BF16 reference")
    mem_bytes = sizes.parse_bytes(s["mem"], f"{where}.mem")
    ctx = sizes.parse_ctx(s["ctx"], f"{where}.ctx")
    kv = str(s.get("kv") or qconfig.kv_types(cfg, fam)[0])
    if kv not in qconfig.kv_types(cfg, fam):
        raise ConfigError(f"{where}.kv: {kv!r} is not a KV type of {fam} ({qconfig.kv_types(cfg, fam)})")
    rungs = [str(r) for r in (s.get("rungs") or [r for r in ladder if r not in (ref, qconfig.reference_rung(cfg, fam))])]
    bad = [r for r in rungs if r not in ladder]
    if bad:
        raise ConfigError(f"{where}.rungs: {bad} not in {fam}'s ladder ({ladder})")
    rungs = [r for r in dict.fromkeys(rungs) if r not in (ref, qconfig.reference_rung(cfg, fam))]
    if not rungs:
        raise ConfigError(f"{where}.rungs: no candidate below the reference {ref}")
    alpha, strategy, min_tps, parallel = float(s["alpha"]), s["strategy"], s["min_tps"], s["parallel"]
    if min_tps is not None:
        min_tps = float(min_tps)
        if "speed" not in qtargets.measures(cfg):
            raise ConfigError(f"{where}.min_tps: the speed floor is held against each rung's measured speed, and "
                              "measures.speed is switched off: switch it on, or drop the floor")
    figs = parse_accept(s["accept"], cfg, fam, where=f"{where}.accept")
    return Spec(fam, ref, mem_bytes, str(s["mem"]), ctx, kv, tuple(figs), tuple(rungs), str(s["start"]),
                alpha, strategy, min_tps, parallel)


def _schema() -> dict:
    """The config schema's ``find:`` request (``definitions/find``): its keys, types and defaults."""
    return schemas.load(schemas.SCHEMA_PATH)["definitions"]["find"]


def request_defaults() -> dict:
    """Every optional key of a ``find:`` section at its schema default (null where it has none)."""
    keys = [k for k in _schema()["properties"] if k not in REQUIRED]
    return dict.fromkeys(keys) | schemas.filled_def(schemas.SCHEMA_PATH, "find", {})


def request(section, where: str = "find") -> dict:
    """``section`` (a ``find:`` section, validated or not) checked against the config schema's ``find:``
    with its defaults filled in; errors name the key (``find.alpha: ...``)."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: a mapping with {', '.join(REQUIRED)}, got {type(section).__name__}")
    schema = _schema()
    known = list(schema["properties"])
    unknown = sorted(set(section) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown} (known: {known})")
    for k in REQUIRED:
        if section.get(k) in (None, "", []):
            raise ConfigError(f"{where}.{k}: required")
    out = schemas.filled_def(schemas.SCHEMA_PATH, "find", section)
    errors = sorted(schemas.filling_validator(schema).iter_errors(out), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        key = ".".join([where, *map(str, e.path)])
        about = schema["properties"][str(e.path[0])].get("description") if e.path else None
        raise ConfigError(f"{key}: {e.message}" + (f" ({about})" if about else ""))
    return out


# ------------------------------------------------------------------------------------------ files a rung needs

def figure_files(sp: Spec, cfg: dict, card: str, rung: str) -> list[str]:
    """The metrics (and per-item) files one rung's figures are read from: ordinary points."""
    out = []
    for f in sp.figures:
        if f.benchmark == "perplexity":
            ctx = f"n{int(cfg['measures']['perplexity']['n_ctx'])}"
            out.append(f"results/{card}/points/{sp.family}/{rung}/{sp.kv}/perplexity/{pass_name(f.corpus, ctx)}/metrics.json")
        else:
            t = qtargets.Target(card, "points", sp.family, rung, sp.kv, f.benchmark)
            out += [t.path, *qtargets.per_item_files(cfg, [t])]
    return list(dict.fromkeys(out))


def reference_files(sp: Spec, cfg: dict, card: str) -> list[str]:
    """The reference's files: only the task figures compare with it (KLD and the PPL ratio are measured
    against the family's stored reference log-probs)."""
    task = [f for f in sp.figures if f.benchmark != "perplexity"]
    return figure_files(replace(sp, figures=tuple(task)), cfg, card, sp.reference) if task else []


def sidecar(cfg: dict, family: str, rung: str) -> str:
    kind = qconfig.rung_kind(cfg, family, rung)
    return f"resources/models/{family}/{kind}/{rung}.gguf.json"


def speed_file(sp: Spec, card: str, rung: str) -> str:
    """The speed point of a candidate (the measure every full run makes): read only with a speed floor."""
    return qtargets.Target(card, "points", sp.family, rung, sp.kv, "speed").path


def step0_files(sp: Spec, cfg: dict, card: str) -> list[str]:
    """What the walk's first step reads: every candidate's sidecar (its measured bits per weight and
    size) and, with a speed floor, every candidate's speed point (so each is measured for speed, the
    cheapest measure of a rung, before the walk picks)."""
    out = [sidecar(cfg, sp.family, r) for r in (*sp.rungs, sp.reference)]
    return out + ([speed_file(sp, card, r) for r in sp.rungs] if sp.min_tps is not None else [])


def source(cfg: dict, family: str, rung: str, record: dict | None = None) -> str:
    """Where a candidate's file comes from: "made here", or "uploader <owner>" for a third-party file
    (the hub repository's owner, or the local path or package it was taken from), with the provenance
    words of its sidecar's record (quantladder.dataset.provenance_label)."""
    if qconfig.rung_kind(cfg, family, rung) != "prebuilt":
        return "made here"
    pre = (cfg["families"][family].get("prebuilt") or {}).get(rung) or {}
    src = pre.get("source") or {}
    hf = src.get("hf") if isinstance(src, dict) else None
    who = (f"stand-in derived here from {pre['derive']['rung']}" if pre.get("derive") else
           str(hf.get("repo_id", "")).split("/")[0] if isinstance(hf, dict) and hf.get("repo_id") else
           f"local file {src['path']}" if isinstance(src, dict) and src.get("path") else
           f"package {src['package']}" if isinstance(src, dict) and src.get("package") else "unknown")
    words = provenance_label({"rung_kind": "prebuilt", "provenance": (record or {}).get("provenance"), "prebuilt": pre})
    return f"uploader {who} ({words})"


def inputs(sp: Spec, cfg: dict, card: str, root: str | Path = ".") -> tuple[dict, dict | None, dict]:
    """(infos, speeds, sources) of the candidates from the files ``step0_files`` names."""
    root = Path(root)
    records = {r: read_json(root / sidecar(cfg, sp.family, r)) for r in (*sp.rungs, sp.reference)}
    infos = {r: rec["info"] for r, rec in records.items()}
    sources = {r: source(cfg, sp.family, r, records[r]) for r in sp.rungs}
    speeds = None
    if sp.min_tps is not None:
        speeds = {}
        for r in sp.rungs:
            doc = read_json(root / speed_file(sp, card, r))
            rows = [x for x in doc.get("rows", []) if x.get("metric") in dv.SPEED_METRICS]
            speeds[r] = (dv.speed_at(rows, sp.ctx, sp.parallel) if doc.get("status") not in qstatus.BAD else
                         {"value": None, "reason": f"its speed point is {doc.get('status')}: {doc.get('status_reason')}"})
    return infos, speeds, sources


# ------------------------------------------------------------------------------------------ evidence

def _rows(path: Path) -> tuple[dict, list[dict]]:
    doc = read_json(path)
    return doc, doc.get("rows", [])


def evidence(sp: Spec, cfg: dict, card: str, rung: str, alpha: float, root: str | Path = ".") -> dict:
    """The rung's verdict at one-sided level ``alpha``: each figure's decision (its interval at
    1 − 2·alpha, two-sided) and the intersection of them."""
    root = Path(root)
    level = 1 - 2 * alpha
    figs = []
    for f in sp.figures:
        one = replace(sp, figures=(f,))
        figs += _figure_evidence(f, root, figure_files(one, cfg, card, rung), reference_files(one, cfg, card),
                                 level, alpha)
    states = [x["state"] for x in figs]
    verdict = (ACCEPTABLE if states and all(s == ni.NONINFERIOR for s in states) else
               NOT_ACCEPTABLE if ni.INFERIOR in states else UNDETERMINED)
    return {"rung": rung, "alpha": alpha, "interval_level": level, "verdict": verdict, "figures": figs}


def _absent(f: Figure, reason: str) -> dict:
    return {"figure": f.key, "accept": f.text, "state": ni.UNDETERMINED, "text": f"no figure: {reason}",
            "items_needed": None}


def _figure_evidence(f: Figure, root: Path, files: list[str], ref_files: list[str], level: float,
                     alpha: float) -> list[dict]:
    path = root / files[0]
    if not path.exists():
        raise DataError(f"find: {files[0]} is missing (the walk's step needs it as an input)")
    doc, rows = _rows(path)
    if doc.get("status") in qstatus.BAD:
        return [_absent(f, f"{files[0]} is {doc.get('status')}: {doc.get('status_reason')}")]
    if f.metric in qmetrics.in_group("thinking"):
        return [_thinking_evidence(f, root, path, ref_files, level, alpha)]
    mine = [r for r in rows if r.get("metric") == f.metric and
            (r.get("subset") == f.corpus if f.corpus else r.get("subset") is None)]
    if not mine:
        return [_absent(f, f"{files[0]} has no {f.metric} row" + (f" on {f.corpus}" if f.corpus else ""))]
    es = (doc.get("generation") or {}).get("early_stop")
    if f.benchmark != "perplexity" and es and es.get("state") not in (None, "continue"):
        return [sequential_evidence(f, es, alpha, str(files[0]))]
    out = []
    for r in mine:
        if f.benchmark == "perplexity":
            d = deltas.token_delta(r, level=level)
        else:
            ref_doc, ref_rows = _rows(root / ref_files[0])
            ref_row = next((x for x in ref_rows if x.get("metric") == f.metric and x.get("subset") is None
                            and x.get("n_ctx") == r.get("n_ctx")), None)
            if ref_row is None:
                out.append(_absent(f, f"the reference's {ref_files[0]} has no {f.metric} row"))
                continue
            rv, pv = read_jsonl(root / ref_files[1]), read_jsonl(path.with_name("verdicts.jsonl"))
            d = deltas.item_delta(benchmarks.get(f.benchmark)(), rv, pv, ref_row, r, level=level)
        if isinstance(d, str):
            out.append(_absent(f, d))
            continue
        dec = ni.decide(d.estimate, d.ci_low, d.ci_high, tolerance=f.tolerance, higher_is_better=f.higher_is_better,
                        unit=f.unit, stderr=d.stderr, n=d.n, alpha=2 * alpha)
        if dec is None:
            out.append(_absent(f, "no interval"))
            continue
        need = dec.items_needed
        if f.benchmark == "perplexity" and dec.state == ni.UNDETERMINED:
            # a quantized rung's KLD is never 0: plan at the divergence measured, with the margin it leaves
            need = (ni.items_needed(f.tolerance - dec.delta, f.unit, 0.0, d.stderr, d.n, alpha=2 * alpha)
                    if dec.delta < f.tolerance else None)
        out.append({"figure": f.key, "accept": f.text, "n_ctx": r.get("n_ctx"), "state": dec.state,
                    "value": r.get("value"), "unit": f.unit, "delta": dec.delta, "ci_low": dec.ci_low,
                    "ci_high": dec.ci_high, "stderr": d.stderr, "bound": dec.bound, "tolerance": f.tolerance, "n": dec.n,
                    "items_needed": need, "items_to_detect": dec.items_to_detect, "text": dec.text,
                    "file": str(files[0])})
    return out


def _thinking_evidence(f: Figure, root: Path, path: Path, ref_files: list[str], level: float, alpha: float) -> dict:
    """A thinking figure: from the replies of the rung and the reference (quantladder.thinking), at the
    walk's level; absent, with the reason, for replies that carry no thinking."""
    gens = path.with_name("generations.jsonl")
    ref_gens = root / Path(ref_files[0]).with_name("generations.jsonl")
    d = thinking.paired_figure(f.metric, read_jsonl(ref_gens) if ref_gens.exists() else None,
                               read_jsonl(gens) if gens.exists() else None, level=level)
    if isinstance(d, str):
        return _absent(f, d)
    dec = ni.decide(d["delta"], d["ci_low"], d["ci_high"], tolerance=f.tolerance, higher_is_better=f.higher_is_better,
                    unit=f.unit, stderr=d["stderr"], n=d["n"], alpha=2 * alpha)
    if dec is None:
        return _absent(f, "no interval")
    return {"figure": f.key, "accept": f.text, "n_ctx": None, "state": dec.state, "value": d["value"], "unit": f.unit,
            "delta": dec.delta, "ci_low": dec.ci_low, "ci_high": dec.ci_high, "stderr": d["stderr"], "bound": dec.bound,
            "tolerance": f.tolerance, "n": dec.n, "items_needed": dec.items_needed,
            "items_to_detect": dec.items_to_detect, "text": dec.text, "file": str(path)}


def sequential_evidence(f: Figure, es: dict, alpha: float, file: str) -> dict:
    """A point that stopped early (``benchmarks.<name>.early_stop``): its items were run until an
    anytime-valid test decided, so a fixed-sample interval on them is not valid; the test's own claim
    is the evidence. "no loss of >= m points" shows the rung within a bound T >= m, and "gain" within
    any bound, when the test's per-claim level (its alpha / 2) is within the rung's; "loss" (a loss > 0,
    not a loss > T) and "undecided" settle nothing."""
    head = {"figure": f.key, "accept": f.text, "unit": f.unit, "tolerance": f.tolerance, "n": es.get("n"),
            "delta": es.get("estimate"), "file": file, "items_needed": None, "sequential": es}
    claim_level = float(es["alpha"]) / 2
    paired = [m for m in qmetrics.headlines(f.benchmark) if qmetrics.get(m).paired == "items"]
    if not paired or f.metric != paired[0]:
        why = f"stopped early on {paired[0] if paired else 'its headline'}; {f.metric}'s interval after a sequential stop is not valid"
        return {**head, "state": ni.UNDETERMINED, "text": why}
    state, margin = es["state"], es.get("margin")
    shown = state == "gain" or (state == "no_loss_beyond_margin" and margin is not None and margin <= f.tolerance)
    if shown and claim_level <= alpha:
        return {**head, "state": ni.NONINFERIOR, "text": f"stopped early at n = {es['n']}: {state.replace('_', ' ')}"
                + (f" ({margin:g} pt)" if margin is not None else "") + f", anytime-valid at one-sided {claim_level:g}"}
    if shown:
        why = (f"stopped early with {state.replace('_', ' ')} at one-sided {claim_level:g}, above this rung's level "
               f"{alpha:g}: set early_stop.alpha <= {2 * alpha:g}")
    elif state == "no_loss_beyond_margin":
        why = f"stopped early with no loss of >= {margin:g} pt, more than the {f.tolerance:g} pt accepted: set early_stop.margin <= {f.tolerance:g}"
    else:
        why = (f"stopped early with {state} at n = {es['n']} (a loss > 0 or nothing shown, not whether it exceeds "
               f"{f.tolerance:g} pt): set early_stop.margin to the accepted loss, or run every item")
    return {**head, "state": ni.UNDETERMINED, "text": why}


# ------------------------------------------------------------------------------------------ the walk

def candidates(sp: Spec, infos: dict[str, dict], speeds: dict[str, dict] | None = None,
               sources: dict[str, str] | None = None) -> list[dict]:
    """The candidate rungs from the most bits per weight down (the config's order breaks ties), each
    with its memory at the stated context: weights + KV cache (GGUF metadata; compute buffers are not in
    a file's metadata and are left out, said so in the answer). A rung with as many bits as the
    reference saves nothing and is dropped. ``fits``: within the memory budget; with a speed floor
    (``speeds``: ``dataset_view.speed_at`` per rung) ``fast``: its measured speed reaches the floor (a
    rung without a speed figure does not: the floor cannot be shown met); ``eligible``: both, the
    candidates the walk visits; ``excluded_by``: the constraints that keep it out, in words."""
    type_k, type_v = parse_kv(sp.kv)
    ref_bpw = infos[sp.reference]["bits_per_weight"]
    out = []
    for i, r in enumerate(sp.rungs):
        info = GGUFInfo(**{k: v for k, v in infos[r].items() if k in GGUFInfo.__dataclass_fields__})
        kv_bytes = info.kv_bytes(sp.ctx, type_k, type_v)
        pred = int(info.tensor_bytes + kv_bytes)
        if info.bits_per_weight >= ref_bpw:
            continue
        c = {"rung": r, "order": i, "bits_per_weight": info.bits_per_weight, "weights_bytes": info.tensor_bytes,
             "file_bytes": info.file_bytes, "kv_bytes": int(kv_bytes), "predicted_bytes": pred,
             "fits": pred <= sp.mem_bytes, "source": (sources or {}).get(r, "made here")}
        why = [] if c["fits"] else [f"memory: {dv.fmt_bytes(pred)} at {sp.ctx} tokens, over {sp.mem}"]
        if sp.min_tps is not None:
            spd = (speeds or {}).get(r) or {"value": None, "reason": "no speed figure read"}
            c["speed"] = spd
            c["tg_tokens_per_s"] = spd["value"]
            c["fast"] = spd["value"] is not None and spd["value"] >= sp.min_tps
            if not c["fast"]:
                why.append(f"speed: {spd['value']:.3g} tokens/s, below the floor of {sp.min_tps:g}"
                           if spd["value"] is not None else f"speed: no figure to hold against the floor ({spd['reason']})")
        c["eligible"], c["excluded_by"] = not why, why
        out.append(c)
    out.sort(key=lambda c: (-c["bits_per_weight"], c["order"]))
    return out


def _eligible(c: dict) -> bool:
    return c.get("eligible", c["fits"])  # a state written before the speed floor: memory alone


def start(sp: Spec, cands: list[dict]) -> dict:
    """The walk's first state: the fitting candidates (memory, and the speed floor where one is set) in
    order, the start rung and the levels."""
    fit = [c for c in cands if _eligible(c)]
    state = {"spec": sp.as_dict(), "spec_key": sp.key, "candidates": cands, "visited": [], "next": None,
             "start": None, "levels": None, "done": False}
    if not fit:
        state["done"] = True
        return state
    names = [c["rung"] for c in fit]
    if sp.start in names:
        s = names.index(sp.start)
    else:  # the fitting candidate nearest in bits per weight to the start rung (when it is a candidate at all)
        named = next((c for c in cands if c["rung"] == sp.start), None)
        target = named["bits_per_weight"] if named else fit[len(fit) // 2]["bits_per_weight"]
        s = min(range(len(fit)), key=lambda i: (abs(fit[i]["bits_per_weight"] - target), i))
    n = len(names)
    strategy = sp.strategy if sp.strategy != "auto" else ("bisect" if n >= BISECT_FROM else "step")
    if strategy == "bisect":
        probes = 1 + math.ceil(math.log2(max(s, n - 1 - s) + 1))
        state.update(order=names, start=names[s], next=names[s], bounds=[-1, n],
                     levels={"strategy": "bisect", "each": sp.alpha / probes, "probes": probes})
        return state
    k_up = s  # the fitting rungs above the start
    down = sp.alpha / 2 if k_up else sp.alpha
    state.update(order=names, start=names[s], next=names[s],
                 levels={"strategy": "step", "down": down, "up": (sp.alpha / 2) / k_up if k_up else None, "k_up": k_up})
    return state


def _bisecting(state: dict) -> bool:
    return (state.get("levels") or {}).get("strategy") == "bisect"


def level_of(state: dict, rung: str) -> float:
    """The one-sided level a rung is tested at: stepping, the down part's or the up part's Bonferroni
    share; bisecting, α over the most probes the search can make."""
    if _bisecting(state):
        return state["levels"]["each"]
    order = state["order"]
    return state["levels"]["down"] if order.index(rung) >= order.index(state["start"]) else state["levels"]["up"]


def advance(state: dict, ev: dict) -> dict:
    """The walk after the rung ``state['next']`` was measured with evidence ``ev``: the next rung to
    measure, or done. Down from the start while shown acceptable; up from the start while not."""
    order, s = state["order"], state["order"].index(state["start"])
    state = {**state, "visited": [*state["visited"], ev]}
    i = order.index(ev["rung"])
    ok = ev["verdict"] == ACCEPTABLE
    if _bisecting(state):  # the rungs in question lie strictly between the two bounds
        lo, hi = state["bounds"]
        lo, hi = (i, hi) if ok else (lo, i)
        nxt = order[(lo + hi) // 2] if hi - lo > 1 else None
        state["bounds"], state["next"], state["done"] = [lo, hi], nxt, nxt is None
        return state
    if i >= s and ok:  # going down (or at the start), shown: one rung down, if any
        nxt = order[i + 1] if i + 1 < len(order) else None
    elif i > s:  # going down, not shown: the rung above is the answer, this one its neighbour below
        nxt = None
    elif ok:  # going up, shown: the answer; its neighbour below (the rung just visited) is measured
        nxt = None
    else:  # at or above the start, not shown: one rung up, if any
        nxt = order[i - 1] if i > 0 else None
    state["next"], state["done"] = nxt, nxt is None
    return state


def answer(state: dict) -> dict:
    """The answer record: the rung (or none, or undetermined), its evidence and its neighbour's below."""
    sp = state["spec"]
    visited = {v["rung"]: v for v in state["visited"]}
    cands = {c["rung"]: c for c in state["candidates"]}
    order = state.get("order") or []
    shown = [r for r in order if r in visited and visited[r]["verdict"] == ACCEPTABLE]
    s = order.index(state["start"]) if state.get("start") else 0
    # the claims: going down, the fixed sequence from the start; going up, the one rung shown;
    # bisecting, the lowest rung shown (each probe was tested at its Bonferroni share)
    claimed = []
    if _bisecting(state):
        lo = state["bounds"][0]
        claimed = [order[lo]] if lo >= 0 else []
    else:
        for r in [r for r in order[s:] if r in visited]:
            if visited[r]["verdict"] != ACCEPTABLE:
                break
            claimed.append(r)
        if not claimed:
            claimed = [r for r in shown if order.index(r) < s][-1:]
    rec = {"family": sp["family"], "reference": sp["reference"], "mem": sp["mem"], "mem_bytes": sp["mem_bytes"],
           "ctx": sp["ctx"], "kv": sp["kv"], "accept": [f["text"] for f in sp["figures"]], "alpha": sp["alpha"],
           "levels": state["levels"], "path": [{"rung": v["rung"], "verdict": v["verdict"], "alpha": v["alpha"]}
                                               for v in state["visited"]],
           "candidates": state["candidates"], "assumes": MONOTONE_BISECT if _bisecting(state) else MONOTONE}
    if sp.get("min_tps") is not None:
        rec.update(min_tps=sp["min_tps"], parallel=sp["parallel"])
    if not order:
        floor = (f" and generates at least {sp['min_tps']:g} tokens/s" if sp.get("min_tps") is not None else "")
        return {**rec, "verdict": "none fits", "rung": None, "binding": binding(state, None),
                "why": f"no candidate rung fits {sp['mem']} at {sp['ctx']} tokens of context (weights + KV cache)"
                       + floor}
    if claimed:
        a = claimed[-1]
        i = order.index(a)
        below = order[i + 1] if i + 1 < len(order) else None
        ev_below = visited.get(below) if below else None
        c = cands[a]
        rec.update(verdict=ACCEPTABLE, rung=a, evidence=visited[a], below=below, below_evidence=ev_below,
                   memory={"ctx": sp["ctx"], "weights_bytes": c["weights_bytes"], "kv_bytes": c["kv_bytes"],
                           "predicted_bytes": c["predicted_bytes"],
                           "compute_buffers": "not included: llama.cpp sizes them at load (the memory measure "
                                              "records them per point)"})
        if below is not None:
            rec["below_gap"] = _gap(cands[below], c)
        if below is None:
            rec["why"] = f"{a} is shown acceptable and is the smallest candidate that fits"
        elif ev_below and ev_below["verdict"] == UNDETERMINED:
            need = _needed(ev_below)
            rec["why"] = (f"{a} is shown acceptable; the rung below, {below}, is undetermined"
                          + (f" ({need} would settle it)" if need else "") + ", so a smaller rung may also do")
        else:
            rec["why"] = f"{a} is shown acceptable; the rung below, {below}, is shown not to be"
        rec["binding"] = binding(state, a)
        rec["source"] = c.get("source", "made here")
        rec["matched_size"] = matched_size(state)
        return rec
    und = [visited[r] for r in order if r in visited and visited[r]["verdict"] == UNDETERMINED]
    rec["binding"] = binding(state, None)
    rec["matched_size"] = matched_size(state)
    if und:
        need = {v["rung"]: _needed(v) for v in und}
        rec.update(verdict=UNDETERMINED, rung=None, undetermined=need,
                   why="no rung is shown acceptable with these items; " + "; ".join(
                       f"{r}: {n} needed" if n else f"{r}: no plan (no spread measured)" for r, n in need.items()))
        return rec
    rec.update(verdict="none acceptable", rung=None,
               why="every rung the walk measured is shown to lose more than accepted (the largest candidate included)")
    return rec


def _gap(c: dict, other: dict) -> str:
    """``c``'s file against ``other``'s: "Q2_K against Q4_K_M: −2.20 bits per weight, −31.6 MiB (−36.1 %)"."""
    return f"{c['rung']} against {other['rung']}: " + dv.size_gap(
        c["bits_per_weight"], c.get("file_bytes", c["weights_bytes"]), other["bits_per_weight"],
        other.get("file_bytes", other["weights_bytes"]))


def binding(state: dict, rung: str | None) -> list[dict]:
    """Which constraint decided where the walk ends, in words ({constraint, why}): **the accepted
    loss** when the candidate below the answer was measured and not shown acceptable; **speed** when
    a smaller candidate than the answer (the walk's next one down, or any below the answer where
    none is acceptable) is kept out by the floor only: without the floor the walk could go on to
    it; **memory** when a larger candidate is kept out by the budget and no candidate that fits is
    shown acceptable (with more memory the walk could step up to it). An answer that is the smallest
    candidate of all is bound by none."""
    cands = state["candidates"]
    visited = {v["rung"]: v for v in state["visited"]}
    out = []
    by_rung = {c["rung"]: c for c in cands}
    i = next((k for k, c in enumerate(cands) if c["rung"] == rung), None)
    if rung is not None:
        nxt = next((c for c in cands[i + 1:] if _eligible(c)), None)
        if nxt is not None and nxt["rung"] in visited and visited[nxt["rung"]]["verdict"] != ACCEPTABLE:
            out.append({"constraint": "accepted loss", "rung": nxt["rung"],
                        "why": f"{nxt['rung']}, the next candidate down, is {visited[nxt['rung']]['verdict']}",
                        "gap": _gap(nxt, by_rung[rung])})
        slow = [c for c in cands[i + 1:] if c["fits"] and not c.get("fast", True)]
        if slow and (nxt is None or slow[0]["bits_per_weight"] >= nxt["bits_per_weight"]):
            c = slow[0]
            out.append({"constraint": "speed", "rung": c["rung"],
                        "why": f"{c['rung']} is smaller and fits but is kept out by the floor ("
                               + "; ".join(c["excluded_by"]) + ")", "gap": _gap(c, by_rung[rung])})
        return out
    top = next((c for c in cands if _eligible(c)), None)
    big = [c for c in cands if not c["fits"] and (top is None or c["bits_per_weight"] > top["bits_per_weight"])]
    if big:
        c = big[-1]
        why = c.get("excluded_by") or [f"memory: {dv.fmt_bytes(c['predicted_bytes'])} at {state['spec']['ctx']} tokens, "
                                       f"over {state['spec']['mem']}"]  # a state from before the field
        out.append({"constraint": "memory", "rung": c["rung"], "why": "; ".join(why),
                    **({"gap": _gap(c, top)} if top else {})})
    slow = [c for c in cands if c["fits"] and not c.get("fast", True)]
    if slow:
        out.append({"constraint": "speed", "rung": ", ".join(c["rung"] for c in slow),
                    "why": "; ".join(f"{c['rung']}: {c['excluded_by'][0]}" for c in slow)})
    return out


def matched_size(state: dict) -> list[dict]:
    """Each third-party rung the walk measured beside the family's own ladder at its size: per
    accepted figure, its Δ against the reference and the own rungs' Δ read at its bits per weight
    (``dataset_view.at_bpw`` over the rungs made here that the walk measured; absent, with the reason,
    where its measured neighbours do not bracket it: the walk measures only the rungs it visits)."""
    cands = {c["rung"]: c for c in state["candidates"]}
    out = []
    for v in state["visited"]:
        c = cands.get(v["rung"])
        if c is None or not c.get("source", "made here").startswith("uploader"):
            continue
        for f in v["figures"]:
            if f.get("delta") is None:
                continue
            own = [(w["rung"], cands[w["rung"]]["bits_per_weight"], g["delta"])
                   for w in state["visited"] if w["rung"] in cands
                   and not cands[w["rung"]].get("source", "made here").startswith("uploader")
                   for g in w["figures"] if g["figure"] == f["figure"] and g.get("delta") is not None]
            hib = f.get("unit") == "%"  # a task Δ: higher is better; a KLD or ln PPL ratio: lower
            at = dv.at_bpw(own, c["bits_per_weight"], higher_is_better=hib)
            rec = {"rung": c["rung"], "source": c["source"], "figure": f["figure"], "unit": f.get("unit"),
                   "bits_per_weight": c["bits_per_weight"], "delta": f["delta"], "ours": at.get("value")}
            if at.get("value") is None:
                rec["reason"] = at["reason"] + " (the walk measures only the rungs it visits)"
            else:
                rec["how"] = at["text"]
                rec["difference"] = f["delta"] - at["value"]
                rec["gaps"] = list(dict.fromkeys(_gap(c, cands[n[0]]) for n in (at["below"], at["above"])))
            out.append(rec)
    return out


MONOTONE = ("losses grow as bits per weight fall: below the first rung not shown acceptable nothing is measured; "
            "the rung below the answer is always measured and its evidence shown")
MONOTONE_BISECT = ("losses grow as bits per weight fall: a rung between a probe shown acceptable and one above it is "
                   "taken as acceptable, and a rung below a probe not shown acceptable is not measured; the rung "
                   "below the answer is always measured and its evidence shown")


def _needed(ev: dict) -> str | None:
    """What would settle a rung: per undetermined figure, the items (a task) or scored tokens (a corpus)
    a run needs to show it within its bound at 80 % power if it truly equals the reference (the claim's
    own power), with the items to detect a loss of the bound beside it where that is another figure."""
    out = [f"{f['items_needed']:,} {'scored tokens' if f['unit'] != '%' else 'items'} for {f['figure']}"
           + (f" ({f['items_to_detect']:,} to detect a loss of the bound)" if f.get("items_to_detect") else "")
           for f in ev["figures"] if f["state"] == ni.UNDETERMINED and f.get("items_needed")]
    return "; ".join(out) or None


def replay(sp: Spec, cfg: dict, card: str, infos: dict[str, dict], root: str | Path = ".",
           speeds: dict | None = None, sources: dict | None = None) -> dict:
    """The walk over points that exist already (a full ladder measured): the state the checkpoints reach."""
    state = start(sp, candidates(sp, infos, speeds, sources))
    while not state["done"]:
        r = state["next"]
        state = advance(state, evidence(sp, cfg, card, r, level_of(state, r), root))
    return state


def fixed_sequence(sp: Spec, cfg: dict, card: str, infos: dict[str, dict], root: str | Path = ".",
                   speeds: dict | None = None) -> dict:
    """The full ladder's answer: every fitting candidate measured, the fixed sequence from the largest
    down at the whole level α; the smallest rung of the unbroken run shown acceptable."""
    fit = [c["rung"] for c in candidates(sp, infos, speeds) if _eligible(c)]
    out, answer_ = [], None
    for r in fit:
        ev = evidence(sp, cfg, card, r, sp.alpha, root)
        out.append({"rung": r, "verdict": ev["verdict"]})
        if ev["verdict"] != ACCEPTABLE:
            break
        answer_ = r
    return {"rung": answer_, "sequence": out, "measured": fit}


# ------------------------------------------------------------------------------------------ what it cost

def _pass_corpus(rel_last: str) -> str:
    return rel_last.rsplit("-", 1)[0]  # "<corpus>-<ctx>": a corpus name may hold dashes, a context not


def job_seconds(sp: dict, card: str, rung: str | None, seen: dict) -> dict[str, float]:
    """Measured seconds, by rule, of the jobs behind the walk's figures on one rung (its quantize, its
    passes on the accepted corpora, its generation and scoring of the accepted benchmarks), or, with
    ``rung`` None, of the shared ones (the reference's log-probs on those corpora, the reference's
    task points). ``seen``: ``benchmark_files``."""
    fam, kv = sp["family"], sp["kv"]
    corpora = {f["corpus"] for f in sp["figures"] if f["benchmark"] == "perplexity"}
    tasks = {f["benchmark"] for f in sp["figures"] if f["benchmark"] != "perplexity"}
    out: dict[str, float] = {}
    for (rule, rel), sec in seen.items():
        p = rel.split("/")
        if rung is None:
            hit = ((rule == "reference_logits" and p[:2] == [card, fam] and _pass_corpus(p[-1]) in corpora)
                   or (rule in ("generate", "score") and p[:5] == [card, "points", fam, sp["reference"], kv]
                       and p[-1] in tasks))
        else:
            hit = ((rule == "quantize" and p == [fam, rung])
                   or (rule == "perplexity" and rung != sp["reference"] and p[:4] == [card, fam, rung, kv]
                       and _pass_corpus(p[-1]) in corpora)  # the reference's pass is no figure of the walk
                   or (rule in ("generate", "score") and p[:5] == [card, "points", fam, rung, kv] and p[-1] in tasks))
        if hit:
            out[rule] = out.get(rule, 0.0) + sec
    return out


def benchmark_files(root: str | Path = ".") -> dict[tuple[str, str], float]:
    """(rule, path under the rule's folder without .tsv) -> seconds, for every finished job."""
    return {(job.rule, "/".join(job.parts)): job.s for job in timings.finished(root)}


def cost(state: dict, card: str, root: str | Path = ".") -> dict:
    """Points measured and job-hours of the walk, beside the full ladder of fitting candidates: the
    visited rungs' measured job times; a rung not visited is priced at the median of the visited rungs'
    (per rule), an estimate and said so. Shared jobs (the reference's, every candidate's quantize) are
    counted alike in both."""
    sp = state["spec"]
    seen = benchmark_files(root)
    visited = [v["rung"] for v in state["visited"]]
    order = state.get("order") or []
    per = {r: job_seconds(sp, card, r, seen) for r in order}
    measured_s = sum(s for r in visited for rule, s in per[r].items() if rule != "quantize")
    quantize_s = sum(per[r].get("quantize", 0.0) for r in order)
    shared_s = sum(job_seconds(sp, card, None, seen).values()) + sum(job_seconds(sp, card, sp["reference"], seen).values())
    rules = sorted({rule for r in visited for rule in per[r] if rule != "quantize"})
    median = {rule: statistics.median([per[r][rule] for r in visited if rule in per[r]]) for rule in rules}
    rest = [r for r in order if r not in visited]
    measured_rest = sum(s for r in rest for rule, s in per[r].items() if rule != "quantize")
    estimated_rest = sum(median[rule] for r in rest for rule in rules if rule not in per[r])
    walk_h = (measured_s + quantize_s + shared_s) / 3600
    full_h = (measured_s + measured_rest + estimated_rest + quantize_s + shared_s) / 3600
    return {"points_measured": len(visited), "points_full_ladder": len(order),
            "walk_job_hours": round(walk_h, 5), "full_ladder_job_hours": round(full_h, 5),
            "full_ladder_estimated_job_hours": round(estimated_rest / 3600, 5),
            "how": ("Snakemake's benchmark files of the jobs behind the walk's figures (measured); the reference's "
                    "jobs and every candidate's quantize counted in both; a rung not measured is priced at the median "
                    "of the measured rungs' jobs per rule (the estimated part)")}


def format_text(result: dict) -> str:
    """The answer in a few lines (the rule's log, the command line)."""
    floor = (f", at least {result['min_tps']:g} tokens/s with {result['parallel']} sequence(s) at a time"
             if result.get("min_tps") is not None else "")
    head = (f"find {result['family']} (reference {result['reference']}, {result['mem']} at {result['ctx']} tokens"
            f"{floor}, accept {', '.join(result['accept'])}, one-sided α {result['alpha']:g}):")
    lines = [head, f"  answer: {result['rung'] or result['verdict']}: {result['why']}"]
    if result.get("rung") and result.get("source", "made here") != "made here":
        lines.append(f"  source: {result['source']}")
    if result.get("below_gap"):
        lines.append(f"  size gap: {result['below_gap']}")
    for b in result.get("binding") or []:
        lines.append(f"  binding: {b['constraint']}: {b['why']}" + (f" ({b['gap']})" if b.get("gap") else ""))
    if result.get("rung") and "binding" in result and not result["binding"]:
        lines.append("  binding: none (the smallest candidate)")
    for m in result.get("matched_size") or []:
        u = "" if m.get("unit") in (None, "", "1") else " points" if m["unit"] == "%" else f" {m['unit']}"
        if m.get("ours") is None:
            lines.append(f"  matched size: {m['rung']} ({m['source']}) {m['figure']} Δ {m['delta']:.4g}{u}; ours at "
                         f"its size: absent: {m['reason']}")
        else:
            lines.append(f"  matched size: {m['rung']} ({m['source']}) {m['figure']} Δ {m['delta']:.4g}{u}, ours "
                         f"{m['ours']:.4g}{u} ({m['how']}); {m['difference']:+.4g}{u}; " + "; ".join(m["gaps"]))
    if result.get("memory"):
        m = result["memory"]
        lines.append(f"  memory at {m['ctx']} tokens: {dv.fmt_bytes(m['predicted_bytes'])} (weights "
                     f"{dv.fmt_bytes(m['weights_bytes'])} + KV cache {dv.fmt_bytes(m['kv_bytes'])}; compute buffers not included)")
    lines.append("  path: " + " → ".join(f"{p['rung']} ({p['verdict']})" for p in result["path"]))
    c = result.get("cost")
    if c:
        lines.append(f"  cost: {c['points_measured']} of {c['points_full_ladder']} rungs measured, "
                     f"{c['walk_job_hours']:.3f} job-hours beside {c['full_ladder_job_hours']:.3f} for the full ladder "
                     f"({c['full_ladder_estimated_job_hours']:.3f} of it estimated)")
    return "\n".join(lines)


def run_cli(args) -> int:
    """``quantladder find``: the request checked against the config first (errors name find.<key>), then
    Snakemake makes the answer's target with the request laid over the config (docs/find.md)."""
    given = {"family": args.family, "mem": args.mem, "ctx": args.ctx, "accept": args.accept,
             "reference": args.reference, "kv": args.kv, "start": args.start, "alpha": args.alpha,
             "strategy": args.strategy, "min_tps": args.min_tps, "parallel": args.parallel,
             "rungs": [r.strip() for r in args.rungs.split(",") if r.strip()] if args.rungs else None}
    # every key set, an option not given at its schema default: nothing of the config's own find leaks in
    request = {"find": request_defaults() | {k: v for k, v in given.items() if v is not None}}
    workdir = Path(args.directory)
    req = workdir / ".quantladder" / "find-request.yaml"
    req.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(req) as tmp:
        tmp.write_text(yaml.safe_dump(request, sort_keys=False))
    files = [str(Path(f).resolve()) for f in args.configfile] + [str(req.resolve())]
    cfg = qconfig.load_config(files)
    sp = spec(cfg)
    target = ANSWER.format(card=qcard.label(cfg.get("card")), family=sp.family)
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    cmd = [snakemake, target, "--snakefile", str(SNAKEFILE), "--directory", str(workdir), "--cores", str(args.cores),
           *(["-n"] if args.dry_run else []), "--configfile", *files]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SNAKEFILE.parent / "workflow"),
                                                        os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    rc = subprocess.run(cmd, env=env).returncode
    if rc or args.dry_run:
        return rc
    result = read_json(workdir / target)
    print(json.dumps(result, indent=2) if args.json else format_text(result))
    return 0 if result["verdict"] == ACCEPTABLE else 2
