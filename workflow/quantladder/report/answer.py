"""The answer, each card's first screen, without plots: per family and rung the headline figures with
their paired deltas, 95 % intervals and verdicts (the dataset's ``delta*``/``verdict*`` columns,
quantladder.deltas), the noise floor, the items a 2-point loss needs (quantladder.plan), and the
recommendation at common memory budgets (quantladder.recommend). A headline that does not vary along
the ladder is one line. A third-party file (``families.<f>.prebuilt``) is judged against the family's
own ladder at its size (``matched_size``): its figures beside the rungs made here read at its bits per
weight, interpolated between the two measured neighbours, with its size gap to each."""

from __future__ import annotations

import pandas as pd

from .. import dataset_view as dv
from .. import deltas
from .. import metrics as qmetrics
from .. import plan as qplan
from .. import recommend as rec
from .. import status as qstatus
from .family import base_model_note
from .markup import badge, constant_line, esc, fmt_delta, isnan, rcell, share_text, table, tol, vcell, verdict_badge
from .pending import Pending, answer_note, mark, unmeasured_points
from .tables import batch_invariance_words

DETECT_POINTS = 2.0  # the loss the report's sample-size answer is for (quantladder plan --detect 2)
BUDGETS_GIB = (0.5, 1, 2, 4, 8, 12, 16, 24, 48, 80, 141)  # common memory budgets the recommendation is shown for
ANSWER_CTX = 4096  # the context the budgets' recommendations are computed at


def _verdict_summary(rows: pd.DataFrame) -> str:
    """For a constant headline: what its verdicts say together (no loss detectable, and how small a
    loss the run could have seen)."""
    v = rows[rows["verdict"].notna()]
    if v.empty:
        return ""
    n = sorted({int(x) for x in v["n"].dropna()})
    mde = v["delta_mde"].dropna()
    see = ("no loss of any size was detectable with these items" if mde.empty else
           f"the smallest loss detectable at 80 % power is {mde.min():.1f}"
           + ("" if mde.max() - mde.min() < 0.05 else f"–{mde.max():.1f}") + " points")
    return (f"no rung's loss is detectable (n = {', '.join(map(str, n))}; Holm over the family's headline "
            f"comparisons); {see}")


