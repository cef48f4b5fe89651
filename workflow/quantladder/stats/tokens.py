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

The paired figure for perplexity is the mean of per-token differences of NLL on identical tokens,
which is ln(PPL(rung) / PPL(reference)); its interval maps to the PPL ratio by exp. For KLD (already
a paired figure per token) the same machinery gives the mean and its interval, and the difference
between two rungs' KLD on the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as sps

from ..errors import DataError


@dataclass(frozen=True)
class TokenMean:
    """A mean over tokens with its chunk-level uncertainty (unit: that of the inputs, e.g. nats)."""

    estimate: float
    stderr: float  # chunk-level (cluster) standard error
    ci_low: float
    ci_high: float
    level: float
    p_value: float  # two-sided t test of mean = 0 over chunks (df G − 1)
    n_tokens: int
    n_chunks: int
    naive_stderr: float  # as if tokens were independent (llama-perplexity's ±)

    @property
    def design_effect(self) -> float:
        """Variance inflation from within-chunk correlation: (chunk SE / naive SE)²."""
        return (self.stderr / self.naive_stderr) ** 2 if self.naive_stderr > 0 else float("nan")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["design_effect"] = self.design_effect
        return d


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


def token_mean(x, chunks, *, level: float = 0.95) -> TokenMean:
    """The mean of per-token values ``x`` with a chunk-level t interval."""
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
    if g < 2:
        nan = float("nan")
        return TokenMean(mean, nan, nan, nan, level, nan, n, g, naive)
    resid = sums - mean * counts  # Σ_t∈g (x_t − x̄)
    se = math.sqrt(g / (g - 1) * float((resid * resid).sum())) / n
    q = sps.t.ppf(0.5 + level / 2, g - 1)
    if se > 0:
        p = float(2 * sps.t.sf(abs(mean) / se, g - 1))
    else:
        p = 1.0 if mean == 0 else 0.0
    return TokenMean(mean, se, mean - q * se, mean + q * se, level, p, n, g, naive)


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
