"""The report's first screen per family: one sentence that answers in words, then a chart of loss
against memory per rung with its intervals (the tables follow in report.answer).

The sentence says the rung to run, its memory at the context, the figure that decided it with its
bound against the accepted loss, the rung below and why it was not taken, and what stayed
undetermined with the items that would settle it. It comes from the family's walk (quantladder.find's
answer, when the run walked the family) or else from the recommender over that family's points alone
(quantladder.recommend at the answer context, any budget: the smallest rung the run shows within the
tolerance of its reference, or the reference itself). Both are read, never recomputed here.

Where a walk and the dataset speak of the same figure of the same rung (a KLD on a corpus, always
against the family's reference; a task figure when the walk's reference is the family's), they must
agree: the same Δ, at the dataset's 95 % level the same interval, and at the same bound the same
state. ``disagreements`` lists any that do not, and the first screen says so.
"""

from __future__ import annotations

import math

import pandas as pd

from .. import dataset_view as dv
from .. import recommend as rec
from ..stats import noninferiority as ni
from .figures import Figures
from .markup import esc, isnan

LEVEL = 0.95  # the dataset's intervals
TOL = 1e-6  # relative: two readings of the same stored figure
MAX_UNDETERMINED = 4  # figures named in the sentence; the rest are in the tables


def _num(x: float, unit: str) -> str:
    if unit == "%":
        return f"{x:+.1f}".replace("-", "−")
    return f"{x:.3g}".replace("-", "−")


def _u(unit: str) -> str:
    return " points" if unit == "%" else f" {unit}" if unit not in (None, "", "1") else ""


def _short_gap(gap: str | None) -> str | None:
    """A size gap as the sentence says it ("−0.52 bits, −8.40 MiB"), from the long one
    ("X against Y: −0.52 bits per weight, −8.40 MiB (−8.2 %)")."""
    if not gap:
        return None
    words = gap.split(": ", 1)[-1].replace(" bits per weight", " bits")
    return words.rsplit(" (", 1)[0] if words.endswith("%)") else words


def find_of(finds, family: str, card: str) -> dict | None:
    for r in finds or ():
        if r.get("family") == family and r.get("card") in (None, card):
            return r
    return None


# ------------------------------------------------------------------------------------------ from the walk

def _figure_words(f: dict, level: float) -> str:
    """'kld:manual-es: Δ 0.074 nats (97.5 % CI 0.07…0.079), its bound 0.079 within the accepted 0.1'."""
    if f.get("bound") is None:
        return f"{esc(f['accept'])}: {esc(f['text'])}"
    unit = f.get("unit") or ""
    side = "within" if f["state"] == ni.NONINFERIOR else "beyond" if f["state"] == ni.INFERIOR else "across"
    acc = (-f["tolerance"] if unit == "%" else f["tolerance"])
    return (f"{esc(f['figure'])}: Δ {_num(f['delta'], unit)}{_u(unit)} ({100 * level:.4g} % CI "
            f"{_num(f['ci_low'], unit)}…{_num(f['ci_high'], unit)}"
            + (f", n = {f['n']:,}" if f.get("n") else "") + f"), its bound {_num(f['bound'], unit)} {side} the "
            f"accepted {_num(acc, unit)}{_u(unit)} <small>({esc(f['accept'])})</small>")


def _not_shown(ev: dict) -> str:
    bad = [f for f in ev["figures"] if f["state"] != ni.NONINFERIOR] or ev["figures"]
    return "; ".join(_figure_words(f, ev["interval_level"]) for f in bad)


