"""Where each rung loses first (report.losses), on the producers' canned dataset with an arithmetic exam
and two KLD corpora added by the same producers (the benchmark's own metric rows and verdicts, the
perplexity measure's rows, the real aggregate): the ranking reads the dataset's paired columns, names
the first domain only where its interval separates it, says where intervals overlap, keeps points and
nats apart, takes its domains from the exams' declarations, and renders cleanly in Chromium."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from quantladder import aggregate, benchmarks, dataset, report, scoring
from quantladder.measures import perplexity as ppl
from quantladder.report import losses

sys.path.insert(0, str(Path(__file__).parent))
from pipeline_util import make_fixture_module  # noqa: E402

pytestmark = pytest.mark.slow  # the canned dataset takes ~30 s to make on 2 cores

CARD = "cpu-test"
N = 100
ARITH_RIGHT = {"F16": 60, "Q6_K": 60, "Q8_0": 59, "Q4_K_M": 30}  # big's arithmetic: Q4_K_M loses 30 points
# big's KLD per corpus (nats, its standard error): code's interval above prose's at Q4_K_M, not at Q8_0; neither is
# a per-chunk interval, so no corpus is ever named first or separable
KLD = {"Q6_K": {"prose-en": (0.0005, 0.00003), "code-python": (0.0006, 0.00004)},
       "Q8_0": {"prose-en": (0.001, 0.0001), "code-python": (0.0011, 0.0001)},
       "Q4_K_M": {"prose-en": (0.03, 0.0015), "code-python": (0.08, 0.004)}}


def _arith_verdicts(right: int) -> list[dict]:
    return [{"item_id": f"word-2-{i:03d}", "subset": "word-2", "correct": i < right,
             "error_type": None if i < right else "wrong_answer", "degenerate": False} for i in range(N)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    mf = make_fixture_module()
    tmp = tmp_path_factory.mktemp("losses")
    root = tmp / "results"
    cfg = {**mf.CONFIG, "benchmarks": {**mf.CONFIG["benchmarks"], "arithmetic": {"enabled": True}}}
    bench = benchmarks.create("arithmetic", cfg["benchmarks"]["arithmetic"])
    files = []
    for p in mf.POINTS:
        files += mf.point_files(root, CARD, p)
        fam, rung, kv = p[:3]
        if fam != "big" or kv != "f16":
            continue
        v = _arith_verdicts(ARITH_RIGHT[rung])
        files.append(mf._write(root, CARD, p, "arithmetic", bench.metric_rows(v, []) + scoring.common_rows(v, {}),
                               verdicts=v, cfg=cfg))
        if rung in KLD:  # the pass's rows per corpus, as scripts/perplexity.py writes them (replacing one corpus)
            rows = []
            for corpus, (k, err) in KLD[rung].items():
                rows += ppl.metric_rows(mf._ppl_summary(10.3, k, err, 93.0), 512, subset=corpus)
            path = mf._write(root, CARD, p, "perplexity", rows)
            assert path in files
    for lp in mf.LADDER_POINTS:
        files += mf.tiny_point_files(root, CARD, lp)
    out = tmp / "points.parquet"
    dataset.write(aggregate.collect(files), out)
    d = pd.read_parquet(out)
    return d[d["card"] == CARD], tmp


def _row(section: str, rung: str, kv: str = "f16") -> str:
    m = re.search(rf"<tr[^>]*><td>{re.escape(rung)}</td><td>{kv}</td>(.*?)</tr>", section, re.S)
    assert m, rung
    return m.group(1)


def _domains(cell: str) -> list[str]:
    return re.findall(r'<li data-domain="([^"]+)"', cell)


def test_exams_are_ranked_by_the_loss_their_interval_guarantees(data):
    d, _ = data
    big = d[d["family"] == "big"]
    section = losses.losses_section(big)
    q4 = _row(section, "Q4_K_M")
    exams, klds = re.findall(r"<ol>(.*?)</ol>", q4, re.S)
    # arithmetic's 30-point loss first, then function calling's 5; the entries read the dataset's own columns
    assert _domains(exams)[:2] == ["arithmetic", "function calling"]
    head = big[(big.benchmark == "arithmetic") & (big.metric == "exact_match") & big.subset.isna() & (big.rung == "Q4_K_M")].iloc[0]
    assert f"loss {-head.delta:.1f}" in exams and f"{-head.delta_ci_high:.1f}…{-head.delta_ci_low:.1f} points" in exams
    # named first, with the one exam it is not separable from: bigcodebench_hard's 10 items (± 28 points)
    first = q4[:q4.index("<br>")]
    assert first.startswith("<td>first on these items: <b>arithmetic</b>") and "overlaps code:" in first
    assert "function calling" not in first
    # the corpora on their own scale, code's KLD listed first; its per-token interval clears prose's, yet a
    # per-token interval is no evidence about which text loses most: no "first" or "separable" claim
    assert _domains(klds) == ["KLD · code-python", "KLD · prose-en"] and "nats" in klds and "points" not in klds
    assert "largest mean KLD on these texts: <b>KLD · code-python</b>; not ranked against" in q4
    assert "first: <b>KLD" not in q4 and "first on these items: <b>KLD" not in q4 and "separable from" not in q4


def test_overlapping_intervals_are_said_not_ordered(data):
    d, _ = data
    section = losses.losses_section(d[d["family"] == "big"])
    q8 = _row(section, "Q8_0")
    # bfcl's 1-point loss is shown (verdict loss); arithmetic's 1 of 100 is not, and its interval reaches over it
    assert "first on these items: <b>function calling</b>" in q8 and "not determined" in q8
    assert re.search(r'data-domain="arithmetic"[^>]*class="overlap"', q8)
    # prose and code KLD at Q8_0: listed, never ranked against each other
    assert "largest mean KLD on these texts: <b>KLD · code-python</b>" in q8 and "(at least" not in q8.split("largest")[1]
    # a point without a same-KV reference: every exam listed as not compared, with the reason
    q8kv = _row(section, "Q4_K_M", "q8_0")
    assert "not compared" in q8kv and "function calling" in q8kv and "<ol>" not in q8kv.split("not compared")[0]


def test_domains_come_from_the_exams_declarations(data, monkeypatch):
    d, _ = data
    declared = {benchmarks.get(n).domain or n for n in benchmarks.names()}
    seen = set(re.findall(r'data-domain="([^"]+)"', losses.losses_section(d)))
    assert {"arithmetic", "function calling", "long context", "code"} <= seen
    assert all(s in declared or s.startswith("KLD · ") for s in seen), seen
    # an exam that changes its declaration moves with it, nothing else to edit
    monkeypatch.setattr(benchmarks.get("arithmetic"), "domain", "maths")
    assert 'data-domain="maths"' in losses.losses_section(d)


def test_the_ranking_is_on_the_answer_screen_in_chromium(data):
    from browser import Browser

    d, tmp = data
    out = tmp / "report.html"
    report.build(tmp / "points.parquet", out, card=CARD)
    html = out.read_text()
    answer = html[html.index('<section class="answer"'):]
    answer = answer[:answer.index("</section>")]
    assert f'id="losesfirst-{CARD}"' in answer and f'href="#losesfirst-{CARD}"' in html
    with Browser(width=1366, height=900) as b:
        b.open(out)
        log = b.console()
        got = b.js(f"""const t = document.querySelector('#table-losses-{CARD}-big');
            const rows = [...t.querySelectorAll('tbody tr')].map(r => [r.cells[0].innerText, r.cells[2].innerText,
                [...r.cells[3].querySelectorAll('li')].map(li => li.dataset.domain)]);
            return [rows, t.getBoundingClientRect().width, t.closest('.tablewrap').getBoundingClientRect().width]""")
    assert log == [], log
    rows, width, wrap = got
    q4 = next(r for r in rows if r[0] == "Q4_K_M")
    assert q4[1].startswith("first on these items: arithmetic") and q4[2][0] == "arithmetic"
    assert width > 0 and wrap > 0
