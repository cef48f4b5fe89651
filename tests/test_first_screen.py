"""The report's first screen (issue 42): honest small-n statements and one sentence per family.

A share is never "± 0": it carries its exact (Clopper–Pearson) interval, checked against scipy's
binomial test; batch invariance is stated per rung from that rung's own replies; the answer opens
per family on a sentence, from the family's walk (quantladder.find, run here by its own functions on
files holding the dataset's figures) or from the recommender, checked in a real headless Chromium;
and the walk and the dataset (what the recommender ranks by) never disagree on the same figures.
"""

from __future__ import annotations

import html
import re

import pytest
from scipy.stats import binomtest

from browser import Browser
from quantladder import config as qconfig
from quantladder import dataset_view as dv
from quantladder import find as qfind
from quantladder import metrics, report, sizes
from quantladder import targets as qtargets
from quantladder.io import write_json
from quantladder.measures.perplexity import passes
from quantladder.report import first
from quantladder.report.markup import share_text
from quantladder.stats.share import share_interval

CARD = "cpu-test"
FAM = "tiny"  # the fixture's base model: KLD on one corpus per rung, no task benchmark
CORPUS = "pydoc-topics"
# "± 0" and "± 0.0…" not followed by more digits: a standard error of zero
ZERO_PM = re.compile(r"± 0(?:\.0+)?(?![\d.])")


# ------------------------------------------------------------------------------------------ the exact share

@pytest.mark.parametrize("k, n", [(0, 1), (0, 10), (10, 10), (1, 1000), (998, 1000), (3, 7), (16, 16), (24, 400)])
def test_share_interval_is_clopper_pearson(k, n):
    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    lo, hi = share_interval(k, n)
    assert lo == pytest.approx(ci.low, abs=1e-12) and hi == pytest.approx(ci.high, abs=1e-12)
    lo99, hi99 = share_interval(k, n, level=0.99)
    assert lo99 <= lo and hi99 >= hi  # a higher level, a wider interval


def test_a_share_of_none_of_ten_is_not_zero_plus_minus_zero():
    assert share_text(0.0, 10) == "0 %, 95 % 0–31 %"  # the issue's own example
    assert share_text(100.0, 16, counts=True) == "16 of 16 (100 %, 95 % 79–100 %)"
    # a weighted share whose count is not k of n says so instead of inventing an interval
    assert share_text(37.5, 7) == "37.5 % (no spread measured)"


@pytest.mark.parametrize("k, n", [(-1, 10), (11, 10), (0, 0), (1.5, 10)])
def test_share_interval_refuses_what_is_no_count(k, n):
    with pytest.raises(ValueError, match="share_interval"):
        share_interval(k, n)


# ------------------------------------------------------------------------------------------ a walk on the fixture

def _kld_rows(df):
    g = df[(df.card == CARD) & (df.family == FAM) & (df.benchmark == "perplexity") & (df.metric == "kld_mean")
           & (df.subset == CORPUS) & (df.kv == "f16")]
    return {r.rung: r for r in g.itertuples()}


def _walk(df, root, tamper: dict | None = None, accept: float = 0.1):
    """The walk down tiny's ladder by find's own functions: each rung's KLD read by find.evidence from a
    pass file holding the dataset's own figure (``tamper``: rung -> a value written instead)."""
    rows = _kld_rows(df)
    cfg = {"measures": {"perplexity": {"n_ctx": 512}}}  # what find reads a pass file's path from
    for rung, r in rows.items():
        value = (tamper or {}).get(rung, r.value)
        path = (root / qfind.figure_files(_spec(rows, accept), cfg, CARD, rung)[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"benchmark": "perplexity", "status": "ok", "rows": [
            metrics.row("kld_mean", float(value), stderr=float(r.stderr), n=int(r.n), subset=CORPUS, n_ctx=512)]})
    sp = _spec(rows, accept)
    pts = dv.point_table(df[(df.card == CARD) & (df.family == FAM) & (df.kv == "f16")]).set_index("rung")
    mem = df[(df.card == CARD) & (df.family == FAM) & (df.kv == "f16") & (df.metric == "predicted_total_bytes")
             & (df.n_ctx == 4096)].set_index("rung")["value"]
    cands = [{"rung": r, "order": i, "bits_per_weight": float(pts.loc[r, "bits_per_weight"]),
              "weights_bytes": int(pts.loc[r, "file_bytes"]), "kv_bytes": int(mem[r] - pts.loc[r, "file_bytes"]),
              "predicted_bytes": int(mem[r]), "fits": True} for i, r in enumerate(sp.rungs)]
    cands.sort(key=lambda c: (-c["bits_per_weight"], c["order"]))
    state = qfind.start(sp, cands)
    while not state["done"]:
        r = state["next"]
        state = qfind.advance(state, qfind.evidence(sp, cfg, CARD, r, qfind.level_of(state, r), root))
    return {**qfind.answer(state), "card": CARD}


