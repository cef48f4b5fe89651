"""Two datasets compared figure by figure: did a change of code, of the llama.cpp build or of the config
move any figure the first run measured?

A row of ``points.parquet`` is named by its point and figure (:data:`KEY`: card, family, rung, KV
types, benchmark, metric, subset, context and concurrency); rows both datasets name are compared on
what the figure says (:data:`FIGURE`: the value, its uncertainty, its status and its paired
comparison). Figures are compared exactly by default: the same card and config give byte-identical
figures (DESIGN.md), so any difference is a finding. Figures read off a clock or a sensor (speed,
energy, the measured peak memory, generation seconds: ``Metric.clocked``) differ between any two runs;
they are left out of the comparison and summarised by their ratio instead. Provenance columns (when,
which harness version, the manifest hash) are expected to differ and are not compared.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import catalog  # noqa: F401  (every figure declared: the clocked ones are known)
from . import metrics
from .errors import DataError

KEY = ("card", "family", "rung", "kv", "type_k", "type_v", "benchmark", "metric", "subset", "n_ctx", "n_parallel")
FIGURE = ("value", "unit", "stderr", "n", "ci_low", "ci_high", "n_clusters", "status", "delta", "delta_stderr",
          "delta_ci_low", "delta_ci_high", "delta_p", "delta_p_adjusted", "delta_mde", "verdict")


def _read(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if path.is_dir():
        path = path / "points.parquet"
    if not path.is_file():
        raise DataError(f"diff: {path} is no dataset (a points.parquet, or the results/<card> folder holding one)")
    df = pd.read_parquet(path)
    missing = [c for c in ("family", "rung", "benchmark", "metric", "value") if c not in df.columns]
    if missing:
        raise DataError(f"diff: {path} has no column {missing}: not a quantladder dataset")
    df = df.copy()
    for c in KEY:
        if c not in df.columns:
            df[c] = None  # an older dataset without the column: every row null there
        df[c] = df[c].map(_key_part)
    df.attrs["path"] = str(path)
    return df


def _key_part(v) -> str | None:
    """A key column's value as text, the same whichever dtype the column was read with (an int column
    with nulls reads as floats: 512.0 is 512)."""
    if v is None or pd.isna(v):
        return None
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _na(v) -> bool:
    return v is None or (not isinstance(v, str) and bool(pd.isna(v)))


#: what a clocked figure's rows are still compared on: what was measured and whether it counts, not its value
CLOCKED_FIGURE = ("unit", "n", "status")


def _clocked() -> set[str]:
    return {name for name, m in metrics.registry().items() if m.clocked}


def _differs(x: pd.Series, y: pd.Series, rtol: float) -> pd.Series:
    """Row by row: do the two columns differ (both null is no difference; numbers within ``rtol``)."""
    xn, yn = x.isna(), y.isna()
    out = xn != yn
    both = ~xn & ~yn
    if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y) and not pd.api.types.is_bool_dtype(x):
        xf, yf = x[both].astype(float), y[both].astype(float)
        out[both] = ~((xf == yf) | ((xf - yf).abs() <= rtol * pd.concat([xf.abs(), yf.abs()], axis=1).max(axis=1)))
    else:
        out[both] = x[both].astype(str) != y[both].astype(str)
    return out


def compare(old: str | Path, new: str | Path, rtol: float = 0.0) -> dict:
    """The comparison of two datasets: rows each holds alone, the figures that differ on rows both hold,
    and the clocked figures' ratios (new / old)."""
    a, b = _read(old), _read(new)
    for name, df in (("old", a), ("new", b)):
        dup = df.duplicated(list(KEY))
        if dup.any():
            first = df[dup].iloc[0]
            raise DataError(f"diff: {df.attrs['path']} ({name}) names {int(dup.sum())} rows twice, e.g. "
                            + ", ".join(f"{k}={first[k]}" for k in KEY))
    cols = [c for c in FIGURE if c in a.columns and c in b.columns]
    keys = list(KEY)
    # the key's nulls as a marker merge can match (pandas matches NaN keys, but not None in every version)
    ka, kb = (df[keys].fillna("\0") for df in (a, b))
    m = pd.concat([ka, a[cols].add_suffix("@old")], axis=1).merge(
        pd.concat([kb, b[cols].add_suffix("@new")], axis=1), on=keys, how="outer", indicator=True)
    m[keys] = m[keys].replace("\0", None)
    both = m[m["_merge"] == "both"].reset_index(drop=True)
    clocked = both["metric"].isin(_clocked())
    differ = []
    for c in cols:
        d = _differs(both[f"{c}@old"], both[f"{c}@new"], rtol)
        if c not in CLOCKED_FIGURE:
            d &= ~clocked
        for _, r in both[d].iterrows():
            differ.append({**{k: _plain(r[k]) for k in KEY}, "column": c, "old": _plain(r[f"{c}@old"]),
                           "new": _plain(r[f"{c}@new"])})
    differ.sort(key=lambda d: tuple("" if d[k] is None else str(d[k]) for k in KEY) + (cols.index(d["column"]),))
    ratios = {}
    timed = both[clocked]
    for metric, g in timed.groupby("metric"):
        va, vb = g["value@old"].astype(float), g["value@new"].astype(float)
        ok = va.notna() & vb.notna() & (va != 0)
        r = vb[ok] / va[ok]
        ratios[metric] = {"rows": len(g), "with_values": int(ok.sum()),
                          **({"ratio_median": float(r.median()), "ratio_min": float(r.min()),
                              "ratio_max": float(r.max())} if len(r) else {})}

    def alone(side: str) -> dict[str, int]:
        rows = m[m["_merge"] == side]
        return {f"{f} / {r} / {bm}": int(n) for (f, r, bm), n in
                rows.groupby(["family", "rung", "benchmark"], dropna=False).size().items()}

    return {
        "old": a.attrs["path"], "new": b.attrs["path"], "rtol": rtol,
        "rows_old": len(a), "rows_new": len(b), "rows_both": len(both), "compared": int((~clocked).sum()),
        "columns_compared": cols,
        "columns_only_old": [c for c in FIGURE if c in a.columns and c not in b.columns],
        "columns_only_new": [c for c in FIGURE if c in b.columns and c not in a.columns],
        "only_old": alone("left_only"), "only_new": alone("right_only"),
        "differ": differ, "clocked": ratios,
    }


