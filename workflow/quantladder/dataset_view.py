"""Read-side helpers over the Parquet dataset, shared by the report and the recommendation.

Both read nothing but ``points.parquet``. A *point* is (card, family, rung, kv); its figures are the
long-form rows of ``quantladder.dataset``. What a metric means — its unit, direction, which rows stand
for the whole set, whether it is a headline or a recommendation score — comes from the metric
registry (``quantladder.metrics``), never from name lists kept here.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from . import catalog  # noqa: F401  -- every figure declared: the registry read below is whole
from . import metrics
from . import status as qstatus
from .dataset import COLUMNS
from .errors import DataError

STRING_COLUMNS = [name for name, typ, _ in COLUMNS if str(typ) == "string"]

POINT = ["card", "family", "rung", "kv"]
COST_BENCHMARKS = ("memory", "speed", "energy")
# Figures the curves do not plot against bits per weight (it is the x axis itself).
NOT_CURVES = ("bits_per_weight",)
BAD_STATUSES = qstatus.BAD
CAVEAT_STATUSES = qstatus.CAVEAT
STATUSES_ORDER = qstatus.ORDER


def not_figures() -> set[str]:
    """Rows that are not figures to plot: per-item rows and the placeholder row of a blocked benchmark."""
    return metrics.per_item_metrics() | {"status"}


def flip_metrics() -> list[str]:
    return metrics.in_group("flips")


def load(path: str | Path) -> pd.DataFrame:
    """The dataset as a DataFrame, checked against the documented columns."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"dataset {path} does not exist (build it with the aggregate rule first)")
    df = pd.read_parquet(path)
    missing = [c for c, _, _ in COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"dataset {path}: missing columns {missing}; it was written by another quantladder "
                        "(or not by quantladder.dataset): rebuild it from the points with "
                        "`snakemake --cores all --forcerun aggregate`")
    for col in STRING_COLUMNS:  # a missing string is None, never NaN
        df[col] = df[col].astype("object").where(df[col].notna(), None)
    df["status"] = df["status"].fillna("ok")
    return df


def figures(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that carry a plottable figure."""
    return df[~df["metric"].isin(not_figures()) & df["value"].notna()]


def whole(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that stand for the whole set, as each metric's declaration says: the row without a
    subset (``null``), the metric's one subset per point (``only``: llama-bench's ``tg128``, a memory
    probe's name), or none (``none``: per-subset figures such as RULER's per-task score)."""
    if rows.empty:
        return rows
    kind = rows["metric"].map(metrics.whole_kind)
    return rows[((kind == "null") & rows["subset"].isna()) | (kind == "only")]


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
    """The quality figures of a benchmark that Pareto fronts and summaries show (the registry's
    headlines of that benchmark that the dataset holds)."""
    have = set(whole(figures(df[df["benchmark"] == benchmark]))["metric"])
    return [m for m in metrics.headlines(benchmark) if m in have]


def score_metric(df: pd.DataFrame, benchmark: str) -> str | None:
    """The one figure of a benchmark that the recommendation weighs (the registry's ``score_for``)."""
    m = metrics.score_metric(benchmark)
    if m is None:
        return None
    return m if ((df["benchmark"] == benchmark) & (df["metric"] == m) & df["value"].notna()).any() else None


def relative_score(benchmark: str) -> bool:
    """A score relative to each family's own reference (perplexity's same-top-token rate): comparable
    within a family, not across families."""
    return benchmark in COST_BENCHMARKS + ("perplexity",)


def task_benchmarks(df: pd.DataFrame) -> list[str]:
    """Every quality benchmark in the dataset (perplexity and the task benchmarks), not the costs."""
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
