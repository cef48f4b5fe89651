"""The dataset's paired columns: every paired figure of a rung against its reference, with its interval,
its exact test corrected over the ladder, the smallest loss the run could detect, the noise floor and
the verdict in words (docs/statistics.md). Called by the aggregate, the one place points are compared,
on the rows it assembles; the reference of a point is the aggregate's ``reference_of``.

What is compared (the metric registry's ``paired``):

- **items** (BFCL accuracy, pass@1, RULER's score and score_avg): the figure's row selects its items
  from the point's ``verdicts.jsonl`` — the row's subset (a category, a task) and context (RULER's
  length) — and the two points' verdicts are paired on the items both have (``stats.paired_delta``).
  How the figure weighs its items is *found*, not assumed: the benchmark's declared headline weights
  (``Benchmark.item_weights``: BFCL's mean of non-live and live), a plain mean, or equal weight per
  subset (RULER's average over tasks), whichever reproduces both points' own figures from their own
  verdicts. A figure none of them reproduces (BFCL's summary subsets ``simple``, ``non_live``, ...: means
  of categories whose items carry the category's name) gets no paired columns; its verdict text says
  why.
- **tokens** (``ln_ppl_ratio``, ``kld_mean``, ``same_top_token``): the perplexity pass measures rung
  and reference on the same tokens, so the row's figure is the paired per-token difference already;
  ``delta`` is its distance from what the reference scores against itself (0 for a divergence or a
  log-ratio, 100 % for an agreement share), with the row's chunk-level interval (the chunks are the
  independent units; a divergence's widened for its skew) and the t test over its chunks
  (``stats.from_tokens``; docs/statistics.md, "Per-token figures").

The correction for the ladder (Holm, family-wise error rate at α = 0.05), one family of comparisons
per card and model family for each kind of question:

- *headline*: every rung's (and KV type's) headline figures of the task benchmarks — the whole-set
  row of each ``headline_for`` metric, one per context where it has several (RULER's average per
  length). ``quantladder plan`` plans at α/m over the same m;
- *detail*: the per-subset figures (a BFCL category, a RULER task at a length), one family per
  benchmark;
- *tokens*: the per-token figures of the perplexity passes.

The noise floor of a (family, benchmark): the reference rung generated again at another batch setting
(the ``noise`` series) against the reference itself; a significant item verdict whose flip rate is
not above it reads "loss within noise".

Besides the columns, one ``items_needed`` row per compared (point, task benchmark): the items a run
needs to detect a loss of ``DETECT_POINTS`` points at 80 % power from that point's measured flip rate
(what ``quantladder plan --detect 2`` prints per rung).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict

from . import benchmarks, metrics, stats
from .errors import ConfigError
from .flips import flips
from .metrics import TASK, Metric

log = logging.getLogger(__name__)

ALPHA = 0.05
POWER = 0.8
CORRECTION = "holm"
DETECT_POINTS = 2.0  # the loss the dataset's items_needed rows plan for (the question)
COLUMNS = ("delta", "delta_stderr", "delta_ci_low", "delta_ci_high", "delta_p", "delta_p_adjusted", "delta_mde",
           "verdict", "verdict_text")
HEADLINE, DETAIL, TOKENS = "headline", "detail", "tokens"
REL_TOL = 1e-6  # a weighting reproduces a figure when it agrees to this relative tolerance

metrics.declare(
    Metric("items_needed", "items",
           f"items a paired run needs to detect a loss of {DETECT_POINTS:g} points at {100 * POWER:g} % power by "
           "McNemar's exact test at Holm's strictest level α/m (m: the family's headline comparisons on the card), "
           "from this point's measured flip rate against its reference (Connor's formula above 10,000 items); "
           "n: the items measured", (TASK,), group="plan"),
)


# ------------------------------------------------------------------------------------------ which rows

def comparison_family(benchmark: str, metric: str, subset) -> str | None:
    """The correction family a paired row belongs to (None: the metric is not paired)."""
    m = metrics.registry().get(metric)
    if m is None or m.paired is None:
        return None
    if m.paired == "tokens":
        return TOKENS
    whole = (m.whole == "null" and subset is None) or m.whole == "only"
    return HEADLINE if whole and benchmark in m.headline_for else DETAIL


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def headline_comparisons(df) -> dict:
    """Per (card, family): how many headline comparisons its verdicts were corrected over, read from a
    dataset (DataFrame) — the m that ``quantladder plan`` plans at."""
    if "delta_p" not in df.columns:
        return {}
    d = df[df["delta_p"].notna()]
    if d.empty:
        return {}
    keep = [comparison_family(b, m, None if _nan(s) else s) == HEADLINE
            for b, m, s in zip(d["benchmark"], d["metric"], d["subset"])]
    return {k: int(v) for k, v in d[keep].groupby(["card", "family"]).size().items()}


# ------------------------------------------------------------------------------------------ items

def _selection(verdicts: list[dict], subset, n_ctx) -> list[dict]:
    out = []
    for v in verdicts:
        if subset is not None and v.get("subset") != subset:
            continue
        if n_ctx is not None and v.get("n_ctx") is not None and int(v["n_ctx"]) != int(n_ctx):
            continue
        out.append(v)
    return out


def _x(v: dict, kind: str) -> float:
    return float(v["score"]) if kind == "score" else (1.0 if v.get("correct") else 0.0)


def _mean(verdicts: list[dict], kind: str, weights: dict | None) -> float | None:
    if not verdicts:
        return None
    if weights is None:
        return 100.0 * sum(_x(v, kind) for v in verdicts) / len(verdicts)
    if any(str(v["item_id"]) not in weights for v in verdicts):
        return None
    w = [weights[str(v["item_id"])] for v in verdicts]
    if sum(w) <= 0:
        return None
    return 100.0 * sum(wi * _x(v, kind) for wi, v in zip(w, verdicts)) / sum(w)


def _weightings(bench, verdicts: list[dict], subset) -> list[tuple[str, object]]:
    """The ways a figure can weigh its items, most specific first: (name, verdicts -> weights | None)."""
    out = []
    if subset is None and bench is not None:
        out.append(("the benchmark's declared weights", lambda vs: bench.item_weights(vs) or "none"))
    per_subset = ("equal weight per subset", lambda vs: stats.equal_subset_weights(vs))
    plain = ("plain mean", lambda vs: None)
    # a mean over several subsets may weigh each subset alike (RULER's average over tasks): tried first
    several = len({v.get("subset") for v in verdicts}) > 1
    return out + ([per_subset, plain] if several else [plain])


def _same(a: float | None, b) -> bool:
    return a is not None and not _nan(b) and abs(a - float(b)) <= REL_TOL * max(1.0, abs(float(b)))


def _kind(ref: list[dict], rung: list[dict]) -> str:
    both = ref + rung
    return "score" if both and all(v.get("score") is not None for v in both) else "binary"


def item_delta(bench, ref_verdicts: list[dict], rung_verdicts: list[dict], ref_row: dict, row: dict,
               level: float = 1 - ALPHA):
    """The PairedDelta of one item-paired row (its interval at ``level``), or the reason there is none."""
    subset, n_ctx = row.get("subset"), row.get("n_ctx")
    a = _selection(ref_verdicts, subset, n_ctx)
    b = _selection(rung_verdicts, subset, n_ctx)
    if not a or not b:
        return (f"the figure is a summary of other subsets ({subset!r} is no item's subset), compared through them"
                if subset is not None and not b else "no per-item verdicts behind this figure")
    kind = _kind(a, b)
    for name, weigh in _weightings(bench, a, subset):
        wa, wb = weigh(a), weigh(b)
        if isinstance(wa, str) or isinstance(wb, str):
            continue
        if not (_same(_mean(a, kind, wa), ref_row.get("value")) and _same(_mean(b, kind, wb), row.get("value"))):
            continue
        pairs = stats.pair_verdicts(a, b, kind=kind)
        if pairs.n == 0:
            return "the two points have no item in common"
        if wa is None:
            return stats.paired_delta(pairs, level=level)
        common = set(pairs.item_ids)
        w = weigh([v for v in a if str(v["item_id"]) in common])
        if isinstance(w, str) or w is None:
            return f"the {name} are not defined on the items both points have"
        return stats.paired_delta(pairs, weights=w, stratify=True, level=level)
    return "no weighting of the items reproduces both points' figures from their verdicts"


# ------------------------------------------------------------------------------------------ tokens

def _identity(m: Metric) -> float:
    """What the reference scores against itself: 100 % for an agreement share, 0 for a divergence or log-ratio."""
    return 100.0 if m.unit == "%" and m.higher_is_better else 0.0


def token_delta(row: dict, level: float = 1 - ALPHA) -> stats.FigureDelta | str:
    """The row's paired delta at ``level``: from its chunk-level record where the pass wrote one (the
    interval the tokens support), else from its standard error (a row from before the record)."""
    m = metrics.get(row["metric"])
    if _nan(row.get("stderr")):
        return ("the figure carries no standard error" + (
            " (too few chunks: a chunk's tokens are not independent, so one chunk bounds nothing, and a share "
            "needs 3: docs/statistics.md, \"Per-token figures\")" if m.paired == "tokens" else ""))
    if row.get("interval"):
        return stats.from_tokens(stats.TokenMean.from_dict(row["interval"]).at(level), shift=_identity(m),
                                 unit=m.unit, higher_is_better=bool(m.higher_is_better))
    return stats.figure_delta(float(row["value"]) - _identity(m), float(row["stderr"]), int(row.get("n") or 0),
                              unit=m.unit, higher_is_better=bool(m.higher_is_better), level=level)


# ------------------------------------------------------------------------------------------ noise floor

def _n_parallel(p) -> int | None:
    n = (p.doc.get("generation") or {}).get("n_parallel")
    return int(n) if n is not None else None


def noise_floors(points: list) -> dict:
    """(card, family, benchmark) -> NoiseFloor: the noise series' run of each reference point against
    that point (the same rung, items and card, generated at another batch setting)."""
    by_key = {(*p.key, p.benchmark): p for p in points if p.series == "points"}
    out = {}
    for p in points:
        if p.series != "noise" or p.verdicts() is None:
            continue
        twin = by_key.get((*p.key, p.benchmark))
        if twin is None or twin.verdicts() is None:
            continue
        card, fam, rung, _ = p.key
        a, b = _n_parallel(twin), _n_parallel(p)
        setting = f" (n_parallel {b}, against {a})" if a is not None and b is not None else ""
        out[(card, fam, p.benchmark)] = stats.noise_floor(
            twin.verdicts(), p.verdicts(), generations_a=twin.generations(), generations_b=p.generations(),
            what=f"{rung} generated again at another batch setting{setting}")
    return out


# ------------------------------------------------------------------------------------------ the pass

def _bench(name: str):
    try:
        return benchmarks.get(name)()
    except ConfigError:  # not a registered task benchmark
        return None


def fill(rows: list[dict], points: list, reference_of) -> list[dict]:
    """Fill the paired columns of ``rows`` (the series-``points`` figure rows, in place) and return the
    ``items_needed`` rows to add."""
    pts = {(*p.key, p.benchmark): p for p in points if p.series == "points"}
    value_of = {}
    for r in rows:
        value_of[(r["card"], r["family"], r["rung"], r["kv"], r["benchmark"], r["metric"], r.get("subset"),
                  r.get("n_ctx"))] = r
    noise = noise_floors(points)
    benches: dict[str, object] = {}
    read: dict[int, list | None] = {}

    def verdicts_of(q):  # each point's verdicts.jsonl read once, however many of its rows are compared
        if id(q) not in read:
            read[id(q)] = q.verdicts()
        return read[id(q)]

    deltas: dict[tuple, dict] = defaultdict(dict)  # (card, family, family kind [, benchmark]) -> row id -> delta
    row_of: dict[int, dict] = {}
    noise_of: dict[int, stats.NoiseFloor] = {}
    for r in rows:
        if _nan(r.get("value")) or r.get("metric") in (None, "status"):
            continue
        fam_kind = comparison_family(r["benchmark"], r["metric"], r.get("subset"))
        if fam_kind is None:
            continue
        p = pts.get((r["card"], r["family"], r["rung"], r["kv"], r["benchmark"]))
        if p is None:
            continue
        ref = reference_of(p, pts)
        if ref is None:
            if not p.point.get("is_reference"):
                r["verdict_text"] = ("no paired comparison: the family's reference rung was not measured with this "
                                     "KV type and benchmark on this card")
            continue
        if fam_kind == TOKENS:
            d = token_delta(r)
        else:
            ref_row = value_of.get((ref.point.get("card"), ref.point.get("family"), ref.point.get("rung"),
                                    ref.point.get("kv"), r["benchmark"], r["metric"], r.get("subset"), r.get("n_ctx")))
            rv, pv = verdicts_of(ref), verdicts_of(p)
            if ref_row is None or _nan(ref_row.get("value")):
                d = "the reference point has no such figure"
            elif rv is None or pv is None:
                d = "no per-item verdicts beside one of the two points"
            else:
                if r["benchmark"] not in benches:
                    benches[r["benchmark"]] = _bench(r["benchmark"])
                d = item_delta(benches[r["benchmark"]], rv, pv, ref_row, r)
        if isinstance(d, str):
            r["verdict_text"] = f"no paired comparison: {d}"
            continue
        fkey = (r["card"], r["family"], fam_kind) + ((r["benchmark"],) if fam_kind == DETAIL else ())
        deltas[fkey][id(r)] = d
        row_of[id(r)] = r
        if fam_kind != TOKENS:
            nf = noise.get((r["card"], r["family"], r["benchmark"]))
            if nf is not None:
                noise_of[id(r)] = nf
    for fkey, group in deltas.items():
        if fkey[2] == TOKENS:
            _fill_tokens(group, row_of)
        else:
            verdicts = stats.ladder(group, correction=CORRECTION, alpha=ALPHA, power_target=POWER,
                                    noise={k: noise_of[k] for k in group if k in noise_of})
            for k, v in verdicts.items():
                row_of[k].update(v.columns())
    m_headline = {fk[:2]: len(g) for fk, g in deltas.items() if fk[2] == HEADLINE}
    return _items_needed_rows(rows, points, pts, reference_of, m_headline)


def _fill_tokens(group: dict, row_of: dict) -> None:
    keys = list(group)
    adj = stats.adjust([group[k].p_value if math.isfinite(group[k].p_value) else 1.0 for k in keys], CORRECTION)
    for k, p in zip(keys, adj):
        v = stats.figure_verdict(group[k], p_adjusted=float(p), correction=CORRECTION, n_comparisons=len(keys),
                                 alpha=ALPHA, power_target=POWER)
        row_of[k].update(v.columns())


def _items_needed_rows(rows, points, pts, reference_of, m_headline: dict) -> list[dict]:
    base_of = {}
    for r in rows:
        base_of.setdefault((r["card"], r["family"], r["rung"], r["kv"], r["benchmark"]), r)
    out = []
    for key, p in sorted(pts.items(), key=lambda kv_: tuple(str(x) for x in kv_[0])):
        m = m_headline.get((p.point.get("card"), p.point.get("family")))
        if not m or p.verdicts() is None:
            continue
        ref = reference_of(p, pts)
        if ref is None or ref.verdicts() is None:
            continue
        f = flips(ref.verdicts(), p.verdicts())
        if not f["n_items"] or key not in base_of:
            continue
        psi = (f["right_to_wrong"] + f["wrong_to_right"]) / f["n_items"]
        need, _ = stats.items_needed(DETECT_POINTS / 100, psi, alpha=stats.planning_alpha(ALPHA, m, CORRECTION),
                                     power=POWER)
        row = {c: base_of[key].get(c) for c in base_of[key]}
        row.update(metrics.row("items_needed", need, n=f["n_items"]))
        for c in COLUMNS:
            row[c] = None
        row["status"], row["status_reason"] = base_of[key].get("status"), base_of[key].get("status_reason")
        out.append(row)
    return out
