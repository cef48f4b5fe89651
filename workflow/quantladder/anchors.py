"""The anchor gate: reproduce a reference model's published score on this card before measuring.

Outcome per (card, benchmark), written to results/{card}/anchors/{benchmark}.json:
  passed      |reproduced − published| ≤ tolerance: the benchmark's points run, status ok
  failed      outside tolerance: the harness is wrong; the benchmark's points do not measure
  unanchored  no anchor configured or reachable (offline, gated, needs a GPU): points run and are
              marked `unanchored` everywhere they are shown, with the reason
"""

from __future__ import annotations

import datetime as _dt
import importlib
from pathlib import Path

import yaml

from .errors import ConfigError, QuantladderError

DEFAULT_TOLERANCE = 5.0

# Measures with no published anchor that can be reproduced offline; said plainly in the report.
NO_PUBLISHED_ANCHOR = {
    "perplexity": "perplexity has no published anchor reachable offline (it depends on the exact "
                  "file, corpus and n_ctx); parity with llama-perplexity is checked by "
                  "benchmarks/ppl_parity.py instead",
    "speed": "speed is a property of the card, not a score: no anchor; parity with llama-bench is "
             "checked by benchmarks/speed_parity.py",
    "memory": "memory is computed and measured, not scored: no anchor",
    "energy": "energy is measured, not scored: no anchor",
}


def load_entries(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: anchors file not found (config key `anchors`)")
    doc = yaml.safe_load(p.read_text()) or {}
    entries = doc.get("anchors", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{p}: `anchors` must be a list")
    for i, e in enumerate(entries):
        for key in ("benchmark", "model", "metric", "published", "citation"):
            if key not in e:
                raise ConfigError(f"{p}: anchors[{i}] lacks `{key}`")
    return entries


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def evaluate(benchmark: str, entries: list[dict], card_identity: dict, run_anchor=None) -> dict:
    """Decide the gate. ``run_anchor(entry) -> float`` reproduces the score (None: find the
    benchmark module's ``anchor_score``)."""
    mine = [e for e in entries if e["benchmark"] == benchmark]
    base = {"benchmark": benchmark, "card": card_identity.get("label"), "checked_at": _now()}
    if not mine:
        reason = NO_PUBLISHED_ANCHOR.get(benchmark, f"no anchor configured for {benchmark} in the anchors file")
        return {**base, "status": "unanchored", "reason": reason}
    results = []
    for e in mine:
        tol = float(e.get("tolerance", DEFAULT_TOLERANCE))
        if e.get("requires_gpu", False) and card_identity.get("kind") != "gpu":
            results.append({"entry": e, "status": "unanchored",
                            "reason": f"anchor {e['model'].get('label', '')} needs a GPU card; this is {card_identity.get('label')}"})
            continue
        runner = run_anchor or _module_runner(benchmark)
        if runner is None:
            results.append({"entry": e, "status": "unanchored",
                            "reason": f"benchmark {benchmark} has no anchor runner"})
            continue
        try:
            score = float(runner(e))
        except QuantladderError as err:  # unreachable model, offline hub, gated repo
            results.append({"entry": e, "status": "unanchored", "reason": f"anchor not reachable: {err}"})
            continue
        dev = score - float(e["published"])
        ok = abs(dev) <= tol
        results.append({"entry": e, "status": "passed" if ok else "failed", "reproduced": score,
                        "published": float(e["published"]), "deviation": dev, "tolerance": tol,
                        "reason": None if ok else
                        f"reproduced {score:.2f} vs published {e['published']} ({e['citation']}): "
                        f"off by {dev:+.2f} > {tol} points, so the harness is wrong on this card"})
    statuses = [r["status"] for r in results]
    if "failed" in statuses:
        status = "failed"
    elif "passed" in statuses:
        status = "passed"
    else:
        status = "unanchored"
    reason = "; ".join(r["reason"] for r in results if r.get("reason")) or None
    return {**base, "status": status, "reason": reason, "anchors": results}


def _module_runner(benchmark: str):
    for mod in (f"quantladder.benchmarks.{benchmark}", f"quantladder.benchmarks.{benchmark}.anchor"):
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        fn = getattr(m, "anchor_score", None)
        if fn is not None:
            return fn
    return None
