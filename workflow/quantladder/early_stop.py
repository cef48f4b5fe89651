"""Stopping a rung's benchmark early, once the paired comparison with its reference is decided.

A rung is compared with the family's reference rung on the same items (the aggregate's reference:
same card, KV type and settings). With ``benchmarks.<name>.early_stop.enabled``, the reference point
runs every item; each other point generates its items in a seeded order fixed before any result is
known, and after every wave the generation loop asks this module whether to go on. Verdicts of the
wave are made on the spot (only benchmarks whose scorer runs no model-written code can do that) and
fed, paired with the reference's, into an anytime-valid sequential test
(``stats.sequential.SequentialPairedTest``: stop with "loss", "gain" or "no loss of >= margin"; the
chance of stopping with a false claim is at most alpha however many looks are taken). The decision,
its rule and the items it rests on are in ``generations.json`` and the point's metrics file; the
point is a finished measurement on fewer items, not an incomplete one.
"""

from __future__ import annotations

import logging

from . import reasoning
from .benchmarks.base import Benchmark, Item, ScoringContext
from .errors import DataError
from .stats.sequential import SequentialPairedTest

log = logging.getLogger("quantladder.early_stop")


def _value(v: dict) -> float:
    return float(v["score"]) if v.get("score") is not None else float(bool(v.get("correct")))


class Stopper:
    """The loop's ``stopper``: called with the records generated so far, in plan order."""

    def __init__(self, bench: Benchmark, items: list[Item], reference_verdicts: list[dict], ctx: ScoringContext):
        es = bench.early_stop
        self.bench, self.ctx = bench, ctx
        self.items = {it.id: it for it in items}
        self.ref = {v["item_id"]: v for v in reference_verdicts}
        missing = [it.id for it in items if it.id not in self.ref]
        if missing:
            raise DataError(f"{bench.name} early stop: the reference point has no verdict for {len(missing)} items "
                            f"(e.g. {missing[:3]}); it must run every item")
        self.test = SequentialPairedTest(alpha=float(es["alpha"]), margin=es.get("margin"))
        self.fed: set[str] = set()

    def __call__(self, records: list[dict]) -> dict | None:
        new = [r for r in records if r["item_id"] not in self.fed]
        if new:
            # as the score stage: no verdict asked for a reply never decoded or one that ended inside
            # its thinking (both fail), and the exam reads a split reply's answer alone
            todo = [r for r in new if not (r.get("finish_reason") == "prompt_too_long" and not r.get("n_gen_tokens"))
                    and not reasoning.unanswered(r)]
            got = {v["item_id"]: v for v in (self.bench.verdicts([self.items[r["item_id"]] for r in todo],
                                                                 {r["item_id"]: reasoning.answer_view(r) for r in todo},
                                                                 self.ctx)
                                             if todo else [])}
            for r in new:  # in plan order: the test's items arrive in the order fixed in advance
                v = got.get(r["item_id"], {"correct": False})
                self.test.update(_value(self.ref[r["item_id"]]), _value(v))
                self.fed.add(r["item_id"])
        d = self.test.decide()
        if not d.stop:
            return None
        log.info("%s: stop early with %r at n = %d (rung − reference %.1f points; %s)", self.bench.name, d.state,
                 d.n, d.estimate, d.rule)
        return d.to_dict()
