"""The thinking as a loss axis (issue 43, deliverable 4; docs/thinking.md, "The thinking as a loss
axis"): how a thinking family's replies think, per point, and what a rung changes in it against the
family's reference on the same items.

Read from the reply records a thinking family's generate job writes (``reasoning.SPLIT_FIELDS``:
``thinking_end``, ``thinking_self_closed``, ``thinking_forced``, ``thinking_tokens``, ``reasoning``,
``answer``) and the points' verdicts; called by the aggregate (the one place points are compared)
and by find (one figure of one rung, at its own level). A point whose records carry no split (a
family that cannot think, or one thinking in markers not split here) gets no thinking row at all:
the figures are absent, never zero, and the readers say why (:func:`absent_reason`).

Per item, of a reply that thought (``thinking_end`` set: the reply opened a thinking block or
started inside one):

- **closed on its own**: the model wrote the end tag before its budget ran out (``thinking_end``
  ``model``);
- **hit its cap**: the budget ran out and the end was forced (``budget``), or the sequence's context
  ran out inside the thinking (``context``: the hard cap of an unlimited budget);
- neither: an end-of-generation token or stop string inside the thinking (``stop``).

Per point: ``think_close_rate`` and ``think_cap_rate`` (% of the replies that thought) and
``think_tokens_mean``. Paired against the reference (the rows of the rung's point):

- the closure and cap-hit rates' ``delta`` columns: rung − reference in points on the items both
  thought on, a paired binary per item, so Tango's score interval and McNemar's exact test
  (``stats.paired_delta``), Holm-corrected over the family's thinking comparisons of the benchmark on
  the card, with the noise floor: the same per-item figure's discordance between the reference and its
  noise-series run (``stats.noise_floor``), a loss not above it reads "within noise";
- ``think_tokens_ratio``: mean thinking tokens of the rung / the reference's on the items both closed
  on their own (a forced end cuts the length at the budget, so capped items would measure the budget),
  with a seeded paired bootstrap percentile interval (the items resampled with replacement,
  ``BOOTSTRAP_DRAWS`` draws, seed ``BOOTSTRAP_SEED``; the ratio of the resampled sums); its ``delta``
  is the ratio − 1 (the reference against itself is 1);
- ``think_flip_cap_rate`` / ``think_flip_answer_rate``: the verdict flips (either way, as
  ``flip_rate``; the two sum to it) split by cause, the rung at its cap on that item (its thinking
  forced to end, the context ran out, or it never closed: no answer) or not (it answered, differently);
  a share of the items with its exact
  Clopper–Pearson interval in the ``delta`` columns (the reference flips none against itself) and the
  noise floor's split of the same flips in its words;
- ``answer_identical_to_reference`` / ``thinking_identical_to_reference``: the two parts compared
  apart (byte-identical answers, byte-identical thinking), where ``identical_to_reference`` compares
  whole replies.
"""

from __future__ import annotations

import math
import re
from typing import Callable

from . import metrics, stats
from .errors import ConfigError
from .flips import share
from .metrics import TASK, Metric
from .reasoning import has_split
from .stats.share import share_interval

ALPHA = 0.05
POWER = 0.8
CORRECTION = "holm"
BOOTSTRAP_DRAWS = 2000
BOOTSTRAP_SEED = 0
LEVEL = 1 - ALPHA
CAP_ENDS = ("budget", "context")

