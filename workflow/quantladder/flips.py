"""Verdict flips and identical replies between two runs of the same items: the one count of each,
and the reply hash that compares replies across cards.

The aggregate counts them between a point and its reference (and between the reference rung and its
noise-floor run); the paired deltas plan the items a run needs from the same count.
"""

from __future__ import annotations

import hashlib
import math

from . import metrics
from .metrics import TASK, Metric

metrics.declare(
    Metric("flip_rate", "%", "items whose verdict differs from the reference point's (either way)", (TASK,),
           higher_is_better=False, stderr="se", group="flips"),
    Metric("flips_right_to_wrong", "%", "items the reference got right and this point wrong", (TASK,),
           higher_is_better=False, stderr="se", group="flips"),
    Metric("flips_wrong_to_right", "%", "items the reference got wrong and this point right", (TASK,),
           higher_is_better=True, stderr="se", group="flips"),
    Metric("identical_to_reference", "%", "items whose reply is byte-identical to the reference point's", (TASK,),
           higher_is_better=True, stderr="se", group="flips"),
    Metric("noise_flip_rate", "%", "the noise floor: items whose verdict differs between the reference rung "
           "and the same rung generated again at another batch setting", (TASK,), higher_is_better=False,
           stderr="se", group="noise"),
    Metric("noise_identical_share", "%", "the noise floor: items whose reply is byte-identical between those "
           "two runs", (TASK,), higher_is_better=True, stderr="se", group="noise"),
    Metric("batch_invariant", "1", "whether this card's replies do not depend on their batch mates, measured: 1 "
           "when every reply of the noise-floor pair (the reference rung at two batch settings) is byte-identical, "
           "0 when any differs; n: the replies compared (docs/generation.md, batch invariance)", (TASK,),
           higher_is_better=True, group="noise"),
    Metric("generation_hash", "sha256[:52]", "one row per item (subset = item id): the first 52 bits of "
           "sha256(reply), exact in a float64; the cross-card identical-output share compares them", (TASK,),
           per_item=True),
)
HASH_BITS = 52  # a float64 holds integers up to 2**53 exactly


def share(k: int, n: int) -> tuple[float | None, float | None]:
    """k of n in %, with its binomial standard error (None, None for no items)."""
    if n == 0:
        return None, None
    p = k / n
    return 100 * p, 100 * math.sqrt(p * (1 - p) / n)


def flips(reference: list[dict], other: list[dict]) -> dict:
    """Verdict changes between two points over their common items, counted both ways (two rungs with
    the same score can disagree on many items)."""
    ref = {v["item_id"]: bool(v["correct"]) for v in reference}
    oth = {v["item_id"]: bool(v["correct"]) for v in other}
    common = sorted(set(ref) & set(oth))
    n = len(common)
    r2w = sum(1 for i in common if ref[i] and not oth[i])
    w2r = sum(1 for i in common if not ref[i] and oth[i])
    out = {"n_items": n, "right_to_wrong": r2w, "wrong_to_right": w2r,
           "missing_in_reference": len(set(oth) - set(ref)), "missing_in_rung": len(set(ref) - set(oth))}
    out["flip_rate_pct"], out["flip_rate_err_pct"] = share(r2w + w2r, n)
    out["right_to_wrong_pct"], out["right_to_wrong_err_pct"] = share(r2w, n)
    out["wrong_to_right_pct"], out["wrong_to_right_err_pct"] = share(w2r, n)
    return out


def flip_metric_rows(f: dict, subset: str | None = None, noise: bool = False, n_ctx: int | None = None) -> list[dict]:
    n = f["n_items"]
    if not n:
        return []
    if noise:
        return [metrics.row("noise_flip_rate", f["flip_rate_pct"], stderr=f["flip_rate_err_pct"], n=n, subset=subset,
                            n_ctx=n_ctx)]
    return [
        metrics.row("flip_rate", f["flip_rate_pct"], stderr=f["flip_rate_err_pct"], n=n, subset=subset, n_ctx=n_ctx),
        metrics.row("flips_right_to_wrong", f["right_to_wrong_pct"], stderr=f["right_to_wrong_err_pct"], n=n,
                    subset=subset, n_ctx=n_ctx),
        metrics.row("flips_wrong_to_right", f["wrong_to_right_pct"], stderr=f["wrong_to_right_err_pct"], n=n,
                    subset=subset, n_ctx=n_ctx),
    ]


def identical(reference: list[dict], other: list[dict]) -> tuple[int, int]:
    """(byte-identical replies, common items) between two generations files."""
    ref = {g["item_id"]: g.get("text") for g in reference}
    oth = {g["item_id"]: g.get("text") for g in other}
    common = set(ref) & set(oth)
    return sum(1 for i in common if ref[i] == oth[i]), len(common)


def generation_hash_value(text: str) -> float:
    """The `value` of a ``generation_hash`` row: 52 bits of sha256(text), exact in a float64."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return float(int(digest[: HASH_BITS // 4], 16))
