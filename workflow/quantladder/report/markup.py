"""The report's HTML pieces: escaping, status badges, tables, formatted values, deltas and verdicts,
and the one line that stands for a figure that does not vary along the ladder."""

from __future__ import annotations

import html
import math

import pandas as pd

from .. import dataset_view as dv
from ..stats.share import share_interval

BYTES_SCALE = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
VERDICT_CLASS = {"loss": "v-loss", "gain": "v-gain", "no loss detectable": "v-none", "loss within noise": "v-noise",
                 "gain within noise": "v-noise"}
Z95 = 1.959964  # the normal 95 % quantile: the intervals of unpaired differences (findings, cross-card)


def esc(x) -> str:
    return html.escape("" if x is None else str(x))


def isnan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or (x is pd.NA)


def badge(status: str | None) -> str:
    st = status or "ok"
    return f'<span class="badge st-{esc(st)}">{esc(st)}</span>'


def short(h) -> str:
    if isnan(h) or not h:
        return "—"
    return f'<code title="{esc(h)}">{esc(str(h)[:12])}</code>'


def bytes_scale(values) -> tuple[str, float]:
    vmax = max((abs(v) for v in values if not isnan(v)), default=0)
    for unit, k in BYTES_SCALE:
        if vmax >= k:
            return unit, float(k)
    return "bytes", 1.0


def unit_axis(unit: str | None, values) -> tuple[str, float]:
    """Axis unit label and divisor (bytes are shown in KiB/MiB/GiB)."""
    if unit == "bytes":
        return bytes_scale(values)
    if unit in (None, "", "1"):
        return "1", 1.0
    return unit, 1.0


def table(headers: list[str], rows: list[list[str]], table_id: str, row_classes: list[str] | None = None,
          caption: str | None = None) -> str:
    """An HTML table; cells are already-escaped HTML."""
    out = [f'<div class="tablewrap"><table id="{esc(table_id)}">']
    if caption:
        out.append(f"<caption>{caption}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr></thead><tbody>")
    for i, r in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _pct(x: float, width: float) -> str:
    """An end of a share's interval, in %: as many decimals as the interval's width needs (2 significant
    digits of it), no trailing ".0" at 0 and 100."""
    if x <= 0 or x >= 100:
        return f"{x:.0f}"
    d = 0 if width >= 10 else 1 if width >= 1 else min(4, 1 - math.floor(math.log10(width)))
    text = f"{x:.{d}f}"
    if float(text) in (0.0, 100.0):  # an end near 0 or 100 that is not 0 or 100: its own 2 significant digits
        text = f"{x:.2g}" if x < 50 else f"{100 - float(f'{100 - x:.2g}'):.{1 - math.floor(math.log10(100 - x))}f}"
    return text


def share_count(value, n) -> tuple[int, int] | None:
    """(k, n) of a share in % of n items, when value·n/100 is a count (a plain share); None otherwise
    (a weighted mean of items, a share of a sample of unknown size)."""
    if isnan(value) or isnan(n) or not n or n <= 0:
        return None
    k = float(value) * float(n) / 100
    if abs(k - round(k)) > 1e-6 * max(1.0, float(n)) or not 0 <= round(k) <= n:
        return None
    return int(round(k)), int(n)


def share_text(value, n, level: float = 0.95, counts: bool = False) -> str:
    """A share with its exact interval: '0 %, 95 % 0–31 %' for 0 of 10 (Clopper–Pearson, stats.share),
    never "± 0"; ``counts``: '0 of 10 (0 %, 95 % 0–31 %)'. A share whose count is not known (a weighted
    mean) says that its spread is not measured instead."""
    kn = share_count(value, n)
    if kn is None:
        return f"{dv.fmt_value(float(value))} % (no spread measured)"
    k, n = kn
    lo, hi = (100 * x for x in share_interval(k, n, level))
    w = hi - lo
    v = "0" if k == 0 else "100" if k == n else _pct(100 * k / n, w)
    text = f"{v} %, {100 * level:g} % {_pct(lo, w)}–{_pct(hi, w)} %"
    return f"{k} of {n} ({text})" if counts else text


def is_share(unit, stderr) -> bool:
    """A % whose standard error is 0: a share of 0 or all of its items (its ± would read "± 0")."""
    return unit == "%" and not isnan(stderr) and float(stderr) == 0.0


