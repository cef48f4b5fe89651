"""The exact interval of a share: k of n items, Clopper–Pearson.

A share's binomial standard error √(p(1 − p)/n) is 0 at k = 0 and k = n, so "0 ± 0 % of 10 verdicts
flipped" claims a certainty ten items cannot give: the one-sided 97.5 % upper bound of 0 of 10 is
about 31 %. The Clopper–Pearson interval inverts the exact binomial test (Clopper & Pearson 1934,
*Biometrika* 26:404) and holds its level for every n and p (it is conservative); it is what
``scipy.stats.binomtest(k, n).proportion_ci(method="exact")`` returns, computed here from the beta
quantiles so that a report of hundreds of shares does not run a test per share.
"""

from __future__ import annotations

import math


def share_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided ``level`` interval of the share k / n, as fractions in
    [0, 1]: (0, upper) at k = 0 and (lower, 1) at k = n."""
    from scipy.stats import beta  # heavy: imported where used

    if isinstance(k, float):
        if not k.is_integer():
            raise ValueError(f"share_interval: k must be a count of items, got {k!r}")
        k = int(k)
    if isinstance(n, float):
        if not n.is_integer():
            raise ValueError(f"share_interval: n must be a count of items, got {n!r}")
        n = int(n)
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"share_interval: needs 0 <= k <= n and n > 0, got k={k!r}, n={n!r}")
    if not 0 < level < 1:
        raise ValueError(f"share_interval: level must be in (0, 1), got {level!r}")
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return (lo if math.isfinite(lo) else 0.0), (hi if math.isfinite(hi) else 1.0)
