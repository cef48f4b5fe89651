"""The dataset's paired columns (quantladder.deltas, called by the aggregate), checked against reference
computations on small tables: scipy's binomial test and statsmodels' exact McNemar, Holm by statsmodels,
scipy's paired t interval, a brute-force sign-flip enumeration, the stratified standard error by hand,
Tango's score statistic re-derived with a numerical constrained maximum, exact power by enumerating
scipy's binomial test, and the normal interval of a per-token figure.

The dataset is made by the real producers: each benchmark's own ``metric_rows`` on canned verdicts, the
perplexity measure's row writer on a canned summary, the score stage's common rows, and the aggregate.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from quantladder import aggregate, dataset, deltas, generation, plan, stats
from quantladder import benchmarks as qbench
from quantladder import dataset_view as dv
from quantladder import scoring
from quantladder.benchmarks.bfcl import LIVE_AST, NON_LIVE_AST
from quantladder.io import JsonlFile, write_json
from quantladder.measures import perplexity as ppl

CARD, FAM = "cpu-test", "fam"
N_HE = 100  # humaneval items: the reference gets the first 60 right
LOSSES = {"Q8_0": (2, 1), "Q3_K": (20, 0), "Q2_K": (10, 0)}  # humaneval: (lost, gained) against F16
NOISE_FLIPS = 6  # the noise run loses 6 and gains 6 of the reference's items: a 12 % flip rate
# RULER at one length: two tasks of unequal size with partial credit (scores in thirds)
RULER_REF = {"vt": [1, 1, 2 / 3, 1 / 3, 0, 1, 1, 0, 2 / 3, 1], "cwe": [1, 0, 1 / 3, 1, 2 / 3, 1]}
RULER_RUNG = {"vt": [1, 2 / 3, 2 / 3, 0, 0, 1, 1 / 3, 0, 1, 1], "cwe": [2 / 3, 0, 0, 1, 2 / 3, 1 / 3]}
BFCL_CATS = NON_LIVE_AST + LIVE_AST


def _manifest(rung, kv="f16", series="points"):
    return {"point": {"card": CARD, "family": FAM, "rung": rung, "kv": kv, "type_k": kv, "type_v": kv,
                      "is_reference": rung == "F16"},
            "model": {"bits_per_weight": {"F16": 16.0, "Q8_0": 8.5, "Q3_K": 3.9, "Q2_K": 3.0}[rung]},
            "card": {"name": "test CPU", "fingerprint": "fp"}, "keys": {"series": series}}


def _write(root, rung, bench, rows, verdicts=None, kv="f16", series="points"):
    d = root / series / rung / kv / bench
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / "metrics.json", {"benchmark": bench, "status": "ok", "rows": rows,
                                    "manifest": _manifest(rung, kv, series)})
    if verdicts is not None:
        JsonlFile(d / "verdicts.jsonl").write(verdicts)
    return str(d / "metrics.json")


def he_verdicts(lost=0, gained=0, noise=False):
    ok = [i < 60 for i in range(N_HE)]
    for i in range(lost):
        ok[i] = False
    for i in range(gained):
        ok[60 + i] = True
    if noise:
        for i in range(NOISE_FLIPS):
            ok[59 - i], ok[99 - i] = False, True
    return [{"item_id": f"HumanEval/{i}", "subset": None, "correct": c} for i, c in enumerate(ok)]


def ruler_verdicts(scores):
    return [{"item_id": f"{t}-1024-{i}", "subset": t, "n_ctx": 1024, "score": s, "correct": s == 1,
             "degenerate": False} for t, xs in scores.items() for i, s in enumerate(xs)]


def bfcl_verdicts(lost=()):
    # two items per category, both right at the reference; a rung loses the listed ones
    return [{"item_id": f"{c}_{i}", "subset": c, "correct": f"{c}_{i}" not in lost} for c in BFCL_CATS for i in range(2)]


BFCL_LOST = {"Q8_0": (), "Q3_K": ("simple_java_0", "live_simple_0", "live_simple_1"), "Q2_K": ("multiple_0",)}


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("deltas")
    he = qbench.create("humaneval", {})
    ru = qbench.create("ruler", {"tasks": ["vt", "cwe"], "lengths": [1024]})
    bf = qbench.create("bfcl", {"categories": BFCL_CATS})
    paths = []
    for rung in ("F16", "Q8_0", "Q3_K", "Q2_K"):
        v = he_verdicts(*LOSSES.get(rung, (0, 0)))
        paths.append(_write(root, rung, "humaneval", he.metric_rows(v, []) + scoring.common_rows(v, {}), v))
        rv = ruler_verdicts(RULER_REF if rung == "F16" else RULER_RUNG)
        paths.append(_write(root, rung, "ruler", ru.metric_rows(rv, []), rv))
        bv = bfcl_verdicts(BFCL_LOST.get(rung, ()))
        paths.append(_write(root, rung, "bfcl", bf.metric_rows(bv, []), bv))
        if rung != "F16":
            same = {"Q8_0": 0.99, "Q3_K": 0.9, "Q2_K": 0.8}[rung]
            summ = {"n_tokens": 2048, "ppl": 10.0, "ppl_err": 0.1, "ppl_base": 9.9, "ppl_base_err": 0.1,
                    "ppl_ratio": 1.01, "ppl_ratio_err": 0.001, "ln_ppl_ratio": 0.00995, "ln_ppl_ratio_err": 0.004,
                    "ppl_diff": 0.1, "ppl_diff_err": 0.01, "cor_ln_ppl": 0.99, "kld_mean": 0.02 * (1 - same),
                    "kld_mean_err": 0.0001, "dp_mean": 0.0, "dp_mean_err": 0.0001, "dp_rms": 0.01,
                    "dp_rms_err": 0.001, "same_top": same, "same_top_err": math.sqrt(same * (1 - same) / 2047)}
            for name, _ in ppl.PERCENTILES:
                summ[f"kld_{name}"] = summ[f"dp_{name}"] = 0.0
            paths.append(_write(root, rung, "perplexity", ppl.metric_rows(summ, 512)))
        else:
            paths.append(_write(root, rung, "perplexity", ppl.metric_rows({"n_tokens": 2048, "ppl": 9.9,
                                                                           "ppl_err": 0.1}, 512)))
    # the KV axis: the reference rung at q8_0 against the reference at f16
    v = he_verdicts(3, 0)
    paths.append(_write(root, "F16", "humaneval", he.metric_rows(v, []), v, kv="q8_0"))
    # the noise floor: the reference generated again at another batch setting
    nv = he_verdicts(noise=True)
    paths.append(_write(root, "F16", "humaneval", he.metric_rows(nv, []), nv, series="noise"))
    rows = aggregate.collect(paths)
    out = root / "points.parquet"
    dataset.write(rows, out)
    return dv.load(out)


def one(df, rung, bench, metric, subset=None, kv="f16", n_ctx=None):
    r = df[(df["rung"] == rung) & (df["kv"] == kv) & (df["benchmark"] == bench) & (df["metric"] == metric)]
    r = r[r["subset"].isna()] if subset is None else r[r["subset"] == subset]
    if n_ctx is not None:
        r = r[r["n_ctx"] == n_ctx]
    assert len(r) == 1, (rung, bench, metric, subset, len(r))
    return r.iloc[0]


# ------------------------------------------------------------------------------------------ binary items

def _tango_z(b, c, n, delta):
    """Tango's score statistic with the constrained MLE found numerically (not from the quadratic)."""
    def nll(p):
        pg, pc = p + delta, 1 - 2 * p - delta
        return -(b * math.log(p) + c * math.log(pg) + (n - b - c) * math.log(pc))
    lo, hi = max(0.0, -delta) + 1e-12, (1 - delta) / 2 - 1e-12
    p = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13}).x
    return (c - b - n * delta) / math.sqrt(n * (2 * p + delta * (1 - delta)))


