"""The paired statistics against reference computations: scipy/statsmodels on small tables, published
interval values, brute-force enumeration, and coverage computed exactly over every possible table."""

import itertools
import math

import numpy as np
import pytest
from scipy import optimize, special
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

from quantladder import stats
from quantladder.errors import DataError
from quantladder.stats import paired as P
from quantladder.stats import power as W

Z95 = sps.norm.ppf(0.975)


def _verdicts(correct, subsets=None, scores=None, prefix="i"):
    out = []
    for k, c in enumerate(correct):
        v = {"item_id": f"{prefix}{k}", "correct": bool(c), "subset": None if subsets is None else subsets[k]}
        if scores is not None:
            v["score"] = scores[k]
        out.append(v)
    return out


# ------------------------------------------------------------------ McNemar's exact test

def test_mcnemar_exact_equals_scipy_and_statsmodels_on_every_small_table():
    for b in range(13):
        for c in range(13):
            p = stats.mcnemar_exact(b, c)
            if b + c:
                assert p == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue, rel=1e-12)
            # statsmodels' exact McNemar on the 2x2 table [[both, loss], [gain, neither]]
            table = np.array([[5, b], [c, 7]])
            assert p == pytest.approx(sm_mcnemar(table, exact=True).pvalue, rel=1e-12, abs=1e-15)


def test_binary_delta_uses_only_common_items_and_counts_the_dropped():
    ref = _verdicts([1, 1, 1, 1, 1, 1, 1, 0, 0, 1])
    rung = _verdicts([0, 0, 0, 0, 0, 0, 1, 0, 1])  # item i9 missing in the rung
    rung.append({"item_id": "extra", "correct": True, "subset": None})
    d = stats.compare(ref, rung)
    assert (d.n, d.only_reference, d.only_rung) == (9, 1, 1)
    assert (d.n_loss, d.n_gain) == (6, 1)
    assert d.estimate == pytest.approx(100 * (1 - 6) / 9)
    assert d.p_value == pytest.approx(sps.binomtest(6, 7, 0.5).pvalue)
    assert d.ci_low < d.estimate < d.ci_high
    assert "left out" in d.notes[0]


def test_bad_verdicts_are_named():
    with pytest.raises(DataError, match="appears twice"):
        stats.pair_verdicts(_verdicts([1, 0]) + _verdicts([1]), _verdicts([1, 0]))
    with pytest.raises(DataError, match="no 'correct'"):
        stats.pair_verdicts([{"item_id": "a"}], _verdicts([1]))
    with pytest.raises(DataError, match="no item in common"):
        stats.compare(_verdicts([1], prefix="a"), _verdicts([1], prefix="b"))


# ------------------------------------------------------------------ Tango and Newcombe intervals

# Published 95 % intervals for rung − reference (x = (both, gain, loss, neither) in our orientation).
# Tango: Fagerland, Lydersen & Laake (2014, Table II data), Tang et al. (2010), Chang et al. (2024), as
# reproduced in the ratesci R package's tests; Newcombe (1998) method 10 and the same examples (the last
# one from the contingencytables R package's tests, Cavo et al.'s data in Fagerland et al.'s book).
TANGO_PUBLISHED = [((1, 1, 7, 12), (-0.517, -0.026), 3), ((8, 3, 1, 2), (-0.1670, 0.4327), 4),
                   ((7, 25, 2, 68), (0.139, 0.321), 3)]
NEWCOMBE_PUBLISHED = [((20, 12, 2, 16), (0.0562, 0.3292), 4), ((1, 1, 7, 12), (-0.507, -0.026), 3),
                      ((8, 3, 1, 2), (-0.1574, 0.4136), 4), ((7, 25, 2, 68), (0.133, 0.318), 3),
                      ((59, 6, 16, 80), (-0.1186, -0.0046), 4)]


