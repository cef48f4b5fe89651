"""Read-side helpers over the Parquet dataset, shared by the report and the recommendation.

Both read nothing but ``points.parquet``. A *point* is (card, family, rung, kv); its figures are
the long-form rows of ``quantladder.dataset``. The conventions this module relies on:

- memory rows (benchmark ``memory``): ``weights_bytes``, ``kv_bytes_predicted`` (one row per
  ``n_ctx``), ``compute_buffer_bytes``, ``predicted_total_bytes``, ``peak_rss_bytes`` (or
  ``peak_vram_bytes`` on a GPU);
- speed rows: ``pp_tokens_per_s``, ``tg_tokens_per_s``; energy rows: ``joules_per_token``;
- per-item generation hashes (cross-card view): metric ``generation_hash``, ``subset`` = item id,
  ``value`` = the first 52 bits of the sha256 of the generated text (see ``generation_hash_value``);
- degenerate-loop counts: metrics whose name starts with ``degenerate``;
- flips vs the reference: ``flip_rate``, ``flips_right_to_wrong``, ``flips_wrong_to_right``.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pandas as pd

from .dataset import COLUMNS
from .errors import DataError

POINT = ["card", "family", "rung", "kv"]
COST_BENCHMARKS = ("memory", "speed", "energy")
# Rows that are not figures to plot: per-item hashes and the placeholder row of a blocked benchmark.
NOT_FIGURES = ("generation_hash", "status")
# Figures the curves do not plot against bits per weight (it is the x axis itself).
NOT_CURVES = ("bits_per_weight",)
FLIP_METRICS = ("flip_rate", "flips_right_to_wrong", "flips_wrong_to_right")
# Perplexity writes ~25 figures; these are the ones a reader compares rungs by.
PERPLEXITY_HEADLINES = ("ppl", "kld_mean", "kld_p99_9", "same_top_token")
# The one figure per task benchmark that the recommendation weights, in order of preference.
TASK_HEADLINE_NAMES = ("accuracy", "pass_at_1", "pass@1", "score_avg", "score", "accuracy_items_run")
# Relative to each family's own reference: comparable within a family, not across families.
RELATIVE_SCORE = {"perplexity": "same_top_token", "kld": "same_top_token"}
BAD_STATUSES = ("blocked", "failed")
CAVEAT_STATUSES = ("unanchored", "incomplete")
# From best to worst: the status a point shows when its rows differ.
STATUSES_ORDER = ("ok", "unanchored", "incomplete", "failed", "blocked")
HASH_BITS = 52  # a float64 holds integers up to 2**53 exactly


def generation_hash_value(text: str) -> float:
    """The `value` of a ``generation_hash`` row: 52 bits of sha256(text), exact in a float64."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return float(int(digest[: HASH_BITS // 4], 16))


def load(path: str | Path) -> pd.DataFrame:
    """The dataset as a DataFrame, checked against the documented columns."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"dataset {path} does not exist (build it with the aggregate rule first)")
    df = pd.read_parquet(path)
    missing = [c for c, _, _ in COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"dataset {path}: missing columns {missing}; it was not written by quantladder.dataset")
    for col in ("subset", "status", "status_reason", "unit", "kv", "rung", "family", "card", "benchmark", "metric"):
        df[col] = df[col].astype("object").where(df[col].notna(), None)
    df["status"] = df["status"].fillna("ok")
    return df


def figures(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that carry a plottable figure."""
    return df[~df["metric"].isin(NOT_FIGURES) & df["value"].notna()]


