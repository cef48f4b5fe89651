"""The HTML report, built from the fixture dataset and opened in a real headless Chromium.

The fixture (tests/fixtures/dataset/make_fixture.py) has two families on card cpu-test, ruler
`unanchored` everywhere, humaneval `blocked`, bigcodebench_hard at 0 % along the whole ladder, one
`incomplete` bfcl point, 7 degenerate loops at big/Q4_K_M/q8_0, big/Q6_K's bfcl loss that no test can
detect, big/Q4_K_M's ruler loss within the noise floor, and two points again on card gpu-b with 3 of 10
bfcl generations identical.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from browser import Browser
from scipy.stats import binomtest
from quantladder import cli, report
from quantladder import dataset_view as dv
from quantladder.errors import DataError
from pipeline_util import make_fixture_module



@pytest.fixture(scope="module")
def html_path(fixture_dataset, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "cpu-test" / "report.html"
    report.build(fixture_dataset, out, card="cpu-test")
    return out


@pytest.fixture(scope="module")
def page(html_path):
    """The report loaded in Chromium at laptop width: (browser, console log right after load), the
    folded plot sections opened (a closed <details> lays nothing out)."""
    with Browser(width=1366, height=900) as b:
        b.open(html_path)
        log = b.console()
        first_screen = b.js("""const a = document.querySelector('section.answer');
            const rest = [...document.querySelectorAll('svg')].filter(s => !s.closest('figure.first-chart'));
            return [a.getBoundingClientRect().top, window.innerHeight,
                    a.compareDocumentPosition(rest[0]) & Node.DOCUMENT_POSITION_FOLLOWING,
                    [...document.querySelectorAll('details.plots')].map(d => d.open),
                    rest.every(s => s.closest('details') && !s.closest('details').open),
                    [...a.querySelectorAll('p.first-sentence')].map(p => [p.dataset.family, p.getBoundingClientRect().bottom,
                                                                          p.innerText]),
                    [...a.querySelectorAll('svg')].map(s => s.closest('figure').dataset.family),
                    a.querySelector('p.first-sentence').compareDocumentPosition(a.querySelector('table'))
                        & Node.DOCUMENT_POSITION_FOLLOWING]""")
        b.js("document.querySelectorAll('details').forEach(d => d.open = true)")
        b.first_screen = first_screen
        yield b, log


def test_self_contained(html_path):
    text = html_path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    # nothing fetched from anywhere: no scripts, stylesheets, images or frames by URL
    assert not re.search(r"<(script|link|img|iframe)\b", text)
    assert not re.search(r"""(src|href)=["'](https?:)?//""", text)
    assert "@import" not in text and "url(http" not in text
    # the plots worth drawing only: headlines that vary along the ladder, the Pareto fronts of paired figures
    assert 20 < text.count("<svg") == text.count('class="plot-svg"') < 60


def test_no_console_errors_in_chromium(page):
    _, log = page
    assert log == [], f"browser console: {log}"