@pytest.mark.parametrize("cells,expected,digits", TANGO_PUBLISHED)
def test_tango_interval_reproduces_published_values(cells, expected, digits):
    both, gain, loss, neither = cells
    lo, hi = stats.tango_interval(loss, gain, sum(cells))
    assert (round(lo, digits), round(hi, digits)) == expected


@pytest.mark.parametrize("cells,expected,digits", NEWCOMBE_PUBLISHED)
def test_newcombe_interval_reproduces_published_values(cells, expected, digits):
    both, gain, loss, neither = cells
    lo, hi = stats.newcombe_interval(both, loss, gain, neither)
    assert (round(lo, digits), round(hi, digits)) == expected


def test_restricted_mle_is_the_constrained_maximum():
    for b, c, n in [(7, 1, 21), (0, 0, 10), (3, 9, 40), (12, 0, 30)]:
        for delta in (-0.4, -0.1, 0.0, 0.05, 0.3):
            lo, hi = max(0.0, -delta), (1 - delta) / 2
            if hi <= lo:
                continue
            num = optimize.minimize_scalar(lambda p: -P.multinomial_loglik(b, c, n, p, delta),
                                           bounds=(lo + 1e-12, hi - 1e-12), method="bounded",
                                           options={"xatol": 1e-12})
            mine = P.restricted_mle_loss(b, c, n, delta)
            assert P.multinomial_loglik(b, c, n, mine, delta) >= -num.fun - 1e-7


def test_tango_interval_is_the_brute_force_inversion_of_the_score_test():
    """Scan a fine grid of deltas, maximise the likelihood numerically under each, keep those the score
    test accepts: the ends match the root-found interval."""
    b, c, n = 9, 3, 35
    grid = np.linspace(-0.99, 0.99, 19801)
    keep = []
    for delta in grid:
        lo, hi = max(0.0, -delta), (1 - delta) / 2
        res = optimize.minimize_scalar(lambda p: -P.multinomial_loglik(b, c, n, p, delta),
                                       bounds=(lo + 1e-12, hi - 1e-12), method="bounded")
        z = (c - b - n * delta) / math.sqrt(n * (2 * res.x + delta * (1 - delta)))
        if abs(z) <= Z95:
            keep.append(delta)
    lo, hi = stats.tango_interval(b, c, n)
    assert min(keep) == pytest.approx(lo, abs=2e-4) and max(keep) == pytest.approx(hi, abs=2e-4)


def _log_multinomial(n):
    """All (losses, gains) tables of n items and their log multinomial coefficient."""
    tabs = np.array([(b, c) for b in range(n + 1) for c in range(n + 1 - b)])
    b, c = tabs[:, 0], tabs[:, 1]
    k = n - b - c
    coef = special.gammaln(n + 1) - special.gammaln(b + 1) - special.gammaln(c + 1) - special.gammaln(k + 1)
    return b, c, k, coef


def _exact_coverage(n, intervals, grid):
    b, c, k, coef = _log_multinomial(n)
    lo, hi = intervals[:, 0], intervals[:, 1]
    out = []
    for pl, pg in grid:
        pr = np.exp(coef + special.xlogy(b, pl) + special.xlogy(c, pg) + special.xlogy(k, 1 - pl - pg))
        d = pg - pl
        out.append(float(pr[(lo - 1e-12 <= d) & (d <= hi + 1e-12)].sum()))
    return np.array(out)


@pytest.mark.parametrize("n", [20, 40])
def test_tango_coverage_is_near_95_percent_over_every_possible_table(n):
    """Coverage computed exactly (every table, weighted by its probability), not simulated, over a grid of
    loss/gain probabilities; the Wald interval on the same tables shows what poor coverage looks like."""
    b, c, _, _ = _log_multinomial(n)
    tango = np.array([stats.tango_interval(int(x), int(y), n) for x, y in zip(b, c)])
    d = (c - b) / n
    se = np.sqrt(np.maximum((b + c) / n - d * d, 0) / n)
    wald = np.stack([d - Z95 * se, d + Z95 * se], axis=1)
    grid = [(pl, pg) for pl in (0.02, 0.05, 0.1, 0.2, 0.3) for pg in (0.02, 0.05, 0.1, 0.2, 0.3)]
    cov_t, cov_w = _exact_coverage(n, tango, grid), _exact_coverage(n, wald, grid)
    assert 0.94 <= cov_t.mean() <= 0.975, cov_t
    assert cov_t.min() >= 0.92, cov_t
    assert cov_w.min() < 0.88  # the naive interval undercovers badly on the same grid


