"""The report's per-card tables: anchor status per benchmark, flips beside the noise floor,
degenerate repetition loops and the manifest of every point and benchmark."""

from __future__ import annotations

import pandas as pd

from .. import dataset_view as dv
from .. import metrics as qmetrics
from .. import status as qstatus
from .markup import badge, esc, isnan, rcell, share_text, short, table


def status_section(df: pd.DataFrame) -> str:
    """Anchor status per benchmark: how many points ran ok, unanchored, blocked, ... and why."""
    rows, classes = [], []
    for b, g in df.groupby("benchmark"):
        per_point = g.groupby(dv.POINT, dropna=False)["status"].agg(qstatus.worst)
        counts = per_point.value_counts()
        reasons = sorted({r for r in g["status_reason"].dropna().unique() if r})
        worst = qstatus.worst(per_point)
        cells = [esc(b), badge(worst)] + [str(int(counts.get(s, 0))) for s in dv.STATUSES_ORDER]
        cells.append("<br>".join(esc(r) for r in reasons) or "—")
        rows.append(cells)
        classes.append(f"st-row-{worst}")
    headers = ["benchmark", "anchor status"] + [f"points {s}" for s in dv.STATUSES_ORDER] + ["reason"]
    return table(headers, rows, "table-anchors", classes)


def degenerate_section(df: pd.DataFrame, card: str) -> str:
    g = dv.figures(df[df["metric"].isin([m for m in qmetrics.in_group("loops") if m.startswith("degenerate")])])
    if g.empty:
        return ('<p class="note" id="degenerate-none">No degenerate-loop rows in the dataset for this card '
                "(every task benchmark's score stage writes <code>degenerate_items</code>).</p>")
    g = g.sort_values(["family", "benchmark", "bits_per_weight", "kv"], ascending=[True, True, False, True])
    rows, classes = [], []
    for _, r in g.iterrows():
        of = "" if isnan(r["n"]) else f" of {int(r['n'])}"
        rows.append([esc(r["family"]), esc(r["rung"]), esc(r["kv"]), esc(r["benchmark"]), esc(r["metric"]),
                     esc(r["subset"] or "—"), rcell(r) + esc(of), badge(r["status"])])
        classes.append(("loops " if r["value"] > 0 else "") + f"st-row-{r['status']}")
    return table(["family", "rung", "KV", "benchmark", "metric", "subset", "loops", "status"], rows,
                 f"table-degenerate-{card}", classes)


def batch_invariance(df: pd.DataFrame) -> tuple[bool, int, int, int] | None:
    """The noise-floor pairs of ``df`` pooled: (every pair's replies identical, replies identical, replies
    compared, pairs); None without a noise floor. Pairs are the reference rungs' (the noise series), so
    this says nothing about another rung: batch_invariance_words states it per rung."""
    g = dv.whole(df[(df["metric"] == "batch_invariant") & df["value"].notna()])
    if g.empty:
        return None
    share = dv.whole(df[df["metric"] == "noise_identical_share"])
    n = int(g["n"].sum())
    same = int(round(sum(float(v) * float(k) / 100 for v, k in zip(share["value"], share["n"]))))
    return bool((g["value"] == 1).all()), same, n, len(g)


def batch_invariance_words(fam: pd.DataFrame) -> str:
    """Whether a rung's replies are batch-invariant, stated per rung from that rung's own replies
    generated at two batch settings (its noise series); a rung without them is "not measured for this
    rung": the reference's identical replies say nothing about another rung's kernels."""
    rows = dv.whole(fam[fam["metric"].isin(["batch_invariant", "noise_identical_share"]) & fam["value"].notna()])
    pts = dv.point_table(fam)
    said, unmeasured = [], []
    for _, p in pts.iterrows():
        mine = rows[(rows["rung"] == p["rung"]) & (rows["kv"] == p["kv"])]
        share = mine[mine["metric"] == "noise_identical_share"]
        name = esc(p["rung"]) + ("" if p["kv"] == "f16" else f" (KV {esc(p['kv'])})")
        if share.empty:
            unmeasured.append(name)
            continue
        k = int(round(sum(float(v) * float(n) / 100 for v, n in zip(share["value"], share["n"]))))
        n = int(share["n"].sum())
        every = k == n
        said.append(f'{name}: <b data-batch-invariant="{"yes" if every else "no"}" data-rung="{esc(p["rung"])}">'
                    f'{"every reply identical" if every else "replies differ"}</b> '
                    f"({esc(share_text(100 * k / n, n, counts=True))}, over {len(share)} benchmark"
                    f"{'s' if len(share) != 1 else ''})")
    if not said:
        return ""
    return ("Replies at two batch settings, per rung from its own replies: " + "; ".join(said)
            + ("" if not unmeasured else
               f'; <span class="not-measured" data-batch-invariant="not measured">{", ".join(unmeasured)}: '
               "not measured for this rung</span>") + ".")


