"""Is a rung *shown* within a tolerance of its reference? Non-inferiority on a paired interval.

"No loss detectable" is not "no loss" (Altman & Bland 1995, *BMJ* 311:485): an 8-item run detects
nothing, so a rule that treats it as lossless rewards measuring less. A rung may stand in for its
reference only when the run *shows* it close: the bound of its paired 95 % interval on the bad side
lies within the tolerance T the user sets (the margin of a non-inferiority comparison; ICH E9 §3.3.2,
CPMP/EWP/482/99). Per figure, in its unit (points for a %):

- **non-inferior**: the bad-side bound is within T (higher is better: ci_low ≥ −T; lower is better,
  a KLD: ci_high ≤ T);
- **inferior**: the whole interval is beyond T (the loss is shown larger than T);
- **undetermined**: the interval straddles the tolerance; ``items_needed`` says how many items a run
  needs to show a loss under T at 80 % power if the rung truly equals its reference.

**Multiplicity.** The dataset's verdicts are Holm-corrected tests of "no difference", but its
intervals are the unadjusted 95 % ones, and a Holm or Bonferroni step on a non-inferiority question
would need the interval at another level or the test's p at the shifted null, which the dataset does
not keep (and which a normal approximation gets wrong exactly where it matters: no discordant item in
8 is a standard error of 0). So the claims are made in a **fixed sequence down the ladder**
(``walk``): the rungs of one (family, KV type, figure) in order of bits per weight, largest first,
each on its own one-sided 2.5 % bound (the 95 % interval), stopping at the first rung not shown
non-inferior. A pre-set order gives strong control of the family-wise error rate of the claims at
2.5 % with no widening (Maurer, Hothorn & Lehmacher 1995; Westfall & Krishen 2001, *J Stat Plan
Inference* 99:25–40), the order is the ladder's own, and it is the walk of "find my rung": walk down
until a rung is not shown within the tolerance. A rung past that stop claims nothing, whatever its
own interval says.

Pure functions over the dataset's paired columns (``delta``, ``delta_stderr``, ``delta_ci_low``,
``delta_ci_high``, ``n``); nothing here reads the dataset.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Mapping, Sequence

from . import power as qpower

NONINFERIOR, INFERIOR, UNDETERMINED = "non-inferior", "inferior", "undetermined"
ALPHA = 0.05  # two-sided level of the dataset's intervals: each claim is a one-sided 2.5 % test
POWER = 0.8
# The documented defaults per unit (config `recommend.tolerance` overrides per metric): 1 point of a
# task accuracy, 0.01 nats of mean KLD (Q8_0 of most models sits near 0.001–0.007, Q4_K_M near 0.03–0.06).
DEFAULT_TOLERANCE = {"%": 1.0, "nats": 0.01}


def tolerance_for(metric: str, unit: str | None, tolerances: Mapping[str, float] | None = None) -> float | None:
    """The tolerance of ``metric``: the user's (keyed by metric name), else the unit's default."""
    if tolerances and metric in tolerances:
        t = float(tolerances[metric])
        if not t > 0:
            raise ValueError(f"tolerance of {metric}: must be > 0, got {t!r}")
        return t
    return DEFAULT_TOLERANCE.get(unit or "")


def _finite(x) -> bool:
    return isinstance(x, numbers.Real) and math.isfinite(x)  # numpy scalars too


def _plan_share(unit: str, delta: float, stderr: float | None, n: int | None) -> float | None:
    """The flip rate a % figure plans with, ψ = n·SE² + Δ² (shares): the measured flip rate for a binary
    figure, the second moment of the per-item difference for a partial-credit or weighted one."""
    if not (_finite(stderr) and n and n > 0):
        return None
    return min(1.0, n * (stderr / 100) ** 2 + ((delta or 0.0) / 100) ** 2)


def items_needed(tolerance: float, unit: str, delta: float, stderr: float | None, n: int | None, *,
                 power: float = POWER, alpha: float = ALPHA) -> int | None:
    """Items a paired run needs to *show* a figure within ``tolerance`` of its reference with ``power``
    when it truly equals it, planned from the spread this run measured.

    A % figure plans with the power of the claim itself (``power.noninferiority_items``): the exact
    probability that Tango's interval's bad-side bound clears −T at the flip rate this run measured
    (raised to T where smaller), half the flips each way. Planning the two-sided McNemar test of a loss
    of T instead (every flip a loss) answers another question and falls short: at a 1-point margin and
    no flips seen it says 790 items, where the claim has 66.7 % power and needs 1,040.
    Other units scale the measured standard error: n·((z+z)·SE/T)² (a normal statistic's own power).
    ``alpha``: the two-sided level whose one-sided half each claim is tested at (a walk that splits
    its level asks at its own). None without n or a standard error.
    """
    if not (_finite(stderr) and n and n > 0 and tolerance > 0):
        return None
    if unit == "%":
        psi = _plan_share(unit, delta, stderr, n)
        return _ni_items(min(tolerance / 100, 1.0), round(psi, 4), power, alpha)
    if stderr == 0:
        return None
    return int(math.ceil(n * (qpower.normal_detectable(stderr, alpha=alpha, power=power) / tolerance) ** 2))


def items_to_detect(tolerance: float, unit: str, delta: float, stderr: float | None, n: int | None, *,
                    power: float = POWER, alpha: float = ALPHA) -> int | None:
    """The other question, printed beside :func:`items_needed`: items a run needs to *detect* a loss of
    ``tolerance`` (two-sided exact McNemar, every flip beyond the measured rate a loss). % figures only."""
    psi = _plan_share(unit, delta, stderr, n) if unit == "%" else None
    if psi is None or not tolerance > 0:
        return None
    return _mcnemar_items(min(tolerance / 100, 1.0), round(psi, 4), power, alpha)


@lru_cache(maxsize=256)
def _ni_items(margin: float, psi: float, power: float, alpha: float = ALPHA) -> int:
    return qpower.noninferiority_items(margin, psi, alpha=alpha, power=power)[0]


@lru_cache(maxsize=256)
def _mcnemar_items(loss: float, psi: float, power: float, alpha: float = ALPHA) -> int:
    """Cached: a ladder asks the same plan for many figures (ψ rounded to 10⁻⁴), and each costs ~0.1 s."""
    return qpower.items_needed(loss, psi, alpha=alpha, power=power)[0]


@dataclass(frozen=True)
class Decision:
    """One figure of one rung against its reference, and whether the walk down the ladder reached it."""

    state: str  # NONINFERIOR | INFERIOR | UNDETERMINED, on the rung's own interval
    tolerance: float
    unit: str
    higher_is_better: bool
    delta: float
    ci_low: float
    ci_high: float
    n: int | None
    items_needed: int | None  # UNDETERMINED only: to show it within the tolerance (the claim's own power)
    reached: bool = True  # False: an earlier rung of the sequence was not shown non-inferior
    stopped_at: str | None = None  # that rung
    alpha: float = ALPHA  # the interval is the two-sided 1 − alpha one (each bound one-sided alpha/2)
    items_to_detect: int | None = None  # UNDETERMINED % figures: to detect a loss of the tolerance instead

    @property
    def bound(self) -> float:
        """The interval's end on the bad side (the cautious delta)."""
        return self.ci_low if self.higher_is_better else self.ci_high

    @property
    def shown(self) -> bool:
        """Claimed non-inferior: its own bound is within the tolerance and the walk reached it."""
        return self.state == NONINFERIOR and self.reached

    @property
    def determined(self) -> bool:
        """The run's size settles the question for this rung, one way or the other."""
        return self.state != UNDETERMINED

    @property
    def separated(self) -> bool:
        """The run tells this rung from its reference (the interval excludes 0) or settles the tolerance
        question; False: the figure cannot separate the two, the 8-item run's case."""
        return self.determined or self.ci_low > 0 or self.ci_high < 0

    def _u(self, x: float, sign: bool = True) -> str:
        if self.unit == "%":
            return f"{x:+.1f}" if sign else f"{x:g} point{'' if x == 1 else 's'}"
        return (f"{x:+.3g}" if sign else f"{x:.3g} {self.unit}")

    @property
    def text(self) -> str:
        t = self.tolerance
        side = f"≥ {self._u(-t)}" if self.higher_is_better else f"≤ {self._u(t)}"
        ci = f"Δ {self._u(self.delta)} ({100 * (1 - self.alpha):.4g} % CI {self._u(self.ci_low)}…{self._u(self.ci_high)}"
        ci += f", n = {self.n})" if self.n else ")"
        if self.state == NONINFERIOR:
            out = f"shown within {self._u(t, False)} of the reference: {ci}, its bound {self._u(self.bound)} {side}"
        elif self.state == INFERIOR:
            worse = "to lose more than {}" if self.higher_is_better else "more than {} from the reference"
            out = f"shown {worse.format(self._u(t, False))}: {ci} lies beyond the tolerance"
        else:
            # the claim's own plan (80 % power if the rung equals its reference); the items to detect a loss
            # of T are another figure, printed beside it where a plan is read (find, quantladder plan, the
            # report's plan line), not in this sentence, which the first screen quotes
            need = (f"; {self.items_needed:,} items needed to show it within {self._u(t, False)}"
                    if self.items_needed else "")
            out = f"undetermined: {ci} spans the tolerance {self._u(t, False)}{need}"
        if not self.reached:
            out += (f"; not claimed: the walk down the ladder stopped at {self.stopped_at}, "
                    "which is not shown within the tolerance")
        return out


def decide(delta, ci_low, ci_high, *, tolerance: float, higher_is_better: bool, unit: str,
           stderr=None, n=None, alpha: float = ALPHA) -> Decision | None:
    """The decision on one paired figure; None without a paired interval (no comparison to decide on).
    ``alpha``: the two-sided level of the interval given (its bad-side bound is a one-sided alpha/2 test)."""
    if not (_finite(delta) and _finite(ci_low) and _finite(ci_high)):
        return None
    t = float(tolerance)
    lo, hi = float(ci_low), float(ci_high)
    if higher_is_better:
        state = NONINFERIOR if lo >= -t else INFERIOR if hi < -t else UNDETERMINED
    else:
        state = NONINFERIOR if hi <= t else INFERIOR if lo > t else UNDETERMINED
    n = int(n) if _finite(n) else None
    need = items_needed(t, unit, float(delta), stderr, n, alpha=alpha) if state == UNDETERMINED else None
    detect = items_to_detect(t, unit, float(delta), stderr, n, alpha=alpha) if state == UNDETERMINED else None
    return Decision(state, t, unit, bool(higher_is_better), float(delta), lo, hi, n, need, alpha=float(alpha),
                    items_to_detect=detect)


def walk(sequence: Sequence[tuple[str, Decision | None]]) -> list[Decision | None]:
    """The fixed-sequence test down one ladder: ``sequence`` is (rung name, decision) from the largest
    rung down; every rung after the first one not shown non-inferior (or without a comparison) is
    marked not reached. The decisions come back in the same order."""
    out: list[Decision | None] = []
    stop = None
    for name, d in sequence:
        if d is not None and stop is not None:
            d = replace(d, reached=False, stopped_at=stop)
        elif stop is None and (d is None or d.state != NONINFERIOR):
            stop = name
        out.append(d)
    return out
