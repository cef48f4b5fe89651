"""The multiple-comparison correction for a ladder.

A card's ladder asks one question per (rung, headline metric) of a family: "is this rung's figure
different from the reference's?". The verdicts use **Holm's step-down procedure** (Holm 1979),
which controls the family-wise error rate — the chance that *any* "significant" verdict on the card
is false — at α. Why Holm and not Benjamini–Hochberg:

- a reader acts on single verdicts ("Q4_K_M loses 3 points on BFCL"), so each claim should be
  trustworthy on its own, which is what FWER control gives; FDR control only bounds the expected
  share of false claims among those made;
- every rung is compared with the *same* reference items, so the tests are dependent in a way that
  is not known to satisfy PRDS, which Benjamini–Hochberg needs (Benjamini & Yekutieli 2001); Holm is
  valid under any dependence;
- Holm is uniformly more powerful than Bonferroni and needs nothing but the p-values.

Benjamini–Hochberg is here too (``method="bh"``) for readers who screen many metrics at once; the
report names the correction it used.
"""

from __future__ import annotations

import numpy as np

METHODS = {"holm": "Holm step-down (family-wise error rate)", "bh": "Benjamini–Hochberg (false discovery rate)",
           "none": "no correction"}


def holm(pvalues) -> np.ndarray:
    """Holm-adjusted p-values: p_(i) × (m − i + 1), made monotone by a running maximum, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="mergesort")
    adj = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def benjamini_hochberg(pvalues) -> np.ndarray:
    """BH-adjusted p-values (q-values): p_(i) × m / i, made monotone from the largest down, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="mergesort")
    scaled = p[order] * m / np.arange(1, m + 1)
    adj = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def adjust(pvalues, method: str = "holm") -> np.ndarray:
    if method == "holm":
        return holm(pvalues)
    if method == "bh":
        return benjamini_hochberg(pvalues)
    if method == "none":
        return np.asarray(pvalues, dtype=float).copy()
    raise ValueError(f"correction must be one of {sorted(METHODS)}, got {method!r}")


def planning_alpha(alpha: float, n_comparisons: int, method: str = "holm") -> float:
    """The per-test level to plan power at: α/m (Bonferroni) for Holm, whose strictest step it is,
    so a planned power holds whichever step a rung's test ends at; α for BH and no correction
    (BH's per-test level depends on how many others are significant, unknown when planning)."""
    if method == "holm":
        return alpha / max(1, n_comparisons)
    return alpha
