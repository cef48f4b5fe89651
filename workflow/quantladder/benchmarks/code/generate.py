"""Generation for the code suites (GPU-host side). It never executes what the model writes: this
module imports neither the sandbox nor the scorer.

One line per item is appended to generations.jsonl (fsynced) as it is produced; a rerun skips the
items already there, so a killed job resumes where it stopped. Each line carries the spec hash of
the point; lines of another spec (the config changed) are dropped before resuming.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable, Iterable

from ...engine import Generation
from ...io import append_jsonl, atomic_path, read_jsonl
from ...loops import is_degenerate
from . import prompts
from .extract import extract_code

log = logging.getLogger("quantladder.code")


def resume_state(path: str | os.PathLike, spec: str) -> set[str]:
    """Item ids already generated under ``spec``; records of any other spec are removed."""
    path = Path(path)
    recs = read_jsonl(path)
    keep = [r for r in recs if r.get("spec") == spec]
    if len(keep) != len(recs) or (path.exists() and _has_torn_tail(path)):
        with atomic_path(path) as tmp:
            with open(tmp, "w") as f:
                for r in keep:
                    f.write(json.dumps(r, sort_keys=True, default=str) + "\n")
        if len(keep) != len(recs):
            log.info("%s: dropped %d generations of another spec", path, len(recs) - len(keep))
    return {r["item_id"] for r in keep}


def _has_torn_tail(path: Path) -> bool:
    data = path.read_bytes()
    return bool(data) and not data.endswith(b"\n")


def generate_items(engine, items: Iterable, out_path: str | os.PathLike, *, spec: str, max_new_tokens: int = 1280,
                   progress: Callable[[int, int], None] | None = None, budget=None) -> dict:
    """Generate every item not yet in ``out_path``; returns counts.

    ``budget`` (quantladder.budget.Budget) is asked before each item; when the job's time is up it
    raises BudgetReached, and what was generated stays for the rerun to resume from.
    """
    items = list(items)
    done = resume_state(out_path, spec)
    todo = [it for it in items if it.item_id not in done]
    log.info("code generation: %d items, %d already done, %d to go", len(items), len(items) - len(todo), len(todo))

    def render(msgs):
        return engine.chat_prompt(msgs, add_generation_prompt=False)

    for i, item in enumerate(todo):
        if budget is not None:
            budget.check(done=len(items) - len(todo) + i, total=len(items))
        prompt = prompts.chat_prompt(render, item.prompt, prompts.split_of(item))
        try:
            if budget is not None:
                with budget.item():
                    gen = engine.generate(prompt, max_tokens=max_new_tokens, stop=prompts.STOP)
            else:
                gen = engine.generate(prompt, max_tokens=max_new_tokens, stop=prompts.STOP)
        except ValueError as e:  # the prompt does not fit n_ctx: an empty reply, a failed item
            log.warning("%s: %s", item.item_id, e)
            gen = Generation(text="", n_prompt_tokens=0, n_gen_tokens=0, finish_reason="prompt_too_long", seconds=0.0)
        code = extract_code(gen.text, item.entry_point)
        append_jsonl(out_path, {
            "item_id": item.item_id, "task_id": item.task_id, "subset": item.subset, "spec": spec,
            "text": gen.text, "code": code, "n_prompt_tokens": gen.n_prompt_tokens,
            "n_gen_tokens": gen.n_gen_tokens, "finish_reason": gen.finish_reason, "seconds": round(gen.seconds, 4),
            "degenerate": is_degenerate(gen.text, gen.n_gen_tokens, gen.finish_reason),
        })
        if progress:
            progress(i + 1, len(todo))
    return {"n_items": len(items), "n_resumed": len(items) - len(todo), "n_generated": len(todo)}