def test_console_check_sees_errors(tmp_path):
    """The console check is not blind: a page with a JS error and a missing image is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><img src="missing.png"><script>console.error("boom"); nope();</script></body></html>')
    with Browser() as b:
        b.open(bad)
        log = b.console()
    text = " ".join(e["message"] for e in log)
    assert "boom" in text and "nope is not defined" in text and "missing.png" in text


def test_curves_per_family_and_metric(page):
    b, _ = page
    figs = b.js("""return [...document.querySelectorAll('figure[data-kind=curve]')].map(f => [
        f.dataset.family, f.dataset.benchmark, f.dataset.metric,
        [...f.querySelectorAll('svg text')].map(t => t.textContent).join('|'),
        f.querySelector('svg').getBoundingClientRect().width])""")
    got = {(f, bm, m) for f, bm, m, _, _ in figs}
    for fam in ("big", "small"):
        for bm, m in [("bfcl", "accuracy"), ("ruler", "score_avg"), ("perplexity", "ppl"), ("speed", "tg_tokens_per_s"),
                      ("memory", "peak_mem_bytes"), ("energy", "joules_per_generated_token")]:
            assert (fam, bm, m) in got, (fam, bm, m)
        # KLD is measured against the reference: small has one such point per KV type, no curve to draw
        for m in ("kld_mean", "same_top_token"):
            assert ((fam, "perplexity", m) in got) == (fam == "big")
        # not headlines: in the tables, not drawn
        assert (fam, "bfcl", "flip_rate") not in got and (fam, "bfcl", "degenerate_items") not in got
        # 0 % at every rung: one line, not a plot
        assert (fam, "bigcodebench_hard", "pass_at_1") not in got
    for fam, bm, m, text, width in figs:
        assert "bits per weight (bits)" in text, (fam, bm, m)
        assert re.search(rf"{re.escape(m)} \([^)]+\)", text), f"y axis of {fam}/{bm}/{m} lacks a unit: {text}"
        assert "KV f16" in text  # legend: one line per KV-cache type
        assert width >= 380, f"{fam}/{bm}/{m} drawn {width}px wide: too small to read"
    # two KV types on both families: both in the legend; bytes are shown in GiB/MiB
    tg = next(t for f, bm, m, t, _ in figs if (f, bm, m) == ("big", "speed", "tg_tokens_per_s"))
    assert "KV q8_0" in tg and "tg_tokens_per_s (tokens/s)" in tg
    rss = next(t for f, bm, m, t, _ in figs if (f, bm, m) == ("big", "memory", "peak_mem_bytes"))
    assert "peak_mem_bytes (GiB)" in rss


def test_figures_that_do_not_vary_collapse_to_one_line(page):
    b, _ = page
    lines = b.js("""return Object.fromEntries([...document.querySelectorAll('#family-big li.constant')].map(
        li => [li.dataset.metric, li.textContent]))""")
    # the KV cache is the same at every rung of a KV type: its value per (KV type, context), not a plot
    kv = lines["kv_bytes_predicted"]
    assert "is the same at every rung" in kv
    assert "256.00 MiB (KV f16 · n_ctx 4096)" in kv and "2.00 GiB (KV f16 · n_ctx 32768)" in kv
    assert "128.00 MiB (KV q8_0 · n_ctx 4096)" in kv
    # every ruler average is below RULER's threshold: an effective length of 0 everywhere
    assert lines["effective_length"].startswith("effective_length is the same at every rung: 0 tokens")
    # 0 of 10 tasks: its exact interval, not "0 ± 0 %" (Clopper–Pearson: 95 % upper bound 30.8 %)
    assert "pass_at_1" in lines and "0 %, 95 % 0–31 %" in lines["pass_at_1"]
    small = b.js("""return Object.fromEntries([...document.querySelectorAll('#family-small li.constant')].map(
        li => [li.dataset.metric, li.textContent]))""")
    assert small["kld_mean"].startswith("kld_mean is measured at one rung per KV type and context only")


def test_overview_one_plot_per_metric_one_line_per_family_and_kv(page):
    b, _ = page
    figs = b.js("""return [...document.querySelectorAll('figure[data-kind=overview]')].map(f => [
        f.dataset.benchmark, f.dataset.metric, [...f.querySelectorAll('svg text')].map(t => t.textContent).join('|')])""")
    got = {(bm, m): t for bm, m, t in figs}
    for key in [("bfcl", "accuracy"), ("ruler", "score_avg"), ("perplexity", "kld_mean"),
                ("speed", "tg_tokens_per_s"), ("memory", "peak_mem_bytes"), ("energy", "joules_per_generated_token")]:
        assert key in got, key
    text = got[("bfcl", "accuracy")]
    for label in ("big · KV f16", "big · KV q8_0", "small · KV f16", "small · KV q8_0", "incomplete"):
        assert label in text
    assert "tg_tokens_per_s (tokens/s) at tg128" in got[("speed", "tg_tokens_per_s")]
    assert "score_avg (%) at n_ctx 32768" in got[("ruler", "score_avg")] and "unanchored" in got[("ruler", "score_avg")]


def test_the_report_opens_with_the_answer(page):
    """The first screen is the answer in words, one sentence per family, on screen without scrolling;
    then each family's chart of loss against memory; then the tables; every other plot folded."""
    b, _ = page
    top, height, svg_after, details_open, all_folded, sentences, charts, table_after = b.first_screen
    assert 0 <= top < height / 2
    assert [f for f, _, _ in sentences] == ["big", "small"] and all(bottom < height for _, bottom, _ in sentences)
    for fam, _, text in sentences:
        assert text.startswith(f"{fam}: run ") and " at 4,096 tokens" in text and "The rung below" in text
    assert charts == ["big", "small"]  # the only plots on the answer screen
    assert table_after  # the tables come after the words
    assert svg_after  # every other plot comes after the answer
    assert details_open and not any(details_open)  # folded at load
    assert all_folded  # every other plot sits in a closed <details>


def _cells(b, table_id):
    return b.js(f"""return [...document.querySelectorAll('#{table_id} tbody tr')].map(
        r => [...r.cells].map(c => [c.textContent, [...c.querySelectorAll('.verdict')].map(v => [v.textContent, v.title])]))""")


