"""`quantladder plan`: how many items a benchmark needs to detect a loss, and what a plan costs.

From one card's dataset (``points.parquet``):

1. **Items needed.** Per (family, KV type, task benchmark) and rung, the flips against the reference
   (``flips_right_to_wrong`` / ``flips_wrong_to_right`` rows: b losses and c gains on n common
   items) give the discordance ψ = (b + c)/n. The items needed to detect a loss of ``detect`` points
   with ``power`` by McNemar's exact test at the planning level α/m (Holm's strictest step; m = the
   family's headline comparisons on the card that the dataset's verdicts were corrected over,
   ``quantladder.deltas``) come from ``stats.items_needed``; the
   same at the Wilson 95 % upper bound of ψ shows what a small measured n leaves open. What the
   current n can detect is ``stats.smallest_detectable_loss``.
2. **Cost.** Per (point, benchmark): prompt tokens / pp tokens/s + generated tokens / tg tokens/s of
   the same point (llama-bench's figures, single sequence), beside the measured
   ``generation_seconds``; per item, times the items a plan asks for. Speed is measured at short
   context (pp512/tg128), so long prompts cost more than predicted: the measured/predicted ratio is
   printed where both exist.
3. **The whole plan.** A config's points (families × rungs × KV types) × the enabled task benchmarks
   each family takes (a base model skips chat benchmarks), plus the noise-floor run of each family's
   reference per benchmark, priced per item from the same point where measured, else from the
   family's slowest measured rung on this card (an upper bound: lower rungs are smaller and faster);
   a family never measured on the card cannot be priced, and the answer says so. Job-hours count
   generation only (one card per job), not scoring, perplexity or speed runs.
4. **A thinking family's thinking.** Its replies think before they answer (docs/thinking.md): the
   thinking tokens come before the answer's and add to them (an exam's reply budget counts the
   answer alone). A config's thinking family is priced per item at its ``reasoning_budget``: the
   measured point's answer tokens (its output less its thinking, ``think_tokens_mean`` × the replies
   that thought) plus the budget's thinking tokens an item (an upper bound: a reply may close its
   thinking sooner; the tags and the forced end add a few tokens more); an unlimited budget (-1) is
   bounded by the context alone (the benchmark's ``n_ctx`` less the item's prompt and answer), and
   the entry says so; ``reasoning: off`` prices no thinking.

Items needed are items of that benchmark's kind: where a benchmark has fewer (HumanEval: 164), it
cannot settle that loss alone, and the answer is to accept the loss it can detect or add items.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import pandas as pd
from scipy import stats as sps

from . import benchmarks as qbenchmarks
from . import config as qconfig
from . import dataset_view as dv
from . import deltas, reasoning, stats
from .errors import QuantladderError

GEN_METRICS = ("generation_items", "generation_prompt_tokens", "generation_output_tokens", "generation_seconds")
FLIPS = ("flips_right_to_wrong", "flips_wrong_to_right")


class PlanError(QuantladderError):
    pass


def _wilson_upper(k: int, n: int, level: float = 0.95) -> float:
    if n == 0:
        return 1.0
    z = sps.norm.ppf(0.5 + level / 2)
    p = k / n
    return min(1.0, (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n))


def _pick_card(df: pd.DataFrame, card: str | None) -> tuple[str, pd.DataFrame]:
    cards = sorted(c for c in df["card"].dropna().unique())
    if card is None:
        if len(cards) != 1:
            raise PlanError(f"the dataset holds cards {cards}: name one with --card")
        card = cards[0]
    elif card not in cards:
        raise PlanError(f"card {card!r} is not in the dataset (it has {cards})")
    return card, df[df["card"] == card]


def _flip_counts(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (family, kv, benchmark, rung): n, losses, gains, from the whole-benchmark flip rows."""
    f = df[df["metric"].isin(FLIPS) & df["subset"].isna() & df["value"].notna()]
    # A reference-rung row at another KV type is the KV axis (reference at q8_0 against the reference at
    # the family's first KV type, f16 preferred): kept. At that first KV type it would be the reference
    # against itself (an older aggregate wrote such rows): not a comparison.
    ref = f["is_reference"].astype(bool)
    base_kv = {fam: sorted(set(g["kv"]), key=lambda k: (k != "f16", k))[0] for fam, g in f[ref].groupby("family")}
    f = f[~(ref & (f["kv"] == f["family"].map(base_kv)))]
    if f.empty:
        return pd.DataFrame(columns=["family", "kv", "benchmark", "rung", "n", "n_loss", "n_gain"])
    piv = f.pivot_table(index=["family", "kv", "benchmark", "rung"], columns="metric", values="value", aggfunc="first")
    n = f.groupby(["family", "kv", "benchmark", "rung"])["n"].max()
    out = piv.join(n).reset_index()
    for m in FLIPS:
        if m not in out:
            out[m] = float("nan")
    out = out.dropna(subset=list(FLIPS) + ["n"])
    out["n"] = out["n"].astype(int)
    out["n_loss"] = (out["flips_right_to_wrong"] / 100 * out["n"]).round().astype(int)
    out["n_gain"] = (out["flips_wrong_to_right"] / 100 * out["n"]).round().astype(int)
    return out[["family", "kv", "benchmark", "rung", "n", "n_loss", "n_gain"]]