def _plain(v):
    if _na(v):
        return None
    return v.item() if hasattr(v, "item") else v


def equal(result: dict, shared_only: bool = False) -> bool:
    """No figure differs on the rows both hold, and (unless ``shared_only``) neither holds rows of its own."""
    return not result["differ"] and (shared_only or not (result["only_old"] or result["only_new"]))


def format_text(result: dict, limit: int = 40) -> str:
    r = result
    tol = "exactly" if not r["rtol"] else f"within a relative {r['rtol']:g}"
    lines = [f"old: {r['old']} ({r['rows_old']} rows)", f"new: {r['new']} ({r['rows_new']} rows)",
             f"rows both hold: {r['rows_both']}; compared {tol}: {r['compared']} "
             f"(the clocked figures' {r['rows_both'] - r['compared']} rows on {', '.join(CLOCKED_FIGURE)} only, "
             "their values by the ratio below)"]
    for side in ("old", "new"):
        if r[f"columns_only_{side}"]:
            lines.append(f"columns only the {side} dataset has (not compared): {', '.join(r[f'columns_only_{side}'])}")
        if r[f"only_{side}"]:
            lines.append(f"rows only the {side} dataset holds (family / rung / benchmark: rows):")
            lines += [f"  {k}: {n}" for k, n in r[f"only_{side}"].items()]
    if r["differ"]:
        rows = {tuple(d[k] for k in KEY) for d in r["differ"]}
        lines.append(f"DIFFER: {len(r['differ'])} figures on {len(rows)} rows:")
        for d in r["differ"][:limit]:
            where = " ".join(f"{k}={d[k]}" for k in ("family", "rung", "kv", "benchmark", "metric", "subset", "n_ctx",
                                                     "n_parallel") if d[k] is not None)
            lines.append(f"  {where}: {d['column']} {d['old']!r} -> {d['new']!r}")
        if len(r["differ"]) > limit:
            lines.append(f"  ... and {len(r['differ']) - limit} more (--json lists every one)")
    else:
        lines.append(f"every compared figure is equal ({r['compared']} rows x {len(r['columns_compared'])} columns)")
    if r["clocked"]:
        lines.append("clocked figures, new / old (they vary between runs on the same card):")
        for m, s in r["clocked"].items():
            if "ratio_median" in s:
                lines.append(f"  {m}: median {s['ratio_median']:.3f}, range {s['ratio_min']:.3f}-"
                             f"{s['ratio_max']:.3f} over {s['with_values']} of its {s['rows']} rows")
            else:
                lines.append(f"  {m}: no row with a value on both sides ({s['rows']} rows)")
    return "\n".join(lines)