# ------------------------------------------------------------------ sign-flip tests, weights, scores

def test_sign_flip_on_unweighted_binary_items_is_mcnemar_exact():
    for b, c in [(6, 1), (0, 5), (10, 10), (3, 0), (14, 4)]:
        d = np.array([-1.0] * b + [1.0] * c + [0.0] * 7)
        p, how = stats.sign_flip_pvalue(d)
        assert how == "exact" and p == pytest.approx(stats.mcnemar_exact(b, c), rel=1e-12)


def test_sign_flip_exact_equals_brute_force_enumeration_of_every_sign_vector():
    rng = np.random.default_rng(3)
    d = np.round(rng.uniform(-1, 1, size=12), 2)
    d[[2, 5]] = d[0]  # repeated magnitudes take the grouped path
    t_obs = abs(d.sum())
    signs = np.array(list(itertools.product([-1, 1], repeat=d.size)))
    brute = float(np.mean(np.abs(signs @ np.abs(d)) >= t_obs - 1e-9))
    p, how = stats.sign_flip_pvalue(d)
    assert how == "exact" and p == pytest.approx(brute, rel=1e-10)
    mc, how_mc = stats.sign_flip_pvalue(d, exact_support_max=10, seed=7)
    assert how_mc.startswith("monte carlo") and mc == pytest.approx(brute, abs=0.005)
    assert stats.sign_flip_pvalue(d, exact_support_max=10, seed=7)[0] == mc  # seeded: reproducible


def test_weighted_delta_is_the_mean_of_per_subset_differences_with_their_combined_error():
    """BFCL's aggregate: unweighted mean over categories. The estimate is the mean of the categories'
    paired differences and its stratified SE is sqrt(Σ se_c²) / K, se_c each category's paired SE."""
    rng = np.random.default_rng(0)
    sizes = {"simple": 8, "multiple": 5, "parallel": 12}
    subsets = [s for s, k in sizes.items() for _ in range(k)]
    x = rng.random(len(subsets)) < 0.7
    y = x.copy()
    y[rng.random(len(subsets)) < 0.3] ^= True
    ref, rung = _verdicts(x, subsets), _verdicts(y, subsets)
    d = stats.compare(ref, rung, weights="equal_subsets")
    diffs, ses = [], []
    for s in sizes:
        sel = np.array(subsets) == s
        dd = y[sel].astype(float) - x[sel].astype(float)
        diffs.append(dd.mean())
        ses.append(dd.std(ddof=1) / math.sqrt(sel.sum()))
    assert d.kind == "weighted"
    assert d.estimate == pytest.approx(100 * np.mean(diffs))
    assert d.stderr == pytest.approx(100 * math.sqrt(sum(s * s for s in ses)) / len(sizes))
    assert d.reference_pct == pytest.approx(100 * np.mean([x[np.array(subsets) == s].mean() for s in sizes]))
    # its test: the sign flips of the weighted differences, by brute force over the differing items
    w = np.array([1 / (3 * sizes[s]) for s in subsets])
    dd = (y.astype(float) - x.astype(float)) * w
    nz = dd[dd != 0]
    signs = np.array(list(itertools.product([-1, 1], repeat=nz.size)))
    assert d.p_value == pytest.approx(np.mean(np.abs(signs @ np.abs(nz)) >= abs(nz.sum()) - 1e-12), rel=1e-9)
    assert d.n_eff == pytest.approx(w.sum() ** 2 / (w * w).sum())


