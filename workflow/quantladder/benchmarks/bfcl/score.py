"""Per-item verdicts and BFCL's aggregates, from saved generations only (scoring never generates).

Aggregates (BFCL v4's leaderboard definitions):
- non_live: unweighted mean of simple, multiple, parallel, parallel_multiple, where simple is the
  unweighted mean of simple_python, simple_java, simple_javascript;
- live: accuracy over all live AST items together (sample-weighted);
- irrelevance (hallucination measure): mean of irrelevance and live_irrelevance; relevance: live_relevance;
- multi_turn: unweighted mean of its four categories.
An aggregate is reported only when every category it needs ran; the leaderboard's overall also
needs the agentic categories (web search, memory), which need outside services, so it is never
reported here: the parts stand as sub-scores.
"""

from __future__ import annotations

import math

from ...errors import ConfigError, DataError
from ...metrics import row
from . import checker, parse
from .data import LIVE, MULTI_TURN, NO_ANSWER
from .prompts import language_of

SCORER_VERSION = "bfcl-ast-3"  # bfcl-ast-3: a malformed multi-turn replay is the item's sandbox_error


def verdict(item: dict, text: str) -> dict:
    """One single-turn item's verdict: correct, BFCL error type, whether the output failed to parse.

    ``refused`` marks an output holding a value BFCL would ``eval`` and this decoder does not (see
    parse.Refused, docs/bfcl.md): for the AST categories it is a decode failure; for (ir)relevance it
    counts as a call, since the text is a well-formed call list whatever its value.
    ``checker_error`` marks an output on which BFCL's checker itself raises (its run stops there):
    the verdict is wrong, with the exception's name as error type.
    """
    cat = item["category"]
    if cat in NO_ANSWER:
        # (Ir)relevance reads the output as Python calls whatever the category's language.
        refused = None
        try:
            decoded = parse.decode(text, "python")
            no_call = checker.has_no_call(decoded)
            parse_failed = False
        except parse.Refused as e:
            no_call, parse_failed, refused = False, False, str(e)
        except parse.DecodeError:
            no_call, parse_failed = True, True
        if "irrelevance" in cat:
            ok = no_call
            err = None if ok else "irrelevance_error:decoder_success"
        else:
            ok = not no_call
            err = None if ok else "relevance_error:decoder_failed"
        # A parse failure is the expected outcome of an irrelevance item, not a failure to follow format.
        out = {"correct": ok, "error_type": err, "parse_failed": parse_failed and "irrelevance" not in cat}
        if refused is not None:
            out.update(refused=True, detail=refused[:500])
        return out
    lang = language_of(cat)
    try:
        decoded = parse.decode(text, lang)
    except parse.DecodeError as e:
        out = {"correct": False, "error_type": "ast_decoder:decoder_failed", "parse_failed": True,
               "detail": str(e)[:500]}
        if isinstance(e, parse.Refused):
            out["refused"] = True
        return out
    if not checker.is_call_list(decoded):
        return {"correct": False, "error_type": "ast_decoder:decoder_wrong_output_format", "parse_failed": True}
    try:
        res = checker.check_calls(item["function"], decoded, item["ground_truth"], cat, lang)
    except checker.CheckerError as e:
        return {"correct": False, "error_type": f"checker_error:{e.kind}", "parse_failed": False,
                "checker_error": True, "detail": str(e)[:500]}
    out = {"correct": bool(res["valid"]), "error_type": None if res["valid"] else res["error_type"],
           "parse_failed": False}
    if not res["valid"]:
        out["detail"] = "; ".join(map(str, res["error"]))[:500]
    return out



def verdicts(items: list[dict], generations: list[dict], *, executor=None) -> list[dict]:
    """Per-item verdict records (verdicts.jsonl), in item order."""
    by_id = {g["item_id"]: g for g in generations}
    missing = [it["id"] for it in items if it["id"] not in by_id]
    if missing:
        raise DataError(f"bfcl: no saved generation for {len(missing)} items (first: {missing[:3]}); "
                        "the generation rule did not finish")
    out = []
    for it in items:
        g = by_id[it["id"]]
        if it["category"] in MULTI_TURN:
            if executor is None:
                raise ConfigError("bfcl multi-turn scoring needs the sandbox executor")
            from . import multiturn  # the sandbox's driver: loaded only where multi-turn items are scored

            v = multiturn.verdict(it, g, executor)
        else:
            v = verdict(it, g["text"])
        out.append({"item_id": it["id"], "subset": it["category"], "degenerate": bool(g.get("degenerate")), **v})
    return out

def _acc(vs: list[dict]) -> tuple[float, float, int]:
    n = len(vs)
    if n == 0:
        return float("nan"), float("nan"), 0
    p = sum(1 for v in vs if v["correct"]) / n
    return 100 * p, 100 * math.sqrt(p * (1 - p) / n), n


def _mean(parts: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    """Unweighted mean of accuracies; its standard error from the parts' (independent samples)."""
    k = len(parts)
    v = sum(p[0] for p in parts) / k
    se = math.sqrt(sum(p[1] ** 2 for p in parts)) / k
    return v, se, sum(p[2] for p in parts)


def metric_rows(verdicts: list[dict], categories: list[str]) -> list[dict]:
    """Per-category accuracy, BFCL's aggregates where complete, and parse failures."""
    by_cat: dict[str, list[dict]] = {c: [] for c in categories}
    for v in verdicts:
        by_cat.setdefault(v["subset"], []).append(v)
    acc = {c: _acc(vs) for c, vs in by_cat.items() if vs}
    rows = [row("accuracy", a[0], stderr=a[1], n=a[2], subset=c) for c, a in acc.items()]

    def have(*cats):
        return all(c in acc for c in cats)

    aggs = {}
    if have("simple_python", "simple_java", "simple_javascript"):
        aggs["simple"] = _mean([acc["simple_python"], acc["simple_java"], acc["simple_javascript"]])
    if "simple" in aggs and have("multiple", "parallel", "parallel_multiple"):
        aggs["non_live"] = _mean([aggs["simple"], acc["multiple"], acc["parallel"], acc["parallel_multiple"]])
    live_ast = [c for c in LIVE if c not in NO_ANSWER]
    if have(*live_ast):
        aggs["live"] = _acc([v for c in live_ast for v in by_cat[c]])
    if have("irrelevance", "live_irrelevance"):
        aggs["irrelevance"] = _mean([acc["irrelevance"], acc["live_irrelevance"]])
    if have("live_relevance"):
        aggs["relevance"] = acc["live_relevance"]
    if have("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"):
        aggs["multi_turn"] = _mean([acc[c] for c in ("multi_turn_base", "multi_turn_miss_func",
                                                     "multi_turn_miss_param", "multi_turn_long_context")])
    for name, a in aggs.items():
        rows.append(row("accuracy", a[0], stderr=a[1], n=a[2], subset=name))

    n = len(verdicts)
    if n:
        pf = sum(1 for v in verdicts if v.get("parse_failed"))
        p = pf / n
        rows.append(row("parse_failure_rate", 100 * p, stderr=100 * math.sqrt(p * (1 - p) / n), n=n))
    return rows
