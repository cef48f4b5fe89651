"""The cross-card view, shown when the dataset holds several cards: the share of identical generations
and the figures measured on both cards with their differences. Cards are never mixed into one curve."""

from __future__ import annotations

import math

import pandas as pd

from .. import dataset_view as dv
from .. import metrics as qmetrics
from .markup import Z95, esc, isnan, share_text, table, vcell


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
    if k in (0, n):  # a binomial standard error of 0: the exact interval instead
        return share_text(100 * k / n, n, counts=True)
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
                  if not (isnan(r["stderr_a"]) or isnan(r["stderr_b"])) else None)
            se_mean = se
            m = qmetrics.registry().get(r["metric"])
            if se is not None and m is not None and m.stderr == "sd":
                # an sd over repetitions: the interval of the difference of the means uses sd/√n per card
                na, nb = r["n_a"], r["n_b"]
                se_mean = (math.sqrt(r["stderr_a"] ** 2 / na + r["stderr_b"] ** 2 / nb)
                           if not (isnan(na) or isnan(nb)) and na > 0 and nb > 0 else None)
            rows.append([esc(r["family"]), esc(r["rung"]), esc(r["kv"]), esc(r["benchmark"]), esc(r["metric"]),
                         "—" if isnan(r["n_ctx"]) else str(int(r["n_ctx"])),
                         vcell(r["value_a"], r["stderr_a"], r["unit_a"], r["n_a"]),
                         vcell(r["value_b"], r["stderr_b"], r["unit_b"], r["n_b"]),
                         (f"{esc(dv.fmt_value(d, None, r['unit_a']))} <small>(no normal interval: both shares at 0 or "
                          "all of their items)</small>" if r["unit_a"] == "%" and se == 0 else vcell(d, se, r["unit_a"]) + (
                             " <small>(no interval: no standard error)</small>" if se_mean is None else
                             f" <small>(95 % CI {esc(dv.fmt_value(d - Z95 * se_mean, None, None))}"
                             f"…{esc(dv.fmt_value(d + Z95 * se_mean, None, None))})</small>"))])
        out.append(f"<details><summary>{len(rows)} figures measured on both cards (deltas)</summary>" + table(
            ["family", "rung", "KV", "benchmark", "metric", "n_ctx", esc(card), esc(other), f"Δ ({esc(other)} − {esc(card)})"],
            rows, f"table-deltas-{card}-{other}") + "</details>")
    return "".join(out)
