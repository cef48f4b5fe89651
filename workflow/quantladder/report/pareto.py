"""The Pareto fronts across families: each paired quality figure against memory, generation speed and
energy per token, with the table of the points on each front."""

from __future__ import annotations

import math

import pandas as pd

from .. import dataset_view as dv
from .. import measures
from .. import metrics as qmetrics
from .figures import STATUS_MARK, Figures, point_values, status_legend
from .markup import badge, esc, isnan, table, unit_axis, vcell

KV_MARKERS = ["o", "s", "^", "D", "v", "P", "*", "h"]
# The Pareto fronts' cost axes: (measure, title, lower is better), as each measure declares its own
# (quantladder.measures: Measure.cost); the metric is each measure's preferred axis the dataset holds
# (quantladder.metrics: pareto_cost).
COST_AXES = measures.cost_axes()
PARETO_HOW = ("<p>Each paired quality figure against a cost; the dotted step is the front (points no other point "
              "beats on both). Perplexity figures are relative to each family's own reference: compare families on "
              "task benchmarks.</p>")


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
    """Per cost axis, each paired quality figure against it with its front drawn and tabled; a cost
    or quality the dataset lacks is said so."""
    out = [PARETO_HOW]
    qualities = []
    for b in dv.task_benchmarks(df):
        for m in dv.headline_metrics(df, b):
            if qmetrics.get(m).paired:  # the quality figures with a paired verdict; the rest are in the tables
                qualities.append((b, m))
    missing_costs = []
    for ckey, ctitle, lower in COST_AXES:
        cmetrics = tuple(qmetrics.pareto_costs(ckey))
        cost, cmetric, cwhere = point_values(df, ckey, cmetrics)
        if cmetric is None:
            missing_costs.append(f"{ctitle} ({', '.join(cmetrics)} rows of benchmark {ckey})")
            continue
        figs = []
        for b, m in qualities:
            q, _, qwhere = point_values(df, b, m)
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
                    xerr=None if isnan(r["stderr_c"]) else [r["stderr_c"] / xdiv],
                    yerr=None if isnan(r["stderr_q"]) else [r["stderr_q"] / ydiv],
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
    handles += status_legend(ax, statuses)
    ax.legend(handles=handles, loc="best")
    ax.set_xlabel(f"{cmetric} ({xlab})" + (f" at {cwhere}" if cwhere else ""))
    ax.set_ylabel(f"{metric} ({ylab})" + (f" at {qwhere}" if qwhere else ""))
    ax.set_title(f"{card}: {bench} {metric} vs {ctitle}")
    svg = F.svg(fig, f"Pareto front of {bench} {metric} against {cmetric}")
    rows = []
    for i in front:
        r = j.iloc[i]
        rows.append([esc(r["family"]), esc(r["rung"]), esc(r["kv"]), vcell(r["value_q"], r["stderr_q"], qunit, r.get("n_q")),
                     vcell(r["value_c"], r["stderr_c"], cunit, r.get("n_c")), badge(r["status_q"])])
    tid = f"pareto-{bench}-{metric}-{ckey}"
    tbl = table(["family", "rung", "KV", f"{esc(metric)}", f"{esc(cmetric)}", "status"], rows, tid)
    return (f'<figure class="plot" data-kind="pareto" data-benchmark="{esc(bench)}" data-metric="{esc(metric)}" '
            f'data-cost="{esc(cmetric)}">{svg}<figcaption>Front (no point is both cheaper and better): '
            f"</figcaption>{tbl}</figure>")
