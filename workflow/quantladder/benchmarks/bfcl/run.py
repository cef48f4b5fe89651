"""A point's BFCL verdicts from the saved generations (scoring never generates).

Generation lives in the package's one loop (quantladder.generation) through ``BFCL.drive``; single
items there render BFCL's prompt through the GGUF's chat template, multi-turn items are driven by
``multiturn.drive_item``, whose calls run only in the sandbox.
"""

from __future__ import annotations

from ...errors import ConfigError, DataError
from .data import MULTI_TURN


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
        else:
            v = verdict(it, g["text"])
        out.append({"item_id": it["id"], "subset": it["category"], "degenerate": bool(g.get("degenerate")), **v})
    return out
