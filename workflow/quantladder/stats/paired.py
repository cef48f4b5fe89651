"""Paired comparison of two points on the same items: the difference, its interval, an exact test.

Inputs are per-item verdicts as the benchmarks write them to ``verdicts.jsonl``:
``{"item_id": str, "correct": bool, "subset": str | None, "score": float | None}``. ``score`` in
[0, 1] is partial credit (RULER's string_match_all); ``correct`` is always present. Only the items
both points have are compared; how many each side lost is part of the result.

Three cases, one result type (``PairedDelta``; every figure in percentage points, rung − reference,
so a loss is negative):

- **binary, unweighted** (HumanEval/BigCodeBench pass@1, a BFCL category): the interval is Tango's
  asymptotic score interval for the difference of paired proportions (Tango 1998); the test is
  McNemar's exact test, the two-sided binomial test of the losses among the discordant items
  (McNemar 1947; the conditional exact form, e.g. Fagerland, Lydersen & Laake 2013).
- **weighted** (BFCL's aggregates: unweighted means of per-category accuracies, so an item weighs
  1/(n_categories × n_items_in_its_category)): the weighted mean of per-item differences with a
  linearization (sandwich) standard error, stratified by subset when asked, and a t interval; the test
  is the exact sign-flip (randomization) test over the items that differ.
- **scores** (partial credit): the paired t interval on per-item score differences, and the same
  sign-flip test.

The sign-flip test's null is exchangeability within an item: under "the rung is no different from
the reference", each differing item's difference is as likely to have either sign (Fisher 1935;
Good 2005). Its distribution is computed exactly by convolving the per-magnitude binomials, or by a
seeded Monte Carlo estimate when the support grows too large (p = (1 + hits) / (1 + draws), Phipson
& Smyth 2010). Unweighted binary data give back McNemar's exact test.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from ..errors import DataError

EXACT_SUPPORT_MAX = 200_000  # distinct values of the sign-flip statistic before Monte Carlo takes over
MC_DRAWS = 100_000


# ------------------------------------------------------------------------------------------ pairing

@dataclass(frozen=True)
class Pairs:
    """Two points' verdicts on the items both have, aligned by item id (sorted)."""

    item_ids: tuple[str, ...]
    reference: np.ndarray  # per-item value in [0, 1] (0/1 when binary)
    rung: np.ndarray
    subsets: tuple[str | None, ...]
    binary: bool
    only_reference: int  # items the rung lacks (dropped)
    only_rung: int  # items the reference lacks (dropped)

    @property
    def n(self) -> int:
        return len(self.item_ids)

    @property
    def dropped(self) -> int:
        return self.only_reference + self.only_rung


def _index(verdicts: Iterable[Mapping], side: str, use_score: bool) -> dict[str, tuple[float, str | None]]:
    out: dict[str, tuple[float, str | None]] = {}
    for k, v in enumerate(verdicts):
        if "item_id" not in v:
            raise DataError(f"{side} verdict #{k}: no item_id")
        iid = str(v["item_id"])
        if iid in out:
            raise DataError(f"{side} verdicts: item {iid!r} appears twice")
        if use_score:
            s = v.get("score")
            if s is None or not 0.0 <= float(s) <= 1.0:
                raise DataError(f"{side} verdict {iid!r}: score {s!r} is not in [0, 1]")
            x = float(s)
        else:
            if "correct" not in v or v["correct"] is None:
                raise DataError(f"{side} verdict {iid!r}: no 'correct' field")
            x = 1.0 if v["correct"] else 0.0
        out[iid] = (x, v.get("subset"))
    return out


def pair_verdicts(reference: Sequence[Mapping], rung: Sequence[Mapping], *, kind: str = "auto") -> Pairs:
    """Align two verdict lists on their common items.

    kind: "binary" compares ``correct``; "score" compares ``score``; "auto" takes ``score`` when
    every verdict on both sides carries one, else ``correct`` (the choice depends on the benchmark's
    verdicts, not on the values, so every rung of a ladder gets the same method).
    """
    if kind not in ("auto", "binary", "score"):
        raise ValueError(f"kind must be auto, binary or score, got {kind!r}")
    if kind == "auto":
        everything = list(reference) + list(rung)
        kind = "score" if everything and all(v.get("score") is not None for v in everything) else "binary"
    use_score = kind == "score"
    ref = _index(reference, "reference", use_score)
    oth = _index(rung, "rung", use_score)
    common = sorted(set(ref) & set(oth))
    x = np.array([ref[i][0] for i in common], dtype=float)
    y = np.array([oth[i][0] for i in common], dtype=float)
    subsets = tuple(ref[i][1] if ref[i][1] is not None else oth[i][1] for i in common)
    binary = bool(np.all((x == 0) | (x == 1)) and np.all((y == 0) | (y == 1))) and not use_score
    return Pairs(tuple(common), x, y, subsets, binary, len(set(ref) - set(oth)), len(set(oth) - set(ref)))