def from_find(r: dict) -> dict:
    """The sentence's parts from a walk's answer (quantladder.find.answer)."""
    out = {"source": "find", "rung": r.get("rung"), "verdict": r["verdict"], "ctx": r["ctx"], "kv": r.get("kv"),
           "memory_bytes": (r.get("memory") or {}).get("predicted_bytes"),
           "memory_note": "weights + KV cache; compute buffers not included", "decided": [], "below": None,
           "undetermined": [], "how": ""}
    ev = r.get("evidence")
    if ev:
        out["decided"] = [_figure_words(f, ev["interval_level"]) for f in ev["figures"]]
    below, bev = r.get("below"), r.get("below_evidence")
    if below:
        out["below"] = {"rung": below, "why": (f"{bev['verdict']}: {_not_shown(bev)}" if bev else "not measured"),
                        "gap": _short_gap(r.get("below_gap"))}
        for f in (bev or {}).get("figures", []):
            if f["state"] == ni.UNDETERMINED and f.get("items_needed"):
                out["undetermined"].append(f"{below}'s {f['figure']}: {f['items_needed']:,} "
                                           f"{'items' if f.get('unit') == '%' else 'scored tokens'}")
    for rung, need in (r.get("undetermined") or {}).items():
        out["undetermined"].append(f"{rung}: {need}" if need else f"{rung}: no plan (no spread measured)")
    if not out["rung"]:
        out["why"] = r.get("why", "")
    lv = r.get("levels") or {}
    out["how"] = (f"the walk down {r['family']}'s ladder (find: reference {r['reference']}, "
                  f"{r['mem']} at {r['ctx']} tokens, accepting {', '.join(r['accept'])}; one-sided α = {r['alpha']:g} "
                  f"over the walk{', bisecting' if lv.get('strategy') == 'bisect' else ''})")
    return out


# ------------------------------------------------------------------------------------------ from the recommender

def _decisions(c: dict) -> list[str]:
    """A candidate's figures in words: each weighted figure's decision, and its KLD decisions where its
    family ranks by them."""
    out = [f"{k}: {s['decision_text']}" for k, s in c["scores"].items() if s.get("decision_text")
           and not (s.get("decision") == ni.NONINFERIOR and s.get("reached", True))]
    if c.get("ranked_by") == "KLD" and c.get("kld"):
        out += [f"KLD on {corpus}: {text}" for corpus, text in c["kld"]["decisions"].items()]
    return out


def from_recommend(fam: pd.DataFrame, ctx: int, card: str) -> dict:
    """The sentence's parts from the recommender over one family's points at ``ctx``, any budget."""
    out = {"source": "recommend", "rung": None, "verdict": None, "ctx": ctx, "kv": None, "memory_bytes": None,
           "memory_note": "weights + KV cache + compute buffers", "decided": [], "below": None, "undetermined": [],
           "how": f"the recommender over this family's points alone, at {ctx} tokens, any budget (quantladder "
                  "recommend: a rung ranks with its reference only where the run shows it within the tolerance, "
                  "1 point of a task score, 0.01 nats of KLD)"}
    try:
        cands, excluded, weights, notes = rec.candidates(fam, ctx, None, card)
        r = rec.recommend(fam, 1 << 50, ctx, card=card, n_runners_up=0, prepared=(cands, excluded, weights, notes))
    except rec.RecommendError as e:
        out["why"] = f"no recommendation: {e}"
        return out
    if not r.get("feasible"):
        out["why"] = r.get("message", "nothing fits")
        return out
    b = r["best"]
    out.update(rung=b["rung"], kv=b["kv"], memory_bytes=b["memory_bytes"], verdict="recommended")
    if b["claimed"]:
        out["decided"] = [esc(s["text"]) for s in b["claimed"]]
    elif b.get("ranked_by") == "KLD" and b.get("kld") and b["kld"].get("claimed") and b["kld"]["decisions"]:
        out["decided"] = [f"KLD on {esc(k)}: {esc(t)}" for k, t in b["kld"]["decisions"].items()]
    elif b["is_reference"]:
        out["decided"] = ["it is the family's reference, and no smaller rung is shown within the tolerance of it"]
    else:
        out["decided"] = [esc(r.get("why") or "the best measured score")]
    smaller = sorted([c for c in cands if c.family == b["family"] and c.kv == b["kv"]
                      and c.memory_bytes < b["memory_bytes"]], key=lambda c: -c.memory_bytes)
    if smaller:
        c = smaller[0].as_dict()
        why = _decisions(c)
        more = f"; and {len(why) - 2} more figures not shown within it (the table below)" if len(why) > 2 else ""
        out["below"] = {"rung": c["rung"], "why": "; ".join(esc(w) for w in why[:2]) + more if why else
                        f"it ranks below {esc(b['rung'])} ({c['rank_score']:.2f} against {b['rank_score']:.2f} %)",
                        "gap": _short_gap(rec.gap(smaller[0], next(x for x in cands if x.name == b["name"])))}
    for c in cands:
        for k, s in c.scores.items():
            if s.get("decision") == ni.UNDETERMINED and s.get("items_needed") and s.get("reached", True):
                out["undetermined"].append(f"{c.rung}'s {k}: {s['items_needed']:,} items")
    out["notes"] = [n for n in notes if n.startswith(f"{b['family']}:")]
    return out


