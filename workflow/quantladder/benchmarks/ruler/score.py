"""RULER's scoring (scripts/eval/evaluate.py and scripts/eval/synthetic/constants.py).

- A prediction is stripped and its control characters turned into newlines (postprocess_pred).
- string_match_all (niah, vt, cwe, fwe): the share of the references found in the prediction,
  case-insensitively; string_match_part (qa): 1 if any reference is found. A task's score at a
  length is the mean over its items, in percent.
- The score at a length is the mean over the tasks; the effective length is the longest length up
  to which every score clears the threshold, Llama-2-7B's RULER average at 4K (85.6; RULER README).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

from ...metrics import row

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(pred: str) -> str:
    return _CONTROL.sub("\n", pred.strip()).strip()


def string_match_all(pred: str, refs: list[str]) -> float:
    p = pred.lower()
    return sum(1.0 for r in refs if r.lower() in p) / len(refs) if refs else 0.0


def string_match_part(pred: str, refs: list[str]) -> float:
    p = pred.lower()
    return max((1.0 if r.lower() in p else 0.0) for r in refs) if refs else 0.0


METRICS = {"string_match_all": string_match_all, "string_match_part": string_match_part}


def score_item(item: dict, text: str) -> float:
    """The item's score in [0, 1]."""
    return METRICS[item["metric"]](postprocess(text), item["answers"])


def verdicts(items: list[dict], generations: list[dict]) -> list[dict]:
    """One verdict per generated item (items never generated are left out, the point is then incomplete)."""
    gen = {g["item_id"]: g for g in generations}
    out = []
    for it in items:
        g = gen.get(it["item_id"])
        if g is None:
            continue
        s = score_item(it, g["text"])
        deg = bool(g.get("degenerate"))
        if s >= 1.0:
            err = None
        elif deg:
            err = "degenerate"
        elif not postprocess(g["text"]):
            err = "empty"
        else:
            err = "partial" if s > 0 else "wrong"
        out.append({"item_id": it["item_id"], "correct": s >= 1.0, "score": s, "error_type": err,
                    "subset": it["task"], "n_ctx": it["length"], "degenerate": deg})
    return out


def _mean_se(xs: list[float]) -> tuple[float, float | None]:
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, None
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def effective_length(avg_by_length: dict[int, float], threshold: float) -> int:
    """Longest length L such that every length <= L scores >= threshold (``benchmarks.ruler.threshold``,
    the schema's default Llama-2-7B's score at 4K); 0 if the shortest fails."""
    eff = 0
    for length in sorted(avg_by_length):
        if avg_by_length[length] >= threshold:
            eff = length
        else:
            break
    return eff


def aggregate(verdicts: list[dict], threshold: float) -> tuple[list[dict], dict]:
    """Metric rows from per-item verdicts ({"subset": task, "n_ctx": length, "score": 0..1, "degenerate"})."""
    by_tl: dict[tuple[str, int], list[float]] = defaultdict(list)
    for v in verdicts:
        by_tl[(v["subset"], v["n_ctx"])].append(100.0 * v["score"])
    rows, task_scores = [], defaultdict(dict)
    for (task, length), xs in sorted(by_tl.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        m, se = _mean_se(xs)
        task_scores[length][task] = (m, se, len(xs))
        rows.append(row("score", m, stderr=se, n=len(xs), subset=task, n_ctx=length))
    avg = {}
    for length, per_task in sorted(task_scores.items()):
        ms = [m for m, _, _ in per_task.values()]
        avg[length] = sum(ms) / len(ms)
        ses = [se for _, se, _ in per_task.values()]
        # Tasks are independent samples: the mean's error is sqrt(sum se^2) / k (None if any task has n=1).
        se = math.sqrt(sum(s * s for s in ses)) / len(ses) if all(s is not None for s in ses) else None
        rows.append(row("score_avg", avg[length], stderr=se, n=sum(n for _, _, n in per_task.values()), n_ctx=length))
    summary = {"avg_by_length": avg, "threshold": threshold}
    if avg:
        eff = effective_length(avg, threshold)
        summary["effective_length"] = eff
        rows.append(row("effective_length", eff, n=len(avg)))
    return rows, summary
