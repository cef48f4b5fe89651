"""The one score stage every task benchmark runs through: saved generations -> verdicts -> rows.

It never generates. Per point it
- checks that the generations are the planned ones (an empty or short file is ``incomplete`` with the
  count, never a complete-looking point; a file of other items is an error naming it);
- applies the one prompt-overflow rule (a prompt that did not fit was never decoded: the item fails
  with ``prompt_too_long``) and the one thinking rule (a thinking family's reply that ended inside its
  thinking has no answer: ``thinking_cap``), and hands every other item to the benchmark's
  ``verdicts`` with the reply's answer as its ``text`` (``reasoning.answer_view``: an exam never
  reads a family's thinking; docs/thinking.md), in chunks
  whose verdicts are appended to a store as they come (a killed scoring job resumes), keyed by the
  scoring key and the reply's hash;
- writes the benchmark's own rows plus the figures every task has, under one name each: failed items
  by error type, repetition loops, the generation's cost (items, tokens, seconds, peak memory, the
  predicted KV cache, ``n_parallel``) per context, of every item in the point: summed from the
  replies' own records, so a point made by several jobs (resumed after a budget stop, or served
  wholly from the generation store) counts them all.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from pathlib import Path

from . import metrics, reasoning
from .benchmarks.base import Benchmark, Item, ScoringContext
from .budget import Budget
from .engine import parse_kv
from .errors import DataError
from .io import VERDICT_STORE, VERDICTS, JsonlFile, hash_obj, sha256_file

log = logging.getLogger("quantladder.scoring")

STORE_NAME = ".verdicts.store.jsonl"
CHUNK = 16  # items per call of the benchmark's scorer between store appends
PROMPT_TOO_LONG = "prompt_too_long"


def reply_sha(rec: dict) -> str:
    keep = {k: rec.get(k) for k in ("text", "code", "turns", "finish_reason")}
    return hash_obj(keep)[:16]


class Outcome:
    def __init__(self, verdicts: list[dict], rows: list[dict], status: str | None, reason: str | None, facts: dict):
        self.verdicts, self.rows, self.status, self.reason, self.facts = verdicts, rows, status, reason, facts


def score(bench: Benchmark, items: list[Item], records: list[dict], gen_meta: dict, *, key: str,
          store_dir: str | Path, ctx: ScoringContext, kv_info=None, kv: str = "f16",
          budget: Budget | None = None) -> Outcome:
    by_id = {r["item_id"]: r for r in records}
    planned = {it.id for it in items}
    stray = sorted(set(by_id) - planned)
    if stray:
        raise DataError(f"generations of items that are not in the items file ({len(stray)}, e.g. {stray[:3]}): "
                        "they were made for another item set; rerun the generate rule")
    todo = [it for it in items if it.id in by_id]
    store = JsonlFile(Path(store_dir) / STORE_NAME, VERDICT_STORE)
    have = {(v.get("item_id"), v.get("reply_sha")): v for v in store.repair() if v.get("key") == key}
    verdicts: dict[str, dict] = {}
    pending: list[Item] = []
    for it in todo:
        rec = by_id[it.id]
        old = have.get((it.id, reply_sha(rec)))
        if old is not None:
            verdicts[it.id] = old
        elif not_decoded(rec):
            v = {"item_id": it.id, **bench.no_reply_verdict(it, ctx), "correct": False, "error_type": PROMPT_TOO_LONG,
                 "detail": f"the prompt ({rec.get('n_prompt_tokens')} tokens) does not fit the context "
                           f"({rec.get('n_ctx') or bench.n_ctx(it)} tokens): not decoded"}
            verdicts[it.id] = _stamp(v, it, rec, key)
        elif reasoning.unanswered(rec):
            # the reply ended inside its thinking: no answer to give the exam (docs/thinking.md)
            v = {"item_id": it.id, **bench.no_reply_verdict(it, ctx), "correct": False,
                 "error_type": reasoning.THINKING_CAP, "detail": reasoning.cap_detail(rec)}
            verdicts[it.id] = _stamp(v, it, rec, key)
        else:
            pending.append(it)
    if len(verdicts) < len(todo):
        log.info("%s: scoring %d items (%d already scored)", bench.name, len(pending), len(todo) - len(pending))
    bud = budget or Budget(None, source="none")
    for i in range(0, len(pending), CHUNK):
        bud.check(done=len(verdicts), total=len(todo), what="items scored")
        chunk = pending[i:i + CHUNK]
        with bud.item():
            got = bench.verdicts(chunk, {it.id: reasoning.answer_view(by_id[it.id]) for it in chunk}, ctx)
        by = {v["item_id"]: v for v in got}
        for it in chunk:
            if it.id not in by:
                raise DataError(f"{bench.name}: the scorer returned no verdict for {it.id}")
            v = _stamp(dict(by[it.id]), it, by_id[it.id], key)
            store.append(v)
            verdicts[it.id] = v
    ordered = [verdicts[it.id] for it in todo]
    rows = bench.metric_rows(ordered, items) if ordered else []
    rows += common_rows(ordered, gen_meta, kv_info=kv_info, kv=kv)
    status, reason = completeness(len(items), ordered, gen_meta)
    facts = {"planned": len(items), "generated": len(records), "scored": len(ordered)}
    too_long = [v["item_id"] for v in ordered if v.get("error_type") == PROMPT_TOO_LONG]
    if too_long:  # counted in error_items; named here, where the report shows a point's reason
        facts["prompt_too_long"] = too_long
        reason = "; ".join(r for r in (reason, too_long_note(too_long)) if r)
    return Outcome(ordered, rows, status, reason, facts)


def not_decoded(rec: dict) -> bool:
    """The one prompt-overflow rule's record: the prompt did not fit, nothing was decoded (a
    multi-turn item cut short by a later step has a reply, and its benchmark judges it)."""
    return rec.get("finish_reason") == PROMPT_TOO_LONG and not rec.get("n_gen_tokens")


def too_long_note(ids: list[str], shown: int = 10) -> str:
    """"N items longer than their context (ids ...)": the first ``shown`` ids, then how many more."""
    n = len(ids)
    more = f", and {n - shown} more" if n > shown else ""
    return (f"{n} item{'s' if n != 1 else ''} longer than {'their' if n != 1 else 'its'} context "
            f"(ids {', '.join(map(str, ids[:shown]))}{more})")


def write_verdicts(path: str | Path, verdicts: list[dict]) -> dict:
    """The declared ``verdicts.jsonl``, and what its point's metrics.json records of it (its count and
    sha256: every reader checks both, ``io.VERDICTS``)."""
    JsonlFile(path, VERDICTS).write(verdicts)
    return {VERDICTS.n_key: len(verdicts), VERDICTS.sha_key: sha256_file(path)}


def _stamp(v: dict, item: Item, rec: dict, key: str) -> dict:
    """What every verdict carries besides the benchmark's own fields."""
    v["item_id"] = item.id
    v["subset"] = v.get("subset", item.subset)
    if item.n_ctx is not None:
        v.setdefault("n_ctx", item.n_ctx)
    v["degenerate"] = bool(rec.get("degenerate"))
    v["correct"] = bool(v.get("correct"))
    v["key"] = key
    v["reply_sha"] = reply_sha(rec)
    return v


