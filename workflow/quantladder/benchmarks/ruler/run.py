"""Generate RULER answers for one point, and score saved generations (separate steps, as the DAG).

Generation: for each length (ascending) the Engine is opened with n_ctx = that length and the
point's KV-cache types; each answer is appended to generations.jsonl as it is produced (fsynced)
with the process's peak RSS so far, and a rerun skips the item ids already there. Greedy decoding;
RULER's tokens to generate per task; the answer prefix is already in the prompt.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

from ... import loops
from ...dataset import metric_row
from ...engine import Engine
from ...errors import DataError
from ...io import append_jsonl, read_jsonl
from . import score as S


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS).

    On a GPU this misses device memory; the KV prediction beside it covers both."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def generate(items: list[dict], model_path: str, settings_for_length, gen_path, *, log=None,
             time_budget_s: float | None = None, run_key: str | None = None) -> dict:
    """Answer every item not yet in gen_path. settings_for_length(n_ctx) -> EngineSettings.

    ``run_key`` names what the answers depend on (items hash, model hash, KV types). Answers left
    by a run with another key (the config or the model changed since) are not resumed from: that
    file is moved aside and the point starts afresh, so item ids never match stale answers.
    Returns {"done": n, "total": n, "complete": bool, "engine": {length: resolved settings}}.
    """
    old = read_jsonl(gen_path)
    if old and any(r.get("run_key") != run_key for r in old):
        stale = Path(gen_path).with_name(f".{Path(gen_path).name}.{int(time.time())}.stale")
        os.replace(gen_path, stale)
        if log:
            log.warning("ruler: %s holds answers of another run (items, model or KV changed); moved to %s",
                        gen_path, stale)
        old = []
    done = {r["item_id"] for r in old}
    by_length: dict[int, list[dict]] = defaultdict(list)
    for it in items:
        by_length[it["length"]].append(it)
    engines, t_start, stopped = {}, time.perf_counter(), False
    for length in sorted(by_length):
        todo = [it for it in by_length[length] if it["item_id"] not in done]
        if not todo:
            continue
        with Engine(model_path, settings_for_length(length)) as eng:
            engines[length] = {k: v for k, v in eng.resolved.items()}
            for it in todo:
                if time_budget_s is not None and time.perf_counter() - t_start > time_budget_s:
                    stopped = True
                    break
                toks = eng.tokenize(it["prompt"], add_bos=not eng._starts_with_bos(it["prompt"]))
                if len(toks) + it["tokens_to_generate"] > eng.n_ctx:
                    # Items are fitted with the reference rung's tokenizer; a rung (a prebuilt file)
                    # whose vocabulary differs cannot answer the same prompts.
                    raise DataError(f"ruler item {it['item_id']}: {len(toks)} prompt tokens + "
                                    f"{it['tokens_to_generate']} exceed n_ctx {eng.n_ctx} for {model_path}: its "
                                    "tokenizer differs from the reference rung's, which made the items")
                g = eng.generate(toks, max_tokens=it["tokens_to_generate"])
                rec = {"item_id": it["item_id"], "run_key": run_key, "task": it["task"], "length": length, "text": g.text,
                       "n_prompt_tokens": g.n_prompt_tokens, "n_gen_tokens": g.n_gen_tokens,
                       "finish_reason": g.finish_reason, "seconds": round(g.seconds, 4),
                       "degenerate": loops.is_degenerate(g.text, g.n_gen_tokens, g.finish_reason),
                       "loop_share": round(loops.repeated_ngram_share(g.text), 4),
                       "peak_rss_bytes": peak_rss_bytes()}
                append_jsonl(gen_path, rec)
                done.add(it["item_id"])
                if log:
                    log.info("ruler %s: %d+%d tokens in %.2f s%s", it["item_id"], g.n_prompt_tokens,
                             g.n_gen_tokens, g.seconds, " (degenerate)" if rec["degenerate"] else "")
        if stopped:
            break
    n_done = sum(1 for it in items if it["item_id"] in done)
    return {"done": n_done, "total": len(items), "complete": n_done == len(items), "engine": engines,
            "stopped_by_budget": stopped}


def verdicts(items: list[dict], generations: list[dict]) -> list[dict]:
    """One verdict per generated item (items never generated are left out, the point is then incomplete)."""
    gen = {g["item_id"]: g for g in generations}
    out = []
    for it in items:
        g = gen.get(it["item_id"])
        if g is None:
            continue
        s = S.score_item(it, g["text"])
        deg = bool(g.get("degenerate"))
        if s >= 1.0:
            err = None
        elif deg:
            err = "degenerate"
        elif not S.postprocess(g["text"]):
            err = "empty"
        else:
            err = "partial" if s > 0 else "wrong"
        out.append({"item_id": it["item_id"], "correct": s >= 1.0, "score": s, "error_type": err,
                    "subset": it["task"], "n_ctx": it["length"], "degenerate": deg})
    return out


def memory_rows(generations: list[dict], kv_info, type_k: str, type_v: str, lengths: list[int]) -> list[dict]:
    """Predicted KV-cache bytes at each length beside the measured peak RSS while at that length."""
    rows = []
    peak = defaultdict(int)
    for g in generations:
        peak[g["length"]] = max(peak[g["length"]], int(g.get("peak_rss_bytes") or 0))
    for length in sorted(lengths):
        if kv_info is not None:
            rows.append(metric_row("kv_cache_predicted_bytes", kv_info.kv_bytes(length, type_k, type_v), "bytes",
                                   n_ctx=length, higher_is_better=False))
        if peak.get(length):
            rows.append(metric_row("peak_rss_bytes", peak[length], "bytes", n_ctx=length, higher_is_better=False))
    return rows


def timing_rows(generations: list[dict]) -> list[dict]:
    by_len = defaultdict(list)
    for g in generations:
        by_len[g["length"]].append(float(g["seconds"]))
    rows = []
    for length, xs in sorted(by_len.items()):
        m, se = S._mean_se(xs)
        rows.append(metric_row("seconds_per_item", m, "s", stderr=se, n=len(xs), n_ctx=length, higher_is_better=False))
    return rows