def vcell(value, stderr, unit, n=None, show_unit: bool = True) -> str:
    """A figure ± its standard error with its unit; a share whose ± would be 0 (0 or all of its n items)
    with its exact interval instead (share_text). ``show_unit``: False where a header says it."""
    if not isnan(value) and is_share(unit, stderr):
        text = share_text(value, n)
        return esc(text if show_unit else text.replace(" %", "", 1))
    return esc(dv.fmt_value(None if isnan(value) else value, None if isnan(stderr) else stderr,
                            unit if show_unit or unit == "bytes" else None))


def rcell(r, show_unit: bool = True) -> str:
    """vcell of a dataset row (its value, stderr, unit and n)."""
    return vcell(r["value"], r["stderr"], r["unit"], r.get("n"), show_unit)


def tol(values) -> float:
    vmax = max((abs(float(v)) for v in values), default=0.0)
    return 1e-9 * max(1.0, vmax)


def varies(rows: pd.DataFrame) -> bool:
    """Whether a figure changes along the ladder: within one KV type, subset and context, two points differ."""
    for _, g in rows.groupby(["kv", "subset", "n_ctx"], dropna=False):
        v = g["value"].astype(float)
        if len(v) > 1 and float(v.max() - v.min()) > tol(v):
            return True
    return False


def constant_line(rows: pd.DataFrame, label: str, tail: str = "") -> str:
    """One line for a figure that does not vary along the ladder: its value per (KV, subset, n_ctx)."""
    by_value: dict[str, list[str]] = {}
    for (kv, subset, nctx), g in rows.groupby(["kv", "subset", "n_ctx"], dropna=False, sort=True):
        r = g.iloc[0]
        where = [f"KV {kv}"] + ([str(subset)] if not isnan(subset) else []) + (
            [f"n_ctx {int(nctx)}"] if not isnan(nctx) else [])
        shown = (share_text(r["value"], r.get("n")) if is_share(r["unit"], r["stderr"]) else
                 dv.fmt_value(r["value"], None if isnan(r["stderr"]) else r["stderr"], r["unit"]))
        by_value.setdefault(shown, []).append(" · ".join(where))
    longest = max(len(g) for _, g in rows.groupby(["kv", "subset", "n_ctx"], dropna=False))
    parts = [f"{esc(v)} <small>({esc(', '.join(w))})</small>" for v, w in by_value.items()]
    what = ("is the same at every rung" if longest > 1 else
            "is measured at one rung per KV type and context only (no curve to draw)")
    return (f'<li class="constant" data-metric="{esc(label)}"><b>{esc(label)}</b> {what}: '
            + "; ".join(parts) + (f" — {tail}" if tail else "") + "</li>")


def fmt_delta(delta, lo, hi, unit, compact: bool = False) -> str:
    """'Δ −5.0 points (95 % CI −6.5…−3.5)': a paired difference always with its interval (compact:
    'Δ −5.0 (−6.5…−3.5)', where a column header says the unit and the level)."""
    if isnan(delta):
        return ""
    if unit == "%":
        width = abs(hi - lo) if not (isnan(lo) or isnan(hi)) else abs(delta)
        d = 1 if width >= 1 or width == 0 else min(3, 1 - math.floor(math.log10(width)))
        f = lambda x: f"{x:+.{d}f}".replace("+0." + "0" * d, "0." + "0" * d)  # noqa: E731
        u = " points"
    else:
        f = lambda x: "0" if x == 0 else f"{x:+.3g}"  # noqa: E731
        u = "" if unit in (None, "", "1") else f" {unit}"
    if compact:
        return f"Δ {f(delta)} ({'no interval' if isnan(lo) or isnan(hi) else f'{f(lo)}…{f(hi)}'})"
    ci = "no interval" if isnan(lo) or isnan(hi) else f"95 % CI {f(lo)}…{f(hi)}"
    return f"Δ {f(delta)}{u} ({ci})"


def verdict_badge(verdict, text) -> str:
    if isnan(verdict) or not verdict:
        return ""
    return (f'<span class="verdict {VERDICT_CLASS.get(verdict, "v-none")}" title="{esc(text)}">{esc(verdict)}</span>')