def test_answer_table_has_each_rungs_headlines_deltas_intervals_and_verdicts(page, fixture_dataset):
    b, _ = page
    df = dv.load(fixture_dataset)
    heads = b.js("return [...document.querySelectorAll('#table-answer-big th')].map(c => c.textContent)")
    col = {h.split(" (")[0].split("Δ")[0].strip(): i for i, h in enumerate(heads)}
    assert {"bfclaccuracy", "perplexitykld_mean", "perplexitysame_top_token", "rulerscore_avg @ n_ctx 4096",
            "rulerscore_avg @ n_ctx 32768", "memorypeak_mem_bytes", "speedtg_tokens_per_s"} <= set(col)
    rows = {r[0][0].split(" ")[0] + "/" + r[1][0]: r for r in _cells(b, "table-answer-big")}
    assert list(rows) == ["F16/f16", "Q8_0/f16", "Q6_K/f16", "Q4_K_M/f16", "Q4_K_M/q8_0"]

    def truth(rung, metric, n_ctx=None, kv="f16"):
        r = df[(df.card == "cpu-test") & (df.family == "big") & (df.rung == rung) & (df.kv == kv)
               & (df.metric == metric) & df.subset.isna()]
        return (r[r.n_ctx == n_ctx] if n_ctx else r).iloc[0]

    for rung, metric, label, n_ctx, verdict in [
            ("Q8_0", "accuracy", "bfclaccuracy", None, "loss"),  # 10 of 1000 items lost, none gained
            ("Q6_K", "accuracy", "bfclaccuracy", None, "no loss detectable"),  # 1 item lost
            ("Q4_K_M", "score_avg", "rulerscore_avg @ n_ctx 4096", 4096, "loss within noise"),
            ("Q4_K_M", "kld_mean", "perplexitykld_mean", None, "loss")]:
        text, badges = rows[f"{rung}/f16"][col[label]]
        t = truth(rung, metric, n_ctx)
        assert badges == [[verdict, t["verdict_text"]]], (rung, label)
        assert report.fmt_delta(t["delta"], t["delta_ci_low"], t["delta_ci_high"], t["unit"], compact=True) in text
    # by hand: BFCL's headline at Q8_0 is 79.0 against 80.0, the paired interval excludes 0
    text, _ = rows["Q8_0/f16"][col["bfclaccuracy"]]
    assert text.startswith("79.0 ± 1.4Δ -1.0 (-1.9…-0.3)")
    # the reference has no delta; a point whose reference was not measured says so
    assert rows["F16/f16"][col["bfclaccuracy"]] == ["80.0 ± 1.4", []]
    assert "not compared" in rows["Q4_K_M/q8_0"][col["bfclaccuracy"]][0]


def test_answer_collapses_a_constant_headline_and_states_the_noise_floor_and_the_plan(page, fixture_dataset):
    from quantladder import plan, stats

    b, _ = page
    lines = b.js("return [...document.querySelectorAll('#answer-cpu-test-big li')].map(l => l.textContent)")
    const = next(x for x in lines if x.startswith("bigcodebench_hard pass_at_1"))
    df = dv.load(fixture_dataset)
    mde = df[(df.card == "cpu-test") & (df.family == "big") & (df.benchmark == "bigcodebench_hard")
             & df.subset.isna() & (df.metric == "pass_at_1")]["delta_mde"].dropna()
    assert const.startswith("bigcodebench_hard pass_at_1 is the same at every rung: 0 %, 95 % 0–31 %")
    assert "no rung's loss is detectable (n = 10;" in const and f"{mde.min():.1f} points" in const
    heads = b.js("return [...document.querySelectorAll('#table-answer-big th')].map(c => c.textContent)")
    assert not any("bigcodebench" in h for h in heads)  # a line, not a column
    noise = next(x for x in lines if x.startswith("Noise floor"))
    # each share as k of n with its exact 95 % interval (scipy's Clopper–Pearson, by hand below)
    assert ("bfcl 1 of 1000 (0.10 %, 95 % 0.0025–0.56 %) verdicts flipped, "
            "998 of 1000 (99.80 %, 95 % 99.28–99.98 %) replies identical") in noise
    assert "ruler 24 of 400 (6.0 %, 95 % 3.9–8.8 %) verdicts flipped" in noise
    for k, n, lo, hi in ((1, 1000, 0.0025, 0.56), (998, 1000, 99.28, 99.98), (24, 400, 3.9, 8.8)):
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        # the printed ends are the exact ones rounded (to 2 significant digits of the interval's width)
        assert abs(100 * ci.low - lo) <= 0.05 * max(lo, 0.01) + 0.05 * (hi - lo) and abs(100 * ci.high - hi) <= 0.05 * (hi - lo)
    # batch invariance per rung, from its own replies: only the reference has a second batch setting
    assert "F16: replies differ (998 of 1000" in noise
    assert "Q8_0, Q6_K, Q4_K_M, Q4_K_M (KV q8_0): not measured for this rung" in noise
    items = next(x for x in lines if x.startswith("Items to detect a 2-point loss"))
    res = plan.plan(df[df.card == "cpu-test"], detect=2.0)
    need = next(x for x in res["benchmarks"] if x["family"] == "big" and x["benchmark"] == "bfcl")
    # the Q4_K_M rung flips 5 % of BFCL's 1000 items; Holm over the family's 12 headline comparisons
    assert need["n_comparisons"] == 12
    assert need["items_needed"] == stats.items_needed(0.02, 0.05, alpha=0.05 / 12, power=0.8)[0]
    assert f"bfcl {need['items_needed']:,} items (Q4_K_M;" in items and "α/m = 0.0042, m = 12" in items