def items_plan(df: pd.DataFrame, *, detect: float, power: float = 0.8, alpha: float = 0.05,
               comparisons: int | None = None) -> list[dict]:
    """Part 1 for one card's rows (see the module docstring)."""
    flips = _flip_counts(df)
    loss = detect / 100.0
    out = []
    # m: the headline comparisons the dataset's verdicts were corrected over (quantladder.deltas); a
    # dataset without paired columns falls back to the (rung, KV, benchmark) comparisons of its flips
    m_by_family = {fam: m for (_, fam), m in deltas.headline_comparisons(df).items()}
    for fam, k in flips.groupby("family").size().items():
        m_by_family.setdefault(fam, int(k))
    for (family, kv, bench), g in flips.groupby(["family", "kv", "benchmark"], sort=True):
        m = comparisons or int(m_by_family[family])
        a = stats.planning_alpha(alpha, m, "holm")
        rungs = []
        for r in g.sort_values("rung").itertuples():
            psi = (r.n_loss + r.n_gain) / r.n if r.n else 0.0
            up = _wilson_upper(r.n_loss + r.n_gain, r.n)
            need, how = stats.items_needed(loss, psi, alpha=a, power=power)
            need_up, _ = stats.items_needed(loss, up, alpha=a, power=power)
            now = stats.smallest_detectable_loss(r.n, psi, alpha=a, power=power)
            # the claim the walk and the recommender make instead: shown within `detect` points, at the
            # walk's own level (a fixed sequence: each claim one-sided alpha/2, no correction)
            show, show_how = stats.noninferiority_items(loss, psi, alpha=alpha, power=power)
            rungs.append({"rung": r.rung, "n": r.n, "n_loss": r.n_loss, "n_gain": r.n_gain,
                          "discordance_pct": 100 * psi, "discordance_upper_pct": 100 * up,
                          "items_needed": need, "items_needed_upper": need_up, "method": how,
                          "items_to_show_within": show, "items_to_show_within_method": show_how,
                          "detectable_now_points": None if now is None else 100 * now})
        worst = max(rungs, key=lambda x: x["items_needed"])
        out.append({"benchmark": bench, "family": family, "kv": kv, "n_comparisons": m, "planning_alpha": a,
                    "items_now": int(g["n"].max()), "items_needed": worst["items_needed"],
                    "items_needed_rung": worst["rung"],
                    "items_needed_upper": max(x["items_needed_upper"] for x in rungs), "rungs": rungs})
    return out


