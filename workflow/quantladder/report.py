"""The HTML report: one self-contained file per card, rebuilt from the Parquet dataset alone.

``build(points_parquet, out_html, card=None)`` reads ``points.parquet`` and nothing else, and
writes one HTML file with inline SVG plots (matplotlib, text kept as text) and no external
JS/CSS. Each card opens with **the answer**, on one screen and without plots: per family and rung
the headline figures, their paired deltas against the reference with 95 % intervals and verdicts
(the dataset's ``delta*``/``verdict*`` columns, quantladder.deltas), the noise floor, the items a
2-point loss needs (quantladder.plan), the recommendation at common memory budgets
(quantladder.recommend) and the findings about importance matrices (IQ2_XXS with a matrix vs Q2_K
without, Q4_K_M with vs without: mean KLD, pairs found from the rungs' ``file_type`` and ``imatrix``);
a headline that does not vary along the ladder is one line, a base model (no chat benchmark) is said
so. Below: status of every benchmark (anchor gate), flips beside the noise floor, then, folded,
each family's rungs as made (file type, matrix, recipe, the share of parameters per tensor type),
the plots — headline figures against bits per weight per family and across families, Pareto fronts of the paired quality
figures against memory, tokens/s and joules per token — where a figure that does not vary is one
line instead of a plot, every figure's table with its paired Δ, degenerate loops, manifests, and —
when the dataset holds other cards — the cross-card view (identical generations, deltas), which
never mixes cards into one curve.

`unanchored` points are drawn hollow and `incomplete` ones as ×; in tables their status is a badge.
"""

from __future__ import annotations

import html
import io
import logging
import math
import re
from pathlib import Path

import pandas as pd

from . import dataset_view as dv
from . import deltas
from . import metrics as qmetrics
from . import status as qstatus
from .dataset import IMATRIX_UNKNOWN
from .errors import DataError
from .io import atomic_path

log = logging.getLogger("quantladder.report")

STATUS_MARK = {  # how a point's status is drawn: matplotlib marker, filled?
    "ok": ("o", True), "unanchored": ("o", False), "incomplete": ("x", True), "absent": ("x", True),
    "failed": ("x", True), "blocked": ("x", True),
}
KV_MARKERS = ["o", "s", "^", "D", "v", "P", "*", "h"]
MAX_SERIES = 12
# Subsets that summarise others (BFCL's aggregates, ...): drawn first when not every subset fits.
AGGREGATE_SUBSETS = ("items_run", "non_live", "live", "multi_turn", "simple", "irrelevance", "relevance")
# The Pareto fronts' cost axes: (measure, title, lower is better); the metric is each measure's
# preferred axis the dataset holds (quantladder.metrics: pareto_cost).
COST_AXES = [("memory", "memory", True), ("speed", "generation speed", False), ("energy", "energy per token", True)]
BYTES_SCALE = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


# ------------------------------------------------------------------ helpers

def esc(x) -> str:
    return html.escape("" if x is None else str(x))


def _isnan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or (x is pd.NA)


def badge(status: str | None) -> str:
    st = status or "ok"
    return f'<span class="badge st-{esc(st)}">{esc(st)}</span>'


def short(h) -> str:
    if _isnan(h) or not h:
        return "—"
    return f'<code title="{esc(h)}">{esc(str(h)[:12])}</code>'


def bytes_scale(values) -> tuple[str, float]:
    vmax = max((abs(v) for v in values if not _isnan(v)), default=0)
    for unit, k in BYTES_SCALE:
        if vmax >= k:
            return unit, float(k)
    return "bytes", 1.0


def unit_axis(unit: str | None, values) -> tuple[str, float]:
    """Axis unit label and divisor (bytes are shown in KiB/MiB/GiB)."""
    if unit == "bytes":
        return bytes_scale(values)
    if unit in (None, "", "1"):
        return "1", 1.0
    return unit, 1.0


def table(headers: list[str], rows: list[list[str]], table_id: str, row_classes: list[str] | None = None,
          caption: str | None = None) -> str:
    """An HTML table; cells are already-escaped HTML."""
    out = [f'<div class="tablewrap"><table id="{esc(table_id)}">']
    if caption:
        out.append(f"<caption>{caption}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr></thead><tbody>")
    for i, r in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def vcell(value, stderr, unit) -> str:
    return esc(dv.fmt_value(None if _isnan(value) else value, None if _isnan(stderr) else stderr, unit))


# ------------------------------------------------------------------ figures

class Figures:
    """Renders matplotlib figures to inline SVG with ids unique in the page."""

    def __init__(self):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt = plt
        self.n = 0
        self.rc = {"svg.fonttype": "none", "svg.hashsalt": "quantladder", "font.size": 9,
                   "axes.titlesize": 10, "legend.fontsize": 8, "figure.dpi": 100,
                   "axes.grid": True, "grid.alpha": 0.3}

    def new(self, w=6.0, h=3.8):
        with self.plt.rc_context(self.rc):
            fig, ax = self.plt.subplots(figsize=(w, h))
        return fig, ax

    def svg(self, fig, label: str) -> str:
        self.n += 1
        buf = io.StringIO()
        with self.plt.rc_context(self.rc):
            # fixed margins: tight_layout would cost a third of the rendering time per figure
            fig.subplots_adjust(left=0.12, right=0.97, bottom=0.13, top=0.92)
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        self.plt.close(fig)
        text = buf.getvalue()
        text = text[text.index("<svg"):]
        pre = f"f{self.n}-"
        ids = set(re.findall(r'\bid="([^"]+)"', text))
        for i in sorted(ids, key=len, reverse=True):
            text = text.replace(f'id="{i}"', f'id="{pre}{i}"').replace(f"#{i})", f"#{pre}{i})") \
                       .replace(f'href="#{i}"', f'href="#{pre}{i}"')
        text = re.sub(r'<svg([^>]*?)\swidth="[^"]*"\sheight="[^"]*"', r"<svg\1", text, count=1)
        return text.replace("<svg", f'<svg role="img" aria-label="{esc(label)}" class="plot-svg"', 1)


def _series_label(kv, subset, n_ctx, vary: set[str]) -> str:
    parts = [f"KV {kv}"]
    if "subset" in vary:
        parts.append("all" if subset is None else str(subset))
    if "n_ctx" in vary:
        parts.append("" if _isnan(n_ctx) else f"n_ctx {int(n_ctx)}")
    return " · ".join(p for p in parts if p)


def _status_legend(ax, statuses: set[str]):
    from matplotlib.lines import Line2D

    handles = []
    for st in ("unanchored", "incomplete"):
        if st in statuses:
            m, filled = STATUS_MARK[st]
            handles.append(Line2D([], [], color="0.3", marker=m, linestyle="none", markersize=8 if m == "x" else 6,
                                  markeredgewidth=2 if m == "x" else 1,
                                  markerfacecolor="0.3" if filled else "none", label=st))
    return handles


