"""Per-token paired figures (perplexity, KLD) with intervals that respect within-chunk correlation.

The perplexity pass scores every token of a chunk given the same context window, so neighbouring
tokens' NLLs are correlated (a hard passage is hard for many tokens in a row); llama-perplexity's ±
treats tokens as independent and is too narrow when they are not. Here the **chunk is the
independent unit**: a mean over tokens is a ratio estimator Σ x / N over chunks, and its variance is
the cluster (linearization) estimator

    V = G / (G − 1) · Σ_g (Σ_{t ∈ g} (x_t − x̄))² / N²,

G chunks, N tokens (Cochran 1977, §6.13; the CR1 cluster-robust variance of a mean, Cameron &
Miller 2015). The interval is a t interval with G − 1 degrees of freedom. ``block_bootstrap``
resamples whole chunks (Künsch 1989's blocks are the chunks here) as a check.

A divergence (KLD, ``positive=True``) is never below 0 and its chunk means are skewed to the right (a
hard passage has many times the KLD of an easy one): the t interval's upper end — the end a claim
"within T nats" reads — then misses the true mean in 4–14 % of runs against 2.5 % (simulated:
``stats.simulate.token_coverage``, docs/statistics.md). Its interval is the wider, at each end, of the
t interval and the generalized confidence interval for a lognormal mean on the chunk means
(Krishnamoorthy & Mathew 2003, *J. Stat. Plan. Inference* 115:103–121; Zou, Taleban & Huo's 2009 MOVER
interval was measured too and missed from below in up to 3.5 % of runs). With two or three chunks its
upper end is very wide: the spread of a skewed figure between texts is not known from two.

The paired figure for perplexity is the mean of per-token differences of NLL on identical tokens,
which is ln(PPL(rung) / PPL(reference)); its interval maps to the PPL ratio by exp. For KLD (already
a paired figure per token) the same machinery gives the mean and its interval, and the difference
between two rungs' KLD on the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
from scipy import stats as sps

from ..errors import DataError


@dataclass(frozen=True)
class TokenMean:
    """A mean over tokens with its chunk-level uncertainty (unit: that of the inputs, e.g. nats).

    ``at(level)`` gives the same figure's interval at another level (the walk tests rungs at levels of
    its own) from what is kept here: the t part from ``stderr`` and ``n_chunks``, a divergence's GCI
    part from the log chunk means' ``log_mean``, ``log_var`` and effective count ``clusters_eff``."""

    estimate: float
    stderr: float  # chunk-level (cluster) standard error
    ci_low: float
    ci_high: float
    level: float
    p_value: float  # two-sided t test of mean = 0 over chunks (df G − 1)
    n_tokens: int
    n_chunks: int
    naive_stderr: float  # as if tokens were independent (llama-perplexity's ±)
    method: str = "t"  # "t" (chunk-level t interval) | "t ∪ lognormal GCI" (a divergence, positive=True)
    log_mean: float | None = None  # size-weighted mean of the log chunk means (a divergence's)
    log_var: float | None = None  # their variance
    clusters_eff: float | None = None  # Kish's effective number of chunks (G for equal sizes)
    mirror: float | None = None  # the figure is mirror − a divergence (a share as 100 % − its gap)

    @property
    def design_effect(self) -> float:
        """Variance inflation from within-chunk correlation: (chunk SE / naive SE)²."""
        return (self.stderr / self.naive_stderr) ** 2 if self.naive_stderr > 0 else float("nan")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["design_effect"] = self.design_effect
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TokenMean":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def mirrored(self, m: float) -> "TokenMean":
        """``m`` − this figure: an agreement share from its gap (``token_share``)."""
        return replace(self, estimate=m - self.estimate, ci_low=m - self.ci_high, ci_high=m - self.ci_low, mirror=m)

    def at(self, level: float) -> "TokenMean":
        """The interval at ``level`` (the same rule as ``token_mean``)."""
        if self.mirror is not None:
            return replace(self.mirrored(self.mirror), mirror=None).at(level).mirrored(self.mirror)
        if not math.isfinite(self.stderr):
            return replace(self, level=level)
        lo, hi = _interval(self.estimate, self.stderr, self.n_chunks, level, self.method,
                           self.log_mean, self.log_var, self.clusters_eff)
        return replace(self, ci_low=lo, ci_high=hi, level=level)