def test_recommendation_at_common_budgets_needs_a_rung_shown_within_the_tolerance(page):
    b, _ = page
    rows = {r[0][0]: r for r in _cells(b, "table-recommend-cpu-test")}
    assert list(rows) == ["512 MiB – 1 GiB", "2 GiB", "4 GiB", "8 GiB", "12 GiB – 141 GiB"]
    assert rows["512 MiB – 1 GiB"][1][0] == "nothing fits"
    assert rows["2 GiB"][1][0] == "small/Q8_0/f16" and rows["4 GiB"][1][0] == "big/Q4_K_M/f16"
    # issue 33: 12 GiB and more hold big/F16 (80 %); big/Q6_K's bfcl loss is not detectable (95 % CI -0.37…+0.12),
    # yet no smaller rung of big is shown within 1 point (the walk down its ladder stops at big/Q8_0): big/F16
    big = rows["12 GiB – 141 GiB"]
    assert big[1][0] == "big/F16/f16" and "preferred over" not in big[4][0]
    # at 8 GiB big/F16 does not fit: big/Q6_K, the highest measured score that fits
    assert rows["8 GiB"][1][0] == "big/Q6_K/f16" and "preferred over" not in rows["8 GiB"][4][0]
    assert rows["8 GiB"][4][1][0][0] == "no loss detectable"  # its bfcl badge


def test_error_bars_drawn(page):
    b, _ = page
    # matplotlib draws error bars as a LineCollection (<g id="...LineCollection_1">) per series
    n = b.js("""const f = document.querySelector('figure[data-kind=curve][data-family=big][data-metric=accuracy]');
                return f.querySelectorAll('g[id*=LineCollection]').length""")
    assert n >= 2  # one per KV type


def test_unanchored_and_incomplete_are_marked(page):
    b, _ = page
    legend = b.js("""const q = s => [...document.querySelectorAll(s + ' svg text')].map(t => t.textContent).join('|');
        return [q('figure[data-kind=curve][data-family=big][data-metric=score_avg]'),
                q('figure[data-kind=curve][data-family=small][data-metric=accuracy]'),
                q('figure[data-kind=curve][data-family=big][data-metric=ppl]')]""")
    assert "unanchored" in legend[0]
    assert "incomplete" in legend[1]
    assert "unanchored" not in legend[2] and "incomplete" not in legend[2]
    badges = b.js("""return [...document.querySelectorAll('.badge')].map(e => e.textContent + ':' + getComputedStyle(e).borderStyle)""")
    assert "unanchored:dashed" in badges and any(x.startswith("incomplete:") for x in badges)
    warn = b.js("return document.querySelector('.warn').textContent")
    assert "8 points have unanchored figures" in warn and "1 point has incomplete figures" in warn


def test_anchor_status_table(page):
    b, _ = page
    rows = b.js("""return [...document.querySelectorAll('#table-anchors tbody tr')].map(
        r => [...r.cells].map(c => c.textContent))""")
    by = {r[0]: r for r in rows}
    assert set(by) == {"bfcl", "bigcodebench_hard", "energy", "humaneval", "memory", "perplexity", "ruler", "speed"}
    assert by["humaneval"][1] == "blocked" and by["humaneval"][7] == "8"
    assert "anchor deviates 7.2 points" in by["humaneval"][8]
    assert by["ruler"][1] == "unanchored" and by["ruler"][3] == "8"
    assert by["bfcl"][1] == "incomplete" and by["bfcl"][2:5] == ["7", "0", "1"]


def test_point_and_manifest_tables(page):
    b, _ = page
    pts = b.js("""return [...document.querySelectorAll('#table-points-big tbody tr')].map(
        r => [...r.cells].map(c => c.textContent))""")
    assert [r[:2] for r in pts] == [["F16 (reference)", "f16"], ["Q8_0", "f16"], ["Q6_K", "f16"], ["Q4_K_M", "f16"],
                                    ["Q4_K_M", "q8_0"]]
    header = b.js("return [...document.querySelectorAll('#table-points-big th')].map(c => c.textContent)")
    i = header.index("bfcl accuracy")
    assert pts[3][i] == "75.0 ± 1.5 %"  # the headline's se from the verdicts (test_recommend shows the sum)
    man = b.js("""return [...document.querySelectorAll('#table-manifest-cpu-test tbody tr')].map(
        r => [...r.cells].map(c => c.textContent))""")
    mh = b.js("return [...document.querySelectorAll('#table-manifest-cpu-test th')].map(c => c.textContent)")
    assert len(man) == 8 * 8  # every (point, benchmark)
    assert {"manifest hash", "GGUF sha256", "data hash", "llama-cpp-python", "libllama sha256", "card"} <= set(mh)
    blocked = [r for r in man if r[3] == "humaneval"]
    assert all(r[4] == "blocked" for r in blocked)
    col = mh.index("GGUF sha256")
    full = b.js(f"return document.querySelector('#table-manifest-cpu-test tbody tr').cells[{col}].querySelector('code').title")
    assert re.fullmatch(r"[0-9a-f]{64}", full)


