"""A point's BFCL run: generate per item (appended, resumable), then score from the saved generations.

Generation imports nothing of the scorer: it renders BFCL's prompts through the GGUF's chat template
and greedy-decodes with the shared engine. Multi-turn items also need the sandbox executor, since the
model reads its calls' results; the ground truth never enters that path.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from ...errors import ConfigError, DataError
from ...io import append_jsonl, atomic_path, read_jsonl
from ...loops import is_degenerate
from . import prompts
from .data import MULTI_TURN

log = logging.getLogger("quantladder.bfcl")

DEFAULTS = {"categories": ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
                           "parallel_multiple", "irrelevance", "live_simple", "live_multiple", "live_parallel",
                           "live_parallel_multiple", "live_irrelevance", "live_relevance"],
            "limit": None, "limits": {}, "seed": 0, "n_ctx": 8192, "max_tokens": 512, "step_limit": 20,
            "sandbox_backend": "bubblewrap", "sandbox_python": None, "sandbox_wall_s": 30}


def settings(section: dict | None) -> dict:
    s = {**DEFAULTS, **(section or {})}
    s.pop("enabled", None)
    unknown = set(s["categories"]) - set(DEFAULTS["categories"]) - set(MULTI_TURN)
    if unknown:
        raise ConfigError(f"benchmarks.bfcl.categories: unknown {sorted(unknown)}")
    return s


def generate_single(engine, root, item: dict, max_tokens: int) -> dict:
    messages = prompts.first_messages(root, item)
    prompt = engine.chat_prompt(messages)
    n_tok = len(engine.tokenize(prompt, add_bos=False))
    room = engine.n_ctx - n_tok - 2
    base = {"item_id": item["id"], "category": item["category"]}
    if room < 8:
        # BFCL would send it anyway and get an error back: an answer-less item, counted wrong.
        return {**base, "text": "", "n_prompt_tokens": n_tok, "n_gen_tokens": 0,
                "finish_reason": "context_overflow", "seconds": 0.0, "degenerate": False}
    gen = engine.generate(prompt, max_tokens=min(max_tokens, room))
    return {**base, "text": gen.text, "n_prompt_tokens": gen.n_prompt_tokens, "n_gen_tokens": gen.n_gen_tokens,
            "finish_reason": gen.finish_reason, "seconds": gen.seconds,
            "degenerate": is_degenerate(gen.text, gen.n_gen_tokens, gen.finish_reason)}


def resume_records(out_jsonl: str | Path, spec: str | None) -> list[dict]:
    """The records of ``out_jsonl`` made under ``spec``; records of another spec (a changed config or
    harness) are dropped from the file, so that a resumed run never mixes two settings."""
    recs = read_jsonl(out_jsonl)
    keep = [r for r in recs if r.get("spec") == spec]
    p = Path(out_jsonl)
    text = p.read_text() if p.exists() else ""
    torn = bool(text) and (not text.endswith("\n") or sum(1 for ln in text.splitlines() if ln.strip()) != len(recs))
    if len(keep) != len(recs) or torn:  # a job killed mid-write leaves a torn last line: drop it
        with atomic_path(out_jsonl) as tmp:
            tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
    return keep


def generate(engine, root, items: list[dict], out_jsonl: str | Path, s: dict, *, executor=None,
             deadline: float | None = None, spec: str | None = None) -> dict:
    """Append one record per item not yet in ``out_jsonl``; returns counts (and whether time ran out)."""
    done = {r["item_id"] for r in resume_records(out_jsonl, spec)}
    todo = [it for it in items if it["id"] not in done]
    log.info("bfcl: %d items, %d already generated", len(items), len(items) - len(todo))
    for k, item in enumerate(todo):
        if deadline is not None and time.time() > deadline:
            return {"n_items": len(items), "generated": len(items) - len(todo) + k, "out_of_time": True}
        if item["category"] in MULTI_TURN:
            if executor is None:
                raise ConfigError("bfcl multi-turn categories need the sandbox executor")
            from .multiturn import generate_item

            rec = generate_item(engine, root, item, executor, max_tokens=s["max_tokens"], step_limit=s["step_limit"])
        else:
            rec = generate_single(engine, root, item, s["max_tokens"])
        rec["spec"] = spec
        append_jsonl(out_jsonl, rec)
        log.info("bfcl %s: %d prompt + %d generated tokens, %s, %.1fs", item["id"], rec["n_prompt_tokens"],
                 rec["n_gen_tokens"], rec["finish_reason"], rec["seconds"])
    return {"n_items": len(items), "generated": len(items), "out_of_time": False}


def score(items: list[dict], generations: list[dict], *, executor=None) -> list[dict]:
    """Per-item verdict records (verdicts.jsonl), in item order."""
    from .score import verdict

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
            from .multiturn import verdict as mt_verdict

            v = mt_verdict(it, g, executor)
        elif g.get("finish_reason") == "context_overflow":
            v = {"correct": False, "error_type": "context_overflow", "parse_failed": False}
        else:
            v = verdict(it, g["text"])
        out.append({"item_id": it["id"], "subset": it["category"], "degenerate": bool(g.get("degenerate")), **v})
    return out
