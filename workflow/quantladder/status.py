"""The one status type: what a figure's status says, in one explicit order, combined one way.

From best to worst:
  ok          measured, and its benchmark's anchor gate passed
  unanchored  measured; no anchor could be reproduced on this card (the reason says why)
  incomplete  measured on fewer items than planned (a time cap ran out); the count says how many
  absent      not measurable here (energy on a CPU): no figure, a reason
  failed      the measurement failed
  blocked     not measured: the anchor gate failed on this card (the harness is wrong there)
A point, a benchmark or a table cell that combines several rows shows the worst of them.
"""

from __future__ import annotations

from typing import Iterable

ORDER = ("ok", "unanchored", "incomplete", "absent", "failed", "blocked")
BAD = ("failed", "blocked")  # no usable figure
CAVEAT = ("unanchored", "incomplete")  # a figure, with a caveat the reader must see
_RANK = {s: i for i, s in enumerate(ORDER)}


def check(status: str) -> str:
    if status not in _RANK:
        raise ValueError(f"status {status!r} is not one of {ORDER}")
    return status


def rank(status: str | None) -> int:
    return _RANK[check(status or "ok")]


def worst(statuses: Iterable[str | None]) -> str:
    """The combined status of several rows (``ok`` for none)."""
    out = "ok"
    for s in statuses:
        if rank(s) > rank(out):
            out = s or "ok"
    return out


def from_anchor(anchor: dict | None) -> tuple[str, str | None]:
    """A point's status from its benchmark's anchor-gate outcome (results/<card>/anchors/*.json)."""
    st = (anchor or {}).get("status")
    if st == "failed":
        return "blocked", anchor.get("reason")
    if st == "passed":
        return "ok", None
    return "unanchored", (anchor or {}).get("reason") or "no anchor gate ran for this benchmark"
