"""BFCL v4 function calling through the raw completion path (prompting mode), scored by our AST checker.

Modules: ``data`` (obtain + pin the files, load items), ``prompts`` (BFCL's system prompt through the
GGUF chat template), ``parse`` (decode answers), ``checker`` (BFCL's AST rules), ``score`` (verdicts,
aggregates, metric rows), ``multiturn`` (model-driven calls in the sandbox, state/response checks).

Reference: Patil et al., the Berkeley Function Calling Leaderboard (gorilla.cs.berkeley.edu), data
and rules of bfcl-eval 2026.3.23.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from ... import metrics
from ...metrics import Metric
from ..base import Benchmark, Env, Item
from . import data, prompts, score
from .data import LIVE, MULTI_TURN, NO_ANSWER
from .score import SCORER_VERSION

__all__ = ["SCORER_VERSION", "BFCL", "NON_LIVE_AST", "headline_weights"]

# The leaderboard's "non-live AST" is the four AST groups; irrelevance is reported apart.
NON_LIVE_AST = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple"]
LIVE_AST = [c for c in LIVE if c not in NO_ANSWER]
# 2: multi-turn steps continue their sequence (engine.Request.continues)
PROMPT_VERSION = "bfcl-prompting-2"

metrics.declare(
    Metric("accuracy", "%",
           "BFCL accuracy (AST checker; state + response checks for multi-turn). Subset: a category or BFCL's "
           "aggregate (simple, non_live, live, irrelevance, relevance, multi_turn). The row without a subset is "
           "the headline: the unweighted mean of BFCL's non-live and live AST accuracies, each as BFCL weighs "
           "it (docs/bfcl.md). bfcl_haystack: per category and per length (n_ctx); the row without a subset "
           "at a length is the mean over that length's items", ("bfcl", "bfcl_haystack"), higher_is_better=True,
           stderr="se", headline_for=("bfcl", "bfcl_haystack"), score_for=("bfcl", "bfcl_haystack"),
           paired="items"),
    Metric("parse_failure_rate", "%", "share of answers that do not decode as calls (irrelevance excepted)",
           ("bfcl", "bfcl_haystack"), higher_is_better=False, stderr="se"),
)


def headline_weights(categories_run: dict[str, int]) -> dict[str, float] | None:
    """Per-item weight of each category in the headline (weights of an item sum to the headline as a
    weighted mean of 0/1 verdicts): non_live = mean(simple, multiple, parallel, parallel_multiple) with
    simple = mean of its three languages; live = pooled over the live AST items; headline = mean of the
    two. None when a category they need did not run."""
    if not all(categories_run.get(c) for c in NON_LIVE_AST + LIVE_AST):
        return None
    w = {}
    for c in ("simple_python", "simple_java", "simple_javascript"):
        w[c] = 0.5 * 0.25 / 3 / categories_run[c]
    for c in ("multiple", "parallel", "parallel_multiple"):
        w[c] = 0.5 * 0.25 / categories_run[c]
    n_live = sum(categories_run[c] for c in LIVE_AST)
    for c in LIVE_AST:
        w[c] = 0.5 / n_live
    return w


class BFCL(Benchmark):
    name = "bfcl"
    domain = "function calling"
    description = "BFCL v4 function calling, prompting mode through the raw completion path, AST checker"
    version = PROMPT_VERSION
    scorer_version = SCORER_VERSION
    item_settings = ("source", "categories", "limit", "limits", "seed")
    generation_settings = ("n_ctx", "max_new_tokens", "step_limit")
    scoring_settings = ("sandbox_backend", "sandbox_python", "sandbox_wall_s")

    @property
    def multi_turn(self) -> bool:
        return any(c in MULTI_TURN for c in self.settings["categories"])

    def group(self, which):
        g = super().group(which)
        if which == "generation" and self.multi_turn:
            # multi-turn replies read the results of their calls, which run in the sandbox
            g.update(super().group("scoring"))
        return g

    # -- data ----------------------------------------------------------------------------------
    def fetch_source(self, dest):
        dest = Path(dest)
        return data.materialize(self.settings["source"], dest / "data", dest / "data.json",
                                download_dir=dest / "wheel")

    def build_items(self, source, *, reference_gguf=None, family=None, threads=1, log=None):
        s = self.settings
        raw = data.load_items(source, s["categories"], s["limit"], s["limits"], s["seed"])
        items = []
        for it in raw:
            answer = {"ground_truth": it.pop("ground_truth")} if "ground_truth" in it else {}
            items.append(Item(id=it["id"], subset=it["category"], data=it, answer=answer))
        return items, {"data_version": source["version"], "data_sha256": source["sha256"]}

    # -- generation ----------------------------------------------------------------------------
    # The sandbox (and multiturn, which drives it) is imported inside the methods that use it: the
    # generation host of a single-turn benchmark never loads what runs model-written code.
    def open_env(self, source, stage):
        if not self.multi_turn:
            return Env(source)
        from .multiturn import SandboxExecutor

        s = self.settings
        return Env(source, SandboxExecutor(source["root"], backend=s["sandbox_backend"], python=s["sandbox_python"],
                                           wall_s=s["sandbox_wall_s"]))

    def scoring_setup(self):
        if not self.multi_turn:
            return {}
        from ... import sandbox

        return {"sandbox": sandbox.check_backend(self.settings["sandbox_backend"])}

    def drive(self, item, engine, env):
        s = self.settings
        if item.subset in MULTI_TURN:
            from .multiturn import drive_item

            return (yield from drive_item(engine, env.root, item.data, env.executor, max_tokens=s["max_new_tokens"],
                                          step_limit=s["step_limit"]))
        gen = yield from self.ask(engine, engine.chat_prompt(self.messages(env.root, item.data)), s["max_new_tokens"])
        return gen.record()

    def messages(self, root, data: dict) -> list[dict]:
        """A single-turn item's first messages: BFCL's system prompt, then the item's turn."""
        return prompts.first_messages(root, data)

    # -- scoring -------------------------------------------------------------------------------
    def verdicts(self, items, generations, ctx):
        todo = [{**it.data, **it.answer} for it in items if it.id in generations]
        return score.verdicts(todo, list(generations.values()), executor=ctx.env.executor)

    def no_reply_verdict(self, item, ctx):
        return {"parse_failed": False}  # nothing to parse: failed as an item, not as a parse

    def metric_rows(self, verdicts, items):
        rows = score.metric_rows(verdicts, self.settings["categories"])
        head = headline(verdicts)
        if head is not None:
            rows.append(metrics.row("accuracy", head[0], stderr=head[1], n=head[2]))
        return rows

    def item_weights(self, verdicts) -> dict[str, float] | None:
        """Per-item weights of the headline row (for the paired comparison of a weighted mean)."""
        w = _weights_of(verdicts)
        if w is None:
            return None
        return {v["item_id"]: w[v["subset"]] for v in verdicts if v["subset"] in w}


def _weights_of(verdicts: list[dict]) -> dict[str, float] | None:
    return headline_weights(Counter(v["subset"] for v in verdicts))


def headline(verdicts: list[dict]) -> tuple[float, float, int] | None:
    """The headline accuracy (%), its standard error and n: a weighted mean of the 0/1 verdicts."""
    w = _weights_of(verdicts)
    if w is None:
        return None
    used = [v for v in verdicts if v["subset"] in w]
    value = sum(w[v["subset"]] * bool(v["correct"]) for v in used)
    # categories are independent samples: var = sum over categories of (weight·n)^2 · p(1-p)/n
    var = 0.0
    for c, wc in w.items():
        vs = [v for v in used if v["subset"] == c]
        p = sum(bool(v["correct"]) for v in vs) / len(vs)
        var += (wc * len(vs)) ** 2 * p * (1 - p) / len(vs)
    return 100 * value, 100 * math.sqrt(var), len(used)