# ------------------------------------------------------------------------------------------ the sentence

def sentence(family: str, parts: dict) -> str:
    """The family's answer in words (HTML), from ``from_find`` or ``from_recommend``."""
    head = f'<p class="first-sentence" data-family="{esc(family)}" data-source="{esc(parts["source"])}"'
    head += f' data-rung="{esc(parts["rung"] or "")}"><b>{esc(family)}</b>: '
    if not parts["rung"]:
        body = (f"<b>no rung to run yet</b> ({esc(parts.get('verdict') or 'no answer')}): "
                f"{esc(parts.get('why', ''))}")
    else:
        mem = ("" if parts["memory_bytes"] is None else
               f", {esc(dv.fmt_bytes(parts['memory_bytes']))} at {parts['ctx']:,} tokens "
               f"<small>({esc(parts['memory_note'])})</small>")
        body = (f"run <b>{esc(parts['rung'])}</b>{mem}. Why: " + "; ".join(parts["decided"]) + ".")
        b = parts["below"]
        body += (f" The rung below, <b>{esc(b['rung'])}</b>, was not taken: {b['why']}"
                 + (f" <small>({esc(b['gap'])})</small>" if b.get("gap") else "") + "." if b
                 else " No smaller rung was measured.")
    und = parts["undetermined"]
    more = f"; {len(und) - MAX_UNDETERMINED} more in the tables below" if len(und) > MAX_UNDETERMINED else ""
    body += (" Undetermined, and what would settle it: " + "; ".join(esc(u) for u in und[:MAX_UNDETERMINED])
             + more + "." if und else " Nothing stayed undetermined.")
    return head + body + f' <small class="how">From {esc(parts["how"])}.</small></p>'


# ------------------------------------------------------------------------------------------ walk vs dataset

def _dataset_row(fam: pd.DataFrame, rung: str, kv: str, key: str, n_ctx) -> pd.Series | None:
    bench, metric, *corpus = key.split(":")
    g = fam[(fam["rung"] == rung) & (fam["kv"] == kv) & (fam["benchmark"] == bench) & (fam["metric"] == metric)]
    g = g[g["subset"] == corpus[0]] if corpus else g[g["subset"].isna()]
    if n_ctx is not None and g["n_ctx"].notna().any():
        g = g[g["n_ctx"] == n_ctx]
    g = g[g["delta"].notna()]
    return None if g.empty else g.iloc[0]


def disagreements(r: dict, fam: pd.DataFrame) -> list[str]:
    """Where the walk's evidence and the dataset's paired columns (what the recommender ranks by) speak
    of the same figure of the same rung and do not agree: the Δ, at the dataset's level the interval,
    and at that level the state at the walk's bound. A task figure is the same figure only when the
    walk's reference is the family's."""
    refs = fam[fam["is_reference"].astype(bool)]["rung"].unique()
    out = []
    for ev in (r.get("evidence"), r.get("below_evidence")):
        for f in (ev or {}).get("figures", []):
            if f.get("delta") is None or f.get("ci_low") is None:
                continue
            if not f["figure"].startswith("perplexity:") and r.get("reference") not in refs:
                continue
            row = _dataset_row(fam, ev["rung"], r.get("kv") or "f16", f["figure"], f.get("n_ctx"))
            if row is None:
                continue
            scale = max(1.0, abs(float(row["delta"])))
            what = f"{ev['rung']} {f['figure']}"
            if abs(float(row["delta"]) - f["delta"]) > TOL * scale:
                out.append(f"{what}: Δ {f['delta']:.6g} in the walk, {float(row['delta']):.6g} in the dataset")
                continue
            if abs(ev["interval_level"] - LEVEL) > 1e-9:
                continue  # another level: another interval, not a disagreement
            lo, hi = float(row["delta_ci_low"]), float(row["delta_ci_high"])
            if abs(lo - f["ci_low"]) > TOL * scale or abs(hi - f["ci_high"]) > TOL * scale:
                out.append(f"{what}: 95 % CI {f['ci_low']:.6g}…{f['ci_high']:.6g} in the walk, {lo:.6g}…{hi:.6g} "
                           "in the dataset")
                continue
            d = ni.decide(float(row["delta"]), lo, hi, tolerance=f["tolerance"],
                          higher_is_better=not f["figure"].startswith("perplexity:"), unit=f.get("unit") or "")
            if d is not None and d.state != f["state"]:
                out.append(f"{what}: {f['state']} in the walk, {d.state} on the dataset's interval at the same bound")
    return out