@pytest.mark.parametrize("rung", ["Q8_0", "Q3_K", "Q2_K"])
def test_binary_delta_interval_and_exact_mcnemar(ds, rung):
    b, c = LOSSES[rung]
    r = one(ds, rung, "humaneval", "pass_at_1")
    assert r["delta"] == pytest.approx(100 * (c - b) / N_HE)
    # McNemar's exact test: scipy's binomial test and statsmodels agree with the column
    assert r["delta_p"] == pytest.approx(sps.binomtest(min(b, c), b + c, 0.5).pvalue)
    table = [[60 - b, b], [c, 40 - c]]
    assert r["delta_p"] == pytest.approx(mcnemar(table, exact=True).pvalue)
    # the interval's ends are where Tango's score statistic reaches ∓1.96
    z = sps.norm.ppf(0.975)
    assert _tango_z(b, c, N_HE, r["delta_ci_low"] / 100) == pytest.approx(z, abs=2e-4)
    assert _tango_z(b, c, N_HE, r["delta_ci_high"] / 100) == pytest.approx(-z, abs=2e-4)
    assert r["delta_stderr"] == pytest.approx(100 * math.sqrt(((b + c) / N_HE - ((c - b) / N_HE) ** 2) / N_HE))


def test_holm_over_the_family_headlines_equals_statsmodels(ds):
    fam = ds[ds["delta_p"].notna()]
    keep = [deltas.comparison_family(b, m, None if s is None else s) == deltas.HEADLINE
            for b, m, s in zip(fam["benchmark"], fam["metric"], fam["subset"])]
    head = fam[keep]
    # humaneval x 4 comparisons (3 rungs + the KV axis), ruler's average at its one length x 3, bfcl x 3
    assert len(head) == 10
    assert deltas.headline_comparisons(ds) == {(CARD, FAM): 10}
    _, adj, _, _ = multipletests(head["delta_p"].to_numpy(), method="holm")
    assert np.allclose(head["delta_p_adjusted"].to_numpy(), adj)
    assert all("Holm over 10" in t for t in head["verdict_text"])
    # the per-subset figures are a family of their own per benchmark (ruler: 2 tasks x 3 rungs)
    det = fam[~np.array(keep) & (fam["benchmark"] == "ruler").to_numpy()]
    _, adj, _, _ = multipletests(det["delta_p"].to_numpy(), method="holm")
    assert len(det) == 6 and np.allclose(det["delta_p_adjusted"].to_numpy(), adj)