def _speed(df: pd.DataFrame) -> dict[tuple, dict]:
    s = df[(df["benchmark"] == "speed") & df["metric"].isin(["pp_tokens_per_s", "tg_tokens_per_s"]) & df["value"].notna()]
    out: dict[tuple, dict] = defaultdict(dict)
    for r in s.itertuples():
        out[(r.family, r.rung, r.kv)][r.metric] = float(r.value)
    return out


def _thinking_tokens(df: pd.DataFrame) -> dict[tuple, float]:
    """Thinking tokens a point's replies spent, per (family, rung, kv, benchmark): the mean of the
    replies that thought times their number (summed over n_ctx rows)."""
    t = df[(df["metric"] == "think_tokens_mean") & df["subset"].isna() & df["value"].notna() & df["n"].notna()]
    out: dict[tuple, float] = defaultdict(float)
    for r in t.itertuples():
        out[(r.family, r.rung, r.kv, r.benchmark)] += float(r.value) * float(r.n)
    return out


def point_costs(df: pd.DataFrame) -> list[dict]:
    """Part 2: predicted vs measured generation time per (point, task benchmark)."""
    g = df[df["metric"].isin(GEN_METRICS) & df["value"].notna()]
    speed = _speed(df)
    thought = _thinking_tokens(df)
    out = []
    for (family, rung, kv, bench), rows in g.groupby(["family", "rung", "kv", "benchmark"], sort=True):
        tot = rows.groupby("metric")["value"].sum()  # summed over n_ctx rows (RULER: one per length)
        items = float(tot.get("generation_items", 0.0))
        if items <= 0:
            continue
        rec = {"family": family, "rung": rung, "kv": kv, "benchmark": bench, "items": int(items),
               "prompt_tokens": float(tot.get("generation_prompt_tokens", float("nan"))),
               "output_tokens": float(tot.get("generation_output_tokens", float("nan"))),
               "thinking_tokens": thought.get((family, rung, kv, bench)),
               "actual_s": float(tot["generation_seconds"]) if "generation_seconds" in tot else None,
               "n_parallel": int(rows["n_parallel"].max()) if rows["n_parallel"].notna().any() else None}
        sp = speed.get((family, rung, kv), {})
        pp, tg = sp.get("pp_tokens_per_s"), sp.get("tg_tokens_per_s")
        rec["pp_tokens_per_s"], rec["tg_tokens_per_s"] = pp, tg
        if pp and tg and math.isfinite(rec["prompt_tokens"]) and math.isfinite(rec["output_tokens"]):
            rec["predicted_s"] = rec["prompt_tokens"] / pp + rec["output_tokens"] / tg
            rec["predicted_s_per_item"] = rec["predicted_s"] / items
            rec["reason"] = None
        else:
            rec["predicted_s"] = rec["predicted_s_per_item"] = None
            rec["reason"] = ("no pp/tg speed rows for this point" if not (pp and tg)
                             else "no prompt/output token counts for this point")
        rec["actual_over_predicted"] = (rec["actual_s"] / rec["predicted_s"]
                                        if rec["actual_s"] is not None and rec["predicted_s"] else None)
        out.append(rec)
    return out


def _config_jobs(config_path: str | Path) -> tuple[list[tuple[str, str, str, str, str]], int, list[str], dict]:
    """(family, rung, kv, benchmark, series) generation jobs of a config: its points × enabled task
    benchmarks the family takes (a base model skips chat benchmarks), plus one noise-floor run of each
    family's reference per benchmark where the config measures the noise floor; and the config."""
    cfg = qconfig.load(config_path)
    benches = [b for b, spec in (cfg.get("benchmarks") or {}).items() if (spec or {}).get("enabled")]
    pts = qconfig.points(cfg)
    # a benchmark's own kv_types (RULER's KV cross) adds its points at those types
    jobs = [(f, r, kv, b, "points") for f in qconfig.families(cfg) for r in qconfig.rungs(cfg, f)
            for kv in qconfig.all_kv_types(cfg, f) for b in benches
            if qconfig.task_runs_for(cfg, b, f) and kv in qconfig.kv_types(cfg, f, b)]
    if qconfig.noise_floor_enabled(cfg):
        for f in qconfig.families(cfg):
            ref, kv = qconfig.reference_rung(cfg, f), qconfig.kv_types(cfg, f)[0]
            jobs += [(f, ref, kv, b, "noise") for b in benches if qconfig.task_runs_for(cfg, b, f)]
    return jobs, len(pts), benches, cfg


