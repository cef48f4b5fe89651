"""RULER verdicts from saved generations (generation runs in the package's one loop: each length is
its own context, the point's KV-cache types, greedy, RULER's tokens to generate per task, the answer
prefix already in the prompt)."""

from __future__ import annotations

from . import score as S


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


