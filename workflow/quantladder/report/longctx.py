"""Long context: each task's score, and the flips against the reference, against the context length,
one line per rung; and what a long-context generation held in memory beside its predicted KV cache.

Why a section of its own: what quantization costs grows with the input (Mekala et al. 2025, arXiv
2505.20276: 4-bit weights lose up to 59 % at 64K tokens, 8-bit about 0.8 %), and the curves against
bits per weight show one length at a time. Drawn from the dataset's rows that carry a context length:
the figures of every task benchmark whose items run at several lengths (RULER's score per task and its
average, bfcl_haystack's accuracy), the flip rates the aggregate counts per length, and the generate
jobs' peak memory beside ``n_parallel`` × the predicted KV cache of one sequence.
"""

from __future__ import annotations

import pandas as pd

from .. import dataset_view as dv
from .. import metrics as qmetrics
from .figures import Figures, draw_series
from .markup import esc, table, unit_axis

MAX_PANELS = 12  # per benchmark and family; the rest are in the family's tables


def _with_lengths(d: pd.DataFrame, benchmark: str) -> list[tuple[str, str | None]]:
    """The (metric, subset) panels of a benchmark measured at two or more lengths: its headlines' whole
    rows first, then each subset of its paired figures."""
    rows = dv.figures(d[(d["benchmark"] == benchmark) & d["n_ctx"].notna()])
    out = []
    for m in qmetrics.headlines(benchmark):
        g = rows[(rows["metric"] == m) & rows["subset"].isna()]
        if g["n_ctx"].nunique() > 1:
            out.append((m, None))
    reg = qmetrics.registry()
    for m in dict.fromkeys(rows["metric"]):
        if reg[m].paired != "items":
            continue
        sub = rows[(rows["metric"] == m) & rows["subset"].notna()]
        for s, g in sub.groupby("subset", sort=True):
            if g["n_ctx"].nunique() > 1:
                out.append((m, s))
    return out[:MAX_PANELS]


def benchmarks_with_lengths(d: pd.DataFrame) -> list[str]:
    return [b for b in dv.task_benchmarks(d) if _with_lengths(d, b)]


def _rung_order(d: pd.DataFrame, family: str) -> list[tuple[str, str]]:
    pts = dv.point_table(d[d["family"] == family])
    return [(r, k) for r, k in zip(pts["rung"], pts["kv"])]