def _thinking_families(cfg: dict, costs: list[dict]) -> dict[str, reasoning.Settings]:
    """The config's families that think, with their reasoning settings: a chat family whose format is
    split (named, or detected from its template where the file is on this machine), else one whose
    measured replies on the card thought."""
    measured = {c["family"] for c in costs if c.get("thinking_tokens")}
    out = {}
    for name in qconfig.families(cfg):
        fam = cfg["families"][name]  # validated (qconfig.load): chat filled in
        if not fam["chat"]:
            continue
        found, template = reasoning.planning_template(fam)
        if fam.get("reasoning_format") or found:
            fmt = reasoning.family_format(template, fam.get("reasoning_format"), f"families.{name}.reasoning_format")
            thinks = fmt.kind in (reasoning.TAGS, reasoning.HARMONY)
        else:
            thinks = name in measured
        if thinks:
            out[name] = reasoning.validate_generation(reasoning.family_generation(cfg, name), f"families.{name}")
    return out


def thinking_price(c: dict, settings: reasoning.Settings, n_ctx: int) -> dict:
    """Seconds an item of a thinking family at ``settings`` (part 4), from a measured point's cost
    record ``c`` (its pp/tg speed, its prompt, output and thinking tokens)."""
    items = c["items"]
    prompt = c["prompt_tokens"] / items
    answer = max(0.0, (c["output_tokens"] - (c.get("thinking_tokens") or 0.0)) / items)
    budget = settings.reasoning_budget
    if settings.reasoning == "off":
        think, how = 0.0, "reasoning off: no thinking"
    elif budget >= 0:
        think, how = float(budget), f"at most its reasoning budget, {budget} thinking tokens an item"
    else:
        think = max(0.0, n_ctx - prompt - answer)
        how = (f"unlimited reasoning budget: bounded by the context alone ({n_ctx} tokens an item, "
               f"{think:.0f} of them left for the thinking)")
    return {"budget": budget, "thinking_tokens_per_item": think, "answer_tokens_per_item": answer,
            "how": how, "s_per_item": prompt / c["pp_tokens_per_s"] + (answer + think) / c["tg_tokens_per_s"]}