# ------------------------------------------------------------------------------------------ the chart

def _chart_figure(parts: dict, r: dict | None, fam: pd.DataFrame) -> tuple[str, str, str | None, float | None] | None:
    """(benchmark, metric, corpus, accepted bound in the figure's unit) the chart draws."""
    if r is not None:
        for f in (r.get("evidence") or r.get("below_evidence") or {}).get("figures", []) or []:
            bench, metric, *corpus = f["figure"].split(":")
            return bench, metric, corpus[0] if corpus else None, (-f["tolerance"] if f.get("unit") == "%"
                                                                  else f["tolerance"])
        acc = r.get("accept") or []
        if not acc:
            return None
    paired = fam[fam["delta"].notna() & fam["delta_ci_low"].notna()]
    tasks = [b for b in dv.task_benchmarks(paired) if dv.score_metric(paired, b)]
    if tasks:
        return tasks[0], dv.score_metric(paired, tasks[0]), None, -ni.DEFAULT_TOLERANCE["%"]
    k = paired[(paired["benchmark"] == "perplexity") & (paired["metric"] == "kld_mean")]
    if not k.empty:
        sub = k["subset"].dropna()
        return "perplexity", "kld_mean", (sub.iloc[0] if not sub.empty else None), ni.DEFAULT_TOLERANCE["nats"]
    return None