def completeness(planned: int, verdicts: list[dict], gen_meta: dict) -> tuple[str | None, str | None]:
    """A point is never complete with fewer verdicts than planned items."""
    if planned == 0:
        left_out = gen_meta.get("not_regenerated")
        if left_out:
            return "absent", f"{len(left_out['items'])} item(s) not generated again: {left_out['reason']}"
        return "absent", "the benchmark planned no items for this point (see its items.json)"
    if gen_meta.get("early_stop") and len(verdicts) == gen_meta.get("generated"):
        # a sequential test decided before every item ran: a finished measurement, said so
        return None, f"{len(verdicts)} of {planned} items: {gen_meta['stopped']}"
    if len(verdicts) < planned:
        why = gen_meta.get("stopped") or "the generation stopped early"
        return "incomplete", f"{len(verdicts)} of {planned} items scored ({why})"
    return None, None


def common_rows(verdicts: list[dict], gen_meta: dict, *, kv_info=None, kv: str = "f16") -> list[dict]:
    """The figures every task benchmark has, each under its one registered name."""
    rows: list[dict] = []
    n = len(verdicts)
    if n:
        for err, k in sorted(Counter(v.get("error_type") for v in verdicts if v.get("error_type")).items()):
            rows.append(metrics.row("error_items", k, n=n, subset=str(err)))
        deg = sum(bool(v.get("degenerate")) for v in verdicts)
        rows.append(metrics.row("degenerate_items", deg, n=n))
        rows.append(metrics.row("degenerate_share", 100.0 * deg / n, n=n))
        by_ctx: dict[int, list[dict]] = defaultdict(list)
        for v in verdicts:
            if v.get("n_ctx") is not None:
                by_ctx[int(v["n_ctx"])].append(v)
        if len(by_ctx) > 1:
            for c, vs in sorted(by_ctx.items()):
                d = sum(bool(v.get("degenerate")) for v in vs)
                rows.append(metrics.row("degenerate_items", d, n=len(vs), n_ctx=c))
                rows.append(metrics.row("degenerate_share", 100.0 * d / len(vs), n=len(vs), n_ctx=c))
    # the point's cost per context, summed over its records whichever job made them
    # (quantladder.generation.point_cost); a record stored before records carried their cost leaves
    # the sums it lacks absent, with the count
    for c, g in sorted((gen_meta.get("groups") or {}).items(), key=lambda kv_: int(kv_[0])):
        c = int(c)
        unrecorded = int(g.get("unrecorded") or 0)
        why = (f"{unrecorded} of {g['items']} replies were stored before replies carried their generation cost; "
               "delete the point's .generations.store.jsonl and rerun to measure it") if unrecorded else None

        def cost_row(metric: str, value, **kw) -> dict:
            if value is None:
                return metrics.row(metric, None, n_ctx=c, status="absent", status_reason=why, **kw)
            return metrics.row(metric, value, n_ctx=c, **kw)

        rows.append(metrics.row("generation_items", g["items"], n_ctx=c))
        rows.append(metrics.row("generation_prompt_tokens", g["prompt_tokens"], n_ctx=c))
        if "cached_tokens" in g:
            reused = None if g["cached_tokens"] is None else g["kept_tokens"] + g["cached_tokens"]
            rows.append(cost_row("generation_reused_prompt_tokens", reused))
        rows.append(metrics.row("generation_output_tokens", g["gen_tokens"], n_ctx=c))
        rows.append(cost_row("generation_seconds", None if g["seconds"] is None else round(g["seconds"], 3)))
        if g.get("peak_rss_bytes") or unrecorded:
            rows.append(cost_row("peak_mem_bytes", g.get("peak_rss_bytes"), subset="rss"))
        if kv_info is not None:
            k, v = parse_kv(kv)
            rows.append(metrics.row("kv_bytes_predicted", kv_info.kv_bytes(c, k, v), n_ctx=c))
    return rows