def _spec(rows, accept):
    fig = qfind.Figure(f"kld:{CORPUS}<={accept:g}", "perplexity", "kld_mean", CORPUS, accept, "nats", False)
    # the largest candidate first: the whole level down a fixed sequence, the dataset's 95 % intervals
    order = sorted((r for r in rows if r != "F16"), key=lambda r: (-rows[r].bits_per_weight, r))
    return qfind.Spec(FAM, "F16", 1 << 40, "1TiB", 4096, "f16", (fig,), tuple(order), order[0], 0.025, "step", None, 1)


@pytest.fixture(scope="module")
def ladder_df(tmp_path_factory):
    from pipeline_util import make_fixture_module

    path = make_fixture_module().build(tmp_path_factory.mktemp("ladder"), ladder=True)
    return path, dv.load(path)


@pytest.fixture(scope="module")
def walked(ladder_df, tmp_path_factory):
    path, df = ladder_df
    root = tmp_path_factory.mktemp("walk")
    ans = _walk(df, root)
    out = root / "report.html"
    write_json(root / "find.json", ans)
    report.build(path, out, card=CARD, finds=[root / "find.json"])
    return ans, out, df


def test_the_walk_and_the_dataset_agree_on_the_same_figures(walked, ladder_df, tmp_path):
    ans, _, df = walked
    fam = df[(df.card == CARD) & (df.family == FAM)]
    # by hand: Q4_K_M-imat's KLD 0.047 ± 0.0024 is within 0.1; IQ2_XXS-attn8's 0.41 ± 0.016 is not
    assert ans["verdict"] == "acceptable" and ans["rung"] == "Q4_K_M-imat" and ans["below"] == "IQ2_XXS-attn8"
    assert ans["evidence"]["interval_level"] == pytest.approx(0.95)
    assert first.disagreements(ans, fam) == []
    # the same figure read differently is caught: a walk whose Q4_K_M-imat KLD is not the dataset's
    bad = _walk(df, tmp_path, tamper={"Q4_K_M-imat": 0.06})
    said = first.disagreements(bad, fam)
    assert said and said[0].startswith("Q4_K_M-imat perplexity:kld_mean:pydoc-topics: Δ 0.06 in the walk, 0.047")
    # at a tighter bound the walk stops at once (Q4_K_M: 0.061 ± 0.0031, its 95 % lower bound 0.055 > 0.05),
    # and the dataset's interval says the same
    close = _walk(df, tmp_path / "b", accept=0.05)
    assert close["verdict"] == "none acceptable" and first.disagreements(close, fam) == []


def test_no_plus_minus_zero_for_a_share_anywhere_in_the_report(walked):
    _, out, _ = walked
    text = out.read_text()
    text = re.sub(r"<svg.*?</svg>", "", text, flags=re.S)
    words = html.unescape(re.sub(r"<[^>]+>", " ", text))
    titles = " ".join(html.unescape(t) for t in re.findall(r'title="([^"]*)"', text))
    hits = [m.group(0) for m in re.finditer(r".{50}" + ZERO_PM.pattern + r".{10}", words + " " + titles)]
    assert hits == []
    # the fixture's 0-of-10 code exam is said with its exact interval instead (Clopper–Pearson 0–30.8 %)
    assert "0 %, 95 % 0–31 %" in words