def test_degenerate_and_flip_tables(page):
    b, _ = page
    deg = b.js("""return [...document.querySelectorAll('#table-degenerate-cpu-test tbody tr')].map(
        r => [r.className, ...[...r.cells].map(c => c.textContent)])""")
    loops = [r for r in deg if "loops" in r[0]]
    assert {tuple(r[1:6]) for r in loops} == {("big", "Q4_K_M", "q8_0", "bfcl", "degenerate_items"),
                                               ("big", "Q4_K_M", "q8_0", "bfcl", "degenerate_share")}
    assert [r[7] for r in loops if r[5] == "degenerate_items"] == ["7 items of 1000"]
    flips = b.js("""return [...document.querySelectorAll('#table-flips-cpu-test tbody tr')].map(
        r => [...r.cells].map(c => c.textContent))""")
    heads = b.js("return [...document.querySelectorAll('#table-flips-cpu-test th')].map(c => c.textContent)")
    # every non-reference point with a same-KV reference (the q8_0 points have none), per benchmark
    assert sorted(tuple(r[:4]) for r in flips) == sorted(
        (f, r, "f16", b) for f, r in (("big", "Q8_0"), ("big", "Q6_K"), ("big", "Q4_K_M"), ("small", "Q8_0"))
        for b in ("bfcl", "ruler", "bigcodebench_hard"))
    row = next(r for r in flips if r[:4] == ["big", "Q8_0", "f16", "bfcl"])
    # 79 % vs 80 % in each of 10 categories of 100 items: 10 of 1000 right → wrong
    assert row[heads.index("flip_rate")] == "1.00 ± 0.31 %"
    assert row[heads.index("noise floor: flip rate")] == "0.100 ± 0.100 %"  # 1 of 1000
    assert row[heads.index("noise floor: identical replies")] == "99.80 ± 0.14 %"  # 998 of 1000
    assert row[heads.index("flip rate against the noise floor")] == "above the noise floor"
    # ruler at big/Q4_K_M: 5 % of its 400 items flipped, the noise run of the reference flips 6 %
    row = next(r for r in flips if r[:4] == ["big", "Q4_K_M", "f16", "ruler"])
    assert row[heads.index("flip_rate")] == "5.0 ± 1.1 %" and row[heads.index("noise floor: flip rate")] == "6.0 ± 1.2 %"
    assert row[heads.index("flip rate against the noise floor")] == "within noise"


def test_pareto_fronts(page):
    b, _ = page
    fronts = b.js("""return [...document.querySelectorAll('figure[data-kind=pareto]')].map(f => [
        f.dataset.benchmark, f.dataset.metric, f.dataset.cost,
        [...f.querySelectorAll('tbody tr')].map(r => r.cells[0].textContent + '/' + r.cells[1].textContent + '/' + r.cells[2].textContent),
        [...f.querySelectorAll('svg text')].map(t => t.textContent).join('|')])""")
    kinds = {(bm, m, c) for bm, m, c, _, _ in fronts}
    for cost in ("peak_mem_bytes", "tg_tokens_per_s", "joules_per_generated_token"):
        assert ("bfcl", "accuracy", cost) in kinds
        assert ("perplexity", "kld_mean", cost) in kinds
    # bfcl accuracy vs memory, by hand: rising memory must buy accuracy
    (_, _, _, members, text), = [f for f in fronts if f[:3] == ["bfcl", "accuracy", "peak_mem_bytes"]]
    assert members == ["small/Q8_0/q8_0", "small/Q8_0/f16", "small/F16/f16", "big/Q4_K_M/q8_0",
                       "big/Q4_K_M/f16", "big/Q8_0/f16", "big/Q6_K/f16", "big/F16/f16"]
    assert "Pareto front" in text and "peak_mem_bytes (GiB)" in text and "accuracy (%)" in text
    # against speed: small/Q8_0/f16 (80 tokens/s, 59 %) beats small/Q8_0/q8_0 (78, 58) on both
    (_, _, _, members, _), = [f for f in fronts if f[:3] == ["bfcl", "accuracy", "tg_tokens_per_s"]]
    assert "small/Q8_0/q8_0" not in members and members[0] == "small/Q8_0/f16"


def test_cross_card_view(page):
    b, _ = page
    rows = b.js("""return [...document.querySelectorAll('#table-identical-cpu-test-gpu-b tbody tr')].map(
        r => [...r.cells].map(c => c.textContent))""")
    assert rows == [["bfcl", "2", "6/2000 (0.3 ± 0.1 %)"]]
    deltas = b.js("""return [...document.querySelectorAll('#table-deltas-cpu-test-gpu-b tbody tr')].map(
        r => [...r.cells].map(c => c.textContent))""")
    tg = [r for r in deltas if r[:5] == ["big", "Q4_K_M", "f16", "speed", "tg_tokens_per_s"]]
    # the two cards' runs are independent: Δ ± √(sd_a² + sd_b²); the interval of the difference of the means
    # of 5 repetitions each uses sd/√5
    se = (2 * 0.316 ** 2 / 5) ** 0.5
    assert tg and tg[0][6:8] == ["35.00 ± 0.32 tokens/s", "35.35 ± 0.32 tokens/s"]
    m = re.fullmatch(r"0\.35 ± 0\.45 tokens/s \(95 % CI (-?[0-9.]+)…(-?[0-9.]+)\)", tg[0][8])
    assert m, tg[0][8]
    assert (float(m.group(1)), float(m.group(2))) == pytest.approx((0.35 - 1.959964 * se, 0.35 + 1.959964 * se), abs=2e-3)