metrics.declare(
    Metric("think_close_rate", "%", "a thinking family's replies that thought: those whose thinking ended on its "
           "own (the model wrote the end tag before its budget ran out); delta: rung − reference on the items "
           "both thought on, Tango's interval, McNemar's exact test, Holm over the family's thinking comparisons",
           (TASK,), higher_is_better=True, stderr="se", group="thinking"),
    Metric("think_cap_rate", "%", "a thinking family's replies that thought: those that hit their cap (the budget's "
           "end forced, or the context ran out inside the thinking); delta as think_close_rate's",
           (TASK,), higher_is_better=False, stderr="se", group="thinking"),
    Metric("think_tokens_mean", "tokens", "a thinking family's replies that thought: mean thinking tokens (tags "
           "and forced tokens included)", (TASK,), higher_is_better=False, stderr="se", group="thinking"),
    Metric("think_tokens_ratio", "1", "mean thinking tokens of the rung / of the reference on the items both "
           "closed on their own; ± and delta_ci_*: seeded paired bootstrap (items resampled, ratio of sums, "
           f"{BOOTSTRAP_DRAWS} draws, seed {BOOTSTRAP_SEED}, percentile); delta: ratio − 1",
           (TASK,), higher_is_better=False, stderr="se", group="thinking"),
    Metric("think_flip_cap_rate", "%", "items whose verdict differs from the reference's (either way) where the "
           "rung hit its thinking cap or its thinking never closed (forced to end at the budget, the context ran out, "
           "or no end at all: no answer); delta_ci_*: Clopper–Pearson",
           (TASK,), higher_is_better=False, stderr="se", group="thinking"),
    Metric("think_flip_answer_rate", "%", "items whose verdict differs from the reference's (either way) where the "
           "rung did not hit its cap: it answered differently; with think_flip_cap_rate it sums to flip_rate; "
           "delta_ci_*: Clopper–Pearson", (TASK,), higher_is_better=False, stderr="se", group="thinking"),
    Metric("answer_identical_to_reference", "%", "a thinking family: items whose answer (the reply past its "
           "thinking) is byte-identical to the reference point's", (TASK,), higher_is_better=True, stderr="se",
           group="thinking"),
    Metric("thinking_identical_to_reference", "%", "a thinking family: items whose thinking is byte-identical to "
           "the reference point's", (TASK,), higher_is_better=True, stderr="se", group="thinking"),
)
PAIRED_RATES = ("think_close_rate", "think_cap_rate")  # their delta columns: Tango + McNemar, Holm
FLIP_CAUSES = ("think_flip_cap_rate", "think_flip_answer_rate")


# ------------------------------------------------------------------------------------------ per item

def split_records(generations: list[dict] | None) -> dict[str, dict]:
    """item id -> record, for the records that carry the split (none for a family that does not think)."""
    return {str(g["item_id"]): g for g in (generations or []) if "item_id" in g and has_split(g)}


def thought(rec: dict) -> bool:
    return rec.get("thinking_end") is not None


def closed_on_its_own(rec: dict) -> bool:
    return rec.get("thinking_end") == "model"


def hit_cap(rec: dict) -> bool:
    """The reply hit its thinking cap: the end forced at the budget, or the sequence's context ran out
    inside the thinking (the hard cap of an unlimited budget)."""
    return rec.get("thinking_end") in CAP_ENDS or bool(rec.get("thinking_forced"))


def capped(rec: dict) -> bool:
    """A flip's cause is the thinking, not another answer: the reply hit its cap, or its thinking never
    closed (an end-of-generation token inside it: no answer, the verdict's ``thinking_cap``)."""
    return hit_cap(rec) or not rec.get("thinking_closed", True)


def absent_reason(generations: list[dict] | None) -> str | None:
    """Why a point has no thinking figures (None: it has them)."""
    if not generations:
        return "no replies beside the point"
    recs = split_records(generations)
    if not recs:
        return ("its replies carry no thinking: the family's template cannot think, or thinks in markers not "
                "split here (docs/thinking.md)")
    if not any(thought(r) for r in recs.values()):
        return f"none of its {len(recs)} replies thought (no thinking block opened: reasoning off, or the model skipped it)"
    return None


# ------------------------------------------------------------------------------------------ per point

def _mean_row(metric: str, xs: list[float]) -> dict:
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else None
    return metrics.row(metric, m, stderr=None if sd is None else sd / math.sqrt(n), n=n)


