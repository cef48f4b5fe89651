"""Verdicts per (rung, metric) for a whole ladder: corrected p-values, detectable loss, noise floor, words.

A verdict is one of three, decided on the ladder-corrected p-value of the paired test (Holm by
default, see ``multiplicity``) at α = 0.05:

- "loss" / "gain": significant, with the difference, its standard error and its 95 % interval;
- "no loss detectable": not significant, with the smallest loss the run could have detected at 80 %
  power at the planning level α/m (``power.smallest_detectable_loss``; m = comparisons on the ladder).

With a **noise floor** — the flip rate between two runs that should agree (the same point batched vs
single-stream, or the reference at another KV/batch setting) — a significant verdict whose own flip
rate is not above the noise floor's is marked "within noise": the harness alone flips that many.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Hashable, Mapping, Sequence

from . import multiplicity, power
from .paired import PairedDelta

LOSS, GAIN, NONE = "loss", "gain", "no loss detectable"


@dataclass(frozen=True)
class NoiseFloor:
    """Agreement between two runs that should agree, on their common items."""

    n: int
    flip_rate: float  # share 0..1 of items whose verdict differs
    identical_share: float | None  # share 0..1 of items whose output text is identical (None: no texts)
    what: str  # which two runs, in words

    def to_dict(self) -> dict:
        return asdict(self)


def _texts(gens) -> dict[str, str]:
    if isinstance(gens, Mapping):
        return {str(k): v for k, v in gens.items()}
    return {str(g["item_id"]): g.get("text") for g in gens if "item_id" in g}


def noise_floor(verdicts_a: Sequence[Mapping], verdicts_b: Sequence[Mapping], *, generations_a=None,
                generations_b=None, what: str = "two runs that should agree") -> NoiseFloor:
    """Flip rate (and, given both runs' generations, the identical-output share) between two runs."""
    a = {str(v["item_id"]): bool(v["correct"]) for v in verdicts_a}
    b = {str(v["item_id"]): bool(v["correct"]) for v in verdicts_b}
    common = sorted(set(a) & set(b))
    n = len(common)
    flips = sum(a[i] != b[i] for i in common)
    ident = None
    if generations_a is not None and generations_b is not None:
        ta, tb = _texts(generations_a), _texts(generations_b)
        both = [i for i in common if i in ta and i in tb]
        ident = sum(ta[i] == tb[i] for i in both) / len(both) if both else None
    return NoiseFloor(n=n, flip_rate=flips / n if n else float("nan"), identical_share=ident, what=what)


@dataclass(frozen=True)
class Verdict:
    verdict: str  # LOSS | GAIN | NONE
    delta: PairedDelta
    p_adjusted: float
    correction: str  # multiplicity.METHODS key
    n_comparisons: int
    alpha: float
    power: float
    mde: float | None  # pp; None: no loss of any size detectable with these items
    mde_method: str
    noise: NoiseFloor | None
    within_noise: bool | None  # None: no noise floor to compare with (or not significant)
    text: str

    @property
    def label(self) -> str:
        """The dataset's `verdict` column: loss | gain | no loss detectable | loss within noise | gain within noise."""
        return f"{self.verdict} within noise" if self.within_noise else self.verdict

    def columns(self) -> dict:
        """The dataset's paired-comparison columns for this figure (quantladder.dataset.COLUMNS)."""
        d = self.delta
        return {"delta": d.estimate, "delta_stderr": d.stderr, "delta_ci_low": d.ci_low, "delta_ci_high": d.ci_high,
                "delta_p": d.p_value, "delta_p_adjusted": self.p_adjusted, "delta_mde": self.mde,
                "verdict": self.label, "verdict_text": self.text}

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("delta", "noise")}
        out["delta"] = self.delta.to_dict()
        out["noise"] = None if self.noise is None else self.noise.to_dict()
        out["label"] = self.label
        return out


def _pts(x: float) -> str:
    return f"{x:+.1f}".replace("+0.0", "0.0").replace("-0.0", "0.0")


def _p(p: float) -> str:
    return f"= {p:.2g}" if p >= 0.001 else "< 0.001"


def detectable_loss(delta: PairedDelta, *, alpha: float, power_target: float) -> tuple[float | None, str]:
    """The smallest loss (pp) detectable at ``power_target`` with these items, and how it was computed.

    Binary items: exact McNemar power at the measured n and flip rate. Weighted items: the same at
    Kish's effective n = (Σw)²/Σw², which a weighted mean of n items is worth. Partial-credit scores:
    (z_{1−α/2} + z_power) × the measured standard error (a normal approximation), or the binary bound
    when no item differs.
    """
    psi = delta.discordance
    if delta.kind == "score" and delta.stderr > 0 and math.isfinite(delta.stderr):
        return power.normal_detectable(delta.stderr, alpha=alpha, power=power_target), "normal (measured SE)"
    n_eff = delta.n
    how = "exact McNemar power"
    if delta.kind == "weighted" and delta.n_eff is not None:
        n_eff = int(math.floor(delta.n_eff))
        how = f"exact McNemar power at Kish's effective n = {n_eff}"
    m = power.smallest_detectable_loss(n_eff, psi if math.isfinite(psi) else 0.0, alpha=alpha, power=power_target)
    return (None if m is None else 100.0 * m), how


