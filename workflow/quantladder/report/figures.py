"""The report's plots: matplotlib figures as inline SVG (text kept as text), the curves of a family
against bits per weight and the overview of every family, one plot per headline figure.

`unanchored` points are drawn hollow and `incomplete` ones as ×."""

from __future__ import annotations

import io
import math
import re

import pandas as pd

from .. import dataset_view as dv
from .. import metrics as qmetrics
from .markup import constant_line, esc, isnan, unit_axis, varies

STATUS_MARK = {  # how a point's status is drawn: matplotlib marker, filled?
    "ok": ("o", True), "unanchored": ("o", False), "incomplete": ("x", True), "absent": ("x", True),
    "failed": ("x", True), "blocked": ("x", True),
}
MAX_SERIES = 12
# Subsets that summarise others (BFCL's aggregates, ...): drawn first when not every subset fits.
AGGREGATE_SUBSETS = ("items_run", "non_live", "live", "multi_turn", "simple", "irrelevance", "relevance")


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
        parts.append("" if isnan(n_ctx) else f"n_ctx {int(n_ctx)}")
    return " · ".join(p for p in parts if p)


def draw_series(ax, g: pd.DataFrame, x: str, div: float, color, linestyle: str, label: str) -> set[str]:
    """One series of points against column ``x``: the line with its error bars, each point marked by its
    status (STATUS_MARK). Returns the statuses drawn (for the legend)."""
    err = g["stderr"].to_numpy(float) / div
    ax.errorbar(g[x].to_numpy(float), g["value"].to_numpy(float) / div,
                yerr=None if all(math.isnan(e) for e in err) else [0 if math.isnan(e) else e for e in err],
                color=color, linestyle=linestyle, capsize=3, linewidth=1.4, label=label)
    statuses = set()
    for st, sg in g.groupby("status"):
        statuses.add(st)
        m, filled = STATUS_MARK.get(st, ("o", True))
        ax.scatter(sg[x], sg["value"] / div, marker=m, s=90 if m == "x" else 30, zorder=3, color=color,
                   facecolors=(color if filled else "white") if m != "x" else None,
                   linewidths=2.2 if m == "x" else 1.5)
    return statuses


def status_legend(ax, statuses: set[str]):
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
    variants = sorted({(0 if isnan(s) else 1, "" if isnan(s) else str(s), -1 if isnan(c) else c)
                       for _, s, c in (k for k, _ in groups)})
    styles = ["-", "--", ":", "-."]
    statuses = set()
    for (kv, subset, nctx), g in groups:
        g = g.sort_values("bits_per_weight")
        color = colors[kvs.index(kv) % len(colors)] if kv in kvs else "0.3"
        x = g["bits_per_weight"].to_numpy(float)
        y = g["value"].to_numpy(float) / div
        err = g["stderr"].to_numpy(float) / div
        vkey = (0 if isnan(subset) else 1, "" if isnan(subset) else str(subset), -1 if isnan(nctx) else nctx)
        style = styles[variants.index(vkey) % len(styles)]
        ax.errorbar(x, y, yerr=None if all(math.isnan(e) for e in err) else [0 if math.isnan(e) else e for e in err],
                    color=color, linestyle=style, capsize=3, linewidth=1.4,
                    label=_series_label(kv, None if isnan(subset) else subset, nctx, vary))
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
    extra = status_legend(ax, statuses)
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
        statuses |= draw_series(ax, g.sort_values("bits_per_weight"), "bits_per_weight", div,
                                colors[fams.index(fam) % len(colors)], styles[kvs.index(kv) % len(styles)],
                                f"{fam} · KV {kv}")
    ax.set_xlabel("bits per weight (bits)")
    ax.set_ylabel(f"{metric} ({ylab})" + (f" at {where}" if where else ""))
    ax.set_title(f"{card}: {benchmark} · {metric}")
    handles, labels = ax.get_legend_handles_labels()
    extra = status_legend(ax, statuses)
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


LEGEND = ('<p>Markers: <b>●</b> ok; <b>○</b> (hollow) <span class="badge st-unanchored">unanchored</span>: '
          'no anchor reproduced on this card, so the harness is unchecked; <b>✕</b> '
          '<span class="badge st-incomplete">incomplete</span>: the budget ran out before every item ran. '
          '<span class="badge st-blocked">blocked</span> points have no figures (the anchor gate failed). '
          "Error bars are ± one standard error (or the sd over repetitions where the metric says so).</p>")
OVERVIEW_HOW = ("<p>One line per family and KV-cache type; a figure measured at several contexts is shown at the "
                "largest. Figures that do not vary along the ladder are one line below the plots.</p>")


def overview_section(F: Figures, df: pd.DataFrame, card: str) -> str:
    """The headline figures of each benchmark, and the cost axes, with every family on one plot; a
    figure that does not vary along any family's ladder is one line instead; the markers' legend first."""
    figs, lines = [], []
    for b in dv.task_benchmarks(df) + [c for c in dv.COST_BENCHMARKS if (df["benchmark"] == c).any()]:
        for m in plotted_metrics(df, b):
            vals, _, where = point_values(df, b, m)
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
    return LEGEND + OVERVIEW_HOW + out


def point_values(df: pd.DataFrame, benchmark: str, metrics: tuple[str, ...] | str) -> tuple[pd.DataFrame, str | None, str | None]:
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