def point_rows(generations: list[dict] | None) -> list[dict]:
    """A thinking point's own figures; [] for a point whose replies carry no split (see the module)."""
    recs = split_records(generations)
    if not recs:
        return []
    why = absent_reason(generations)
    if why:
        return [absent_row("think_close_rate", why)]
    t = [r for r in recs.values() if thought(r)]
    rows = []
    for name, pred in (("think_close_rate", closed_on_its_own), ("think_cap_rate", hit_cap)):
        v, se = share(sum(1 for r in t if pred(r)), len(t))
        rows.append(metrics.row(name, v, stderr=se, n=len(t)))
    rows.append(_mean_row("think_tokens_mean", [float(r.get("thinking_tokens") or 0) for r in t]))
    return rows


def absent_row(metric: str, reason: str) -> dict:
    """A figure that cannot be measured on this point: no value, the reason in ``verdict_text`` (the
    row keeps its point's status, so an absent figure does not mark the whole point absent)."""
    r = metrics.row(metric, None, status_reason=reason)
    r.pop("status", None)
    r.pop("status_reason", None)
    r["verdict_text"] = f"absent: {reason}"
    return r


# ------------------------------------------------------------------------------------------ paired

def _pseudo(recs: dict[str, dict], ids, pred) -> list[dict]:
    return [{"item_id": i, "correct": bool(pred(recs[i]))} for i in ids]


def rate_delta(ref: dict[str, dict], rung: dict[str, dict], metric: str, level: float = LEVEL):
    """(PairedDelta, flipped) of a per-item binary on the items both thought on: for the closure rate the
    binary is "closed on its own", for the cap-hit rate "did *not* hit its cap" (so a loss is negative
    in both, as stats' verdicts read it; ``flipped``: the cap's columns are the negation); or the reason
    there is none."""
    ids = sorted(i for i in set(ref) & set(rung) if thought(ref[i]) and thought(rung[i]))
    if not ids:
        return "no item thought in both the rung's reply and the reference's"
    pred = closed_on_its_own if metric == "think_close_rate" else (lambda r: not hit_cap(r))
    pairs = stats.pair_verdicts(_pseudo(ref, ids, pred), _pseudo(rung, ids, pred), kind="binary")
    return stats.paired_delta(pairs, level=level), metric == "think_cap_rate"


def rate_noise(ref: dict[str, dict], twin: dict[str, dict], metric: str, what: str) -> stats.NoiseFloor | None:
    ids = sorted(i for i in set(ref) & set(twin) if thought(ref[i]) and thought(twin[i]))
    if not ids:
        return None
    pred = closed_on_its_own if metric == "think_close_rate" else hit_cap
    return stats.noise_floor(_pseudo(ref, ids, pred), _pseudo(twin, ids, pred), what=what)


def ratio(ref: dict[str, dict], rung: dict[str, dict], level: float = LEVEL, draws: int = BOOTSTRAP_DRAWS,
          seed: int = BOOTSTRAP_SEED) -> dict | str:
    """Mean thinking tokens rung / reference on the items both closed on their own, with its seeded paired
    bootstrap percentile interval; or the reason there is none."""
    import numpy as np

    ids = sorted(i for i in set(ref) & set(rung) if closed_on_its_own(ref[i]) and closed_on_its_own(rung[i]))
    if len(ids) < 2:
        return (f"{'one item' if ids else 'no item'} closed its thinking on its own in both the rung's reply and the "
                "reference's: no length ratio with an interval")
    x = np.array([float(ref[i].get("thinking_tokens") or 0) for i in ids])
    y = np.array([float(rung[i].get("thinking_tokens") or 0) for i in ids])
    if x.sum() <= 0:
        return "the reference's thinking on those items has no tokens"
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ids), size=(draws, len(ids)))
    den = x[idx].sum(axis=1)
    boot = y[idx].sum(axis=1)[den > 0] / den[den > 0]
    a = (1 - level) / 2
    lo, hi = (float(q) for q in np.quantile(boot, [a, 1 - a]))
    return {"value": float(y.sum() / x.sum()), "stderr": float(boot.std(ddof=1)), "lo": lo, "hi": hi, "n": len(ids),
            "interval": f"paired bootstrap percentile ({draws} draws, seed {seed})"}