def equal_subset_weights(verdicts: Sequence[Mapping]) -> dict[str, float]:
    """Per-item weights that make a weighted mean the unweighted mean of per-subset means (BFCL's
    aggregates): an item weighs 1 / (n_subsets × n_items_in_its_subset)."""
    counts = Counter(v.get("subset") for v in verdicts)
    k = len(counts)
    return {str(v["item_id"]): 1.0 / (k * counts[v.get("subset")]) for v in verdicts}


# ------------------------------------------------------------------------------------------ result

@dataclass(frozen=True)
class PairedDelta:
    """rung − reference on the same items, in percentage points (pp)."""

    kind: str  # "binary" | "weighted" | "score"
    n: int  # items compared
    only_reference: int  # dropped: items the rung lacks
    only_rung: int  # dropped: items the reference lacks
    reference_pct: float
    rung_pct: float
    estimate: float  # pp, rung − reference
    stderr: float  # pp
    ci_low: float  # pp
    ci_high: float  # pp
    level: float
    p_value: float
    n_loss: int  # items where the reference did better
    n_gain: int  # items where the rung did better
    interval: str
    test: str
    n_eff: float | None = None  # weighted: Kish's effective number of items (Σw)² / Σw²
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        for name in ("reference_pct", "rung_pct", "estimate", "stderr", "ci_low", "ci_high", "p_value"):
            object.__setattr__(self, name, float(getattr(self, name)))  # plain floats, not numpy scalars

    @property
    def discordance(self) -> float:
        """Share of compared items whose verdict differs (the flip rate, 0..1)."""
        return (self.n_loss + self.n_gain) / self.n if self.n else float("nan")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["discordance"] = self.discordance
        d["unit"] = "pp"
        return d


# ------------------------------------------------------------------------------------------ McNemar

def mcnemar_exact(n_loss: int, n_gain: int) -> float:
    """Two-sided exact McNemar p: the binomial test of n_loss among n_loss + n_gain at 1/2.

    With p = 1/2 the binomial is symmetric, so this is min(1, 2 × the smaller tail).
    """
    m = n_loss + n_gain
    if m == 0:
        return 1.0
    k = min(n_loss, n_gain)
    return float(min(1.0, 2.0 * sps.binom.cdf(k, m, 0.5)))


# ------------------------------------------------------------------------------------------ Tango

def restricted_mle_loss(n_loss: int, n_gain: int, n: int, delta: float) -> float:
    """The maximum-likelihood p_loss of the paired multinomial under p_gain − p_loss = delta.

    Cells: losses (reference right, rung wrong) with p_loss, gains with p_gain = p_loss + delta,
    concordant with 1 − 2 p_loss − delta. The score equation is the quadratic of Tango (1998, eq. 3)
    2n p² + (−b − c + (2n − c + b) δ) p − b δ (1 − δ) = 0 with b losses, c gains; its larger root.
    """
    b, c = float(n_loss), float(n_gain)
    A = 2.0 * n
    B = -b - c + (2.0 * n - c + b) * delta
    C = -b * delta * (1.0 - delta)
    disc = max(B * B - 4.0 * A * C, 0.0)
    p = (-B + math.sqrt(disc)) / (2.0 * A)
    lo, hi = max(0.0, -delta), (1.0 - delta) / 2.0
    return min(max(p, lo), hi)


