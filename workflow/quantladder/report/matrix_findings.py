"""The findings about importance matrices: IQ2_XXS with a matrix against Q2_K without, Q4_K_M with
against Q4_K_M without, compared on their mean KLD against the reference (an unpaired difference)."""

from __future__ import annotations

import math

import pandas as pd

from .. import dataset_view as dv
from ..dataset import IMATRIX_UNKNOWN
from .markup import Z95, badge, esc, isnan, table, vcell

# The findings about importance matrices: (what is compared, (file type, made with a matrix) of the
# first rung, and of the rung it is compared with).
FINDINGS = (
    ("IQ2_XXS with a matrix vs Q2_K without", ("IQ2_XXS", True), ("Q2_K", False)),
    ("Q4_K_M with a matrix vs Q4_K_M without", ("Q4_K_M", True), ("Q4_K_M", False)),
)


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
                          if not (isnan(a["stderr"]) or isnan(b["stderr"])) else None)
                    out.append({"family": fam, "kv": kv, "subset": None if isnan(subset) else subset,
                                "n_ctx": None if isnan(nctx) else int(nctx), "comparison": what, "unit": a["unit"],
                                "rung_a": a["rung"], "imatrix_a": a["imatrix"], "value_a": float(a["value"]),
                                "stderr_a": a["stderr"], "status_a": a["status"],
                                "rung_b": b["rung"], "imatrix_b": b["imatrix"], "value_b": float(b["value"]),
                                "stderr_b": b["stderr"], "status_b": b["status"], "diff": diff, "diff_stderr": se,
                                "ci_low": None if se is None else diff - Z95 * se,
                                "ci_high": None if se is None else diff + Z95 * se})
    return pd.DataFrame(out)


def findings_section(d: pd.DataFrame, card: str) -> str:
    """The findings' table, or why there is none; the heading is the section table's."""
    f = findings(d)
    if f.empty:
        return ('<p class="note" id="findings-none">No such pair of rungs in this dataset: the ladder has '
                       "neither IQ2_XXS with a matrix beside Q2_K without one, nor Q4_K_M with and without a matrix "
                       "(on the same KV type, corpus and context).</p>")

    def rung(name, im, st):
        return (f"{esc(name)}<br><small>{esc(im) if not isnan(im) else 'no matrix'}</small>"
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
    return table(
        ["family", "KV", "corpus · context", "comparison", "rung", "its mean KLD", "against", "its mean KLD",
         "difference <small>(± √(se₁² + se₂²), unpaired)</small>"], rows, f"table-findings-{card}") + (
        '<p class="how">Pairs found from each rung\'s file type and importance matrix (the dataset\'s '
        "<code>file_type</code> and <code>imatrix</code>), rungs made from plain file types only (no recipe, no "
        "prebuilt file), per family, KV type, "
        "corpus and context; shown whatever they say, and a pair the ladder lacks is not listed. Both rungs were "
        "scored on the same tokens, but the dataset holds each rung's mean KLD, not its per-token values: the "
        "difference's ± is √(se₁² + se₂²) and its interval the normal 95 % one, as for two independent samples — "
        "wider than the paired interval the per-token values would give.</p>")