def flip_causes(ref_verdicts: list[dict], rung_verdicts: list[dict], rung: dict[str, dict]) -> dict:
    """The verdict flips over the common items, split by the rung's cap on each: {n, cap, answer}."""
    a = {str(v["item_id"]): bool(v["correct"]) for v in ref_verdicts}
    b = {str(v["item_id"]): bool(v["correct"]) for v in rung_verdicts}
    common = sorted(set(a) & set(b))
    flipped = [i for i in common if a[i] != b[i]]
    cap = sum(1 for i in flipped if i in rung and capped(rung[i]))
    return {"n": len(common), "cap": cap, "answer": len(flipped) - cap}


def identical_parts(ref: dict[str, dict], rung: dict[str, dict]) -> tuple[int, int, int]:
    """(answers identical, thinking identical, items compared) over the items both split."""
    ids = set(ref) & set(rung)
    ans = sum(1 for i in ids if (ref[i].get("answer") or "") == (rung[i].get("answer") or ""))
    thk = sum(1 for i in ids if (ref[i].get("reasoning") or "") == (rung[i].get("reasoning") or ""))
    return ans, thk, len(ids)


# ------------------------------------------------------------------------------------------ one figure

# What find's and recommend's accepted losses name (docs/find.md): the name a user writes -> (metric,
# the unit its bound is written in, higher is better)
ACCEPT = {"think_close": ("think_close_rate", "pt", True), "think_cap": ("think_cap_rate", "pt", False),
          "think_tokens": ("think_tokens_ratio", "x", False)}


_TOKEN = re.compile(r"^\s*(" + "|".join(ACCEPT) + r")(?::([A-Za-z0-9._-]+))?\s*(<=|>=)\s*([+-]?(?:\d+\.?\d*|\.\d+))"
                    r"\s*([A-Za-z]+)?\s*$")


def bound(p: str, name: str, op: str, value: float, unit: str | None, where: str) -> tuple[str, float, bool]:
    """One accepted thinking loss as written (``think_close>=-2pt``, ``think_cap<=2pt``,
    ``think_tokens<=1.25x``) -> (metric, tolerance in the delta's unit, higher is better); a bound the
    wrong way round or in another unit is a ConfigError naming ``where`` and the token."""
    metric, want, hib = ACCEPT[name]
    if want == "pt":
        if unit not in (None, "pt", "pts", "point", "points"):
            raise ConfigError(f"{where}: {p!r}: a {name} loss is in points (pt), not {unit}")
        if not ((op == ">=" and value < 0) if hib else (op == "<=" and value > 0)):
            raise ConfigError(f"{where}: {p!r}: write {name}{'>=-2pt' if hib else '<=2pt'} (the change against the "
                              f"reference, in points; {'a lower bound below' if hib else 'an upper bound above'} zero)")
        return metric, abs(value), hib
    if unit not in (None, "x") or op != "<=" or not value > 1:
        raise ConfigError(f"{where}: {p!r}: write {name}<=1.25x (the rung's thinking length over the reference's on "
                          "the items both closed, an upper bound above 1)")
    return metric, value - 1, hib  # the figure compared is the ratio − 1 (the reference against itself: 1)


def parse_accept(text, where: str = "recommend.accept") -> list[dict]:
    """``"think_close>=-2pt, think_tokens:arithmetic<=1.25x"`` (or a list of such) -> the accepted thinking
    losses ({text, benchmark (None: every one), metric, tolerance, higher_is_better})."""
    parts = [x.strip() for t in ([text] if isinstance(text, str) else list(text or [])) for x in str(t).split(",")]
    out = []
    for p in (x for x in parts if x):
        m = _TOKEN.match(p)
        if not m:
            raise ConfigError(f"{where}: cannot read {p!r}: write think_close>=-LOSSpt, think_cap<=LOSSpt or "
                              "think_tokens<=RATIOx (optionally NAME:BENCHMARK)")
        metric, tol, hib = bound(p, m.group(1), m.group(3), float(m.group(4)), m.group(5), where)
        out.append({"text": p, "benchmark": m.group(2), "metric": metric, "tolerance": tol, "higher_is_better": hib})
    return out


