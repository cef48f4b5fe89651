"""The report's page: one table of sections (SECTIONS) yields both the contents and the headings;
each card opens with the answer, then the tables, then the plots, folded; the cross-card view last."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from .. import dataset_view as dv
from ..errors import DataError
from ..io import atomic_path
from . import answer, crosscard, family, fidelity, figures, longctx, losses, matrix_findings, pareto, tables
from . import find as findview
from . import first
from .figures import Figures
from .markup import badge, esc
from .pending import CSS as PENDING_CSS
from .pending import Pending, answer_note, banner, pending_section

log = logging.getLogger(__name__)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:0 16px 48px;
color:#1b1b1b;line-height:1.4}
h1{font-size:1.5rem}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:2rem}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,440px),1fr));gap:12px}
figure.plot{margin:0;border:1px solid #e3e3e3;border-radius:6px;padding:6px;background:#fff}
svg.plot-svg{width:100%;height:auto;display:block}
.tablewrap{overflow-x:auto;margin:8px 0}
table{border-collapse:collapse;font-size:.82rem}
caption{text-align:left;font-size:.78rem;color:#444;padding:2px 0;white-space:normal}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f4f4f4;position:sticky;top:0}
table[id^=table-anchors] td:last-child,table[id^=table-manifest] td:nth-child(6){white-space:normal;min-width:18em}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:.75rem;font-weight:600;border:1px solid}
.st-ok{background:#e7f6e7;color:#1d6b1d}.st-unanchored{background:#fff;color:#8a5a00;border-style:dashed}
.st-incomplete{background:#fff4d6;color:#8a5a00}.st-blocked,.st-failed{background:#fde4e4;color:#a11}
tr.st-row-unanchored td{background:#fffdf5}tr.st-row-incomplete td{background:#fff8e6}
tr.st-row-blocked td,tr.st-row-failed td{background:#fff0f0}tr.loops td{font-weight:600}
.note{color:#555;font-style:italic}.warn{background:#fff4d6;border:1px solid #e8c66a;padding:8px;border-radius:6px}
nav ul{display:flex;flex-wrap:wrap;gap:2px 14px;list-style:none;padding:0;margin:4px 0;font-size:.78rem}
details{margin:6px 0}summary{cursor:pointer;color:#234}h1{margin:8px 0 2px}.meta{margin:2px 0;font-size:.85rem}
section.card>h2{margin-top:10px}
details.plots>summary h2,details>summary h2{display:inline}
section.answer{border:2px solid #234;border-radius:8px;padding:2px 12px 8px;margin:8px 0}
section.answer h3{margin:10px 0 4px}.answer table{font-size:.76rem}.answer td{white-space:normal}
.answer th{white-space:normal;font-weight:600}.answer .v,.answer .d{white-space:nowrap}
.answer .d{color:#333;font-size:.72rem}.how{font-size:.78rem;color:#444;margin:4px 0}
ul.constants,ul.noise,ul.plan{font-size:.8rem;margin:4px 0;padding-left:1.2em}
.verdict{display:inline-block;white-space:nowrap;padding:0 5px;border-radius:6px;font-size:.7rem;font-weight:600;border:1px solid}
.v-loss{background:#fde4e4;color:#a11}.v-gain{background:#e7f6e7;color:#1d6b1d}.v-none{background:#f1f1f1;color:#444}
.v-noise{background:#fff4d6;color:#8a5a00}
.answer ol{margin:0;padding-left:1.6em}.answer li.overlap{color:#444}
p.first-sentence{font-size:.95rem;margin:6px 0 2px;max-width:75em}p.first-sentence small.how{display:block;color:#555}
.first-charts{grid-template-columns:repeat(auto-fill,minmax(min(100%,420px),1fr))}figure.first-chart{margin:2px 0 10px}figure.first-chart figcaption{font-size:.72rem}
table[id^=table-losses] td:nth-child(3){min-width:12em;max-width:24em}table[id^=table-losses] td:nth-child(4){min-width:26em}
"""


@dataclass(frozen=True)
class View:
    """What a section is rendered from: the whole dataset, the cards it holds and those shown, and, in a
    card's section, that card, its rows and what its run still lacks (None: nothing)."""

    F: Figures
    df: pd.DataFrame
    cards: list[str]
    shown: list[str]
    card: str | None = None
    d: pd.DataFrame | None = None
    pending: Pending | None = None
    finds: tuple = ()  # the walks' answers (quantladder.find), shown first on the answer screen


def first_screens(v: View) -> str:
    """Each family's answer in one sentence and its chart of loss against memory (report.first), before
    every table."""
    ctx = answer.answer_ctx(v.d)
    return first.first_screens(v.F, v.d, v.card, ctx, v.finds)