def whole_plan(df: pd.DataFrame, costs: list[dict], items: list[dict], *, config_path=None) -> dict:
    """Part 3: job-hours of every (point, task benchmark) of a config (or of the dataset)."""
    by_point = {(c["family"], c["rung"], c["kv"], c["benchmark"]): c for c in costs}
    thinking: dict[str, reasoning.Settings] = {}
    if config_path is not None:
        jobs, n_points, benches, cfg = _config_jobs(config_path)
        source = str(config_path)
        thinking = _thinking_families(cfg, costs)
    else:
        jobs = sorted({(c["family"], c["rung"], c["kv"], c["benchmark"], "points") for c in costs})
        n_points = len({j[:3] for j in jobs})
        benches = sorted({c["benchmark"] for c in costs})
        source = "the dataset's points"
    need = {(i["family"], i["kv"], i["benchmark"]): i["items_needed"] for i in items}
    need_any_kv = defaultdict(int)
    for i in items:
        need_any_kv[(i["family"], i["benchmark"])] = max(need_any_kv[(i["family"], i["benchmark"])], i["items_needed"])
    entries, unpriced = [], []
    for family, rung, kv, bench, series in jobs:
        e = {"family": family, "rung": rung, "kv": kv, "benchmark": bench, "series": series}
        own = by_point.get((family, rung, kv, bench))
        fam = [c for c in costs if c["family"] == family and c["benchmark"] == bench and c["predicted_s_per_item"]]
        if own and own["predicted_s_per_item"]:
            per_item, how, items_cfg, src = own["predicted_s_per_item"], "measured point", own["items"], own
        elif fam:
            src = slow = max(fam, key=lambda c: c["predicted_s_per_item"])
            per_item = slow["predicted_s_per_item"]
            how = f"family's slowest measured rung ({slow['rung']}, {slow['kv']})"
            items_cfg = max(c["items"] for c in fam)
        else:
            e["reason"] = (f"{family} has no measured {bench} generation with speed rows on this card"
                           if family in set(df["family"]) else f"family {family} is not measured on this card")
            unpriced.append(e)
            continue
        if family in thinking:  # its thinking at the config's budget, before its answer (part 4)
            e["thinking"] = thinking_price(src, thinking[family], qbenchmarks.configured(cfg, bench).max_n_ctx())
            per_item = e["thinking"]["s_per_item"]
        n_detect = need.get((family, kv, bench)) or need_any_kv.get((family, bench))
        e.update({"priced_from": how, "s_per_item": per_item, "items_configured": items_cfg,
                  "hours_configured": per_item * items_cfg / 3600,
                  "items_at_detect": n_detect,
                  "hours_at_detect": None if not n_detect else per_item * n_detect / 3600})
        entries.append(e)
    return {"source": source, "n_points": n_points, "n_jobs": len(jobs), "benchmarks": benches, "entries": entries,
            "unpriced": unpriced,
            "job_hours_configured": sum(e["hours_configured"] for e in entries),
            "job_hours_at_detect": sum(e["hours_at_detect"] for e in entries if e["hours_at_detect"] is not None),
            "entries_without_items_needed": sum(1 for e in entries if e["hours_at_detect"] is None)}


def plan(df: pd.DataFrame, *, detect: float, power: float = 0.8, alpha: float = 0.05, card: str | None = None,
         config_path=None, comparisons: int | None = None) -> dict:
    if not 0 < detect < 100:
        raise PlanError(f"--detect is a loss in percentage points, in (0, 100); got {detect!r}")
    if not 0 < power < 1:
        raise PlanError(f"--power must be in (0, 1), got {power!r}")
    if not 0 < alpha < 1:
        raise PlanError(f"--alpha must be in (0, 1), got {alpha!r}")
    if comparisons is not None and comparisons < 1:
        raise PlanError(f"--comparisons must be >= 1, got {comparisons!r}")
    card, rows = _pick_card(df, card)
    items = items_plan(rows, detect=detect, power=power, alpha=alpha, comparisons=comparisons)
    costs = point_costs(rows)
    notes = []
    if not items:
        notes.append("no flip rows (per-item verdicts of a reference and a rung) on this card: items needed unknown")
    if not costs:
        notes.append("no generation cost rows (generation_items, generation_*_tokens, generation_seconds) on this card")
    if items:
        notes.append("items needed beyond a benchmark's size (HumanEval has 164) mean it cannot settle that loss "
                     "alone: accept the loss it can detect, or add items")
    if any((c.get("n_parallel") or 1) > 1 for c in costs):
        notes.append("some points generated several sequences at once (n_parallel > 1): single-stream pp/tg "
                     "over-predict their time")
    return {"card": card, "detect_points": detect, "power": power, "alpha": alpha,
            "correction": "Holm (planned at alpha / m, its strictest step)", "benchmarks": items,
            "point_costs": costs, "plan": whole_plan(rows, costs, items, config_path=config_path), "notes": notes}


