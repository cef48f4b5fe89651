"""Which rung should I run on this card? An integer program over the measured points (pulp + CBC).

Mode 1, ``recommend``: given a memory budget and the context length actually used, choose the
(family, rung, KV type) that maximises the weighted quality score subject to

    predicted memory = weights + KV(context) + compute buffers  <=  budget
    generation speed (tg tokens/s)                             >=  min_tg      (optional)
    KV type in the allowed set                                                  (optional)

and report the runners-up and which constraint binds (memory, speed or KV type: the one whose
removal would buy a better score). Every point of the dataset is a candidate, a third-party file
(``families.<f>.prebuilt``) at its own measured size like a rung made here, with its ``source``
("made here" / "uploader", from the dataset's ``provenance``). The speed is each point's measured
generation speed at the context and concurrency asked (``dataset_view.speed_at``: llama-bench's tgN
is one sequence; a figure measured at a shorter context is used as the upper bound it is, and said
so), never its size: a smaller rung is not always faster (IQ against K types on a CPU). Every
comparison of two points the answer prints states their size gap (bits per weight and bytes). Mode 2, ``pack``: place several families, each at one (rung, KV type), onto a set of cards
so that every card's memory holds, maximising the summed score (an assignment problem: "same VRAM,
a big model in Q4 or a small one in Q8?" over several cards at once).

**A loss is no loss only where the run shows it** (``stats.noninferiority``: "no loss detectable" at
8 items is absence of evidence, not evidence of absence). Each score figure carries the dataset's
paired interval against the family's reference rung (quantladder.deltas). A figure ranks with its
reference's figure (value − delta) only when it is *shown* within the tolerance (``recommend.tolerance``
per metric; 1 point of a % by default): the bad-side bound of its 95 % interval is within it, and the
fixed-sequence walk down the family's ladder (largest rung first) reached it. Any other figure ranks
by its measured value, or, for a cautious pick, by its interval's lower bound (reference + ci_low),
and never above its reference's (a gain not shown is not credited). When no rung of a family has a
task figure the run can tell from its reference or settle against the tolerance, its task scores
cannot separate its rungs: within the family they rank by what the run can tell, the mean KLD on the
corpora named (each shown within its tolerance ranks with the reference), or by bits per weight where
no KLD is measured; no rung is credited above one it ranks below (quantladder.rank). Ties go to the
smaller memory. The answer's ``why`` cites the rule that decided with its numbers, and names the
larger points the choice was preferred over.

Figures come from the dataset only. KV bytes per token are ``kv_bytes_predicted / n_ctx`` of the
point (the cache grows linearly with the context); compute buffers are taken at the measured
context that covers the requested one (or ``predicted_total_bytes - weights - KV`` there).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field

import pandas as pd
import pulp

from . import dataset_view as dv
from . import metrics, thinking
from .errors import QuantladderError
from .rank import KLD, rank, why_chosen
from .sizes import parse_bytes, parse_ctx

EPS_TIE = 1e-6  # tie-break towards less memory, far below any score difference that matters
MEMORY_FIGURES = ("weights_bytes", "kv_bytes_predicted", "compute_buffer_bytes", "predicted_total_bytes",
                  "n_ctx_train")  # what the memory prediction reads


def _binary(prob: pulp.LpProblem, name: str):
    """A binary variable attached to ``prob`` (PuLP >= 3.3 spells it add_variable)."""
    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, cat="Binary")
    return pulp.LpVariable(name, cat="Binary")


def _solve(prob: pulp.LpProblem) -> str:
    """Solve with the CBC that ships inside PuLP (no system solver needed); the status name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # PuLP 3.3 nudges towards a separate cbc install
        solver = pulp.PULP_CBC_CMD(msg=False)
        return pulp.LpStatus[prob.solve(solver)]


class RecommendError(QuantladderError):
    """A request the dataset cannot answer (infeasible, or missing figures); the message says why."""


# ---------------------------------------------------------------- parsing

def _pairs(items: list[str] | dict | None, what: str, example: str, positive: bool) -> dict[str, float]:
    """['a=1', 'b=2,c=0.5'] (or a mapping) → {'a': 1.0, ...}; each value ≥ 0, or > 0 with ``positive``."""
    if not items:
        return {}
    parts = [] if isinstance(items, dict) else [p for it in items for p in str(it).split(",") if p.strip()]
    pairs = list(items.items()) if isinstance(items, dict) else [p.split("=", 1) if "=" in p else (p, None)
                                                                  for p in parts]
    out = {}
    for k, v in pairs:
        if v is None:
            raise RecommendError(f"{what} {k!r}: write {example}")
        try:
            out[str(k).strip()] = x = float(v)
        except ValueError:
            raise RecommendError(f"{what} {k}={v}: {v!r} is not a number") from None
        if x < 0 or (positive and x == 0):
            raise RecommendError(f"{what} {k}={v}: {what}s must be {'>' if positive else '>='} 0")
    return out