def test_verdicts_and_the_noise_floor(ds):
    q3, q2, q8 = (one(ds, r, "humaneval", "pass_at_1") for r in ("Q3_K", "Q2_K", "Q8_0"))
    # Q3_K: 20 flips (20 %) above the noise floor's 12 %: a loss; Q2_K: 10 (10 %): significant, within noise
    assert q3["verdict"] == "loss" and q3["verdict_text"].startswith("loss of 20.0 ± 4.0 points")
    assert q2["verdict"] == "loss within noise"
    assert "within noise: its flip rate 10.0 % is not above the noise floor's 12.0 %" in q2["verdict_text"]
    assert q8["verdict"] == "no loss detectable"
    assert q8["verdict_text"].startswith("no loss detectable at n = 100 (-1.0 points")
    nf = one(ds, "F16", "humaneval", "noise_flip_rate")
    assert nf["value"] == pytest.approx(100 * 2 * NOISE_FLIPS / N_HE)


def _exact_power(n, loss, psi, alpha):
    """Power of the exact McNemar test by enumerating scipy's binomial test."""
    psi = max(psi, loss)
    pi = (psi + loss) / (2 * psi)
    total = 0.0
    for m in range(1, n + 1):  # no discordant item: p = 1, never a rejection
        pm = sps.binom.pmf(m, n, psi)
        if pm < 1e-14:
            continue
        rej = sum(sps.binom.pmf(k, m, pi) for k in range(m + 1) if sps.binomtest(k, m, 0.5).pvalue <= alpha)
        total += pm * rej
    return total


def test_smallest_detectable_loss_has_the_power_at_the_planning_level(ds):
    r = one(ds, "Q8_0", "humaneval", "pass_at_1")
    alpha = 0.05 / 10  # Holm's strictest step over the family's 10 headline comparisons
    mde = r["delta_mde"] / 100
    assert _exact_power(N_HE, mde + 1e-6, 0.03, alpha) >= 0.8
    assert _exact_power(N_HE, mde - 0.005, 0.03, alpha) < 0.8
    assert f"smallest detectable loss at 80 % power: {r['delta_mde']:.1f} points" in r["verdict_text"]


def test_the_kv_axis_is_compared_at_the_reference_rung(ds):
    r = one(ds, "F16", "humaneval", "pass_at_1", kv="q8_0")
    assert r["delta"] == pytest.approx(-3.0)
    assert r["delta_p"] == pytest.approx(sps.binomtest(0, 3, 0.5).pvalue)
    assert math.isnan(one(ds, "F16", "humaneval", "pass_at_1")["delta"])  # the reference itself: no comparison


# ------------------------------------------------------------------------------------------ partial credit