def load_and_plan(dataset_path, **kw) -> dict:
    return plan(dv.load(dataset_path), **kw)


# ------------------------------------------------------------------------------------------ text

def _h(hours: float) -> str:
    return f"{hours:.2f} h" if hours < 10 else f"{hours:.0f} h"


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.0f} s" if seconds < 600 else _h(seconds / 3600)


def format_text(res: dict) -> str:
    d = res["detect_points"]
    lines = [f"Plan for card {res['card']}: detect a loss of {d:g} points at {100 * res['power']:g} % power, "
             f"two-sided alpha {res['alpha']:g} corrected by {res['correction']}.", ""]
    for b in res["benchmarks"]:
        lines.append(f"{b['benchmark']} — {b['family']} (KV {b['kv']}), {b['n_comparisons']} comparisons, "
                     f"planning alpha {b['planning_alpha']:.2g}: {b['items_needed']} items needed "
                     f"(the {b['items_needed_rung']} rung decides; {b['items_needed_upper']} at the 95 % upper bound "
                     f"of the flip rate); {b['items_now']} measured.")
        for r in b["rungs"]:
            now = ("no loss of any size" if r["detectable_now_points"] is None
                   else f"{r['detectable_now_points']:.1f} points")
            lines.append(f"  {r['rung']:<10} n = {r['n']:<5} flips {r['n_loss']} lost / {r['n_gain']} gained "
                         f"({r['discordance_pct']:.1f} %, upper {r['discordance_upper_pct']:.1f} %): "
                         f"{r['items_needed']} items needed ({r['method']}), {r['items_needed_upper']} at the upper "
                         f"bound; now detectable: {now}; to show it within {d:g} points instead (the walk's claim, "
                         f"{100 * res['power']:g} % power if it equals the reference): {r['items_to_show_within']} items")
        lines.append("")
    if res["point_costs"]:
        lines.append("Generation time per point (predicted from pp/tg tokens/s and the items' tokens, beside measured):")
        for c in res["point_costs"]:
            pred = _s(c["predicted_s"]) if c["predicted_s"] is not None else f"— ({c['reason']})"
            ratio = f", measured/predicted {c['actual_over_predicted']:.2f}" if c["actual_over_predicted"] else ""
            lines.append(f"  {c['family']}/{c['rung']}/{c['kv']} {c['benchmark']}: {c['items']} items, predicted "
                         f"{pred}, measured {_s(c['actual_s'])}{ratio}")
        lines.append("")
    p = res["plan"]
    lines.append(f"Whole plan ({p['source']}: {p['n_points']} points, task benchmarks {', '.join(p['benchmarks'])}; "
                 f"{p['n_jobs']} generation jobs, noise-floor runs included): "
                 f"{_h(p['job_hours_configured'])} of generation as configured, "
                 f"{_h(p['job_hours_at_detect'])} at the items needed to detect {d:g} points "
                 f"(job-hours, one card per job; generation only).")
    if p["entries_without_items_needed"]:
        lines.append(f"  {p['entries_without_items_needed']} priced entries have no items-needed figure (no flips "
                     "measured for them) and are left out of the second total.")
    for e in p["entries"]:
        if e.get("thinking"):
            t = e["thinking"]
            lines.append(f"  thinking: {e['family']}/{e['rung']}/{e['kv']} {e['benchmark']} ({e['series']}): "
                         f"{t['thinking_tokens_per_item']:.0f} thinking + {t['answer_tokens_per_item']:.0f} answer "
                         f"tokens an item, {_s(t['s_per_item'])} an item ({t['how']})")
    for u in p["unpriced"]:
        lines.append(f"  not priced: {u['family']}/{u['rung']}/{u['kv']} {u['benchmark']} ({u['series']}): {u['reason']}")
    for n in res["notes"]:
        lines.append(f"Note: {n}")
    return "\n".join(lines).rstrip() + "\n"