def test_scores_get_the_paired_t_interval_and_a_sign_flip_test():
    rng = np.random.default_rng(1)
    xs = rng.choice([0, 1 / 3, 2 / 3, 1], size=15)
    ys = np.clip(xs + rng.choice([-1 / 3, 0, 0, 1 / 3], size=15), 0, 1)
    ref = _verdicts(xs >= 0.5, scores=list(xs))
    rung = _verdicts(ys >= 0.5, scores=list(ys))
    d = stats.compare(ref, rung)
    t = sps.ttest_rel(ys, xs)
    ci = t.confidence_interval(0.95)
    assert d.kind == "score"
    assert d.estimate == pytest.approx(100 * (ys - xs).mean())
    # the paired t interval, widened where Tango's on the loss and gain shares is wider (few items differ:
    # tests/test_coverage.py); never narrower than the t interval
    dd = ys - xs
    se = dd.std(ddof=1) / np.sqrt(15)
    n_star = min(15.0, dd.var() / se ** 2)  # the design's effective n (Korn & Graubard): n − 1 here
    lo_g, hi_g = stats.tango_interval(n_star * np.clip(-dd, 0, None).mean(), n_star * np.clip(dd, 0, None).mean(), n_star)
    assert d.ci_low == pytest.approx(100 * min(ci.low, lo_g)) and d.ci_high == pytest.approx(100 * max(ci.high, hi_g))
    assert "paired t" in d.interval and "Tango" in d.interval
    nz = (ys - xs)[ys != xs]
    signs = np.array(list(itertools.product([-1, 1], repeat=nz.size)))
    assert d.p_value == pytest.approx(np.mean(np.abs(signs @ np.abs(nz)) >= abs(nz.sum()) - 1e-9), rel=1e-9)



def test_no_item_differs_gives_an_interval_not_a_point():
    """Identical scores on every item: a t interval would be 0…0; Tango's interval for 0 discordant items
    at the (effective) n stands in, the binary case being the widest a bounded score of that mean has."""
    xs = [1.0, 0.5, 0.0, 1.0, 0.5, 1.0, 0.0, 1.0, 0.5, 1.0]
    ref = _verdicts([x >= 0.5 for x in xs], scores=xs)
    d = stats.compare(ref, [dict(v) for v in ref])
    assert d.kind == "score" and d.estimate == 0 and d.p_value == 1.0
    lo, hi = P.tango_interval(0, 0, 10)
    assert (d.ci_low, d.ci_high) == (pytest.approx(100 * lo), pytest.approx(100 * hi)) and lo < 0 < hi
    assert any("no item differs" in n for n in d.notes)

# ------------------------------------------------------------------ per-token (perplexity, KLD)

def test_chunk_level_error_equals_statsmodels_cluster_robust_error():
    import statsmodels.api as sm

    rng = np.random.default_rng(2)
    sizes = rng.integers(20, 60, size=12)
    labels = np.repeat(np.arange(12), sizes)
    effect = rng.normal(0, 0.3, size=12)[labels]
    x = 0.05 + effect + rng.normal(0, 1, size=labels.size)
    t = stats.token_mean(x, labels)
    fit = sm.OLS(x, np.ones_like(x)).fit(cov_type="cluster", cov_kwds={"groups": labels})
    assert t.estimate == pytest.approx(fit.params[0])
    assert t.stderr == pytest.approx(fit.bse[0], rel=1e-10)
    assert t.n_chunks == 12 and t.n_tokens == labels.size
    lo, hi = stats.block_bootstrap(x, labels, draws=4000, seed=1)
    assert lo == pytest.approx(t.ci_low, abs=0.5 * t.stderr) and hi == pytest.approx(t.ci_high, abs=0.5 * t.stderr)