def answer_columns(fam: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """The headline figures of a family, one column each: (benchmark, label, rows: one per point).

    A headline measured at several contexts (RULER's average per length) is a column per context; a
    headline without a whole-set row (a perplexity figure per corpus) is a column per subset."""
    cols = []
    # the costs a recommendation weighs (memory, speed); energy is in the details
    benches = dv.task_benchmarks(fam) + [b for b in ("memory", "speed") if (fam["benchmark"] == b).any()]
    figs = dv.figures(fam)
    for b in benches:
        # quality: the headlines with a paired verdict; cost: each measure's preferred Pareto axis
        names = ([m for m in qmetrics.headlines(b) if qmetrics.get(m).paired] if b not in dv.COST_BENCHMARKS
                 else qmetrics.pareto_costs(b)[:1])
        for m in names:
            rows = figs[(figs["benchmark"] == b) & (figs["metric"] == m)]
            if rows.empty:
                continue
            whole = dv.whole(rows)
            if whole.empty:
                groups = [(f" · {s}", g) for s, g in rows.groupby("subset", sort=True)]
            else:
                ctxs = sorted(whole["n_ctx"].dropna().unique())
                if qmetrics.get(m).whole == "only" or len(ctxs) <= 1:
                    groups = [("", whole)]
                else:
                    groups = [(f" @ n_ctx {int(c)}", whole[whole["n_ctx"] == c]) for c in ctxs]
            for suffix, g in groups:
                picked = pd.DataFrame([dv.pick_ctx(pg, None) for _, pg in g.groupby(dv.POINT, dropna=False)])
                cols.append((b, f"{m}{suffix}", picked))
    return cols


def _is_constant_column(rows: pd.DataFrame) -> bool:
    if rows.empty or rows.groupby(["rung", "kv"]).ngroups < 2:
        return False
    v = rows["value"].astype(float)
    if float(v.max() - v.min()) > tol(v):
        return False
    verdicts = set(rows["verdict"].dropna())
    return verdicts <= {"no loss detectable"}


def _noise_line(fam: pd.DataFrame) -> str:
    """The family's noise floors in one line: per benchmark, the reference generated again at another
    batch setting against itself, each share as k of n with its exact interval (a 0 of 10 is not
    "0 ± 0 %": its 95 % upper bound is 31 %); then batch invariance per rung, from its own replies."""
    parts, rung = [], None
    noise = dv.whole(dv.figures(fam[fam["metric"].isin(qmetrics.in_group("noise")) & fam["n_ctx"].isna()]))
    for b, g in noise.groupby("benchmark", sort=True):
        rung = g["rung"].iloc[0]
        bits = []
        for m, what in (("noise_flip_rate", "verdicts flipped"), ("noise_identical_share", "replies identical")):
            r = g[g["metric"] == m]
            if not r.empty:
                r = r.iloc[0]
                bits.append(f"{esc(share_text(r['value'], r['n'], counts=True))} {what}")
        parts.append(f'<span data-benchmark="{esc(b)}"><b>{esc(b)}</b> {", ".join(bits)}</span>')
    if not parts:
        return ""
    return (f'<li class="noise">Noise floor (the reference {esc(rung)} generated again at another batch setting; '
            "exact 95 % intervals): " + "; ".join(parts)
            + f". A significant loss whose flip rate is not above it reads <i>loss within noise</i>. "
            + batch_invariance_words(fam) + "</li>")


def _plan_line(res: dict | None, family: str) -> str:
    """The items a 2-point loss needs, per benchmark of the family, in one line (quantladder plan)."""
    if res is None:
        return ""
    entries = res["plan"]["entries"]
    parts, head = [], None
    for b in res["benchmarks"]:
        if b["family"] != family:
            continue
        head = (f"exact McNemar at α/m = {b['planning_alpha']:.2g}, m = {b['n_comparisons']}, from each rung's "
                "measured flip rate; the rung that needs the most decides")
        mine = [e for e in entries if e["family"] == family and e["benchmark"] == b["benchmark"] and e["kv"] == b["kv"]
                and e.get("hours_at_detect") is not None]
        cost = (f", ≈ {sum(e['hours_at_detect'] for e in mine):.2g} job-hours for its {len(mine)} points" if mine else "")
        kv = "" if b["kv"] == "f16" else f" (KV {esc(b['kv'])})"
        show = max((r.get("items_to_show_within") or 0 for r in b["rungs"]), default=0)
        show_txt = (f"; {show:,} to show every rung within {DETECT_POINTS:g} points instead, the claim the walk makes"
                    if show else "")
        parts.append(f'<span data-benchmark="{esc(b["benchmark"])}"><b>{esc(b["benchmark"])}</b>{kv} '
                     f'<b>{b["items_needed"]:,} items</b> ({esc(b["items_needed_rung"])}; '
                     f'{b["items_needed_upper"]:,} at its flip rate\'s 95 % upper bound; {b["items_now"]:,} measured'
                     f"{cost}{show_txt})</span>")
    if not parts:
        return ""
    return (f'<li class="plan">Items to detect a {DETECT_POINTS:g}-point loss at {100 * res["power"]:g} % power '
            f"({head}): " + "; ".join(parts) + ".</li>")


def answer_family(fam: pd.DataFrame, family: str, plan_res: dict | None, d_card: pd.DataFrame | None = None,
                  pending: Pending | None = None) -> str:
    """One family's answer: its table of rungs and headline columns (on a partial run, the points the run
    still lacks after them, not measured yet: no figure, no Δ, no verdict), then its one-line figures."""
    pts = dv.point_table(fam)
    ref = pts[pts["is_reference"].astype(bool)]
    ref_rung = ref["rung"].iloc[0] if not ref.empty else None
    cols = answer_columns(fam)
    shown, constant = [], []
    for b, label, rows in cols:
        (constant if _is_constant_column(rows) else shown).append((b, label, rows))

    def col_status(rows) -> str | None:
        sts = set(rows["status"].fillna("ok"))
        return next(iter(sts)) if len(sts) == 1 and sts != {"ok"} else None

    def head(label, rows):
        unit = rows["unit"].dropna().iloc[0] if rows["unit"].notna().any() else None
        paired = rows["delta"].notna().any()
        du = "points" if unit == "%" else unit
        st = col_status(rows)
        return (f"<small>{esc(rows['benchmark'].iloc[0])}</small><br>{esc(label)}"
                + (f" <small>({esc(unit)})</small>" if unit and unit not in ("1", "bytes") else "")
                + (f" {badge(st)}" if st else "") + (f"<br><small>Δ {esc(du)} · verdict</small>" if paired else ""))

    heads = ["rung", "KV", "file <small>(bits per weight)</small>"] + [head(label, rows) for _, label, rows in shown]
    same_status = {label: col_status(rows) for _, label, rows in shown}
    body, classes = [], []
    for _, p in pts.iterrows():
        cells = [esc(p["rung"]) + (" <small>(reference)</small>" if p["is_reference"] else ""), esc(p["kv"]),
                 esc(dv.fmt_bytes(p["file_bytes"]))
                 + ("" if isnan(p["bits_per_weight"]) else f" <small>({p['bits_per_weight']:.2f})</small>")]
        worst = "ok"
        for b, label, rows in shown:
            r = rows[(rows["rung"] == p["rung"]) & (rows["kv"] == p["kv"])]
            if r.empty:
                cells.append(mark(pending, family, p["rung"], p["kv"], b))
                continue
            r = r.iloc[0]
            worst = qstatus.worst([worst, r["status"]])
            # the unit is in the column's header (bytes keep theirs: KiB/MiB/GiB)
            cell = f'<span class="v">{rcell(r, show_unit=False)}</span>'
            if r["status"] != "ok" and same_status.get(label) != r["status"]:
                cell += " " + badge(r["status"])
            if not isnan(r["delta"]):
                cell += (f'<br><span class="d" title="{esc(fmt_delta(r["delta"], r["delta_ci_low"], r["delta_ci_high"], r["unit"]))}">'
                         f'{esc(fmt_delta(r["delta"], r["delta_ci_low"], r["delta_ci_high"], r["unit"], compact=True))}'
                         f"</span> {verdict_badge(r['verdict'], r['verdict_text'])}")
            elif not isnan(r["verdict_text"]) and r["verdict_text"]:
                cell += f'<br><small class="note" title="{esc(r["verdict_text"])}">not compared</small>'
            cells.append(cell)
        body.append(cells)
        classes.append(f"st-row-{worst}")
    for rung, kv in unmeasured_points(pending, family, zip(pts["rung"], pts["kv"])):
        body.append([esc(rung), esc(kv), "—"] + [mark(pending, family, rung, kv, b) for b, _, _ in shown])
        classes.append("pending")
    m = deltas.headline_comparisons(fam).get((fam["card"].iloc[0], family))
    out = [f'<div class="answer-family" id="answer-{esc(fam["card"].iloc[0])}-{esc(family)}">'
           f"<h3>{esc(family)}" + (f" <small>against its reference {esc(ref_rung)}"
                                   + (f"; Holm over its {m} headline comparisons" if m else "") + "</small>"
                                   if ref_rung else "") + "</h3>"]
    out.append(table(heads, body, f"table-answer-{family}", classes))
    out.append(matched_size(fam, family, [(b, label, rows) for b, label, rows in cols if b != "memory"]))
    out.append(base_model_note(d_card, family, pending) if d_card is not None else "")
    lines = [constant_line(rows, f"{b} {label}", _verdict_summary(rows)) for b, label, rows in constant]
    lines += [x for x in (_noise_line(fam), _plan_line(plan_res, family)) if x]
    if lines:
        out.append('<ul class="constants">' + "".join(lines) + "</ul>")
    out.append("</div>")
    return "".join(out)


def matched_size_rows(cols: list[tuple[str, str, pd.DataFrame]]) -> list[dict]:
    """Per third-party point (the dataset's ``provenance``: "third party ...") and headline figure: its
    value beside the family's own ladder at the same KV type read at its bits per weight
    (``dataset_view.at_bpw``: linear between the two measured neighbours, absent with the reason outside
    them), the difference, and its size gap to each neighbour. The memory columns are left out: at
    matched size they are the same by construction."""
    out = []
    for b, label, rows in cols:
        if "provenance" not in rows.columns:
            continue
        third = rows["provenance"].fillna("").astype(str).str.startswith("third party")
        for _, r in rows[third].iterrows():
            if isnan(r["value"]):
                continue
            own = rows[~third & (rows["kv"] == r["kv"])]
            ladder = [(o["rung"], o["bits_per_weight"], o["value"]) for _, o in own.iterrows()]
            hib = None if isnan(r["higher_is_better"]) else bool(r["higher_is_better"])
            at = dv.at_bpw(ladder, r["bits_per_weight"], higher_is_better=hib)
            rec = {"benchmark": b, "figure": label, "rung": r["rung"], "kv": r["kv"], "provenance": r["provenance"],
                   "value": float(r["value"]), "stderr": r["stderr"], "unit": r["unit"], "higher_is_better": hib,
                   "bits_per_weight": r["bits_per_weight"], "ours": at.get("value"), "how": at.get("text"),
                   "reason": at.get("reason"), "gaps": []}
            if at.get("value") is not None:
                rec["difference"] = float(r["value"]) - at["value"]
                for n in dict.fromkeys(x[0] for x in (at["below"], at["above"])):
                    o = own[own["rung"] == n].iloc[0]
                    rec["gaps"].append(f"{r['rung']} against {n}: " + dv.size_gap(
                        r["bits_per_weight"], r["file_bytes"], o["bits_per_weight"], o["file_bytes"]))
            out.append(rec)
    return out


def matched_size(fam: pd.DataFrame, family: str, cols: list[tuple[str, str, pd.DataFrame]]) -> str:
    """The family's third-party files at matched size (``matched_size_rows``), one table; "" when it has none."""
    recs = matched_size_rows(cols)
    if not recs:
        return ""
    body = []
    for m in recs:
        unit = None if isnan(m["unit"]) else m["unit"]
        du = "points" if unit == "%" else unit
        if m["ours"] is None:
            ours, diff = f'<span class="absent">absent: {esc(m["reason"])}</span>', "—"
        else:
            better = (None if m["higher_is_better"] is None or abs(m["difference"]) < 1e-12 else
                      (m["difference"] > 0) == m["higher_is_better"])
            word = "" if better is None else " (theirs better)" if better else " (ours better)"
            ours = f"{esc(dv.fmt_value(m['ours'], None, unit))}<br><small>{esc(m['how'])}</small>"
            diff = (f"{m['difference']:+.4g}" + (f" {esc(du)}" if du and du not in ("1", "bytes") else "")
                    + esc(word))
        body.append([esc(m["rung"]) + f' <small class="provenance">({esc(m["provenance"])})</small>', esc(m["kv"]),
                     f"<small>{esc(m['benchmark'])}</small> {esc(m['figure'])}",
                     esc(dv.fmt_value(m["value"], m["stderr"], unit)), ours, diff,
                     "<br>".join(esc(g) for g in m["gaps"]) or "—"])
    return table(["third-party rung", "KV", "figure", "its value", "ours at its size", "difference", "size gaps"],
                 body, f"table-matched-size-{family}",
                 caption="Third-party files against this family's own ladder at the same size: the rungs made here "
                         "read at the file's bits per weight, linear between the two measured neighbours (said to be "
                         "interpolated); outside the sizes measured here nothing is extrapolated. A file that beats "
                         "ours here beats it at the same bytes, not against a larger or smaller rung.")


def _budget_label(gib: float) -> str:
    return f"{gib:g} GiB" if gib >= 1 else f"{int(gib * 1024)} MiB"


def answer_ctx(d: pd.DataFrame) -> int:
    """The context the budgets are answered at: ANSWER_CTX, or the longest a measured model was trained for."""
    trained = d[(d["metric"] == "n_ctx_train") & d["value"].notna()]["value"]
    return int(min(ANSWER_CTX, trained.max())) if not trained.empty else ANSWER_CTX


def recommendation_rows(d: pd.DataFrame, card: str) -> tuple[list[list[str]], list[str]]:
    """The recommendation at the common budgets (equal weights over the task benchmarks), budgets with
    the same answer merged into one range."""
    answers = []
    notes: list[str] = []
    ctx = answer_ctx(d)
    try:
        prepared = rec.candidates(d, ctx, None, card)  # once for every budget
    except rec.RecommendError as e:
        return [], [str(e)]
    for gib in BUDGETS_GIB:
        r = rec.recommend(d, int(gib * (1 << 30)), ctx, card=card, n_runners_up=0, prepared=prepared)
        notes = r.get("notes", [])
        # budgets merge when the answer and its reason are the same
        key = (r["best"]["name"], tuple(c["name"] for c in r.get("preferred_over", []))) if r["feasible"] else None
        answers.append((gib, key, r))
    merged: list[list] = []
    for gib, key, r in answers:
        if merged and merged[-1][1] == key:
            merged[-1][3] = gib
        else:
            merged.append([gib, key, r, gib])
    rows = []
    for lo, key, r, hi in merged:
        span = _budget_label(lo) if lo == hi else f"{_budget_label(lo)} – {_budget_label(hi)}"
        if key is None:
            rows.append([esc(span), "nothing fits", "—", "—", esc(r["message"])])
            continue
        b = r["best"]
        why = esc(r.get("why", ""))  # the rule that decided, with its numbers (quantladder.rank)
        gaps = [c["gap"] for c in r.get("preferred_over", []) if c.get("gap")]
        if gaps:  # every comparison of two rungs with its size gap
            why += "<br><small>size gap of " + "; ".join(esc(g) for g in gaps) + "</small>"
        cites = "; ".join(f"{esc(k)}: {esc(fmt_delta(s['delta'], s['delta_ci_low'], s['delta_ci_high'], '%'))} "
                          f"{verdict_badge(s['verdict'], s['verdict_text'])}"
                          for k, s in b["scores"].items() if s.get("delta") is not None)
        rows.append([esc(span), f"<b>{esc(b['name'])}</b>", vcell(b["score"], b["score_stderr"], "%"),
                     esc(dv.fmt_bytes(b["memory_bytes"])), (cites + ("<br>" if cites and why else "") + why) or "—"])
    return rows, notes


def answer_section(d: pd.DataFrame, card: str, pending: Pending | None = None, note: bool = True) -> str:
    """The answer's families: per family and rung the headline figures, their paired deltas and verdicts,
    the noise floor and the items a 2-point loss needs; on a partial run, said first (``note``: False
    where the page has said it above the first screen)."""
    try:
        plan_res = qplan.plan(d, detect=DETECT_POINTS, card=card)
    except qplan.PlanError:
        plan_res = None
    out = [answer_note(pending, d["family"].dropna().unique(), card) if note else "",
           '<p class="how">Per family and rung: each headline figure ± its standard error; Δ, the rung minus the '
           "family's reference on the same items (or tokens), with its 95 % interval; the verdict of the exact paired "
           "test (McNemar / sign-flip) after Holm's correction over the family's headline comparisons on this card "
           "(α = 0.05; docs/statistics.md). Per-token figures (perplexity, KLD) use their per-token standard error. "
           "Hover a verdict for its words.</p>"]
    for fam in sorted(d["family"].dropna().unique()):
        out.append(answer_family(d[d["family"] == fam], fam, plan_res, d, pending))
    return "".join(out)


def recommend_note(d: pd.DataFrame) -> str:
    """What the recommendation's heading says it is computed at."""
    return (f"<small>(context {answer_ctx(d)} tokens; equal weights over the task benchmarks; "
            "<code>quantladder recommend</code> for any other)</small>")


def recommend_section(d: pd.DataFrame, card: str) -> str:
    """The recommendation at the common budgets, and its notes."""
    rows, notes = recommendation_rows(d, card)
    out = []
    if rows:
        out.append(table(["memory budget", "run", "score", "predicted memory", "its paired deltas · why"], rows,
                         f"table-recommend-{card}"))
    out += [f'<p class="note">{esc(n)}</p>' for n in notes]
    return "".join(out)
