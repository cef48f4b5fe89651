"""The walk's answer on the report's first screen (quantladder.find; docs/find.md): the rung to run,
its memory at the stated context, the evidence for it and for the rung below, the path walked and
what the walk cost beside the full ladder. Read from the find rule's JSON, never recomputed here."""

from __future__ import annotations

from pathlib import Path

from .. import dataset_view as dv
from ..io import read_json
from .markup import esc, table

VERDICT_CLASS = {"acceptable": "v-gain", "not acceptable": "v-loss", "undetermined": "v-noise"}


def load(paths) -> list[dict]:
    return [read_json(p) for p in paths or [] if Path(p).exists()]


def _verdict(v: str) -> str:
    return f'<span class="verdict {VERDICT_CLASS.get(v, "v-none")}">{esc(v)}</span>'


def _evidence_rows(ev: dict | None, role: str) -> list[list[str]]:
    if not ev:
        return []
    return [[esc(role), esc(ev["rung"]), _verdict(ev["verdict"]), esc(f["figure"]), esc(f["accept"]),
             esc(f"{ev['interval_level'] * 100:.4g} %"), esc(f["text"])] for f in ev["figures"]]


def find_section(finds: list[dict], card: str) -> str:
    """One block per answer of this card (none: nothing)."""
    out = []
    for r in finds:
        if r.get("card") not in (None, card):
            continue
        head = (f"<h3 id=\"find-{esc(card)}-{esc(r['family'])}\">Find my rung: {esc(r['family'])}, "
                f"{esc(r['mem'])} at {esc(r['ctx'])} tokens, accepting {esc(', '.join(r['accept']))}</h3>")
        answer = (f"<p><b>Run {esc(r['rung'])}</b> {_verdict(r['verdict'])}: {esc(r['why'])}.</p>" if r.get("rung")
                  else f"<p><b>{esc(r['verdict'])}</b>: {esc(r['why'])}.</p>")
        mem = r.get("memory")
        if mem:
            answer += (f"<p class=\"how\">Memory at {mem['ctx']} tokens: {dv.fmt_bytes(mem['predicted_bytes'])} (weights "
                       f"{dv.fmt_bytes(mem['weights_bytes'])} + KV cache {dv.fmt_bytes(mem['kv_bytes'])}; compute "
                       "buffers not included).</p>")
        rows = _evidence_rows(r.get("evidence"), "answer") + _evidence_rows(r.get("below_evidence"), "rung below")
        ev = table(["", "rung", "verdict", "figure", "accepted", "interval", "evidence"], rows,
                   f"table-find-{card}-{r['family']}") if rows else ""
        path = " → ".join(f"{esc(p['rung'])} {_verdict(p['verdict'])}" for p in r["path"]) or "nothing measured"
        lv = r.get("levels") or {}
        how = (f"<p class=\"how\">Path walked: {path}. Task figures against {esc(r['reference'])}, KLD and the PPL "
               "ratio against the family's stored reference log-probs; the walk's claims hold at "
               f"one-sided α = {r['alpha']:g} over every rung and figure it looked at ("
               + (f"bisection: Bonferroni over the at most {lv['probes']} rungs it can probe, {lv['each']:.3g} each"
                  if lv.get("strategy") == "bisect" else
                  f"down from the start, a fixed sequence at {lv.get('down', r['alpha']):g} per rung"
                  + (f"; up, Bonferroni over the {lv['k_up']} rungs above the start, {lv['up']:.3g} each"
                     if lv.get("k_up") else ""))
               + f"; every figure must be shown: an intersection–union test). Assumes {esc(r['assumes'])}.</p>")
        c = r.get("cost")
        if c:
            how += (f"<p class=\"how\">Cost: {c['points_measured']} of {c['points_full_ladder']} rungs measured, "
                    f"{c['walk_job_hours']:.3f} job-hours beside {c['full_ladder_job_hours']:.3f} for the full ladder "
                    f"({c['full_ladder_estimated_job_hours']:.3f} of it estimated from the measured rungs' jobs).</p>")
        out.append(head + answer + ev + how)
    return "".join(out)