def batch_invariance_line(df: pd.DataFrame) -> str:
    """Batch invariance on this card, per family and rung from each rung's own replies at two batch settings."""
    fams = [f for f in sorted(df["family"].dropna().unique())]
    words = [(f, batch_invariance_words(df[df["family"] == f])) for f in fams]
    words = [(f, w) for f, w in words if w]
    if not words:
        return ('<p class="note" id="batch-invariant">Batch invariance: not measured on this card (no noise-floor '
                "series: <code>generation.noise_floor</code>).</p>")
    return ('<p class="how" id="batch-invariant">Batch invariance (replies byte-identical between two batch settings), '
            "stated per rung from that rung's own replies; a rung without a second run at another batch setting is "
            "not measured, whatever the reference's replies did: "
            + " ".join(f"<b>{esc(f)}</b>: {w}" for f, w in words)
            + " Every rung's flips carry the noise floor below.</p>")


def flips_section(df: pd.DataFrame, card: str) -> str:
    """Per point and benchmark: its flips against the reference, beside the noise floor of its family's
    reference (the same rung generated again at another batch setting), and which of the two is larger."""
    flip_names = dv.flip_metrics()
    # all of a point's items: the rows per context length are drawn in the long-context section
    g = dv.whole(dv.figures(df[df["metric"].isin(flip_names) & df["n_ctx"].isna()]))
    if g.empty:
        return '<p class="note">No flip rows in the dataset for this card (flips need per-item verdicts).</p>'
    noise = dv.whole(dv.figures(df[df["metric"].isin(qmetrics.in_group("noise")) & df["n_ctx"].isna()]))
    first, rest = [m for m in flip_names if m == "flip_rate"], [m for m in flip_names if m != "flip_rate"]

    def cell(rows, m):
        r = rows[rows["metric"] == m]
        return "—" if r.empty else rcell(r.iloc[0])

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
        st = qstatus.worst(p["status"])
        cells.append(badge(st))
        rows.append(cells)
        classes.append(f"st-row-{st}")
    heads = (["family", "rung", "KV", "benchmark"] + [esc(m) for m in first]
             + ["noise floor: flip rate", "flip rate against the noise floor"] + [esc(m) for m in rest]
             + ["noise floor: identical replies", "items", "status"])
    return (batch_invariance_line(df) + '<p class="how">Flips against the reference rung (same card, KV type and settings), beside the noise '
            "floor: the reference rung generated again at another batch setting. A flip rate not above the noise "
            "floor is no loss the harness can attribute to quantization; whether a loss is significant is the "
            "paired verdict's (the answer above).</p>" + table(heads, rows, f"table-flips-{card}", classes))


def manifest_section(df: pd.DataFrame, card: str) -> str:
    cols = ["manifest_hash", "gguf_sha256", "data_hash", "harness_version", "llama_cpp_python", "libllama_sha256",
            "card_name", "measured_at"]
    g = df.groupby(dv.POINT + ["benchmark"], dropna=False).agg(
        {**{c: "first" for c in cols}, "status": qstatus.worst,
         # a missing reason reads as NaN where pandas stores strings as its str dtype
         "status_reason": lambda s: "; ".join(sorted(set(x for x in s if isinstance(x, str) and x))),
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