def accept_check(df, accepts: list[dict]) -> tuple[dict[tuple, str], list[str]]:
    """Which points of a dataset (one card) the accepted thinking losses keep out: (family, rung, kv) ->
    why, for every compared point of a thinking family whose figure is not *shown* within its bound
    (``stats.noninferiority.decide`` on the dataset's paired interval: undetermined keeps it out too), and
    notes (a family whose replies carry no thinking: the bound does not apply to it)."""
    from .stats import noninferiority as ni

    out: dict[tuple, str] = {}
    notes: list[str] = []
    if not accepts:
        return out, notes
    t = df[df["metric"].isin(list(metrics.in_group("thinking"))) & df["subset"].isna()]
    for fam in sorted(set(df["family"].dropna()) - set(t["family"].dropna())):
        notes.append(f"accepted thinking losses not applied to {fam}: its replies carry no thinking")
    for a in accepts:
        rows = t[t["metric"] == a["metric"]]
        if a["benchmark"]:
            rows = rows[rows["benchmark"] == a["benchmark"]]
        for r in rows.to_dict("records"):
            if r.get("is_reference"):
                continue
            key = (r["family"], r["rung"], r["kv"])
            what = f"{a['text']} on {r['benchmark']}"
            vals = (r.get("delta"), r.get("delta_ci_low"), r.get("delta_ci_high"))
            dec = None if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals) else ni.decide(
                *vals, tolerance=a["tolerance"], higher_is_better=a["higher_is_better"], unit=r["unit"],
                stderr=r.get("delta_stderr"), n=r.get("n"))
            if dec is None:
                why = r.get("verdict_text") if isinstance(r.get("verdict_text"), str) else "no paired figure"
                out.setdefault(key, f"{what}: not shown ({why})")
            elif dec.state != ni.NONINFERIOR:
                out.setdefault(key, f"{what}: {dec.text}")
    return out, notes


def paired_figure(metric: str, ref_generations: list[dict] | None, rung_generations: list[dict] | None,
                  level: float = LEVEL) -> dict | str:
    """One paired thinking figure of a rung at ``level`` (find decides on it at its own level):
    {delta, ci_low, ci_high, stderr, n, unit} in the figure's direction (the rates in points, the length
    as ratio − 1), or the reason there is none (a point whose replies carry no thinking: absent)."""
    for who, gens in (("the rung", rung_generations), ("the reference", ref_generations)):
        why = absent_reason(gens)
        if why:
            return f"{who}: {why}"
    ref, rung = split_records(ref_generations), split_records(rung_generations)
    if metric == "think_tokens_ratio":
        r = ratio(ref, rung, level=level)
        if isinstance(r, str):
            return r
        return {"delta": r["value"] - 1, "ci_low": r["lo"] - 1, "ci_high": r["hi"] - 1, "stderr": r["stderr"],
                "n": r["n"], "unit": "1", "value": r["value"]}
    got = rate_delta(ref, rung, metric, level=level)
    if isinstance(got, str):
        return got
    d, negate = got
    est, lo, hi = (-d.estimate, -d.ci_high, -d.ci_low) if negate else (d.estimate, d.ci_low, d.ci_high)
    return {"delta": est, "ci_low": lo, "ci_high": hi, "stderr": d.stderr, "n": d.n, "unit": "%",
            "value": d.rung_pct if not negate else 100 - d.rung_pct}


# ------------------------------------------------------------------------------------------ words

def _pts(x: float) -> str:
    return f"{x:+.1f}".replace("+0.0", "0.0").replace("-0.0", "0.0")


