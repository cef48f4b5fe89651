"""How the recommender ranks a point: by what the run *shows* about it (stats.noninferiority).

A candidate (``recommend.Candidate``) carries its weighted figures with the dataset's paired columns.
Per figure, the non-inferiority decision against the family's reference, walked down each (family,
KV type, figure) ladder largest rung first, gives the figure it ranks by (``_credit``): the reference's
where shown within the tolerance, else its own (or, cautious, its lower bound), never above the
reference's. A family none of whose rungs' task figures the run can separate from the reference or
settle against the tolerance ranks its rungs by their mean KLD (the same rule, in nats), else by bits
per weight. ``why_chosen`` words the rule that decided.
"""

from __future__ import annotations

from . import dataset_view as dv
from .stats import noninferiority as ni

HAIR = 1e-3  # points: ranks a figure below one it may not pass, above EPS_TIE, below any shown difference
KLD = ("perplexity", "kld_mean")  # what the run can tell when its task figures cannot separate the rungs


def _walked(seqs: dict) -> dict:
    """(candidate name, figure key) -> its Decision, each (family, KV type, figure) walked largest rung first."""
    out = {}
    for (_, _, key), seq in seqs.items():
        seq.sort(key=lambda cd: (-(cd[0].bits_per_weight or 0.0), cd[0].rung))
        for (c, _), d in zip(seq, ni.walk([(c.rung, d) for c, d in seq])):
            out[c.name, key] = d
    return out


def _decide(r: dict, metric: str, higher_is_better: bool, tolerance) -> ni.Decision | None:
    t = ni.tolerance_for(metric, r["unit"], tolerance)
    return None if t is None else ni.decide(r["delta"], r["delta_ci_low"], r["delta_ci_high"], tolerance=t,
                                            higher_is_better=higher_is_better, unit=r["unit"],
                                            stderr=r["delta_stderr"], n=r["n"])


def _task_decisions(cands: list, tolerance) -> dict:
    seqs: dict[tuple, list] = {}
    for c in cands:
        for key, s in c.scores.items():
            d = _decide(s, s["metric"], True, tolerance)  # weighted figures are % where higher is better
            if d is not None or not c.is_reference:  # the reference itself anchors the ladder
                seqs.setdefault((c.family, c.kv, key), []).append((c, d))
    return _walked(seqs)


def _credit(s: dict, d: ni.Decision | None, cautious: bool) -> float:
    """The figure a score ranks by: the reference's where shown within the tolerance (its own where a
    gain is shown), else its own or its lower bound, never above the reference's (a gain not shown)."""
    if d is None:
        return s["value"]
    ref = s["value"] - d.delta
    if d.shown:
        return s["value"] if d.ci_low > 0 else ref
    return min(ref + d.ci_low if cautious else s["value"], ref - HAIR)


def rank(cands: list, tolerance: dict | None, cautious: bool) -> list[str]:
    """Fill every candidate's rank_score, claimed figures and decisions; the notes the answer prints."""
    dec = _task_decisions(cands, tolerance)
    for c in cands:
        ranked = 0.0
        for key, s in c.scores.items():
            d = dec.get((c.name, key))
            ranked += s["weight"] * _credit(s, d, cautious)
            if d is not None:
                s.update(decision=d.state, reached=d.reached, claimed=d.shown, tolerance=d.tolerance,
                         items_needed=d.items_needed, decision_text=d.text)
                if d.shown:
                    c.claimed.append({"benchmark": s["benchmark"], "metric": s["metric"], "value": s["value"],
                                      "reference_value": s["value"] - d.delta, "text": f"{key}: {d.text}"})
        c.rank_score = ranked / sum(s["weight"] for s in c.scores.values())
    notes = []
    for fam in sorted({c.family for c in cands}):
        members = [c for c in cands if c.family == fam]
        open_ = [(c, k, dec[c.name, k]) for c in members for k in c.scores if dec.get((c.name, k)) is not None]
        if open_ and not any(d.separated for _, _, d in open_):
            first = max(((c, k, d) for c, k, d in open_ if d.reached), key=lambda x: x[2].items_needed or 0)
            notes.append(_order_undetermined(fam, members, tolerance, cautious,
                                             f"{first[0].rung}'s {first[1]}: {first[2].text}"))
    for c in cands:
        if c.ranked_by != "KLD":
            c.kld = None
    return notes


