"""Power and sample size for the paired (McNemar) comparison of a rung with its reference.

Parameters are shares of items (0..1): ``discordance`` ψ = p_loss + p_gain (the flip rate) and the
loss δ = p_loss − p_gain (reference − rung accuracy; a loss is positive here). A loss of δ needs
ψ ≥ δ, so every function plans with ψ' = max(ψ, δ): a measured flip rate smaller than the loss
asked about (0 flips in 10 items) is raised to the least that loss implies (all flips one way).

- ``connor``: the unconditional normal approximation of Connor (1987), also Lachin (1992, eq. 3.4):
      n = [z_{1−α/2} √ψ + z_{power} √(ψ − δ²)]² / δ²,
      power(n) = Φ((√n δ − z_{1−α/2} √ψ) / √(ψ − δ²)).
- ``exact``: the power of the test the verdicts actually use, McNemar's exact (conditional binomial)
  test, by enumeration: the discordant count m ~ Bin(n, ψ'), the losses among them ~ Bin(m, π) with
  π = (ψ' + δ) / (2ψ'), and the test rejects when the two-sided binomial p at 1/2 is ≤ α. Exact power
  is a saw-tooth in n (the binomial's discreteness: Chernick & Liu 2002); ``items_needed`` returns
  the smallest n whose exact power reaches the target, searched from below Connor's n.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import stats as sps

EXACT_N_MAX = 10_000  # beyond this Connor's approximation is within ~2 % of the exact n (and scanning is slow)


def _plan_psi(loss: float, discordance: float) -> float:
    if not 0.0 < loss <= 1.0:
        raise ValueError(f"loss must be a share in (0, 1], got {loss!r}")
    if not 0.0 <= discordance <= 1.0:
        raise ValueError(f"discordance must be a share in [0, 1], got {discordance!r}")
    return min(1.0, max(discordance, loss))


def connor_items(loss: float, discordance: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Connor's (1987) sample size for a two-sided McNemar test at level alpha."""
    psi = _plan_psi(loss, discordance)
    za, zb = sps.norm.ppf(1 - alpha / 2), sps.norm.ppf(power)
    return int(math.ceil((za * math.sqrt(psi) + zb * math.sqrt(max(psi - loss * loss, 0.0))) ** 2 / loss ** 2))


def connor_power(n: int, loss: float, discordance: float, *, alpha: float = 0.05) -> float:
    psi = _plan_psi(loss, discordance)
    za = sps.norm.ppf(1 - alpha / 2)
    sd = math.sqrt(max(psi - loss * loss, 0.0))
    num = math.sqrt(n) * loss - za * math.sqrt(psi)
    if sd == 0.0:
        return 1.0 if num > 0 else 0.0
    return float(sps.norm.cdf(num / sd))


@lru_cache(maxsize=64)
def _lower_critical(m_max: int, alpha: float) -> np.ndarray:
    """k_lo(m): the largest loss count with 2·P(Bin(m, ½) ≤ k) ≤ alpha (−1 when none), m = 0..m_max."""
    m = np.arange(m_max + 1)
    k = sps.binom.ppf(alpha / 2, m, 0.5)
    k = np.where(sps.binom.cdf(k, m, 0.5) <= alpha / 2 * (1 + 1e-12), k, k - 1)
    return k.astype(np.int64)


def _reject_given_m(m_max: int, pi: float, alpha: float) -> np.ndarray:
    """P(exact McNemar rejects | m discordant items), m = 0..m_max, when a discordant item is a loss w.p. pi."""
    m = np.arange(m_max + 1)
    k = _lower_critical(m_max, alpha)
    ok = k >= 0
    lower = np.where(ok, sps.binom.cdf(k, m, pi), 0.0)
    upper = np.where(ok, sps.binom.sf(m - k - 1, m, pi), 0.0)
    return lower + upper


def _window(n: int, psi: float) -> np.ndarray:
    """The discordant counts m that carry all but < 1e-15 of Bin(n, ψ)'s mass (the rest is skipped)."""
    sd = math.sqrt(n * psi * (1 - psi))
    lo = max(0, int(n * psi - 9 * sd - 2))
    hi = min(n, int(n * psi + 9 * sd + 2))
    return np.arange(lo, hi + 1)


def _power_at(n: int, psi: float, r: np.ndarray) -> float:
    m = _window(n, psi)
    return float(np.dot(sps.binom.pmf(m, n, psi), r[m]))


def exact_power(n: int, p_loss: float, p_gain: float, *, alpha: float = 0.05) -> float:
    """Power of the two-sided exact McNemar test at n items, by enumeration (no approximation
    beyond skipping discordant counts more than 9 sd from the mean)."""
    psi = p_loss + p_gain
    if n <= 0 or psi <= 0.0:
        return 0.0
    return _power_at(n, psi, _reject_given_m(n, p_loss / psi, alpha))