def _rate_columns(metric: str, v: stats.Verdict, negate: bool) -> dict:
    """The dataset's paired columns of a closure / cap-hit rate, in the rate's own direction."""
    d = v.delta
    est, lo, hi = (-d.estimate, -d.ci_high, -d.ci_low) if negate else (d.estimate, d.ci_low, d.ci_high)
    what = "closure rate" if metric == "think_close_rate" else "cap-hit rate"
    corr = f", {v.correction.capitalize()} over {v.n_comparisons}" if v.n_comparisons > 1 else ""
    p = f"= {v.p_adjusted:.2g}" if v.p_adjusted >= 0.001 else "< 0.001"
    text = (f"{v.label}: {what} {_pts(est)} points against the reference on the {d.n} items both thought on "
            f"({100 * d.level:g} % CI {_pts(lo)}…{_pts(hi)}, {d.interval}; {d.test}, adjusted p {p}{corr})")
    if v.noise is not None:
        text += (f"; noise floor: the {what.split()[0]} differs on {100 * v.noise.flip_rate:.1f} % of {v.noise.n} items "
                 f"between {v.noise.what}, against {100 * d.discordance:.1f} % here")
    elif v.verdict != stats.NONE:
        text += "; no noise floor (no noise series beside the reference)"
    return {"delta": est, "delta_stderr": d.stderr, "delta_ci_low": lo, "delta_ci_high": hi, "delta_p": d.p_value,
            "delta_p_adjusted": v.p_adjusted, "delta_mde": v.mde, "verdict": v.label, "verdict_text": text}


def _ratio_columns(r: dict, noise: dict | str | None) -> dict:
    if r["lo"] > 1:
        verdict = stats.LOSS
    elif r["hi"] < 1:
        verdict = stats.GAIN
    else:
        verdict = stats.NONE
    text = (f"thinks {r['value']:.3g}× the reference's tokens on the {r['n']} items both closed on their own "
            f"({100 * LEVEL:g} % CI {r['lo']:.3g}…{r['hi']:.3g}×, {r['interval']}; not corrected for multiplicity)")
    within = False
    if isinstance(noise, dict):
        # within noise: the reference against itself moves its length at least as far from 1× (log scale)
        within = (verdict != stats.NONE and noise["value"] > 0 and r["value"] > 0
                  and abs(math.log(noise["value"])) >= abs(math.log(r["value"])))
        text += f"; noise floor: the reference generated again thinks {noise['value']:.3g}× on {noise['n']} items"
    return {"delta": r["value"] - 1, "delta_stderr": r["stderr"], "delta_ci_low": r["lo"] - 1,
            "delta_ci_high": r["hi"] - 1, "delta_p": None, "delta_p_adjusted": None, "delta_mde": None,
            "verdict": f"{verdict} within noise" if within else verdict, "verdict_text": text}


def _flip_columns(metric: str, k: int, n: int, noise: dict | None) -> dict:
    lo, hi = share_interval(k, n)
    cause = "at its thinking cap (or its thinking never closed)" if metric == "think_flip_cap_rate" else "answering differently (not at its cap)"
    text = (f"{k} of {n} items flipped with the rung {cause} ({100 * LEVEL:g} % Clopper–Pearson "
            f"{100 * lo:.1f}…{100 * hi:.1f} %)")
    if noise is not None and noise["n"]:
        kn = noise["cap" if metric == "think_flip_cap_rate" else "answer"]
        text += f"; noise floor: the reference generated again flips {kn} of {noise['n']} this way"
    return {"delta": 100 * k / n, "delta_stderr": None, "delta_ci_low": 100 * lo, "delta_ci_high": 100 * hi,
            "delta_p": None, "delta_p_adjusted": None, "delta_mde": None, "verdict": None, "verdict_text": text}


# ------------------------------------------------------------------------------------------ the pass