def _order_undetermined(fam: str, members: list, tolerance, cautious: bool, first: str) -> str:
    """A family whose task scores cannot separate its rungs ranks them by what the run can tell: the
    mean KLD (shown within its tolerance: ranks with the reference), else bits per weight; no rung is
    credited above one ranked before it."""
    rows = {c.name: c.kld["rows"] for c in members}
    seqs: dict[tuple, list] = {}
    for c in members:
        for r in rows[c.name]:
            d = _decide(r, KLD[1], False, tolerance)
            if d is not None or not c.is_reference:  # the reference's own row (KLD ≈ 0) anchors the ladder
                seqs.setdefault((c.family, c.kv, r["subset"]), []).append((c, d))
    kdec = _walked(seqs)
    ds_of = {c.name: {r["subset"]: kdec.get((c.name, r["subset"])) for r in rows[c.name]} for c in members}
    # the reference the KLDs are measured against has none of its own (or none compared)
    anchor = [c for c in members if c.is_reference and not any(ds_of[c.name].values())]
    by_kld = all(c in anchor or any(ds_of[c.name].values()) for c in members) and len(anchor) < len(members)
    key = {}
    for c in members:
        if not by_kld:
            key[c.name] = -(c.bits_per_weight or 0.0)
            continue
        ds = ds_of[c.name]
        shown = c in anchor or all(d is not None and d.shown for d in ds.values())
        key[c.name] = 0.0 if shown else max((d.bound if cautious else d.delta for d in ds.values() if d), default=0.0)
        c.kld = {"corpora": sorted(str(s) for s in ds), "claimed": shown,
                 "worst_nats": max((d.delta for d in ds.values() if d), default=0.0),
                 "decisions": {str(s or "the perplexity corpus"): d.text for s, d in ds.items() if d is not None}}
        if shown and c not in anchor:  # ranks with the reference's task score
            c.rank_score = (sum(s["weight"] * (s["value"] - (s["delta"] or 0.0)) for s in c.scores.values())
                            / sum(s["weight"] for s in c.scores.values()))
    floor = None
    for k in sorted(set(key.values())):
        group = [c for c in members if key[c.name] == k]
        for c in group:
            c.ranked_by = "KLD" if by_kld else "bits per weight"
            if floor is not None:
                c.rank_score = min(c.rank_score, floor - HAIR)
        floor = min([c.rank_score for c in group] + ([floor] if floor is not None else []))
    named = sorted({str(r["subset"] or "the perplexity corpus") for rs in rows.values() for r in rs})
    what = (f"mean KLD on {', '.join(named)} (a rung shown within the tolerance ranks with the reference)" if by_kld
            else "bits per weight (no KLD measured on every rung)")
    return f"{fam}: no rung's task figures are determined at this run's size ({first}); its rungs rank by {what}"


def _kld_words(c) -> str:
    if c.kld is None or not c.kld["decisions"]:
        return f"{c.name} is the family's reference"
    return "; ".join(f"KLD on {corpus}: {text}" for corpus, text in c.kld["decisions"].items())


def why_chosen(best, over: list, cautious: bool = False) -> str:
    """The rule that decided, with its numbers ("" for a choice that needs none: the best measured score)."""
    names = ", ".join(f"{c.name} ({dv.fmt_bytes(c.memory_bytes)}, score {c.score:.2f} %)" for c in over)
    if best.ranked_by != "task scores":
        head = f"{best.family}'s task scores cannot separate its rungs, so they rank by {best.ranked_by}"
        if best.ranked_by == "KLD":
            head += f" ({_kld_words(best)})"
        if over:
            head += (f"; preferred over the larger {names}, which the run does not show better"
                     + (f": it ranks with the reference's score {best.rank_score:.2f} % and the smaller memory wins"
                        if best.kld and best.kld["claimed"] else ""))
        return head
    if best.claimed:
        cites = "; ".join(s["text"] for s in best.claimed)
        lead = f"preferred over the larger {names}: " if over else ""
        return (f"{lead}{cites}, so it ranks with the reference's score {best.rank_score:.2f} %"
                + (" and the smaller memory wins" if over else ""))
    open_ = [f"{k}: {s['decision_text']}" for k, s in best.scores.items() if s.get("decision_text")]
    if not open_:
        return ""
    how = "its interval's lower bound (cautious)" if cautious else "its measured figure"
    return f"ranked by {how}, a figure not shown within the tolerance of its reference: " + "; ".join(open_)