def test_partial_credit_task_scores_get_scipys_paired_t_and_an_exact_sign_flip_test(ds):
    for task in ("vt", "cwe"):
        r = one(ds, "Q8_0", "ruler", "score", subset=task, n_ctx=1024)
        x, y = np.array(RULER_REF[task]), np.array(RULER_RUNG[task])
        t = sps.ttest_rel(y, x)
        ci = t.confidence_interval()
        assert r["delta"] == pytest.approx(100 * (y - x).mean())
        # scipy's paired t interval, widened at each end to Tango's on the loss and gain shares at the
        # design's effective n where that is wider (few items differ: tests/test_coverage.py)
        dd, n = y - x, len(x)
        n_star = min(n, dd.var() / (dd.std(ddof=1) ** 2 / n))
        lo_g, hi_g = stats.tango_interval(n_star * np.clip(-dd, 0, None).mean(), n_star * np.clip(dd, 0, None).mean(),
                                          n_star)
        assert r["delta_ci_low"] <= 100 * ci.low + 1e-9 and r["delta_ci_high"] >= 100 * ci.high - 1e-9
        # the t part on the squared residuals' effective number of terms as its degrees of freedom (a few
        # items that differ carry the variance), at most n − 1
        a = (dd - dd.mean()) ** 2
        df = min(n - 1, max(1.0, a.sum() ** 2 / (a * a).sum() - 1))
        q = sps.t.ppf(0.975, df) * dd.std(ddof=1) / np.sqrt(n)
        t_lo, t_hi = dd.mean() - q, dd.mean() + q
        assert (r["delta_ci_low"], r["delta_ci_high"]) == pytest.approx((100 * min(t_lo, lo_g),
                                                                        100 * max(t_hi, hi_g)))
        # the sign-flip test by brute force over every sign vector of the nonzero differences
        d = (y - x)[(y - x) != 0]
        obs = abs(d.sum())
        hits = [abs(np.dot(s, np.abs(d))) >= obs - 1e-12 for s in itertools.product((-1, 1), repeat=d.size)]
        assert r["delta_p"] == pytest.approx(np.mean(hits))


def test_the_average_over_tasks_weighs_each_task_alike(ds):
    r = one(ds, "Q8_0", "ruler", "score_avg", n_ctx=1024)
    per_task = [np.mean(np.array(RULER_RUNG[t]) - np.array(RULER_REF[t])) for t in ("vt", "cwe")]
    assert r["delta"] == pytest.approx(100 * np.mean(per_task))  # not the pooled mean over the 16 items
    pooled = np.mean(np.concatenate([np.array(RULER_RUNG[t]) - np.array(RULER_REF[t]) for t in ("vt", "cwe")]))
    assert abs(r["delta"] - 100 * pooled) > 1
    # stratified by task: SE² = Σ_h (1/H)² var_h / n_h
    se = math.sqrt(sum((0.5 ** 2) * np.var(np.array(RULER_RUNG[t]) - np.array(RULER_REF[t]), ddof=1) / len(RULER_REF[t])
                       for t in ("vt", "cwe")))
    assert r["delta_stderr"] == pytest.approx(100 * se)


# ------------------------------------------------------------------------------------------ BFCL's weighted headline

def test_bfcl_headline_is_weighted_as_bfcl_weighs_it(ds):
    ref_h = one(ds, "F16", "bfcl", "accuracy")["value"]
    for rung, lost in BFCL_LOST.items():
        r = one(ds, rung, "bfcl", "accuracy")
        assert r["delta"] == pytest.approx(one(ds, rung, "bfcl", "accuracy")["value"] - ref_h)
        if not lost:
            assert r["delta"] == 0 and r["verdict"] == "no loss detectable"
            continue
        # stratified by category: SE² = Σ_h share_h² var(d_h) / n_h, share_h = the category's weight in the headline
        w = qbench.get("bfcl")().item_weights(bfcl_verdicts())
        se2 = 0.0
        for c in BFCL_CATS:
            d = np.array([-1.0 if f"{c}_{i}" in lost else 0.0 for i in range(2)])
            share = 2 * w[f"{c}_0"] / sum(w.values())
            se2 += share ** 2 * np.var(d, ddof=1) / 2
        assert r["delta_stderr"] == pytest.approx(100 * math.sqrt(se2))
    # a summary subset (BFCL's non_live: a mean of categories) is not compared, and says why
    nl = one(ds, "Q3_K", "bfcl", "accuracy", subset="non_live")
    assert math.isnan(nl["delta"]) and "summary of other subsets" in nl["verdict_text"]
    # a category is a plain binary comparison: one loss of two items
    cat = one(ds, "Q3_K", "bfcl", "accuracy", subset="simple_java")
    assert cat["delta"] == pytest.approx(-50.0) and cat["delta_p"] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------ per-token figures

