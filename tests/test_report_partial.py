"""A report at any moment: the report of a run not finished yet, from the fixture's producers with some
point-measures left out and the ``pending`` dict that says what is missing.

Left out of cpu-test (tests/fixtures/dataset/make_fixture.py): the point big/Q4_K_M/q8_0 (its rung is
measured at KV f16), the rung small/Q8_0 (both KV types), big/Q6_K/f16's bfcl, and a family `later`
nothing of which has run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from browser import Browser
from quantladder import aggregate, dataset, report
from quantladder import dataset_view as dv
from pipeline_util import make_fixture_module

GONE_POINTS = {("big", "Q4_K_M", "q8_0"), ("small", "Q8_0", "f16"), ("small", "Q8_0", "q8_0")}
GONE_MEASURES = {("big", "Q6_K", "f16", "bfcl")}
LATER = [{"family": "later", "rung": "Q4_K_M", "kv": "f16", "measure": m, "series": "points"}
         for m in ("perplexity", "speed")]
JOBS = [{"rule": "generate", "jobs": 4, "est_min": 12.5, "basis": "measured"},
        {"rule": "perplexity", "jobs": 3, "est_min": 7.6, "basis": "estimate"}]




@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """(the partial dataset, its pending dict)."""
    mf = make_fixture_module()
    tmp = tmp_path_factory.mktemp("partial-dataset")
    files = [f for p in mf.POINTS for f in mf.point_files(tmp / "results", "cpu-test", p)]
    kept, missing = [], []
    for f in files:
        series, fam, rung, kv, measure = Path(f).parts[-6:-1]
        if (fam, rung, kv) in GONE_POINTS or (fam, rung, kv, measure) in GONE_MEASURES:
            missing.append({"family": fam, "rung": rung, "kv": kv, "measure": measure, "series": series})
        else:
            kept.append(f)
    missing += LATER
    out = tmp / "points.parquet"
    dataset.write(aggregate.collect(kept), out)
    pending = {"planned": len(files) + len(LATER), "finished": len(kept), "missing": missing, "jobs_left": JOBS,
               "est_min_left": 20.1, "as_of": "2026-12-03T07:10:00Z"}
    return out, pending


@pytest.fixture(scope="module")
def partial_html(partial, tmp_path_factory) -> str:
    src, pending = partial
    out = tmp_path_factory.mktemp("partial-report") / "report.html"
    return report.build(src, out, card="cpu-test", pending=pending).read_text()


def _table(html: str, table_id: str) -> list[tuple[str, list[str]]]:
    """(row class, cell texts) of each body row of a table."""
    body = re.search(rf'<table id="{re.escape(table_id)}">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return [(cls or "", [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", row, re.S)])
            for cls, row in re.findall(r'<tr(?: class="([^"]*)")?>(.*?)</tr>', body, re.S)]


def test_banner_and_the_answer_say_the_run_is_partial(partial, partial_html):
    _, pending = partial
    n, m = pending["finished"], pending["planned"]
    banner = f"partial report: {n} of {m} point-measures measured, about 20 min of jobs left"
    assert banner in partial_html
    assert partial_html.index(banner) < partial_html.index("<nav>")  # at the top, before the contents
    answer = re.search(r'<section class="answer" id="answer-cpu-test">(.*?)<h3 id="recommend-', partial_html,
                       re.S).group(1)
    assert answer.startswith('<p class="warn partial">Built on a partial run:')
    assert f"{n} of {m} point-measures measured (as of 2026-12-03T07:10:00Z)" in answer
    assert "No figure yet for later." in answer


def test_not_measured_yet_section_follows_the_answer(partial, partial_html):
    html = partial_html
    toc = re.findall(r'<li><a href="#([^"]+)">', html)
    assert toc.index("pending-cpu-test") == toc.index("findings-cpu-test") + 1
    at = html.index('<h2 id="pending-cpu-test">Not measured yet</h2>')
    assert html.index('id="answer-cpu-test"') < at < html.index('id="anchors-cpu-test"')
    rows = {(r[0], r[1]): r for _, r in _table(html, "table-pending-cpu-test")}
    # grouped by family and rung, the KV types within, in the order the run lists them
    assert list(rows) == [("big", "Q6_K"), ("big", "Q4_K_M"), ("small", "Q8_0"), ("later", "Q4_K_M")]
    assert rows[("big", "Q6_K")][2:] == ["KV f16: bfcl", "1"]
    assert rows[("small", "Q8_0")][2].startswith("KV f16: memory, speed, energy, perplexity, bfcl, ruler")
    assert "; KV q8_0: memory" in rows[("small", "Q8_0")][2]
    assert rows[("later", "Q4_K_M")][2:] == ["KV f16: perplexity, speed", "2"]
    assert sum(int(r[3]) for r in rows.values()) == len(partial[1]["missing"])
    jobs = _table(html, "table-jobs-left-cpu-test")
    assert [r for _, r in jobs] == [["generate", "4", "12 min", "measured (the rule's benchmark files)"],
                                    ["perplexity", "3", "7.6 min", "guessed (no job of the rule has finished here yet)"]]
    assert "about 20 min in all; 1 rule(s) timed from the benchmark files" in html


def test_rungs_and_points_not_measured_yet(partial_html):
    html = partial_html
    # the rung small/Q8_0 has no row: it is listed, not measured yet, after the measured ones
    rungs = _table(html, "table-rungs-small")
    assert [r[0] for _, r in rungs] == ["F16 (reference)", "Q8_0"]
    assert rungs[-1] == ("pending", ["Q8_0", "not measured yet", "—", "—", "—", "—", "—"])
    points = _table(html, "table-points-small")
    assert [(cls, r[:2]) for cls, r in points] == [("", ["F16 (reference)", "f16"]), ("pending", ["Q8_0", "f16"]),
                                                   ("pending", ["Q8_0", "q8_0"])]
    assert "not measured yet" in points[1][1] and not any(re.search(r"\d", c) for c in points[1][1][2:])
    # big/Q4_K_M/q8_0: its rung is measured (at KV f16), the point is not
    big = {(r[0].split(" ")[0], r[1]): (cls, r) for cls, r in _table(html, "table-points-big")}
    assert big[("Q4_K_M", "q8_0")][0] == "pending" and "not measured yet" in big[("Q4_K_M", "q8_0")][1]
    assert [r[0] for _, r in _table(html, "table-rungs-big")][-1] == "Q4_K_M"  # a measured rung, once
    # big/Q6_K/f16 ran everything but bfcl: that status cell only reads not measured yet
    heads = re.findall(r"<th>(.*?)</th>", re.search(r'<table id="table-points-big">.*?</thead>', html, re.S).group(0))
    q6 = big[("Q6_K", "f16")][1]
    assert q6[heads.index("bfcl status")] == "not measured yet" and q6.count("not measured yet") == 1


def test_the_answer_shows_no_figure_no_delta_and_no_loss_for_what_is_not_measured(partial_html):
    rows = {(r[0].split(" ")[0], r[1]): (cls, r) for cls, r in _table(partial_html, "table-answer-big")}
    cls, row = rows[("Q4_K_M", "q8_0")]
    assert cls == "pending" and row[2] == "—" and set(row[3:]) == {"not measured yet"}
    body = re.search(r'<table id="table-answer-big">.*?</table>', partial_html, re.S).group(0)
    pending_row = re.findall(r'<tr class="pending">(.*?)</tr>', body, re.S)
    assert len(pending_row) == 1 and "Δ" not in pending_row[0] and "verdict" not in pending_row[0]
    assert "badge" not in pending_row[0]
    # Q6_K's bfcl column: not measured yet, and every other column of that row measured
    heads = re.findall(r"<th>(.*?)</th>", re.search(r"<thead>.*?</thead>", body, re.S).group(0))
    bfcl = next(i for i, h in enumerate(heads) if h.startswith("<small>bfcl</small>"))
    assert rows[("Q6_K", "f16")][1][bfcl] == "not measured yet"
    assert rows[("Q6_K", "f16")][1].count("not measured yet") == 1
    # the small family: its reference alone is measured, Q8_0 is listed not measured yet
    small = _table(partial_html, "table-answer-small")
    assert [(cls, r[0]) for cls, r in small] == [("st-row-incomplete", "F16 (reference)"), ("pending", "Q8_0"),
                                                 ("pending", "Q8_0")]


def test_partial_report_opens_without_console_errors(partial, tmp_path):
    src, pending = partial
    out = report.build(src, tmp_path / "r.html", card="cpu-test", pending=pending)
    with Browser() as b:
        b.open(out)
        assert b.console() == []
        assert b.js("return document.querySelector('#partial').getBoundingClientRect().top") < 100


def test_without_pending_the_report_is_the_full_runs(fixture_dataset, tmp_path):
    """pending=None, or a run with nothing missing, gives today's report, byte for byte."""
    full = report.build(fixture_dataset, tmp_path / "full.html", card="gpu-b").read_text()
    df = dv.load(fixture_dataset)
    assert report.render(df, "gpu-b", source=str(fixture_dataset), pending=None) == full
    done = {"planned": 40, "finished": 40, "missing": [], "jobs_left": [], "est_min_left": 0.0,
            "as_of": "2026-12-03T07:10:00Z"}
    assert report.build(fixture_dataset, tmp_path / "done.html", card="gpu-b", pending=done).read_text() == full
    assert "not measured yet" not in full and "partial" not in full


def test_pending_names_one_card(fixture_dataset, partial):
    from quantladder.errors import DataError

    with pytest.raises(DataError, match="one card's"):
        report.render(dv.load(fixture_dataset), None, pending=partial[1])


def test_a_chat_family_whose_chat_runs_are_pending_is_no_base_model(partial):
    """A family with perplexity rows and no chat benchmark yet is a base model only if none is pending."""
    from quantladder.report import family
    from quantladder.report.pending import Pending

    src, pending = partial
    df = dv.load(src)
    df = df[~((df.family == "small") & df.benchmark.isin(["bfcl", "ruler", "bigcodebench_hard", "humaneval"]))]
    assert "a base model" in family.base_model_note(df, "small")
    bfcl_next = {"family": "small", "rung": "F16", "kv": "f16", "measure": "bfcl", "series": "points"}
    assert family.base_model_note(df, "small", Pending.of({**pending, "missing": [bfcl_next]})) == ""
    others = [m for m in pending["missing"] if m["family"] != "small"]
    assert "a base model" in family.base_model_note(df, "small", Pending.of({**pending, "missing": others}))