def parse_weights(items: list[str] | dict | None) -> dict[str, float]:
    """['bfcl=1', 'ruler=2', 'humaneval:pass_at_1=1'] → {'bfcl': 1.0, ...}."""
    return _pairs(items, "weight", "benchmark=weight, e.g. bfcl=1", positive=False)


def parse_tolerance(items: list[str] | dict | None) -> dict[str, float]:
    """['pass_at_1=2', 'kld_mean=0.02'] → per metric, in its unit (stats.noninferiority)."""
    return _pairs(items, "tolerance", "metric=tolerance in its unit, e.g. pass_at_1=1 or kld_mean=0.01",
                  positive=True)


def parse_cards(items: list[str] | str) -> list[tuple[str, int]]:
    """'L4=24GiB,H200=141GiB' or ['24GiB', '24GiB'] → [(name, bytes), ...] (unnamed cards are card1, ...)."""
    parts = [p for it in ([items] if isinstance(items, str) else items) for p in str(it).split(",") if p.strip()]
    out = []
    for i, p in enumerate(parts, 1):
        name, _, size = p.rpartition("=")
        name = name.strip() or f"card{i}"
        out.append((name, parse_bytes(size, f"card {name}")))
    if not out:
        raise RecommendError("pack needs at least one card, e.g. --cards L4=24GiB,L4b=24GiB")
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise RecommendError(f"card names must differ: {names}")
    return out


# ---------------------------------------------------------------- candidates

@dataclass
class Candidate:
    card: str
    family: str
    rung: str
    kv: str
    bits_per_weight: float | None
    weights_bytes: float
    kv_bytes: float
    buffer_bytes: float
    memory_bytes: float
    tg_tokens_per_s: float | None
    tg_stderr: float | None
    score: float  # weighted quality, %
    score_stderr: float | None
    rank_score: float = 0.0  # the score the choice ranks by (see the module docstring), %
    scores: dict = field(default_factory=dict)  # benchmark -> {metric, value, stderr, unit, n_ctx, status, decision}
    caveats: list = field(default_factory=list)
    claimed: list = field(default_factory=list)  # figures ranked with their reference's: shown within the tolerance
    is_reference: bool = False
    kld: dict | None = None  # the point's mean KLD per corpus and its decision, where the family ranks by it
    ranked_by: str = "task scores"  # or "KLD" / "bits per weight" where the task scores cannot separate the rungs
    file_bytes: float | None = None
    source: str = "made here"  # or "uploader": a third-party file (dataset_view.source_of)
    provenance: str | None = None  # the dataset's words for where the file comes from
    speed: dict = field(default_factory=dict)  # dataset_view.speed_at: its n_ctx, concurrency, note or reason

    @property
    def name(self) -> str:
        return f"{self.family}/{self.rung}/{self.kv}"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["name"] = self.name
        return d


