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
from . import measures, metrics
from . import status as qstatus
from .dataset import COLUMNS
from .errors import DataError

STRING_COLUMNS = [name for name, typ, _ in COLUMNS if str(typ) == "string"]

POINT = ["card", "family", "rung", "kv"]
COST_BENCHMARKS = measures.cost_measures()  # memory, speed, energy: their declarations say so
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


def whole(rows: pd.DataFrame | list[dict]) -> pd.DataFrame | list[dict]:
    """The rows that stand for the whole set, as each metric's declaration says: the row without a
    subset (``null``), the metric's one subset per point (``only``: llama-bench's ``tg128``, a memory
    probe's name), or none (``none``: per-subset figures such as RULER's per-task score).

    ``rows``: a frame of the dataset's rows, or plain records (the recommender's, grouped once for
    speed); the answer is of the same kind.
    """
    if isinstance(rows, pd.DataFrame):
        if rows.empty:
            return rows
        return rows[_stands_for_whole(rows["metric"].map(metrics.whole_kind), rows["subset"].isna())]
    return [r for r in rows if _stands_for_whole(metrics.whole_kind(r["metric"]), pd.isna(r["subset"]))]


def _stands_for_whole(kind, no_subset):
    """The rule, written once for a record's scalars and a frame's columns alike (``|`` and ``&``
    serve both)."""
    return (kind == "only") | ((kind == "null") & no_subset)