def test_chunk_level_interval_covers_where_the_per_token_one_does_not():
    """Simulated NLL differences with a per-chunk effect: the chunk-level 95 % interval covers the true
    mean about 95 % of the time; the per-token (independent-tokens) interval far less."""
    rng = np.random.default_rng(5)
    chunks, per = 16, 255
    hit_chunk = hit_naive = 0
    runs = 400
    for _ in range(runs):
        x = 0.02 + np.repeat(rng.normal(0, 0.05, chunks), per) + rng.normal(0, 0.3, chunks * per)
        t = stats.token_mean(x, per)
        hit_chunk += t.ci_low <= 0.02 <= t.ci_high
        hit_naive += abs(t.estimate - 0.02) <= Z95 * t.naive_stderr
    assert 0.92 <= hit_chunk / runs <= 0.98
    assert hit_naive / runs < 0.75
    assert t.design_effect > 2


def test_token_delta_matches_the_perplexity_pass_on_its_own_arrays():
    """The perplexity producer's ln(PPL(Q)/PPL(base)) from the same per-token arrays."""
    from quantladder.measures import perplexity

    rng = np.random.default_rng(4)
    nb = rng.gamma(2.0, 1.2, size=4 * 255)
    nq = nb + rng.normal(0.01, 0.05, size=nb.size)
    res = {"nll": nq, "nll_base": nb, "kld": np.abs(rng.normal(0, 0.01, nb.size)), "dp": rng.normal(0, 0.01, nb.size),
           "same_top": rng.random(nb.size) < 0.9, "n_chunks": 4}
    s = perplexity.summarize(res)
    t = stats.token_delta(nq, nb, 255)
    assert t.estimate == pytest.approx(s["ln_ppl_ratio"], rel=1e-12)
    assert t.naive_stderr == pytest.approx(s["ln_ppl_ratio_err"], rel=1e-2)
    r = stats.ppl_ratio(t)
    assert r["ppl_ratio"] == pytest.approx(s["ppl_ratio"]) and r["ci_low"] < r["ppl_ratio"] < r["ci_high"]
    with pytest.raises(DataError, match="not the same tokens"):
        stats.token_delta(nq, nb[:-1], 255)
    with pytest.raises(DataError, match="do not split"):
        stats.token_mean(nq[:-1], 255)


# ------------------------------------------------------------------ power and sample size

def test_exact_power_equals_enumeration_with_scipy_binomtest():
    n, pl, pg, alpha = 25, 0.2, 0.05, 0.05
    b, c, k, coef = _log_multinomial(n)
    pr = np.exp(coef + special.xlogy(b, pl) + special.xlogy(c, pg) + special.xlogy(k, 1 - pl - pg))
    rej = np.array([(x + y) > 0 and sps.binomtest(int(x), int(x + y), 0.5).pvalue <= alpha for x, y in zip(b, c)])
    assert stats.exact_power(n, pl, pg, alpha=alpha) == pytest.approx(float(pr[rej].sum()), rel=1e-9)


def test_exact_power_agrees_with_a_simulation_of_the_test():
    rng = np.random.default_rng(9)
    n, pl, pg = 120, 0.08, 0.02
    u = rng.random((20000, n))
    b, c = (u < pl).sum(1), ((u >= pl) & (u < pl + pg)).sum(1)
    m = b + c
    p = np.where(m > 0, np.minimum(1, 2 * sps.binom.cdf(np.minimum(b, c), m, 0.5)), 1.0)
    sim = (p <= 0.05).mean()
    assert stats.exact_power(n, pl, pg) == pytest.approx(sim, abs=4 * math.sqrt(sim * (1 - sim) / 20000))