def chart(F: Figures, family: str, fam: pd.DataFrame, parts: dict, r: dict | None) -> str:
    """Loss against memory per rung: each rung's paired Δ of the deciding figure with its 95 % interval
    (the dataset's), at its memory at the context, the accepted loss as a line and the answer marked."""
    what = _chart_figure(parts, r, fam)
    if what is None:
        return f'<p class="note" data-family="{esc(family)}">No chart of loss against memory: no paired figure.</p>'
    bench, metric, corpus, bound = what
    kv = parts.get("kv") or (r or {}).get("kv") or "f16"
    g = fam[(fam["benchmark"] == bench) & (fam["metric"] == metric) & (fam["kv"] == kv)]
    g = g[g["subset"] == corpus] if corpus else g[g["subset"].isna()]
    mem = fam[(fam["benchmark"] == "memory") & (fam["metric"] == "predicted_total_bytes") & (fam["kv"] == kv)]
    pts = []
    for rung, rg in g.groupby("rung"):
        row = dv.pick_ctx(rg, parts["ctx"])
        m = dv.pick_ctx(mem[mem["rung"] == rung], parts["ctx"])
        if row is None or m is None or isnan(row["delta"]):
            continue
        pts.append((rung, float(m["value"]), float(row["delta"]), float(row["delta_ci_low"]),
                    float(row["delta_ci_high"]), row["unit"]))
    if not pts:
        return (f'<p class="note" data-family="{esc(family)}">No chart of loss against memory: no rung has both a '
                f"paired {esc(metric)} and a memory figure.</p>")
    pts.sort(key=lambda p: p[1])
    unit = pts[0][5]
    u = "points" if unit == "%" else unit
    fig, ax = F.new(6.0, 2.8)
    scale = 1 << 20
    xs = [p[1] / scale for p in pts]
    ys = [p[2] for p in pts]
    err = [[p[2] - p[3] for p in pts], [p[4] - p[2] for p in pts]]
    ax.errorbar(xs, ys, yerr=err, fmt="o", color="#234", capsize=3, label=f"Δ {metric} (95 % CI)")
    for p, x in zip(pts, xs):
        chosen = p[0] == parts.get("rung")
        ax.annotate(p[0], (x, p[2]), textcoords="offset points", xytext=(4, 4), fontsize=7,
                    fontweight="bold" if chosen else "normal")
        if chosen:
            ax.scatter([x], [p[2]], s=120, facecolors="none", edgecolors="#a11", linewidths=1.6, zorder=4)
    if bound is not None and math.isfinite(bound):
        ax.axhline(bound, color="#a11", linestyle="--", linewidth=1, label=f"accepted loss ({_num(bound, unit)} {u})")
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_xlabel(f"memory at {parts['ctx']} tokens (MiB)")
    ax.set_ylabel(f"Δ {metric} ({u})")
    ax.set_title(f"{family}: loss against memory" + (f" · {corpus}" if corpus else ""))
    ax.legend(loc="best")
    svg = F.svg(fig, f"{family}: loss of {metric} against memory per rung")
    return (f'<figure class="plot first-chart" data-kind="loss-memory" data-family="{esc(family)}" '
            f'data-metric="{esc(metric)}">{svg}<figcaption class="how">Each rung\'s paired Δ of {esc(bench)} '
            f"{esc(metric)}{' on ' + esc(corpus) if corpus else ''} against the reference with its 95 % interval "
            "(the dataset's; a walk tests each rung at its own level, in its table below), at the rung's predicted "
            "memory (weights + KV cache + compute buffers); the dashed line is the accepted loss, the ringed point "
            "the answer.</figcaption></figure>")


def first_screen(F: Figures, fam: pd.DataFrame, family: str, card: str, ctx: int, finds) -> tuple[str, str]:
    """One family's first screen: (its sentence with any disagreement between its walk and the dataset,
    its chart of loss against memory)."""
    r = find_of(finds, family, card)
    parts = from_find(r) if r is not None else from_recommend(fam, ctx, card)
    words = sentence(family, parts)
    if r is not None:
        bad = disagreements(r, fam)
        if bad:
            words += (f'<p class="warn disagree" data-family="{esc(family)}">The walk and the dataset disagree on the '
                      "same figures: " + "; ".join(esc(b) for b in bad) + ".</p>")
    words += converted_elsewhere(fam, family)
    return words, chart(F, family, fam, parts, r)


def converted_elsewhere(fam: pd.DataFrame, family: str) -> str:
    """A warning under the sentence naming the family's third-party rungs whose differences from the
    reference the config accepted (the dataset's ``provenance``): their figures measure the conversion
    as well as the bits (docs/ladder.md, "Third-party files")."""
    if "provenance" not in fam.columns:
        return ""
    flagged = fam[fam["provenance"].fillna("").str.contains("differs from the reference")]
    if flagged.empty:
        return ""
    rungs = flagged.groupby("rung")["provenance"].first()
    named = "; ".join(f"{esc(r)}: {esc(p.split(': ', 1)[-1])}" for r, p in rungs.items())
    return (f'<p class="warn provenance" data-family="{esc(family)}">Third-party files measured with differences '
            f"from the reference that the config accepts ({named}): their figures measure the conversion as well "
            "as the bits (docs/ladder.md, \"Third-party files\").</p>")


def first_screens(F: Figures, d: pd.DataFrame, card: str, ctx: int, finds) -> str:
    """Every family's sentence first (the answer in words, on one screen), then their charts side by side."""
    shown = [first_screen(F, d[d["family"] == fam], fam, card, ctx, finds)
             for fam in sorted(d["family"].dropna().unique())]
    return (f'<div class="first-screens" id="first-{esc(card)}">' + "".join(w for w, _ in shown)
            + '<div class="grid first-charts">' + "".join(c for _, c in shown) + "</div></div>")