def point_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point: its rung facts (bits per weight, bytes, params, reference flag)."""
    agg = (df.groupby(POINT, dropna=False)
             .agg(bits_per_weight=("bits_per_weight", "max"), file_bytes=("file_bytes", "max"),
                  n_params=("n_params", "max"), is_reference=("is_reference", "max"),
                  type_k=("type_k", "first"), type_v=("type_v", "first"))
             .reset_index())
    return agg.sort_values(["card", "family", "bits_per_weight", "kv"], ascending=[True, True, False, True])


def pick_ctx(rows: pd.DataFrame | list[dict], ctx: int | None) -> pd.Series | dict | None:
    """The row measured at the context that covers ``ctx``: the smallest n_ctx >= ctx, else the largest.

    Rows without n_ctx are used when nothing else is there. With ctx None, the largest n_ctx.
    ``rows``: a frame of the dataset's rows (the row comes back as a Series) or plain records (a record).
    """
    frame = isinstance(rows, pd.DataFrame)
    n_ctxs = list(rows["n_ctx"]) if frame else [r.get("n_ctx") for r in rows]
    if not n_ctxs:
        return None
    known = [(int(n), i) for i, n in enumerate(n_ctxs) if not pd.isna(n)]
    if not known:
        at = 0
    else:
        above = [(n, i) for n, i in known if ctx is not None and n >= ctx]
        at = min(above, key=lambda x: x[0])[1] if above else max(known, key=lambda x: x[0])[1]
    return rows.iloc[at] if frame else rows[at]


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
    return benchmark in measures.point_measures()


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


# ------------------------------------------------------------------------------------------ matched size

def source_of(provenance) -> str:
    """Where a rung's file comes from, in one word for a `source` column: "made here" (the reference and
    every rung quantized from it) or "uploader" (a third-party file, the dataset's ``provenance``
    "third party ..."); a dataset from before the column says "made here" for every rung it made."""
    p = "" if provenance is None or (isinstance(provenance, float) and math.isnan(provenance)) else str(provenance)
    return "uploader" if p.startswith("third party") else "made here"


def _signed(x: float, text: str) -> str:
    return ("+" if x > 0 else "−" if x < 0 else "±") + text


def size_gap(bpw, nbytes, other_bpw, other_bytes, short: bool = False) -> str:
    """How much larger (+) or smaller (−) one rung's file is than another's, in both units a reader
    compares rungs by: "+0.52 bits per weight, +31.2 MiB (+4.1 %)" (``short``: "+0.52 bits, +31.2 MiB").
    A side whose figure is not recorded is said so, never taken as 0."""
    parts = []
    if _known(bpw) and _known(other_bpw):
        d = float(bpw) - float(other_bpw)
        parts.append(_signed(d, f"{abs(d):.2f} bits" + ("" if short else " per weight")))
    else:
        parts.append("bits per weight not recorded")
    if _known(nbytes) and _known(other_bytes):
        d = float(nbytes) - float(other_bytes)
        rel = (f" ({_signed(d, f'{100 * abs(d) / float(other_bytes):.1f} %')})" if float(other_bytes) > 0 and not short
               else "")
        parts.append(_signed(d, fmt_bytes(abs(d))) + rel)
    else:
        parts.append("file size not recorded")
    return ", ".join(parts)


def _known(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def at_bpw(ladder: list[tuple[str, float, float]], bpw: float, *, higher_is_better: bool | None = None) -> dict:
    """A family's own ladder read at another file's size: ``ladder`` is (rung, bits per weight, value)
    for the rungs made here, ``bpw`` the size asked for. Linear in bits per weight between the two
    measured neighbours (the nearest rung at or below and the nearest at or above):

        value = lo.value + (bpw − lo.bpw) · (hi.value − lo.value) / (hi.bpw − lo.bpw)

    Returns ``{"value", "interpolated", "below": (rung, bpw, value), "above": (...), "text"}``; a rung
    measured at exactly that size is returned as measured (``interpolated`` False). Outside the measured
    range the figure is absent: ``{"value": None, "reason": ...}`` (an extrapolation would claim what the
    ladder never measured). Several rungs at one size (Q4_K_M with and without a matrix) stand for
    that size by the better of their figures when ``higher_is_better`` is given (the family's best at
    that size: "a third-party file beats ours" is then against our best), else the figure is absent
    with the reason."""
    pts = [(str(r), float(b), float(v)) for r, b, v in ladder if _known(b) and _known(v)]
    if not _known(bpw):
        return {"value": None, "reason": "the file's bits per weight are not recorded"}
    bpw = float(bpw)
    if not pts:
        return {"value": None, "reason": "no rung made here has this figure"}
    by_size: dict[float, list[tuple[str, float, float]]] = {}
    for p in pts:
        by_size.setdefault(p[1], []).append(p)
    sizes = sorted(by_size)

    def one(size: float):
        group = by_size[size]
        if len({v for _, _, v in group}) == 1:
            return group[0], ""
        if higher_is_better is None:
            return None, (f"{', '.join(r for r, _, _ in group)} share {size:.2f} bits per weight with different "
                          "figures")
        best = (max if higher_is_better else min)(group, key=lambda p: p[2])
        return best, f" (the better of {', '.join(r for r, _, _ in group)})"

    if bpw < sizes[0] - 1e-9 or bpw > sizes[-1] + 1e-9:
        lo, hi = by_size[sizes[0]][0], by_size[sizes[-1]][0]
        return {"value": None, "reason": (f"{bpw:.2f} bits per weight is outside the sizes measured here "
                                          f"({lo[0]} {sizes[0]:.2f} … {hi[0]} {sizes[-1]:.2f}): not extrapolated")}
    exact = next((s for s in sizes if abs(s - bpw) <= 1e-9), None)
    if exact is not None:
        p, note = one(exact)
        if p is None:
            return {"value": None, "reason": note}
        return {"value": p[2], "interpolated": False, "below": p, "above": p,
                "text": f"{p[0]} at the same size, {p[1]:.2f} bits per weight{note}"}
    s_lo = max(s for s in sizes if s < bpw)
    s_hi = min(s for s in sizes if s > bpw)
    (lo, n_lo), (hi, n_hi) = one(s_lo), one(s_hi)
    if lo is None or hi is None:
        return {"value": None, "reason": n_lo if lo is None else n_hi}
    value = lo[2] + (bpw - lo[1]) * (hi[2] - lo[2]) / (hi[1] - lo[1])
    return {"value": value, "interpolated": True, "below": lo, "above": hi,
            "text": (f"interpolated at {bpw:.2f} bits per weight between {lo[0]}{n_lo} ({lo[1]:.2f}) and "
                     f"{hi[0]}{n_hi} ({hi[1]:.2f})")}


# ------------------------------------------------------------------------------------------ speed

SPEED_METRIC = "tg_tokens_per_s"
# the same test after D tokens in the cache (measures.speed.depths, llama-bench -d): n_ctx D + N
# and at B sequences together (measures.speed.parallel, llama-batched-bench -npl B): one sequence's, n_parallel B
SPEED_METRICS = (SPEED_METRIC, "tg_tokens_per_s_at_depth", "tg_tokens_per_s_parallel")


def speed_at(rows: list[dict], ctx: int, parallel: int = 1) -> dict:
    """A point's generation speed for a user's context and concurrency, from its measured speed rows
    (plain records with ``value``, ``stderr``, ``n_ctx``, ``subset`` and, where the producer recorded
    one, ``n_parallel``: its ``SPEED_METRICS`` rows). llama-bench's tgN (quantladder.measures.speed)
    decodes one sequence from an empty cache, so a row without ``n_parallel`` is one sequence at n_ctx N;
    at a depth D (``tgN@dD``) at n_ctx D + N. The row is the one measured
    at that concurrency and at the context that covers ``ctx`` (the smallest n_ctx >= ctx), else the
    largest measured, said so: generation at a longer context reads a longer cache, so the figure is
    then an upper bound on the speed there. Returns ``{"value", "stderr", "n_ctx", "n_parallel", "note"}``
    or ``{"value": None, "reason": ...}`` (no speed row, or none at that concurrency: per-sequence speed
    at N sequences is not one sequence's)."""
    rows = [r for r in rows if _known(r.get("value"))]
    if not rows:
        return {"value": None, "reason": f"no {SPEED_METRIC} row (the speed measure did not run for this point)"}
    par = [r for r in rows if int(r.get("n_parallel") or 1) == int(parallel)]
    if not par:
        have = sorted({int(r.get("n_parallel") or 1) for r in rows})
        return {"value": None, "reason": (f"generation speed measured with {', '.join(map(str, have))} sequence(s) "
                                          f"at a time, not {parallel}")}
    r = pick_ctx(par, ctx)
    n_ctx = int(r["n_ctx"]) if _known(r.get("n_ctx")) else None
    note = ("" if n_ctx is not None and n_ctx >= ctx else
            f"{SPEED_METRIC} measured at n_ctx {n_ctx if n_ctx is not None else 'unknown'}, below the {ctx} tokens "
            "asked: an upper bound on the speed there")
    return {"value": float(r["value"]), "stderr": r.get("stderr") if _known(r.get("stderr")) else None,
            "n_ctx": n_ctx, "n_parallel": int(parallel), "subset": r.get("subset"), "note": note}
