"""Each family's details: its rungs as made, its points with every benchmark's status and headlines,
its curves against bits per weight and every figure's table with its paired Δ; a base model is said so."""

from __future__ import annotations

import logging

import pandas as pd

from .. import benchmarks as qbench
from .. import dataset_view as dv
from .. import status as qstatus
from ..errors import ConfigError
from .figures import Figures, curve_figure, plotted_metrics
from .markup import badge, constant_line, esc, fmt_delta, isnan, rcell, table, varies, verdict_badge
from .pending import NOT_YET, Pending, mark, unmeasured_points, unmeasured_rungs

log = logging.getLogger(__name__)


def points_table(df: pd.DataFrame, family: str, pending: Pending | None = None) -> str:
    """Per point: rung facts, then each benchmark's status and headline figure(s) with ±; on a partial run,
    the points the run still lacks after them, not measured yet."""
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
                 "—" if isnan(p["bits_per_weight"]) else f"{p['bits_per_weight']:.2f}",
                 esc(dv.fmt_bytes(p["file_bytes"])),
                 "—" if isnan(p["n_params"]) else f"{int(p['n_params']):,}"]
        for b in benches:
            bg = g[g["benchmark"] == b]
            st = qstatus.worst(bg["status"]) if not bg.empty else None
            cells.append(badge(st) if st else mark(pending, family, p["rung"], p["kv"], b))
            for m in heads[b]:
                r = dv.pick_ctx(dv.whole(dv.figures(bg[bg["metric"] == m])), None)
                cells.append("—" if r is None else rcell(r)
                             + ("" if isnan(r["n_ctx"]) else f" <small>@{int(r['n_ctx'])}</small>"))
        rows.append(cells)
        classes.append("")
    for rung, kv in unmeasured_points(pending, family, zip(pts["rung"], pts["kv"])):
        cells = [esc(rung), esc(kv), "—", "—", "—"]
        for b in benches:
            cells += [mark(pending, family, rung, kv, b)] + ["—"] * len(heads[b])
        rows.append(cells)
        classes.append("pending")
    return table(headers, rows, f"table-points-{family}", classes)


def values_table(df: pd.DataFrame, family: str, benchmark: str) -> str:
    """Every figure of one benchmark for one family: long form, value ± stderr with its unit."""
    g = dv.figures(df[(df["family"] == family) & (df["benchmark"] == benchmark)])
    g = g.sort_values(["metric", "subset", "n_ctx", "bits_per_weight", "kv"], ascending=[True, True, True, False, True],
                      na_position="first")
    rows = [[esc(r["rung"]), esc(r["kv"]), esc(r["metric"]), esc(r["subset"] or "—"),
             "—" if isnan(r["n_ctx"]) else str(int(r["n_ctx"])), rcell(r),
             "—" if isnan(r["n"]) else str(int(r["n"])),
             ("—" if isnan(r["delta"]) else esc(fmt_delta(r["delta"], r["delta_ci_low"], r["delta_ci_high"], r["unit"]))
              + " " + verdict_badge(r["verdict"], r["verdict_text"])),
             badge(r["status"])] for _, r in g.iterrows()]
    classes = [f"st-row-{r['status']}" for _, r in g.iterrows()]
    return table(["rung", "KV", "metric", "subset", "n_ctx (tokens)", "value ± stderr", "n",
                  "paired Δ vs the reference · verdict", "status"], rows, f"table-values-{family}-{benchmark}", classes)


def third_party_flag(provenance) -> str:
    """Beside a rung's name: where its file comes from when it was not made here (the dataset's
    ``provenance``; a difference from the reference that the config accepted is marked)."""
    if isnan(provenance) or not str(provenance).startswith("third party"):
        return ""
    warn = "differs from the reference" in str(provenance)
    return (f' <small class="provenance{" warn" if warn else ""}" data-provenance="{esc(provenance)}">'
            f"({esc(provenance)})</small>")