@pytest.mark.parametrize("loss,psi", [(0.02, 0.05), (0.05, 0.1), (0.1, 0.3), (0.02, 0.2)])
def test_connor_sample_size_gives_its_power_to_the_asymptotic_test(loss, psi):
    """Connor's n, checked by enumerating the asymptotic McNemar test's power at that n (the test his
    formula approximates): within 3 points of the target (the test's discreteness moves it by ~2)."""
    n = stats.connor_items(loss, psi, alpha=0.05, power=0.8)
    pl = (psi + loss) / 2  # a discordant item is a loss with probability pl / psi
    m = np.arange(n + 1)
    pm = sps.binom.pmf(m, n, psi)
    pw = 0.0
    for mm, w in zip(m, pm):
        if w < 1e-14 or mm == 0:
            continue
        bb = np.arange(mm + 1)
        z = np.abs(2 * bb - mm) / math.sqrt(mm)
        pw += w * sps.binom.pmf(bb, mm, pl / psi)[z >= Z95].sum()
    assert pw == pytest.approx(0.8, abs=0.03)


def test_items_needed_is_the_first_n_with_the_power():
    for loss, psi in [(0.02, 0.05), (0.1, 0.2), (0.3, 0.3)]:
        n, how = stats.items_needed(loss, psi)
        assert how == "exact"
        assert W.exact_power_for_loss(n, loss, psi) >= 0.8 > W.exact_power_for_loss(n - 1, loss, psi)
        assert abs(n - stats.connor_items(loss, psi)) / n < 0.15
    assert stats.items_needed(0.005, 0.3)[1] == "connor"  # large n: the approximation


def test_smallest_detectable_loss_has_the_power_and_a_smaller_one_does_not():
    for n, psi in [(164, 0.1), (40, 0.2), (1000, 0.02)]:
        mde = stats.smallest_detectable_loss(n, psi)
        assert W.exact_power_for_loss(n, mde, psi) >= 0.8 > W.exact_power_for_loss(n, mde * 0.97, psi)
    # 0 flips measured: the loss itself sets the discordance (every flip a loss)
    assert stats.smallest_detectable_loss(100, 0.0) == pytest.approx(stats.smallest_detectable_loss(100, 0.0001))
    assert stats.smallest_detectable_loss(5, 0.5) is None  # 5 items: the exact test can never reject at 0.05


# ------------------------------------------------------------------ multiple comparisons

def test_holm_and_bh_equal_statsmodels():
    rng = np.random.default_rng(11)
    for _ in range(20):
        p = rng.uniform(0, 0.2, size=rng.integers(1, 15))
        p[rng.random(p.size) < 0.2] = 0.001
        assert np.allclose(stats.holm(p), multipletests(p, method="holm")[1])
        assert np.allclose(stats.benjamini_hochberg(p), multipletests(p, method="fdr_bh")[1])
    assert stats.planning_alpha(0.05, 10) == pytest.approx(0.005)


# ------------------------------------------------------------------ verdicts and the noise floor

def _delta(n, loss, gain):
    ref = _verdicts([1] * loss + [0] * gain + [1] * (n - loss - gain))
    rung = _verdicts([0] * loss + [1] * gain + [1] * (n - loss - gain))
    return stats.compare(ref, rung)


def test_ladder_verdict_words_and_columns():
    deltas = {"Q8_0": _delta(164, 1, 1), "Q4_K_M": _delta(164, 20, 2), "Q2_K": _delta(164, 2, 25)}
    v = stats.ladder(deltas, correction="holm")
    raw = [deltas[k].p_value for k in deltas]
    assert [v[k].p_adjusted for k in deltas] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert v["Q8_0"].verdict == stats.NONE
    assert v["Q8_0"].text.startswith("no loss detectable at n = 164 (0.0 points, 95 % CI ")
    assert "smallest detectable loss at 80 % power: " in v["Q8_0"].text
    mde = stats.smallest_detectable_loss(164, 2 / 164, alpha=0.05 / 3)
    assert v["Q8_0"].mde == pytest.approx(100 * mde)
    assert v["Q4_K_M"].verdict == stats.LOSS
    se = 100 * math.sqrt((22 / 164 - (18 / 164) ** 2) / 164)
    lo, hi = stats.tango_interval(20, 2, 164)
    assert v["Q4_K_M"].text == (f"loss of 11.0 ± {se:.1f} points (95 % CI {100 * lo:.1f}…{100 * hi:.1f}), significant "
                                "(adjusted p < 0.001, Holm over 3; n = 164)")
    assert v["Q2_K"].verdict == stats.GAIN and v["Q2_K"].text.startswith("gain of 14.0")
    cols = v["Q4_K_M"].columns()
    assert cols["verdict"] == "loss" and cols["delta"] == pytest.approx(-18 / 164 * 100)
    assert cols["delta_ci_low"] < cols["delta"] < cols["delta_ci_high"] < 0