@dataclass(frozen=True)
class Section:
    """One entry of the table of sections: its anchor, its entry in the contents, its heading and body."""

    key: str  # its anchor: "{key}-{card}" in a card's section, "{key}" on the page
    toc: str  # its entry in the contents
    title: str  # its heading (HTML)
    layout: str  # how the heading wraps the body: a key of LAYOUTS
    body: Callable[[View], str]
    note: Callable[[View], str] | None = None  # what the heading adds from the data
    parts: tuple[Section, ...] = ()  # sections shown inside this one, after its body
    when: Callable[[View], bool] | None = None  # None: always shown
    page: bool = False  # once on the page, after the cards (not once per card)

    def shown(self, v: View) -> bool:
        return self.when is None or self.when(v)


LAYOUTS = {
    "screen": '<section class="answer" id="{id}">{body}</section>',  # its title heads the card
    "h2": '<h2 id="{id}">{title}</h2>{body}',
    "h3": '<h3 id="{id}">{title}</h3>{body}',
    "plots": '<details class="plots" id="{id}"><summary><h2>{title}</h2></summary>{body}</details>',
    "folded": '<details id="{id}"><summary><h2>{title}</h2></summary>{body}</details>',
    "page": '<section id="{id}"><h2>{title}</h2>{body}</section>',
}

# The report's sections in the page's order: the contents and the headings both come from here.
SECTIONS = (
    Section("answer", "the answer", "the answer", "screen",
            lambda v: answer_note(v.pending, v.d["family"].dropna().unique(), v.card) + first_screens(v)
            + findview.find_section(v.finds, v.card) + answer.answer_section(v.d, v.card, v.pending, note=False),
            parts=(
                Section("losesfirst", "where each rung loses first",
                        "Where each rung loses first <small>(paired loss per domain against the reference, "
                        "95 % intervals)</small>", "h3", lambda v: losses.losses_section(v.d)),
                Section("recommend", "which point to run", "Which point to run, at a few memory budgets", "h3",
                        lambda v: answer.recommend_section(v.d, v.card), note=lambda v: answer.recommend_note(v.d)),
                Section("findings", "findings (importance matrices)",
                        "Findings: importance matrices <small>(mean KLD against the reference on the same tokens; "
                        "the difference's interval is unpaired)</small>", "h3",
                        lambda v: matrix_findings.findings_section(v.d, v.card)),
            )),
    Section("pending", "not measured yet", "Not measured yet", "h2", lambda v: pending_section(v.pending, v.card),
            when=lambda v: v.pending is not None),
    Section("anchors", "anchor status", "Anchor status per benchmark", "h2", lambda v: tables.status_section(v.d)),
    Section("flips", "flips and the noise floor", "Flips against the reference rung, beside the noise floor", "h2",
            lambda v: tables.flips_section(v.d, v.card)),
    Section("fidelity", "teacher-forced fidelity", "Teacher-forced fidelity beside the exams", "h2",
            lambda v: fidelity.fidelity_section(v.d, v.card)),
    Section("overview", "every family, one plot per headline",
            "Every family: one plot per headline figure (this card only)", "plots",
            lambda v: figures.overview_section(v.F, v.d, v.card)),
    Section("curves", "curves per family", "Curves per family (this card only)", "plots",
            lambda v: family.curves_section(v.F, v.d, v.card, v.pending)),
    Section("longctx", "long context", "Long context: scores and flips against the context length, per rung", "plots",
            lambda v: longctx.longctx_section(v.F, v.d, v.card), when=lambda v: longctx.has_lengths(v.d)),
    Section("pareto", "Pareto fronts", "Pareto fronts across families", "plots",
            lambda v: pareto.pareto_section(v.F, v.d, v.card)),
    Section("degenerate", "degenerate loops", "Degenerate repetition loops", "h2",
            lambda v: tables.degenerate_section(v.d, v.card)),
    Section("manifest", "manifests", "Manifests (per point and benchmark)", "folded",
            lambda v: tables.manifest_section(v.d, v.card)),
    # the card reported (all cards: the first) against every other
    Section("crosscard", "cross-card view", "Cross-card view", "page",
            lambda v: crosscard.crosscard_section(v.df, v.shown[0], [o for o in v.cards if o != v.shown[0]]),
            when=lambda v: len(v.cards) > 1, page=True),
)


def _walk(sections) -> list[Section]:
    """The sections in the page's order, each followed by those inside it."""
    return [s for sec in sections for s in (sec, *_walk(sec.parts))]


def _anchor(sec: Section, v: View) -> str:
    return esc(sec.key if sec.page else f"{sec.key}-{v.card}")


def contents(views: list[View], page: View) -> str:
    """The contents: each card's sections shown, then the page's."""
    entries = [f'<li><a href="#{_anchor(s, v)}">{esc(v.card)}: {s.toc}</a></li>'
               for v in views for s in _walk(SECTIONS) if not s.page and s.shown(v)]
    entries += [f'<li><a href="#{_anchor(s, page)}">{s.toc}</a></li>'
                for s in _walk(SECTIONS) if s.page and s.shown(page)]
    return "<nav><ul>" + "".join(entries) + "</ul></nav>"