def chunk_labels(n_tokens: int, chunks) -> np.ndarray:
    """Chunk ids per token: ``chunks`` is an int (tokens per chunk, consecutive, as the perplexity
    pass lays them out: ``Protocol.rows_per_chunk``) or an array of per-token chunk ids."""
    if isinstance(chunks, (int, np.integer)):
        if chunks <= 0 or n_tokens % chunks:
            raise DataError(f"per-token arrays: {n_tokens} tokens do not split into chunks of {chunks}")
        return np.repeat(np.arange(n_tokens // chunks), chunks)
    lab = np.asarray(chunks)
    if lab.shape != (n_tokens,):
        raise DataError(f"per-token arrays: {lab.size} chunk ids for {n_tokens} tokens")
    return lab


def _cluster(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, inv = np.unique(labels, return_inverse=True)
    return np.bincount(inv, weights=x), np.bincount(inv).astype(float)


#: the exponent above which exp() would overflow: an upper end that large is "unbounded" in any unit
_MAX_EXP = 700.0


def _log_stats(means: np.ndarray, weights: np.ndarray) -> tuple[float, float, float] | None:
    """(ȳ, s², G): the size-weighted mean and variance of the log cluster means and Kish's effective
    number of clusters (G for equal sizes); None where a mean is below 0 (no log), all are 0 or G < 2."""
    if means.size < 2 or np.any(means < 0) or not np.any(means > 0):
        return None
    w = weights / weights.sum()
    y = np.log(means)
    yb = float((w * y).sum())
    g = 1.0 / float((w * w).sum())
    return yb, float((w * (y - yb) ** 2).sum()) * g / (g - 1), g


#: draws of the generalized pivot (fixed seed: the same record gives the same interval, byte for byte)
GCI_DRAWS = 20_000
_GCI_SEED = 20030101


def lognormal_gci(log_mean: float, log_var: float, g: float, level: float) -> tuple[float, float]:
    """Krishnamoorthy & Mathew's (2003) generalized confidence interval for the mean of lognormal
    cluster means: the quantiles of the pivot ȳ − Z·√(s²/G)·√((G−1)/U) + (G−1)s²/(2U), Z standard
    normal, U χ² on G − 1 degrees of freedom, mapped through exp."""
    rng = np.random.default_rng(_GCI_SEED)
    z = rng.standard_normal(GCI_DRAWS)
    u = rng.chisquare(g - 1, GCI_DRAWS)
    pivot = log_mean - z * math.sqrt(log_var / g) * np.sqrt((g - 1) / u) + (g - 1) * log_var / (2 * u)
    a = (1 - level) / 2
    lo, hi = np.quantile(pivot, [a, 1 - a])
    return math.exp(min(float(lo), _MAX_EXP)), math.exp(min(float(hi), _MAX_EXP))


def _interval(mean: float, se: float, g: int, level: float, method: str, log_mean, log_var,
              clusters_eff) -> tuple[float, float]:
    q = float(sps.t.ppf(0.5 + level / 2, g - 1))
    lo, hi = mean - q * se, mean + q * se
    if method == POSITIVE:
        if log_mean is not None and se > 0:
            m_lo, m_hi = lognormal_gci(log_mean, log_var, clusters_eff, level)
            lo, hi = min(lo, m_lo), max(hi, m_hi)
        lo = max(lo, min(0.0, mean))  # a divergence is not below 0 (a rounding's −1e-12 stays inside)
    return lo, hi


#: the method name of a divergence's interval
POSITIVE = "t ∪ lognormal GCI"


def token_mean(x, chunks, *, level: float = 0.95, positive: bool = False) -> TokenMean:
    """The mean of per-token values ``x`` with a chunk-level t interval; ``positive``: ``x`` is a
    divergence (never below 0, skewed), whose interval is the t interval widened at each end to the
    lognormal generalized confidence interval of its chunk means (the module's docstring), and never below 0."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    if n == 0:
        raise DataError("per-token arrays: empty")
    if not np.all(np.isfinite(x)):
        raise DataError("per-token arrays: non-finite values")
    labels = chunk_labels(n, chunks)
    sums, counts = _cluster(x, labels)
    g = sums.size
    mean = float(x.sum() / n)
    naive = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    method = POSITIVE if positive else "t"
    if g < 2:
        nan = float("nan")
        return TokenMean(mean, nan, nan, nan, level, nan, n, g, naive, method)
    resid = sums - mean * counts  # Σ_t∈g (x_t − x̄)
    se = math.sqrt(g / (g - 1) * float((resid * resid).sum())) / n
    if se > 0:
        p = float(2 * sps.t.sf(abs(mean) / se, g - 1))
    else:
        p = 1.0 if mean == 0 else 0.0
    logs = None
    if positive:
        means = sums / counts
        if np.any(means == 0):  # a chunk without a single event (a share's gap): half an event's continuity
            means = (sums + 0.5 * float(x.max())) / (counts + 1)
        logs = _log_stats(means, counts)
    log_mean, log_var, g_eff = logs if logs is not None else (None, None, None)
    lo, hi = _interval(mean, se, g, level, method, log_mean, log_var, g_eff)
    return TokenMean(mean, se, lo, hi, level, p, n, g, naive, method, log_mean, log_var, g_eff)


def token_share(flags, chunks, *, level: float = 0.95) -> TokenMean:
    """An agreement share in % (same top token: ``flags`` true per token) with its chunk-level
    interval, computed on its gap 100 − share — a positive, right-skewed figure like a divergence, whose
    upper end (the share's lower end, the one a claim "within T points" reads) the t interval alone
    puts too low — and mirrored back (``TokenMean.mirror``: ``at`` recomputes it at another level).
    From fewer than ``SHARE_MIN_CHUNKS`` chunks it has no interval: two chunks of a few disagreements each
    put the true share below the interval in 5–12 % of runs (docs/statistics.md)."""
    gap = token_mean(100.0 * (1.0 - np.asarray(flags, dtype=np.float64)), chunks, level=level, positive=True)
    if gap.n_chunks < SHARE_MIN_CHUNKS:
        nan = float("nan")
        gap = replace(gap, stderr=nan, ci_low=nan, ci_high=nan, p_value=nan)
    return gap.mirrored(100.0)


#: the fewest chunks a share's interval is given from (``token_share``)
SHARE_MIN_CHUNKS = 3


def token_delta(x, y, chunks, *, level: float = 0.95) -> TokenMean:
    """mean(x − y) over identical tokens (x: the rung's NLL, y: the reference's): ln(PPL_x / PPL_y)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise DataError(f"per-token arrays: {x.size} and {y.size} tokens are not the same tokens")
    return token_mean(x - y, chunks, level=level)


def ppl_ratio(delta: TokenMean) -> dict:
    """PPL(rung)/PPL(reference) = exp(mean Δ NLL), with the interval mapped through exp."""
    return {"ppl_ratio": math.exp(delta.estimate), "ci_low": math.exp(delta.ci_low), "ci_high": math.exp(delta.ci_high),
            "level": delta.level}


def block_bootstrap(x, chunks, *, y=None, draws: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the token mean (of x − y when y is given) from resampling whole chunks."""
    x = np.asarray(x, dtype=np.float64)
    if y is not None:
        x = x - np.asarray(y, dtype=np.float64)
    sums, counts = _cluster(x, chunk_labels(x.size, chunks))
    g = sums.size
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, g, size=(draws, g))
    means = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return float(lo), float(hi)