def test_a_significant_loss_not_above_the_noise_floor_is_marked_within_noise():
    ref = _verdicts([1] * 200)
    batched = _verdicts([0] * 30 + [1] * 170)
    gens_a = [{"item_id": f"i{k}", "text": "a"} for k in range(200)]
    gens_b = [{"item_id": f"i{k}", "text": "a" if k >= 60 else "b"} for k in range(200)]
    floor = stats.noise_floor(ref, batched, generations_a=gens_a, generations_b=gens_b, what="batched vs single")
    assert floor.flip_rate == pytest.approx(0.15) and floor.identical_share == pytest.approx(0.7)
    small, big = _delta(200, 20, 0), _delta(200, 60, 0)
    v_small = stats.verdict(small, noise=floor)
    v_big = stats.verdict(big, noise=floor)
    assert v_small.verdict == stats.LOSS and v_small.within_noise and v_small.label == "loss within noise"
    assert "within noise: its flip rate 10.0 % is not above the noise floor's 15.0 %" in v_small.text
    assert v_big.within_noise is False and v_big.label == "loss"
    assert stats.verdict(_delta(200, 1, 0), noise=floor).within_noise is None  # not significant: no flag


def test_too_few_items_say_no_loss_is_detectable():
    v = stats.verdict(_delta(4, 2, 0))
    assert v.mde is None and "no loss of any size is detectable at 80 % power with 4 items" in v.text


# ------------------------------------------------------------------ sequential stopping

def test_sequential_type_one_error_stays_below_alpha_while_repeated_mcnemar_does_not():
    """4000 runs of 500 items in waves of 10 under 'no difference' (three flip rates): the e-process
    claims a loss or gain in at most α of the runs; testing McNemar at every wave claims far more."""
    rng = np.random.default_rng(1)
    runs, n, wave, alpha = 4000, 500, 10, 0.05
    th = math.log(2 / alpha)
    for p in (0.02, 0.1, 0.25):
        u = rng.random((runs, n))
        b = np.cumsum(u < p, axis=1)[:, wave - 1::wave]
        c = np.cumsum((u >= p) & (u < 2 * p), axis=1)[:, wave - 1::wave]
        from quantladder.stats.sequential import log_e_gain, log_e_loss
        seq = ((log_e_loss(b, c) >= th) | (log_e_gain(b, c) >= th)).any(axis=1).mean()
        m = b + c
        naive_p = np.where(m > 0, np.minimum(1, 2 * sps.binom.cdf(np.minimum(b, c), m, 0.5)), 1.0)
        naive = (naive_p <= alpha).any(axis=1).mean()
        assert seq <= alpha
        assert naive > 1.8 * alpha