def verdict(delta: PairedDelta, *, p_adjusted: float | None = None, correction: str = "none", n_comparisons: int = 1,
            alpha: float = 0.05, power_target: float = 0.8, noise: NoiseFloor | None = None) -> Verdict:
    """The verdict of one comparison (``ladder`` computes p_adjusted over the ladder)."""
    p_adj = delta.p_value if p_adjusted is None else p_adjusted
    plan_alpha = multiplicity.planning_alpha(alpha, n_comparisons, correction)
    mde, how = detectable_loss(delta, alpha=plan_alpha, power_target=power_target)
    significant = p_adj <= alpha and delta.estimate != 0
    kind = (LOSS if delta.estimate < 0 else GAIN) if significant else NONE
    within = None
    if significant and noise is not None and math.isfinite(noise.flip_rate):
        within = delta.discordance <= noise.flip_rate
    lvl = f"{100 * delta.level:g} %"
    ci = f"{lvl} CI {_pts(delta.ci_low)}…{_pts(delta.ci_high)}"
    corr = "" if correction == "none" or n_comparisons <= 1 else f", {correction.upper() if correction == 'bh' else correction.capitalize()} over {n_comparisons}"
    pw = f"{100 * power_target:g} % power"
    if kind == NONE:
        if mde is None:
            tail = f"no loss of any size is detectable at {pw} with {delta.n} items"
        else:
            tail = f"smallest detectable loss at {pw}: {mde:.1f} points"
        text = (f"no loss detectable at n = {delta.n} ({_pts(delta.estimate)} points, {ci}, "
                f"adjusted p {_p(p_adj)}{corr}; {tail})")
    else:
        text = (f"{kind} of {abs(delta.estimate):.1f} ± {delta.stderr:.1f} points ({ci}), significant "
                f"(adjusted p {_p(p_adj)}{corr}; n = {delta.n})")
        if within:
            text += (f"; within noise: its flip rate {100 * delta.discordance:.1f} % is not above the noise floor's "
                     f"{100 * noise.flip_rate:.1f} % ({noise.what}, n = {noise.n})")
    return Verdict(verdict=kind, delta=delta, p_adjusted=p_adj, correction=correction, n_comparisons=n_comparisons,
                   alpha=alpha, power=power_target, mde=mde, mde_method=how, noise=noise, within_noise=within, text=text)


def ladder(deltas: Mapping[Hashable, PairedDelta], *, correction: str = "holm", alpha: float = 0.05,
           power_target: float = 0.8, noise: NoiseFloor | Mapping[Hashable, NoiseFloor] | None = None) -> dict:
    """Verdicts for every comparison of a ladder (keys: e.g. (rung, metric, subset)), with the
    p-values corrected over all of them together."""
    keys = list(deltas)
    adj = multiplicity.adjust([deltas[k].p_value for k in keys], correction)
    out = {}
    for k, p in zip(keys, adj):
        nf = noise.get(k) if isinstance(noise, Mapping) else noise
        out[k] = verdict(deltas[k], p_adjusted=float(p), correction=correction, n_comparisons=len(keys), alpha=alpha,
                         power_target=power_target, noise=nf)
    return out


# ------------------------------------------------------------------------------------------ per-token figures

@dataclass(frozen=True)
class FigureDelta:
    """A paired difference given as a figure and its standard error (perplexity/KLD: the pass measures
    rung and reference on the same tokens, so its figure *is* the paired per-token difference).

    A figure measured by the pass carries its chunk-level interval (``from_tokens``: tokens of one chunk
    are not independent, so the chunks are the units, ``clusters`` of them): a t interval on the chunk
    means, widened for a divergence's skew, and the t test of 0 on G − 1 degrees of freedom. A figure
    with only a standard error (``figure_delta``) gets the normal interval, estimate ± z·SE."""

    estimate: float  # rung − reference, in ``unit``
    stderr: float
    ci_low: float
    ci_high: float
    level: float
    p_value: float
    n: int  # tokens
    unit: str
    higher_is_better: bool
    interval: str = "normal (estimate ± z·SE)"
    test: str = "two-sided z test"
    clusters: int | None = None  # the independent chunks behind the interval (None: the tokens, n)

    @property
    def worse(self) -> bool:
        """The rung's figure moved the bad way (a KLD above 0, a same-top-token share below 100 %)."""
        return (self.estimate < 0) == bool(self.higher_is_better)


def figure_delta(estimate: float, stderr: float | None, n: int, *, unit: str, higher_is_better: bool,
                 level: float = 0.95) -> FigureDelta:
    from scipy import stats as sps

    se = float(stderr) if stderr is not None and math.isfinite(stderr) else float("nan")
    z = float(sps.norm.ppf(0.5 + level / 2))
    if not math.isfinite(se):
        lo = hi = p = float("nan")
    elif se == 0.0:
        lo = hi = float(estimate)
        p = 1.0 if estimate == 0 else 0.0
    else:
        lo, hi = estimate - z * se, estimate + z * se
        p = float(2 * sps.norm.sf(abs(estimate) / se))
    return FigureDelta(float(estimate), se, lo, hi, level, p, int(n), unit, bool(higher_is_better))


