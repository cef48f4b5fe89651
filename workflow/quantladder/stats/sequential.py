"""Stopping a benchmark early, with an honest error rate: anytime-valid tests on paired items.

Repeating an ordinary test after every wave of items and stopping at the first p < α inflates the
false-alarm rate far above α (Armitage, McPherson & Rowe 1969): with 20 looks it is several times α.
These tests are *e-processes*: non-negative supermartingales under their null, so by Ville's
inequality P(sup_n E_n ≥ 1/a) ≤ a, whatever the number of looks, the wave sizes, or the moment one
stops (Ramdas, Grünwald, Vovk & Shafer 2023, "Game-theoretic statistics and safe anytime-valid
inference"). Items must arrive in an order fixed before their results are known (a seeded shuffle
of the benchmark), so that they are exchangeable draws.

Three claims, each tested at a/2 = α/2, so that in every true state the chance of stopping with a
false claim is at most α:

- **loss** (reject "the rung loses nothing", Δ ≥ 0): a mixture likelihood ratio on the discordant
  items only. Under Δ ≥ 0 a discordant item is a loss with probability π ≤ ½, whatever the flip
  rate, so E^loss_m = ∫_{π>½} (2π)^b (2(1−π))^c dBeta(½,½)|_{π>½} over the m = b + c discordant
  items (b losses, c gains) is a supermartingale under the null (each factor has mean
  2[π₀π + (1−π₀)(1−π)] ≤ 1 for π > ½ ≥ π₀): Robbins' (1970) mixture SPRT, one-sided.
- **gain**: the mirror image.
- **no loss of ``margin`` or more** (reject Δ ≤ −margin, Δ = rung − reference accuracy): testing by
  betting (Waudby-Smith & Ramdas 2024, JRSS-B 86:1–27). With d = rung − reference ∈ [−1, 1] per
  item, K_n = Π (1 + λ_i (d_i + margin)) with a predictable bet 0 ≤ λ_i ≤ ½ / (1 − margin) has
  E[factor] ≤ 1 under the null; λ_i is their aGRAPA plug-in μ̂ / (σ̂² + μ̂²) from the earlier items.

Stopping rule (``decide``): after any item or wave, stop with "loss" if E^loss ≥ 2/α, with "gain" if
E^gain ≥ 2/α, with "no loss of ≥ margin" if K ≥ 2/α; stop "undecided" at ``max_items``; otherwise
continue. The first claim reached is final. A ladder of m such tests uses α/m each (Bonferroni:
valid for e-processes under any dependence).

With partial-credit scores, "loss" and "gain" are claims about the sign of the per-item differences
(a sequential sign test: among items that differ, is the rung worse more often than not?), while
"no loss of ≥ margin" is a claim about the mean difference.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import special

LOG2 = math.log(2.0)
HALF_PRIOR_LOG_MASS = math.log(math.pi / 2.0)  # ∫_{½}^{1} π^{-½}(1−π)^{-½} dπ = B(½,½)/2


def log_e_loss(n_loss, n_gain):
    """log E^loss after b losses and c gains among the discordant items (vectorised)."""
    b = np.asarray(n_loss, dtype=float)
    c = np.asarray(n_gain, dtype=float)
    # ∫_{½}^{1} π^{b−½}(1−π)^{c−½} dπ = B(b+½, c+½) · P(Beta(b+½, c+½) > ½) = B(...) · I_{½}(c+½, b+½)
    tail = special.betainc(c + 0.5, b + 0.5, 0.5)
    with np.errstate(divide="ignore"):
        return (b + c) * LOG2 + special.betaln(b + 0.5, c + 0.5) + np.log(tail) - HALF_PRIOR_LOG_MASS


def log_e_gain(n_loss, n_gain):
    return log_e_loss(n_gain, n_loss)


@dataclass(frozen=True)
class SequentialDecision:
    state: str  # "continue" | "loss" | "gain" | "no_loss_beyond_margin" | "undecided"
    n: int  # items seen when the state was reached
    n_loss: int
    n_gain: int
    estimate: float  # pp, rung − reference, on the items seen
    e_loss: float
    e_gain: float
    e_margin: float | None
    anytime_p: float  # min over time of min(1, 1 / ((E^loss + E^gain)/2)): valid at any stopping time
    alpha: float
    margin: float | None  # pp
    rule: str

    @property
    def stop(self) -> bool:
        return self.state != "continue"

    def to_dict(self) -> dict:
        return asdict(self)


class SequentialPairedTest:
    """Feed paired verdicts as they arrive; ask ``decide()`` whether the run can stop.

    alpha: the error rate of the whole procedure (each claim at alpha/2). margin: in percentage
    points; with it the test can also stop with "no loss of ≥ margin" (None: only loss/gain).
    max_items: stop "undecided" there (None: never).
    """

    def __init__(self, alpha: float = 0.05, margin: float | None = None, max_items: int | None = None):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        if margin is not None and not 0 < margin < 100:
            raise ValueError(f"margin is in percentage points, in (0, 100); got {margin!r}")
        self.alpha = alpha
        self.margin = margin
        self.max_items = max_items
        self._m = None if margin is None else margin / 100.0
        self._lam_max = None if margin is None else 0.5 / (1.0 - self._m)
        self._threshold = math.log(2.0 / alpha)
        self.n = self.n_loss = self.n_gain = 0
        self._sum_d = 0.0
        self._log_k = 0.0
        self._z_sum = 0.0
        self._z_var_sum = 0.25  # σ̂² starts at ¼ (a prior guess; any predictable choice is valid)
        self._min_p = 1.0
        self._el = self._eg = 0.0  # log e-values: 1 before any discordant item
        self._decision: SequentialDecision | None = None

    @property
    def rule(self) -> str:
        a = self.alpha
        text = (f"stop with 'loss' once E_loss >= {2 / a:g} or 'gain' once E_gain >= {2 / a:g} (mixture SPRT on "
                f"the discordant items)")
        if self.margin is not None:
            text += f", or 'no loss of >= {self.margin:g} points' once the betting wealth K >= {2 / a:g}"
        if self.max_items:
            text += f"; 'undecided' at {self.max_items} items"
        return text + f"; P(stopping with a false claim) <= {a:g} at any number of looks"

    def update(self, ref_correct, rung_correct) -> None:
        """Add one item or a wave: bools (or scores in [0, 1]) of the reference and the rung, in the
        items' fixed order."""
        x = np.atleast_1d(np.asarray(ref_correct, dtype=float))
        y = np.atleast_1d(np.asarray(rung_correct, dtype=float))
        if x.shape != y.shape:
            raise ValueError(f"update: {x.size} reference verdicts for {y.size} rung verdicts")
        if np.any((x < 0) | (x > 1) | (y < 0) | (y > 1)):
            raise ValueError("update: verdicts must be booleans or scores in [0, 1]")
        for d in (y - x).tolist():
            self._one(d)
            if self._decision is None:
                state = self._state()
                if state != "continue":
                    self._decision = self._snapshot(state)

    def _one(self, d: float) -> None:
        if self._m is not None:
            t = self.n  # items before this one: the bet uses only them
            mu = self._z_sum / (t + 1)
            var = self._z_var_sum / (t + 1)
            lam = min(max(mu / (var + mu * mu), 0.0), self._lam_max) if var + mu * mu > 0 else 0.0
            z = d + self._m
            self._log_k += math.log1p(lam * z)
            self._z_sum += z
            self._z_var_sum += (z - self._z_sum / (t + 2)) ** 2
        self.n += 1
        self._sum_d += d
        if d == 0:
            return  # a concordant item leaves the discordant-item e-processes where they are
        if d < 0:
            self.n_loss += 1
        else:
            self.n_gain += 1
        self._el = float(log_e_loss(self.n_loss, self.n_gain))
        self._eg = float(log_e_gain(self.n_loss, self.n_gain))
        e_sym = 0.5 * (math.exp(min(self._el, 700.0)) + math.exp(min(self._eg, 700.0)))
        self._min_p = min(self._min_p, 1.0 / e_sym if e_sym > 1 else 1.0)

    def _state(self) -> str:
        if self._el >= self._threshold:
            return "loss"
        if self._eg >= self._threshold:
            return "gain"
        if self._m is not None and self._log_k >= self._threshold:
            return "no_loss_beyond_margin"
        if self.max_items and self.n >= self.max_items:
            return "undecided"
        return "continue"

    def _snapshot(self, state: str) -> SequentialDecision:
        el, eg = self._el, self._eg
        return SequentialDecision(
            state=state, n=self.n, n_loss=self.n_loss, n_gain=self.n_gain,
            estimate=100.0 * self._sum_d / self.n if self.n else float("nan"),
            e_loss=math.exp(min(el, 700.0)), e_gain=math.exp(min(eg, 700.0)),
            e_margin=None if self._m is None else math.exp(min(self._log_k, 700.0)),
            anytime_p=self._min_p, alpha=self.alpha, margin=self.margin, rule=self.rule)

    def decide(self) -> SequentialDecision:
        """The first claim reached (final once reached), else the current state ("continue")."""
        return self._decision if self._decision is not None else self._snapshot("continue")
