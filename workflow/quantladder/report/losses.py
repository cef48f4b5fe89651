"""Where each rung loses first: per rung, its domains ranked by their paired loss against the family's
reference, each with its 95 % interval.

A domain is what an exam declares (``Benchmark.domain``: code, function calling, constrained
instructions, arithmetic, long context, your tasks; an exam that declares none is its own name), and
each corpus of the perplexity passes (its mean KLD). The figures are the dataset's paired columns
(``delta``, ``delta_ci_low``/``_high``, ``verdict``: quantladder.deltas), read, never recomputed: the
headline of each exam (one entry per context where it has several: RULER's average per length) and
each corpus's ``kld_mean``.

Two scales, never mixed: an exam's loss is in points of its score (the rung's items against the
reference's same items), a corpus's in nats of mean KL divergence (the same tokens). A point and a nat
are not one unit, and dividing each by its standard error would rank how *clearly* a loss shows
rather than how *large* it is (a KLD over thousands of tokens always has the largest ratio). So each
scale is ranked on its own, by the lower end of its 95 % interval — the loss the data guarantee at
least — larger first; a lower end at or below zero means no loss is guaranteed. The first place is
named only where it is separable: when another entry's interval reaches above the first's lower end,
the report says which entries the first is not separable from.

A "first" or "separable" claim needs an interval whose independent unit is what the claim is about.
An exam's paired interval has the item as its unit (the rung's and the reference's verdicts on each
item), so its claim is made, and worded as what it is about: these items. A corpus's KLD interval in
the dataset is llama-perplexity's ±, which treats every token as independent; the tokens of one chunk
(and the chunks of one text) are not, so on a corpus of two chunks of one document that interval says
nothing about which *text* loses most, let alone which language. No corpus entry is therefore named
first or separable (CLUSTERED: only item intervals qualify); the corpora are listed by their mean
KLD on these texts, with their per-token intervals, as a hint.

A thinking family's rungs get a third list, **the thinking** (quantladder.thinking: the rows of the
metric group ``thinking``, read, never recomputed): the closure and cap-hit rates against the reference
on the items both thought on (points, Tango's interval, Holm-corrected verdict), the thinking length
ratio on the items both closed on their own (×, bootstrap interval) and the verdict flips split by
cause (the rung at its cap, or answering differently; Clopper–Pearson). Its own scale, never ranked
against the exams'; the "loses first" cell says where the thinking shows a loss (a loss verdict and
an interval wholly on the loss side), since a rung that stops closing its thinking loses its answers
to its cap before any exam's score says why. A family whose replies carry no thinking has no such
list, and says so where another family of the card has one.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .. import benchmarks
from .. import dataset_view as dv
from .. import metrics as qmetrics
from .answer import answer_columns
from .markup import badge, esc, isnan, table, verdict_badge

KLD_DOMAIN = "KLD"  # a perplexity corpus's entry: "KLD · <corpus>"
LOSS_VERDICTS = ("loss", "loss within noise")  # the paired verdicts (Holm-corrected) that show a loss
# The paired kinds whose interval is clustered on the unit a "first"/"separable" claim is about (the
# metric registry's ``paired``): items. A per-token interval ("tokens") is not: see the module's docstring.
CLUSTERED = ("items",)


@dataclass(frozen=True)
class Entry:
    domain: str
    benchmark: str
    label: str  # the figure: "exact_match", "score_avg @ n_ctx 4096", the corpus
    unit: str  # "points" or the figure's own unit (nats)
    loss: float  # reference − rung where higher is better, rung − reference where lower is: > 0 is a loss
    lo: float  # the 95 % interval of the loss
    hi: float
    verdict: str | None
    verdict_text: str | None
    status: str
    paired: str | None = None  # the metric registry's paired kind of its figure: items | tokens


def domain_of(benchmark: str) -> str:
    """The domain an exam declares (its name where it declares none)."""
    return benchmarks.get(benchmark).domain or benchmark


def _entry(domain: str, benchmark: str, label: str, r: pd.Series) -> Entry:
    sign = -1.0 if qmetrics.get(r["metric"]).higher_is_better else 1.0
    lo, hi = sorted((sign * float(r["delta_ci_low"]), sign * float(r["delta_ci_high"])))
    verdict = None if isnan(r["verdict"]) else r["verdict"]
    return Entry(domain, benchmark, label, "points" if r["unit"] == "%" else str(r["unit"]), sign * float(r["delta"]),
                 lo, hi, verdict, None if isnan(r["verdict_text"]) else r["verdict_text"],
                 r["status"] if isinstance(r["status"], str) else "ok", qmetrics.get(r["metric"]).paired)


def entries(fam: pd.DataFrame) -> dict[tuple[str, str], tuple[list[Entry], list[Entry], list[tuple[str, str]]]]:
    """Per (rung, kv) of a family: its exam entries, its KLD entries, and the figures it has that are not
    compared ((reason, figure))."""
    out: dict[tuple[str, str], tuple[list[Entry], list[Entry], list[tuple[str, str]]]] = {}
    exams = set(benchmarks.names())

    def slot(rung, kv):
        return out.setdefault((rung, kv), ([], [], []))

    for b, label, rows in answer_columns(fam):
        if b not in exams:
            continue
        for _, r in rows.iterrows():
            if r["is_reference"]:
                continue
            if isnan(r["delta"]) or isnan(r["delta_ci_low"]) or isnan(r["delta_ci_high"]):
                why = r["verdict_text"] if not isnan(r["verdict_text"]) and r["verdict_text"] else "no paired figure"
                slot(r["rung"], r["kv"])[2].append((why, f"{domain_of(b)} ({b} {label})"))
                continue
            slot(r["rung"], r["kv"])[0].append(_entry(domain_of(b), b, label, r))
    kld = dv.figures(fam[(fam["benchmark"] == "perplexity") & (fam["metric"] == "kld_mean")])
    kld = kld[kld["delta"].notna() & kld["delta_ci_low"].notna() & ~kld["is_reference"].astype(bool)]
    for (rung, kv, corpus), g in kld.groupby(["rung", "kv", kld["subset"].fillna("")], sort=True):
        r = dv.pick_ctx(g, None)
        name = corpus or "the headline corpus"
        slot(rung, kv)[1].append(_entry(f"{KLD_DOMAIN} · {name}", "perplexity", name, r))
    return out


def ranked(es: list[Entry]) -> list[Entry]:
    """Larger guaranteed loss first (the interval's lower end), then the larger estimate."""
    return sorted(es, key=lambda e: (-e.lo, -e.loss, e.domain, e.label))


def clustered(e: Entry) -> bool:
    """Whether the entry's interval has the unit its claim is about (CLUSTERED): an exam's items, not a
    corpus's tokens."""
    return e.paired in CLUSTERED


def first_line(es: list[Entry], what: str) -> str:
    """Which entry loses first, and how surely: named only where its interval is clustered on the unit
    the claim is about (an exam's items) and no other interval reaches its lower end; worded as what it
    is about (these items, these texts)."""
    if not es:
        return ""
    top = es[0]
    if not all(clustered(e) for e in es):
        return (f"largest mean KLD on these texts: <b>{esc(top.domain)}</b>; not ranked against the other "
                f"{what} entries: their intervals treat tokens as independent (no per-chunk "
                "interval in the dataset), which says nothing about which text, or language, loses most"
                if len(es) > 1 else
                f"mean KLD on these texts only: <b>{esc(top.domain)}</b>, the only {what} compared")
    if top.lo <= 0 or top.verdict not in LOSS_VERDICTS:
        return f"no {what} shows a loss on these items (no interval above 0 with a loss verdict)"
    noise = ", its flip rate within the noise floor" if top.verdict == "loss within noise" else ""
    head = f"first on these items: <b>{esc(top.domain)}</b> (at least {_num(top.lo, top.unit)} {esc(top.unit)}{noise})"
    if len(es) == 1:
        return f"{head}, the only {what} compared"
    close = [e for e in es[1:] if e.hi >= top.lo]
    if not close:
        return f"{head}, separable from every other {what} on these items"
    return f"{head}; its interval overlaps {', '.join(_name(e, es) for e in close)}: which loses most is not determined"


def _name(e: Entry, among: list[Entry]) -> str:
    """The domain, with its figure where the domain has several entries (RULER per length, two code suites)."""
    several = sum(x.domain == e.domain for x in among) > 1
    return esc(e.domain) + (f" <small>({esc(_figure(e))})</small>" if several else "")


def _figure(e: Entry) -> str:
    return e.label if e.benchmark in (e.domain, "perplexity") else f"{e.benchmark} {e.label}"


def _num(x: float, unit: str) -> str:
    """A loss or an interval end: 1 decimal for points, 3 significant digits otherwise (nats); no "-0.0"."""
    text = f"{x:.1f}" if unit == "points" else f"{x:.3g}"
    text = "0" if float(text) == 0 else text
    return text.replace("-", "−")


def _item(e: Entry, prev: Entry | None) -> str:
    tie = prev is not None and e.hi >= prev.lo  # overlaps the entry above: the order between them is not shown
    figure = "" if e.benchmark == "perplexity" else f" <small>{esc(_figure(e))}</small>"
    return (f'<li data-domain="{esc(e.domain)}" data-benchmark="{esc(e.benchmark)}"'
            + (' class="overlap" title="its interval overlaps the entry above: their order is not determined"'
               if tie else "") + ">" + ("≈ " if tie else "")
            + f"<b>{esc(e.domain)}</b>{figure} loss {_num(e.loss, e.unit)} "
            f"<small>(95 % {_num(e.lo, e.unit)}…{_num(e.hi, e.unit)} {esc(e.unit)})</small> {verdict_badge(e.verdict, e.verdict_text)}"
            + (f" {badge(e.status)}" if e.status != "ok" else "") + "</li>")


def _list(es: list[Entry]) -> str:
    return "<ol>" + "".join(_item(e, es[i - 1] if i else None) for i, e in enumerate(es)) + "</ol>" if es else "—"


# ------------------------------------------------------------------------------------------ the thinking

THINK_LABELS = {"think_close_rate": "closure rate", "think_cap_rate": "cap-hit rate",
                "think_tokens_ratio": "thinking length", "think_flip_cap_rate": "flips at its cap",
                "think_flip_answer_rate": "flips, another answer"}


def thinking_rows(fam: pd.DataFrame) -> pd.DataFrame:
    """The family's thinking rows of the compared (non-reference) points, whole set."""
    names = [m for m in qmetrics.in_group("thinking") if m in THINK_LABELS]
    t = fam[fam["metric"].isin(names) & fam["subset"].isna()]
    return t[~t["is_reference"].astype(bool)]


def _think_loss(r: pd.Series) -> float | None:
    """How far the thinking entry's interval lies on its loss side (None: not wholly there, or no
    loss verdict): points for the rates, × − 1 for the length."""
    if isnan(r["delta_ci_low"]) or isnan(r["delta_ci_high"]) or r["verdict"] not in LOSS_VERDICTS:
        return None
    hib = qmetrics.get(r["metric"]).higher_is_better
    edge = -float(r["delta_ci_high"]) if hib else float(r["delta_ci_low"])
    return edge if edge > 0 else None


def _think_item(r: pd.Series) -> str:
    m, label = r["metric"], THINK_LABELS[r["metric"]]
    if isnan(r["value"]):
        why = r["verdict_text"] if isinstance(r["verdict_text"], str) else "no figure"
        return f'<li data-think="{esc(m)}"><b>{esc(label)}</b> <small class="note">{esc(why)}</small></li>'
    if m == "think_tokens_ratio":
        fig = (f"{float(r['value']):.3g}× the reference's <small>(95 % {float(r['delta_ci_low']) + 1:.3g}…"
               f"{float(r['delta_ci_high']) + 1:.3g}×, n {int(r['n'])})</small>")
    elif m in ("think_close_rate", "think_cap_rate"):
        if isnan(r["delta"]):
            fig = f"{float(r['value']):.1f} % <small>({esc(r['verdict_text'] or 'not compared')})</small>"
        else:
            fig = (f"{float(r['value']):.1f} %, Δ {_num(float(r['delta']), 'points')} points <small>(95 % "
                   f"{_num(float(r['delta_ci_low']), 'points')}…{_num(float(r['delta_ci_high']), 'points')}, "
                   f"n {int(r['n'])})</small>")
    else:
        fig = (f"{float(r['value']):.1f} % of {int(r['n'])} items <small>(95 % {float(r['delta_ci_low']):.1f}…"
               f"{float(r['delta_ci_high']):.1f} %)</small>")
    verdict = r["verdict"] if isinstance(r["verdict"], str) else None
    text = r["verdict_text"] if isinstance(r["verdict_text"], str) else None
    return (f'<li data-think="{esc(m)}"><b>{esc(label)}</b> {fig} '
            + (verdict_badge(verdict, text) if verdict else (f'<small title="{esc(text)}">ⓘ</small>' if text else ""))
            + "</li>")


def thinking_cell(rows: pd.DataFrame) -> tuple[str, str]:
    """(the thinking list of one point, its line for the "loses first" cell)."""
    order = {m: i for i, m in enumerate(THINK_LABELS)}
    rows = rows.sort_values("metric", key=lambda s: s.map(order))
    items = "".join(_think_item(r) for _, r in rows.iterrows())
    lost = [(THINK_LABELS[r["metric"]], _think_loss(r), r) for _, r in rows.iterrows() if _think_loss(r) is not None]
    if lost:
        words = ", ".join(f"{esc(label)} (at least {_num(x, 'points')} points"
                          + (", within noise" if r["verdict"] == "loss within noise" else "") + ")"
                          if r["metric"] != "think_tokens_ratio" else
                          f"{esc(label)} (at least {1 + x:.3g}× the reference's)" for label, x, r in lost)
        line = f"the thinking loses on these items: <b>{words}</b>"
    else:
        line = "the thinking shows no loss on these items (no interval wholly on its loss side with a loss verdict)"
    return ("<ul class=\"thinking\">" + items + "</ul>" if items else "—"), line


def losses_section(d: pd.DataFrame) -> str:
    """Per family, one row per compared rung: its exams ranked by loss in points, its corpora by mean KLD."""
    out = ['<p class="how">Per rung, against its family\'s reference on the same items (exams) or tokens '
           "(corpora): each domain's loss with its 95 % interval and paired verdict (Holm-corrected, as in the "
           "table above). Exams (points of their headline score) and corpora (nats of mean KLD) are two scales, "
           "ranked each on its own by the interval's lower end, the loss the data guarantee at least; ≈ marks an "
           "entry whose interval overlaps the one above it, so their order is not determined. Small samples "
           "overlap almost everywhere: the order is then a hint, not a finding.</p>"]
    any_rows = False
    thinks = {f for f in d["family"].dropna().unique() if not thinking_rows(d[d["family"] == f]).empty}
    for family in sorted(d["family"].dropna().unique()):
        fam = d[d["family"] == family]
        per_point = entries(fam)
        if not per_point:
            continue
        any_rows = True
        order = dv.point_table(fam)
        think = thinking_rows(fam) if family in thinks else None
        body = []
        for _, p in order.iterrows():
            key = (p["rung"], p["kv"])
            if key not in per_point:
                continue
            exams, klds, absent = per_point[key]
            exams, klds = ranked(exams), ranked(klds)
            lines = [first_line(exams, "exam"), first_line(klds, "corpus")]
            for why in dict.fromkeys(w for w, _ in absent):  # one line per reason, in the order met
                lines.append(f'<small class="note">not compared ({esc(why)}): '
                             + esc(", ".join(x for w, x in absent if w == why)) + "</small>")
            cells = []
            if think is not None:
                t = think[(think["rung"] == p["rung"]) & (think["kv"] == p["kv"])]
                cell, line = thinking_cell(t)
                cells.append(cell)
                if not t.empty:
                    lines.insert(1, line)
            summary = "<br>".join(x for x in lines if x)
            body.append([esc(p["rung"]), esc(p["kv"]), summary, _list(exams), _list(klds), *cells])
        out.append(f'<h4>{esc(family)}</h4>')
        if think is None and thinks:
            out.append('<p class="note" data-thinking="absent">No thinking figures: its replies carry no thinking '
                       "(its template cannot think, or thinks in markers not split here; docs/thinking.md).</p>")
        heads = ["rung", "KV", "loses first", "exams, largest guaranteed loss first <small>(points)</small>",
                 "KLD per corpus, largest first <small>(nats)</small>"]
        if think is not None:
            heads.append("the thinking <small>(against the reference on the same items)</small>")
        out.append(table(heads, body, f"table-losses-{d['card'].iloc[0]}-{family}"))
    if not any_rows:
        return '<p class="note">No rung has a paired figure yet: nothing to rank.</p>'
    return "".join(out)