def from_tokens(tm, *, shift: float = 0.0, unit: str, higher_is_better: bool) -> FigureDelta:
    """The paired delta of a per-token figure from its chunk-level record (``stats.tokens.TokenMean``
    at the level wanted): the figure − ``shift`` (what the reference scores against itself)."""
    from scipy import stats as sps

    est, se, g = tm.estimate - shift, tm.stderr, int(tm.n_chunks)
    if not math.isfinite(se):
        p = float("nan")
    elif se == 0.0:
        p = 1.0 if est == 0 else 0.0
    else:
        p = float(2 * sps.t.sf(abs(est) / se, g - 1))
    how = ("t on chunk means ∪ lognormal GCI" if tm.method != "t" else "t on chunk means") + f" ({g - 1} df)"
    if tm.mirror is not None:
        how += f", on {tm.mirror:g} − the figure"
    return FigureDelta(float(est), float(se), tm.ci_low - shift, tm.ci_high - shift, tm.level, p, int(tm.n_tokens),
                       unit, bool(higher_is_better), interval=how, test=f"two-sided t test over {g} chunks",
                       clusters=g)


@dataclass(frozen=True)
class FigureVerdict:
    """The verdict of a per-token figure (same words and dataset columns as ``Verdict``)."""

    verdict: str
    delta: FigureDelta
    p_adjusted: float
    correction: str
    n_comparisons: int
    alpha: float
    power: float
    mde: float | None  # in the figure's unit
    text: str
    within_noise: bool | None = None

    @property
    def label(self) -> str:
        return self.verdict

    def columns(self) -> dict:
        d = self.delta
        return {"delta": d.estimate, "delta_stderr": d.stderr, "delta_ci_low": d.ci_low, "delta_ci_high": d.ci_high,
                "delta_p": d.p_value, "delta_p_adjusted": self.p_adjusted, "delta_mde": self.mde,
                "verdict": self.label, "verdict_text": self.text}


def _g(x: float) -> str:
    """A small figure in 3 significant digits, signed."""
    return "0" if x == 0 else f"{x:+.3g}"


def figure_verdict(delta: FigureDelta, *, p_adjusted: float | None = None, correction: str = "none",
                   n_comparisons: int = 1, alpha: float = 0.05, power_target: float = 0.8) -> FigureVerdict:
    """Loss / gain / no loss detectable for a per-token figure, in the figure's unit."""
    p_adj = delta.p_value if p_adjusted is None else p_adjusted
    plan_alpha = multiplicity.planning_alpha(alpha, n_comparisons, correction)
    mde = (power.normal_detectable(delta.stderr, alpha=plan_alpha, power=power_target, df=(
        delta.clusters - 1 if delta.clusters else None)) if math.isfinite(delta.stderr) and delta.stderr > 0 else None)
    significant = math.isfinite(p_adj) and p_adj <= alpha and delta.estimate != 0
    kind = (LOSS if delta.worse else GAIN) if significant else NONE
    u = "" if delta.unit in ("1", "") else (" points" if delta.unit == "%" else f" {delta.unit}")
    units = f" in {delta.clusters} chunks" if delta.clusters else ""
    lvl = f"{100 * delta.level:g} %"
    ci = f"{lvl} CI {_g(delta.ci_low)}…{_g(delta.ci_high)}" if math.isfinite(delta.ci_low) else "no interval"
    corr = "" if correction == "none" or n_comparisons <= 1 else f", {correction.upper() if correction == 'bh' else correction.capitalize()} over {n_comparisons}"
    how = ("per-token standard error, tokens taken as independent" if not delta.clusters else
           f"clustered by chunk: {delta.clusters} chunks, {delta.interval}")
    if kind == NONE:
        tail = ("no standard error: nothing is detectable" if mde is None else
                f"smallest detectable change at {100 * power_target:g} % power: {mde:.3g}{u}")
        text = (f"no loss detectable at n = {delta.n} tokens{units} ({_g(delta.estimate)}{u}, {ci}, adjusted p "
                f"{_p(p_adj) if math.isfinite(p_adj) else 'not computable'}{corr}; {tail}; {how})")
    else:
        size = (f"{abs(delta.estimate):.2f} ± {delta.stderr:.2f}" if delta.unit == "%" else
                f"{abs(delta.estimate):.3g} ± {delta.stderr:.2g}")
        text = (f"{kind} of {size}{u} ({ci}), significant (adjusted p "
                f"{_p(p_adj)}{corr}; n = {delta.n} tokens{units}; {how})")
    return FigureVerdict(verdict=kind, delta=delta, p_adjusted=p_adj, correction=correction,
                         n_comparisons=n_comparisons, alpha=alpha, power=power_target, mde=mde, text=text)
