"""Flips: items whose verdict changed between the reference rung and another rung.

Generic over per-item verdicts ({"item_id", "correct"}), so every benchmark gets it. Counting
right→wrong and wrong→right apart shows what a net accuracy hides (two rungs with the same
score can disagree on many items).
"""

from __future__ import annotations

import math


def flips(reference: list[dict], other: list[dict]) -> dict:
    ref = {v["item_id"]: bool(v["correct"]) for v in reference}
    oth = {v["item_id"]: bool(v["correct"]) for v in other}
    common = sorted(set(ref) & set(oth))
    n = len(common)
    r2w = sum(1 for i in common if ref[i] and not oth[i])
    w2r = sum(1 for i in common if not ref[i] and oth[i])

    def share(k: int) -> tuple[float, float]:
        if n == 0:
            return float("nan"), float("nan")
        p = k / n
        return 100 * p, 100 * math.sqrt(p * (1 - p) / n)

    out = {"n_items": n, "right_to_wrong": r2w, "wrong_to_right": w2r,
           "missing_in_reference": len(set(oth) - set(ref)), "missing_in_rung": len(set(ref) - set(oth))}
    out["flip_rate_pct"], out["flip_rate_err_pct"] = share(r2w + w2r)
    out["right_to_wrong_pct"], out["right_to_wrong_err_pct"] = share(r2w)
    out["wrong_to_right_pct"], out["wrong_to_right_err_pct"] = share(w2r)
    return out


def metric_rows(f: dict, subset: str | None = None) -> list[dict]:
    from .dataset import metric_row

    n = f["n_items"]
    return [
        metric_row("flip_rate", f["flip_rate_pct"], "%", stderr=f["flip_rate_err_pct"], n=n, subset=subset, higher_is_better=False),
        metric_row("flips_right_to_wrong", f["right_to_wrong_pct"], "%", stderr=f["right_to_wrong_err_pct"], n=n, subset=subset, higher_is_better=False),
        metric_row("flips_wrong_to_right", f["wrong_to_right_pct"], "%", stderr=f["wrong_to_right_err_pct"], n=n, subset=subset, higher_is_better=True),
    ]