def rows(points: list, reference_of: Callable, with_base: Callable) -> list[dict]:
    """Every thinking row of the dataset (the aggregate's ``points``: its ``Point`` objects;
    ``reference_of(p, by_key)`` the point ``p`` is compared with; ``with_base(base, row)`` a metric row as
    a dataset row). Per point its own figures; per compared point the paired ones, the closure and
    cap-hit rates' verdicts Holm-corrected per (card, family, benchmark)."""
    tasks = [p for p in points if not getattr(p, "fidelity", False) and p.verdicts() is not None]
    by_key = {(*p.key, p.benchmark): p for p in tasks if p.series == "points"}
    recs_of: dict[int, dict] = {}

    def recs(p):
        if id(p) not in recs_of:
            recs_of[id(p)] = split_records(p.generations())
        return recs_of[id(p)]

    twins = {(*p.key, p.benchmark): p for p in tasks if p.series == "noise"}
    out: list[dict] = []
    pending: dict[tuple, dict] = {}  # (card, family, benchmark) -> row id -> (row, delta, negate)
    row_of: dict[int, tuple] = {}
    for key, p in by_key.items():
        if not recs(p):
            continue
        base = p.base_row()
        mine = {r["metric"]: _fix(with_base(base, r), r) for r in point_rows(p.generations())}
        out += list(mine.values())
        ref = reference_of(p, by_key)
        if ref is None or not recs(ref):
            continue
        rr, pr = recs(ref), recs(p)
        twin = twins.get((*ref.key, ref.benchmark))
        tw = recs(twin) if twin is not None else {}
        what = f"{ref.point.get('rung')} and itself generated again at another batch setting"
        fkey = (base["card"], base["family"], p.benchmark)
        for metric in PAIRED_RATES:
            got = rate_delta(rr, pr, metric)
            row = mine.get(metric)
            if row is None or row.get("value") is None:
                continue
            if isinstance(got, str):
                row["verdict_text"] = f"no paired comparison: {got}"
                continue
            pending.setdefault(fkey, {})[id(row)] = got[0]
            row_of[id(row)] = (row, got[1], rate_noise(rr, tw, metric, what) if tw else None, metric)
        r = ratio(rr, pr)
        if isinstance(r, str):
            gone = absent_row("think_tokens_ratio", r)
            out.append(_fix(with_base(base, gone), gone))
        else:
            nr = ratio(rr, tw) if tw else None
            row = with_base(base, metrics.row("think_tokens_ratio", r["value"], stderr=r["stderr"], n=r["n"]))
            row.update(_ratio_columns(r, nr))
            out.append(row)
        rv, pv = ref.verdicts() or [], p.verdicts() or []
        fc = flip_causes(rv, pv, pr)
        if fc["n"]:
            nf = flip_causes(rv, twin.verdicts() or [], tw) if twin is not None else None
            for metric in FLIP_CAUSES:
                k = fc["cap" if metric == "think_flip_cap_rate" else "answer"]
                v, se = share(k, fc["n"])
                row = with_base(base, metrics.row(metric, v, stderr=se, n=fc["n"]))
                row.update(_flip_columns(metric, k, fc["n"], nf))
                out.append(row)
        ans, thk, n = identical_parts(rr, pr)
        if n:
            for metric, k in (("answer_identical_to_reference", ans), ("thinking_identical_to_reference", thk)):
                v, se = share(k, n)
                out.append(with_base(base, metrics.row(metric, v, stderr=se, n=n)))
    for fkey, group in pending.items():
        noise = {k: row_of[k][2] for k in group if row_of[k][2] is not None}
        verdicts = stats.ladder(group, correction=CORRECTION, alpha=ALPHA, power_target=POWER, noise=noise)
        for k, v in verdicts.items():
            row, negate, _, metric = row_of[k]
            row.update(_rate_columns(metric, v, negate))
    return out


def _fix(row: dict, r: dict) -> dict:
    """A dataset row of an absent figure keeps its reason (``with_base`` copies the metric's fields only)."""
    if r.get("verdict_text"):
        row["verdict_text"] = r["verdict_text"]
    return row