def test_sequential_test_class_stops_honestly_and_detects_a_real_loss():
    rng = np.random.default_rng(2)

    def run(p_loss, p_gain, margin, n=400, wave=20):
        t = stats.SequentialPairedTest(alpha=0.05, margin=margin, max_items=n)
        u = rng.random(n)
        x, y = np.ones(n, bool), np.ones(n, bool)
        y[u < p_loss] = False
        x[(u >= p_loss) & (u < p_loss + p_gain)] = False
        for w in range(0, n, wave):
            t.update(x[w:w + wave], y[w:w + wave])
            if t.decide().stop:
                break
        return t.decide()

    # True loss exactly the margin (2 points): "no loss of >= 2 points" must be rare (<= alpha).
    false_margin = np.mean([run(0.06, 0.04, 2.0).state == "no_loss_beyond_margin" for _ in range(300)])
    assert false_margin <= 0.05
    # A 10-point loss is found, mostly well before the item limit.
    found = [run(0.15, 0.05, None) for _ in range(100)]
    assert np.mean([d.state == "loss" for d in found]) > 0.9
    assert np.median([d.n for d in found]) < 300
    # No difference and a 5-point margin: it stops with "no loss of >= 5 points" before 2000 items.
    t = stats.SequentialPairedTest(alpha=0.05, margin=5.0, max_items=2000)
    u = rng.random(2000)
    x, y = np.ones(2000), np.ones(2000)
    y[u < 0.03] = 0
    x[(u >= 0.03) & (u < 0.06)] = 0
    for w in range(0, 2000, 50):
        t.update(x[w:w + 50], y[w:w + 50])
        if t.decide().stop:
            break
    d = t.decide()
    assert d.state == "no_loss_beyond_margin" and d.e_margin >= 40 and d.n < 2000
    assert "P(stopping with a false claim) <= 0.05" in d.rule
    t.update([1] * 10, [0] * 10)  # later items do not undo a reached decision
    assert t.decide() == d


def test_sequential_test_rejects_bad_input():
    t = stats.SequentialPairedTest()
    with pytest.raises(ValueError, match="reference verdicts"):
        t.update([1, 0], [1])
    with pytest.raises(ValueError, match="percentage points"):
        stats.SequentialPairedTest(margin=0.0)
    assert t.decide().state == "continue" and t.decide().e_loss == pytest.approx(1.0)


# ------------------------------------------------------------------ on the real model's per-token arrays

def test_token_delta_on_a_real_perplexity_pass(smollm_f16, smollm_q2k):
    """Q2_K against the F16 reference on the embedded model, from the perplexity pass's own per-token NLL
    (4 chunks of 63 scored tokens, identical tokens on both): the chunk-level mean difference is
    ln PPL(Q2_K) − ln PPL(F16) as the pass reports them, and its error is the spread of chunk means."""
    from quantladder.corpora import pydoc_topics_text
    from quantladder.engine import RawContext
    from quantladder.measures import perplexity as PPL

    proto = PPL.Protocol(n_ctx=128, n_batch=512, max_chunks=4)
    text = pydoc_topics_text()[:30000]
    out = {}
    for name, path in (("F16", smollm_f16), ("Q2_K", smollm_q2k)):
        with RawContext(str(path), n_ctx=proto.n_seq * proto.n_ctx, n_batch=proto.n_seq * proto.n_ctx,
                        n_seq_max=proto.n_seq, kv="f16", n_threads=2) as c:
            res = PPL.run(c, text, proto)
        out[name] = (res["nll"], PPL.summarize(res))
    rows = proto.rows_per_chunk
    t = stats.token_delta(out["Q2_K"][0], out["F16"][0], rows)
    assert t.n_chunks == 4 and t.n_tokens == 4 * rows
    assert t.estimate == pytest.approx(math.log(out["Q2_K"][1]["ppl"] / out["F16"][1]["ppl"]), rel=1e-9)
    assert t.estimate > 0 and t.ci_low > 0  # Q2_K loses, and the chunks agree that it does
    means = np.add.reduceat(out["Q2_K"][0] - out["F16"][0], np.arange(0, 4 * rows, rows)) / rows
    assert t.stderr == pytest.approx(means.std(ddof=1) / math.sqrt(4), rel=1e-9)
    assert stats.ppl_ratio(t)["ppl_ratio"] == pytest.approx(out["Q2_K"][1]["ppl"] / out["F16"][1]["ppl"])