@pytest.fixture(scope="module")
def gpu_b_html(fixture_dataset, tmp_path_factory) -> str:
    """gpu-b's report, built through the command line."""
    out = tmp_path_factory.mktemp("report") / "sub" / "report.html"
    assert cli.main(["report", str(fixture_dataset), str(out), "--card", "gpu-b"]) == 0
    return out.read_text()


def test_curves_never_mix_cards(gpu_b_html):
    """gpu-b's report draws gpu-b's two points only; cpu-test's figures stay out of its curves."""
    html = gpu_b_html
    assert 'id="table-points-big"' in html
    big = re.search(r'<table id="table-points-big">.*?</table>', html).group(0)
    assert big.count("<tr>") == 2  # header + the one big point measured on gpu-b
    assert "Q8_0" not in big and "F16" not in big
    assert 'id="table-identical-gpu-b-cpu-test"' in html


def test_identical_generations_counts(fixture_dataset):
    df = dv.load(fixture_dataset)
    ident = report.identical_generations(df, "cpu-test", "gpu-b")
    assert sorted(map(tuple, ident[["family", "rung", "kv", "n_items", "n_identical"]].values.tolist())) == [
        ("big", "Q4_K_M", "f16", 1000, 3), ("small", "Q8_0", "f16", 1000, 3)]


def test_pareto_front_function():
    pts = [(1, 1), (2, 3), (3, 2), (4, 4), (2, 3)]
    assert report.pareto_front(pts, cost_lower=True, quality_higher=True) == [0, 1, 3]
    assert report.pareto_front(pts, cost_lower=False, quality_higher=True) == [3]
    assert report.pareto_front(pts, cost_lower=True, quality_higher=False) == [0]