def exact_power_for_loss(n: int, loss: float, discordance: float, *, alpha: float = 0.05) -> float:
    psi = _plan_psi(loss, discordance)
    return exact_power(n, (psi + loss) / 2, (psi - loss) / 2, alpha=alpha)


def items_needed(loss: float, discordance: float, *, alpha: float = 0.05, power: float = 0.8,
                 method: str = "exact") -> tuple[int, str]:
    """Items a paired run needs to detect ``loss`` with ``power`` at two-sided ``alpha``.

    Returns (n, method used). "exact": the smallest n whose exact McNemar power ≥ power (falls back
    to Connor's formula when that n would exceed EXACT_N_MAX).
    """
    n0 = connor_items(loss, discordance, alpha=alpha, power=power)
    if method == "connor" or n0 > EXACT_N_MAX:
        return n0, "connor"
    if method != "exact":
        raise ValueError(f"method must be exact or connor, got {method!r}")
    psi = _plan_psi(loss, discordance)
    pi = (psi + loss) / (2 * psi)
    top = max(2 * n0 + 50, 64)
    r = _reject_given_m(top, pi, alpha)
    # The exact test is conservative, so its n is rarely below Connor's; start 5 % below and step
    # further down while the start itself already has the power.
    start = max(1, int(0.95 * n0))
    while start > 1 and _power_at(start, psi, r) >= power:
        start = max(1, int(0.8 * start))
    for n in range(start, top + 1):
        if _power_at(n, psi, r) >= power:
            return n, "exact"
    return n0, "connor"  # not reached within 2× Connor's n: report the approximation


def smallest_detectable_loss(n: int, discordance: float, *, alpha: float = 0.05, power: float = 0.8,
                             method: str = "exact") -> float | None:
    """The smallest loss δ (a share) detected with ``power`` at n items, two-sided ``alpha``, with
    the discordance raised to δ where it is smaller. None when no loss up to 1 (every item lost) is
    detectable (the exact test cannot reject with so few items)."""
    if n <= 0:
        return None
    f = exact_power_for_loss if method == "exact" else connor_power
    if f(n, 1.0, discordance, alpha=alpha) < power:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(50):  # bisection: power is increasing in δ at fixed n and ψ
        mid = (lo + hi) / 2
        if mid > 0 and f(n, mid, discordance, alpha=alpha) >= power:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-6:
            break
    return hi


def normal_detectable(stderr: float, *, alpha: float = 0.05, power: float = 0.8, df: float | None = None) -> float:
    """The smallest difference detected with ``power`` by a two-sided z test whose standard error is
    ``stderr`` (same unit): (z_{1−α/2} + z_{power}) × SE; with ``df``, a t test's (t quantiles on df: a
    per-token figure's chunks). Used for weighted, partial-credit and per-token figures."""
    if df is not None:
        return float((sps.t.ppf(1 - alpha / 2, df) + sps.t.ppf(power, df)) * stderr)
    return float((sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power)) * stderr)


# ------------------------------------------------------------------------------------------ non-inferiority
#
# The claim the walk, find and the recommender make is not "a loss is detected" but "the rung is
# shown within a margin T": the lower bound of Tango's two-sided (1 − α) interval for p_gain − p_loss
# lies at or above −T. Its power is not McNemar's: it is the probability of that event, planned here
# as the runs will be judged — exactly, by enumerating the paired table's discordant count m ~ Bin(n, ψ)
# and its losses k ~ Bin(m, p_loss/ψ). Tango's interval inverts its score test, and the statistic
# falls as the null's δ rises, so the bound is at or above −T exactly when the score test of
# δ = −T rejects one-sided: z(−T) ≥ z_{1−α/2}. For a fixed m that holds for every k up to a largest
# k*(m) (fewer losses, a higher bound), found by bisection on all m at once.

def _tango_z_array(b: np.ndarray, c: np.ndarray, n: float, delta: float) -> np.ndarray:
    """Tango's score statistic for H0: p_gain − p_loss = delta, over arrays of loss (b) and gain (c)
    counts at n items: ``paired.tango_z`` vectorised (the same restricted MLE, Tango 1998 eq. 3)."""
    b = b.astype(float)
    c = c.astype(float)
    A = 2.0 * n
    B = -b - c + (2.0 * n - c + b) * delta
    C = -b * delta * (1.0 - delta)
    p = (-B + np.sqrt(np.maximum(B * B - 4.0 * A * C, 0.0))) / (2.0 * A)
    p = np.clip(p, max(0.0, -delta), (1.0 - delta) / 2.0)
    var = n * (2.0 * p + delta * (1.0 - delta))
    num = c - b - n * delta
    with np.errstate(divide="ignore", invalid="ignore"):
        z = num / np.sqrt(var)
        edge = np.where(num == 0, 0.0, np.copysign(np.inf, num))
    return np.where(var > 0, z, edge)