def whole(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that stand for a whole benchmark: per (point, benchmark, metric), the rows without a
    subset, or — when a metric only ever has one subset (speed's ``tg128``, BFCL's ``items_run``) —
    those. A metric split over many subsets with no whole row is left out."""
    if rows.empty:
        return rows
    keys = POINT + ["benchmark", "metric"]
    sub = rows["subset"]
    has_null = sub.isna().groupby([rows[k] for k in keys], dropna=False).transform("any")
    n_sub = sub.groupby([rows[k] for k in keys], dropna=False).transform("nunique")
    return rows[sub.isna() | (~has_null & (n_sub == 1))]


def point_key(row) -> tuple:
    return tuple(row[c] for c in POINT)


def point_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point: its rung facts (bits per weight, bytes, params, reference flag)."""
    agg = (df.groupby(POINT, dropna=False)
             .agg(bits_per_weight=("bits_per_weight", "max"), file_bytes=("file_bytes", "max"),
                  n_params=("n_params", "max"), is_reference=("is_reference", "max"),
                  type_k=("type_k", "first"), type_v=("type_v", "first"))
             .reset_index())
    return agg.sort_values(["card", "family", "bits_per_weight", "kv"], ascending=[True, True, False, True])


def pick_ctx(rows: pd.DataFrame, ctx: int | None) -> pd.Series | None:
    """The row measured at the context that covers ``ctx``: the smallest n_ctx >= ctx, else the largest.

    Rows without n_ctx are used when nothing else is there. With ctx None, the largest n_ctx.
    """
    if rows.empty:
        return None
    with_ctx = rows[rows["n_ctx"].notna()]
    if with_ctx.empty:
        return rows.iloc[0]
    if ctx is not None:
        above = with_ctx[with_ctx["n_ctx"] >= ctx]
        if not above.empty:
            return above.loc[above["n_ctx"].idxmin()]
    return with_ctx.loc[with_ctx["n_ctx"].idxmax()]


def headline_metrics(df: pd.DataFrame, benchmark: str) -> list[str]:
    """The quality figures of a benchmark that Pareto fronts and summaries show."""
    rows = whole(figures(df[df["benchmark"] == benchmark]))
    names = list(dict.fromkeys(rows["metric"]))
    if benchmark == "perplexity":
        return [m for m in PERPLEXITY_HEADLINES if m in names]
    out = []
    for m in names:
        if m in FLIP_METRICS or m.startswith("degenerate"):
            continue
        if (rows.loc[rows["metric"] == m, "higher_is_better"] == True).any():  # noqa: E712
            out.append(m)
    return out


def score_metric(df: pd.DataFrame, benchmark: str) -> str | None:
    """The one figure of a benchmark that the recommendation weights (a % where higher is better)."""
    if benchmark in RELATIVE_SCORE:
        m = RELATIVE_SCORE[benchmark]
        return m if (df["metric"] == m).any() else None
    rows = whole(figures(df[df["benchmark"] == benchmark]))
    good = rows[(rows["unit"] == "%") & (rows["higher_is_better"] == True)]  # noqa: E712
    names = [m for m in dict.fromkeys(good["metric"]) if m not in FLIP_METRICS and not m.startswith("degenerate")]
    for pref in TASK_HEADLINE_NAMES:
        if pref in names:
            return pref
    return names[0] if names else None


def task_benchmarks(df: pd.DataFrame) -> list[str]:
    return sorted(b for b in df["benchmark"].dropna().unique() if b not in COST_BENCHMARKS)


def fmt_bytes(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "—"
    n = float(n)
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_value(value, stderr=None, unit: str | None = None) -> str:
    """'12.3 ± 0.4 %': the figure, its ± when it is a statistic, and its unit."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if unit == "bytes":
        s = fmt_bytes(value)
        if stderr is not None and not (isinstance(stderr, float) and math.isnan(stderr)):
            s += f" ± {fmt_bytes(stderr)}"
        return s
    has_err = stderr is not None and not (isinstance(stderr, float) and math.isnan(stderr))
    if has_err and 0 < abs(stderr) < 1e5 and abs(value) < 1e6:
        # ± with two significant digits, the value rounded to the same place
        d = min(6, max(0, 1 - math.floor(math.log10(abs(stderr)))))
        s = f"{value:.{d}f} ± {stderr:.{d}f}"
    else:
        s = _num(value)
        if has_err:
            s += f" ± {_num(stderr)}"
    if unit and unit != "1":
        s += f" {unit}"
    return s


def _num(x: float) -> str:
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.3g}"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.4g}"