def test_unknown_card_and_missing_dataset(fixture_dataset, tmp_path):
    with pytest.raises(DataError, match="card 'nope' is not in the dataset"):
        report.build(fixture_dataset, tmp_path / "r.html", card="nope")
    with pytest.raises(DataError, match="does not exist"):
        report.build(tmp_path / "none.parquet", tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def test_cli_report(gpu_b_html):
    assert gpu_b_html.startswith("<!DOCTYPE html>") and "Card gpu-b" in gpu_b_html


def test_sparse_dataset_still_reports(fixture_dataset, tmp_path):
    """Missing bits per weight, no memory/energy rows, a failed benchmark: the report says so instead of failing."""
    import pandas as pd

    from quantladder import dataset

    df = pd.read_parquet(fixture_dataset)
    df = df[(df["card"] == "cpu-test") & ~df["benchmark"].isin(["memory", "energy"])].copy()
    df.loc[df["family"] == "small", "bits_per_weight"] = None
    df.loc[(df["benchmark"] == "perplexity") & (df["rung"] == "Q8_0"), ["status", "status_reason"]] = [
        "failed", "llama_decode returned -1"]
    df.loc[df["metric"] == "ppl", "stderr"] = None
    rows = [{k: (None if pd.isna(v) else v) for k, v in r.items()} for r in df.to_dict("records")]
    src = tmp_path / "points.parquet"
    dataset.write(rows, src)
    html = report.build(src, tmp_path / "r.html").read_text()
    assert "no point has its bits per weight recorded" in html
    assert "No Pareto front against memory" in html and "energy per token" in html
    assert "llama_decode returned -1" in html
    with Browser() as b:
        b.open(tmp_path / "r.html")
        assert b.console() == []
        assert b.js("return document.querySelectorAll('figure[data-kind=curve][data-family=big]').length") > 5


def test_statistics_doc_pandas_example_runs(fixture_dataset, capsys):
    """docs/statistics.md's example reads the verdicts and the items needed from the dataset alone."""
    from pathlib import Path

    doc = Path(__file__).resolve().parents[1] / "docs" / "statistics.md"
    code = re.search(r"```python\n(.*?)```", doc.read_text(), re.S).group(1)
    exec(compile(code.replace("results/cpu-test/points.parquet", str(fixture_dataset)), str(doc), "exec"), {})
    out = capsys.readouterr().out
    assert "loss within noise" in out and "no loss detectable" in out and "items_needed" not in out
    assert "1749.0" in out  # big/Q4_K_M's bfcl: a 2-point loss at 5 % flips, Holm over 12


# -- each rung's identity and the importance-matrix findings (the fixture's `tiny` family: make_fixture.build(ladder=True))


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    """(make_fixture, the dataset with the `tiny` family, the browser on its cpu-test report, its console log)."""
    mf = make_fixture_module()
    src = mf.build(tmp_path_factory.mktemp("ladder-dataset"), ladder=True)
    out = tmp_path_factory.mktemp("ladder-report") / "report.html"
    report.build(src, out, card="cpu-test")
    with Browser(width=1366, height=900) as b:
        b.open(out)
        log = b.console()
        b.js("document.querySelectorAll('details').forEach(d => d.open = true)")
        yield mf, src, b, log


def _rows(b, table_id):
    return b.js(f"""return [...document.querySelectorAll('#{table_id} tbody tr')].map(
        r => [...r.cells].map(c => c.textContent))""")


def _mix(text: str) -> list[tuple[str, float, int]]:
    """'Q5_0 58 %, F32 0.03 %' -> [(type, share, decimals shown)]."""
    out = []
    for part in text.split(", "):
        t, pct, unit = part.split(" ")
        assert unit == "%", text
        out.append((t, float(pct), len(pct.split(".")[1]) if "." in pct else 0))
    return out


def _assert_mix(text: str, params: dict):
    total = sum(params.values())
    shown = _mix(text)
    # largest first, every type the file holds, each share as measured (to the digits shown)
    assert [t for t, _, _ in shown] == sorted(params, key=lambda t: (-params[t], t)), text
    for t, pct, dec in shown:
        assert abs(pct - 100 * params[t] / total) <= 0.5 * 10 ** -dec + 1e-9, (t, text)


def test_ladder_report_has_no_console_errors(ladder):
    *_, log = ladder
    assert log == [], f"browser console: {log}"


def test_rungs_table_shows_how_each_rung_was_made(ladder):
    from quantladder import ladder as qladder

    mf, _, b, _ = ladder
    heads = b.js("return [...document.querySelectorAll('#table-rungs-tiny th')].map(c => c.textContent)")
    assert heads[:6] == ["rung", "file type", "bits per weight (bits)", "size", "importance matrix", "recipe"]
    assert heads[6].startswith("tensor mix")
    rows = {r[0].replace(" (reference)", ""): r for r in _rows(b, "table-rungs-tiny")}
    rungs = list(dict.fromkeys(r for r, *_ in mf.LADDER_POINTS))
    # one row per rung (not per KV type), largest bits per weight first
    assert list(rows) == sorted(rungs, key=lambda r: -mf.tiny_bits_per_weight(r))
    settings = mf.IMATRIX_SETTINGS
    for rung in rungs:
        rec = mf.tiny_record(rung)
        _, ftype, bpw, size, im, recipe, mix = rows[rung]
        if rung == "F16":
            assert ftype == "F16" and im == "none" and recipe == "none"
        else:
            plan = qladder.plan(mf.LADDER_CONFIG, "tiny", rung)
            assert ftype == plan["type"]  # Q4_K_M-imat is a Q4_K_M file; the recipe's file is IQ2_XXS
            assert im == (f"{plan['imatrix']['corpus']} (n_ctx {settings['n_ctx']}, {settings['chunks']} chunks)"
                          if plan["imatrix"] else "none")
            assert recipe == (plan["recipe"] or "none")
        assert bpw == f"{mf.tiny_bits_per_weight(rung):.2f} bits"
        assert size == dv.fmt_bytes(rec["info"]["file_bytes"])
        _assert_mix(mix, mf.TINY_MIX[rung])
    # the matrix is what tells the two Q4_K_M rungs apart; the auto rule gives the IQ types one
    assert rows["Q4_K_M"][4] == "none" and rows["Q4_K_M-imat"][4].startswith(mf.CALIBRATION)
    assert rows["IQ2_XXS"][4].startswith(mf.CALIBRATION) and rows["Q2_K"][4] == "none"
    # 576-wide tensors fall back: on tiny, "Q4_K_M" is mostly another type than Q4_K
    assert _mix(rows["Q4_K_M"][6])[0][0] == max(mf.TINY_MIX["Q4_K_M"], key=mf.TINY_MIX["Q4_K_M"].get) != "Q4_K"
    # the chat families' rungs: their own mix, no matrix, no recipe
    big = {r[0].replace(" (reference)", ""): r for r in _rows(b, "table-rungs-big")}
    assert set(big) == set(mf.MAIN_MIX)
    for rung, r in big.items():
        assert r[1] == rung and r[4] == "none" and r[5] == "none"
        _assert_mix(r[6], {t: mf.N_PARAMS["big"] * pct // 100 for t, pct in mf.MAIN_MIX[rung].items()})


def test_a_base_model_is_said_to_be_one(ladder):
    mf, src, b, _ = ladder
    notes = b.js("""return [...document.querySelectorAll('p.base-model')].map(
        p => [p.dataset.family, p.closest('section.answer') !== null, p.textContent])""")
    assert sorted((f, in_answer) for f, in_answer, _ in notes) == [("tiny", False), ("tiny", True)]
    df = dv.load(src)
    chat = sorted(set(df[df.family == "big"].benchmark) - {"perplexity", "memory", "speed", "energy"})
    for _, _, text in notes:
        assert "a base model" in text and "families.tiny.chat: false" in text
        assert all(bm in text for bm in chat), text


def test_findings_pair_rungs_by_file_type_and_matrix(ladder):
    import math

    mf, _, b, _ = ladder
    heads = b.js("return [...document.querySelectorAll('#table-findings-cpu-test th')].map(c => c.textContent)")
    assert "unpaired" in heads[-1] and "√(se₁² + se₂²)" in heads[-1]
    title = b.js("return document.querySelector('#findings-cpu-test').textContent")
    assert "mean KLD" in title and "unpaired" in title
    how = b.js("return document.querySelector('#table-findings-cpu-test').closest('.tablewrap').nextElementSibling.textContent")
    assert "per-token values" in how and "not listed" in how
    got = _rows(b, "table-findings-cpu-test")
    pts = {(r, kv): (kld, err) for r, kv, _, kld, err, *_ in mf.LADDER_POINTS}
    # from the ladder's inputs: every (with a matrix, without) pair of plain file types on one KV type;
    # IQ2_XXS-attn8 (a recipe) is in no pair
    expected = []
    for kv in ("f16", "q8_0"):
        for what, a, c in (("IQ2_XXS with a matrix vs Q2_K without", "IQ2_XXS", "Q2_K"),
                           ("Q4_K_M with a matrix vs Q4_K_M without", "Q4_K_M-imat", "Q4_K_M")):
            if (a, kv) in pts and (c, kv) in pts:
                expected.append((kv, what, a, c))
    assert [(r[1], r[3], r[4].split(mf.CALIBRATION)[0], r[6].split("no matrix")[0]) for r in got] == expected
    assert len(expected) == 3
    for r, (kv, _, a, c) in zip(got, expected):
        (ka, ea), (kc, ec) = pts[(a, kv)], pts[(c, kv)]
        assert r[0] == "tiny" and r[2] == f"{mf.KLD_CORPUS} · n_ctx 512"
        assert r[4] == a + f"{mf.CALIBRATION} (n_ctx 512, {mf.IMATRIX_SETTINGS['chunks']} chunks)"
        assert r[6] == c + "no matrix"
        assert r[5] == dv.fmt_value(ka, ea, "nats") and r[7] == dv.fmt_value(kc, ec, "nats")
        d, se = ka - kc, math.hypot(ea, ec)
        assert r[8] == (f"{dv.fmt_value(d, se, 'nats')} (95 % CI {dv.fmt_value(d - 1.959964 * se)}…"
                        f"{dv.fmt_value(d + 1.959964 * se)} nats)")


def test_findings_leave_out_recipes_and_prebuilt_files(ladder):
    from quantladder import dataset

    mf, src, _, _ = ladder
    df = dv.load(src)
    pairs = report.findings(df[df.card == "cpu-test"])
    assert "IQ2_XXS-attn8" not in set(pairs.rung_a)  # a recipe changes more than the matrix
    # a prebuilt Q4_K_M (its maker's matrix unknown) is neither "with" nor "without" a matrix
    df.loc[(df.family == "tiny") & (df.rung == "Q4_K_M"), "imatrix"] = dataset.IMATRIX_UNKNOWN
    after = report.findings(df[df.card == "cpu-test"])
    assert len(after) == len(pairs) - len(pairs[pairs.rung_b == "Q4_K_M"]) and "Q4_K_M" not in set(after.rung_b)


def test_findings_without_pairs_say_so(page):
    b, _ = page
    note = b.js("return document.querySelector('#findings-none').textContent")
    assert "No such pair of rungs" in note
    assert b.js("return document.querySelectorAll('#table-findings-cpu-test').length") == 0
    # every family section has its rungs table, and neither chat family is called a base model
    assert b.js("return document.querySelectorAll('table[id^=table-rungs-]').length") == 2
    assert b.js("return document.querySelectorAll('p.base-model').length") == 0


def test_long_context_section_draws_scores_and_flips_against_the_length(page, fixture_dataset):
    """RULER ran at 4K and 32K: per family, its average and each task's score against the length, one
    line per rung and KV type, and the flip rate per length (counted by the aggregate from the verdicts)
    beside the noise floor; the generate jobs' memory beside weights + n_parallel × KV."""
    b, _ = page
    figs = b.js("""return [...document.querySelectorAll('figure[data-kind=longctx]')].map(f => [f.dataset.benchmark,
        f.querySelector('svg').getAttribute('aria-label'), f.querySelector('svg').getBoundingClientRect().width])""")
    labels = {f[1] for f in figs}
    assert {"big · ruler · score_avg", "big · ruler · score · vt", "big · ruler · score · niah_single_1",
            "big · ruler · flips against the reference"} <= labels
    assert all(f[0] == "ruler" and f[2] > 200 for f in figs)
    df = dv.load(fixture_dataset)
    per_len = df[(df["metric"] == "flip_rate") & df["n_ctx"].notna() & df["subset"].isna()
                 & (df["rung"] == "Q4_K_M") & (df["family"] == "big") & (df["kv"] == "f16")]
    assert sorted(per_len["n_ctx"]) == [4096, 32768] and (per_len["unit"] == "%").all()
    whole = df[(df["metric"] == "flip_rate") & df["n_ctx"].isna() & df["subset"].isna() & (df["rung"] == "Q4_K_M")
               & (df["family"] == "big") & (df["kv"] == "f16") & (df["benchmark"] == "ruler")]
    # the lengths' flips add up to the whole's: each item is at one length
    n = per_len.set_index("n_ctx")["n"]
    assert n.sum() == whole["n"].iloc[0]
    assert abs((per_len["value"] * per_len["n"]).sum() / n.sum() - whole["value"].iloc[0]) < 1e-9
    toc = b.js("return [...document.querySelectorAll('nav a')].map(a => a.textContent)")
    assert "cpu-test: long context" in toc