def _largest_claiming_losses(n: int, m: np.ndarray, margin: float, zc: float) -> np.ndarray:
    """k*(m): the most losses among m discordant items at which the bound still clears −margin
    (−1 when even k = 0 does not)."""
    lo = np.full(m.shape, -1, dtype=np.int64)  # invariant: claims at lo (or lo = −1), not at hi + 1
    hi = m.astype(np.int64).copy()
    ok_hi = _tango_z_array(hi, m - hi, n, -margin) >= zc
    lo = np.where(ok_hi, hi, lo)
    hi = np.where(ok_hi, hi, hi - 1)
    while np.any(hi > lo):
        mid = (lo + hi + 1) // 2
        ok = _tango_z_array(np.maximum(mid, 0), m - np.maximum(mid, 0), n, -margin) >= zc
        lo = np.where(ok & (hi > lo), mid, lo)
        hi = np.where(~ok & (hi > lo), mid - 1, hi)
    return lo


def noninferiority_power(n: int, margin: float, discordance: float, *, true_delta: float = 0.0,
                         alpha: float = 0.05) -> float:
    """The probability that a paired run of n binary items shows a rung within ``margin`` (a share):
    Tango's two-sided (1 − alpha) lower bound ≥ −margin, when the rung's true difference is
    ``true_delta`` (p_gain − p_loss; 0: it equals its reference) and a share ``discordance`` of the
    items flip. Exact up to the discordant counts beyond 9 sd of their mean (< 1e-15 of the mass)."""
    psi = float(discordance)
    if not 0.0 <= psi <= 1.0 or abs(true_delta) > psi + 1e-12:
        raise ValueError(f"discordance {discordance!r} must be a share ≥ |true_delta| ({true_delta!r})")
    if not margin > 0:
        raise ValueError(f"margin must be > 0, got {margin!r}")
    if n <= 0:
        return 0.0
    zc = float(sps.norm.ppf(1 - alpha / 2))
    m = _window(n, psi) if psi > 0 else np.array([0])
    k = _largest_claiming_losses(n, m, margin, zc)
    p_loss = (psi - true_delta) / 2.0
    pi = p_loss / psi if psi > 0 else 0.0
    given_m = np.where(k >= 0, sps.binom.cdf(k, m, pi), 0.0)
    pm = sps.binom.pmf(m, n, psi) if psi > 0 else np.array([1.0])
    return float(np.dot(pm, given_m))


def normal_noninferiority_items(margin: float, discordance: float, *, true_delta: float = 0.0,
                                alpha: float = 0.05, power: float = 0.8) -> int:
    """The normal approximation: n = (z_{1−α/2} + z_power)² (ψ − δ²) / (δ + T)²."""
    z = sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power)
    var = max(discordance - true_delta ** 2, 1e-12)
    return int(math.ceil(z * z * var / (true_delta + margin) ** 2))


@lru_cache(maxsize=512)
def noninferiority_items(margin: float, discordance: float, *, true_delta: float = 0.0, alpha: float = 0.05,
                         power: float = 0.8) -> tuple[int, str]:
    """Items a paired run needs to *show* a rung within ``margin`` with ``power`` (the decision rule's
    own power, :func:`noninferiority_power`), when its true difference is ``true_delta`` and a share
    ``discordance`` of items flip. The discordance is raised to the margin where it is smaller (0 flips
    in 10 items: plan as if a share T flipped, half each way, the least a run can plan on without
    assuming it will see no flip at all). Returns (n, "exact") — the smallest n whose exact power reaches
    ``power`` — or the normal approximation's n with "normal" beyond EXACT_N_MAX items."""
    psi = min(1.0, max(float(discordance), float(margin), abs(true_delta)))
    if true_delta + margin <= 0:
        raise ValueError(f"a true difference {true_delta!r} at or beyond the margin −{margin!r} is never shown within it")
    n0 = normal_noninferiority_items(margin, psi, true_delta=true_delta, alpha=alpha, power=power)
    if n0 > EXACT_N_MAX:
        return n0, "normal"
    # The exact rule needs more than the approximation where few items flip (a 1-point margin with a
    # 1 % flip rate: 1,040 against 784); start below it and step up to the first n with the power.
    start = max(1, int(0.6 * n0))
    while start > 1 and noninferiority_power(start, margin, psi, true_delta=true_delta, alpha=alpha) >= power:
        start = max(1, int(0.7 * start))
    for n in range(start, min(4 * n0 + 100, EXACT_N_MAX) + 1):
        if noninferiority_power(n, margin, psi, true_delta=true_delta, alpha=alpha) >= power:
            return n, "exact"
    return n0, "normal"