def length_figure(F: Figures, rows: pd.DataFrame, order: list[tuple[str, str]], title: str, ylabel: str,
                  noise: pd.DataFrame | None = None) -> str:
    """One figure against the context length (log2 axis): one line per (rung, KV type) with ± one
    standard error; the noise floor, where given, as a grey dashed line."""
    import matplotlib

    colors = matplotlib.colormaps["tab10"].colors
    rungs = list(dict.fromkeys(r for r, _ in order))
    kvs = sorted({k for _, k in order}, key=lambda k: (k != "f16", k))
    styles = ["-", "--", ":", "-."]
    unit = rows["unit"].dropna().iloc[0] if rows["unit"].notna().any() else None
    ylab, div = unit_axis(unit, list(rows["value"]))
    fig, ax = F.new()
    for rung, kv in order:
        g = rows[(rows["rung"] == rung) & (rows["kv"] == kv)].sort_values("n_ctx")
        if g.empty:
            continue
        draw_series(ax, g, "n_ctx", div, colors[rungs.index(rung) % len(colors)], styles[kvs.index(kv) % len(styles)],
                    f"{rung} · KV {kv}")
    if noise is not None and not noise.empty:
        g = noise.sort_values("n_ctx")
        ax.plot(g["n_ctx"], g["value"] / div, color="0.5", linestyle="--", marker=".", label="noise floor")
    lengths = sorted(rows["n_ctx"].dropna().unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([f"{int(x / 1024)}K" if x % 1024 == 0 else str(int(x)) for x in lengths])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel(f"{ylabel} ({ylab})")
    ax.set_title(title)
    ax.legend(loc="best")
    return F.svg(fig, title)


def memory_table(d: pd.DataFrame, family: str, benchmark: str) -> str:
    """Per point, at its longest length: the generate job's peak RSS beside the model's weights plus
    ``n_parallel`` × the predicted KV cache of one sequence (the budget the batch policy sized it by)."""
    fam = d[(d["family"] == family)]
    b = fam[fam["benchmark"] == benchmark]
    rows = []
    for (rung, kv), g in b.groupby(["rung", "kv"], sort=False):
        peak = g[(g["metric"] == "peak_mem_bytes") & g["n_ctx"].notna() & g["value"].notna()]
        kvp = g[(g["metric"] == "kv_bytes_predicted") & g["n_ctx"].notna()]
        npar = g["n_parallel"].dropna()
        w = fam[(fam["rung"] == rung) & (fam["metric"] == "weights_bytes")]["value"].dropna()
        if peak.empty or kvp.empty:
            continue
        top = peak.loc[peak["n_ctx"].idxmax()]
        kv_one = kvp[kvp["n_ctx"] == top["n_ctx"]]["value"]
        if kv_one.empty:
            continue
        n_par = int(npar.iloc[0]) if not npar.empty else None
        kv_all = None if n_par is None else n_par * float(kv_one.iloc[0])
        pred = None if (kv_all is None or w.empty) else float(w.iloc[0]) + kv_all
        rows.append([esc(rung), esc(kv), str(int(top["n_ctx"])), "—" if n_par is None else str(n_par),
                     esc(dv.fmt_bytes(float(kv_one.iloc[0]))), esc(dv.fmt_bytes(kv_all)),
                     "—" if w.empty else esc(dv.fmt_bytes(float(w.iloc[0]))), esc(dv.fmt_bytes(pred)),
                     esc(dv.fmt_bytes(float(top["value"]))),
                     "—" if not pred else f"{float(top['value']) / pred:.2f}"])
    if not rows:
        return ""
    return ('<p class="how">Memory of the generate job at its longest length: its peak RSS (host memory, the whole '
            "process: Python and the compute buffers too) beside the weights plus n_parallel × the KV cache "
            "predicted for one sequence from the GGUF's metadata (the cache the batch policy sized against "
            "<code>generation.kv_budget_mb</code>; a ratio near 1 says the prediction holds, far above it says "
            "something else grew).</p>"
            + table(["rung", "KV", "n_ctx (tokens)", "n_parallel", "KV predicted, one sequence",
                     "KV predicted, all sequences", "weights", "weights + KV", "peak RSS", "peak / predicted"],
                    rows, f"table-longctx-memory-{family}-{benchmark}"))


def longctx_section(F: Figures, d: pd.DataFrame, card: str) -> str:
    """Per family and benchmark measured at several lengths: score per task and average, flips, memory."""
    benches = benchmarks_with_lengths(d)
    if not benches:
        return ('<p class="note">No task benchmark in the dataset ran at two or more context lengths on this card '
                "(RULER's lengths and cells, bfcl_haystack's haystack lengths).</p>")
    out = []
    for family in sorted(d["family"].dropna().unique()):
        fam = d[d["family"] == family]
        order = _rung_order(d, family)
        for b in benches:
            panels = _with_lengths(fam, b)
            if not panels:
                continue
            figs = []
            for m, s in panels:
                rows = dv.figures(fam[(fam["benchmark"] == b) & (fam["metric"] == m) & fam["n_ctx"].notna()])
                rows = rows[rows["subset"].isna()] if s is None else rows[rows["subset"] == s]
                figs.append(length_figure(F, rows, order, f"{family} · {b} · {m}" + (f" · {s}" if s else ""),
                                          m))
            flips = dv.figures(fam[(fam["benchmark"] == b) & (fam["metric"] == "flip_rate") & fam["n_ctx"].notna()
                                   & fam["subset"].isna()])
            if not flips.empty:
                noise = dv.figures(fam[(fam["benchmark"] == b) & (fam["metric"] == "noise_flip_rate")
                                       & fam["n_ctx"].notna() & fam["subset"].isna()])
                figs.append(length_figure(F, flips, order, f"{family} · {b} · flips against the reference",
                                          "flip_rate", noise))
            out.append(f'<h3 id="longctx-{esc(card)}-{esc(family)}-{esc(b)}">{esc(family)} · {esc(b)}</h3>'
                       + '<div class="grid">' + "".join(f'<figure class="plot" data-kind="longctx" '
                                                        f'data-benchmark="{esc(b)}">{f}</figure>' for f in figs)
                       + "</div>" + memory_table(d, family, b))
    how = ('<p class="how">Each task\'s score and the flips against the reference rung (same card and KV type), '
           "against the context length: one line per rung and KV type, ± one standard error; the noise floor "
           "(the reference generated again at another batch setting) as a grey dashed line. A loss that grows "
           "with the length is the one the source documents warn of for 4-bit weights and KV caches.</p>")
    return how + "".join(out)


def has_lengths(d: pd.DataFrame) -> bool:
    return bool(benchmarks_with_lengths(d))