def test_per_token_figures_get_the_normal_interval_of_their_own_standard_error(ds):
    z = sps.norm.ppf(0.975)
    for rung in ("Q8_0", "Q3_K", "Q2_K"):
        k = one(ds, rung, "perplexity", "kld_mean")
        assert k["delta"] == pytest.approx(k["value"])  # a divergence: 0 at the reference
        assert (k["delta_ci_low"], k["delta_ci_high"]) == pytest.approx((k["value"] - z * 1e-4, k["value"] + z * 1e-4))
        assert k["delta_p"] == pytest.approx(2 * sps.norm.sf(k["value"] / 1e-4))
        s = one(ds, rung, "perplexity", "same_top_token")
        assert s["delta"] == pytest.approx(s["value"] - 100.0)  # an agreement share: 100 % at the reference
        assert s["verdict"] == "loss" and "tokens taken as independent" in s["verdict_text"]
        lr = one(ds, rung, "perplexity", "ln_ppl_ratio")
        assert lr["delta"] == pytest.approx(0.00995) and lr["delta_stderr"] == pytest.approx(0.004)
    # the per-token family is corrected apart: Holm over its 9 figures
    tok = ds[(ds["benchmark"] == "perplexity") & ds["delta_p"].notna()]
    _, adj, _, _ = multipletests(tok["delta_p"].to_numpy(), method="holm")
    assert len(tok) == 9 and np.allclose(tok["delta_p_adjusted"].to_numpy(), adj)


# ------------------------------------------------------------------------------------------ items needed

def test_items_needed_rows_are_the_plan_for_a_2_point_loss(ds):
    rows = ds[ds["metric"] == "items_needed"]
    res = plan.plan(ds, detect=deltas.DETECT_POINTS)
    by = {(b["benchmark"], r["rung"]): r for b in res["benchmarks"] if b["kv"] == "f16" for r in b["rungs"]}
    he = next(b for b in res["benchmarks"] if b["benchmark"] == "humaneval" and b["kv"] == "f16")
    assert he["n_comparisons"] == 10  # the m the verdicts were corrected over
    for r in rows.itertuples():
        if r.kv != "f16":
            continue
        assert r.value == by[(r.benchmark, r.rung)]["items_needed"]
        assert r.n == by[(r.benchmark, r.rung)]["n"]
    q3 = one(ds, "Q3_K", "humaneval", "items_needed")
    assert q3["value"] == stats.items_needed(0.02, 0.2, alpha=0.05 / 10, power=0.8)[0]
    assert q3["unit"] == "items" and q3["n"] == N_HE


def _noise_pair(root, bench, texts_ref, texts_noise):
    """The reference point and its noise-floor run of one benchmark, with replies and verdicts."""
    b = qbench.create(bench, {})
    out = []
    for series, texts in (("points", texts_ref), ("noise", texts_noise)):
        v = [{"item_id": f"{bench}-{i}", "subset": None, "correct": i % 2 == 0} for i in range(len(texts))]
        path = _write(root, "F16", bench, b.metric_rows(v, []), v, series=series)
        d = root / series / "F16" / "f16" / bench  # the generation loop's writer, with its generations.json
        generation.write_outputs(generation.Result([{"item_id": f"{bench}-{i}", "text": t, "finish_reason": "stop"}
                                                    for i, t in enumerate(texts)],
                                                   {"generated": len(texts)}), d / "generations.jsonl",
                                 d / "generations.json")
        out.append(path)
    return out


@pytest.mark.parametrize("bfcl_noise, invariant", [(["a", "b", "c"], True), (["a", "B", "c"], False)])
def test_batch_invariance_is_measured_per_pair_and_pooled_per_card(tmp_path, bfcl_noise, invariant):
    """Each noise-floor pair says whether every reply held at the other batch setting (1/0, n); the
    report pools the card's pairs: yes only when every reply of every pair is identical."""
    from quantladder.report.tables import batch_invariance, batch_invariance_line

    paths = (_noise_pair(tmp_path, "humaneval", ["x", "y", "z", "w"], ["x", "y", "z", "w"])
             + _noise_pair(tmp_path, "bfcl", ["a", "b", "c"], bfcl_noise))
    dataset.write(aggregate.collect(paths), tmp_path / "points.parquet")
    df = dv.load(tmp_path / "points.parquet")
    he, bf = one(df, "F16", "humaneval", "batch_invariant"), one(df, "F16", "bfcl", "batch_invariant")
    assert (he["value"], he["n"], he["unit"]) == (1.0, 4, "1")
    assert (bf["value"], bf["n"]) == (float(invariant), 3)
    assert batch_invariance(df) == (invariant, 7 if invariant else 6, 7, 2)
    line = batch_invariance_line(df)
    # said per rung, from its own replies: here the reference's, the only rung with a second batch setting
    assert (f'F16: <b data-batch-invariant="{"yes" if invariant else "no"}" data-rung="F16">'
            f"{'every reply identical' if invariant else 'replies differ'}</b> ({7 if invariant else 6} of 7 (" in line)
    assert batch_invariance(df[df["metric"] != "batch_invariant"]) is None  # no noise floor: not claimed
