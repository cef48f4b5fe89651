"""The report's fidelity table: per task point, what the rung changes against the reference rung's
own replies (quantladder.measures.fidelity), beside the exam's flips and identical replies."""

from __future__ import annotations

import pandas as pd

from .. import dataset_view as dv
from .. import metrics as qmetrics
from .. import status as qstatus
from .markup import badge, esc, rcell, table

# (metric, subset, heading): the fidelity figures, then the exam's own comparison beside them
COLUMNS = (
    ("teacher_kld", "reference_replies", "KLD on the reference's replies"),
    ("teacher_same_top", "reference_replies", "same top token"),
    ("teacher_kld", "logged_replies", "KLD on logged replies"),
    ("first_divergence_token", None, "first differing token"),
    ("reply_length_change", None, "reply length change"),
    ("degenerate_change", None, "loop share change"),
    ("identical_to_reference", None, "identical replies"),
    ("flip_rate", None, "flip rate"),
)


def fidelity_section(df: pd.DataFrame, card: str) -> str:
    names = qmetrics.in_group("fidelity")
    fid = dv.figures(df[df["metric"].isin(names)])
    if fid.empty:
        return ('<p class="note">No fidelity rows for this card (config `fidelity.benchmarks` lists the task '
                "benchmarks that get them).</p>")
    rows, classes = [], []
    wanted = {m for m, _, _ in COLUMNS}
    g = dv.figures(df[df["metric"].isin(wanted)])
    g = g[g.set_index(dv.POINT + ["benchmark"]).index.isin(fid.set_index(dv.POINT + ["benchmark"]).index)]
    g = g.sort_values(["family", "benchmark", "bits_per_weight", "kv"], ascending=[True, True, False, True])
    for key, p in g.groupby(dv.POINT + ["benchmark"], dropna=False, sort=False):
        _, family, rung, kv, bench = key
        cells = [esc(family), esc(rung), esc(kv), esc(bench)]
        for m, subset, _ in COLUMNS:
            r = p[(p["metric"] == m) & (p["subset"].isna() if subset is None else p["subset"] == subset)]
            cells.append("—" if r.empty or pd.isna(r["value"].iloc[0])
                         else rcell(r.iloc[0]))
        st = qstatus.worst(p["status"])
        cells.append(badge(st))
        rows.append(cells)
        classes.append(f"st-row-{st}")
    heads = ["family", "rung", "KV", "benchmark"] + [esc(h) for _, _, h in COLUMNS] + ["status"]
    return ('<p class="how">Teacher-forced fidelity: the rung forced through the reference rung\'s own replies (and '
            "the replies a traffic file logged), token by token: its KL divergence from the reference's next-token "
            "distribution and how often both put the same token on top, measured on identical tokens and so free "
            "of sampling paths and batch mates; beside it, where the replies first part, how their length and loop "
            "share change (rung − reference, paired ±), and the exam's identical replies and flips.</p>"
            + table(heads, rows, f"table-fidelity-{card}", classes))