def _nn(x):
    """None for a missing figure (NaN from pandas), else the value."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _memory(fig: dict, ctx: int, file_bytes) -> tuple[float, float, float, list[str]] | str:
    """(weights, KV at ctx, buffers, notes) or the reason it cannot be predicted.

    ``fig`` maps (benchmark, metric) to the point's rows that carry a value.
    """
    notes = []
    w = fig.get(("memory", "weights_bytes"), [])
    if w:
        weights = float(w[0]["value"])
    elif file_bytes is not None:
        weights = float(file_bytes)
        notes.append("weights taken as the GGUF file size (no weights_bytes row)")
    else:
        return "no weights_bytes row and no file_bytes"
    kv = [r for r in fig.get(("memory", "kv_bytes_predicted"), []) if r["n_ctx"] and r["n_ctx"] > 0]
    if not kv:
        return "no kv_bytes_predicted row (memory measure missing for this point)"
    r = max(kv, key=lambda r: r["n_ctx"])
    kv_per_token = float(r["value"]) / float(r["n_ctx"])
    kv_bytes = kv_per_token * ctx
    buf = dv.pick_ctx(fig.get(("memory", "compute_buffer_bytes"), []), ctx)
    if buf is not None:
        buffers = float(buf["value"])
        if buf["n_ctx"] is not None and buf["n_ctx"] < ctx:
            notes.append(f"compute buffers measured at n_ctx {int(buf['n_ctx'])}, below the requested context")
    else:
        tot = dv.pick_ctx(fig.get(("memory", "predicted_total_bytes"), []), ctx)
        if tot is not None and tot["n_ctx"] is not None:
            buffers = max(0.0, float(tot["value"]) - weights - kv_per_token * float(tot["n_ctx"]))
        else:
            buffers = 0.0
            notes.append("no compute_buffer_bytes row: buffers counted as 0")
    return weights, kv_bytes, buffers, notes


def default_weights(df: pd.DataFrame) -> tuple[dict[str, float], list[str]]:
    """Equal weights over the task benchmarks; perplexity agreement only when nothing else is measured."""
    notes = []
    tasks = [b for b in dv.task_benchmarks(df) if not dv.relative_score(b) and dv.score_metric(df, b)]
    if tasks:
        return {b: 1.0 for b in tasks}, notes
    rel = [b for b in dv.task_benchmarks(df) if dv.relative_score(b) and dv.score_metric(df, b)]
    if rel:
        notes.append("only perplexity is measured: the score is top-token agreement with each family's own "
                     "reference, which ranks rungs within a family but not families against each other")
        return {b: 1.0 for b in rel}, notes
    raise RecommendError("the dataset holds no quality figure to score by (no task benchmark and no perplexity rows)")


def _score_spec(df: pd.DataFrame, weights: dict[str, float]) -> dict[str, str]:
    """benchmark → metric used as its score."""
    spec = {}
    known = set(df["benchmark"].dropna())
    for key in weights:
        bench, _, metric = key.partition(":")
        if bench not in known:
            raise RecommendError(f"weight {key!r}: benchmark {bench!r} is not in the dataset (it holds {sorted(known)})")
        metric = metric or dv.score_metric(df, bench)
        if not metric:
            raise RecommendError(f"weight {key!r}: benchmark {bench!r} has no % figure where higher is better; "
                                 f"name one as {bench}:<metric>")
        rows = df[(df["benchmark"] == bench) & (df["metric"] == metric)]
        if rows.empty:
            raise RecommendError(f"weight {key!r}: no rows for metric {metric!r} of {bench!r}")
        if not (rows["higher_is_better"] == True).any() or not (rows["unit"] == "%").all():  # noqa: E712
            raise RecommendError(f"weight {key!r}: {bench}/{metric} must be a % where higher is better to be weighted")
        spec[key] = (bench, metric)
    return spec


def candidates(df: pd.DataFrame, ctx: int, weights: dict[str, float] | None = None,
               card: str | None = None, *, tolerance: dict[str, float] | None = None, cautious: bool = False,
               corpora: list[str] | None = None, parallel: int = 1,
               accept: list[str] | str | None = None) -> tuple[list[Candidate], list[dict], dict[str, float], list[str]]:
    """Every point with the figures needed, ranked (module docstring): (candidates, excluded with
    reasons, weights used, notes). ``tolerance``: per metric name, in its unit (default
    ``stats.noninferiority.DEFAULT_TOLERANCE``); ``cautious``: rank a figure not shown within it by its
    interval's lower bound; ``corpora``: the perplexity corpora whose KLD counts (None: every one);
    ``parallel``: the sequences generated at a time whose speed counts (``dataset_view.speed_at``);
    ``accept``: the thinking losses accepted (``think_close>=-2pt``, ``think_tokens<=1.25x``: a point of a
    thinking family not shown within one is excluded, with the decision; quantladder.thinking)."""
    cards = sorted(df["card"].dropna().unique())
    if card is None:
        if len(cards) > 1:
            raise RecommendError(f"the dataset holds several cards {cards}: name one (figures differ between cards)")
        card = cards[0] if cards else None
    df = df[(df["card"] == card) & ~df["metric"].isin(metrics.per_item_metrics())]  # per-item rows: not figures
    if df.empty:
        raise RecommendError(f"no rows for card {card!r} in the dataset (cards: {cards})")
    notes: list[str] = []
    if not weights:
        weights, wnotes = default_weights(df)
        notes += wnotes
    weights = {k: v for k, v in weights.items() if v > 0}
    if not weights:
        raise RecommendError("all task weights are 0: give at least one benchmark a positive weight")
    spec = _score_spec(df, weights)
    wsum = sum(weights.values())
    # Plain records grouped once: a dataset of hundreds of points answers in well under a second.
    cols = dv.POINT + ["benchmark", "metric", "subset", "n_ctx", "value", "stderr", "n", "unit", "status",
                       "status_reason", "bits_per_weight", "file_bytes", "is_reference", "delta", "delta_stderr",
                       "delta_ci_low", "delta_ci_high", "verdict", "verdict_text", "provenance", "n_parallel"]
    # Only the rows an answer reads (scores, memory, speed, and any row that marks a benchmark bad): a
    # dataset of hundreds of points holds hundreds of thousands of rows.
    used = {m for _, m in spec.values()} | set(MEMORY_FIGURES) | {"tg_tokens_per_s", KLD[1]}
    sel = df["metric"].isin(used) | df["status"].isin(dv.BAD_STATUSES)
    points: dict[tuple, dict] = {}
    for r in df.loc[sel, cols].to_dict("records"):
        for c in ("n_ctx", "value", "stderr", "n", "bits_per_weight", "file_bytes", "delta", "delta_stderr",
                  "delta_ci_low", "delta_ci_high", "verdict", "verdict_text", "provenance", "n_parallel"):
            r[c] = _nn(r[c])
        if r["n_ctx"] is not None:
            r["n_ctx"] = int(r["n_ctx"])
        pt = points.setdefault((r["family"], r["rung"], r["kv"]), {"fig": {}, "bench": {}, "bpw": None, "fb": None,
                                                                  "ref": False, "prov": None})
        pt["prov"] = r["provenance"] or pt["prov"]
        pt["ref"] = pt["ref"] or bool(_nn(r["is_reference"]))
        pt["bench"].setdefault(r["benchmark"], []).append(r)
        if r["value"] is not None and r["metric"] != "status":
            pt["fig"].setdefault((r["benchmark"], r["metric"]), []).append(r)
        pt["bpw"] = r["bits_per_weight"] if r["bits_per_weight"] is not None else pt["bpw"]
        pt["fb"] = r["file_bytes"] if r["file_bytes"] is not None else pt["fb"]
    out, excluded = [], []
    for (family, rung, kv), pt in sorted(points.items(), key=lambda kv_: tuple(str(x) for x in kv_[0])):
        fig = pt["fig"]
        reason = None
        mem = _memory(fig, ctx, pt["fb"])
        if isinstance(mem, str):
            reason = mem
        trained = fig.get(("memory", "n_ctx_train"), [])
        if not reason and trained and ctx > max(r["value"] for r in trained):
            reason = (f"the model was trained for {int(max(r['value'] for r in trained))} tokens of context, "
                      f"fewer than {ctx}")
        scores, caveats = {}, []
        total, var, var_known = 0.0, 0.0, True
        for wkey, (bench, metric) in spec.items():
            if reason:
                break
            bad = [r for r in pt["bench"].get(bench, []) if r["status"] in dv.BAD_STATUSES]
            if bad:
                reason = f"{bench} is {bad[0]['status']}: {bad[0]['status_reason'] or 'no reason given'}"
                break
            mrows = dv.whole(fig.get((bench, metric), []))
            r = dv.pick_ctx(mrows, ctx)
            if r is None:
                reason = f"no {bench}/{metric} figure"
                break
            st = r["status"] or "ok"
            if st in dv.CAVEAT_STATUSES:
                caveats.append(f"{bench} is {st}" + (f" ({r['status_reason']})" if r["status_reason"] else ""))
            if r["n_ctx"] is not None and r["n_ctx"] < ctx:
                caveats.append(f"{bench} measured up to n_ctx {r['n_ctx']}, below the requested {ctx}")
            se = r["stderr"]
            value = float(r["value"])
            scores[wkey] = {"benchmark": bench, "metric": metric, "value": value, "stderr": se,
                            "unit": r["unit"], "n_ctx": r["n_ctx"], "n": r["n"], "status": st,
                            "weight": weights[wkey], "delta": r["delta"], "delta_stderr": r["delta_stderr"],
                            "delta_ci_low": r["delta_ci_low"], "delta_ci_high": r["delta_ci_high"],
                            "verdict": r["verdict"], "verdict_text": r["verdict_text"]}
            total += weights[wkey] * value
            if se is None:
                var_known = False
            else:
                var += (weights[wkey] * se) ** 2
        if reason:
            excluded.append({"name": f"{family}/{rung}/{kv}", "reason": reason})
            continue
        weights_b, kv_b, buf_b, mnotes = mem
        spr = dv.speed_at(dv.whole(fig.get(("speed", dv.SPEED_METRIC), []))
                          + [r for m in dv.SPEED_METRICS[1:] for r in fig.get(("speed", m), [])], ctx, parallel)
        out.append(Candidate(
            card=card, family=family, rung=rung, kv=kv, bits_per_weight=pt["bpw"],
            weights_bytes=weights_b, kv_bytes=kv_b, buffer_bytes=buf_b, memory_bytes=weights_b + kv_b + buf_b,
            tg_tokens_per_s=spr["value"], tg_stderr=spr.get("stderr"), score=total / wsum,
            score_stderr=math.sqrt(var) / wsum if var_known else None, scores=scores,
            caveats=caveats + mnotes + ([spr["note"]] if spr.get("note") else []), is_reference=pt["ref"],
            file_bytes=pt["fb"], source=dv.source_of(pt["prov"]), provenance=pt["prov"], speed=spr,
            kld={"rows": [r for r in fig.get(KLD, []) if corpora is None or r["subset"] in corpora]}))
    if accept:  # the thinking's accepted losses keep out the points not shown within them
        keep_out, tnotes = thinking.accept_check(df, thinking.parse_accept(accept))
        notes += tnotes
        excluded += [{"name": c.name, "reason": keep_out[(c.family, c.rung, c.kv)]} for c in out
                     if (c.family, c.rung, c.kv) in keep_out]
        out = [c for c in out if (c.family, c.rung, c.kv) not in keep_out]
    notes += rank(out, tolerance, cautious)
    out.sort(key=lambda c: (-c.rank_score, c.memory_bytes, c.name))
    return out, excluded, weights, notes


# ---------------------------------------------------------------- mode 1: one model on one budget

def _solve_choice(cands: list[Candidate], budget: float | None, min_tg: float | None,
                  kv_allowed: set[str] | None, banned: set[str]) -> Candidate | None:
    """One binary choice: max score s.t. the constraints given (None = constraint dropped)."""
    prob = pulp.LpProblem("rung_choice", pulp.LpMaximize)
    x = {c.name: _binary(prob, f"x{i}") for i, c in enumerate(cands)}
    scale = max((c.memory_bytes for c in cands), default=1.0) or 1.0
    prob += pulp.lpSum((c.rank_score - EPS_TIE * c.memory_bytes / scale) * x[c.name] for c in cands)
    prob += pulp.lpSum(x.values()) == 1, "one_model"
    if budget is not None:
        prob += pulp.lpSum(c.memory_bytes / scale * x[c.name] for c in cands) <= budget / scale, "memory"
    for c in cands:
        if c.name in banned:
            prob += x[c.name] == 0
        if kv_allowed is not None and c.kv not in kv_allowed:
            prob += x[c.name] == 0
        if min_tg is not None and (c.tg_tokens_per_s is None or c.tg_tokens_per_s < min_tg):
            prob += x[c.name] == 0
    if _solve(prob) != "Optimal":
        return None
    chosen = [c for c in cands if (x[c.name].value() or 0) > 0.5]
    if not chosen:
        return None
    # Ties in the ranking score go to the smaller memory, whatever the solver's tolerance made of EPS_TIE.
    best = chosen[0]
    ties = [c for c in cands if abs(c.rank_score - best.rank_score) <= 1e-9 and _allowed(c, budget, min_tg, kv_allowed, banned)]
    return min(ties, key=lambda c: (c.memory_bytes, c.name))


def _allowed(c: Candidate, budget, min_tg, kv_allowed, banned) -> bool:
    return (c.name not in banned and (budget is None or c.memory_bytes <= budget * (1 + 1e-12))
            and (kv_allowed is None or c.kv in kv_allowed)
            and (min_tg is None or (c.tg_tokens_per_s is not None and c.tg_tokens_per_s >= min_tg)))


def recommend(df: pd.DataFrame, mem: int | str, ctx: int | str, *, kv: list[str] | None = None,
              min_tg: float | None = None, weights: dict[str, float] | list[str] | None = None,
              card: str | None = None, n_runners_up: int = 3, prepared: tuple | None = None,
              tolerance: dict[str, float] | None = None, cautious: bool = False,
              corpora: list[str] | None = None, parallel: int = 1, accept: list[str] | str | None = None) -> dict:
    """The best (family, rung, KV) for ``mem`` bytes at ``ctx`` tokens, runners-up, binding constraints.

    Returns a JSON-able dict; ``feasible`` False (with ``message``) when nothing fits. Raises
    RecommendError for a request the dataset cannot be asked (unknown benchmark, no figures at all).
    ``prepared``: what ``candidates(df, ctx, weights, card, ...)`` returned, to ask several budgets at one
    context without reading the dataset again. ``tolerance``, ``cautious``, ``corpora``, ``parallel``: see
    ``candidates``; ``min_tg``: the speed floor, tokens/s of one sequence among ``parallel``.
    The answer's ``why`` cites the rule that decided, with its numbers ("" where the best needs no reason).
    """
    t0 = time.perf_counter()
    budget, ctx = parse_bytes(mem, "mem"), parse_ctx(ctx, "ctx")
    parallel = _parallel(parallel)
    if min_tg is not None and not float(min_tg) > 0:
        raise RecommendError(f"the speed floor must be > 0 tokens/s, got {min_tg}")
    weights = parse_weights(weights) if not isinstance(weights, dict) else weights
    kv_allowed = set(kv) if kv else None
    cands, excluded, used_w, notes = prepared if prepared is not None else candidates(
        df, ctx, weights, card, tolerance=tolerance, cautious=cautious, corpora=corpora, parallel=parallel,
        accept=accept)
    notes = list(notes)
    if kv_allowed:
        unknown = kv_allowed - {c.kv for c in cands} - {e["name"].split("/")[-1] for e in excluded}
        if unknown:
            notes.append(f"KV types {sorted(unknown)} are not in the dataset")
    req = {"memory_budget_bytes": budget, "context_tokens": ctx, "kv_types": sorted(kv_allowed) if kv_allowed else None,
           "min_tg_tokens_per_s": min_tg, "parallel": parallel, "weights": used_w, "tolerance": tolerance or {},
           "cautious": cautious, "corpora": corpora, "accept": accept}
    result = {"request": req, "card": cands[0].card if cands else card, "notes": notes, "excluded": excluded,
              "n_candidates": len(cands)}
    if not cands:
        result.update(feasible=False, message=_no_data_message(excluded))
        result["seconds"] = round(time.perf_counter() - t0, 3)
        return result
    best = _solve_choice(cands, budget, min_tg, kv_allowed, set())
    if best is None:
        result.update(feasible=False, message=_infeasible_message(cands, budget, ctx, min_tg, kv_allowed))
        result["seconds"] = round(time.perf_counter() - t0, 3)
        return result
    runners, banned = [], {best.name}
    for _ in range(n_runners_up):
        nxt = _solve_choice(cands, budget, min_tg, kv_allowed, banned)
        if nxt is None:
            break
        runners.append(nxt)
        banned.add(nxt.name)
    binding = []
    relax = {"memory": (None, min_tg, kv_allowed), "speed": (budget, None, kv_allowed), "kv_types": (budget, min_tg, None)}
    active = {"memory": True, "speed": min_tg is not None, "kv_types": kv_allowed is not None}
    for name, (b, t, k) in relax.items():
        if not active[name]:
            continue
        alt = _solve_choice(cands, b, t, k, set())
        if alt is not None and alt.rank_score > best.rank_score + 1e-9:
            binding.append({"constraint": name, "without_it": alt.name, "score_without_it": alt.score,
                            "score_gain": alt.rank_score - best.rank_score, "gap": gap(alt, best),
                            "why": _binds(name, alt, budget, min_tg, kv_allowed)})
    over = preferred_over(best, cands, budget, min_tg, kv_allowed)
    why = why_chosen(best, over, cautious)
    message = (f"run {best.name}: predicted {dv.fmt_bytes(best.memory_bytes)} of {dv.fmt_bytes(budget)} at "
               f"{ctx} tokens, score {best.score:.2f} %") + (f"; {why}" if why else "")
    result.update(
        feasible=True, best=best.as_dict(), runners_up=[r.as_dict() | {"gap": gap(r, best)} for r in runners],
        binding=binding, why=why,
        preferred_over=[{"name": c.name, "score": c.score, "memory_bytes": c.memory_bytes, "gap": gap(c, best)}
                        for c in over],
        slack={"memory_bytes": budget - best.memory_bytes,
               "tg_tokens_per_s": None if min_tg is None or best.tg_tokens_per_s is None else best.tg_tokens_per_s - min_tg},
        message=message)
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result


def _parallel(parallel) -> int:
    try:
        n = int(parallel)
    except (TypeError, ValueError):
        raise RecommendError(f"concurrency (sequences generated at a time) must be a whole number, got {parallel!r}") from None
    if n < 1 or n != float(parallel):
        raise RecommendError(f"concurrency (sequences generated at a time) must be a whole number >= 1, got {parallel!r}")
    return n


def gap(c: Candidate, other: Candidate) -> str:
    """``c``'s size against ``other``'s, in bits per weight and file bytes (dataset_view.size_gap)."""
    return f"{c.name} against {other.name}: " + dv.size_gap(c.bits_per_weight, c.file_bytes, other.bits_per_weight,
                                                             other.file_bytes)


def _binds(name: str, alt: Candidate, budget, min_tg, kv_allowed) -> str:
    """Why ``alt`` (the better point without the constraint ``name``) is not allowed, in its numbers."""
    if name == "memory":
        return f"{alt.name} needs {dv.fmt_bytes(alt.memory_bytes)}, over the budget of {dv.fmt_bytes(budget)}"
    if name == "speed":
        if alt.tg_tokens_per_s is None:
            return (f"{alt.name} has no speed figure to hold against the floor of {min_tg:g} tokens/s: "
                    + alt.speed.get("reason", "not measured"))
        return f"{alt.name} generates {alt.tg_tokens_per_s:.3g} tokens/s, below the floor of {min_tg:g} tokens/s"
    return f"{alt.name} uses the KV type {alt.kv}, not among {sorted(kv_allowed)}"


def preferred_over(best: Candidate, cands: list[Candidate], budget, min_tg, kv_allowed) -> list[Candidate]:
    """The points within the constraints that score higher as measured but use more memory, and that
    the choice passed over: it is shown within the tolerance of its reference, or the larger point's
    task scores do not separate it from the choice (their family ranks by KLD or bits)."""
    out = []
    for c in cands:
        if c.name == best.name or c.memory_bytes <= best.memory_bytes or c.score <= best.score + 1e-9:
            continue
        if not _allowed(c, budget, min_tg, kv_allowed, set()):
            continue
        if c.rank_score <= best.rank_score + 1e-9:
            out.append(c)
    return sorted(out, key=lambda c: (-c.score, c.memory_bytes))


def _no_data_message(excluded: list[dict]) -> str:
    reasons = {}
    for e in excluded:
        reasons.setdefault(e["reason"], []).append(e["name"])
    lines = ["No point in the dataset has the figures this request needs:"]
    lines += [f"  {r}: {', '.join(n[:4])}{' …' if len(n) > 4 else ''}" for r, n in reasons.items()]
    return "\n".join(lines)


def _infeasible_message(cands, budget, ctx, min_tg, kv_allowed) -> str:
    pool = [c for c in cands if kv_allowed is None or c.kv in kv_allowed]
    if not pool:
        return f"Infeasible: no measured point uses the KV types {sorted(kv_allowed)} (measured: {sorted({c.kv for c in cands})})."
    small = min(pool, key=lambda c: c.memory_bytes)
    parts = []
    if small.memory_bytes > budget:
        parts.append(
            f"nothing fits {dv.fmt_bytes(budget)} at a context of {ctx} tokens: the smallest is {small.name} at "
            f"{dv.fmt_bytes(small.memory_bytes)} (weights {dv.fmt_bytes(small.weights_bytes)} + KV cache "
            f"{dv.fmt_bytes(small.kv_bytes)} + buffers {dv.fmt_bytes(small.buffer_bytes)})")
    fits = [c for c in pool if c.memory_bytes <= budget]
    if min_tg is not None:
        fast_pool = fits or pool
        measured = [c for c in fast_pool if c.tg_tokens_per_s is not None]
        if not measured:
            why = sorted({c.speed.get("reason") for c in fast_pool if c.speed.get("reason")})
            parts.append(f"no point has a tg_tokens_per_s figure to check the minimum {min_tg} tokens/s against"
                         + (f" ({'; '.join(why)})" if why else ""))
        else:
            fast = max(measured, key=lambda c: c.tg_tokens_per_s)
            where = "within the memory budget" if fits else "at all"
            if fast.tg_tokens_per_s < min_tg:
                parts.append(f"the fastest {where} is {fast.name} at {dv.fmt_value(fast.tg_tokens_per_s, fast.tg_stderr, 'tokens/s')}, "
                             f"below the minimum {min_tg} tokens/s")
    if not parts:
        parts.append("no point satisfies memory, speed and KV constraints together")
    return "Infeasible: " + "; ".join(parts) + "."


# ---------------------------------------------------------------- mode 2: pack models onto cards

def pack(df: pd.DataFrame, cards: list[tuple[str, int]] | list[str] | str, ctx: int | str, *,
         families: list[str] | None = None, kv: list[str] | None = None, min_tg: float | None = None,
         weights: dict[str, float] | list[str] | None = None, require_all: bool = False,
         card: str | None = None, tolerance: dict[str, float] | None = None, cautious: bool = False,
         corpora: list[str] | None = None, parallel: int = 1, accept: list[str] | str | None = None) -> dict:
    """Place each family at most once (exactly once with ``require_all``) at one (rung, KV) on a card.

    Maximises the summed ranking score (``candidates``); each card's summed predicted memory stays within its size.
    """
    t0 = time.perf_counter()
    cards = cards if cards and isinstance(cards[0], tuple) else parse_cards(cards)
    ctx = parse_ctx(ctx, "ctx")
    weights = parse_weights(weights) if not isinstance(weights, dict) else weights
    cands, excluded, used_w, notes = candidates(df, ctx, weights, card, tolerance=tolerance, cautious=cautious,
                                                corpora=corpora, parallel=_parallel(parallel), accept=accept)
    kv_allowed = set(kv) if kv else None
    fams = families or sorted({c.family for c in cands})
    unknown = [f for f in fams if f not in {c.family for c in cands}]
    pool = [c for c in cands if c.family in fams and (kv_allowed is None or c.kv in kv_allowed)
            and (min_tg is None or (c.tg_tokens_per_s is not None and c.tg_tokens_per_s >= min_tg))]
    req = {"cards": [{"name": n, "memory_bytes": b} for n, b in cards], "context_tokens": ctx,
           "families": fams, "kv_types": sorted(kv_allowed) if kv_allowed else None,
           "min_tg_tokens_per_s": min_tg, "weights": used_w, "require_all": require_all}
    result = {"request": req, "notes": notes, "excluded": excluded}
    if unknown and require_all:
        result.update(feasible=False, message=f"Infeasible: no usable point for families {unknown}")
        return result
    prob = pulp.LpProblem("pack", pulp.LpMaximize)
    x = {}
    for i, c in enumerate(pool):
        for j, (cname, cap) in enumerate(cards):
            if c.memory_bytes <= cap:
                x[i, j] = _binary(prob, f"x_{i}_{j}")
    scale = max((cap for _, cap in cards), default=1)
    prob += pulp.lpSum((pool[i].rank_score - EPS_TIE * pool[i].memory_bytes / scale) * v for (i, j), v in x.items())
    for f in fams:
        terms = [v for (i, j), v in x.items() if pool[i].family == f]
        if require_all:
            prob += (pulp.lpSum(terms) == 1) if terms else (pulp.lpSum([]) == 1), f"place_{f}"
        elif terms:
            prob += pulp.lpSum(terms) <= 1, f"place_{f}"
    for j, (cname, cap) in enumerate(cards):
        terms = [pool[i].memory_bytes / scale * v for (i, jj), v in x.items() if jj == j]
        if terms:
            prob += pulp.lpSum(terms) <= cap / scale, f"mem_{j}"
    if _solve(prob) != "Optimal":
        need = {f: min((c.memory_bytes for c in pool if c.family == f), default=None) for f in fams}
        detail = ", ".join(f"{f} ≥ {dv.fmt_bytes(b)}" if b else f"{f}: no usable point" for f, b in need.items())
        result.update(feasible=False, message=f"Infeasible: the families cannot all be placed on cards "
                      f"{', '.join(f'{n} ({dv.fmt_bytes(b)})' for n, b in cards)} at {ctx} tokens; smallest needs: {detail}.")
        result["seconds"] = round(time.perf_counter() - t0, 3)
        return result
    per_card = {n: {"memory_bytes": b, "used_bytes": 0.0, "models": []} for n, b in cards}
    placed = set()
    total = 0.0
    for (i, j), v in x.items():
        if (v.value() or 0) > 0.5:
            c = pool[i]
            slot = per_card[cards[j][0]]
            slot["models"].append(c.as_dict())
            slot["used_bytes"] += c.memory_bytes
            placed.add(c.family)
            total += c.score
    for slot in per_card.values():
        slot["free_bytes"] = slot["memory_bytes"] - slot["used_bytes"]
    unplaced = [f for f in fams if f not in placed]
    result.update(feasible=True, cards=per_card, total_score=total, unplaced=unplaced,
                  message=f"placed {len(placed)} of {len(fams)} families, summed score {total:.2f} %"
                          + (f"; not placed: {', '.join(unplaced)}" if unplaced else ""))
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result


# ---------------------------------------------------------------- text

def _cand_line(c: dict) -> str:
    sp = c.get("speed") or {}
    tg = ("— (" + sp.get("reason", "not measured") + ")" if c["tg_tokens_per_s"] is None else
          dv.fmt_value(c["tg_tokens_per_s"], c["tg_stderr"], "tokens/s")
          + (f" at n_ctx {sp['n_ctx']}" if sp.get("n_ctx") is not None else "")
          + f", {sp.get('n_parallel', 1)} sequence(s)")
    score = dv.fmt_value(c["score"], c["score_stderr"], "%")
    bpw = "" if c.get("bits_per_weight") is None else f"{c['bits_per_weight']:.2f} bits per weight, "
    line = (f"{c['name']:<36} score {score:<18} memory {dv.fmt_bytes(c['memory_bytes'])} "
            f"(weights {dv.fmt_bytes(c['weights_bytes'])} + KV {dv.fmt_bytes(c['kv_bytes'])} + "
            f"buffers {dv.fmt_bytes(c['buffer_bytes'])})  tg {tg}"
            f"\n      {bpw}source: {c.get('source', 'made here')}"
            + (f" ({c['provenance']})" if c.get("source") == "uploader" and c.get("provenance") else ""))
    for key, s in c["scores"].items():
        if s.get("delta") is not None:
            line += (f"\n      {key} vs reference: Δ {s['delta']:+.2f} points (95 % CI {s['delta_ci_low']:+.2f}…"
                     f"{s['delta_ci_high']:+.2f}), {s['verdict']}; {s.get('decision', 'no tolerance')}"
                     + ("" if s.get("reached", True) else " (not reached by the walk down the ladder)"))
    if abs(c["rank_score"] - c["score"]) > 1e-9 or c["ranked_by"] != "task scores":
        line += f"\n      ranked at {c['rank_score']:.3f} % (by {c['ranked_by']})"
    if c["caveats"]:
        line += "\n      caveats: " + "; ".join(c["caveats"])
    return line


def format_text(result: dict) -> str:
    req = result["request"]
    lines = []
    if "cards" in req:
        cards = ", ".join("%s (%s)" % (c["name"], dv.fmt_bytes(c["memory_bytes"])) for c in req["cards"])
        lines.append(f"pack onto {cards} at {req['context_tokens']} tokens of context")
    else:
        lines.append(f"card {result.get('card')}: budget {dv.fmt_bytes(req['memory_budget_bytes'])} at "
                     f"{req['context_tokens']} tokens of context"
                     + (f", KV {','.join(req['kv_types'])}" if req.get("kv_types") else "")
                     + (f", tg ≥ {req['min_tg_tokens_per_s']} tokens/s" if req.get("min_tg_tokens_per_s") is not None else "")
                     + (f", {req['parallel']} sequences at a time" if req["parallel"] != 1 else ""))
    lines.append("weights: " + ", ".join(f"{k}={v:g}" for k, v in req["weights"].items()))
    lines += [f"note: {n}" for n in result.get("notes", [])]
    if not result["feasible"]:
        lines.append(result["message"])
        return "\n".join(lines)
    if "cards" in result:
        lines.append(result["message"])
        for name, slot in result["cards"].items():
            lines.append(f"{name}: {dv.fmt_bytes(slot['used_bytes'])} used of {dv.fmt_bytes(slot['memory_bytes'])}")
            lines += ["  " + _cand_line(c) for c in slot["models"]]
        return "\n".join(lines)
    lines.append("best:  " + _cand_line(result["best"]))
    if result.get("why"):
        lines.append("why:   " + result["why"])
    lines += [f"       size gap of {c['gap']}" for c in result.get("preferred_over", []) if c.get("gap")]
    for i, r in enumerate(result["runners_up"], 2):
        lines.append(f"#{i}:    " + _cand_line(r) + (f"\n      size gap of {r['gap']}" if r.get("gap") else ""))
    if result["binding"]:
        for b in result["binding"]:
            lines.append(f"binding: {b['constraint']} (without it: {b['without_it']}, +{b['score_gain']:.2f} %; "
                         f"{b.get('why', '')}; size gap of {b.get('gap', '')})")
    else:
        lines.append("binding: none (the best-scoring point fits every constraint)")
    lines.append(f"memory slack: {dv.fmt_bytes(result['slack']['memory_bytes'])}")
    lines.append(f"answered in {result['seconds']:.2f} s")
    return "\n".join(lines)