def test_the_first_screen_opens_on_one_sentence_per_family_in_chromium(walked):
    ans, out, df = walked
    with Browser(width=1366, height=900) as b:
        b.open(out)
        log = b.console()
        got = b.js("""const a = document.querySelector('section.answer');
            return [[...a.querySelectorAll('p.first-sentence')].map(p => [p.dataset.family, p.dataset.source,
                        p.dataset.rung, p.innerText, p.getBoundingClientRect().top, p.getBoundingClientRect().bottom]),
                    window.innerHeight,
                    [...a.querySelectorAll('figure.first-chart')].map(f => [f.dataset.family,
                        [...f.querySelectorAll('svg text')].map(t => t.textContent).join('|'),
                        f.getBoundingClientRect().width]),
                    a.querySelector('p.first-sentence').compareDocumentPosition(a.querySelector('figure.first-chart'))
                        & Node.DOCUMENT_POSITION_FOLLOWING,
                    a.querySelector('figure.first-chart').compareDocumentPosition(a.querySelector('table'))
                        & Node.DOCUMENT_POSITION_FOLLOWING,
                    [...a.querySelectorAll('p.disagree')].length]""")
    assert log == [], log
    sentences, height, charts, chart_after, table_after, disagree = got
    by = {f: (src, rung, text, top, bottom) for f, src, rung, text, top, bottom in sentences}
    assert list(by) == ["big", "small", "tiny"]  # every family, in order, before anything else of the answer
    assert all(bottom < height for *_, bottom in by.values()), (height, by)  # on the first screen, no scrolling
    assert chart_after and table_after and disagree == 0
    src, rung, text, _, _ = by["tiny"]
    mem = ans["memory"]["predicted_bytes"]
    ev = ans["evidence"]["figures"][0]
    assert (src, rung) == ("find", "Q4_K_M-imat")
    assert text.startswith(f"tiny: run Q4_K_M-imat, {dv.fmt_bytes(mem)} at 4,096 tokens")
    # the figure that decided, with its bound against the accepted loss; the rung below and why not
    assert f"its bound {ev['bound']:.3g} within the accepted 0.1 nats" in text
    assert "The rung below, IQ2_XXS-attn8, was not taken: not acceptable" in text
    assert "beyond the accepted 0.1 nats" in text
    for fam in ("big", "small"):  # no walk: the recommender over the family's own points
        src, rung, text, _, _ = by[fam]
        assert src == "recommend" and text.startswith(f"{fam}: run {rung}") and "The rung below" in text
    assert [c[0] for c in charts] == ["big", "small", "tiny"]
    tiny = next(c for c in charts if c[0] == "tiny")
    assert "accepted loss (0.1 nats)" in tiny[1] and "Q4_K_M-imat" in tiny[1] and tiny[2] >= 380


def test_batch_invariance_is_stated_per_rung(walked):
    _, out, _ = walked
    text = html.unescape(re.sub(r"<[^>]+>", "", out.read_text()))
    # only each family's reference was generated again at another batch setting: no other rung is claimed
    assert "Replies batch-invariant here" not in text
    assert "F16: replies differ (998 of 1000 (99.80 %, 95 % 99.28–99.98 %), over 1 benchmark)" in text
    assert "Q8_0, Q6_K, Q4_K_M, Q4_K_M (KV q8_0): not measured for this rung" in text


# ------------------------------------------------------------------------------------------ the default config

def test_the_default_config_walks_over_points_it_measures_anyway():
    """The default runs a walk and the recommendation at the same budget and context; every figure the
    walk reads is a perplexity pass the default plan makes for every candidate, so only its steps run."""
    cfg = qconfig.load()
    sp = qfind.spec(cfg)
    target = cfg["recommend"]["target"]
    assert (sp.mem, sp.ctx) == (target["mem"], sizes.parse_ctx(str(target["ctx"]), "ctx"))
    assert all(f.benchmark == "perplexity" for f in sp.figures)  # against the family's reference, as the dataset's
    planned = {t.path for t in qtargets.planned(cfg, CARD)}
    for r in sp.rungs:
        for f in sp.figures:
            assert (f.corpus, f"n{cfg['measures']['perplexity']['n_ctx']}") in passes(cfg)
            assert f"results/{CARD}/points/{sp.family}/{r}/{sp.kv}/perplexity/metrics.json" in planned