def rungs_table(df: pd.DataFrame, family: str, pending: Pending | None = None) -> str:
    """Per rung: what the file is — its own file type, bits per weight, size, the importance matrix and
    the recipe it was made with, and the share of its parameters per tensor type (the dataset's rung
    identity columns); on a partial run, the rungs the run still lacks after them, not measured yet."""
    fam = df[df["family"] == family]
    pts = dv.point_table(fam).drop_duplicates("rung")
    cols = ["file_type", "tensor_mix", "imatrix", "recipe"] + (["provenance"] if "provenance" in fam.columns else [])
    ident = fam.groupby("rung", dropna=False)[cols].first()
    rows = []
    for _, p in pts.iterrows():
        i = ident.loc[p["rung"]] if p["rung"] in ident.index else pd.Series(dtype=object)

        def val(c, none):
            v = i.get(c)
            return none if isnan(v) or v == "" else esc(v)

        rows.append([esc(p["rung"]) + (" <small>(reference)</small>" if p["is_reference"] else "")
                     + third_party_flag(i.get("provenance")),
                     val("file_type", "not recorded"),
                     "—" if isnan(p["bits_per_weight"]) else f"{p['bits_per_weight']:.2f} bits",
                     esc(dv.fmt_bytes(p["file_bytes"])), val("imatrix", "none"), val("recipe", "none"),
                     val("tensor_mix", "not recorded")])
    classes = [""] * len(rows)
    for rung in unmeasured_rungs(pending, family, pts["rung"]):
        rows.append([esc(rung), NOT_YET] + ["—"] * 5)
        classes.append("pending")
    return table(["rung", "file type", "bits per weight (bits)", "size", "importance matrix", "recipe",
                  "tensor mix <small>(share of the parameters per tensor type)</small>"], rows,
                 f"table-rungs-{family}", classes,
                 caption="What each rung's file holds (its manifest): a K or IQ type cannot hold a row whose width "
                         "is not a multiple of its 256-weight block, and llama.cpp puts such tensors in another "
                         "type, so the tensor mix, not the rung's name, says what was measured (docs/ladder.md).")


def chat_benchmarks_missing(df: pd.DataFrame, family: str) -> list[str]:
    """The chat benchmarks (those that need a chat template) other families of the card ran and this
    family has no row of, when it has perplexity rows: a base model (``chat: false``), which the
    pipeline does not give a chat benchmark (quantladder.config.task_runs_for). Empty otherwise."""

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


def base_model_note(df: pd.DataFrame, family: str, pending: Pending | None = None) -> str:
    missing = chat_benchmarks_missing(df, family)
    if not missing or (pending is not None and pending.measures(family) & set(missing)):  # a chat run not done yet
        return ""
    return (f'<p class="note base-model" data-family="{esc(family)}">No chat benchmarks for {esc(family)}: a base '
            f"model (<code>families.{esc(family)}.chat: false</code>) takes no chat template, so the other "
            f"families' chat benchmarks ({esc(', '.join(missing))}) do not apply; its quality here is its perplexity "
            "and its KLD against its reference.</p>")


def family_section(F: Figures, df: pd.DataFrame, family: str, pending: Pending | None = None) -> str:
    fam = df[df["family"] == family]
    out = [f'<section class="family" id="family-{esc(family)}"><h3>{esc(family)}</h3>']
    out.append(base_model_note(df, family, pending))
    out.append(f'<h4 id="{esc(family)}-rungs">Rungs</h4>' + rungs_table(df, family, pending))
    out.append("<h4>Points</h4>" + points_table(df, family, pending))
    figs = dv.figures(fam)
    benches = [b for b in dv.task_benchmarks(fam)] + [b for b in dv.COST_BENCHMARKS if (fam["benchmark"] == b).any()]
    for b in benches:
        brows = figs[figs["benchmark"] == b]
        st = qstatus.worst(fam[fam["benchmark"] == b]["status"])
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


def curves_section(F: Figures, d: pd.DataFrame, card: str, pending: Pending | None = None) -> str:
    """Every family of one card, one section each."""
    fams = []
    for fam in sorted(d["family"].dropna().unique()):
        log.info("report: card %s, family %s", card, fam)
        fams.append(family_section(F, d, fam, pending))
    return ("<p>Each benchmark's headline figures, one line per KV-cache type (and per subset or context where a "
            "figure has several); a figure that does not vary along the ladder is one line; every figure, with its "
            "paired Δ and verdict, is in the benchmark's table.</p>" + "".join(fams))