def section(sec: Section, v: View) -> str:
    """A section: its heading wrapped around its body and the sections inside it."""
    if v.card is not None:
        log.info("report: card %s, %s", v.card, sec.toc)
    body = sec.body(v) + "".join(section(p, v) for p in sec.parts if p.shown(v))
    title = sec.title + (" " + sec.note(v) if sec.note else "")
    return LAYOUTS[sec.layout].format(id=_anchor(sec, v), title=title, body=body)


def card_section(v: View) -> str:
    """One card: headed by its first section's title, the answer (one screen, no plots), then the details,
    the plot sections folded."""
    d, card = v.d, v.card
    names = ", ".join(sorted(set(d["card_name"].dropna())))
    pts = dv.point_table(d)
    out = [f'<section class="card" id="card-{esc(card)}"><h2>Card {esc(card)}: {SECTIONS[0].title}</h2>',
           f"<p class=\"meta\">{esc(names) or 'card name not recorded'} · {len(pts)} points · "
           f"{d['family'].nunique()} famil{'y' if d['family'].nunique() == 1 else 'ies'} · "
           f"{d['benchmark'].nunique()} benchmarks · {len(d)} rows</p>"]
    flagged = d[d["status"].isin(("unanchored", "incomplete"))].groupby("status").apply(
        lambda g: g.groupby(dv.POINT).ngroups, include_groups=False) if not d.empty else {}
    if len(flagged):
        out.append('<p class="warn">' + "; ".join(f"{int(n)} point{'s have' if n != 1 else ' has'} {badge(s)} figures"
                                                  for s, n in flagged.items()) + ": read them with that in mind.</p>")
    out += [section(s, v) for s in SECTIONS if not s.page and s.shown(v)]
    out.append("</section>")
    return "".join(out)


def render(df: pd.DataFrame, card: str | None = None, source: str = "points.parquet",
           pending: dict | None = None, finds: list[dict] | None = None) -> str:
    """The report's HTML for ``card`` (None: every card in the dataset, one section each).

    Each card opens with the answer (the family tables of headline figures with their paired deltas,
    intervals and verdicts, the noise floor, the items a 2-point loss needs, the recommendation at common
    budgets), then the tables, then the plots, folded. ``pending``: what the card's run still lacks
    (report.pending); with nothing missing the report is the full run's. ``finds``: the answers of
    the ladder walks (quantladder.find), first on their card's answer screen."""
    cards = sorted(df["card"].dropna().unique())
    if card is not None and card not in cards:
        raise DataError(f"card {card!r} is not in the dataset (cards: {cards})")
    shown = [card] if card else cards
    partial = Pending.of(pending)
    if partial is not None and len(shown) > 1:
        raise DataError(f"what a run lacks is one card's: name the card (cards: {cards})")
    page = View(Figures(), df, cards, shown)
    views = [View(page.F, df, cards, shown, c, df[df["card"] == c], partial, tuple(finds or ())) for c in shown]
    title = f"quantladder report: {', '.join(shown)}"
    body = [f"<h1>{esc(title)}</h1>", "" if partial is None else banner(partial),
            f'<p class="meta">Built from <code>{esc(source)}</code> alone ({len(df)} rows). Every figure carries its '
            "unit; ± is one standard error; every Δ carries its 95 % interval.</p>", contents(views, page)]
    body += [card_section(v) for v in views]
    body += [section(s, page) for s in SECTIONS if s.page and s.shown(page)]
    log.info("report: %d figures", page.F.n)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}{'' if partial is None else PENDING_CSS}</style></head><body>"
            + "".join(body) + "</body></html>\n")


def render_nothing_yet(card: str, pending: dict) -> str:
    """The partial report of a run with no point finished yet: what is planned and what it costs."""
    partial = Pending.of(pending)
    title = f"quantladder report: {card}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}{PENDING_CSS}</style></head><body>"
            f"<h1>{esc(title)}</h1>{banner(partial)}<h2 id=\"pending-{esc(card)}\">Not measured yet</h2>"
            + pending_section(partial, card) + "</body></html>\n")


def build(points_parquet: str | Path, out_html: str | Path, card: str | None = None,
          pending: dict | None = None, finds: list | None = None) -> Path:
    """Write the HTML report for ``card`` (None: all cards) from the dataset at ``points_parquet``;
    ``pending``: what the card's run still lacks (see ``render``); ``finds``: the find rule's answer
    files to show first."""
    df = dv.load(points_parquet)
    if df.empty and (pending is None or card is None):
        raise DataError(f"dataset {points_parquet} holds no rows: nothing to report")
    text = (render_nothing_yet(card, pending) if df.empty
            else render(df, card, source=str(points_parquet), pending=pending, finds=findview.load(finds)))
    with atomic_path(out_html) as tmp:
        tmp.write_text(text, encoding="utf-8")
    log.info("report: wrote %s", out_html)
    return Path(out_html)