def curve_figure(F: Figures, rows: pd.DataFrame, family: str, benchmark: str, metric: str) -> str:
    """One figure against bits per weight with error bars; one line per KV type (× subset × n_ctx)."""
    rows = rows[rows["bits_per_weight"].notna()].copy()
    if rows.empty:
        return f'<p class="note">{esc(benchmark)} {esc(metric)}: no point has its bits per weight recorded.</p>'
    unit = rows["unit"].dropna().iloc[0] if rows["unit"].notna().any() else None
    ylab, div = unit_axis(unit, list(rows["value"]))
    rows["_subset"] = rows["subset"]
    rows["_nctx"] = rows["n_ctx"].astype("float")
    vary = set()
    if rows["_subset"].nunique(dropna=False) > 1:
        vary.add("subset")
    if rows["_nctx"].nunique(dropna=False) > 1:
        vary.add("n_ctx")
    groups = list(rows.groupby(["kv", "_subset", "_nctx"], dropna=False, sort=True))
    note = ""
    if len(groups) > MAX_SERIES:
        # Too many lines to read: keep the whole-benchmark row and the aggregate subsets first.
        subsets = sorted(rows["_subset"].dropna().unique(),
                         key=lambda x: (AGGREGATE_SUBSETS.index(x) if x in AGGREGATE_SUBSETS else len(AGGREGATE_SUBSETS), x))
        per_subset = max(1, len(groups) // max(1, rows["_subset"].nunique(dropna=False)))
        keep_n = max(1, MAX_SERIES // per_subset - int(rows["_subset"].isna().any()))
        keep = set(subsets[:keep_n])
        dropped = len(subsets) - len(keep)
        rows = rows[rows["_subset"].isna() | rows["_subset"].isin(keep)]
        groups = list(rows.groupby(["kv", "_subset", "_nctx"], dropna=False, sort=True))[:MAX_SERIES]
        note = f" ({dropped} subsets in the table only)"
    fig, ax = F.new()
    import matplotlib

    colors = matplotlib.colormaps["tab10"].colors
    kvs = sorted(rows["kv"].dropna().unique())
    variants = sorted({(0 if _isnan(s) else 1, "" if _isnan(s) else str(s), -1 if _isnan(c) else c)
                       for _, s, c in (k for k, _ in groups)})
    styles = ["-", "--", ":", "-."]
    statuses = set()
    for (kv, subset, nctx), g in groups:
        g = g.sort_values("bits_per_weight")
        color = colors[kvs.index(kv) % len(colors)] if kv in kvs else "0.3"
        x = g["bits_per_weight"].to_numpy(float)
        y = g["value"].to_numpy(float) / div
        err = g["stderr"].to_numpy(float) / div
        vkey = (0 if _isnan(subset) else 1, "" if _isnan(subset) else str(subset), -1 if _isnan(nctx) else nctx)
        style = styles[variants.index(vkey) % len(styles)]
        ax.errorbar(x, y, yerr=None if all(math.isnan(e) for e in err) else [0 if math.isnan(e) else e for e in err],
                    color=color, linestyle=style, capsize=3, linewidth=1.4,
                    label=_series_label(kv, None if _isnan(subset) else subset, nctx, vary))
        for st, sg in g.groupby("status"):
            statuses.add(st)
            m, filled = STATUS_MARK.get(st, ("o", True))
            if m == "x":  # a thin cross has no face: draw it large and bold so it reads apart from ●
                ax.scatter(sg["bits_per_weight"], sg["value"] / div, marker=m, s=90, zorder=3, color=color,
                           linewidths=2.2)
            else:
                ax.scatter(sg["bits_per_weight"], sg["value"] / div, marker=m, s=36, zorder=3,
                           facecolors=color if filled else "white", edgecolors=color, linewidths=1.5)
    ax.set_xlabel("bits per weight (bits)")
    ax.set_ylabel(f"{metric} ({ylab})")
    ax.set_title(f"{family} · {benchmark} · {metric}{note}")
    handles, labels = ax.get_legend_handles_labels()
    extra = _status_legend(ax, statuses)
    ax.legend(handles + extra, labels + [h.get_label() for h in extra], loc="best")
    return F.svg(fig, f"{family} {benchmark} {metric} against bits per weight")


def overview_figure(F: Figures, rows: pd.DataFrame, card: str, benchmark: str, metric: str, where: str | None) -> str:
    """One metric against bits per weight for every family on the card: one line per (family, KV type)."""
    import matplotlib

    rows = rows[rows["bits_per_weight"].notna()]
    if rows.empty:
        return f'<p class="note">{esc(benchmark)} {esc(metric)}: no point has its bits per weight recorded.</p>'
    unit = rows["unit"].dropna().iloc[0] if rows["unit"].notna().any() else None
    ylab, div = unit_axis(unit, list(rows["value"]))
    fams = sorted(rows["family"].unique())
    kvs = sorted(rows["kv"].unique())
    colors = matplotlib.colormaps["tab10"].colors
    styles = ["-", "--", ":", "-."]
    fig, ax = F.new()
    statuses = set()
    for (fam, kv), g in rows.groupby(["family", "kv"], sort=True):
        g = g.sort_values("bits_per_weight")
        color = colors[fams.index(fam) % len(colors)]
        err = g["stderr"].to_numpy(float) / div
        ax.errorbar(g["bits_per_weight"].to_numpy(float), g["value"].to_numpy(float) / div,
                    yerr=None if all(math.isnan(e) for e in err) else [0 if math.isnan(e) else e for e in err],
                    color=color, linestyle=styles[kvs.index(kv) % len(styles)], capsize=3, linewidth=1.4,
                    label=f"{fam} · KV {kv}")
        for st, sg in g.groupby("status"):
            statuses.add(st)
            m, filled = STATUS_MARK.get(st, ("o", True))
            ax.scatter(sg["bits_per_weight"], sg["value"] / div, marker=m, s=90 if m == "x" else 30, zorder=3,
                       color=color, facecolors=(color if filled else "white") if m != "x" else None,
                       linewidths=2.2 if m == "x" else 1.5)
    ax.set_xlabel("bits per weight (bits)")
    ax.set_ylabel(f"{metric} ({ylab})" + (f" at {where}" if where else ""))
    ax.set_title(f"{card}: {benchmark} · {metric}")
    handles, labels = ax.get_legend_handles_labels()
    extra = _status_legend(ax, statuses)
    ax.legend(handles + extra, labels + [h.get_label() for h in extra], loc="best")
    svg = F.svg(fig, f"{benchmark} {metric} against bits per weight, every family")
    return (f'<figure class="plot" data-kind="overview" data-benchmark="{esc(benchmark)}" data-metric="{esc(metric)}">'
            f"{svg}</figure>")


def plotted_metrics(df: pd.DataFrame, benchmark: str) -> list[str]:
    """The figures of a benchmark worth a plot against bits per weight: its headlines (the registry's
    ``headline_for``) and, for a cost, its Pareto axes; every other figure is in the tables."""
    have = set(dv.figures(df[df["benchmark"] == benchmark])["metric"])
    names = qmetrics.headlines(benchmark) + qmetrics.pareto_costs(benchmark)
    return [m for m in dict.fromkeys(names) if m in have and m not in dv.NOT_CURVES]


def overview_section(F: Figures, df: pd.DataFrame, card: str) -> str:
    """The headline figures of each benchmark, and the cost axes, with every family on one plot; a
    figure that does not vary along any family's ladder is one line instead."""
    figs, lines = [], []
    for b in dv.task_benchmarks(df) + [c for c in dv.COST_BENCHMARKS if (df["benchmark"] == c).any()]:
        for m in plotted_metrics(df, b):
            vals, _, where = _point_values(df, b, m)
            if vals.empty:
                continue
            rows = vals.merge(dv.point_table(df)[dv.POINT + ["bits_per_weight"]], on=dv.POINT)
            if not any(varies(g.assign(subset=None)) for _, g in rows.groupby("family")):
                lines.append(constant_line(rows.assign(subset=None), f"{b} {m}"))
                continue
            figs.append(overview_figure(F, rows, card, b, m, where))
    out = ('<div class="grid">' + "".join(figs) + "</div>") if figs else '<p class="note">No figures to plot.</p>'
    if lines:
        out += '<ul class="constants">' + "".join(lines) + "</ul>"
    return out


def _point_values(df: pd.DataFrame, benchmark: str, metrics: tuple[str, ...] | str) -> tuple[pd.DataFrame, str | None, str | None]:
    """Per point: value, stderr, status of the first metric present (largest n_ctx, whole benchmark)."""
    metrics = (metrics,) if isinstance(metrics, str) else metrics
    for m in metrics:
        rows = dv.whole(dv.figures(df[(df["benchmark"] == benchmark) & (df["metric"] == m)]))
        if rows.empty:
            continue
        picked = [dv.pick_ctx(g, None) for _, g in rows.groupby(dv.POINT, dropna=False)]
        out = pd.DataFrame(picked)[dv.POINT + ["value", "stderr", "status", "unit", "n_ctx"]]
        nctx = out["n_ctx"].dropna().unique()
        subsets = pd.DataFrame(picked)["subset"].dropna().unique()
        if benchmark == "speed" and len(subsets) == 1:  # llama-bench's test name (tg128) says it best
            where = str(subsets[0])
        else:
            where = f"n_ctx {int(nctx[0])}" if len(nctx) == 1 else ("largest n_ctx measured" if len(nctx) else None)
        return out, m, where
    return pd.DataFrame(), None, None


def pareto_front(points: list[tuple[float, float]], cost_lower: bool, quality_higher: bool) -> list[int]:
    """Indices of the non-dominated points (better cost and better quality), in cost order."""
    order = sorted(range(len(points)), key=lambda i: ((points[i][0] if cost_lower else -points[i][0]),
                                                     -(points[i][1] if quality_higher else -points[i][1])))
    front, best = [], -math.inf
    for i in order:
        q = points[i][1] if quality_higher else -points[i][1]
        if q > best:
            front.append(i)
            best = q
    return front


def pareto_section(F: Figures, df: pd.DataFrame, card: str) -> str:
    out = []
    qualities = []
    for b in dv.task_benchmarks(df):
        for m in dv.headline_metrics(df, b):
            if qmetrics.get(m).paired:  # the quality figures with a paired verdict; the rest are in the tables
                qualities.append((b, m))
    missing_costs = []
    for ckey, ctitle, lower in COST_AXES:
        cmetrics = tuple(qmetrics.pareto_costs(ckey))
        cost, cmetric, cwhere = _point_values(df, ckey, cmetrics)
        if cmetric is None:
            missing_costs.append(f"{ctitle} ({', '.join(cmetrics)} rows of benchmark {ckey})")
            continue
        figs = []
        for b, m in qualities:
            q, _, qwhere = _point_values(df, b, m)
            if q.empty:
                continue
            j = q.merge(cost, on=dv.POINT, suffixes=("_q", "_c"))
            if j.empty:
                continue
            qrows = df[(df["benchmark"] == b) & (df["metric"] == m)]
            hib = bool((qrows["higher_is_better"] == True).any())  # noqa: E712
            figs.append(_pareto_figure(F, j, card, b, m, qwhere, ckey, ctitle, cmetric, cwhere, lower, hib))
        if figs:
            out.append(f'<h3>Quality against {esc(ctitle)} <small>({esc(cmetric)})</small></h3><div class="grid">'
                       + "".join(figs) + "</div>")
    if missing_costs:
        out.append('<p class="note">No Pareto front against ' + esc("; ".join(missing_costs))
                   + ": the dataset has no such rows.</p>")
    if not qualities:
        out.append('<p class="note">No quality figures in the dataset.</p>')
    return "".join(out)


def _pareto_figure(F, j, card, bench, metric, qwhere, ckey, ctitle, cmetric, cwhere, lower, hib) -> str:
    import matplotlib

    cunit = j["unit_c"].dropna().iloc[0]
    qunit = j["unit_q"].dropna().iloc[0]
    xlab, xdiv = unit_axis(cunit, list(j["value_c"]))
    ylab, ydiv = unit_axis(qunit, list(j["value_q"]))
    pts = list(zip(j["value_c"].astype(float), j["value_q"].astype(float)))
    front = pareto_front(pts, lower, hib)
    fams = sorted(j["family"].unique())
    kvs = sorted(j["kv"].unique())
    colors = matplotlib.colormaps["tab10"].colors
    fig, ax = F.new()
    from matplotlib.lines import Line2D

    statuses = set()
    for _, r in j.iterrows():
        color = colors[fams.index(r["family"]) % len(colors)]
        st = r["status_q"] if r["status_q"] != "ok" else r["status_c"]
        statuses.add(st)
        _, filled = STATUS_MARK.get(st, ("o", True))
        marker = "x" if st == "incomplete" else KV_MARKERS[kvs.index(r["kv"]) % len(KV_MARKERS)]
        ax.errorbar([r["value_c"] / xdiv], [r["value_q"] / ydiv],
                    xerr=None if _isnan(r["stderr_c"]) else [r["stderr_c"] / xdiv],
                    yerr=None if _isnan(r["stderr_q"]) else [r["stderr_q"] / ydiv],
                    fmt=marker, color=color, markerfacecolor=color if filled else "white", capsize=2,
                    markersize=10 if marker == "x" else 6, markeredgewidth=2.2 if marker == "x" else 1)
    fx = [pts[i][0] / xdiv for i in front]
    fy = [pts[i][1] / ydiv for i in front]
    ax.step(fx, fy, where="post", color="black", linestyle=":", linewidth=1.2)
    for i in front:
        r = j.iloc[i]
        ax.annotate(f"{r['rung']}" + (f"/{r['kv']}" if len(kvs) > 1 else ""), (pts[i][0] / xdiv, pts[i][1] / ydiv), textcoords="offset points",
                    xytext=(4, 4), fontsize=7)
    handles = [Line2D([], [], color=colors[k % len(colors)], marker="o", linestyle="none", label=f)
               for k, f in enumerate(fams)]
    handles += [Line2D([], [], color="0.3", marker=KV_MARKERS[k % len(KV_MARKERS)], linestyle="none", label=f"KV {kv}")
                for k, kv in enumerate(kvs)]
    handles += [Line2D([], [], color="black", linestyle=":", label="Pareto front")]
    handles += _status_legend(ax, statuses)
    ax.legend(handles=handles, loc="best")
    ax.set_xlabel(f"{cmetric} ({xlab})" + (f" at {cwhere}" if cwhere else ""))
    ax.set_ylabel(f"{metric} ({ylab})" + (f" at {qwhere}" if qwhere else ""))
    ax.set_title(f"{card}: {bench} {metric} vs {ctitle}")
    svg = F.svg(fig, f"Pareto front of {bench} {metric} against {cmetric}")
    rows = []
    for i in front:
        r = j.iloc[i]
        rows.append([esc(r["family"]), esc(r["rung"]), esc(r["kv"]), vcell(r["value_q"], r["stderr_q"], qunit),
                     vcell(r["value_c"], r["stderr_c"], cunit), badge(r["status_q"])])
    tid = f"pareto-{bench}-{metric}-{ckey}"
    tbl = table(["family", "rung", "KV", f"{esc(metric)}", f"{esc(cmetric)}", "status"], rows, tid)
    return (f'<figure class="plot" data-kind="pareto" data-benchmark="{esc(bench)}" data-metric="{esc(metric)}" '
            f'data-cost="{esc(cmetric)}">{svg}<figcaption>Front (no point is both cheaper and better): '
            f"</figcaption>{tbl}</figure>")


# ------------------------------------------------------------------ sections

def status_section(df: pd.DataFrame) -> str:
    """Anchor status per benchmark: how many points ran ok, unanchored, blocked, ... and why."""
    rows, classes = [], []
    for b, g in df.groupby("benchmark"):
        per_point = g.groupby(dv.POINT, dropna=False)["status"].agg(lambda s: _worst(s))
        counts = per_point.value_counts()
        reasons = sorted({r for r in g["status_reason"].dropna().unique() if r})
        worst = _worst(per_point)
        cells = [esc(b), badge(worst)] + [str(int(counts.get(s, 0))) for s in dv.STATUSES_ORDER]
        cells.append("<br>".join(esc(r) for r in reasons) or "—")
        rows.append(cells)
        classes.append(f"st-row-{worst}")
    headers = ["benchmark", "anchor status"] + [f"points {s}" for s in dv.STATUSES_ORDER] + ["reason"]
    return table(headers, rows, "table-anchors", classes)


def _worst(statuses) -> str:
    return qstatus.worst(statuses)


def points_table(df: pd.DataFrame, family: str) -> str:
    """Per point: rung facts, then each benchmark's status and headline figure(s) with ±."""
    fam = df[df["family"] == family]
    pts = dv.point_table(fam)
    benches = [b for b in sorted(fam["benchmark"].unique())]
    heads = {b: (dv.headline_metrics(fam, b) if b not in dv.COST_BENCHMARKS else
                 [m for m in dict.fromkeys(dv.whole(dv.figures(fam[fam["benchmark"] == b]))["metric"])
                  if m not in dv.NOT_CURVES][:3])
             for b in benches}
    headers = ["rung", "KV", "bits per weight (bits)", "file size", "parameters"]
    for b in benches:
        headers.append(f"{esc(b)} status")
        headers += [f"{esc(b)} {esc(m)}" for m in heads[b]]
    rows, classes = [], []
    for _, p in pts.iterrows():
        g = fam[(fam["rung"] == p["rung"]) & (fam["kv"] == p["kv"])]
        cells = [esc(p["rung"]) + (" <small>(reference)</small>" if p["is_reference"] else ""), esc(p["kv"]),
                 "—" if _isnan(p["bits_per_weight"]) else f"{p['bits_per_weight']:.2f}",
                 esc(dv.fmt_bytes(p["file_bytes"])),
                 "—" if _isnan(p["n_params"]) else f"{int(p['n_params']):,}"]
        for b in benches:
            bg = g[g["benchmark"] == b]
            st = _worst(bg["status"]) if not bg.empty else None
            cells.append(badge(st) if st else "—")
            for m in heads[b]:
                r = dv.pick_ctx(dv.whole(dv.figures(bg[bg["metric"] == m])), None)
                cells.append("—" if r is None else vcell(r["value"], r["stderr"], r["unit"])
                             + ("" if _isnan(r["n_ctx"]) else f" <small>@{int(r['n_ctx'])}</small>"))
        rows.append(cells)
    return table(headers, rows, f"table-points-{family}")


def values_table(df: pd.DataFrame, family: str, benchmark: str) -> str:
    """Every figure of one benchmark for one family: long form, value ± stderr with its unit."""
    g = dv.figures(df[(df["family"] == family) & (df["benchmark"] == benchmark)])
    g = g.sort_values(["metric", "subset", "n_ctx", "bits_per_weight", "kv"], ascending=[True, True, True, False, True],
                      na_position="first")
    rows = [[esc(r["rung"]), esc(r["kv"]), esc(r["metric"]), esc(r["subset"] or "—"),
             "—" if _isnan(r["n_ctx"]) else str(int(r["n_ctx"])), vcell(r["value"], r["stderr"], r["unit"]),
             "—" if _isnan(r["n"]) else str(int(r["n"])),
             ("—" if _isnan(r["delta"]) else esc(fmt_delta(r["delta"], r["delta_ci_low"], r["delta_ci_high"], r["unit"]))
              + " " + verdict_badge(r["verdict"], r["verdict_text"])),
             badge(r["status"])] for _, r in g.iterrows()]
    classes = [f"st-row-{r['status']}" for _, r in g.iterrows()]
    return table(["rung", "KV", "metric", "subset", "n_ctx (tokens)", "value ± stderr", "n",
                  "paired Δ vs the reference · verdict", "status"], rows, f"table-values-{family}-{benchmark}", classes)


def rungs_table(df: pd.DataFrame, family: str) -> str:
    """Per rung: what the file is — its own file type, bits per weight, size, the importance matrix and
    the recipe it was made with, and the share of its parameters per tensor type (the dataset's rung
    identity columns)."""
    fam = df[df["family"] == family]
    pts = dv.point_table(fam).drop_duplicates("rung")
    ident = fam.groupby("rung", dropna=False)[["file_type", "tensor_mix", "imatrix", "recipe"]].first()
    rows = []
    for _, p in pts.iterrows():
        i = ident.loc[p["rung"]] if p["rung"] in ident.index else pd.Series(dtype=object)

        def val(c, none):
            v = i.get(c)
            return none if _isnan(v) or v == "" else esc(v)

        rows.append([esc(p["rung"]) + (" <small>(reference)</small>" if p["is_reference"] else ""),
                     val("file_type", "not recorded"),
                     "—" if _isnan(p["bits_per_weight"]) else f"{p['bits_per_weight']:.2f} bits",
                     esc(dv.fmt_bytes(p["file_bytes"])), val("imatrix", "none"), val("recipe", "none"),
                     val("tensor_mix", "not recorded")])
    return table(["rung", "file type", "bits per weight (bits)", "size", "importance matrix", "recipe",
                  "tensor mix <small>(share of the parameters per tensor type)</small>"], rows,
                 f"table-rungs-{family}",
                 caption="What each rung's file holds (its manifest): a K or IQ type cannot hold a row whose width "
                         "is not a multiple of its 256-weight block, and llama.cpp puts such tensors in another "
                         "type, so the tensor mix, not the rung's name, says what was measured (docs/ladder.md).")


def chat_benchmarks_missing(df: pd.DataFrame, family: str) -> list[str]:
    """The chat benchmarks (those that need a chat template) other families of the card ran and this
    family has no row of, when it has perplexity rows: a base model (``chat: false``), which the
    pipeline does not give a chat benchmark (quantladder.config.task_runs_for). Empty otherwise."""
    from . import benchmarks as qbench
    from .errors import ConfigError

    def needs_chat(b: str) -> bool:
        try:
            return bool(qbench.get(b).needs_chat)
        except ConfigError:  # a measure, or a benchmark this build does not know
            return False

    have = set(df[df["family"] == family]["benchmark"])
    chat = [b for b in dv.task_benchmarks(df) if needs_chat(b)]
    if "perplexity" not in have or not chat or have & set(chat):
        return []
    return chat


def base_model_note(df: pd.DataFrame, family: str) -> str:
    missing = chat_benchmarks_missing(df, family)
    if not missing:
        return ""
    return (f'<p class="note base-model" data-family="{esc(family)}">No chat benchmarks for {esc(family)}: a base '
            f"model (<code>families.{esc(family)}.chat: false</code>) takes no chat template, so the other "
            f"families' chat benchmarks ({esc(', '.join(missing))}) do not apply; its quality here is its perplexity "
            "and its KLD against its reference.</p>")


def family_section(F: Figures, df: pd.DataFrame, family: str) -> str:
    fam = df[df["family"] == family]
    out = [f'<section class="family" id="family-{esc(family)}"><h3>{esc(family)}</h3>']
    out.append(base_model_note(df, family))
    out.append(f'<h4 id="{esc(family)}-rungs">Rungs</h4>' + rungs_table(df, family))
    out.append("<h4>Points</h4>" + points_table(df, family))
    figs = dv.figures(fam)
    benches = [b for b in dv.task_benchmarks(fam)] + [b for b in dv.COST_BENCHMARKS if (fam["benchmark"] == b).any()]
    for b in benches:
        brows = figs[figs["benchmark"] == b]
        st = _worst(fam[fam["benchmark"] == b]["status"])
        out.append(f'<h4 id="{esc(family)}-{esc(b)}">{esc(b)} {badge(st)}</h4>')
        if brows.empty:
            reasons = "; ".join(sorted(set(fam[fam["benchmark"] == b]["status_reason"].dropna()))) or "no figures"
            out.append(f'<p class="note">No figures: {esc(reasons)}</p>')
            continue
        metrics = [m for m in dict.fromkeys(brows["metric"]) if m not in dv.NOT_CURVES]
        plotted = plotted_metrics(fam, b)
        log.info("report: %s / %s: %d figures, %d plotted at most", family, b, len(metrics), len(plotted))
        figs_html, lines = [], []
        for m in plotted:
            mrows = brows[brows["metric"] == m]
            if not varies(mrows):
                lines.append(constant_line(mrows, m))
                continue
            svg = curve_figure(F, mrows, family, b, m)
            figs_html.append(f'<figure class="plot" data-kind="curve" data-family="{esc(family)}" '
                             f'data-benchmark="{esc(b)}" data-metric="{esc(m)}">{svg}</figure>')
        if figs_html:
            out.append('<div class="grid">' + "".join(figs_html) + "</div>")
        by_metric = {m: g for m, g in brows.groupby("metric", sort=False)}
        lines += [constant_line(by_metric[m], m) for m in metrics if m not in plotted and not varies(by_metric[m])]
        if lines:
            out.append('<ul class="constants">' + "".join(lines) + "</ul>")
        out.append(f"<details><summary>all {len(metrics)} {esc(b)} figures (table)</summary>"
                   f"{values_table(df, family, b)}</details>")
    out.append("</section>")
    return "".join(out)


def degenerate_section(df: pd.DataFrame, card: str) -> str:
    g = dv.figures(df[df["metric"].isin([m for m in qmetrics.in_group("loops") if m.startswith("degenerate")])])
    if g.empty:
        return ('<p class="note" id="degenerate-none">No degenerate-loop rows in the dataset for this card '
                "(every task benchmark's score stage writes <code>degenerate_items</code>).</p>")
    g = g.sort_values(["family", "benchmark", "bits_per_weight", "kv"], ascending=[True, True, False, True])
    rows, classes = [], []
    for _, r in g.iterrows():
        of = "" if _isnan(r["n"]) else f" of {int(r['n'])}"
        rows.append([esc(r["family"]), esc(r["rung"]), esc(r["kv"]), esc(r["benchmark"]), esc(r["metric"]),
                     esc(r["subset"] or "—"), vcell(r["value"], r["stderr"], r["unit"]) + esc(of), badge(r["status"])])
        classes.append(("loops " if r["value"] > 0 else "") + f"st-row-{r['status']}")
    return table(["family", "rung", "KV", "benchmark", "metric", "subset", "loops", "status"], rows,
                 f"table-degenerate-{card}", classes)


def flips_section(df: pd.DataFrame, card: str) -> str:
    """Per point and benchmark: its flips against the reference, beside the noise floor of its family's
    reference (the same rung generated again at another batch setting), and which of the two is larger."""
    flip_names = dv.flip_metrics()
    g = dv.whole(dv.figures(df[df["metric"].isin(flip_names)]))
    if g.empty:
        return '<p class="note">No flip rows in the dataset for this card (flips need per-item verdicts).</p>'
    noise = dv.whole(dv.figures(df[df["metric"].isin(qmetrics.in_group("noise"))]))
    first, rest = [m for m in flip_names if m == "flip_rate"], [m for m in flip_names if m != "flip_rate"]

    def cell(rows, m):
        r = rows[rows["metric"] == m]
        return "—" if r.empty else vcell(r["value"].iloc[0], r["stderr"].iloc[0], r["unit"].iloc[0])

    rows, classes = [], []
    g = g.sort_values(["family", "benchmark", "bits_per_weight", "kv"], ascending=[True, True, False, True])
    for key, p in g.groupby(dv.POINT + ["benchmark"], dropna=False, sort=False):
        _, family, rung, kv, bench = key
        nz = noise[(noise["family"] == family) & (noise["benchmark"] == bench)]
        cells = [esc(family), esc(rung), esc(kv), esc(bench)] + [cell(p, m) for m in first]
        cells.append(cell(nz, "noise_flip_rate"))
        fr, nf = p[p["metric"] == "flip_rate"], nz[nz["metric"] == "noise_flip_rate"]
        if fr.empty or nf.empty:
            cells.append("— (no noise floor)")
        elif float(fr["value"].iloc[0]) <= float(nf["value"].iloc[0]):
            cells.append('<span class="verdict v-noise">within noise</span>')
        else:
            cells.append("above the noise floor")
        cells += [cell(p, m) for m in rest] + [cell(nz, "noise_identical_share")]
        n = p["n"].dropna()
        cells.append("—" if n.empty else str(int(n.iloc[0])))
        st = _worst(p["status"])
        cells.append(badge(st))
        rows.append(cells)
        classes.append(f"st-row-{st}")
    heads = (["family", "rung", "KV", "benchmark"] + [esc(m) for m in first]
             + ["noise floor: flip rate", "flip rate against the noise floor"] + [esc(m) for m in rest]
             + ["noise floor: identical replies", "items", "status"])
    return ('<p class="how">Flips against the reference rung (same card, KV type and settings), beside the noise '
            "floor: the reference rung generated again at another batch setting. A flip rate not above the noise "
            "floor is no loss the harness can attribute to quantization; whether a loss is significant is the "
            "paired verdict's (the answer above).</p>" + table(heads, rows, f"table-flips-{card}", classes))


def manifest_section(df: pd.DataFrame, card: str) -> str:
    cols = ["manifest_hash", "gguf_sha256", "data_hash", "harness_version", "llama_cpp_python", "libllama_sha256",
            "card_name", "measured_at"]
    g = df.groupby(dv.POINT + ["benchmark"], dropna=False).agg(
        {**{c: "first" for c in cols}, "status": lambda s: _worst(s),
         "status_reason": lambda s: "; ".join(sorted(set(x for x in s if x))),
         "bits_per_weight": "max"}).reset_index()
    g = g.sort_values(["family", "bits_per_weight", "kv", "benchmark"], ascending=[True, False, True, True])
    rows, classes = [], []
    for _, r in g.iterrows():
        rows.append([esc(r["family"]), esc(r["rung"]), esc(r["kv"]), esc(r["benchmark"]), badge(r["status"]),
                     esc(r["status_reason"] or "—"), short(r["manifest_hash"]), short(r["gguf_sha256"]),
                     short(r["data_hash"]), esc(r["harness_version"]), esc(r["llama_cpp_python"]),
                     short(r["libllama_sha256"]), esc(r["card_name"]), esc(r["measured_at"])])
        classes.append(f"st-row-{r['status']}")
    return table(["family", "rung", "KV", "benchmark", "status", "reason", "manifest hash", "GGUF sha256",
                  "data hash", "harness", "llama-cpp-python", "libllama sha256", "card", "measured at (UTC)"],
                 rows, f"table-manifest-{card}", classes)


def identical_generations(df: pd.DataFrame, card_a: str, card_b: str) -> pd.DataFrame:
    """Per (point, benchmark): items compared and items with the same generation on both cards."""
    h = df[df["metric"] == "generation_hash"]
    a = h[h["card"] == card_a]
    b = h[h["card"] == card_b]
    keys = ["family", "rung", "kv", "benchmark", "subset"]
    j = a.merge(b, on=keys, suffixes=("_a", "_b"))
    if j.empty:
        return pd.DataFrame(columns=["family", "rung", "kv", "benchmark", "n_items", "n_identical"])
    j["same"] = j["value_a"] == j["value_b"]
    return (j.groupby(["family", "rung", "kv", "benchmark"]).agg(n_items=("same", "size"), n_identical=("same", "sum"))
             .reset_index())


def _share(k: int, n: int) -> str:
    if n == 0:
        return "—"
    p = k / n
    return f"{k}/{n} ({100 * p:.1f} ± {100 * math.sqrt(p * (1 - p) / n):.1f} %)"


def crosscard_section(df: pd.DataFrame, card: str, others: list[str]) -> str:
    out = ['<p>Each card\'s curves above use that card\'s figures only: the same configuration gives different '
           "outputs on different cards. This view is shown because the dataset holds several cards. "
           "Shares carry a binomial standard error; deltas carry the two ± combined, and the normal 95 % interval of "
           "the difference (two cards' runs are independent, not paired; an sd over repetitions counts as sd/√n).</p>"]
    for other in others:
        out.append(f"<h3>{esc(card)} vs {esc(other)}</h3>")
        ident = identical_generations(df, card, other)
        if ident.empty:
            out.append('<p class="note">No per-item generation hashes (<code>generation_hash</code> rows) for points '
                       "present on both cards: the identical-generation share cannot be computed.</p>")
        else:
            rows = []
            for b, g in ident.groupby("benchmark"):
                rows.append([esc(b), str(len(g)), _share(int(g["n_identical"].sum()), int(g["n_items"].sum()))])
            out.append(table(["benchmark", "points on both cards", "identical generations"], rows,
                             f"table-identical-{card}-{other}"))
            rows = [[esc(r["family"]), esc(r["rung"]), esc(r["kv"]), esc(r["benchmark"]),
                     _share(int(r["n_identical"]), int(r["n_items"]))] for _, r in ident.iterrows()]
            out.append("<details><summary>per point</summary>" + table(
                ["family", "rung", "KV", "benchmark", "identical generations"], rows,
                f"table-identical-points-{card}-{other}") + "</details>")
        figs = dv.whole(dv.figures(df))
        a = figs[figs["card"] == card]
        b = figs[figs["card"] == other]
        keys = ["family", "rung", "kv", "benchmark", "metric", "n_ctx"]
        j = a.merge(b, on=keys, suffixes=("_a", "_b"))
        if j.empty:
            out.append('<p class="note">No figures measured on both cards.</p>')
            continue
        rows = []
        for _, r in j.sort_values(keys).iterrows():
            d = r["value_b"] - r["value_a"]
            se = (math.sqrt(r["stderr_a"] ** 2 + r["stderr_b"] ** 2)
                  if not (_isnan(r["stderr_a"]) or _isnan(r["stderr_b"])) else None)
            se_mean = se
            m = qmetrics.registry().get(r["metric"])
            if se is not None and m is not None and m.stderr == "sd":
                # an sd over repetitions: the interval of the difference of the means uses sd/√n per card
                na, nb = r["n_a"], r["n_b"]
                se_mean = (math.sqrt(r["stderr_a"] ** 2 / na + r["stderr_b"] ** 2 / nb)
                           if not (_isnan(na) or _isnan(nb)) and na > 0 and nb > 0 else None)
            rows.append([esc(r["family"]), esc(r["rung"]), esc(r["kv"]), esc(r["benchmark"]), esc(r["metric"]),
                         "—" if _isnan(r["n_ctx"]) else str(int(r["n_ctx"])),
                         vcell(r["value_a"], r["stderr_a"], r["unit_a"]), vcell(r["value_b"], r["stderr_b"], r["unit_b"]),
                         vcell(d, se, r["unit_a"]) + (
                             " <small>(no interval: no standard error)</small>" if se_mean is None else
                             f" <small>(95 % CI {esc(dv.fmt_value(d - 1.959964 * se_mean, None, None))}"
                             f"…{esc(dv.fmt_value(d + 1.959964 * se_mean, None, None))})</small>")])
        out.append(f"<details><summary>{len(rows)} figures measured on both cards (deltas)</summary>" + table(
            ["family", "rung", "KV", "benchmark", "metric", "n_ctx", esc(card), esc(other), f"Δ ({esc(other)} − {esc(card)})"],
            rows, f"table-deltas-{card}-{other}") + "</details>")
    return "".join(out)


# ------------------------------------------------------------------ the answer (the report's first screen)

DETECT_POINTS = 2.0  # the loss the report's sample-size answer is for (quantladder plan --detect 2)
BUDGETS_GIB = (0.5, 1, 2, 4, 8, 12, 16, 24, 48, 80, 141)  # common memory budgets the recommendation is shown for
ANSWER_CTX = 4096  # the context the budgets' recommendations are computed at
VERDICT_CLASS = {"loss": "v-loss", "gain": "v-gain", "no loss detectable": "v-none", "loss within noise": "v-noise",
                 "gain within noise": "v-noise"}


def _tol(values) -> float:
    vmax = max((abs(float(v)) for v in values), default=0.0)
    return 1e-9 * max(1.0, vmax)


def varies(rows: pd.DataFrame) -> bool:
    """Whether a figure changes along the ladder: within one KV type, subset and context, two points differ."""
    for _, g in rows.groupby(["kv", "subset", "n_ctx"], dropna=False):
        v = g["value"].astype(float)
        if len(v) > 1 and float(v.max() - v.min()) > _tol(v):
            return True
    return False


def constant_line(rows: pd.DataFrame, label: str, tail: str = "") -> str:
    """One line for a figure that does not vary along the ladder: its value per (KV, subset, n_ctx)."""
    by_value: dict[str, list[str]] = {}
    for (kv, subset, nctx), g in rows.groupby(["kv", "subset", "n_ctx"], dropna=False, sort=True):
        r = g.iloc[0]
        where = [f"KV {kv}"] + ([str(subset)] if not _isnan(subset) else []) + (
            [f"n_ctx {int(nctx)}"] if not _isnan(nctx) else [])
        by_value.setdefault(dv.fmt_value(r["value"], None if _isnan(r["stderr"]) else r["stderr"], r["unit"]),
                            []).append(" · ".join(where))
    longest = max(len(g) for _, g in rows.groupby(["kv", "subset", "n_ctx"], dropna=False))
    parts = [f"{esc(v)} <small>({esc(', '.join(w))})</small>" for v, w in by_value.items()]
    what = ("is the same at every rung" if longest > 1 else
            "is measured at one rung per KV type and context only (no curve to draw)")
    return (f'<li class="constant" data-metric="{esc(label)}"><b>{esc(label)}</b> {what}: '
            + "; ".join(parts) + (f" — {tail}" if tail else "") + "</li>")


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


def fmt_delta(delta, lo, hi, unit, compact: bool = False) -> str:
    """'Δ −5.0 points (95 % CI −6.5…−3.5)': a paired difference always with its interval (compact:
    'Δ −5.0 (−6.5…−3.5)', where a column header says the unit and the level)."""
    if _isnan(delta):
        return ""
    if unit == "%":
        width = abs(hi - lo) if not (_isnan(lo) or _isnan(hi)) else abs(delta)
        d = 1 if width >= 1 or width == 0 else min(3, 1 - math.floor(math.log10(width)))
        f = lambda x: f"{x:+.{d}f}".replace("+0." + "0" * d, "0." + "0" * d)  # noqa: E731
        u = " points"
    else:
        f = lambda x: "0" if x == 0 else f"{x:+.3g}"  # noqa: E731
        u = "" if unit in (None, "", "1") else f" {unit}"
    if compact:
        return f"Δ {f(delta)} ({'no interval' if _isnan(lo) or _isnan(hi) else f'{f(lo)}…{f(hi)}'})"
    ci = "no interval" if _isnan(lo) or _isnan(hi) else f"95 % CI {f(lo)}…{f(hi)}"
    return f"Δ {f(delta)}{u} ({ci})"


def verdict_badge(verdict, text) -> str:
    if _isnan(verdict) or not verdict:
        return ""
    return (f'<span class="verdict {VERDICT_CLASS.get(verdict, "v-none")}" title="{esc(text)}">{esc(verdict)}</span>')


def _answer_columns(fam: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
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
    if float(v.max() - v.min()) > _tol(v):
        return False
    verdicts = set(rows["verdict"].dropna())
    return verdicts <= {"no loss detectable"}


def _noise_line(fam: pd.DataFrame) -> str:
    """The family's noise floors in one line: per benchmark, the reference generated again at another
    batch setting against itself."""
    parts, rung = [], None
    noise = dv.whole(dv.figures(fam[fam["metric"].isin(qmetrics.in_group("noise"))]))
    for b, g in noise.groupby("benchmark", sort=True):
        rung = g["rung"].iloc[0]
        bits = []
        for m, what in (("noise_flip_rate", "verdicts flipped"), ("noise_identical_share", "replies identical")):
            r = g[g["metric"] == m]
            if not r.empty:
                r = r.iloc[0]
                bits.append(f"{esc(vcell(r['value'], r['stderr'], r['unit']))} {what}")
        n = g["n"].dropna()
        parts.append(f'<span data-benchmark="{esc(b)}"><b>{esc(b)}</b> {", ".join(bits)}'
                     + ("" if n.empty else f" (n = {int(n.max())})") + "</span>")
    if not parts:
        return ""
    return (f'<li class="noise">Noise floor (the reference {esc(rung)} generated again at another batch setting): '
            + "; ".join(parts) + ". A significant loss whose flip rate is not above it reads <i>loss within noise</i>.</li>")


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
        parts.append(f'<span data-benchmark="{esc(b["benchmark"])}"><b>{esc(b["benchmark"])}</b>{kv} '
                     f'<b>{b["items_needed"]:,} items</b> ({esc(b["items_needed_rung"])}; '
                     f'{b["items_needed_upper"]:,} at its flip rate\'s 95 % upper bound; {b["items_now"]:,} measured'
                     f"{cost})</span>")
    if not parts:
        return ""
    return (f'<li class="plan">Items to detect a {DETECT_POINTS:g}-point loss at {100 * res["power"]:g} % power '
            f"({head}): " + "; ".join(parts) + ".</li>")


def answer_family(fam: pd.DataFrame, family: str, plan_res: dict | None, d_card: pd.DataFrame | None = None) -> str:
    pts = dv.point_table(fam)
    ref = pts[pts["is_reference"].astype(bool)]
    ref_rung = ref["rung"].iloc[0] if not ref.empty else None
    cols = _answer_columns(fam)
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
                 + ("" if _isnan(p["bits_per_weight"]) else f" <small>({p['bits_per_weight']:.2f})</small>")]
        worst = "ok"
        for _, label, rows in shown:
            r = rows[(rows["rung"] == p["rung"]) & (rows["kv"] == p["kv"])]
            if r.empty:
                cells.append("—")
                continue
            r = r.iloc[0]
            worst = qstatus.worst([worst, r["status"]])
            # the unit is in the column's header (bytes keep theirs: KiB/MiB/GiB)
            cell = f'<span class="v">{vcell(r["value"], r["stderr"], r["unit"] if r["unit"] == "bytes" else None)}</span>'
            if r["status"] != "ok" and same_status.get(label) != r["status"]:
                cell += " " + badge(r["status"])
            if not _isnan(r["delta"]):
                cell += (f'<br><span class="d" title="{esc(fmt_delta(r["delta"], r["delta_ci_low"], r["delta_ci_high"], r["unit"]))}">'
                         f'{esc(fmt_delta(r["delta"], r["delta_ci_low"], r["delta_ci_high"], r["unit"], compact=True))}'
                         f"</span> {verdict_badge(r['verdict'], r['verdict_text'])}")
            elif not _isnan(r["verdict_text"]) and r["verdict_text"]:
                cell += f'<br><small class="note" title="{esc(r["verdict_text"])}">not compared</small>'
            cells.append(cell)
        body.append(cells)
        classes.append(f"st-row-{worst}")
    m = deltas.headline_comparisons(fam).get((fam["card"].iloc[0], family))
    out = [f'<div class="answer-family" id="answer-{esc(fam["card"].iloc[0])}-{esc(family)}">'
           f"<h3>{esc(family)}" + (f" <small>against its reference {esc(ref_rung)}"
                                   + (f"; Holm over its {m} headline comparisons" if m else "") + "</small>"
                                   if ref_rung else "") + "</h3>"]
    out.append(table(heads, body, f"table-answer-{family}", classes))
    out.append(base_model_note(d_card, family) if d_card is not None else "")
    lines = [constant_line(rows, f"{b} {label}", _verdict_summary(rows)) for b, label, rows in constant]
    lines += [x for x in (_noise_line(fam), _plan_line(plan_res, family)) if x]
    if lines:
        out.append('<ul class="constants">' + "".join(lines) + "</ul>")
    out.append("</div>")
    return "".join(out)


def _budget_label(gib: float) -> str:
    return f"{gib:g} GiB" if gib >= 1 else f"{int(gib * 1024)} MiB"


def answer_ctx(d: pd.DataFrame) -> int:
    """The context the budgets are answered at: ANSWER_CTX, or the longest a measured model was trained for."""
    trained = d[(d["metric"] == "n_ctx_train") & d["value"].notna()]["value"]
    return int(min(ANSWER_CTX, trained.max())) if not trained.empty else ANSWER_CTX


def recommendation_rows(d: pd.DataFrame, card: str) -> tuple[list[list[str]], list[str]]:
    """The recommendation at the common budgets (equal weights over the task benchmarks), budgets with
    the same answer merged into one range."""
    from . import recommend as rec

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
        why = ""
        if r.get("preferred_over"):
            why = esc(r["message"].split("; ", 1)[1])
        cites = "; ".join(f"{esc(k)}: {esc(fmt_delta(s['delta'], s['delta_ci_low'], s['delta_ci_high'], '%'))} "
                          f"{verdict_badge(s['verdict'], s['verdict_text'])}"
                          for k, s in b["scores"].items() if s.get("delta") is not None)
        rows.append([esc(span), f"<b>{esc(b['name'])}</b>", esc(dv.fmt_value(b["score"], b["score_stderr"], "%")),
                     esc(dv.fmt_bytes(b["memory_bytes"])), (cites + ("<br>" if cites and why else "") + why) or "—"])
    return rows, notes


def answer_section(d: pd.DataFrame, card: str) -> str:
    from . import plan as qplan

    try:
        plan_res = qplan.plan(d, detect=DETECT_POINTS, card=card)
    except qplan.PlanError:
        plan_res = None
    out = [f'<section class="answer" id="answer-{esc(card)}">',
           '<p class="how">Per family and rung: each headline figure ± its standard error; Δ, the rung minus the '
           "family's reference on the same items (or tokens), with its 95 % interval; the verdict of the exact paired "
           "test (McNemar / sign-flip) after Holm's correction over the family's headline comparisons on this card "
           "(α = 0.05; docs/statistics.md). Per-token figures (perplexity, KLD) use their per-token standard error. "
           "Hover a verdict for its words.</p>"]
    for fam in sorted(d["family"].dropna().unique()):
        out.append(answer_family(d[d["family"] == fam], fam, plan_res, d))
    rows, notes = recommendation_rows(d, card)
    out.append(f'<h3 id="recommend-{esc(card)}">Which point to run, at a few memory budgets '
               f"<small>(context {answer_ctx(d)} tokens; equal weights over the task benchmarks; "
               f"<code>quantladder recommend</code> for any other)</small></h3>")
    if rows:
        out.append(table(["memory budget", "run", "score", "predicted memory", "its paired deltas · why"], rows,
                         f"table-recommend-{card}"))
    out += [f'<p class="note">{esc(n)}</p>' for n in notes]
    out.append(findings_section(d, card))
    out.append("</section>")
    return "".join(out)


# The findings about importance matrices: (what is compared, (file type, made with a matrix) of the
# first rung, and of the rung it is compared with).
FINDINGS = (
    ("IQ2_XXS with a matrix vs Q2_K without", ("IQ2_XXS", True), ("Q2_K", False)),
    ("Q4_K_M with a matrix vs Q4_K_M without", ("Q4_K_M", True), ("Q4_K_M", False)),
)
Z95 = 1.959964


def findings(d: pd.DataFrame) -> pd.DataFrame:
    """The pairs of FINDINGS among the points of one card: per family, KV type, corpus and context,
    every rung of the first kind against every rung of the second, found from the rungs' ``file_type``
    and ``imatrix`` columns (rungs made here from plain file types only: a recipe changes more than the
    matrix, and a prebuilt file's matrix is unknown). The mean
    KLD against the reference (the whole-set row where there is one, else each corpus's row) of both,
    and their difference with the unpaired standard error √(se_a² + se_b²)."""
    k = dv.figures(d[(d["benchmark"] == "perplexity") & (d["metric"] == "kld_mean")])
    k = k[k["recipe"].isna() & k["file_type"].notna() & (k["imatrix"] != IMATRIX_UNKNOWN)]  # made here, plain
    per_family = []
    for _, g in k.groupby("family", sort=True):  # as the answer picks a family's KLD column(s)
        w = dv.whole(g)
        per_family.append(w if not w.empty else g)
    k = pd.concat(per_family) if per_family else k
    out = []
    for (fam, kv, subset, nctx), g in k.groupby(["family", "kv", "subset", "n_ctx"], dropna=False, sort=True):
        for what, (ta, ma), (tb, mb) in FINDINGS:
            a_rows = g[(g["file_type"] == ta) & (g["imatrix"].notna() == ma)]
            b_rows = g[(g["file_type"] == tb) & (g["imatrix"].notna() == mb)]
            for _, a in a_rows.iterrows():
                for _, b in b_rows.iterrows():
                    diff = float(a["value"]) - float(b["value"])
                    se = (math.sqrt(float(a["stderr"]) ** 2 + float(b["stderr"]) ** 2)
                          if not (_isnan(a["stderr"]) or _isnan(b["stderr"])) else None)
                    out.append({"family": fam, "kv": kv, "subset": None if _isnan(subset) else subset,
                                "n_ctx": None if _isnan(nctx) else int(nctx), "comparison": what, "unit": a["unit"],
                                "rung_a": a["rung"], "imatrix_a": a["imatrix"], "value_a": float(a["value"]),
                                "stderr_a": a["stderr"], "status_a": a["status"],
                                "rung_b": b["rung"], "imatrix_b": b["imatrix"], "value_b": float(b["value"]),
                                "stderr_b": b["stderr"], "status_b": b["status"], "diff": diff, "diff_stderr": se,
                                "ci_low": None if se is None else diff - Z95 * se,
                                "ci_high": None if se is None else diff + Z95 * se})
    return pd.DataFrame(out)


def findings_section(d: pd.DataFrame, card: str) -> str:
    head = (f'<h3 id="findings-{esc(card)}">Findings: importance matrices <small>(mean KLD against the reference '
            "on the same tokens; the difference's interval is unpaired)</small></h3>")
    f = findings(d)
    if f.empty:
        return head + ('<p class="note" id="findings-none">No such pair of rungs in this dataset: the ladder has '
                       "neither IQ2_XXS with a matrix beside Q2_K without one, nor Q4_K_M with and without a matrix "
                       "(on the same KV type, corpus and context).</p>")

    def rung(name, im, st):
        return (f"{esc(name)}<br><small>{esc(im) if not _isnan(im) else 'no matrix'}</small>"
                + ("" if st == "ok" else " " + badge(st)))

    rows = []
    for _, r in f.iterrows():
        where = ("whole set" if r["subset"] is None else esc(r["subset"])) + (
            "" if r["n_ctx"] is None else f" · n_ctx {int(r['n_ctx'])}")
        ci = ("<small>(no interval: no standard error)</small>" if r["diff_stderr"] is None else
              f"<small>(95 % CI {esc(dv.fmt_value(r['ci_low'], None, None))}…"
              f"{esc(dv.fmt_value(r['ci_high'], None, None))} {esc(r['unit'])})</small>")
        rows.append([esc(r["family"]), esc(r["kv"]), where, esc(r["comparison"]),
                     rung(r["rung_a"], r["imatrix_a"], r["status_a"]), vcell(r["value_a"], r["stderr_a"], r["unit"]),
                     rung(r["rung_b"], r["imatrix_b"], r["status_b"]), vcell(r["value_b"], r["stderr_b"], r["unit"]),
                     f'<span class="v">{vcell(r["diff"], r["diff_stderr"], r["unit"])}</span> {ci}'])
    return head + table(
        ["family", "KV", "corpus · context", "comparison", "rung", "its mean KLD", "against", "its mean KLD",
         "difference <small>(± √(se₁² + se₂²), unpaired)</small>"], rows, f"table-findings-{card}") + (
        '<p class="how">Pairs found from each rung\'s file type and importance matrix (the dataset\'s '
        "<code>file_type</code> and <code>imatrix</code>), rungs made from plain file types only (no recipe, no "
        "prebuilt file), per family, KV type, "
        "corpus and context; shown whatever they say, and a pair the ladder lacks is not listed. Both rungs were "
        "scored on the same tokens, but the dataset holds each rung's mean KLD, not its per-token values: the "
        "difference's ± is √(se₁² + se₂²) and its interval the normal 95 % one, as for two independent samples — "
        "wider than the paired interval the per-token values would give.</p>")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:0 16px 48px;
color:#1b1b1b;line-height:1.4}
h1{font-size:1.5rem}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:2rem}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,440px),1fr));gap:12px}
figure.plot{margin:0;border:1px solid #e3e3e3;border-radius:6px;padding:6px;background:#fff}
svg.plot-svg{width:100%;height:auto;display:block}
.tablewrap{overflow-x:auto;margin:8px 0}
table{border-collapse:collapse;font-size:.82rem}
caption{text-align:left;font-size:.78rem;color:#444;padding:2px 0;white-space:normal}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f4f4f4;position:sticky;top:0}
table[id^=table-anchors] td:last-child,table[id^=table-manifest] td:nth-child(6){white-space:normal;min-width:18em}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:.75rem;font-weight:600;border:1px solid}
.st-ok{background:#e7f6e7;color:#1d6b1d}.st-unanchored{background:#fff;color:#8a5a00;border-style:dashed}
.st-incomplete{background:#fff4d6;color:#8a5a00}.st-blocked,.st-failed{background:#fde4e4;color:#a11}
tr.st-row-unanchored td{background:#fffdf5}tr.st-row-incomplete td{background:#fff8e6}
tr.st-row-blocked td,tr.st-row-failed td{background:#fff0f0}tr.loops td{font-weight:600}
.note{color:#555;font-style:italic}.warn{background:#fff4d6;border:1px solid #e8c66a;padding:8px;border-radius:6px}
nav ul{display:flex;flex-wrap:wrap;gap:2px 14px;list-style:none;padding:0;margin:4px 0;font-size:.78rem}
details{margin:6px 0}summary{cursor:pointer;color:#234}h1{margin:8px 0 2px}.meta{margin:2px 0;font-size:.85rem}
section.card>h2{margin-top:10px}
details.plots>summary h2,details>summary h2{display:inline}
section.answer{border:2px solid #234;border-radius:8px;padding:2px 12px 8px;margin:8px 0}
section.answer h3{margin:10px 0 4px}.answer table{font-size:.76rem}.answer td{white-space:normal}
.answer th{white-space:normal;font-weight:600}.answer .v,.answer .d{white-space:nowrap}
.answer .d{color:#333;font-size:.72rem}.how{font-size:.78rem;color:#444;margin:4px 0}
ul.constants,ul.noise,ul.plan{font-size:.8rem;margin:4px 0;padding-left:1.2em}
.verdict{display:inline-block;white-space:nowrap;padding:0 5px;border-radius:6px;font-size:.7rem;font-weight:600;border:1px solid}
.v-loss{background:#fde4e4;color:#a11}.v-gain{background:#e7f6e7;color:#1d6b1d}.v-none{background:#f1f1f1;color:#444}
.v-noise{background:#fff4d6;color:#8a5a00}
"""


def _legend_html() -> str:
    return ('<p>Markers: <b>●</b> ok; <b>○</b> (hollow) <span class="badge st-unanchored">unanchored</span>: '
            'no anchor reproduced on this card, so the harness is unchecked; <b>✕</b> '
            '<span class="badge st-incomplete">incomplete</span>: the budget ran out before every item ran. '
            '<span class="badge st-blocked">blocked</span> points have no figures (the anchor gate failed). '
            "Error bars are ± one standard error (or the sd over repetitions where the metric says so).</p>")


def card_section(F: Figures, df: pd.DataFrame, card: str) -> str:
    """One card: the answer first (one screen, no plots), then the details, the plot sections folded."""
    d = df[df["card"] == card]
    names = ", ".join(sorted(set(d["card_name"].dropna())))
    pts = dv.point_table(d)
    out = [f'<section class="card" id="card-{esc(card)}"><h2>Card {esc(card)}: the answer</h2>',
           f"<p class=\"meta\">{esc(names) or 'card name not recorded'} · {len(pts)} points · "
           f"{d['family'].nunique()} famil{'y' if d['family'].nunique() == 1 else 'ies'} · "
           f"{d['benchmark'].nunique()} benchmarks · {len(d)} rows</p>"]
    flagged = d[d["status"].isin(("unanchored", "incomplete"))].groupby("status").apply(
        lambda g: g.groupby(dv.POINT).ngroups, include_groups=False) if not d.empty else {}
    if len(flagged):
        out.append('<p class="warn">' + "; ".join(f"{int(n)} point{'s have' if n != 1 else ' has'} {badge(s)} figures"
                                                  for s, n in flagged.items()) + ": read them with that in mind.</p>")
    log.info("report: card %s, the answer", card)
    out.append(answer_section(d, card))
    out.append(f'<h2 id="anchors-{esc(card)}">Anchor status per benchmark</h2>' + status_section(d))
    out.append(f'<h2 id="flips-{esc(card)}">Flips against the reference rung, beside the noise floor</h2>'
               + flips_section(d, card))
    log.info("report: card %s, overview", card)
    out.append(f'<details class="plots" id="overview-{esc(card)}"><summary><h2>Every family: one plot per headline '
               "figure (this card only)</h2></summary>" + _legend_html() + "<p>One line per family and KV-cache type; "
               "a figure measured at several contexts is shown at the largest. Figures that do not vary along the "
               "ladder are one line below the plots.</p>" + overview_section(F, d, card) + "</details>")
    fams = []
    for fam in sorted(d["family"].dropna().unique()):
        log.info("report: card %s, family %s", card, fam)
        fams.append(family_section(F, d, fam))
    out.append(f'<details class="plots" id="curves-{esc(card)}"><summary><h2>Curves per family (this card only)</h2>'
               "</summary><p>Each benchmark's headline figures, one line per KV-cache type (and per subset or "
               "context where a figure has several); a figure that does not vary along the ladder is one line; "
               "every figure, with its paired Δ and verdict, is in the benchmark's table.</p>" + "".join(fams)
               + "</details>")
    log.info("report: card %s, Pareto fronts", card)
    out.append(f'<details class="plots" id="pareto-{esc(card)}"><summary><h2>Pareto fronts across families</h2>'
               "</summary><p>Each paired quality figure against a cost; the dotted step is the front (points no other "
               "point beats on both). Perplexity figures are relative to each family's own reference: compare "
               "families on task benchmarks.</p>" + pareto_section(F, d, card) + "</details>")
    out.append(f'<h2 id="degenerate-{esc(card)}">Degenerate repetition loops</h2>' + degenerate_section(d, card))
    out.append(f'<details id="manifest-{esc(card)}"><summary><h2>Manifests (per point and benchmark)</h2></summary>'
               + manifest_section(d, card) + "</details>")
    out.append("</section>")
    return "".join(out)


def render(df: pd.DataFrame, card: str | None = None, source: str = "points.parquet") -> str:
    """The report's HTML for ``card`` (None: every card in the dataset, one section each).

    Each card opens with the answer (the family tables of headline figures with their paired deltas,
    intervals and verdicts, the noise floor, the items a 2-point loss needs, the recommendation at common
    budgets), then the tables, then the plots, folded."""
    cards = sorted(df["card"].dropna().unique())
    if card is not None and card not in cards:
        raise DataError(f"card {card!r} is not in the dataset (cards: {cards})")
    shown = [card] if card else cards
    F = Figures()
    title = f"quantladder report: {', '.join(shown)}"
    toc = []
    for c in shown:
        toc += [f'<li><a href="#answer-{esc(c)}">{esc(c)}: the answer</a></li>',
                f'<li><a href="#recommend-{esc(c)}">{esc(c)}: which point to run</a></li>',
                f'<li><a href="#findings-{esc(c)}">{esc(c)}: findings (importance matrices)</a></li>',
                f'<li><a href="#anchors-{esc(c)}">{esc(c)}: anchor status</a></li>',
                f'<li><a href="#flips-{esc(c)}">{esc(c)}: flips and the noise floor</a></li>',
                f'<li><a href="#overview-{esc(c)}">{esc(c)}: every family, one plot per headline</a></li>',
                f'<li><a href="#curves-{esc(c)}">{esc(c)}: curves per family</a></li>',
                f'<li><a href="#pareto-{esc(c)}">{esc(c)}: Pareto fronts</a></li>',
                f'<li><a href="#degenerate-{esc(c)}">{esc(c)}: degenerate loops</a></li>',
                f'<li><a href="#manifest-{esc(c)}">{esc(c)}: manifests</a></li>']
    body = [f"<h1>{esc(title)}</h1>",
            f'<p class="meta">Built from <code>{esc(source)}</code> alone ({len(df)} rows). Every figure carries its '
            "unit; ± is one standard error; every Δ carries its 95 % interval.</p>"]
    if len(cards) > 1:
        toc.append('<li><a href="#crosscard">cross-card view</a></li>')
    body.append("<nav><ul>" + "".join(toc) + "</ul></nav>")
    for c in shown:
        body.append(card_section(F, df, c))
    if len(cards) > 1:
        body.append('<section id="crosscard"><h2>Cross-card view</h2>')
        pairs = [(c, [o for o in cards if o != c]) for c in shown] if card else [(cards[0], cards[1:])]
        for c, others in pairs:
            body.append(crosscard_section(df, c, others))
        body.append("</section>")
    log.info("report: %d figures", F.n)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>" + "".join(body) + "</body></html>\n")


def build(points_parquet: str | Path, out_html: str | Path, card: str | None = None) -> Path:
    """Write the HTML report for ``card`` (None: all cards) from the dataset at ``points_parquet``."""
    df = dv.load(points_parquet)
    if df.empty:
        raise DataError(f"dataset {points_parquet} holds no rows: nothing to report")
    text = render(df, card, source=str(points_parquet))
    with atomic_path(out_html) as tmp:
        tmp.write_text(text, encoding="utf-8")
    log.info("report: wrote %s", out_html)
    return Path(out_html)