def tango_z(n_loss: int, n_gain: int, n: int, delta: float) -> float:
    """Tango's score statistic for H0: p_gain − p_loss = delta (decreasing in delta)."""
    p = restricted_mle_loss(n_loss, n_gain, n, delta)
    var = n * (2.0 * p + delta * (1.0 - delta))
    num = n_gain - n_loss - n * delta
    if var <= 0.0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def tango_interval(n_loss: int, n_gain: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Tango's asymptotic score interval for p_gain − p_loss (a proportion, not pp): the deltas
    whose score test is not rejected at 1 − level. Inverts the same statistic whose delta = 0 case is
    McNemar's asymptotic test, so interval and test agree about 0 at large n."""
    if n <= 0:
        return (float("nan"), float("nan"))
    z = sps.norm.ppf(0.5 + level / 2.0)
    est = (n_gain - n_loss) / n
    eps = 1e-12

    def root(target: float, a: float, b: float) -> float:
        return optimize.brentq(lambda d: tango_z(n_loss, n_gain, n, d) - target, a, b, xtol=1e-12)

    lower = -1.0 if tango_z(n_loss, n_gain, n, -1.0 + eps) <= z else root(z, -1.0 + eps, est)
    upper = 1.0 if tango_z(n_loss, n_gain, n, 1.0 - eps) >= -z else root(-z, est, 1.0 - eps)
    return (lower, upper)


# ------------------------------------------------------------------------------------------ Newcombe

def wilson_interval(x: int, n: int, level: float = 0.95) -> tuple[float, float]:
    z = sps.norm.ppf(0.5 + level / 2.0)
    if n == 0:
        return (0.0, 1.0)
    center = (x + z * z / 2.0) / (n + z * z)
    half = z * math.sqrt(x * (n - x) / n + z * z / 4.0) / (n + z * z)
    return (max(0.0, center - half), min(1.0, center + half))


def newcombe_interval(n_both: int, n_loss: int, n_gain: int, n_neither: int, level: float = 0.95) -> tuple[float, float]:
    """Newcombe's hybrid score ("square-and-add") interval for p_gain − p_loss, method 10 of
    Newcombe (1998): Wilson intervals for the two marginal proportions combined with the phi
    correlation of the paired table, continuity-adjusted as Newcombe specifies (phi = 0 when a margin
    is empty)."""
    n = n_both + n_loss + n_gain + n_neither
    p_rung, p_ref = (n_both + n_gain) / n, (n_both + n_loss) / n
    l1, u1 = wilson_interval(n_both + n_gain, n, level)
    l2, u2 = wilson_interval(n_both + n_loss, n, level)
    den = (n_both + n_gain) * (n_loss + n_neither) * (n_both + n_loss) * (n_gain + n_neither)
    # Newcombe's phi with its continuity adjustment: A − n/2 when A = ad − bc exceeds n/2, 0 on [0, n/2].
    A = n_both * n_neither - n_gain * n_loss
    A_adj = A - n / 2 if A > n / 2 else (0.0 if A >= 0 else A)
    phi = A_adj / math.sqrt(den) if den > 0 else 0.0
    est = p_rung - p_ref
    lo = est - math.sqrt(max((p_rung - l1) ** 2 - 2 * phi * (p_rung - l1) * (u2 - p_ref) + (u2 - p_ref) ** 2, 0.0))
    hi = est + math.sqrt(max((u1 - p_rung) ** 2 - 2 * phi * (u1 - p_rung) * (p_ref - l2) + (p_ref - l2) ** 2, 0.0))
    return (max(-1.0, lo), min(1.0, hi))


# ------------------------------------------------------------------------------------------ sign flips

def sign_flip_pvalue(diffs: np.ndarray, *, seed: int = 0, exact_support_max: int = EXACT_SUPPORT_MAX,
                     draws: int = MC_DRAWS) -> tuple[float, str]:
    """Two-sided p of T = sum(diffs) under independent random signs of each nonzero entry.

    Returns (p, "exact" | "monte carlo (B draws, seed s)"). Exact: entries are grouped by magnitude,
    each group's signed sum is a shifted binomial, and the groups are convolved on the set of
    reachable values; when that set would exceed ``exact_support_max`` values, ``draws`` seeded sign
    vectors estimate p as (1 + hits) / (1 + draws).
    """
    d = np.asarray(diffs, dtype=float)
    d = d[d != 0.0]
    if d.size == 0:
        return 1.0, "exact"
    t_obs = abs(float(d.sum()))
    scale = float(np.abs(d).max())
    tol = 1e-9 * scale * max(1, d.size)
    mags = np.abs(d)
    # Group equal magnitudes (to 1e-12 relative) so that each group is one binomial.
    keys = np.round(mags / scale, 12)
    groups = Counter(keys.tolist())
    support = 1
    for m in groups.values():
        support *= m + 1
        if support > exact_support_max:
            break
    if support <= exact_support_max:
        values, probs = np.zeros(1), np.ones(1)
        for key, m in groups.items():
            k = np.arange(m + 1)
            gv = key * scale * (2 * k - m)
            gp = sps.binom.pmf(k, m, 0.5)
            v = (values[:, None] + gv[None, :]).ravel()
            p = (probs[:, None] * gp[None, :]).ravel()
            rounded = np.round(v / (scale * 1e-9)).astype(np.int64)
            uniq, inv = np.unique(rounded, return_inverse=True)
            values = np.bincount(inv, weights=v) / np.bincount(inv)
            probs = np.bincount(inv, weights=p)
            del uniq
        return float(min(1.0, probs[np.abs(values) >= t_obs - tol].sum())), "exact"
    rng = np.random.default_rng(seed)
    hits = 0
    block = 10_000
    for start in range(0, draws, block):
        nb = min(block, draws - start)
        signs = rng.integers(0, 2, size=(nb, d.size), dtype=np.int8) * 2 - 1
        hits += int((np.abs(signs @ mags) >= t_obs - tol).sum())
    return (1 + hits) / (1 + draws), f"monte carlo ({draws} draws, seed {seed})"


# ------------------------------------------------------------------------------------------ estimators

def _weighted_se(d: np.ndarray, w: np.ndarray, strata: Sequence | None) -> tuple[float, float, str]:
    """Linearization standard error of the weighted mean sum(w d)/sum(w), and its degrees of freedom.

    Unstratified: V = n/(n−1) Σ w_i² (d_i − d̄)² / (Σw)² (the with-replacement sandwich estimator), on
    (Σa)²/Σa² − 1 degrees of freedom with a_i = w_i² (d_i − d̄)², at most n − 1.
    Stratified (every stratum with ≥ 2 items): V = Σ_h n_h/(n_h−1) Σ_{i∈h} w_i² (d_i − d̄_h)² / (Σw)²
    with d̄_h the weighted stratum mean (Cochran 1977, ch. 5; Wolter 2007, ch. 6), and Satterthwaite's
    degrees of freedom (Σ V_h)² / Σ V_h²/(n_h − 1), at most n − H (Satterthwaite 1946).
    """
    n = d.size
    W = w.sum()
    mean = float((w * d).sum() / W)
    if strata is not None:
        labels = np.array([str(s) for s in strata])
        uniq = np.unique(labels)
        sizes = [(labels == u).sum() for u in uniq]
        if min(sizes) >= 2:
            parts = []
            for u in uniq:
                sel = labels == u
                wh, dh = w[sel], d[sel]
                mh = (wh * dh).sum() / wh.sum()
                parts.append((sel.sum() / (sel.sum() - 1) * float((wh * wh * (dh - mh) ** 2).sum()), sel.sum() - 1))
            v = sum(p for p, _ in parts)
            # Satterthwaite's degrees of freedom: a variance that small strata of large weight dominate
            # (BFCL's categories of 2–4 items, each weighing as much as one of 400) has far fewer than
            # n − H; with n − H the interval claimed "within" at 1.5× its level in simulation
            den = sum(p * p / k for p, k in parts)
            df = v * v / den if den > 0 else max(n - len(uniq), 1)
            return math.sqrt(v) / W, max(min(df, n - len(uniq)), 1), "stratified by subset"
    if n < 2:
        return float("nan"), 0, "one item"
    a = w * w * (d - mean) ** 2
    v = n / (n - 1) * float(a.sum())
    # the variance's own effective number of terms (Σa)²/Σa² − 1 as its degrees of freedom, at most n − 1:
    # a few heavy items (a category of one item weighing as much as one of 400) carry it
    ss = float((a * a).sum())
    df = min(n - 1, max(1.0, float(a.sum()) ** 2 / ss - 1.0)) if ss > 0 else n - 1
    return math.sqrt(v) / W, df, "unstratified" if strata is None else "unstratified (a subset has one item)"


def paired_delta(pairs: Pairs, *, weights: Mapping[str, float] | np.ndarray | None = None,
                 stratify: bool = False, level: float = 0.95, interval: str = "tango", seed: int = 0) -> PairedDelta:
    """The paired difference rung − reference on ``pairs`` (see the module docstring for methods).

    weights: per-item weights (a mapping item_id -> weight, or an array aligned with
    ``pairs.item_ids``); any item of ``pairs`` missing from a mapping is an error. stratify: with
    weights, compute the variance within subsets (BFCL's categories). interval: "tango" (default) or
    "newcombe" for unweighted binary items.
    """
    n = pairs.n
    if n == 0:
        raise DataError("paired comparison: the two points have no item in common")
    x, y = pairs.reference, pairs.rung
    d = y - x
    n_loss, n_gain = int((d < 0).sum()), int((d > 0).sum())
    notes: list[str] = []
    if pairs.dropped:
        notes.append(f"{pairs.dropped} item(s) not in both points left out "
                     f"({pairs.only_reference} only in the reference, {pairs.only_rung} only in the rung)")
    base = dict(n=n, only_reference=pairs.only_reference, only_rung=pairs.only_rung, level=level,
                n_loss=n_loss, n_gain=n_gain)
    w = _weights_array(pairs, weights)
    if pairs.binary and (w is None or np.allclose(w, w[0], rtol=1e-9, atol=0.0)):
        # Binary items whose weights are all equal (none, or equal subset weights over subsets of one size:
        # arithmetic's 8 subsets of 2) are a plain share: Tango's interval and McNemar's test, never the
        # weighted path's t interval, which rests on a linearised error of the few items that differ
        # (one discordant item of 16 gave ±17 points where Tango's gives −19…+32).
        if w is not None:
            notes.append("equal weights: a plain share of the items")
        est = (n_gain - n_loss) / n
        se = math.sqrt(max((n_gain + n_loss) / n - est * est, 0.0) / n)
        if interval == "tango":
            lo, hi = tango_interval(n_loss, n_gain, n, level)
            iname = "Tango score"
        elif interval == "newcombe":
            n_both = int(((x == 1) & (y == 1)).sum())
            lo, hi = newcombe_interval(n_both, n_loss, n_gain, n - n_both - n_loss - n_gain, level)
            iname = "Newcombe hybrid score"
        else:
            raise ValueError(f"interval must be tango or newcombe, got {interval!r}")
        return PairedDelta(kind="binary", reference_pct=100 * x.mean(), rung_pct=100 * y.mean(),
                           estimate=100 * est, stderr=100 * se, ci_low=100 * lo, ci_high=100 * hi,
                           p_value=mcnemar_exact(n_loss, n_gain), interval=iname,
                           test="McNemar exact (binomial on the discordant items)", notes=tuple(notes), **base)
    if w is None:
        w = np.ones(n)
    W = w.sum()
    est = float((w * d).sum() / W)
    se, df, how = _weighted_se(d, w, pairs.subsets if stratify else None)
    n_eff = float(W * W / (w * w).sum())
    if math.isfinite(se) and df > 0 and se > 0:
        q = sps.t.ppf(0.5 + level / 2.0, df)
        t_lo, t_hi = max(-1.0, est - q * se), min(1.0, est + q * se)
    else:
        t_lo = t_hi = est
    if np.all(np.abs(d) <= 1.0):
        # Per-item differences in [−1, 1] (verdicts and partial credit in [0, 1]): the t interval alone is
        # anti-conservative where few items differ (its error comes from those few: 0 or 1 differing item
        # gives a width of 0 or one item's worth). No such item varies more than a verdict with the same
        # chance of going each way, so Tango's score interval on the weighted loss and gain shares bounds
        # the spread from the counts' side, at an effective n: Kish's (Σw)²/Σw² for the weights, or, where
        # the flips' own spread says the design costs more (flip rates that differ between unequally
        # weighted categories), the design's n* = (Σw·d²/Σw − Δ²) / SE² (Korn & Graubard 1998), whichever is
        # smaller. The reported interval is the wider of it and the t interval at each end; it holds its
        # level across the simulated shapes (docs/statistics.md, "Coverage"; quantladder.stats.simulate).
        # (Matching partial credit's two moments with a table of smaller flips is tighter and was tried:
        # it claimed "within" at twice its level on simulated RULER scores.)
        n_star = n_eff
        if math.isfinite(se) and se > 0:
            n_star = min(n_eff, max(1.0, (float((w * d * d).sum() / W) - est * est) / (se * se)))
        p_loss = float((w * np.clip(-d, 0.0, None)).sum() / W)
        p_gain = float((w * np.clip(d, 0.0, None)).sum() / W)
        g_lo, g_hi = tango_interval(n_star * p_loss, n_star * p_gain, n_star, level)
        lo, hi = max(-1.0, min(t_lo, g_lo)), min(1.0, max(t_hi, g_hi))
        which = "Kish's effective n" if n_star == n_eff else "the design's effective n"
        bound = (f"Tango score at {which} = {n_star:.2f} on the {'weighted ' if weights is not None else ''}loss "
                 "and gain shares")
        if n_loss == n_gain == 0:
            notes.append(f"no item differs: the interval is Tango's for 0 discordant items at n = {n_eff:.2f}")
        df = max(df, 1)
    elif math.isfinite(se) and df > 0:
        lo, hi, bound = t_lo, t_hi, None
    else:
        lo = hi = float("nan")
        bound = None
        notes.append("one item: no interval")
    p, how_p = sign_flip_pvalue(w * d / W, seed=seed)
    kind = "score" if weights is None else "weighted"
    iname = (f"paired t (df {df:.4g})" if kind == "score"
             else f"weighted t, linearization SE {how} (df {df:.4g})")
    if bound:
        iname = f"the wider of {iname} and {bound}"
    return PairedDelta(kind=kind, reference_pct=100 * float((w * x).sum() / W), rung_pct=100 * float((w * y).sum() / W),
                       estimate=100 * est, stderr=100 * se, ci_low=100 * lo, ci_high=100 * hi, p_value=p,
                       interval=iname, test=f"sign-flip permutation, {how_p}",
                       n_eff=None if kind == "score" else n_eff, notes=tuple(notes), **base)


def _weights_array(pairs: Pairs, weights: Mapping[str, float] | np.ndarray | None) -> np.ndarray | None:
    """The per-item weights aligned with ``pairs.item_ids`` (None: unweighted), checked."""
    if weights is None:
        return None
    n = pairs.n
    if isinstance(weights, Mapping):
        missing = [i for i in pairs.item_ids if i not in weights]
        if missing:
            raise DataError(f"paired comparison: no weight for item(s) {missing[:5]}")
        w = np.array([float(weights[i]) for i in pairs.item_ids])
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (n,):
            raise DataError(f"paired comparison: {w.size} weights for {n} paired items")
    if np.any(w < 0) or w.sum() <= 0:
        raise DataError("paired comparison: weights must be non-negative and not all zero")
    return w


def compare(reference: Sequence[Mapping], rung: Sequence[Mapping], *, weights="none", kind: str = "auto",
            level: float = 0.95, interval: str = "tango", seed: int = 0) -> PairedDelta:
    """Convenience: pair two verdict lists and compare them.

    weights: "none"; "equal_subsets" (each subset weighs the same, stratified variance: BFCL's
    aggregates); or a mapping item_id -> weight.
    """
    pairs = pair_verdicts(reference, rung, kind=kind)
    if isinstance(weights, str):
        if weights == "none":
            return paired_delta(pairs, level=level, interval=interval, seed=seed)
        if weights == "equal_subsets":
            common = set(pairs.item_ids)
            w = equal_subset_weights([v for v in reference if str(v["item_id"]) in common])
            return paired_delta(pairs, weights=w, stratify=True, level=level, seed=seed)
        raise ValueError(f"weights must be 'none', 'equal_subsets' or a mapping, got {weights!r}")
    return paired_delta(pairs, weights=weights, level=level, seed=seed)


# Exposed for the tests' brute-force checks.
def multinomial_loglik(n_loss: int, n_gain: int, n: int, p_loss: float, delta: float) -> float:
    k = n - n_loss - n_gain
    p_gain, p_conc = p_loss + delta, 1.0 - 2.0 * p_loss - delta
    return float(special.xlogy(n_loss, p_loss) + special.xlogy(n_gain, p_gain) + special.xlogy(k, p_conc))
